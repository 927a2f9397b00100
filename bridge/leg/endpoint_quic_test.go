package leg_test

import (
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/leg/legtest"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestQUICEndpointClosesWhenItsCloseCannotBeWritten: the far gateway
// stopped reading the session's stream (it closed its side first and
// cancelled its reads, as a QUICEndpoint's Close does), so this end's
// Close frame cannot be written. Close must end once its writer failed,
// not wait out the grace it gives a writer that is still sending (a
// second, by which every session whose two peers disconnect at once
// ended late).
func TestQUICEndpointClosesWhenItsCloseCannotBeWritten(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: 1 << 20, Classes: []int{4 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	sa, sb, _ := legtest.QUICStreams(t)
	b, err := leg.NewQUICEndpoint(leg.QUICOptions{Stream: sb, Window: 64, Pool: pl, Logger: testlog.New(t), Name: "tunnel b"})
	if err != nil {
		t.Fatal(err)
	}
	sa.CancelRead(0) // STOP_SENDING: b's writes fail from now on
	select {
	case <-sb.Context().Done(): // the STOP_SENDING arrived
	case <-time.After(10 * time.Second):
		t.Fatal("the far end's STOP_SENDING never arrived")
	}
	start := time.Now()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// The grace is a second; a Close that is not kept waiting takes
	// milliseconds.
	if took := time.Since(start); took >= 500*time.Millisecond {
		t.Errorf("Close took %v with a writer that could not write its Close frame: it waited out its grace", took)
	}
}

// pendingRecorder is a Handler that answers every request Pending and
// hands its token on.
type pendingRecorder struct{ toks chan transport.Token }

func (p *pendingRecorder) Request(r *transport.Request, _ *pool.Buf) transport.Reply {
	p.toks <- r.Token
	return transport.Reply{Result: transport.Pending}
}
func (p *pendingRecorder) Flush()           {}
func (p *pendingRecorder) Done(*session.Op) {}
func (p *pendingRecorder) Failed(error)     {}

// TestQUICEndpointCompletesInPostOrder: the far gateway's session
// completes requests out of order (one that is ending fails a request at
// once while an earlier one is still at its far leg). The endpoint hands
// them back in the order posted, as the Endpoint contract and an RC send
// queue do, each with its own status; the session would otherwise see the
// later failure first and tear down before the earlier op's outcome came.
// What is still in flight when the endpoint closes is flushed after what
// completed before it, in post order too.
func TestQUICEndpointCompletesInPostOrder(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: 1 << 20, Classes: []int{4 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	a, b, _ := legtest.QUICPair(t, pl)
	done := &doneRecorder{done: make(chan *session.Op, 64)}
	far := &pendingRecorder{toks: make(chan transport.Token, 64)}
	if err := a.Start(done); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(far); err != nil {
		t.Fatal(err)
	}
	const n = 10
	ops := make([]*session.Op, n)
	for i := range ops {
		ops[i] = &session.Op{Opcode: transport.OpWrite, Remote: uint64(i) << 12, RKey: 1}
	}
	if k, err := a.Post(ops); k != n || err != nil {
		t.Fatalf("posted %d of %d: %v", k, n, err)
	}
	toks := make([]transport.Token, n)
	for i := range toks {
		select {
		case toks[i] = <-far.toks:
		case <-time.After(10 * time.Second):
			t.Fatalf("the far end had %d of %d requests", i, n)
		}
	}
	// The far end completes 8..1 backwards (7 fails), and never 0 and 9.
	status := func(i int) transport.Status {
		if i == 7 {
			return transport.StatusRemAccessErr
		}
		return transport.StatusSuccess
	}
	for i := 8; i >= 1; i-- {
		if err := b.Complete(toks[i], transport.Completion{Status: status(i)}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case op := <-done.done:
		t.Fatalf("op %d was handed back before op 0, which has not completed", op.Remote>>12)
	case <-time.After(200 * time.Millisecond):
	}
	if err := b.Complete(toks[0], transport.Completion{}); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		select {
		case op := <-done.done:
			if got := int(op.Remote >> 12); got != i || op.Status != status(i) {
				t.Fatalf("handed back op %d with %v, want op %d with %v", got, op.Status, i, status(i))
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("op %d never handed back", i)
		}
	}
	// Close flushes op 9, still in flight.
	go a.Close()
	select {
	case op := <-done.done:
		if op.Remote>>12 != 9 || op.Status != transport.StatusWRFlushErr {
			t.Fatalf("at Close: op %d with %v, want op 9 flushed", op.Remote>>12, op.Status)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("op 9 was not flushed at Close")
	}
	_ = b.Close()
}

// TestQUICEndpointWaitsForThePool: an Op frame whose payload finds the
// receiving gateway's pool empty waits for a buffer to come back (counted),
// then reaches the session; none is lost, and the wait ends with the
// endpoint.
func TestQUICEndpointWaitsForThePool(t *testing.T) {
	sa, sb, _ := legtest.QUICStreams(t)
	pa, err := pool.New(pool.Options{Size: 64 << 10, Classes: []int{4 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := pool.New(pool.Options{Size: 8 << 10, Classes: []int{4 << 10}}) // two buffers
	if err != nil {
		t.Fatal(err)
	}
	a, err := leg.NewQUICEndpoint(leg.QUICOptions{Stream: sa, Window: 8, Pool: pa, Logger: testlog.New(t), Name: "tunnel a"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := leg.NewQUICEndpoint(leg.QUICOptions{Stream: sb, Window: 8, Pool: pb, Logger: testlog.New(t), Name: "tunnel b"})
	if err != nil {
		t.Fatal(err)
	}
	far := &pendingRecorder{toks: make(chan transport.Token, 8)}
	if err := a.Start(&doneRecorder{done: make(chan *session.Op, 8)}); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(far); err != nil {
		t.Fatal(err)
	}
	held := make([]*pool.Buf, 2)
	for i := range held {
		if held[i], err = pb.Get(4 << 10); err != nil {
			t.Fatal(err)
		}
	}
	buf, err := pa.Get(100)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Post([]*session.Op{{Opcode: transport.OpSend, Buf: buf, Len: 100}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.Stats().Waits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the receiving endpoint never waited for its empty pool")
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-far.toks:
		t.Fatal("a SEND reached the session with no buffer to hold it")
	case <-time.After(100 * time.Millisecond):
	}
	held[0].Release()
	select {
	case <-far.toks:
	case <-time.After(10 * time.Second):
		t.Fatal("the SEND did not arrive once a buffer came back")
	}
	held[1].Release()
	go a.Close()
	_ = b.Close()
}
