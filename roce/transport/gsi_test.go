package transport_test

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// sent is one packet a recordingConn wrote: its BTH's opcode, destination
// QP and PSN.
type sent struct {
	op  roce.Opcode
	qpn uint32
	psn uint32
}

// recordingConn records the packets written through it, in order.
type recordingConn struct {
	roce.PacketConn
	mu   sync.Mutex
	sent []sent
}

func (c *recordingConn) WriteBatch(msgs []roce.Message) (int, error) {
	c.mu.Lock()
	for _, m := range msgs {
		b := m.Buf
		c.sent = append(c.sent, sent{op: roce.Opcode(b[0]), qpn: uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]),
			psn: uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11])})
	}
	c.mu.Unlock()
	return c.PacketConn.WriteBatch(msgs)
}

// take returns what was sent since the last take.
func (c *recordingConn) take() []sent {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.sent
	c.sent = nil
	return out
}

// TestPostSendAfter: QP 1 lives on queue 0's device and an RC QP on queue
// 1's. A MAD posted after the RC QP leaves by queue 1's conn, after the
// last ACK the QP sent there, and nothing by queue 0's (QP 1's own): the
// order one conn keeps is the order the peer sees. The connection goes on
// undisturbed, and a MAD posted so in the error state follows the QP's
// last ACK too.
func TestPostSendAfter(t *testing.T) {
	n := simnet.New(simnet.Options{})
	var recs []*recordingConn
	var conns []roce.PacketConn
	for _, a := range []string{"10.0.0.1:4791", "10.0.0.1:4792"} {
		c, err := n.Listen(netip.MustParseAddrPort(a))
		if err != nil {
			t.Fatal(err)
		}
		r := &recordingConn{PacketConn: c}
		recs, conns = append(recs, r), append(conns, r)
	}
	devs, err := transport.NewDevices(conns, transport.DeviceOptions{Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		t.Cleanup(func() { d.Close() })
	}
	a := newEnd(t, n, "10.0.0.10:4791") // the peer
	b := &end{dev: devs[1], pd: transport.NewPD(), mem: make([]byte, memSize), addr: netip.MustParseAddrPort("10.0.0.1:4792"),
		scq: transport.NewCQ(64), rcq: transport.NewCQ(64), access: a.access}
	if b.mr, err = b.pd.RegisterMR(b.mem, b.access); err != nil {
		t.Fatal(err)
	}
	connect(t, a, b, connOpts{mtu: 1024, retry: 7, rnrRetry: 7})

	gcq := transport.NewCQ(16)
	gsi, err := devs[0].CreateGSIQP(b.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: gcq, RecvCQ: gcq})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []transport.QPAttr{{State: transport.StateInit, QKey: 0x80010000}, {State: transport.StateRTR}, {State: transport.StateRTS}} {
		if err := gsi.Modify(s); err != nil {
			t.Fatal(err)
		}
	}
	mad := transport.SendWR{Opcode: transport.OpSend, Local: sge(b, 1<<20, 256),
		UD: &transport.UDDest{Addr: a.addr, QPN: transport.GSIQPN, QKey: 0x80010000}}

	// check says queue 1's conn sent the MAD last, right after an ACK of
	// psn (wantAck), and queue 0's conn (QP 1's own) sent nothing.
	check := func(what string, wantAck bool, psn uint32) {
		t.Helper()
		if got := recs[0].take(); len(got) != 0 {
			t.Errorf("%s: queue 0's conn (QP 1's own) sent %+v", what, got)
		}
		got := recs[1].take()
		if len(got) == 0 {
			t.Fatalf("%s: queue 1's conn sent nothing, want the MAD", what)
		}
		m := got[len(got)-1]
		if m.op != roce.UDSendOnly || m.qpn != transport.GSIQPN {
			t.Errorf("%s: last packet %+v, want a UD SEND to QP 1", what, m)
		}
		if !wantAck {
			if len(got) != 1 {
				t.Errorf("%s: queue 1's conn sent %+v, want the MAD alone", what, got)
			}
			return
		}
		if len(got) < 2 {
			t.Fatalf("%s: queue 1's conn sent %+v, want an ACK, then the MAD", what, got)
		}
		if ack := got[len(got)-2]; ack.op != roce.RCAcknowledge || ack.qpn != a.qp.QPN() || ack.psn != psn {
			t.Errorf("%s: %+v before the MAD, want an ACK of PSN %#x to QP %#x", what, ack, psn, a.qp.QPN())
		}
	}

	// Nothing received yet, so nothing acknowledged: the MAD alone.
	recs[1].take()
	if err := gsi.PostSendAfter(b.qp, mad); err != nil {
		t.Fatal(err)
	}
	check("before any ACK", false, 0)

	send := func(id uint64) {
		t.Helper()
		if err := b.qp.PostRecv(transport.RecvWR{ID: id, Local: sge(b, 0, 4096)}); err != nil {
			t.Fatal(err)
		}
		if err := a.qp.PostSend(transport.SendWR{ID: id, Opcode: transport.OpSend, Local: sge(a, 0, 3000), Signaled: true}); err != nil {
			t.Fatal(err)
		}
		checkWC(t, wait(t, a.scq, 1, 5*time.Second)[0], id, transport.OpSend)
		wait(t, b.rcq, 1, 5*time.Second)
	}
	// a's first SEND is 3 packets from 0xfffff0; b acknowledged the last.
	send(1)
	recs[0].take()
	if err := gsi.PostSendAfter(b.qp, mad); err != nil {
		t.Fatal(err)
	}
	check("after a SEND", true, 0xfffff2)
	noMore(t, a.scq, "the requester, after the MAD")

	// The connection goes on: the next SEND crosses the PSN wrap and
	// completes once.
	send(2)
	if err := b.qp.Modify(transport.QPAttr{State: transport.StateError}); err != nil {
		t.Fatal(err)
	}
	if err := gsi.PostSendAfter(b.qp, mad); err != nil {
		t.Fatal(err)
	}
	check("in the error state, after a second SEND", true, 0xfffff5&roce.PSNMask)
	noMore(t, a.scq, "the requester, after the MAD")

	if err := gsi.PostSendAfter(nil, mad); err == nil {
		t.Error("PostSendAfter without an RC QP: no error")
	}
	if err := b.qp.PostSendAfter(b.qp, mad); err == nil {
		t.Error("PostSendAfter on an RC QP: no error")
	}
}
