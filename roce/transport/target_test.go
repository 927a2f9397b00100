package transport_test

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// The responder's Target hook alone: a raw peer on the simulated network
// sends crafted requests to a QP whose target the test drives, and reads
// every response the QP sends.

// fakeTarget records the requests it is offered and answers with reply.
type fakeTarget struct {
	mu        sync.Mutex
	reqs      []transport.Request
	reply     func(r *transport.Request) transport.Reply
	abandoned atomic.Int32
}

func (f *fakeTarget) Request(r *transport.Request) transport.Reply {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := *r
	c.Payload = append([]byte(nil), r.Payload...)
	f.reqs = append(f.reqs, c)
	if f.reply == nil {
		return transport.Reply{Result: transport.Pending}
	}
	return f.reply(r)
}

func (f *fakeTarget) Abandon() { f.abandoned.Add(1) }

func (f *fakeTarget) requests() []transport.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]transport.Request(nil), f.reqs...)
}

// token returns the token of the request offered at psn.
func (f *fakeTarget) token(t *testing.T, psn uint32) transport.Token {
	t.Helper()
	for _, r := range f.requests() {
		if uint32(r.PSN) == psn {
			return r.Token
		}
	}
	t.Fatalf("no request at PSN %d was offered", psn)
	return transport.Token{}
}

type lease struct{ released atomic.Int32 }

func (l *lease) Release() { l.released.Add(1) }

// wire is a QP with a fakeTarget and the raw peer that talks to it.
type wire struct {
	t      *testing.T
	qp     *transport.QP
	target *fakeTarget
	peer   *simnet.Conn
	qpAddr netip.AddrPort
	got    chan roce.Packet
	bufs   chan []byte
	dev    *transport.Device
}

const peerQPN = 0x99

func newWire(t *testing.T, maxDestRdAtomic int, expectedErrors ...string) *wire {
	t.Helper()
	n := simnet.New(simnet.Options{})
	w := &wire{t: t, target: &fakeTarget{}, qpAddr: netip.MustParseAddrPort("10.0.0.1:4791"), got: make(chan roce.Packet, 256)}
	conn, err := n.Listen(w.qpAddr)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := transport.NewDevice(conn, transport.DeviceOptions{Logger: testlog.New(t, expectedErrors...)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	w.dev = dev
	peerAddr := netip.MustParseAddrPort("10.0.0.2:4791")
	if w.peer, err = n.Listen(peerAddr); err != nil {
		t.Fatal(err)
	}
	cq := transport.NewCQ(64)
	w.qp, err = dev.CreateQP(transport.NewPD(), transport.QPInitAttr{Type: transport.RC, SendCQ: cq, RecvCQ: cq, Target: w.target})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []transport.QPAttr{{State: transport.StateInit},
		{State: transport.StateRTR, DestQPN: peerQPN, Remote: peerAddr, RQPSN: 0xfffffe, PathMTU: 256, MinRNRTimer: 3, MaxDestRdAtomic: maxDestRdAtomic},
		{State: transport.StateRTS, SQPSN: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7}} {
		if err := w.qp.Modify(a); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		msgs := make([]roce.Message, 16)
		for i := range msgs {
			msgs[i].Buf = make([]byte, roce.MaxPacket)
		}
		for {
			k, err := w.peer.ReadBatch(msgs)
			if err != nil {
				return
			}
			for _, m := range msgs[:k] {
				var p roce.Packet
				if err := p.Decode(append([]byte(nil), m.Buf[:m.N]...)); err != nil {
					t.Errorf("the QP sent a packet that does not decode: %v", err)
					continue
				}
				w.got <- p
			}
		}
	}()
	t.Cleanup(func() { w.peer.Close() })
	return w
}

// psn0 is the first PSN the QP expects: the tests cross the 24-bit wrap.
const psn0 = 0xfffffe

func at(k int) uint32 { return uint32(roce.PSN(psn0).Add(k)) }

func (w *wire) send(f roce.PacketFields, payload []byte) {
	w.t.Helper()
	f.BTH.DestQP, f.BTH.PKey = w.qp.QPN(), roce.DefaultPKey
	b := roce.AppendPacket(nil, &f, payload)
	if _, err := w.peer.WriteBatch([]roce.Message{{Buf: b, N: len(b), Addr: w.qpAddr}}); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wire) sendOnly(k int, payload string) {
	w.t.Helper()
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly, PSN: at(k), AckReq: true}}, []byte(payload))
}

