package ibv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/roce/mcast"
)

// Multicast over rdma_cm's UDP port space between the guest's rxe devices:
// rxe0 (198.18.1.1 on veth0) and rxe1 (198.18.1.2 on br1) share the wire,
// so a datagram rxe0 sends to a group crosses it and rxe1 delivers it to
// the QPs attached there. Each test uses its own group.

// grhLen is the Global Route Header the receive buffer of a UD QP starts
// with; on RoCEv2 with IPv4 its last 20 bytes are the IPv4 header.
const grhLen = 40

// member is an rdma_cm id joined to a group, with a UD QP (attached unless
// the join was send-only) and receives posted in 1 KiB slots.
type member struct {
	ch    *ibv.EventChannel
	id    *ibv.CMID
	pd    *ibv.PD
	cq    *ibv.CQ
	qp    *ibv.QP
	arena *ibv.Arena
	mr    *ibv.MR
	join  ibv.CMEvent // the MULTICAST_JOIN event
	ah    *ibv.AH     // to the group
}

func joinGroup(t *testing.T, local, group netip.Addr, opts ibv.JoinOptions, recvs int) *member {
	t.Helper()
	ctx := ctxT(t)
	m := &member{}
	var err error
	m.ch, err = ibv.NewEventChannel()
	check(t, err)
	t.Cleanup(func() { m.ch.Close() })
	m.id, err = m.ch.NewID(ibv.PortSpaceUDP)
	check(t, err)
	check(t, m.id.ResolveAddr(local, netip.AddrPortFrom(group, 0), 0))
	_, err = m.ch.Expect(ctx, ibv.CMAddrResolved)
	check(t, err)
	dev, err := m.id.Device()
	check(t, err)
	m.pd, err = dev.AllocPD()
	check(t, err)
	t.Cleanup(func() { m.pd.Close() })
	m.cq, err = dev.NewCQ(ibv.CQOptions{Entries: 256})
	check(t, err)
	t.Cleanup(func() { m.cq.Close() })
	m.qp, err = m.id.CreateQP(m.pd, ibv.QPOptions{Type: ibv.QPTypeUD, SendCQ: m.cq, RecvCQ: m.cq,
		Cap: ibv.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
	check(t, err)
	m.arena, err = ibv.MapArena(bufSize, ibv.ArenaOptions{})
	check(t, err)
	t.Cleanup(func() { m.arena.Close() })
	m.mr, err = m.pd.RegMR(m.arena.Bytes(), ibv.AccessAll)
	check(t, err)
	if recvs > 0 {
		post(t, m.qp, recvWRs(m.mr, 0, recvs)...)
	}
	check(t, m.id.JoinMulticast(group, opts))
	m.join, err = m.ch.Expect(ctx, ibv.CMMulticastJoin)
	check(t, err)
	m.ah, err = m.pd.NewAH(m.join.AH)
	check(t, err)
	t.Cleanup(func() { m.ah.Close() })
	return m
}

// checkJoin: the join event names the group as the kernel maps it on
// RoCEv2 (the IPv4-mapped MGID), the multicast QPN and rdma_cm's Q_Key.
func checkJoin(t *testing.T, m *member, group netip.Addr) {
	t.Helper()
	want, err := mcast.Mapping{Form: mcast.RoCEv2}.MGID(group)
	check(t, err)
	if got := mcast.MGID(m.join.AH.GRH.DGID); got != want || !m.join.AH.IsGlobal {
		t.Errorf("join of %v: DGID %v (global %v), want %v", group, got, m.join.AH.IsGlobal, want)
	}
	if m.join.QPN != ibv.MulticastQPN || m.join.QKey != ibv.RDMAUDPQKey {
		t.Errorf("join of %v: QPN %#x Q_Key %#x, want %#x and %#x", group, m.join.QPN, m.join.QKey, ibv.MulticastQPN, ibv.RDMAUDPQKey)
	}
}

// sendGroup sends n datagrams of size bytes to the group, datagram i
// filled from seed+i.
func (m *member) sendGroup(t *testing.T, n, size int, seed byte) {
	t.Helper()
	for i := range n {
		slot := 32 + i%16
		fill(m.arena.Bytes()[slot*1024:][:size], seed+byte(i))
		send(t, m.qp, ibv.SendWR{ID: uint64(i), Op: ibv.OpSend, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(m.mr, slot*1024, size)},
			AH: m.ah, RemoteQPN: m.join.QPN, RemoteQKey: m.join.QKey})
		waitOK(t, m.cq, 1)
	}
}

// srcOfGRH returns the IPv4 source of a received datagram's GRH.
func srcOfGRH(b []byte) netip.Addr { return netip.AddrFrom4([4]byte(b[20+12 : 20+16])) }

// TestGuestMulticastJoin: a receiver on rxe1 joins a group as a full
// member, a sender on rxe0 as a send-only one; both join events name the
// group's MGID, QPN 0xffffff and rdma_cm's Q_Key; what the sender sends to
// the group's address handle reaches the receiver's attached QP, GRH and
// source QPN included; after the receiver leaves, nothing more reaches it.
func TestGuestMulticastJoin(t *testing.T) {
	d := guest.RequireKind(t, "rxe")
	group := netip.MustParseAddr("239.192.0.1")
	const n, size = 8, 200
	rcv := joinGroup(t, d.PeerIP, group, ibv.JoinOptions{}, n+4)
	snd := joinGroup(t, d.IP, group, ibv.JoinOptions{SendOnly: true}, 0)
	checkJoin(t, rcv, group)
	checkJoin(t, snd, group)

	snd.sendGroup(t, n, size, 0x40)
	wcs := waitOK(t, rcv.cq, n)
	for i, wc := range wcs {
		slot := int(wc.ID - 1000)
		buf := rcv.arena.Bytes()[slot*1024:][:grhLen+size]
		want := make([]byte, size)
		fill(want, 0x40+byte(i))
		switch {
		case wc.Opcode != ibv.WCRecv || int(wc.ByteLen) != grhLen+size || wc.Flags&ibv.WCFlagGRH == 0:
			t.Fatalf("datagram %d: %v, %d bytes, flags %v; want a receive of %d with a GRH", i, wc.Opcode, wc.ByteLen, wc.Flags, grhLen+size)
		case wc.SrcQP != snd.qp.QPN():
			t.Errorf("datagram %d from QP %#x, want the sender's %#x", i, wc.SrcQP, snd.qp.QPN())
		case srcOfGRH(buf) != d.IP:
			t.Errorf("datagram %d's GRH names source %v, want %v", i, srcOfGRH(buf), d.IP)
		case !bytes.Equal(buf[grhLen:], want):
			t.Errorf("datagram %d's payload differs", i)
		}
	}
	t.Logf("%d datagrams of %d bytes from QP %#x on %s to group %v (MGID %v) on %s", n, size, snd.qp.QPN(), d.Name, group, mcast.MGID(rcv.join.AH.GRH.DGID), d.Peer)

	check(t, rcv.id.LeaveMulticast(group))
	if err := rcv.id.LeaveMulticast(group); err == nil {
		t.Error("leaving a group twice: no error")
	}
	snd.sendGroup(t, 2, size, 0x80)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var extra [4]ibv.WorkCompletion
	if k, _ := rcv.cq.Wait(ctx, extra[:]); k != 0 {
		t.Errorf("%d datagrams reached a QP that left the group: %s", k, describe(extra[:k]))
	}
	if err := rcv.id.JoinMulticast(netip.MustParseAddr("10.0.0.1"), ibv.JoinOptions{}); err == nil {
		t.Error("joining a unicast address: no error")
	}
}

// mckey (rdma-core's librdmacm/examples/mckey.c) in the UDP port space:
// the receiver joins (-m group -b bind), waits 3 s, then waits for -C
// datagrams of -S bytes and exits 0; the sender (-s, -o for a send-only
// join) joins, waits 3 s and sends -C datagrams to the group.
func runMckey(t *testing.T, ctx context.Context, args ...string) (*exec.Cmd, *bytes.Buffer, <-chan error) {
	t.Helper()
	mckey, err := exec.LookPath("mckey")
	if err != nil {
		t.Fatalf("mckey is part of the guest image: %v", err)
	}
	cmd := exec.CommandContext(ctx, mckey, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	check(t, cmd.Start())
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	return cmd, &out, waited
}

// TestGuestMckeyReceiver: unmodified mckey receives on rxe1 what rbridge's
// send-only member on rxe0 sends to the group. mckey's output is buffered
// until it exits, so the sender cannot see when it joined: it sends a
// datagram every 200 ms until mckey has its count and exits 0.
func TestGuestMckeyReceiver(t *testing.T) {
	d := guest.RequireKind(t, "rxe")
	group := netip.MustParseAddr("239.192.0.2")
	const count, size = 5, 100
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, out, waited := runMckey(t, ctx, "-m", group.String(), "-b", d.PeerIP.String(), "-C", fmt.Sprint(count), "-S", fmt.Sprint(size))
	snd := joinGroup(t, d.IP, group, ibv.JoinOptions{SendOnly: true}, 0)
	checkJoin(t, snd, group)
	sent := 0
	var err error
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case err = <-waited:
			break loop
		case <-tick.C:
			snd.sendGroup(t, 1, size, byte(sent))
			sent++
		case <-ctx.Done():
			err = errors.New("mckey still waiting for its datagrams")
			break loop
		}
	}
	t.Logf("mckey receiver output (%d datagrams sent):\n%s", sent, out)
	if err != nil {
		t.Fatalf("mckey receiver: %v", err)
	}
	if !strings.Contains(out.String(), "data transfers complete") || sent < count {
		t.Errorf("mckey did not receive its %d datagrams (%d sent)", count, sent)
	}
	if want := "joined dgid: ::ffff:" + group.String(); !strings.Contains(out.String(), want) {
		t.Errorf("mckey's output lacks %q: it joined another MGID", want)
	}
}

