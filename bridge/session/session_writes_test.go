package session_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/internal/testlog"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestSessionManyLongWritesWithLoss keeps 128 64 KiB WRITEs in flight through a
// session at 5% loss, as perftest's ib_write_bw does; every third one with
// immediate data. Each is posted on the far leg in chunks as it arrives,
// and counted once, by its own opcode, with all its bytes.
func TestSessionManyLongWritesWithLoss(t *testing.T) {
	r := newRig(t, rigOpts{net: simnet.Options{Loss: 0.05, Seed: 11}, delay: 100 * time.Microsecond, poolSize: 64 << 20})
	const n, window, size = 300, 128, 65536
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wcs := make([]transport.WC, 64)
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < window {
			op := transport.OpWrite
			if posted%3 == 2 {
				op = transport.OpWriteWithImm
			}
			if err := r.client.PostSend(transport.SendWR{ID: uint64(posted), Opcode: op, Imm: uint32(posted), Signaled: true,
				Local: transport.SGE{MR: r.cmr, Offset: (posted % 16) * size, Length: size}, Remote: r.far.base + uint64(posted%8)*size, RKey: r.far.rkey}); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		k, err := r.scq.PollWait(ctx, wcs)
		if err != nil {
			t.Fatalf("%d of %d WRITEs completed: %v", done, n, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != transport.StatusSuccess {
				t.Fatalf("WRITE %d: %v", wc.ID, wc.Status)
			}
		}
		done += k
	}
	st := r.sess.Stats().Snapshot()
	withImm := uint64(n / 3)
	var want session.StatsSnapshot
	want.Ops[0][transport.OpWrite], want.Ops[0][transport.OpWriteWithImm] = n-withImm, withImm
	want.Bytes[0][transport.OpWrite], want.Bytes[0][transport.OpWriteWithImm] = (n-withImm)*size, withImm*size
	if d := cmp.Diff(want.Ops, st.Ops); d != "" {
		t.Errorf("operations counted (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want.Bytes, st.Bytes); d != "" {
		t.Errorf("bytes counted (-want +got):\n%s", d)
	}
	if chunks := len(r.far.executed()); chunks <= n {
		t.Errorf("%d WRITEs reached the far leg in %d ops: none in chunks, the count per message proved nothing", n, chunks)
	} else {
		t.Logf("%d WRITEs reached the far leg in %d chunks", n, chunks)
	}
}

// TestSessionRefusesWriteLongerThanAChunk: a WRITE request delivered
// whole (as a peer gateway's Op frame is) that is longer than the pool's
// largest buffer is refused with an invalid request NAK and counted as
// too long, never posted with a length past its buffer (whose next bytes
// are other buffers'); one that fits crosses.
func TestSessionRefusesWriteLongerThanAChunk(t *testing.T) {
	r := newRig(t, rigOpts{clientAccess: transport.AccessRemoteWrite})
	for _, n := range []int{64 << 10, 64<<10 + 1, 128 << 10} {
		clear(r.cmem[:256<<10])
		payload := bytes.Repeat([]byte{0x5c}, n)
		id, reply := r.far.request(transport.Request{Op: transport.OpWrite, VA: r.cmr.Addr(), RKey: r.cmr.RKey(), Length: uint32(n), Payload: payload})
		if n <= 64<<10 {
			if reply.Result != transport.Pending {
				t.Fatalf("a WRITE of %d bytes: reply %v", n, reply.Result)
			}
			waitUntil(t, "the WRITE completed", func() bool { _, ok := r.far.result(id); return ok })
			if res, _ := r.far.result(id); res.status != transport.StatusSuccess || !bytes.Equal(r.cmem[:n], payload) {
				t.Fatalf("a WRITE of %d bytes: %v", n, res.status)
			}
			continue
		}
		if reply.Result != transport.Failed || reply.Status != transport.StatusRemInvReqErr {
			t.Fatalf("a WRITE of %d bytes: reply %v %v, want failed with remote invalid request", n, reply.Result, reply.Status)
		}
		if bytes.ContainsAny(r.cmem[:256<<10], "\x5c") {
			t.Fatalf("a refused WRITE of %d bytes wrote the client's memory", n)
		}
	}
	if got := r.sess.Stats().TooLong[1].Load(); got != 2 {
		t.Errorf("%d too long, want 2", got)
	}
}

// TestSessionWriteAcrossReads: a WRITE whose packets arrive in two
// batches (a receive loop's reads end between them) while an op the
// session posted earlier is in flight on the far leg goes on as one op,
// not cut at the batches' border; one whose next packets do not come is
// posted when the far leg has finished what it had, and with nothing in
// flight a batch's end posts what arrived at once.
func TestSessionWriteAcrossReads(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: 8 << 20, Classes: []int{4 << 10, 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	host := newFakeLeg(1, 1<<20, 0)
	far := newFakeLeg(2, 1<<20, 0)
	far.gate = make(chan struct{})
	s, err := session.New(session.Options{A: host, B: far, Pool: pl, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = s.Close()
		waitUntil(t, "every pool buffer released", func() bool { return pl.Close() == nil })
	}()
	h := host.handler()
	const mtu = 4096
	id := uint32(0)
	// packet hands the session packet i of a WRITE of n packets to
	// remote offset at, as a userspace leg does, ending its batch when
	// flush says so.
	packet := func(at uint64, i, n int, flush bool) {
		t.Helper()
		id++
		q := transport.Request{Op: transport.OpWrite, First: i == 0, Last: i == n-1, Offset: i * mtu,
			VA: far.base + at + uint64(i*mtu), RKey: far.rkey, Length: uint32(n * mtu),
			Payload: bytes.Repeat([]byte{byte(at>>12) + byte(i)}, mtu), Token: transport.ExternalToken(id)}
		if reply := h.Request(&q, nil); reply.Result != transport.Pending {
			t.Fatalf("WRITE at %#x, packet %d of %d: reply %v", at, i, n, reply.Result)
		}
		if flush {
			h.Flush()
		}
	}
	type chunk struct {
		remote uint64
		n      int
	}
	executed := func(want int) []chunk {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%d ops executed", want), func() bool { return len(far.executed()) >= want })
		var got []chunk
		for _, e := range far.executed() {
			if e.op != transport.OpWrite || e.status != transport.StatusSuccess {
				t.Fatalf("far leg executed %v: %v", e.op, e.status)
			}
			got = append(got, chunk{e.remote - far.base, len(e.data)})
		}
		return got
	}
	// Nothing in flight: the batch's end posts the first packet alone.
	packet(0, 0, 2, true)
	// One op in flight: the next WRITE's first packet waits for its
	// second, which the next batch brings.
	packet(0x10000, 0, 2, true)
	packet(0x10000, 1, 2, true)
	packet(0, 1, 2, true)
	far.gate <- struct{}{} // the first packet of the WRITE at 0
	far.gate <- struct{}{} // the WRITE at 0x10000, whole
	far.gate <- struct{}{} // the second packet of the WRITE at 0
	want := []chunk{{0, mtu}, {0x10000, 2 * mtu}, {mtu, mtu}}
	if got := executed(3); !cmp.Equal(got, want, cmp.AllowUnexported(chunk{})) {
		t.Fatalf("the far leg executed %#v, want %#v", got, want)
	}
	// Kept waiting for packets that do not come: posted once what was in
	// flight completed.
	packet(0x20000, 0, 1, true)
	packet(0x30000, 0, 3, true)
	if n := len(far.executed()); n != 3 {
		t.Fatalf("%d ops executed before the far leg was let go, want 3", n)
	}
	far.gate <- struct{}{} // the WRITE at 0x20000: the kept chunk follows
	far.gate <- struct{}{}
	want = append(want, chunk{0x20000, mtu}, chunk{0x30000, mtu})
	if got := executed(5); !cmp.Equal(got, want, cmp.AllowUnexported(chunk{})) {
		t.Fatalf("the far leg executed %#v, want %#v", got, want)
	}
	packet(0x30000, 1, 3, false)
	packet(0x30000, 2, 3, true)
	far.gate <- struct{}{}
	want = append(want, chunk{0x30000 + mtu, 2 * mtu})
	if got := executed(6); !cmp.Equal(got, want, cmp.AllowUnexported(chunk{})) {
		t.Fatalf("the far leg executed %#v, want %#v", got, want)
	}
	// Each op posted completes back what it carried, to the requester.
	waitUntil(t, "every op completed back to its requester", func() bool {
		host.mu.Lock()
		defer host.mu.Unlock()
		return len(host.inDone) == len(want)
	})
	for i, st := range host.inDone {
		if st != transport.StatusSuccess {
			t.Errorf("completion %d to the requester: %v", i, st)
		}
	}
	if got := s.Stats().Ops[0][transport.OpWrite].Load(); got != 4 {
		t.Errorf("%d WRITEs counted, want 4", got)
	}
}

// TestSessionHeldForCredit: a WRITE that finds the pool empty with
// nothing of its own QP pending (the buffers are another session's) is
// held, not refused: no NAK while the pool stays empty, a sequence NAK as
// soon as a buffer frees, and the client sends it again then rather than
// at its retransmit timer (8.4 s here; 2.1 s for a Linux peer the gateway
// dialed). A refusal's NAK would have come at once, and a requester
// honours one per PSN until it sees progress (rxe, and the client here):
// the refusal of its retransmission would have left it to the timer.
func TestSessionHeldForCredit(t *testing.T) {
	r := newRig(t, rigOpts{clientTimeout: 21})
	var taken []*pool.Buf
	for _, n := range []int{256, 4 << 10, 64 << 10} {
		for {
			b, err := r.pool.Get(n)
			if err != nil {
				break
			}
			taken = append(taken, b)
		}
	}
	release := func() {
		for _, b := range taken {
			b.Release()
		}
		taken = nil
	}
	defer func() { release() }()
	const size = 8 << 10
	for i := range size {
		r.cmem[i] = byte(i*7 + 3)
	}
	if err := r.client.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpWrite, Signaled: true,
		Local: transport.SGE{MR: r.cmr, Length: size}, Remote: r.far.base + writeArea, RKey: r.far.rkey}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the WRITE refused for an empty pool", func() bool { return r.sess.Stats().NoCredit[0].Load() >= 1 })
	st := r.clients.Stats()
	// A refusal's NAK and the retransmission it asks for take a round
	// trip on the rig's network: 50 ms is many.
	time.Sleep(50 * time.Millisecond)
	if n := st.RxNAKCodes[roce.NAKPSNSequenceError].Load(); n != 0 {
		t.Errorf("the client got %d sequence NAKs while the pool was empty, want none: a refusal, not a hold", n)
	}
	timeouts := st.Timeouts.Load()
	release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	wcs := make([]transport.WC, 1)
	if _, err := r.scq.PollWait(ctx, wcs); err != nil {
		t.Fatalf("the held WRITE never completed: %v", err)
	}
	if wcs[0].Status != transport.StatusSuccess {
		t.Fatalf("the held WRITE completed %v", wcs[0].Status)
	}
	if !bytes.Equal(r.far.mem[writeArea:writeArea+size], r.cmem[:size]) {
		t.Error("the held WRITE's bytes did not reach the far side")
	}
	if n := st.RxNAKCodes[roce.NAKPSNSequenceError].Load(); n != 1 {
		t.Errorf("the client got %d sequence NAKs, want the one that asked for the WRITE again", n)
	}
	if n := st.Timeouts.Load() - timeouts; n != 0 {
		t.Errorf("the client's retransmit timer fired %d times after the pool had room: it was not asked again", n)
	}
}
