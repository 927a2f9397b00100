package ipoib_test

import (
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ipoib"
	"github.com/rbridge/rbridge/roce"
)

// TestDatagramMTU: IPOIB_UD_MTU(ib_mtu) = ib_mtu - IPOIB_ENCAP_LEN
// (drivers/infiniband/ulp/ipoib/ipoib.h).
func TestDatagramMTU(t *testing.T) {
	for ib, want := range map[roce.MTU]int{
		roce.MTU256: 252, roce.MTU512: 508, roce.MTU1024: 1020,
		roce.MTU2048: 2044, roce.MTU4096: 4092,
		0: 0, 6: 0,
	} {
		if got := ipoib.DatagramMTU(ib); got != want {
			t.Errorf("DatagramMTU(%v) = %d, want %d", ib, got, want)
		}
	}
}

// TestConnectedMTU: IPOIB_CM_MTU is 0x10000 - 0x10; with an SRQ of fewer
// than IPOIB_CM_RX_SG (16) entries, ipoib_cm_dev_init takes
// max_srq_sge * PAGE_SIZE - 0x10.
func TestConnectedMTU(t *testing.T) {
	if ipoib.ConnectedMaxMTU != 65520 {
		t.Errorf("ConnectedMaxMTU = %d, want 65520", ipoib.ConnectedMaxMTU)
	}
	for sge, want := range map[int]int{0: 65520, 16: 65520, 32: 65520, 15: 15*4096 - 16, 1: 4080} {
		if got := ipoib.ConnectedMTU(sge); got != want {
			t.Errorf("ConnectedMTU(%d) = %d, want %d", sge, got, want)
		}
	}
	if ipoib.MinMTU != 72 {
		t.Errorf("MinMTU = %d, want ETH_MIN_MTU + 4 = 72", ipoib.MinMTU)
	}
}

func TestParseMode(t *testing.T) {
	for s, want := range map[string]ipoib.Mode{"datagram\n": ipoib.ModeDatagram, "connected\n": ipoib.ModeConnected, "connected": ipoib.ModeConnected} {
		if m, err := ipoib.ParseMode(s); err != nil || m != want || m.String() != want.String() {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", s, m, err, want)
		}
	}
	for _, bad := range []string{"", "Datagram", "ud"} {
		if m, err := ipoib.ParseMode(bad); !errors.Is(err, ipoib.ErrBadText) || m != ipoib.ModeUnknown {
			t.Errorf("ParseMode(%q) = %v, %v; want unknown, ErrBadText", bad, m, err)
		}
	}
	if s := ipoib.ModeUnknown.String(); s != "unknown" {
		t.Errorf("ModeUnknown = %q", s)
	}
}
