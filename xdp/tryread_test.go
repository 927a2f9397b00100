//go:build linux

package xdp_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// tryReadN reads n packets from c with TryReadBatch (TryReadBatchLent
// when lend, every frame given back), spinning as a busy-polled loop
// does: never a wait inside the read.
func tryReadN(tb testing.TB, c *xdp.Conn, n int, lend bool) []roce.Message {
	tb.Helper()
	var got []roce.Message
	batch := make([]roce.Message, 32)
	for i := range batch {
		batch[i].Buf = make([]byte, roce.MaxPacket)
	}
	deadline := time.Now().Add(testTimeout)
	for len(got) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("read %d of %d packets in %v", len(got), n, testTimeout)
		}
		var k int
		var err error
		if lend {
			k, err = c.TryReadBatchLent(batch[:min(len(batch), n-len(got))])
		} else {
			k, err = c.TryReadBatch(batch[:min(len(batch), n-len(got))])
		}
		if err != nil {
			tb.Fatal(err)
		}
		frames := make([]uint64, 0, k)
		for _, m := range batch[:k] {
			cp := m
			cp.Buf = append([]byte(nil), m.Buf[:m.N]...)
			got = append(got, cp)
			if m.Lent {
				frames = append(frames, m.Frame)
			}
		}
		if len(frames) > 0 {
			c.ReturnFrames(frames)
		}
	}
	return got
}

// TestConnTryRead: a busy-polled loop reads an AF_XDP socket without
// waiting: TryReadBatch (copying) and TryReadBatchLent take what the RX
// ring holds, 0 and no error when it holds nothing, through twenty times
// the fill ring, in order and nothing lost, every lent frame back; after
// Close they say the conn is closed.
func TestConnTryRead(t *testing.T) {
	const ring = 64 // b's rings
	for _, lend := range []bool{false, true} {
		name := "copy"
		if lend {
			name = "lent"
		}
		t.Run(name, func(t *testing.T) {
			needRoot(t)
			a, b := &side{}, &side{ringSize: ring}
			if lend {
				b.frames = &testFrames{}
			}
			setupSides(t, "t", a, b, xdp.BindCopy, xdp.Options{})
			if lend {
				if _, err := a.conn.TryReadBatchLent(make([]roce.Message, 1)); !errors.Is(err, xdp.ErrNotSupported) {
					t.Errorf("TryReadBatchLent without Frames: %v, want ErrNotSupported", err)
				}
			}
			// a resolves b's address before the numbered run.
			sendPackets(t, a.conn, b.addr, 0, sendOnly(b.qpn, 0, nil))
			tryReadN(t, b.conn, 1, lend)
			held := 0
			if lend {
				held = b.frames.outstanding()
			}
			empty := make([]roce.Message, 4)
			for i := range empty {
				empty[i].Buf = make([]byte, roce.MaxPacket)
			}
			if k, err := b.conn.TryReadBatch(empty); k != 0 || err != nil {
				t.Fatalf("TryReadBatch on an empty ring: %d, %v; want 0, nil", k, err)
			}
			const chunk, rounds = 3 * ring / 4, 27 // about twenty fill rings
			pkts := make([][]byte, chunk)
			for r := range rounds {
				for i := range chunk {
					pkts[i] = numbered(b.qpn, r*chunk+i)
				}
				sendPackets(t, a.conn, b.addr, 0, pkts...)
				checkNumbered(t, tryReadN(t, b.conn, chunk, lend), r*chunk)
			}
			st, err := b.conn.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Received != 1+chunk*rounds || st.RXRingDrops != 0 || st.FillShort != 0 {
				t.Errorf("b received %d (want %d), ring drops %d, fill short %d", st.Received, 1+chunk*rounds, st.RXRingDrops, st.FillShort)
			}
			if lend {
				if got := b.frames.outstanding(); got != held {
					t.Errorf("%d frames out after every lent one came back, want the rings' %d", got, held)
				}
			}
			if err := b.conn.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := b.conn.TryReadBatch(empty); !errors.Is(err, roce.ErrConnClosed) {
				t.Errorf("TryReadBatch after Close: %v, want roce.ErrConnClosed", err)
			}
			if lend {
				if _, err := b.conn.TryReadBatchLent(empty); !errors.Is(err, roce.ErrConnClosed) {
					t.Errorf("TryReadBatchLent after Close: %v, want roce.ErrConnClosed", err)
				}
			}
		})
	}
}