// TestGuestMckeySender: rbridge's full member on rxe1 receives what
// unmodified mckey sends from rxe0 after a send-only join (-o), and what
// it sends after a full join.
func TestGuestMckeySender(t *testing.T) {
	d := guest.RequireKind(t, "rxe")
	for i, sendOnly := range []bool{true, false} {
		t.Run(fmt.Sprintf("send-only=%v", sendOnly), func(t *testing.T) {
			group := netip.AddrFrom4([4]byte{239, 192, 0, byte(3 + i)})
			const count, size = 5, 100
			rcv := joinGroup(t, d.PeerIP, group, ibv.JoinOptions{}, count+4)
			checkJoin(t, rcv, group)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			args := []string{"-s", "-m", group.String(), "-b", d.IP.String(), "-C", fmt.Sprint(count), "-S", fmt.Sprint(size)}
			if sendOnly {
				args = append(args, "-o")
			}
			_, out, waited := runMckey(t, ctx, args...)
			var err error
			select {
			case err = <-waited:
			case <-ctx.Done():
				err = ctx.Err()
			}
			t.Logf("mckey sender output:\n%s", out)
			if err != nil {
				t.Fatalf("mckey sender: %v", err)
			}
			wcs := waitOK(t, rcv.cq, count)
			src := wcs[0].SrcQP
			for k, wc := range wcs {
				buf := rcv.arena.Bytes()[int(wc.ID-1000)*1024:]
				if int(wc.ByteLen) != grhLen+size || wc.SrcQP != src || srcOfGRH(buf) != d.IP {
					t.Errorf("datagram %d from mckey: %d bytes from QP %#x, GRH source %v; want %d from one QP at %v",
						k, wc.ByteLen, wc.SrcQP, srcOfGRH(buf), grhLen+size, d.IP)
				}
			}
			t.Logf("%d datagrams of %d bytes from mckey's QP %#x", count, size, src)
			ctx2, cancel2 := context.WithTimeout(context.Background(), time.Second)
			defer cancel2()
			var extra [4]ibv.WorkCompletion
			if k, _ := rcv.cq.Wait(ctx2, extra[:]); k != 0 {
				t.Errorf("%d datagrams more than mckey sent: %s", k, describe(extra[:k]))
			}
		})
	}
}
