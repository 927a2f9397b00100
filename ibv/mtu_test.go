package ibv_test

import (
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

func TestPathMTU(t *testing.T) {
	for _, tc := range []struct {
		local, remote, want ibv.MTU
	}{
		{ibv.MTU4096, ibv.MTU1024, ibv.MTU1024},
		{ibv.MTU1024, ibv.MTU4096, ibv.MTU1024},
		{ibv.MTU2048, ibv.MTU2048, ibv.MTU2048},
		{ibv.MTU256, ibv.MTU4096, ibv.MTU256},
		{0, ibv.MTU2048, ibv.MTU2048},
		{ibv.MTU4096, 0, ibv.MTU4096},
		{0, 0, ibv.MTU1024},
		{9, ibv.MTU512, ibv.MTU512},
	} {
		if got := ibv.PathMTU(tc.local, tc.remote); got != tc.want {
			t.Errorf("PathMTU(%v, %v) = %v, want %v", tc.local, tc.remote, got, tc.want)
		}
	}
}

func TestMTUEncoding(t *testing.T) {
	for _, tc := range []struct {
		m     ibv.MTU
		bytes int
		str   string
	}{
		{ibv.MTU256, 256, "256"}, {ibv.MTU512, 512, "512"}, {ibv.MTU1024, 1024, "1024"},
		{ibv.MTU2048, 2048, "2048"}, {ibv.MTU4096, 4096, "4096"}, {0, 0, "MTU(0)"}, {6, 0, "MTU(6)"},
	} {
		if tc.m.Bytes() != tc.bytes || tc.m.String() != tc.str {
			t.Errorf("MTU %d: Bytes %d String %q, want %d %q", uint8(tc.m), tc.m.Bytes(), tc.m, tc.bytes, tc.str)
		}
		if tc.bytes != 0 && ibv.MTUFromBytes(tc.bytes) != tc.m {
			t.Errorf("MTUFromBytes(%d) = %v, want %v", tc.bytes, ibv.MTUFromBytes(tc.bytes), tc.m)
		}
	}
	for _, tc := range []struct {
		ipMTU int
		want  ibv.MTU
	}{
		{1500, ibv.MTU1024}, {9000, ibv.MTU4096}, {4200, ibv.MTU4096}, {4000, ibv.MTU2048},
		{1100, ibv.MTU512}, {576, ibv.MTU256}, {300, 0},
	} {
		if got := ibv.MTUForNetdev(tc.ipMTU); got != tc.want {
			t.Errorf("MTUForNetdev(%d) = %v, want %v", tc.ipMTU, got, tc.want)
		}
	}
}
