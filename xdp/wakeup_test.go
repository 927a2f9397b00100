//go:build linux

package xdp_test

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// TestConnWakeup: a Conn binds with XDP_USE_NEED_WAKEUP, or without when
// the options or the kernel say so, says which in Wakeup, and in each case
// loses no packet across a send larger than its TX and completion rings
// nor across many times its fill ring, its counts of system calls made and
// skipped following the kernel's flags: in copy mode (veth) a sendto for
// every TX budget of packets and none for the fill ring.
func TestConnWakeup(t *testing.T) {
	const ring = 64 // a's rings; b's are 2048
	for _, tc := range []struct {
		name     string
		noWakeup bool // ConnOptions.NoNeedWakeup
		refuse   bool // the kernel refuses the bind flag
		lend     bool // a reads with ReadBatchLent, its fill ring topped up from Frames
		want     bool // Wakeup.NeedWakeup
		why      string
	}{
		{name: "need-wakeup", want: true},
		{name: "need-wakeup-lent", lend: true, want: true},
		{name: "off-by-options", noWakeup: true, why: "turned off by the options"},
		{name: "refused-by-kernel", refuse: true, why: "the kernel refused it: bind: invalid argument"},
		{name: "refused-by-kernel-lent", refuse: true, lend: true, why: "the kernel refused it: bind: invalid argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			needRoot(t)
			if tc.refuse {
				refused, undo := xdp.RefuseNeedWakeup()
				defer func() {
					undo()
					if refused.Load() == 0 {
						t.Error("no bind with XDP_USE_NEED_WAKEUP was refused: the test proved nothing")
					}
				}()
			}
			a := &side{ringSize: ring, noNeedWakeup: tc.noWakeup}
			b := &side{noNeedWakeup: tc.noWakeup}
			if tc.lend {
				a.frames = &testFrames{}
			}
			setupSides(t, "w", a, b, xdp.BindCopy, xdp.Options{})
			for _, s := range []*side{a, b} {
				w := s.conn.Wakeup()
				if w.NeedWakeup != tc.want || !strings.Contains(w.NoNeedWakeup, tc.why) || (tc.why == "") != (w.NoNeedWakeup == "") {
					t.Errorf("%s: Wakeup %+v, want NeedWakeup %v, NoNeedWakeup %q", s.ifc, w, tc.want, tc.why)
				}
			}
			wa := a.conn.Wakeup()
			if wa.TXBudget != ring && (wa.TXBudget != 32 || wa.NoTXBudget == "") {
				t.Errorf("a's TX budget %d (%q), want the ring's %d, or the kernel's 32 and why", wa.TXBudget, wa.NoTXBudget, ring)
			}

			// Each side resolves the other first: packets to a neighbour
			// being resolved are held, 64 at most.
			sendPackets(t, a.conn, b.addr, 0, sendOnly(b.qpn, 0, nil))
			readN(t, b.conn, 1)
			sendPackets(t, b.conn, a.addr, 0, sendOnly(a.qpn, 0, nil))
			if tc.lend {
				a.conn.ReturnFrames([]uint64{readLent(t, a.conn, 1)[0].Frame})
			} else {
				readN(t, a.conn, 1)
			}

			// a -> b: one WriteBatch of 16 times a's TX and completion
			// rings; b's RX ring takes it all without a read.
			const sent = 16 * ring
			pkts := make([][]byte, sent)
			for i := range pkts {
				pkts[i] = numbered(b.qpn, i)
			}
			sendPackets(t, a.conn, b.addr, 0, pkts...)
			checkNumbered(t, readN(t, b.conn, sent), 0)

			// b -> a: 15 times a's fill ring, in sends of three quarters
			// of it, each read before the next is sent.
			const chunk, rounds = 3 * ring / 4, 20
			for r := range rounds {
				for i := range chunk {
					pkts[i] = numbered(a.qpn, r*chunk+i)
				}
				sendPackets(t, b.conn, a.addr, 0, pkts[:chunk]...)
				var got []roce.Message
				if tc.lend {
					got = readLent(t, a.conn, chunk)
					frames := make([]uint64, len(got))
					for i, m := range got {
						frames[i] = m.Frame
					}
					defer a.conn.ReturnFrames(frames)
				} else {
					got = readN(t, a.conn, chunk)
				}
				checkNumbered(t, got, r*chunk)
			}

			sa, errA := a.conn.Stats()
			sb, errB := b.conn.Stats()
			if errA != nil || errB != nil {
				t.Fatal(errA, errB)
			}
			t.Logf("a: %+v", sa)
			t.Logf("b: %+v", sb)
			if sa.Sent != 1+sent || sb.Received != 1+sent || sb.Sent != 1+chunk*rounds || sa.Received != 1+chunk*rounds {
				t.Errorf("a sent %d and received %d, b sent %d and received %d; want 1 + %d, 1 + %d", sa.Sent, sa.Received, sb.Sent, sb.Received, sent, chunk*rounds)
			}
			if sa.RXRingDrops != 0 || sb.RXRingDrops != 0 || sa.FillShort != 0 {
				t.Errorf("ring drops a %d, b %d, a's fill short %d; want none", sa.RXRingDrops, sb.RXRingDrops, sa.FillShort)
			}
			// Copy mode: the TX flag stays set and the fill ring's is
			// never set (ring.needsWakeup), with the bind flag or not.
			if least := uint64(sent / wa.TXBudget); sa.TXKicks < least || sa.TXKicksSkipped != 0 {
				t.Errorf("a's TX kicks %d made, %d skipped; want at least %d (the sent / the budget) and none skipped", sa.TXKicks, sa.TXKicksSkipped, least)
			}
			if sa.FillKicks != 0 || sb.FillKicks != 0 || sa.FillKicksSkipped == 0 {
				t.Errorf("fill kicks a %d (%d skipped), b %d; want none made, some skipped", sa.FillKicks, sa.FillKicksSkipped, sb.FillKicks)
			}
		})
	}
}

// numbered is a SEND_ONLY to qpn with PSN i and i in its payload.
func numbered(qpn uint32, i int) []byte {
	payload := make([]byte, 64)
	binary.BigEndian.PutUint32(payload, uint32(i))
	return sendOnly(qpn, uint32(i), payload)
}

// checkNumbered checks that msgs are numbered packets first, first+1, ...
func checkNumbered(tb testing.TB, msgs []roce.Message, first int) {
	tb.Helper()
	for i, m := range msgs {
		var p roce.Packet
		if err := p.Decode(m.Buf[:m.N]); err != nil {
			tb.Fatalf("packet %d: %v", first+i, err)
		}
		if psn, n := p.BTH.PSN(), binary.BigEndian.Uint32(p.Payload); psn != uint32(first+i) || n != uint32(first+i) {
			tb.Fatalf("packet %d: PSN %d, number %d: lost or out of order", first+i, psn, n)
		}
	}
}
