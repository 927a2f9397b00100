//go:build !linux || !cgo || noibverbs

package ibv_test

import (
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// Memory windows and the capability query need the binding too.
func TestStubMW(t *testing.T) {
	var pd ibv.PD
	if _, err := pd.AllocMW(ibv.MWType2); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("AllocMW: %v, want ErrNotSupported", err)
	}
	var d ibv.Device
	if _, err := d.Attr(); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("Attr: %v, want ErrNotSupported", err)
	}
	var mw ibv.MW
	if err := mw.BindCompleted(ibv.WCSuccess); !errors.Is(err, ibv.ErrNotSupported) {
		t.Errorf("BindCompleted: %v, want ErrNotSupported", err)
	}
	if err := mw.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
