package session_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestSessionLongReadsWithLoss reads past every boundary a READ meets in
// the gateway: one byte over the pool's largest buffer, 1 MiB (the far
// leg's outstanding-READ limit in parts), 16 MiB (more than the pool
// holds), at 2% loss with duplicates, the client's PSNs crossing the
// 24-bit wrap. Every byte arrives, each READ reaches the far leg as parts
// no longer than a pool buffer, and (the rig's cleanup) no buffer leaks.
func TestSessionLongReadsWithLoss(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		pool  int
		loss  float64
		// tunnel: through two gateways joined by their quic leg, the far
		// one reading in parts of 16 KiB, completed back over the tunnel
		// in parts that one Completion frame carries.
		tunnel bool
	}{
		{"64KiB+1", []int{64<<10 + 1, 64<<10 + 1, 3}, 8 << 20, 0.02, false},
		{"1MiB", []int{1 << 20, 1 << 20}, 8 << 20, 0.005, false},
		// The pool's 64 KiB class has 2 buffers: parts wait for the
		// responses of earlier ones to be sent, whether or not a part is
		// outstanding to wake them.
		{"16MiB-tiny-pool", []int{16 << 20}, 3 * 128 << 10, 0.0005, false},
		// No loss: what is tested is the parts crossing the tunnel (loss
		// past a tunnel makes a streaming READ's requester wait out its
		// timer, see the README).
		{"1MiB-tunnel", []int{1 << 20, 200 << 10}, 8 << 20, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{net: simnet.Options{Loss: tc.loss, Duplicate: tc.loss / 2, Seed: 5}, delay: 50 * time.Microsecond,
				poolSize: tc.pool, farMem: 17 << 20, clientMem: 17 << 20, clientPSN: 0xffffff - 700,
				tunnel: tc.tunnel, farChunk: 16 << 10})
			far := r.far
			for i := range far.mem {
				far.mem[i] = byte(i*13 + i>>11)
			}
			for i := range r.cmem {
				r.cmem[i] = 0xFF
			}
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			off := 0
			for i, n := range tc.sizes {
				remote := 1000 + i*4099
				if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpRead, Signaled: true,
					Local: transport.SGE{MR: r.cmr, Offset: off, Length: n}, Remote: far.base + uint64(remote), RKey: far.rkey}); err != nil {
					t.Fatal(err)
				}
				off += n
			}
			wcs := make([]transport.WC, 8)
			for done := 0; done < len(tc.sizes); {
				k, err := r.scq.PollWait(ctx, wcs)
				if err != nil {
					t.Fatalf("%d of %d READs completed: %v (session: %v, state %+v)", done, len(tc.sizes), err, r.sess.Err(), r.sess.State())
				}
				for _, wc := range wcs[:k] {
					if wc.Status != transport.StatusSuccess || wc.ID != uint64(done) {
						t.Fatalf("completion %d: READ %d %v", done, wc.ID, wc.Status)
					}
					done++
				}
			}
			off = 0
			for i, n := range tc.sizes {
				remote := 1000 + i*4099
				if got, want := r.cmem[off:off+n], far.mem[remote:remote+n]; !bytes.Equal(got, want) {
					j := 0
					for got[j] == want[j] {
						j++
					}
					t.Fatalf("READ %d of %d bytes: byte %d is %#x, want %#x", i, n, j, got[j], want[j])
				}
				off += n
			}
			parts, longest := 0, 0
			for _, e := range far.executed() {
				if e.op == transport.OpRead {
					parts++
					longest = max(longest, e.n)
				}
			}
			if tc.tunnel && longest > 16<<10 {
				t.Errorf("a READ of %d bytes reached the far leg through the far gateway reading in 16 KiB parts", longest)
			}
			if longest > 64<<10 {
				t.Errorf("a READ of %d bytes reached the far leg: longer than a pool buffer", longest)
			}
			if parts <= len(tc.sizes) {
				t.Errorf("%d READs reached the far leg as %d: none in parts, the test proved nothing", len(tc.sizes), parts)
			}
			st := r.sess.Stats().Snapshot()
			total := 0
			for _, n := range tc.sizes {
				total += n
			}
			if got := st.Ops[0][transport.OpRead]; got != uint64(len(tc.sizes)) {
				t.Errorf("READs counted: %d, want %d", got, len(tc.sizes))
			}
			if got := st.Bytes[0][transport.OpRead]; got != uint64(total) {
				t.Errorf("READ bytes counted: %d, want %d", got, total)
			}
			if tc.pool < 1<<20 && st.PoolWaits[0] == 0 {
				t.Errorf("the pool never ran out of buffers for a part: the wait for one proved nothing")
			}
			if lost := r.net.Stats().Snapshot().Lost; lost == 0 && tc.loss > 0 {
				t.Errorf("the network dropped nothing: the loss proved nothing")
			}
			t.Logf("%d parts on the far leg, the network dropped %d packets", parts, r.net.Stats().Snapshot().Lost)
		})
	}
}

