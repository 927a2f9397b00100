package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/ulp/nvme"
	"github.com/rbridge/rbridge/ulp/nvme/nvmetest"
)

// TestGuestRunStagingScope: what a target behind the verbs leg may reach
// of the gateway's staging. Two NVMe-oF hosts on the RoCE side (rxe1)
// each send a write command through a protocol: nvme route to a target
// on the IB side (played by the test): each command's descriptor reaches
// the target rewritten to staging the gateway exposed for that command on
// that connection. The target then READs:
//
//   - on the second connection, with the first one's staging key: a
//     failure, and no byte moves;
//   - on the first connection, with its own key: the host's data;
//   - on the first connection, with its key, once it sent the command's
//     completion and the host got it: a failure, and no byte moves (the
//     access ended with the command).
//
// It runs in both device passes, one way of scoping staging each:
//
//   - rxe (the guest's IB fabric, rxe2 and rxe3): a memory window bound on
//     the connection's QP; another QP of the same HCA cannot use it, and
//     gets a remote access error.
//   - siw (the siw pair, siw0 the gateway's verbs leg and siw1 the
//     target's): no windows, so the staging MR grants the access itself,
//     in a protection domain the gateway made for that connection alone;
//     siw refuses a key of another PD (siw_check_mem) and ends the
//     connection with a TERMINATE, so the READ fails flushed.
func TestGuestRunStagingScope(t *testing.T) {
	ns := guest.UserNetns(t)
	ib, windows := stagingFabric(t)
	const port = 4431
	logs := startGateway(t, guestLegs("udp", ns, ib, "")+fmt.Sprintf(`routes:
  - name: scope
    listen: {leg: roce, addr: "%v:%d"}
    target: {leg: ib, addr: "%v:%d"}
    protocol: nvme
`, ns.IP, port, ib.PeerIP, port))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	tch, err := ibv.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tch.Close() })
	lid, err := tch.NewID(ibv.PortSpaceTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := lid.Bind(netip.AddrPortFrom(ib.PeerIP, port)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(8); err != nil {
		t.Fatal(err)
	}

	const dataOff, dataLen, landOff = 8192, 4096, 16384
	var hosts, targets [2]*cmEnd
	var sgl [2]nvme.SGL
	for i := range 2 {
		connected := make(chan *cmEnd, 1)
		go func() {
			defer close(connected)
			h, err := scopeHost(ctx, t, ns, port)
			if err != nil {
				t.Error(err)
				return
			}
			connected <- h
		}()
		// The target: accepts what the gateway dials; it READs, so it
		// asks for an initiator depth.
		req, err := tch.Expect(ctx, ibv.CMConnectRequest)
		if err != nil {
			t.Fatal(err)
		}
		tgt := &cmEnd{ch: tch}
		if err := tgt.setup(t, req.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := tgt.qp.PostRecv([]ibv.RecvWR{{ID: 1, SGEs: []ibv.SGE{mustSGE(tgt.mr, 0, 1024)}}}); err != nil {
			t.Fatal(err)
		}
		if err := req.ID.Accept(ibv.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		if _, err := tch.Expect(ctx, ibv.CMEstablished); err != nil {
			t.Fatal(err)
		}
		h := <-connected
		if h == nil {
			t.FailNow()
		}
		hosts[i], targets[i] = h, tgt

		// The host's write command: 4 KiB of its memory, which it lets the
		// target READ.
		copy(h.mr.Bytes()[dataOff:], bytes.Repeat([]byte{byte(0xa0 + i)}, dataLen))
		capsule := nvmetest.Command(nvme.OpWrite, 1, nvmetest.Keyed(h.mr.Addr()+dataOff, dataLen, h.mr.RKey(), nvme.SGLAddress), nil)
		copy(h.mr.Bytes(), capsule)
		if _, err := h.qp.PostSend([]ibv.SendWR{{ID: 1, Op: ibv.OpSend, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(h.mr, 0, len(capsule))}}}); err != nil {
			t.Fatal(err)
		}
		wc := waitWC(ctx, t, tgt.cq, fmt.Sprintf("host %d's capsule at the target", i))
		if wc.Status != ibv.WCSuccess {
			t.Fatalf("host %d's capsule at the target: %v", i, wc.Status)
		}
		c, err := nvme.ParseCapsule(tgt.mr.Bytes()[:wc.ByteLen])
		if err != nil {
			t.Fatalf("host %d's capsule at the target: %v", i, err)
		}
		sgl[i] = nvme.SGL(append([]byte(nil), c.Command().DataPointer()...))
		if sgl[i].Key() == h.mr.RKey() || sgl[i].Length() != dataLen {
			t.Fatalf("host %d's descriptor reached the target as %v: not staged (the host's key is %#x)", i, sgl[i], h.mr.RKey())
		}
		t.Logf("host %d's descriptor at the target: %v", i, sgl[i])
	}

	// read READs 4 KiB at the first command's staging through target
	// connection k into fresh 0xFF bytes; it returns the status and the bytes.
	read := func(k int, what string) (ibv.WCStatus, []byte) {
		t.Helper()
		land := targets[k].mr.Bytes()[landOff : landOff+dataLen]
		for j := range land {
			land[j] = 0xff
		}
		if _, err := targets[k].qp.PostSend([]ibv.SendWR{{ID: 2, Op: ibv.OpRead, Flags: ibv.SendSignaled, RemoteAddr: sgl[0].Address(), RKey: sgl[0].Key(),
			SGEs: []ibv.SGE{mustSGE(targets[k].mr, landOff, dataLen)}}}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		wc := waitWC(ctx, t, targets[k].cq, what)
		return wc.Status, append([]byte(nil), land...)
	}
	unmoved := bytes.Repeat([]byte{0xff}, dataLen)

	// refused says whether a READ's status is the refusal this pass's
	// device gives a key its QP may not use.
	refused := func(st ibv.WCStatus) bool {
		if windows {
			return st == ibv.WCRemAccessErr
		}
		return st != ibv.WCSuccess
	}
	want := map[bool]string{true: "a remote access error", false: "a failure"}[windows]
	st, got := read(1, "the second connection's READ with the first one's staging key")
	if !refused(st) || !bytes.Equal(got, unmoved) {
		t.Errorf("the second connection's READ with the first one's staging key: %v, bytes moved %v; want %s and none", st, !bytes.Equal(got, unmoved), want)
	}
	st, got = read(0, "the first connection's READ with its staging key")
	if st != ibv.WCSuccess || !bytes.Equal(got, bytes.Repeat([]byte{0xa0}, dataLen)) {
		t.Fatalf("the first connection's READ with its staging key: %v, the host's data %v", st, bytes.Equal(got, bytes.Repeat([]byte{0xa0}, dataLen)))
	}
	// The command completes: the host gets its completion.
	copy(targets[0].mr.Bytes()[1024:], nvmetest.Completion(1, nvme.StatusSuccess))
	if _, err := targets[0].qp.PostSend([]ibv.SendWR{{ID: 3, Op: ibv.OpSend, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(targets[0].mr, 1024, nvme.CompletionLen)}}}); err != nil {
		t.Fatal(err)
	}
	if wc := waitWC(ctx, t, targets[0].cq, "the target's completion SEND"); wc.Status != ibv.WCSuccess {
		t.Fatalf("the target's completion SEND: %v", wc.Status)
	}
	for {
		wc := waitWC(ctx, t, hosts[0].cq, "the first host's completion")
		if wc.ID == 100 { // the receive; the capsule's SEND completes too
			if wc.Status != ibv.WCSuccess || nvme.Completion(hosts[0].mr.Bytes()[32768:]).CommandID() != 1 {
				t.Fatalf("the first host's completion: %v", wc.Status)
			}
			break
		}
	}
	st, got = read(0, "the first connection's READ with its staging key after the command completed")
	if !refused(st) || !bytes.Equal(got, unmoved) {
		t.Errorf("the first connection's READ with its staging key after the command completed: %v, bytes moved %v; want %s and none", st, !bytes.Equal(got, unmoved), want)
	}
	if said := fmt.Sprintf("memory_windows=%v", windows); !strings.Contains(logs.String(), said) {
		t.Errorf("the gateway did not say %s of its verbs device %s:\n%s", said, ib.GatewayDevice, lastLines(logs.String(), 20))
	}
	// Without windows, each connection to the target got its own PD.
	m, _ := scrape(t, adminAddr(t, logs))
	wantPDs := map[bool]float64{true: 0, false: 2}[windows]
	if got := m[`rbridge_verbs_staging_own_pds_total{leg="ib"}`]; got != wantPDs {
		t.Errorf("rbridge_verbs_staging_own_pds_total{leg=\"ib\"} = %v, want %v", got, wantPDs)
	}
}

// stagingFabric is the fabric a storage target sits on behind the
// gateway's verbs leg in this device pass, and whether the leg's device
// has memory windows: in the rxe pass the guest's IB fabric (rxe2, rxe3:
// windows); in the siw pass the siw pair, siw0 the gateway's and siw1 the
// target's (no windows: a protection domain per connection).
func stagingFabric(t *testing.T) (guest.IBFabric, bool) {
	t.Helper()
	d := guest.Device(t)
	if d.Kind == "rxe" {
		return guest.IB(t), true
	}
	return guest.IBFabric{GatewayDevice: d.Name, GatewayNetdev: d.Netdev, GatewayIP: d.IP,
		PeerDevice: d.Peer, PeerNetdev: d.PeerNetdev, PeerIP: d.PeerIP, PrefixLen: d.PrefixLen}, false
}

// scopeHost connects an NVMe-oF host stand-in from the RoCE side's rxe1
// through the gateway's route at port: its memory grants remote read, a
// receive waits for a completion at 32 KiB (ID 100).
func scopeHost(ctx context.Context, t *testing.T, ns guest.Netns, port uint16) (*cmEnd, error) {
	h := &cmEnd{access: ibv.AccessRemoteRead}
	var err error
	if h.ch, err = ibv.NewEventChannel(); err != nil {
		return nil, err
	}
	t.Cleanup(func() { h.ch.Close() })
	id, err := h.ch.NewID(ibv.PortSpaceTCP)
	if err != nil {
		return nil, err
	}
	if err := id.ResolveAddr(ns.PeerIP, netip.AddrPortFrom(ns.IP, port), 5*time.Second); err != nil {
		return nil, err
	}
	if _, err := h.ch.Expect(ctx, ibv.CMAddrResolved); err != nil {
		return nil, err
	}
	if err := id.ResolveRoute(5 * time.Second); err != nil {
		return nil, err
	}
	if _, err := h.ch.Expect(ctx, ibv.CMRouteResolved); err != nil {
		return nil, err
	}
	if err := h.setup(t, id); err != nil {
		return nil, err
	}
	if _, err := h.qp.PostRecv([]ibv.RecvWR{{ID: 100, SGEs: []ibv.SGE{mustSGE(h.mr, 32768, 64)}}}); err != nil {
		return nil, err
	}
	// An NVMe-oF host takes the target's READs and issues none.
	if err := id.Connect(ibv.ConnParam{ResponderResources: 1, InitiatorDepth: 0, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		return nil, err
	}
	if _, err := h.ch.Expect(ctx, ibv.CMEstablished); err != nil {
		return nil, fmt.Errorf("connect through the gateway: %w", err)
	}
	return h, nil
}

// waitWC waits for cq's next completion.
func waitWC(ctx context.Context, t *testing.T, cq *ibv.CQ, what string) ibv.WorkCompletion {
	t.Helper()
	wcs := make([]ibv.WorkCompletion, 1)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	n, err := cq.Wait(wctx, wcs)
	if err != nil || n == 0 {
		t.Fatalf("%s: no completion: %v", what, err)
	}
	return wcs[0]
}
