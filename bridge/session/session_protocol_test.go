package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// tapProtocol is a session.Protocol that records every message it is
// handed, whole, and how many pieces it lay in; it rewrites in place
// those that begin with "flip" (every byte after those four inverted,
// through WriteAt), makes those that begin with "inv!" SEND_WITH_INV of
// tapInv, and refuses those that begin with "bad!".
type tapProtocol struct {
	mu   sync.Mutex
	seen [2][]tapped
	sent [2][]tapSent
}

type tapped struct {
	seq    uint64
	op     transport.Opcode
	data   []byte
	pieces int
}

type tapSent struct {
	tag    uint64
	status transport.Status
}

const tapInv = 0xabcd

var errTapBad = errors.New("a message that begins with bad!")

var _ session.Protocol = (*tapProtocol)(nil)

func (p *tapProtocol) Message(m *session.Message) error {
	data := make([]byte, m.Bytes.Len())
	if n, err := m.Bytes.ReadAt(data, 0); n != len(data) || err != nil {
		return fmt.Errorf("tap: read %d of %d bytes: %v", n, len(data), err)
	}
	p.mu.Lock()
	p.seen[m.Dir] = append(p.seen[m.Dir], tapped{seq: m.Seq, op: m.Opcode, data: data, pieces: len(m.Bytes)})
	p.mu.Unlock()
	switch {
	case bytes.HasPrefix(data, []byte("bad!")):
		return errTapBad
	case bytes.HasPrefix(data, []byte("flip")):
		flipped := make([]byte, len(data)-4)
		for i, b := range data[4:] {
			flipped[i] = ^b
		}
		if _, err := m.Bytes.WriteAt(flipped, 4); err != nil {
			return err
		}
	case bytes.HasPrefix(data, []byte("inv!")):
		m.Opcode, m.InvRKey = transport.OpSendWithInv, tapInv
	}
	m.Tag = m.Seq<<1 | uint64(m.Dir)
	return nil
}

func (p *tapProtocol) Sent(dir int, tag uint64, status transport.Status) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent[dir] = append(p.sent[dir], tapSent{tag, status})
}

func (p *tapProtocol) snapshot() (seen [2][]tapped, sent [2][]tapSent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for d := range 2 {
		seen[d] = append([]tapped(nil), p.seen[d]...)
		sent[d] = append([]tapSent(nil), p.sent[d]...)
	}
	return seen, sent
}

// tapMessage is the i-th test message of n bytes: named by i, rewritten
// ("flip") or retyped ("inv!") every third and fourth.
func tapMessage(i, n int) []byte {
	b := make([]byte, n)
	for j := range b {
		b[j] = byte(i*31 + j*7)
	}
	switch {
	case n < 8:
	case i%3 == 1:
		copy(b, "flip")
	case i%4 == 2:
		copy(b, "inv!")
	default:
		copy(b, "good")
	}
	if n >= 8 {
		b[4], b[5] = byte(i), byte(i>>8)
	}
	return b
}

// relayedAs is what the far side gets of a message the tap accepted.
func relayedAs(b []byte) ([]byte, transport.Opcode) {
	out := append([]byte(nil), b...)
	switch {
	case bytes.HasPrefix(b, []byte("flip")):
		for j := 4; j < len(out); j++ {
			out[j] = ^out[j]
		}
	case bytes.HasPrefix(b, []byte("inv!")):
		return out, transport.OpSendWithInv
	}
	return out, transport.OpSend
}