func (w *wire) read(k int, va uint64, n uint32) {
	w.t.Helper()
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAReadRequest, PSN: at(k), AckReq: true},
		RETH: roce.RETHFields{VA: va, RKey: 0x77, DMALen: n}}, nil)
}

func (w *wire) fetchAdd(k int, add uint64) {
	w.t.Helper()
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCFetchAdd, PSN: at(k), AckReq: true},
		AtomicETH: roce.AtomicETHFields{VA: 0x1000, RKey: 0x77, SwapAdd: add}}, nil)
}

// response is what the test expects the QP to send.
type response struct {
	op  roce.Opcode
	psn uint32
	syn roce.Syndrome // ACK and NAK
	n   int           // READ response payload length
}

func ack(k int) response {
	return response{op: roce.RCAcknowledge, psn: at(k), syn: roce.ACKSyndrome(roce.CreditsInvalid)}
}
func nak(k int, code uint8) response {
	return response{op: roce.RCAcknowledge, psn: at(k), syn: roce.NAKSyndrome(code)}
}
func rnr(k int) response {
	return response{op: roce.RCAcknowledge, psn: at(k), syn: roce.RNRSyndrome(3)}
}

// expect checks the next responses, in order.
func (w *wire) expect(want ...response) []roce.Packet {
	w.t.Helper()
	var out []roce.Packet
	for i, r := range want {
		select {
		case p := <-w.got:
			got := response{op: p.Opcode(), psn: p.BTH.PSN()}
			if p.AETH != nil && p.Opcode() == roce.RCAcknowledge {
				got.syn = p.AETH.Syndrome()
			}
			if r.op.Kind() == roce.KindReadResponse {
				got.n = len(p.Payload)
			}
			if got != r {
				w.t.Fatalf("response %d: got %v psn %d %v len %d, want %v psn %d %v len %d", i,
					got.op, got.psn, got.syn, got.n, r.op, r.psn, r.syn, r.n)
			}
			if p.BTH.DestQP() != peerQPN {
				w.t.Fatalf("response %d went to QP %#x", i, p.BTH.DestQP())
			}
			out = append(out, p)
		case <-time.After(2 * time.Second):
			w.t.Fatalf("response %d (%v psn %d %v) never came", i, r.op, r.psn, r.syn)
		}
	}
	return out
}

// quiet checks that nothing more is sent for a moment.
func (w *wire) quiet(why string) {
	w.t.Helper()
	select {
	case p := <-w.got:
		w.t.Fatalf("%s: the QP sent %v psn %d", why, p.Opcode(), p.BTH.PSN())
	case <-time.After(30 * time.Millisecond):
	}
}

func (w *wire) complete(k int, c transport.Completion) {
	w.t.Helper()
	if err := w.qp.Complete(w.target.token(w.t, at(k)), c); err != nil {
		w.t.Fatalf("complete PSN %d: %v", at(k), err)
	}
}

