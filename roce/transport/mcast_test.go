package transport_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestMulticast: two UD QPs of one device attached to a group each get
// their own copy of what another device sends to the group (DestQP
// 0xFFFFFF to the group's address), a third with another Q_Key nothing;
// the group's conn is opened on the first attach and closed with the
// last detach, after which nothing is delivered.
func TestMulticast(t *testing.T) {
	n := simnet.New(simnet.Options{})
	a, b := newEnd(t, n, "10.0.0.1:4791"), newEnd(t, n, "10.0.0.2:4791")
	group := netip.MustParseAddr("239.1.2.3")
	const qkey = 0x22222222
	opens := 0
	open := func() (roce.PacketConn, error) { opens++; return n.Listen(netip.AddrPortFrom(group, roce.Port)) }
	udQP := func(e *end, qkey uint32, slot int) (*transport.QP, *transport.CQ) {
		rcq := transport.NewCQ(16)
		qp, err := e.dev.CreateQP(e.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: e.scq, RecvCQ: rcq})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []transport.QPAttr{{State: transport.StateInit, QKey: qkey}, {State: transport.StateRTR}, {State: transport.StateRTS}} {
			if err := qp.Modify(st); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			if err := qp.PostRecv(transport.RecvWR{ID: uint64(i), Local: sge(e, 4096*(slot*4+i), 2048)}); err != nil {
				t.Fatal(err)
			}
		}
		return qp, rcq
	}
	q1, c1 := udQP(a, qkey, 0)
	q2, c2 := udQP(a, qkey, 1)
	q3, c3 := udQP(a, qkey+1, 2)
	for _, qp := range []*transport.QP{q1, q2, q3} {
		if err := a.dev.AttachMulticast(qp, group, open); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.dev.AttachMulticast(q1, group, open); err == nil {
		t.Error("attaching a QP twice: no error")
	}
	if err := a.dev.AttachMulticast(q1, netip.MustParseAddr("10.0.0.9"), open); err == nil {
		t.Error("attaching to a unicast address: no error")
	}
	if opens != 1 {
		t.Errorf("the group's conn opened %d times, want once", opens)
	}
	sender, _ := udQP(b, 0, 3)
	copy(b.mem[65536:], "to the group")
	send := func() {
		t.Helper()
		if err := sender.PostSend(transport.SendWR{Opcode: transport.OpSendWithImm, Imm: 9, Local: sge(b, 65536, 12),
			UD: &transport.UDDest{Addr: netip.AddrPortFrom(group, roce.Port), QPN: transport.MulticastQPN, QKey: qkey}}); err != nil {
			t.Fatal(err)
		}
	}
	send()
	for i, c := range []*transport.CQ{c1, c2} {
		wc := wait(t, c, 1, time.Second)[0]
		slot := i*4 + int(wc.ID)
		if wc.Status != transport.StatusSuccess || wc.ByteLen != 12 || wc.SrcQPN != sender.QPN() || wc.Src.Addr() != b.addr.Addr() ||
			!wc.HasImm || wc.Imm != 9 || string(a.mem[4096*slot:][:12]) != "to the group" {
			t.Errorf("QP %d's copy: %+v %q", i+1, wc, a.mem[4096*slot:][:12])
		}
	}
	noMore(t, c3, "a QP with another Q_Key")
	if err := a.dev.DetachMulticast(q3, group); err != nil {
		t.Fatal(err)
	}
	if err := a.dev.DetachMulticast(q3, group); err == nil {
		t.Error("detaching twice: no error")
	}
	q2.Close() // closing a QP detaches it
	if err := a.dev.DetachMulticast(q1, group); err != nil {
		t.Fatal(err)
	}
	if g := a.dev.MulticastGroups(); len(g) != 0 {
		t.Errorf("groups after the last detach: %v", g)
	}
	send()
	noMore(t, c1, "a QP detached")
	// The group's conn was closed: attaching again opens it anew.
	if err := a.dev.AttachMulticast(q1, group, open); err != nil || opens != 2 {
		t.Errorf("attach again: %v, %d opens, want 2", err, opens)
	}
}

// TestMulticastPolled: a polled group's datagrams reach its QP only when
// its GroupPoller polls (no goroutine reads the conn); a group is either
// polled or not; after the last detach Poll reports the conn closed.
func TestMulticastPolled(t *testing.T) {
	n := simnet.New(simnet.Options{})
	a, b := newEnd(t, n, "10.0.0.1:4791"), newEnd(t, n, "10.0.0.2:4791")
	group := netip.MustParseAddr("239.1.2.4")
	open := func() (roce.PacketConn, error) { return n.Listen(netip.AddrPortFrom(group, roce.Port)) }
	udQP := func(e *end, slot int) (*transport.QP, *transport.CQ) {
		rcq := transport.NewCQ(16)
		qp, err := e.dev.CreateQP(e.pd, transport.QPInitAttr{Type: transport.UD, SendCQ: e.scq, RecvCQ: rcq})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []transport.QPAttr{{State: transport.StateInit, QKey: 7}, {State: transport.StateRTR}, {State: transport.StateRTS}} {
			if err := qp.Modify(st); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			if err := qp.PostRecv(transport.RecvWR{ID: uint64(i), Local: sge(e, 4096*(slot*4+i), 2048)}); err != nil {
				t.Fatal(err)
			}
		}
		return qp, rcq
	}
	q1, c1 := udQP(a, 0)
	q2, _ := udQP(a, 1)
	poller, err := a.dev.AttachMulticastPolled(q1, group, open)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.dev.AttachMulticast(q2, group, open); err == nil {
		t.Error("attaching to a polled group with a reading goroutine: no error")
	}
	sender, _ := udQP(b, 3)
	copy(b.mem[65536:], "polled")
	if err := sender.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: sge(b, 65536, 6),
		UD: &transport.UDDest{Addr: netip.AddrPortFrom(group, roce.Port), QPN: transport.MulticastQPN, QKey: 7}}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	noMore(t, c1, "a polled group before its Poll")
	got := 0
	for deadline := time.Now().Add(time.Second); got == 0 && time.Now().Before(deadline); {
		k, err := poller.Poll()
		if err != nil {
			t.Fatal(err)
		}
		got += k
	}
	if got != 1 {
		t.Fatalf("Poll read %d packets, want 1", got)
	}
	var wcs [2]transport.WC
	if k := c1.Poll(wcs[:]); k != 1 || wcs[0].Status != transport.StatusSuccess || wcs[0].ByteLen != 6 || string(a.mem[4096*int(wcs[0].ID):][:6]) != "polled" {
		t.Fatalf("after Poll the CQ holds %d: %+v", k, wcs[:k])
	}
	if k, err := poller.Poll(); k != 0 || err != nil {
		t.Errorf("Poll with nothing queued: %d, %v; want 0, nil", k, err)
	}
	if err := a.dev.DetachMulticast(q1, group); err != nil {
		t.Fatal(err)
	}
	if _, err := poller.Poll(); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("Poll after the last detach: %v, want ErrConnClosed", err)
	}
}