// TestSessionProtocolSeesEveryMessage: a session's Protocol is handed
// every SEND-family message, each way, whole, in order, wherever its
// bytes lie (assembled in one buffer, received frames lent where they
// lie, a chain of the pool's largest buffers, a far leg's receive); what
// it rewrites in place and retypes is what crosses; and it is told of the
// far side's completion of each, with its tag. One-sided operations pass
// it by.
func TestSessionProtocolSeesEveryMessage(t *testing.T) {
	for _, tc := range []struct {
		name  string
		o     rigOpts
		sizes []int
		// pieces: a message the protocol saw in more than one piece
		pieces bool
	}{
		{"assembled", rigOpts{net: simnet.Options{Loss: 0.02, Seed: 11}}, []int{0, 7, 64, 1000, 1024, 3000, 5000, 20000, 65536}, false},
		// Lent frames gathered (up to 4 packets), longer ones copied, past
		// 64 KiB into a chain of buffers.
		{"lent-and-chained", rigOpts{net: simnet.Options{Loss: 0.02, Seed: 12}, lend: true, maxSGE: 4}, []int{0, 7, 64, 1000, 1024, 3000, 5000, 20000, 70000, 150000}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tap := &tapProtocol{}
			tc.o.protocol = tap
			r := newRig(t, tc.o)
			// The client's SENDs, and a WRITE among them the protocol
			// does not see.
			var wrs []transport.SendWR
			var msgs [][]byte
			off := 0
			for i, n := range tc.sizes {
				m := tapMessage(i, n)
				copy(r.cmem[off:], m)
				msgs = append(msgs, m)
				wrs = append(wrs, transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Offset: off, Length: n}})
				off += n + 64
			}
			wrs = append(wrs, transport.SendWR{ID: 99, Opcode: transport.OpWrite, Signaled: true, Remote: r.far.base, RKey: r.far.rkey,
				Local: transport.SGE{MR: r.cmr, Length: 100}})
			if err := r.client.PostSend(wrs...); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			wcs := make([]transport.WC, len(wrs))
			for got := 0; got < len(wrs); {
				k, err := r.scq.PollWait(ctx, wcs[got:])
				if err != nil {
					t.Fatalf("%d of %d completions: %v (session: %v)", got, len(wrs), err, r.sess.Err())
				}
				for _, wc := range wcs[got : got+k] {
					if wc.Status != transport.StatusSuccess {
						t.Fatalf("client op %d: %v (session: %v)", wc.ID, wc.Status, r.sess.Err())
					}
				}
				got += k
			}
			// The far peer's SENDs, half in pool buffers as a verbs
			// receive lands.
			const far = 12
			for i := range far {
				if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: 4 << 20, Length: 1 << 20}}); err != nil {
					t.Fatal(err)
				}
			}
			var farMsgs [][]byte
			for i := range far {
				m := tapMessage(100+i, []int{16, 300, 4000, 9000}[i%4])
				farMsgs = append(farMsgs, m)
				var pl *pool.Pool
				if i%2 == 0 {
					pl = r.pool
				}
				if reply := r.far.sendOp(pl, m, transport.OpSend, 0); reply.Result != transport.Pending {
					t.Fatalf("far SEND %d: reply %v", i, reply.Result)
				}
				wc := r.receives(1, "the far SEND")[0]
				want, op := relayedAs(m)
				if wc.Status != transport.StatusSuccess || !bytes.Equal(r.cmem[4<<20:4<<20+wc.ByteLen], want) || wc.HasInv != (op == transport.OpSendWithInv) || wc.HasInv && wc.InvRKey != tapInv {
					t.Fatalf("far SEND %d reached the client as %+v, not as the protocol left it", i, wc)
				}
			}

			seen, sent := tap.snapshot()
			// Seen whole, in order, numbered from 1, each way.
			for d, want := range [][][]byte{msgs, farMsgs} {
				if len(seen[d]) != len(want) {
					t.Fatalf("direction %d: the protocol saw %d messages, want %d", d, len(seen[d]), len(want))
				}
				for i, m := range seen[d] {
					if m.seq != uint64(i+1) || m.op != transport.OpSend || !bytes.Equal(m.data, want[i]) {
						t.Fatalf("direction %d: message %d seen as seq %d %v of %d bytes, want seq %d SEND of %d bytes", d, i, m.seq, m.op, len(m.data), i+1, len(want[i]))
					}
				}
			}
			split := 0
			for _, m := range seen[0] {
				if m.pieces > 1 {
					split++
				}
			}
			if tc.pieces != (split > 0) {
				t.Errorf("%d messages seen in more than one piece: the path under test was not (or was) taken", split)
			}
			// What crossed is what the protocol left.
			var execs []farExec
			for _, e := range r.far.executed() {
				if e.op != transport.OpWrite {
					execs = append(execs, e)
				}
			}
			if len(execs) != len(msgs) {
				t.Fatalf("the far side got %d messages, want %d", len(execs), len(msgs))
			}
			for i, e := range execs {
				want, op := relayedAs(msgs[i])
				if e.op != op || !bytes.Equal(e.data, want) || op == transport.OpSendWithInv && e.inv != tapInv {
					t.Fatalf("message %d reached the far side as a %v (inv %#x) of %d bytes, not as the protocol left it", i, e.op, e.inv, len(e.data))
				}
			}
			// Told of each completion, in order, with its tag.
			waitUntil(t, "the protocol told of every completion", func() bool {
				_, sent = tap.snapshot()
				return len(sent[0]) == len(msgs) && len(sent[1]) == far
			})
			for d := range 2 {
				for i, s := range sent[d] {
					if want := uint64(i+1)<<1 | uint64(d); s.tag != want || s.status != transport.StatusSuccess {
						t.Fatalf("direction %d: completion %d: tag %#x %v, want tag %#x success", d, i, s.tag, s.status, want)
					}
				}
			}
			if st := r.net.Stats(); st.Lost.Load() == 0 {
				t.Error("the network lost nothing: the test proved nothing of retransmitted packets")
			}
		})
	}
}

