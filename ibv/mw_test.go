package ibv_test

import (
	"encoding/json"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

func TestMWEnumStrings(t *testing.T) {
	for _, tc := range []struct {
		got  interface{ String() string }
		want string
	}{
		{ibv.MWType1, "type 1"},
		{ibv.MWType2, "type 2"},
		{ibv.MWType(3), "MWType(3)"},
		{ibv.OpBindMW, "BIND_MW"},
		{ibv.OpLocalInv, "LOCAL_INV"},
		{ibv.WCBindMW, "BIND_MW"},
		{ibv.WCLocalInv, "LOCAL_INV"},
		{ibv.WCMWBindErr, "memory management operation error"},
		{ibv.AccessLocalWrite | ibv.AccessMWBind, "LOCAL_WRITE|MW_BIND"},
		{ibv.DeviceMemWindow | ibv.DeviceMemWindowType2B, "MEM_WINDOW|MEM_WINDOW_TYPE_2B"},
		{ibv.DeviceCap(1 << 15), "0x8000"}, // a gap in the enum
		{ibv.DeviceCap(0), "0"},
	} {
		if s := tc.got.String(); s != tc.want {
			t.Errorf("%T(%v).String() = %q, want %q", tc.got, tc.got, s, tc.want)
		}
	}
}

// What rxe and siw report (measured in the guest, TestGuestMWCaps) and the
// corner cases: flags without windows, windows without flags.
func TestDeviceAttrMW(t *testing.T) {
	rxeFlags := ibv.DeviceBadPKeyCntr | ibv.DeviceBadQKeyCntr | ibv.DeviceAutoPathMig | ibv.DeviceChangePhyPort |
		ibv.DeviceUDAVPortEnforce | ibv.DevicePortActiveEvent | ibv.DeviceSysImageGUID | ibv.DeviceRCRNRNAKGen |
		ibv.DeviceSRQResize | ibv.DeviceMemMgtExtensions | ibv.DeviceMemWindow | ibv.DeviceMemWindowType2B
	for _, tc := range []struct {
		name         string
		attr         ibv.DeviceAttr
		type1, type2 bool
	}{
		{"rxe", ibv.DeviceAttr{CapFlags: rxeFlags, MaxMW: 0x10000}, true, true},
		{"siw", ibv.DeviceAttr{CapFlags: ibv.DeviceMemMgtExtensions}, false, false},
		{"type 2A only", ibv.DeviceAttr{CapFlags: ibv.DeviceMemWindowType2A, MaxMW: 8}, false, true},
		{"flags but max_mw 0", ibv.DeviceAttr{CapFlags: ibv.DeviceMemWindow | ibv.DeviceMemWindowType2B}, false, false},
		{"max_mw but no flag", ibv.DeviceAttr{MaxMW: 8}, false, false},
	} {
		if t1, t2 := tc.attr.MWType1(), tc.attr.MWType2(); t1 != tc.type1 || t2 != tc.type2 {
			t.Errorf("%s: MWType1, MWType2 = %v, %v; want %v, %v", tc.name, t1, t2, tc.type1, tc.type2)
		}
	}
	b, err := json.Marshal(ibv.DeviceAttr{CapFlags: ibv.DeviceMemWindowType2B, MaxMW: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"device_cap_flags":"MEM_WINDOW_TYPE_2B"`, `"max_mw":4`} {
		if !contains(string(b), want) {
			t.Errorf("DeviceAttr JSON %s lacks %s", b, want)
		}
	}
}
