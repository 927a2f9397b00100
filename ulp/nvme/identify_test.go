package nvme_test

import (
	"testing"

	"github.com/rbridge/rbridge/ulp/nvme"
)

// TestClampMDTS: a controller's largest transfer is bounded by the
// gateway's largest staging buffer, in the controller's own page units;
// a limit already within it, or one MDTS cannot say, is left alone.
func TestClampMDTS(t *testing.T) {
	for _, tc := range []struct {
		mdts    uint8
		shift   uint
		max     int
		want    uint8
		changed bool
	}{
		{0, 12, 1 << 20, 8, true},      // no limit: 2^8 4 KiB pages, 1 MiB
		{10, 12, 1 << 20, 8, true},     // 4 MiB
		{8, 12, 1 << 20, 8, false},     // the Linux target's, 1 MiB
		{5, 12, 1 << 20, 5, false},     // SPDK's 128 KiB
		{0, 16, 1 << 20, 4, true},      // 64 KiB pages
		{0, 12, 1<<20 + 4096, 8, true}, // not a power of two: rounded down
		{0, 12, 3 << 20, 9, true},      // 3 MiB: 2 MiB
		{0, 12, 4096, 0, false},        // one page: MDTS cannot say it
		{7, 12, 0, 7, false},           // no bound
		{0, 70, 1 << 20, 0, false},     // a page shift no CAP gives
	} {
		got, changed := nvme.ClampMDTS(tc.mdts, tc.shift, tc.max)
		if got != tc.want || changed != tc.changed {
			t.Errorf("ClampMDTS(%d, %d, %d) = %d, %v; want %d, %v", tc.mdts, tc.shift, tc.max, got, changed, tc.want, tc.changed)
		}
	}
	if s := nvme.CAPMinPageShift(0x0000_00ff_0f01_ffff | 3<<48); s != 15 {
		t.Errorf("CAPMinPageShift with MPSMIN 3: %d, want 15", s)
	}
}
