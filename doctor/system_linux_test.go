//go:build linux

package doctor

import (
	"errors"
	"syscall"
	"testing"
)

// TestHostSystem asks this host's kernel: lo has no DCB operations, and an
// interface that does not exist is named as such.
func TestHostSystem(t *testing.T) {
	s := hostSystem{}
	if _, err := s.DCB("lo"); !errors.Is(err, ErrNotExposed) {
		t.Errorf("DCB(lo) = %v, want ErrNotExposed", err)
	}
	if _, err := s.DCB("rbnosuch0"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("DCB(rbnosuch0) = %v, want ENODEV", err)
	}
	if _, err := s.Driver("rbnosuch0"); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("Driver(rbnosuch0) = %v, want ENODEV", err)
	}
}
