package gateway_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// cmEnd is one application end of an rdma_cm connection on a kernel
// device: its channel, id, QP and 64 KiB of registered memory.
type cmEnd struct {
	ch *ibv.EventChannel
	id *ibv.CMID
	cq *ibv.CQ
	qp *ibv.QP
	mr *ibv.MR
	// access is what the MR grants beyond local write (its peer's READs
	// and WRITEs of it).
	access ibv.Access
}

// setup makes the end's QP on id; its cleanups run at the test's end (t is
// used for nothing else: setup may run on any goroutine).
func (e *cmEnd) setup(t *testing.T, id *ibv.CMID) error {
	e.id = id
	dev, err := id.Device()
	if err != nil {
		return err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		return err
	}
	t.Cleanup(func() { pd.Close() })
	if e.cq, err = dev.NewCQ(ibv.CQOptions{Entries: 64}); err != nil {
		return err
	}
	t.Cleanup(func() { e.cq.Close() })
	if e.qp, err = id.CreateQP(pd, ibv.QPOptions{Type: ibv.QPTypeRC, SendCQ: e.cq, RecvCQ: e.cq,
		Cap: ibv.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return err
	}
	arena, err := ibv.MapArena(64<<10, ibv.ArenaOptions{})
	if err != nil {
		return err
	}
	t.Cleanup(func() { arena.Close() })
	e.mr, err = pd.RegMR(arena.Bytes(), ibv.AccessLocalWrite|e.access)
	return err
}

// TestGuestRunSendThenDisconnect: an IB-side application SENDs and, once
// its HCA reported them complete (the gateway's HCA acknowledged them),
// disconnects at once, as perftest does at its end. Every SEND must reach
// the RoCE-side application before the disconnect does: the IB side was
// told they arrived, so the gateway may not drop them. Then the gateway
// disconnects the RoCE side, at once: the IB side's disconnect moves the
// gateway's QP to ERR, whose flushed receives say every SEND was handed
// over. (A session that ended on the DISCONNECTED event at once dropped
// what it had not yet delivered; one that waited for receives that never
// flushed kept the RoCE side connected for the drain's 5 s timeout.
// perftest's closing handshake, its IB-side end leaving first, meets
// both.)
func TestGuestRunSendThenDisconnect(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	const port, sends, rounds = 7182, 4, 20
	cfg := gatewayConfig("udp", ns, ib) + fmt.Sprintf(`  - name: drain-to-roce
    listen: {leg: ib, addr: "%v:%d"}
    target: {leg: roce, addr: "%v:%d"}
`, ib.GatewayIP, port, ns.PeerIP, port)
	startGateway(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// The RoCE-side application: a listener on the kernel's rxe1.
	tch, err := ibv.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tch.Close() })
	lid, err := tch.NewID(ibv.PortSpaceTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := lid.Bind(netip.AddrPortFrom(ns.PeerIP, port)); err != nil {
		t.Fatal(err)
	}
	if err := lid.Listen(8); err != nil {
		t.Fatal(err)
	}

	lost := 0
	var after []time.Duration // from the IB side's disconnect to the RoCE side's
	for round := range rounds {
		// The target accepts what the gateway dials, with receives posted.
		accepted := make(chan *cmEnd, 1)
		go func() {
			defer close(accepted)
			req, err := tch.Expect(ctx, ibv.CMConnectRequest)
			if err != nil {
				t.Error(err)
				return
			}
			tgt := &cmEnd{ch: tch}
			if err := tgt.setup(t, req.ID); err != nil {
				t.Error(err)
				return
			}
			var wrs []ibv.RecvWR
			for i := range 8 {
				wrs = append(wrs, ibv.RecvWR{ID: uint64(i), SGEs: []ibv.SGE{mustSGE(tgt.mr, i*1024, 1024)}})
			}
			if _, err := tgt.qp.PostRecv(wrs); err != nil {
				t.Error(err)
				return
			}
			if err := req.ID.Accept(ibv.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}); err != nil {
				t.Error(err)
				return
			}
			if _, err := tch.Expect(ctx, ibv.CMEstablished); err != nil {
				t.Error(err)
				return
			}
			accepted <- tgt
		}()

		// The IB-side application connects through the gateway.
		cli := &cmEnd{}
		if cli.ch, err = ibv.NewEventChannel(); err != nil {
			t.Fatal(err)
		}
		id, err := cli.ch.NewID(ibv.PortSpaceTCP)
		if err != nil {
			t.Fatal(err)
		}
		if err := id.ResolveAddr(ib.PeerIP, netip.AddrPortFrom(ib.GatewayIP, port), 5*time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.ch.Expect(ctx, ibv.CMAddrResolved); err != nil {
			t.Fatal(err)
		}
		if err := id.ResolveRoute(5 * time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.ch.Expect(ctx, ibv.CMRouteResolved); err != nil {
			t.Fatal(err)
		}
		if err := cli.setup(t, id); err != nil {
			t.Fatal(err)
		}
		if err := id.Connect(ibv.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
			t.Fatal(err)
		}
		if _, err := cli.ch.Expect(ctx, ibv.CMEstablished); err != nil {
			t.Fatalf("round %d: connect through the gateway: %v", round, err)
		}
		tgt := <-accepted
		if tgt == nil {
			t.FailNow()
		}

		var wrs []ibv.SendWR
		for i := range sends {
			copy(cli.mr.Bytes()[i*64:], fmt.Sprintf("round %d send %d", round, i))
			wrs = append(wrs, ibv.SendWR{ID: uint64(i), Op: ibv.OpSend, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(cli.mr, i*64, 64)}})
		}
		if _, err := cli.qp.PostSend(wrs); err != nil {
			t.Fatal(err)
		}
		wcs := make([]ibv.WorkCompletion, 16)
		for done := 0; done < sends; {
			n, err := cli.cq.Wait(ctx, wcs)
			if err != nil {
				t.Fatal(err)
			}
			for _, wc := range wcs[:n] {
				if wc.Status != ibv.WCSuccess {
					t.Fatalf("round %d: the IB side's SEND %d: %v", round, wc.ID, wc.Status)
				}
			}
			done += n
		}
		// Acknowledged: the IB side leaves at once.
		if err := id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		left := time.Now()

		got := 0
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
	receive:
		for got < sends {
			n, err := tgt.cq.Wait(wctx, wcs)
			if err != nil {
				break // what did not come within 5 s is lost
			}
			for _, wc := range wcs[:n] {
				if wc.Status != ibv.WCSuccess {
					break receive // flushed: the connection is down
				}
				got++
			}
		}
		wcancel()
		if got != sends {
			lost += sends - got
			t.Errorf("round %d: the RoCE side received %d of the %d SENDs the IB side's HCA completed before it disconnected", round, got, sends)
		} else {
			// Then the gateway disconnects the RoCE side: as soon as it
			// relayed them, not once its drain's timeout (5 s) gave up
			// waiting for the IB side's QP to say all had been handed
			// over.
			dctx, dcancel := context.WithTimeout(ctx, 4*time.Second)
			_, err := tch.Expect(dctx, ibv.CMDisconnected)
			dcancel()
			if err != nil {
				t.Errorf("round %d: the RoCE side's DISCONNECTED, %v after the IB side's: %v", round, time.Since(left).Round(time.Millisecond), err)
			} else {
				after = append(after, time.Since(left))
			}
		}
		cli.ch.Close()
		tgt.id.Close()
	}
	slices.Sort(after)
	t.Logf("%d rounds of %d SENDs then a disconnect: %d SENDs lost; the RoCE side disconnected %v after the IB side (median of %d), at most %v",
		rounds, sends, lost, median(after), len(after), slices.Max(append(after, 0)))
}

// median is the middle of sorted d (0 if empty).
func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[len(d)/2]
}
