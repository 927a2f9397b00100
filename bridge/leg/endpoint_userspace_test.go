package leg_test

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// doneRecorder is a Handler that records the ops completed.
type doneRecorder struct{ done chan *session.Op }

func (d *doneRecorder) Request(*transport.Request, *pool.Buf) transport.Reply {
	return transport.Reply{Result: transport.NoCredit}
}
func (d *doneRecorder) Flush()              {}
func (d *doneRecorder) Done(op *session.Op) { d.done <- op }
func (d *doneRecorder) Failed(error)        {}

// TestUserspaceEndpointCompletesWhatWasPostedBeforeStart: a session
// starts its endpoints one after the other, so the first one's peer can
// have sent what the session then posted on the second before the second
// started (a gateway under load: its client SENDs at once). The second's
// completions wait for its handler; none is lost. (It failed so: the
// endpoint's completion goroutine ran from its creation and dropped what
// completed before Start, so the op and its pool buffer were never given
// back: a leak `rbridge run` named at exit.)
func TestUserspaceEndpointCompletesWhatWasPostedBeforeStart(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: 1 << 20, Classes: []int{4096}, Trace: true})
	if err != nil {
		t.Fatal(err)
	}
	ep, _, prcq := connectedEndpoint(t, pl, nil)
	b, err := pl.Get(64)
	if err != nil {
		t.Fatal(err)
	}
	copy(b.B(), "posted before start")
	op := &session.Op{Opcode: transport.OpSend, Buf: b, Len: 19}
	if n, err := ep.Post([]*session.Op{op}); n != 1 || err != nil {
		t.Fatalf("post before start: %d, %v", n, err)
	}
	// The peer has it (and acknowledged it) before the endpoint starts.
	wcs := make([]transport.WC, 1)
	deadline := time.Now().Add(5 * time.Second)
	for prcq.Poll(wcs) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the peer did not receive the SEND")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the acknowledgement's completion comes to the endpoint
	h := &doneRecorder{done: make(chan *session.Op, 1)}
	if err := ep.Start(h); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-h.done:
		if got != op || got.Status != transport.StatusSuccess {
			t.Fatalf("done %+v, want the SEND posted before start, succeeded", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("what completed before Start never reached the handler")
	}
	b.Release()
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pl.Close(); err != nil {
		t.Fatal(err)
	}
}

// connectedEndpoint is a userspace endpoint on pl's arena whose QP is
// connected (RTS) to a peer QP on a simulated network, and the peer's
// receive CQ (one 4 KiB receive posted); disconnect is the endpoint's.
func connectedEndpoint(t *testing.T, pl *pool.Pool, disconnect func(*transport.QP) error) (*leg.UserspaceEndpoint, *transport.QP, *transport.CQ) {
	t.Helper()
	net := simnet.New(simnet.Options{})
	epAddr, peerAddr := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	dev := func(a netip.AddrPort) *transport.Device {
		c, err := net.Listen(a)
		if err != nil {
			t.Fatal(err)
		}
		d, err := transport.NewDevice(c, transport.DeviceOptions{Logger: testlog.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	edev, pdev := dev(epAddr), dev(peerAddr)
	epd := transport.NewPD()
	pmr, err := epd.RegisterMR(pl.Arena(), transport.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := leg.NewUserspaceEndpoint(leg.UserspaceOptions{Device: edev, PD: epd, MR: pmr})
	if err != nil {
		t.Fatal(err)
	}
	if disconnect != nil {
		ep.SetDisconnect(func() error { return disconnect(ep.QP()) })
	}
	ppd := transport.NewPD()
	pmem := make([]byte, 4096)
	peerMR, err := ppd.RegisterMR(pmem, transport.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	prcq := transport.NewCQ(16)
	peer, err := pdev.CreateQP(ppd, transport.QPInitAttr{Type: transport.RC, SendCQ: transport.NewCQ(16), RecvCQ: prcq})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		qp, other *transport.QP
		remote    netip.AddrPort
	}{{ep.QP(), peer, peerAddr}, {peer, ep.QP(), epAddr}} {
		for _, a := range []transport.QPAttr{{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: p.other.QPN(), Remote: p.remote, PathMTU: 1024, MinRNRTimer: 1},
			{State: transport.StateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7}} {
			if err := p.qp.Modify(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := peer.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: peerMR, Length: 4096}}); err != nil {
		t.Fatal(err)
	}
	return ep, peer, prcq
}

// failRecorder is a Handler that records what the endpoint reported
// failed.
type failRecorder struct {
	doneRecorder
	failed chan error
}

func (f *failRecorder) Failed(err error) { f.failed <- err }

// TestUserspaceEndpointLeftRTS: a QP that leaves RTS while the endpoint
// is open is reported failed (a transport error: no DREQ released its
// connection); one that its own Close moved to the error state (the
// disconnect, whose DREP comes late) is not, as nothing failed.
func TestUserspaceEndpointLeftRTS(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: 1 << 20, Classes: []int{4096}})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	start := func(ep *leg.UserspaceEndpoint) *failRecorder {
		h := &failRecorder{doneRecorder{done: make(chan *session.Op, 1)}, make(chan error, 4)}
		if err := ep.Start(h); err != nil {
			t.Fatal(err)
		}
		return h
	}

	ep, _, _ := connectedEndpoint(t, pl, nil)
	h := start(ep)
	if err := ep.QP().Modify(transport.QPAttr{State: transport.StateError}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-h.failed:
		if !strings.Contains(err.Error(), "left RTS (a transport error)") {
			t.Errorf("a QP that left RTS on its own: %v, want a transport error", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("a QP that left RTS on its own was not reported")
	}
	ep.Close()

	// As roce/cm's Disconnect: the QP to ERR, then the DREP awaited.
	ep, _, _ = connectedEndpoint(t, pl, func(qp *transport.QP) error {
		err := qp.Modify(transport.QPAttr{State: transport.StateError})
		time.Sleep(300 * time.Millisecond)
		return err
	})
	h = start(ep)
	ep.Close()
	select {
	case err := <-h.failed:
		t.Errorf("the endpoint's own disconnect was reported: %v", err)
	default:
	}
}