// waitOffered waits until the target was offered n requests.
func (w *wire) waitOffered(n int) {
	w.t.Helper()
	for deadline := time.Now().Add(2 * time.Second); len(w.target.requests()) < n; {
		if time.Now().After(deadline) {
			w.t.Fatalf("the target was offered %d requests, want %d", len(w.target.requests()), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestTargetFrontier(t *testing.T) {
	w := newWire(t, 0)
	for k := range 3 {
		w.sendOnly(k, "abc")
	}
	w.waitOffered(3)
	w.quiet("nothing completed")
	w.complete(1, transport.Completion{})
	w.quiet("PSN 1 completed before PSN 0")
	w.complete(0, transport.Completion{})
	w.expect(ack(1)) // one ACK for both
	w.complete(2, transport.Completion{})
	w.expect(ack(2))
	if err := w.qp.Complete(w.target.token(t, at(2)), transport.Completion{}); !errors.Is(err, transport.ErrStaleToken) {
		t.Errorf("completing twice: %v, want ErrStaleToken", err)
	}
	// The requests were offered in PSN order, across the wrap.
	for i, r := range w.target.requests() {
		if uint32(r.PSN) != at(i) || r.Op != transport.OpSend || !r.First || !r.Last || string(r.Payload) != "abc" {
			t.Errorf("request %d: %v %q", i, &r, r.Payload)
		}
	}
}

func TestTargetFailureIsNAKedInOrder(t *testing.T) {
	w := newWire(t, 0)
	w.sendOnly(0, "a")
	w.sendOnly(1, "b")
	w.sendOnly(2, "c")
	w.waitOffered(3)
	w.complete(1, transport.Completion{Status: transport.StatusRemAccessErr})
	w.quiet("a failure after a pending request")
	w.complete(0, transport.Completion{})
	// PSN 0 is acknowledged, PSN 1 NAKed with its error, PSN 2 never.
	w.expect(ack(0), nak(1, roce.NAKRemoteAccessError))
	w.quiet("after the NAK")
	if s := w.qp.State(); s != transport.StateError {
		t.Errorf("QP in %v after a failed request, want ERR", s)
	}
	if w.target.abandoned.Load() != 1 {
		t.Errorf("Abandon called %d times, want 1", w.target.abandoned.Load())
	}
	if err := w.qp.Complete(w.target.token(t, at(2)), transport.Completion{}); !errors.Is(err, transport.ErrStaleToken) {
		t.Errorf("completing after ERR: %v, want ErrStaleToken", err)
	}
}

func TestTargetDuplicates(t *testing.T) {
	w := newWire(t, 0)
	w.sendOnly(0, "a")
	w.waitOffered(1)
	w.sendOnly(0, "a") // a duplicate of a pending request
	w.quiet("a duplicate of a pending request")
	w.complete(0, transport.Completion{})
	w.expect(ack(0))
	w.sendOnly(0, "a") // a duplicate of a completed one
	w.expect(ack(0))
	if n := len(w.target.requests()); n != 1 {
		t.Errorf("the target was offered %d requests, want 1 (duplicates are the responder's)", n)
	}
}

func TestTargetSequenceNAKWaitsForFrontier(t *testing.T) {
	w := newWire(t, 0)
	w.sendOnly(0, "a")
	w.waitOffered(1)
	w.sendOnly(2, "c") // PSN 1 went missing
	w.sendOnly(3, "d")
	w.quiet("a sequence NAK would acknowledge pending PSN 0")
	w.complete(0, transport.Completion{})
	w.expect(ack(0), nak(1, roce.NAKPSNSequenceError))
	w.sendOnly(1, "b")
	w.waitOffered(2)
	w.complete(1, transport.Completion{})
	w.expect(ack(1))
}

func TestTargetRNROnlyWhenIdle(t *testing.T) {
	w := newWire(t, 0)
	credit := false
	w.target.reply = func(r *transport.Request) transport.Reply {
		if !credit {
			return transport.Reply{Result: transport.NoCredit}
		}
		return transport.Reply{Result: transport.Pending}
	}
	w.sendOnly(0, "a")
	w.expect(rnr(0)) // nothing pending: RNR at once
	credit = true
	w.sendOnly(0, "a")
	w.waitOffered(2)
	credit = false
	w.sendOnly(1, "b")
	w.waitOffered(3)
	w.quiet("an RNR NAK for PSN 1 would acknowledge pending PSN 0")
	w.complete(0, transport.Completion{})
	w.expect(ack(0), rnr(1))
}

// A WRITE, READ or atomic the target has no credit for is not RNR NAKed
// (an RNR NAK means "no receive WQE", and rxe resumes other messages after
// one as if the PSN had been acknowledged): the requester is told to send
// again from that PSN, once nothing before it is pending.
func TestTargetNoCreditForWriteIsASequenceNAK(t *testing.T) {
	w := newWire(t, 0)
	credit := true
	w.target.reply = func(r *transport.Request) transport.Reply {
		if !credit {
			return transport.Reply{Result: transport.NoCredit}
		}
		return transport.Reply{Result: transport.Pending}
	}
	w.sendOnly(0, "a")
	w.waitOffered(1)
	credit = false
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PSN: at(1), AckReq: true},
		RETH: roce.RETHFields{VA: 0x1000, RKey: 0x55, DMALen: 8}}, make([]byte, 8))
	w.waitOffered(2)
	w.quiet("a NAK for PSN 1 would acknowledge pending PSN 0")
	w.complete(0, transport.Completion{})
	w.expect(ack(0), nak(1, roce.NAKPSNSequenceError))
	// Sent again, with credit now: taken.
	credit = true
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PSN: at(1), AckReq: true},
		RETH: roce.RETHFields{VA: 0x1000, RKey: 0x55, DMALen: 8}}, make([]byte, 8))
	w.waitOffered(3)
	w.complete(1, transport.Completion{})
	w.expect(ack(1))
}

