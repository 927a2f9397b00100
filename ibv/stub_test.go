//go:build !linux || !cgo || noibverbs

package ibv_test

import (
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// A build without the binding compiles and says why nothing works.
func TestStubNotSupported(t *testing.T) {
	if _, err := ibv.OpenDevice("rxe0"); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("OpenDevice: %v, want ErrNotSupported", err)
	}
	if _, err := ibv.QueryDevices(); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("QueryDevices: %v, want ErrNotSupported", err)
	}
	if _, err := ibv.NewEventChannel(); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("NewEventChannel: %v, want ErrNotSupported", err)
	}
	_, err := ibv.DeviceNames()
	if err == nil || !contains(err.Error(), "without RDMA support") {
		t.Errorf("DeviceNames: %v, want a plain reason", err)
	}
}
