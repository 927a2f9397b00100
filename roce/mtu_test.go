package roce_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/rbridge/rbridge/roce"
)

func TestMTU(t *testing.T) {
	for _, tc := range []struct {
		m     roce.MTU
		bytes int
		str   string
	}{
		{roce.MTU256, 256, "256"}, {roce.MTU512, 512, "512"}, {roce.MTU1024, 1024, "1024"},
		{roce.MTU2048, 2048, "2048"}, {roce.MTU4096, 4096, "4096"}, {0, 0, "MTU(0)"}, {6, 0, "MTU(6)"},
	} {
		if tc.m.Bytes() != tc.bytes || tc.m.String() != tc.str || tc.m.Valid() != (tc.bytes != 0) {
			t.Errorf("MTU %d: Bytes %d String %q Valid %v, want %d %q", uint8(tc.m), tc.m.Bytes(), tc.m, tc.m.Valid(), tc.bytes, tc.str)
		}
		if j, err := json.Marshal(tc.m); err != nil || string(j) != strconv.Itoa(tc.bytes) {
			t.Errorf("MTU %d as JSON: %s, %v; want %d", uint8(tc.m), j, err, tc.bytes)
		}
	}
	for n, want := range map[int]roce.MTU{
		0: 0, 100: 0, 255: 0, 256: roce.MTU256, 511: roce.MTU256, 1500: roce.MTU1024,
		4096: roce.MTU4096, 9000: roce.MTU4096,
	} {
		if got := roce.MTUFromBytes(n); got != want {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", n, got, want)
		}
	}
}