func TestTargetRead(t *testing.T) {
	w := newWire(t, 0)
	data := make([]byte, 600) // three responses at MTU 256
	for i := range data {
		data[i] = byte(i)
	}
	w.read(0, 0x1000, 600)
	w.sendOnly(3, "after") // the READ takes PSNs 0-2
	w.waitOffered(2)
	if r := w.target.requests()[0]; r.Op != transport.OpRead || r.VA != 0x1000 || r.RKey != 0x77 || r.Length != 600 {
		t.Fatalf("READ offered as %v va %#x rkey %#x len %d", &r, r.VA, r.RKey, r.Length)
	}
	w.complete(3, transport.Completion{})
	w.quiet("the SEND after a pending READ")
	l := new(lease)
	w.complete(0, transport.Completion{Data: data, Lease: l})
	got := w.expect(response{op: roce.RCRDMAReadResponseFirst, psn: at(0), n: 256},
		response{op: roce.RCRDMAReadResponseMiddle, psn: at(1), n: 256},
		response{op: roce.RCRDMAReadResponseLast, psn: at(2), n: 88}, ack(3))
	var back []byte
	for _, p := range got[:3] {
		back = append(back, p.Payload...)
	}
	equal(t, "READ data", back, data)
	waitFor(t, "the READ's lease released", func() bool { return l.released.Load() == 1 })

	// The READ asked again (its responses lost): served again by the
	// target, without moving anything.
	w.read(0, 0x1000, 600)
	w.waitOffered(3)
	r := w.target.requests()[2]
	if !r.Dup || r.Op != transport.OpRead {
		t.Fatalf("a repeated READ offered as %v dup=%v", &r, r.Dup)
	}
	l2 := new(lease)
	if err := w.qp.Complete(r.Token, transport.Completion{Data: data, Lease: l2}); err != nil {
		t.Fatal(err)
	}
	w.expect(response{op: roce.RCRDMAReadResponseFirst, psn: at(0), n: 256},
		response{op: roce.RCRDMAReadResponseMiddle, psn: at(1), n: 256},
		response{op: roce.RCRDMAReadResponseLast, psn: at(2), n: 88})
	waitFor(t, "the repeated READ's lease released", func() bool { return l2.released.Load() == 1 })
}

// TestTargetReadLeaseReleasedWhenDeviceClosed: a completed READ whose
// responses wait behind a pending request holds its data's lease; when
// the device closes before they can be sent, closing the QP releases it
// (nothing will send them).
func TestTargetReadLeaseReleasedWhenDeviceClosed(t *testing.T) {
	w := newWire(t, 0)
	w.sendOnly(0, "first")
	w.read(1, 0x1000, 100)
	w.waitOffered(2)
	l := new(lease)
	w.complete(1, transport.Completion{Data: make([]byte, 100), Lease: l}) // behind the pending SEND
	if l.released.Load() != 0 {
		t.Fatal("the lease was released before its responses could be sent")
	}
	w.dev.Close()
	w.qp.Close()
	waitFor(t, "the READ's lease released after the device closed", func() bool { return l.released.Load() == 1 })
}

func TestTargetReadPendingDuplicateDropped(t *testing.T) {
	w := newWire(t, 0)
	w.read(0, 0x1000, 8)
	w.waitOffered(1)
	w.read(0, 0x1000, 8)
	w.quiet("a duplicate of a pending READ")
	if n := len(w.target.requests()); n != 1 {
		t.Fatalf("the target was offered %d requests, want 1", n)
	}
	w.complete(0, transport.Completion{Data: make([]byte, 8)})
	w.expect(response{op: roce.RCRDMAReadResponseOnly, psn: at(0), n: 8})
}

func TestTargetAtomicReplayed(t *testing.T) {
	w := newWire(t, 0)
	w.fetchAdd(0, 5)
	w.waitOffered(1)
	if r := w.target.requests()[0]; r.Op != transport.OpFetchAdd || r.SwapAdd != 5 || r.VA != 0x1000 {
		t.Fatalf("atomic offered as %v", &r)
	}
	w.quiet("a pending atomic")
	w.complete(0, transport.Completion{Orig: 42})
	got := w.expect(response{op: roce.RCAtomicAcknowledge, psn: at(0)})
	if got[0].AtomicAckETH.Orig() != 42 {
		t.Fatalf("atomic ACK carries %d, want 42", got[0].AtomicAckETH.Orig())
	}
	w.fetchAdd(0, 5) // its ACK was lost: replayed, not executed again
	got = w.expect(response{op: roce.RCAtomicAcknowledge, psn: at(0)})
	if got[0].AtomicAckETH.Orig() != 42 {
		t.Fatalf("replayed atomic ACK carries %d, want 42", got[0].AtomicAckETH.Orig())
	}
	if n := len(w.target.requests()); n != 1 {
		t.Errorf("the atomic was offered %d times, want once", n)
	}
}

