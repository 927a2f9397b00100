package roce_test

import (
	"testing"

	"github.com/rbridge/rbridge/roce"
)

func TestPSN(t *testing.T) {
	const max = roce.PSN(roce.PSNMask)
	if got := max.Next(); got != 0 {
		t.Errorf("0xffffff.Next() = %#x, want 0", got)
	}
	if got := max.Add(5); got != 4 {
		t.Errorf("0xffffff.Add(5) = %#x, want 4", got)
	}
	if got := roce.PSN(2).Add(-5); got != max-2 {
		t.Errorf("2.Add(-5) = %#x, want 0xfffffd", got)
	}
	for _, tc := range []struct {
		a, b roce.PSN
		d    int32
	}{
		{5, 3, 2}, {3, 5, -2}, {0, max, 1}, {max, 0, -1}, {0x10, 0xfffff0, 0x20},
		{0x800000, 0, -0x800000}, {0x7fffff, 0, 0x7fffff},
	} {
		if got := tc.a.Sub(tc.b); got != tc.d {
			t.Errorf("%#x.Sub(%#x) = %d, want %d", tc.a, tc.b, got, tc.d)
		}
		if got := tc.a.Before(tc.b); got != (tc.d < 0) {
			t.Errorf("%#x.Before(%#x) = %v", tc.a, tc.b, got)
		}
	}
	for _, tc := range []struct {
		p, start roce.PSN
		n        uint32
		in       bool
	}{
		{5, 5, 1, true}, {6, 5, 1, false}, {4, 5, 10, false}, {14, 5, 10, true}, {15, 5, 10, false},
		{2, max - 2, 8, true}, {max, max - 2, 8, true}, {max - 3, max - 2, 8, false}, {6, max - 2, 8, false},
		{0, 0, 0, false},
	} {
		if got := tc.p.InWindow(tc.start, tc.n); got != tc.in {
			t.Errorf("%#x.InWindow(%#x, %d) = %v, want %v", tc.p, tc.start, tc.n, got, tc.in)
		}
	}
}

func TestSourcePort(t *testing.T) {
	// rdma_calc_flow_label(0x11, 0x12) = 0x11*0x12 = 0x132 (no high bits to
	// fold); rdma_flow_label_to_udp_sport(0x132) = 0xc000 | 0x132.
	if got := roce.FlowLabel(0x11, 0x12); got != 0x132 {
		t.Errorf("FlowLabel(0x11, 0x12) = %#x, want 0x132", got)
	}
	if got := roce.SourcePort(0, 0x11, 0x12); got != 0xc132 {
		t.Errorf("SourcePort(0, 0x11, 0x12) = %#x, want 0xc132", got)
	}
	// Folding: v = 0xffffff*0xffffff = 0xfffffe000001; v ^= v>>20
	// (0xfffffff) = 0xfffff1fffffe... computed step by step below.
	v := uint64(0xffffff) * 0xffffff
	v ^= v >> 20
	v ^= v >> 40
	if got := roce.FlowLabel(0xffffff, 0xffffff); got != uint32(v&0xfffff) {
		t.Errorf("FlowLabel(max, max) = %#x, want %#x", got, v&0xfffff)
	}
	// The flow label's top six bits fold into the low fourteen.
	if got := roce.SourcePortFromFlowLabel(0xfc000); got != 0xc03f {
		t.Errorf("SourcePortFromFlowLabel(0xfc000) = %#x, want 0xc03f", got)
	}
	if got := roce.SourcePort(0x3fff, 1, 2); got != 0xffff {
		t.Errorf("SourcePort(0x3fff, ...) = %#x, want 0xffff (flow label wins)", got)
	}
	if roce.FlowLabel(3, 7) != roce.FlowLabel(7, 3) {
		t.Errorf("FlowLabel is not symmetric")
	}
}