// TestSessionProtocolRefuses: a message the protocol refuses fails back
// to its sender (an invalid request NAK to a userspace requester, an
// error completion to a far leg's), never reaches the far side, nor does
// anything after it, and the session ends with an error that names the
// message and wraps the protocol's.
func TestSessionProtocolRefuses(t *testing.T) {
	bad := append([]byte("bad!"), bytes.Repeat([]byte{0x5a}, 2000)...)
	t.Run("from the client", func(t *testing.T) {
		tap := &tapProtocol{}
		r := newRig(t, rigOpts{protocol: tap})
		copy(r.cmem, tapMessage(0, 100))
		copy(r.cmem[4096:], bad)
		copy(r.cmem[8192:], tapMessage(2, 100))
		if err := r.client.PostSend(
			transport.SendWR{ID: 0, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Length: 100}},
			transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Offset: 4096, Length: len(bad)}},
			transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Offset: 8192, Length: 100}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var got []transport.WC
		wcs := make([]transport.WC, 3)
		for len(got) < 3 {
			k, err := r.scq.PollWait(ctx, wcs)
			if err != nil {
				t.Fatalf("%d of 3 completions: %v", len(got), err)
			}
			got = append(got, wcs[:k]...)
		}
		if got[0].Status != transport.StatusSuccess || got[1].Status != transport.StatusRemInvReqErr || got[2].Status == transport.StatusSuccess {
			t.Fatalf("the client's SENDs completed %v, %v, %v: want success, the refusal (remote invalid request), a failure",
				got[0].Status, got[1].Status, got[2].Status)
		}
		checkRefused(t, r, "message 2 from A to B, a SEND of 2004 bytes: 62 61 64 21 5a")
		for _, e := range r.far.executed() {
			if !bytes.Equal(e.data, tapMessage(0, 100)) {
				t.Errorf("the far side got a %v of %d bytes besides the first message", e.op, len(e.data))
			}
		}
	})
	t.Run("from the far side", func(t *testing.T) {
		tap := &tapProtocol{}
		r := newRig(t, rigOpts{protocol: tap})
		if err := r.client.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: r.cmr, Length: 8192}}); err != nil {
			t.Fatal(err)
		}
		if reply := r.far.sendOp(r.pool, bad, transport.OpSendWithImm, 7); reply.Result != transport.Failed {
			t.Fatalf("the refused far SEND: reply %v, want failed", reply.Result)
		}
		checkRefused(t, r, "message 1 from B to A, a SEND_WITH_IMM of 2004 bytes: 62 61 64 21 5a")
		// The client received nothing, its receive flushes or stays.
		if k := r.rcq.Poll(make([]transport.WC, 1)); k > 0 {
			t.Error("the client received a message the protocol refused")
		}
	})
}

// checkRefused waits for r's session to end, and checks its error.
func checkRefused(t *testing.T, r *rig, describes string) {
	t.Helper()
	select {
	case <-r.sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end after the refusal")
	}
	err := r.sess.Err()
	if !errors.Is(err, session.ErrRefused) || !errors.Is(err, errTapBad) || !strings.Contains(err.Error(), describes) {
		t.Errorf("the session ended with %v: want ErrRefused, wrapping the protocol's error, naming %q", err, describes)
	}
}