func TestTargetEnforcesResponderResources(t *testing.T) {
	w := newWire(t, 2)
	w.read(0, 0x1000, 8)
	w.fetchAdd(1, 1)
	w.read(2, 0x1000, 8) // a third, beyond the two negotiated
	w.waitOffered(2)
	w.quiet("the third READ")
	if n := len(w.target.requests()); n != 2 {
		t.Fatalf("the target was offered %d requests, want 2", n)
	}
	w.complete(0, transport.Completion{Data: make([]byte, 8)})
	w.complete(1, transport.Completion{Orig: 7})
	w.expect(response{op: roce.RCRDMAReadResponseOnly, psn: at(0), n: 8}, response{op: roce.RCAtomicAcknowledge, psn: at(1)},
		nak(2, roce.NAKInvalidRequest))
}

func TestTargetLongWriteInChunks(t *testing.T) {
	w := newWire(t, 0)
	w.target.reply = func(r *transport.Request) transport.Reply {
		return transport.Reply{Result: transport.Pending, Join: !r.First}
	}
	chunk := func(k int) []byte { b := make([]byte, 256); b[0] = byte(k); return b }
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteFirst, PSN: at(0)},
		RETH: roce.RETHFields{VA: 0x10000, RKey: 0x55, DMALen: 256*2 + 10}}, chunk(0))
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteMiddle, PSN: at(1)}}, chunk(1))
	w.waitOffered(2) // handed over as they arrive, before the last
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteLastWithImmediate, PSN: at(2), AckReq: true},
		ImmDt: roce.ImmDtFields{Imm: 0xabcd}}, make([]byte, 10))
	w.waitOffered(3)
	reqs := w.target.requests()
	for i, want := range []struct {
		op     transport.Opcode
		va     uint64
		off    int
		first  bool
		last   bool
		length int
	}{{transport.OpWrite, 0x10000, 0, true, false, 256}, {transport.OpWrite, 0x10100, 256, false, false, 256},
		{transport.OpWriteWithImm, 0x10200, 512, false, true, 10}} {
		r := reqs[i]
		if r.Op != want.op || r.VA != want.va || r.Offset != want.off || r.First != want.first || r.Last != want.last ||
			len(r.Payload) != want.length || r.RKey != 0x55 || r.Length != 522 {
			t.Errorf("chunk %d offered as %v va %#x rkey %#x len %d", i, &r, r.VA, r.RKey, r.Length)
		}
	}
	if reqs[2].Imm != 0xabcd {
		t.Errorf("immediate %#x, want 0xabcd", reqs[2].Imm)
	}
	w.quiet("a pending WRITE")
	w.complete(0, transport.Completion{}) // the joined chunks complete with the first token
	w.expect(ack(2))
}

func TestTargetMalformedWaitsForFrontier(t *testing.T) {
	w := newWire(t, 0)
	w.sendOnly(0, "a")
	w.waitOffered(1)
	// A SEND_MIDDLE with no SEND_FIRST before it.
	w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendMiddle, PSN: at(1)}}, make([]byte, 256))
	w.quiet("an invalid request after a pending one")
	w.complete(0, transport.Completion{})
	w.expect(ack(0), nak(1, roce.NAKInvalidRequest))
	if s := w.qp.State(); s != transport.StateError {
		t.Errorf("QP in %v, want ERR", s)
	}
}

