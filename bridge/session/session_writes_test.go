package session_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/session"

	"github.com/google/go-cmp/cmp"

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
