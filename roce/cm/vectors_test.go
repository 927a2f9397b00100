package cm_test

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
)

// TestKernelREQVector parses a REQ captured from the kernel's IB CM in the
// guest (rdma_connect from rxe1 198.18.1.2 to the transport at 198.18.1.3
// port 7790; TestGuestRDMACMClient logs it) and checks it field by field
// against what the client asked for.
func TestKernelREQVector(t *testing.T) {
	text, err := os.ReadFile("testdata/kernel_req.hex")
	check(t, err)
	mad, err := hex.DecodeString(strings.TrimSpace(string(text)))
	check(t, err)
	h, data, err := cm.ParseCM(mad)
	check(t, err)
	if h.AttrID() != cm.AttrREQ {
		t.Fatalf("attribute %v, want REQ", h.AttrID())
	}
	r, _, err := cm.ParseREQ(data)
	check(t, err)
	f := r.Fields()
	ps, port, ok := cm.ParseServiceID(f.ServiceID)
	switch {
	case !ok || ps != cm.PortSpaceTCP || port != 7790:
		t.Errorf("service ID %#x: %v port %d", f.ServiceID, ps, port)
	case f.LocalQPN != 0x12 || f.StartingPSN != 0xf02ae4:
		t.Errorf("QPN %#x PSN %#x, want 0x12 0xf02ae4", f.LocalQPN, f.StartingPSN)
	case f.PathMTU != roce.MTU1024 || f.TransportType != cm.TransportRC || f.PKey != 0xffff:
		t.Errorf("MTU %v transport %d P_Key %#x", f.PathMTU, f.TransportType, f.PKey)
	case f.ResponderResources != 4 || f.InitiatorDepth != 4 || f.RetryCount != 7 || f.RNRRetryCount != 7:
		t.Errorf("resources %d/%d retries %d/%d, want 4/4 and 7/7", f.ResponderResources, f.InitiatorDepth, f.RetryCount, f.RNRRetryCount)
	case f.LocalCMResponseTimeout != 20 || f.RemoteCMResponseTimeout != 20 || f.MaxCMRetries != 15:
		t.Errorf("CM timeouts %d/%d, %d retries; rdma_cm uses 20 and 15", f.LocalCMResponseTimeout, f.RemoteCMResponseTimeout, f.MaxCMRetries)
	case f.Primary.LocalGID.Addr() != netip.MustParseAddr("198.18.1.2") || f.Primary.RemoteGID.Addr() != netip.MustParseAddr("198.18.1.3"):
		t.Errorf("primary path GIDs %v -> %v", f.Primary.LocalGID, f.Primary.RemoteGID)
	}
	ip, n, err := cm.ParseIPCMHeader(f.PrivateData)
	check(t, err)
	want := cm.IPCMHeaderFields{IPVersion: 4, SrcPort: 48901, Src: netip.MustParseAddr("198.18.1.2"), Dst: netip.MustParseAddr("198.18.1.3")}
	if got := ip.Fields(); got != want {
		t.Errorf("IP CM header %+v, want %+v", got, want)
	}
	// The client's own private data: its buffer (16 bytes), zeros, and
	// package ibv's MTU trailer ('r', 'b', 1, IBV_MTU_1024) at the end.
	user := f.PrivateData[n:]
	if len(user) != cm.REQIPCMPrivateDataLen || !bytes.HasSuffix(user, []byte{'r', 'b', 1, 3}) {
		t.Errorf("application private data %x", user)
	}
	// Re-encoding the fields gives the captured bytes back (the kernel
	// leaves every reserved bit zero).
	out := make([]byte, cm.REQLen)
	cm.REQ(out).Encode(&f)
	if !bytes.Equal(out, data) {
		t.Errorf("re-encoded REQ differs:\n got %x\nwant %x", out, data)
	}
}

// TestKernelSIDRREQVector parses a SIDR_REQ captured from the kernel's IB
// CM in the guest (udaddy -s 198.18.1.3 -b 198.18.1.2 on rxe1 resolving
// the transport's UD service on port 7174; TestGuestUdaddyClient logs it)
// and checks it field by field: the UDP port space's service ID, the
// default P_Key, the IP CM header and nothing else in the private data.
func TestKernelSIDRREQVector(t *testing.T) {
	text, err := os.ReadFile("testdata/kernel_sidr_req.hex")
	check(t, err)
	mad, err := hex.DecodeString(strings.TrimSpace(string(text)))
	check(t, err)
	h, data, err := cm.ParseCM(mad)
	check(t, err)
	if h.AttrID() != cm.AttrSIDRREQ {
		t.Fatalf("attribute %v, want SIDR_REQ", h.AttrID())
	}
	r, _, err := cm.ParseSIDRREQ(data)
	check(t, err)
	f := r.Fields()
	if f.ServiceID != 0x0000000001111c06 || f.PKey != 0xffff {
		t.Errorf("service ID %#x P_Key %#x, want rdma_cm's UDP port 7174 and 0xffff", f.ServiceID, f.PKey)
	}
	ip, n, err := cm.ParseIPCMHeader(f.PrivateData)
	check(t, err)
	if got := ip.Fields(); got.IPVersion != 4 || got.Src != netip.MustParseAddr("198.18.1.2") || got.Dst != netip.MustParseAddr("198.18.1.3") || got.SrcPort == 0 {
		t.Errorf("IP CM header %+v", got)
	}
	if user := f.PrivateData[n:]; len(user) != cm.SIDRREQIPCMPrivateDataLen || !bytes.Equal(user, make([]byte, len(user))) {
		t.Errorf("udaddy sends no private data of its own; got %x", user)
	}
	out := make([]byte, cm.SIDRREQLen)
	cm.SIDRREQ(out).Encode(&f)
	if !bytes.Equal(out, data) {
		t.Errorf("re-encoded SIDR_REQ differs:\n got %x\nwant %x", out, data)
	}
}

// TestKernelSIDRREPVector parses the SIDR_REP the kernel's IB CM sent for
// udaddy's server on rxe1 (rdma_accept of a UD id) when the transport's CM
// resolved port 7174 (TestGuestUdaddyServer logs it): status success, the
// QPN of udaddy's QP (0x16 in that run), rdma_cm's Q_Key, the service ID
// echoed, no private data.
func TestKernelSIDRREPVector(t *testing.T) {
	text, err := os.ReadFile("testdata/kernel_sidr_rep.hex")
	check(t, err)
	mad, err := hex.DecodeString(strings.TrimSpace(string(text)))
	check(t, err)
	h, data, err := cm.ParseCM(mad)
	check(t, err)
	if h.AttrID() != cm.AttrSIDRREP {
		t.Fatalf("attribute %v, want SIDR_REP", h.AttrID())
	}
	r, _, err := cm.ParseSIDRREP(data)
	check(t, err)
	f := r.Fields()
	want := cm.SIDRREPFields{RequestID: f.RequestID, Status: cm.SIDRSuccess, QPN: 0x16, ServiceID: 0x0000000001111c06,
		QKey: cm.RDMAUDPQKey, Info: make([]byte, cm.SIDRREPInfoLen), PrivateData: make([]byte, cm.SIDRREPPrivateDataLen)}
	if diff := cmp.Diff(want, f); diff != "" {
		t.Errorf("the kernel's SIDR_REP (-want +got):\n%s", diff)
	}
	out := make([]byte, cm.SIDRREPLen)
	cm.SIDRREP(out).Encode(&f)
	if !bytes.Equal(out, data) {
		t.Errorf("re-encoded SIDR_REP differs:\n got %x\nwant %x", out, data)
	}
}