func TestTargetStatusNAKTable(t *testing.T) {
	for _, s := range []transport.Status{transport.StatusRemAccessErr, transport.StatusRemInvReqErr, transport.StatusRemOpErr} {
		if got := transport.NAKStatus(transport.NAKCode(s)); got != s {
			t.Errorf("%v -> NAK %d -> %v", s, transport.NAKCode(s), got)
		}
	}
	for code, want := range map[uint8]transport.Status{roce.NAKInvalidRequest: transport.StatusRemInvReqErr,
		roce.NAKRemoteAccessError: transport.StatusRemAccessErr, roce.NAKRemoteOperationalError: transport.StatusRemOpErr} {
		if got := transport.NAKStatus(code); got != want || transport.NAKCode(got) != code {
			t.Errorf("NAK %d -> %v, want %v", code, got, want)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 2 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// A request the target holds (not attached yet: Hold) is answered with
// nothing, nor are its retransmissions or what follows it, until Resume,
// which asks for it with a sequence NAK: the requester's first for that
// PSN, which rxe honours at once (a NAK at the first refusal would have
// spent it, and rxe would wait for its retransmit timer). Then it is
// taken; a Resume with nothing held sends nothing.
func TestTargetHoldUntilResume(t *testing.T) {
	w := newWire(t, 0)
	var attached atomic.Bool
	w.target.reply = func(r *transport.Request) transport.Reply {
		if !attached.Load() {
			return transport.Reply{Result: transport.Hold}
		}
		return transport.Reply{Result: transport.Pending}
	}
	write := func(psn int) {
		w.send(roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PSN: at(psn), AckReq: true},
			RETH: roce.RETHFields{VA: 0x1000, RKey: 0x55}}, nil)
	}
	write(0)           // a zero-length WRITE, as LIO's SRP target sends one
	write(0)           // sent again
	w.sendOnly(1, "b") // and what followed it
	w.waitOffered(2)
	w.quiet("a NAK while the request is held")
	attached.Store(true)
	w.qp.Resume()
	w.expect(nak(0, roce.NAKPSNSequenceError))
	write(0)
	w.sendOnly(1, "b")
	w.waitOffered(4)
	w.complete(0, transport.Completion{})
	w.expect(ack(0))
	w.complete(1, transport.Completion{})
	w.expect(ack(1))
	w.qp.Resume()
	w.quiet("a NAK from a Resume with nothing held")
}

// TestTargetCloseSendsHeld: a QP closed while its sends are held (a batch
// of completions under way elsewhere) still sends what it queued before:
// the ACK of what completed and the NAK of a refused request behind it.
// Without them the requester, which cannot reach a closed QP, retries
// until its retry count runs out and learns nothing of either.
func TestTargetCloseSendsHeld(t *testing.T) {
	w := newWire(t, 0)
	w.target.reply = func(r *transport.Request) transport.Reply {
		if bytes.HasPrefix(r.Payload, []byte("bad")) {
			return transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}
		}
		return transport.Reply{Result: transport.Pending}
	}
	w.sendOnly(0, "a")
	w.sendOnly(1, "bad")
	w.waitOffered(2)
	w.quiet("a refusal behind a pending request")
	w.qp.HoldSends()
	w.complete(0, transport.Completion{})
	w.quiet("what the hold keeps")
	if err := w.qp.Close(); err != nil {
		t.Fatal(err)
	}
	w.expect(ack(0), nak(1, roce.NAKInvalidRequest))
	w.qp.ReleaseSends() // the batch ends after the close: nothing more, no panic
	w.quiet("a second send of what the close sent")
}

// TestErrorAcksAgain: a QP in the error state answers the retransmission
// of a SEND it acknowledged before (its ACK lost) with the ACK again, so
// that the requester completes what was carried out; what it had not
// acknowledged, a retransmitted READ, and anything new get nothing, as
// ERR answers nothing. (A peer on rxe, to which a retry count of 7 is
// unlimited, otherwise retried its SEND forever once the gateway's
// disconnect had moved the QP to ERR.)
func TestErrorAcksAgain(t *testing.T) {
	w := newWire(t, 1)
	w.target.reply = func(r *transport.Request) transport.Reply {
		if r.Op == transport.OpRead {
			return transport.Reply{Result: transport.Done, Data: make([]byte, r.Length)}
		}
		return transport.Reply{Result: transport.Pending}
	}
	w.sendOnly(0, "a")
	w.sendOnly(1, "b")
	w.waitOffered(2)
	w.complete(0, transport.Completion{})
	w.expect(ack(0))
	if err := w.qp.Modify(transport.QPAttr{State: transport.StateError}); err != nil {
		t.Fatal(err)
	}
	w.quiet("entering ERR with 1 acknowledged, 1 pending")
	w.sendOnly(0, "a") // its ACK was lost
	w.expect(ack(0))
	w.sendOnly(1, "b") // never acknowledged: flushed
	w.quiet("a retransmission of what was not acknowledged")
	w.sendOnly(2, "c")
	w.quiet("a new request")
	w.read(-1, 0x1000, 16) // before the frontier, but a READ
	w.quiet("a READ before the frontier")
	if got := len(w.target.requests()); got != 2 {
		t.Errorf("the target was offered %d requests, want the 2 before ERR", got)
	}
}
