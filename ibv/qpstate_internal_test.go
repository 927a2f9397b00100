package ibv

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The masks each transition sends, per QP type: what ibv_rc_pingpong and
// ibv_ud_pingpong pass to ibv_modify_qp.
func TestTransitionMasks(t *testing.T) {
	ah := AHAttr{IsGlobal: true, Port: 1, GRH: GRH{SGIDIndex: 1, HopLimit: 64}}
	for _, tc := range []struct {
		name     string
		attr     QPAttr
		mask     QPAttrMask
		wantAttr QPAttr
		wantMask QPAttrMask
	}{
		{name: "RC init", wantMask: QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrAccessFlags,
			wantAttr: QPAttr{State: QPStateInit, Port: 1, Access: AccessAll}},
		{name: "UD init", wantMask: QPAttrState | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey,
			wantAttr: QPAttr{State: QPStateInit, Port: 1, QKey: 0x11111111}},
		{name: "RC rtr", wantMask: QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN | QPAttrMaxDestRDAtomic | QPAttrMinRNRTimer,
			wantAttr: QPAttr{State: QPStateRTR, PathMTU: MTU1024, DestQPN: 17, RQPSN: 0x345678, MaxDestRdAtomic: 1, MinRNRTimer: 12, AH: ah}},
		{name: "UD rtr", wantMask: QPAttrState, wantAttr: QPAttr{State: QPStateRTR}},
		{name: "RC rts", wantMask: QPAttrState | QPAttrSQPSN | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRDAtomic,
			wantAttr: QPAttr{State: QPStateRTS, SQPSN: 0xabcdef, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4}},
		{name: "UD rts", wantMask: QPAttrState | QPAttrSQPSN, wantAttr: QPAttr{State: QPStateRTS, SQPSN: 0xabcdef}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a QPAttr
			var m QPAttrMask
			switch tc.name {
			case "RC init":
				a, m = initAttr(QPTypeRC, InitParams{Port: 1, Access: AccessAll, QKey: 5})
			case "UD init":
				a, m = initAttr(QPTypeUD, InitParams{Port: 1, Access: AccessAll, QKey: 0x11111111})
			case "RC rtr":
				// PSN wraps at 24 bits; MTU 0 means the safe default.
				a, m = rtrAttr(QPTypeRC, RTRParams{DestQPN: 17, RQPSN: 0x12345678, AH: ah})
			case "UD rtr":
				a, m = rtrAttr(QPTypeUD, RTRParams{DestQPN: 17})
			case "RC rts":
				a, m = rtsAttr(QPTypeRC, RTSParams{SQPSN: 0xffabcdef, MaxRdAtomic: 4})
			case "UD rts":
				a, m = rtsAttr(QPTypeUD, RTSParams{SQPSN: 0xabcdef, Timeout: 3})
			}
			if m != tc.wantMask {
				t.Errorf("mask %v, want %v", m, tc.wantMask)
			}
			if diff := cmp.Diff(tc.wantAttr, a); diff != "" {
				t.Errorf("attr (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQPOptionsCheck(t *testing.T) {
	cq := &CQ{}
	for _, tc := range []struct {
		name string
		o    QPOptions
		ok   bool
	}{
		{"rc", QPOptions{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, true},
		{"no cq", QPOptions{Type: QPTypeRC, SendCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, false},
		{"bad type", QPOptions{Type: 9, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1, MaxRecvWR: 1}}, false},
		{"no recv", QPOptions{Type: QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: QPCap{MaxSendWR: 1}}, false},
		{"srq", QPOptions{Type: QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: &SRQ{}, Cap: QPCap{MaxSendWR: 1}}, true},
	} {
		o := tc.o
		if err := o.check(); (err == nil) != tc.ok {
			t.Errorf("%s: check() = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if tc.ok && o.Cap.MaxSendSGE != 1 {
			t.Errorf("%s: MaxSendSGE default %d, want 1", tc.name, o.Cap.MaxSendSGE)
		}
	}
}
