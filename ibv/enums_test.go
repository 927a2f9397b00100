package ibv_test

import (
	"encoding/json"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

func TestEnumStrings(t *testing.T) {
	for _, tc := range []struct {
		got  interface{ String() string }
		want string
	}{
		{ibv.AccessAll, "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"},
		{ibv.Access(0), "0"},
		{ibv.Access(1 << 20), "0x100000"},
		{ibv.SendSignaled | ibv.SendInline, "SIGNALED|INLINE"},
		{ibv.QPAttrState | ibv.QPAttrAV | ibv.QPAttrDestQPN, "STATE|AV|DEST_QPN"},
		{ibv.QPStateRTS, "RTS"},
		{ibv.QPState(9), "QPState(9)"},
		{ibv.QPTypeUD, "UD"},
		{ibv.OpWriteWithImm, "RDMA_WRITE_WITH_IMM"},
		{ibv.WCRemAccessErr, "remote access error"},
		{ibv.WCWRFlushErr, "Work Request Flushed Error"},
		{ibv.WCRecvRDMAWithImm, "RECV_RDMA_WITH_IMM"},
		{ibv.WCFetchAdd, "FETCH_ADD"},
		{ibv.CMEstablished, "RDMA_CM_EVENT_ESTABLISHED"},
		{ibv.EventQPFatal, "local work queue catastrophic error"},
		{ibv.PortActive, "ACTIVE"},
		{ibv.LinkLayerEthernet, "Ethernet"},
		{ibv.TransportIWARP, "iWARP"},
		{ibv.Width(2), "4X"},
		{ibv.Speed(32), "EDR (25.78125 Gbps)"},
		{ibv.PhysState(5), "LINK_UP"},
	} {
		if s := tc.got.String(); s != tc.want {
			t.Errorf("%T(%v).String() = %q, want %q", tc.got, tc.got, s, tc.want)
		}
	}
}

func TestPortRate(t *testing.T) {
	p := ibv.PortInfo{Speed: 32, Width: 2} // EDR 4X
	if r := p.Rate(); r != 103.125 {
		t.Errorf("EDR 4X rate = %v, want 103.125", r)
	}
	b, err := json.Marshal(ibv.PortInfo{ActiveMTU: ibv.MTU1024, State: ibv.PortActive, LinkLayer: ibv.LinkLayerEthernet})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"active_mtu":1024`, `"state":"ACTIVE"`, `"link_layer":"Ethernet"`, `"gids":null`} {
		if !contains(string(b), want) {
			t.Errorf("PortInfo JSON %s lacks %s", b, want)
		}
	}
}

func TestWorkCompletionErr(t *testing.T) {
	ok := ibv.WorkCompletion{Status: ibv.WCSuccess}
	if ok.Err() != nil {
		t.Errorf("success completion: Err() = %v", ok.Err())
	}
	bad := ibv.WorkCompletion{ID: 7, QPN: 17, Status: ibv.WCRemAccessErr, VendorErr: 0x88}
	var ce *ibv.CompletionError
	if err := bad.Err(); err == nil || !asCompletion(err, &ce) || ce.Status != ibv.WCRemAccessErr {
		t.Fatalf("bad completion: Err() = %v", err)
	}
	if want := "completion of wr 7 on qp 17: remote access error (vendor error 0x88)"; bad.Err().Error() != want {
		t.Errorf("Err() = %q, want %q", bad.Err(), want)
	}
}
