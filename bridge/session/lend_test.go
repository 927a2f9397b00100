package session_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
)

// lendingConn is a simulated AF_XDP socket over the pool: each packet the
// inner conn receives is written into a pool frame (as a NIC writes into
// the UMEM) and lent, as xdp.Conn lends with ConnOptions.Frames.
type lendingConn struct {
	roce.PacketConn
	frames  *pool.Frames
	arena   []byte
	scratch []roce.Message
	dropped atomic.Uint64 // no free frame: the packet is lost, as on a NIC
}

var _ roce.FrameLender = (*lendingConn)(nil)

const frameHeadroom = 256 // a packet lands past the frame's start, as on AF_XDP

func newLendingConn(inner roce.PacketConn, pl *pool.Pool) (*lendingConn, error) {
	f, err := pl.Frames(4096)
	if err != nil {
		return nil, err
	}
	return &lendingConn{PacketConn: inner, frames: f, arena: pl.Arena()}, nil
}

func (c *lendingConn) LendsFrames() bool { return true }

func (c *lendingConn) ReadBatchLent(msgs []roce.Message) (int, error) {
	if len(c.scratch) < len(msgs) {
		c.scratch = make([]roce.Message, len(msgs))
		for i := range c.scratch {
			c.scratch[i].Buf = make([]byte, roce.MaxPacket)
		}
	}
	n, err := c.PacketConn.ReadBatch(c.scratch[:len(msgs)])
	if err != nil {
		return 0, err
	}
	k := 0
	for _, m := range c.scratch[:n] {
		off, ok := c.frames.AllocFrame()
		if !ok || m.N > 4096-frameHeadroom {
			if ok {
				c.frames.FreeFrame(off)
			}
			c.dropped.Add(1)
			continue
		}
		at := int(off) + frameHeadroom
		copy(c.arena[at:], m.Buf[:m.N])
		msgs[k] = roce.Message{Buf: c.arena[at : at+m.N : at+m.N], N: m.N, Addr: m.Addr, ECN: m.ECN, Lent: true, Frame: off}
		k++
	}
	return k, nil
}

func (c *lendingConn) ReturnFrames(frames []uint64) {
	for _, f := range frames {
		c.frames.FreeFrame(f)
	}
}

// TestSessionRelaysFromLentFrames: over a conn that lends its frames (the
// AF_XDP leg over the pool), the session relays SEND and WRITE payloads to
// a far leg that gathers from where they landed: every op of every kind
// still completes exactly once with the right bytes, under loss too, and
// nothing is copied toward the far leg. A far leg that gathers fewer
// pieces than a SEND has gets it copied together, still right.
func TestSessionRelaysFromLentFrames(t *testing.T) {
	for _, tc := range []struct {
		name   string
		net    simnet.Options
		maxSGE int
	}{
		{"lossless", simnet.Options{}, 128},
		{"loss1", simnet.Options{Loss: 0.01, Seed: 4}, 128},
		{"dup-reorder", simnet.Options{Duplicate: 0.03, Reorder: 0.03, Seed: 5}, 128},
		{"few-sges", simnet.Options{Loss: 0.01, Seed: 6}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{net: tc.net, delay: 200 * time.Microsecond, lend: true, maxSGE: tc.maxSGE})
			r.workload(300, 16, 9)
			st := r.sess.Stats().Snapshot()
			copied, relayed := st.Copied[0], st.TotalBytes(0)
			t.Logf("relayed %d ops, %d bytes toward the far leg, %d copied; %d ops gathered; %d packets found no frame",
				st.TotalOps(0), relayed, copied, r.far.gathered, r.lender.dropped.Load())
			if r.far.gathered == 0 {
				t.Fatal("no op reached the far leg gathered from frames: the test proved nothing")
			}
			switch {
			case tc.maxSGE >= 128 && copied != 0:
				t.Errorf("%d of %d bytes copied toward a far leg that gathers %d pieces: want 0", copied, relayed, tc.maxSGE)
			case tc.maxSGE < 128 && copied == 0:
				t.Errorf("nothing copied toward a far leg that gathers %d pieces: long SENDs must be copied together", tc.maxSGE)
			}
			if tc.net.Loss > 0 && r.net.Stats().Lost.Load() == 0 {
				t.Error("the network lost nothing: the test proved nothing")
			}
		})
	}
}