// TestSessionLongSends: a SEND longer than the pool's largest buffer is
// copied into a chain of them that the far leg gathers; one longer than
// the far leg gathers is refused with an invalid request NAK, counted, as
// a responder refuses a SEND longer than its receive. With frames lent
// (AF_XDP), the frames gathered so far move to the chain.
func TestSessionLongSends(t *testing.T) {
	for _, tc := range []struct {
		name   string
		size   int
		maxSGE int
		lend   bool
		want   transport.Status
	}{
		{"64KiB+1", 64<<10 + 1, 2, false, transport.StatusSuccess},
		{"1MiB", 1 << 20, 16, false, transport.StatusSuccess},
		{"1MiB-lent", 1 << 20, 16, true, transport.StatusSuccess},
		// 100 frames lent, 100 KiB: past the largest buffer, they move
		// to a chain at once.
		{"1MiB-lent-100-pieces", 1 << 20, 100, true, transport.StatusSuccess},
		{"1MiB+1-too-long", 1<<20 + 1, 16, false, transport.StatusRemInvReqErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The refusal is a NAK that moves the responder to its error
			// state: were it lost, the requester's retries would find no
			// answer and it would complete with a retry error, as against
			// an HCA. That case runs without loss.
			loss := 0.005
			if tc.want != transport.StatusSuccess {
				loss = 0
			}
			r := newRig(t, rigOpts{net: simnet.Options{Loss: loss, Seed: 9}, poolSize: 16 << 20, maxSGE: tc.maxSGE, lend: tc.lend,
				farMem: 4 << 20, clientMem: 4 << 20})
			for i := range tc.size {
				r.cmem[i] = byte(i*31 + i>>10)
			}
			if err := r.client.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSendWithImm, Imm: 0xabc, Signaled: true,
				Local: transport.SGE{MR: r.cmr, Offset: 0, Length: tc.size}}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			wcs := make([]transport.WC, 1)
			if _, err := r.scq.PollWait(ctx, wcs); err != nil {
				t.Fatalf("the SEND never completed: %v (session %v)", err, r.sess.Err())
			}
			if wcs[0].Status != tc.want {
				t.Fatalf("the SEND completed with %v, want %v", wcs[0].Status, tc.want)
			}
			st := r.sess.Stats().Snapshot()
			if tc.want != transport.StatusSuccess {
				if st.TooLong[0] != 1 {
					t.Errorf("too long counted %d times, want 1", st.TooLong[0])
				}
				return
			}
			var got []byte
			for _, e := range r.far.executed() {
				if e.op == transport.OpSendWithImm && e.imm == 0xabc {
					got = e.data
				}
			}
			if !bytes.Equal(got, r.cmem[:tc.size]) {
				t.Fatalf("the far leg received %d bytes, want the %d sent", len(got), tc.size)
			}
		})
	}
}
