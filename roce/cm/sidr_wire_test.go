package cm_test

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce/cm"
)

// sampleSIDRREQ is a SIDR_REQ as rdma_cm sends it for udaddy's default
// port: the UDP port space's service ID, the default P_Key, and the IP CM
// header at the start of the private data.
func sampleSIDRREQ() cm.SIDRREQFields {
	pd := pdata(cm.SIDRREQPrivateDataLen, 0x30)
	cm.IPCMHeader(pd).Encode(&cm.IPCMHeaderFields{IPVersion: 4, SrcPort: 40001,
		Src: netip.MustParseAddr("198.18.1.2"), Dst: netip.MustParseAddr("198.18.1.3")})
	return cm.SIDRREQFields{RequestID: 0x8badf00d, PKey: 0xffff, ServiceID: cm.ServiceID(cm.PortSpaceUDP, 7174), PrivateData: pd}
}

func sampleSIDRREP() cm.SIDRREPFields {
	return cm.SIDRREPFields{RequestID: 0x8badf00d, Status: cm.SIDRSuccess, InfoLen: 72, VendorID: 0x02c9ab,
		QPN: 0xabcdef, ServiceID: cm.ServiceID(cm.PortSpaceUDP, 7174), QKey: cm.RDMAUDPQKey,
		Info: pdata(cm.SIDRREPInfoLen, 0x40), PrivateData: pdata(cm.SIDRREPPrivateDataLen, 0x50)}
}

func TestSIDRRoundTrip(t *testing.T) {
	t.Run("SIDR_REQ", func(t *testing.T) {
		for _, want := range []cm.SIDRREQFields{sampleSIDRREQ(), {PrivateData: make([]byte, cm.SIDRREQPrivateDataLen)}} {
			b := filled(cm.SIDRREQLen)
			cm.SIDRREQ(b).Encode(&want)
			r, n, err := cm.ParseSIDRREQ(b)
			if err != nil || n != cm.SIDRREQLen || !r.IsValid() {
				t.Fatalf("ParseSIDRREQ = _, %d, %v", n, err)
			}
			if diff := cmp.Diff(want, r.Fields()); diff != "" {
				t.Errorf("SIDR_REQ round trip (-want +got):\n%s", diff)
			}
			if b[6] != 0 || b[7] != 0 {
				t.Errorf("reserved SIDR_REQ bytes 6-7 written: %x", b[6:8])
			}
		}
	})
	t.Run("SIDR_REP", func(t *testing.T) {
		for _, want := range []cm.SIDRREPFields{sampleSIDRREP(),
			{Status: cm.SIDRReject, Info: make([]byte, cm.SIDRREPInfoLen), PrivateData: make([]byte, cm.SIDRREPPrivateDataLen)}} {
			b := filled(cm.SIDRREPLen)
			cm.SIDRREP(b).Encode(&want)
			r, n, err := cm.ParseSIDRREP(b)
			if err != nil || n != cm.SIDRREPLen || !r.IsValid() {
				t.Fatalf("ParseSIDRREP = _, %d, %v", n, err)
			}
			if diff := cmp.Diff(want, r.Fields()); diff != "" {
				t.Errorf("SIDR_REP round trip (-want +got):\n%s", diff)
			}
		}
	})
}

// TestSIDRLayout pins the fields to Linux's ibta_vol1_c12.h offsets by
// hand-written bytes.
func TestSIDRLayout(t *testing.T) {
	req := make([]byte, cm.SIDRREQLen)
	cm.SIDRREQ(req).Encode(&cm.SIDRREQFields{RequestID: 0x01020304, PKey: 0x8001, ServiceID: 0x0000000001111c06,
		PrivateData: []byte{0xaa, 0xbb}})
	wantREQ := []byte{1, 2, 3, 4, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0xaa, 0xbb, 0}
	if got := req[:len(wantREQ)]; !bytes.Equal(got, wantREQ) {
		t.Errorf("SIDR_REQ starts % x, want % x", got, wantREQ)
	}
	rep := make([]byte, cm.SIDRREPLen)
	cm.SIDRREP(rep).Encode(&cm.SIDRREPFields{RequestID: 0x01020304, Status: cm.SIDRNoQP, InfoLen: 5, VendorID: 0x123456,
		QPN: 0xabcdef, ServiceID: 0x0000000001111c06, QKey: 0x01234567, Info: []byte{0xcc}, PrivateData: []byte{0xdd}})
	wantREP := []byte{1, 2, 3, 4, 3, 5, 0x12, 0x34, 0xab, 0xcd, 0xef, 0x56,
		0, 0, 0, 0, 0x01, 0x11, 0x1c, 0x06, 0x01, 0x23, 0x45, 0x67, 0xcc}
	if got := rep[:len(wantREP)]; !bytes.Equal(got, wantREP) {
		t.Errorf("SIDR_REP starts % x, want % x", got, wantREP)
	}
	if rep[96] != 0xdd || rep[95] != 0 {
		t.Errorf("SIDR_REP private data at 96: % x", rep[94:98])
	}
}

func TestSIDRStatusString(t *testing.T) {
	for s, want := range map[cm.SIDRStatus]string{cm.SIDRSuccess: "success (0)", cm.SIDRUnsupported: "service ID not supported (1)",
		cm.SIDRReject: "rejected by the service (2)", 9: "SIDR status 9"} {
		if got := s.String(); got != want {
			t.Errorf("%d: %q, want %q", uint8(s), got, want)
		}
	}
	if got := cm.AttrSIDRREQ.String(); got != "SIDR_REQ" {
		t.Errorf("AttrSIDRREQ: %q", got)
	}
}

func TestServiceIDUDP(t *testing.T) {
	// rdma_get_service_id: ps << 16 | port, RDMA_PS_UDP 0x0111.
	if got := cm.ServiceID(cm.PortSpaceUDP, 7174); got != 0x0000000001111c06 {
		t.Errorf("ServiceID(UDP, 7174) = %#x", got)
	}
	if ps, port, ok := cm.ParseServiceID(0x0000000001111c06); !ok || ps != cm.PortSpaceUDP || port != 7174 {
		t.Errorf("ParseServiceID(0x1111c06) = %v %d %v", ps, port, ok)
	}
}
