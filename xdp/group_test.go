//go:build linux

package xdp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/mcast"
	rdma "github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
	"github.com/rbridge/rbridge/xdp"
)

// udEnd is a UD QP of the userspace transport with receives posted.
type udEnd struct {
	dev *rdma.Device
	mr  *rdma.MR
	qp  *rdma.QP
	scq *rdma.CQ
	rcq *rdma.CQ
}

const (
	groupQKey = 0x01234567 // rdma_cm's Q_Key for UDP port space groups (RDMA_UDP_QKEY)
	udSlot    = 4096
	udSlots   = 32
)

// newUDEnd makes the device and its QP, after skip QPs that give the QP
// another number than the other end's.
func newUDEnd(t *testing.T, conn roce.PacketConn, skip int) *udEnd {
	t.Helper()
	dev, err := rdma.NewDevice(conn, rdma.DeviceOptions{Logger: testLogger(t), IdleWake: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	pd := rdma.NewPD()
	e := &udEnd{dev: dev, scq: rdma.NewCQ(udSlots), rcq: rdma.NewCQ(udSlots)}
	for range skip {
		if _, err := dev.CreateQP(pd, rdma.QPInitAttr{Type: rdma.UD, SendCQ: e.scq, RecvCQ: e.rcq}); err != nil {
			t.Fatal(err)
		}
	}
	if e.mr, err = pd.RegisterMR(make([]byte, 2*udSlots*udSlot), rdma.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if e.qp, err = dev.CreateQP(pd, rdma.QPInitAttr{Type: rdma.UD, SendCQ: e.scq, RecvCQ: e.rcq, MaxRecvWR: udSlots}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []rdma.QPAttr{{State: rdma.StateInit, QKey: groupQKey}, {State: rdma.StateRTR}, {State: rdma.StateRTS}} {
		if err := e.qp.Modify(a); err != nil {
			t.Fatal(err)
		}
	}
	for i := range udSlots {
		if err := e.qp.PostRecv(rdma.RecvWR{ID: uint64(i), Local: rdma.SGE{MR: e.mr, Offset: i * udSlot, Length: udSlot}}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// send sends payload to the group from the second half of the MR.
func (e *udEnd) send(t *testing.T, to netip.Addr, payload []byte) {
	t.Helper()
	off := udSlots * udSlot
	copy(e.mr.Buf()[off:], payload)
	err := e.qp.PostSend(rdma.SendWR{Opcode: rdma.OpSend, Local: rdma.SGE{MR: e.mr, Offset: off, Length: len(payload)},
		UD: &rdma.UDDest{Addr: netip.AddrPortFrom(to, roce.Port), QPN: rdma.MulticastQPN, QKey: groupQKey}})
	if err != nil {
		t.Fatal(err)
	}
}

// recv waits for n datagrams and checks each came from src's QP srcQPN
// with the payload want(i), reposting the receives.
func (e *udEnd) recv(t *testing.T, what string, n int, src netip.Addr, srcQPN uint32, want func(int) []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	wcs := make([]rdma.WC, n)
	for got := 0; got < n; {
		k, err := e.rcq.PollWait(ctx, wcs[got:])
		if err != nil {
			t.Fatalf("%s: %d of %d datagrams: %v", what, got, n, err)
		}
		for _, wc := range wcs[got : got+k] {
			data := e.mr.Buf()[int(wc.ID)*udSlot:][:wc.ByteLen]
			if wc.Status != rdma.StatusSuccess || wc.Src.Addr().Unmap() != src || wc.SrcQPN != srcQPN || !bytes.Equal(data, want(got)) {
				t.Errorf("%s: datagram %d: %+v (%v) %q, want from %v QP %#x %q", what, got, wc, wc.Status, data, src, srcQPN, want(got))
			}
			if err := e.qp.PostRecv(rdma.RecvWR{ID: wc.ID, Local: rdma.SGE{MR: e.mr, Offset: int(wc.ID) * udSlot, Length: udSlot}}); err != nil {
				t.Fatal(err)
			}
			got++
		}
	}
}

// maddrs returns `ip maddr show dev ifc` in the namespace.
func maddrs(t *testing.T, ns *netns, ifc string) string {
	t.Helper()
	out, err := exec.Command("ip", "-n", ns.name, "maddr", "show", "dev", ifc).CombinedOutput()
	if err != nil {
		t.Fatalf("ip maddr: %v: %s", err, out)
	}
	return string(out)
}

// hasMaddr reports whether `ip maddr` output lists the address with the
// family word (link, inet, inet6).
func hasMaddr(out, family, addr string) bool {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == family && f[1] == addr {
			return true
		}
	}
	return false
}

// TestGroupOverAFXDP: a UD QP of the userspace transport on an AF_XDP Conn,
// attached to a group through Conn.JoinGroup, receives what a transport
// in the peer namespace sends to the group through kernel sockets (its
// member socket bound to the group), and what it sends reaches that
// member, to the group's Ethernet address; the interface holds the group's
// membership while joined and not after; the classifier's and the Conn's
// counters count exactly those datagrams, and another group's go to the
// kernel. Over IPv4 (IGMP, 01:00:5e) and IPv6 (MLD, 33:33).
func TestGroupOverAFXDP(t *testing.T) {
	for _, fam := range []struct {
		name, tag    string
		local, peer  string // the veth ends' addresses
		group, other string
		ethType      uint16
		maddrFamily  string // how `ip maddr` names the family
	}{
		{"ipv4", "g4", "10.99.0.1", "10.99.0.2", "239.1.1.1", "239.1.1.2", unix.ETH_P_IP, "inet"},
		{"ipv6", "g6", "fd00:99::1", "fd00:99::2", "ff0e::1:2", "ff0e::1:3", unix.ETH_P_IPV6, "inet6"},
	} {
		t.Run(fam.name, func(t *testing.T) {
			testGroupOverAFXDP(t, fam.tag, netip.MustParseAddr(fam.local), netip.MustParseAddr(fam.peer),
				netip.MustParseAddr(fam.group), netip.MustParseAddr(fam.other), fam.ethType, fam.maddrFamily)
		})
	}
}

func testGroupOverAFXDP(t *testing.T, tag string, local, peer, group, other netip.Addr, ethType uint16, maddrFamily string) {
	a := &side{}
	nsA, nsB := newNetns(t, nsName(tag+"a")), newNetns(t, nsName(tag+"b"))
	ifA, ifB := vethPair(t, nsA, nsB, "10.99.0.1/24", "10.99.0.2/24", "02:00:00:00:99:0a", "02:00:00:00:99:0b")
	if local.Is6() {
		// No duplicate address detection: the addresses are usable at once.
		ipCmd(t, "-n", nsA.name, "addr", "add", local.String()+"/64", "dev", ifA, "nodad")
		ipCmd(t, "-n", nsB.name, "addr", "add", peer.String()+"/64", "dev", ifB, "nodad")
	}
	a.ns, a.ifc, a.addr, a.qpn = nsA, ifA, netip.AddrPortFrom(local, roce.Port), 0x11
	a.start(t, 0, xdp.BindAuto, xdp.Options{})
	peerAddr := netip.AddrPortFrom(peer, roce.Port)

	// The AF_XDP side: the group's conn from JoinGroup.
	ea := newUDEnd(t, a.conn, 0)
	var joined *xdp.GroupConn
	open := func() (roce.PacketConn, error) {
		var err error
		a.ns.do(func() { joined, err = a.conn.JoinGroup(group) })
		return joined, err
	}
	if err := ea.dev.AttachMulticast(ea.qp, group, open); err != nil {
		t.Fatal(err)
	}
	mac, err := mcast.EthernetMAC(group)
	if err != nil {
		t.Fatal(err)
	}
	if m := maddrs(t, a.ns, a.ifc); !hasMaddr(m, maddrFamily, group.String()) || !hasMaddr(m, "link", mac.String()) {
		t.Errorf("%s while joined: no %v or %v in\n%s", a.ifc, group, mac, m)
	}
	if _, err := a.conn.JoinGroup(group); err == nil {
		t.Error("joining a group twice: no error")
	}

	// The peer: the transport on kernel UDP sockets, a member of the group.
	var pconn, member *udpconn.Conn
	var capture int
	nsB.do(func() {
		var ifi *net.Interface
		if ifi, err = net.InterfaceByName(ifB); err != nil {
			return
		}
		if pconn, err = udpconn.Listen(udpconn.Options{Addr: peerAddr}); err != nil {
			return
		}
		if member, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(group, roce.Port), Interface: ifi.Index}); err != nil {
			return
		}
		capture, err = packetSocket(ifi.Index, ethType)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(capture) })
	eb := newUDEnd(t, pconn, 1)
	if err := eb.dev.AttachMulticast(eb.qp, group, func() (roce.PacketConn, error) { return member, nil }); err != nil {
		t.Fatal(err)
	}

	const n = 16
	toA := func(i int) []byte { return fmt.Appendf(nil, "to the AF_XDP leg %d", i) }
	toB := func(i int) []byte { return fmt.Appendf(nil, "to the members %d", i) }

	// Peer to group: one to another group first (the kernel's), then n.
	eb.send(t, other, []byte("not joined"))
	for i := range n {
		eb.send(t, group, toA(i))
	}
	ea.recv(t, "AF_XDP QP", n, peerAddr.Addr(), eb.qp.QPN(), toA)
	// The IP stack loops a member's own sends back to it (IP_MULTICAST_LOOP).
	eb.recv(t, "member, its own", n, peerAddr.Addr(), eb.qp.QPN(), toA)
	gc, err := a.prog.GroupCounters(group)
	if err != nil {
		t.Fatal(err)
	}
	if gc.Packets != n {
		t.Errorf("classifier: %d datagrams to %v, want %d", gc.Packets, group, n)
	}
	if c := counters(t, a.prog); c.Unjoined != 1 || c.Redirected < n || c.NoSocket != 0 {
		t.Errorf("classifier: %d to groups not joined (want 1), %d redirected (want at least %d), %d without socket", c.Unjoined, c.Redirected, n, c.NoSocket)
	}
	st, err := a.conn.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(xdp.ConnStats{GroupReceived: n}, xdp.ConnStats{GroupReceived: st.GroupReceived, GroupOverflow: st.GroupOverflow,
		GroupUnjoined: st.GroupUnjoined, BadFrames: st.BadFrames, BadICRC: st.BadICRC, TooLong: st.TooLong}); diff != "" {
		t.Errorf("conn stats (-want +got):\n%s", diff)
	}

	// AF_XDP to group: the member socket gets each, sent to the group's
	// Ethernet address.
	for i := range n {
		ea.send(t, group, toB(i))
	}
	eb.recv(t, "member", n, a.addr.Addr(), ea.qp.QPN(), toB)
	if got := capturedMAC(t, capture, ethType, a.addr.Addr(), group); got != mac {
		t.Errorf("to %v: Ethernet destination %v, want %v", group, got, mac)
	}

	// Detached: the classifier forgets the group, the interface leaves it,
	// and what the peer sends to it goes to the kernel.
	if err := ea.dev.DetachMulticast(ea.qp, group); err != nil {
		t.Fatal(err)
	}
	if _, err := a.prog.GroupCounters(group); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("classifier after the detach: %v, want ErrKeyNotExist", err)
	}
	if m := maddrs(t, a.ns, a.ifc); hasMaddr(m, maddrFamily, group.String()) {
		t.Errorf("%s after the detach still holds %v:\n%s", a.ifc, group, m)
	}
	if _, err := joined.ReadBatch(make([]roce.Message, 1)); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("ReadBatch of the group's closed conn: %v, want ErrConnClosed", err)
	}
	eb.send(t, group, []byte("after the detach"))
	eb.recv(t, "member, its own", 1, peerAddr.Addr(), eb.qp.QPN(), func(int) []byte { return []byte("after the detach") })
	deadline := time.Now().Add(testTimeout)
	for counters(t, a.prog).Unjoined != 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := counters(t, a.prog); c.Unjoined != 2 {
		t.Errorf("classifier after the detach: %d to groups not joined, want 2", c.Unjoined)
	}
	if st, _ := a.conn.Stats(); st.GroupReceived != n {
		t.Errorf("conn after the detach: %d group datagrams, want %d", st.GroupReceived, n)
	}
}

// packetSocket opens an AF_PACKET socket that sees the interface's frames
// of the EtherType.
func packetSocket(ifindex int, ethType uint16) (int, error) {
	proto := int(htons(ethType))
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("AF_PACKET socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifindex}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind AF_PACKET socket: %w", err)
	}
	tv := unix.NsecToTimeval(testTimeout.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// capturedMAC returns the Ethernet destination of the first RoCEv2 frame
// from src to dst the packet socket saw.
func capturedMAC(t *testing.T, fd int, ethType uint16, src, dst netip.Addr) mcast.MAC {
	t.Helper()
	buf := make([]byte, 4096)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("no frame from %v to %v captured: %v", src, dst, err)
		}
		var f roce.Frame
		if f.DecodeEthernet(buf[:n]) != nil || f.Src.Addr() != src || f.Dst.Addr() != dst {
			continue
		}
		if binary.BigEndian.Uint16(buf[12:]) != ethType {
			continue
		}
		return mcast.MAC(buf[:6])
	}
}

// TestGroupPolledOverAFXDP: a group's conn from JoinGroup read without
// waiting (TryReadBatch), as a busy-polled group reads it through
// transport.Device.AttachMulticastPolled: nothing to read is 0 and no
// error; what the peer sends to the group is in the queue once the Conn
// (read by the device) took it, and each poll hands it to the QP; the
// classifier's and the Conn's counters count exactly those datagrams;
// once detached, a poll says the conn is closed.
func TestGroupPolledOverAFXDP(t *testing.T) {
	a := &side{}
	nsA, nsB := newNetns(t, nsName("gpa")), newNetns(t, nsName("gpb"))
	ifA, ifB := vethPair(t, nsA, nsB, "10.99.0.1/24", "10.99.0.2/24", "02:00:00:00:99:0a", "02:00:00:00:99:0b")
	local, peer, group := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2"), netip.MustParseAddr("239.1.1.7")
	a.ns, a.ifc, a.addr, a.qpn = nsA, ifA, netip.AddrPortFrom(local, roce.Port), 0x11
	a.start(t, 0, xdp.BindAuto, xdp.Options{})
	peerAddr := netip.AddrPortFrom(peer, roce.Port)

	ea := newUDEnd(t, a.conn, 0)
	var joined *xdp.GroupConn
	open := func() (roce.PacketConn, error) {
		var err error
		a.ns.do(func() { joined, err = a.conn.JoinGroup(group) })
		return joined, err
	}
	poller, err := ea.dev.AttachMulticastPolled(ea.qp, group, open)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := poller.Poll(); k != 0 || err != nil {
		t.Errorf("a poll with nothing sent: %d, %v; want 0 and no error", k, err)
	}
	if k, err := joined.TryReadBatch(make([]roce.Message, 4)); k != 0 || err != nil {
		t.Errorf("TryReadBatch with nothing sent: %d, %v; want 0 and no error", k, err)
	}

	var pconn, member *udpconn.Conn
	nsB.do(func() {
		var ifi *net.Interface
		if ifi, err = net.InterfaceByName(ifB); err != nil {
			return
		}
		if pconn, err = udpconn.Listen(udpconn.Options{Addr: peerAddr}); err != nil {
			return
		}
		member, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(group, roce.Port), Interface: ifi.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	eb := newUDEnd(t, pconn, 1)
	if err := eb.dev.AttachMulticast(eb.qp, group, func() (roce.PacketConn, error) { return member, nil }); err != nil {
		t.Fatal(err)
	}

	const n = 16
	toA := func(i int) []byte { return fmt.Appendf(nil, "polled %d", i) }
	for i := range n {
		eb.send(t, group, toA(i))
	}
	polls, read := 0, 0
	for deadline := time.Now().Add(testTimeout); read < n && time.Now().Before(deadline); polls++ {
		k, err := poller.Poll()
		if err != nil {
			t.Fatalf("poll after %d of %d datagrams: %v", read, n, err)
		}
		read += k
	}
	t.Logf("%d datagrams in %d polls", read, polls)
	// Poll delivered them: the completions are in the CQ already.
	ea.recv(t, "polled AF_XDP QP", n, peer, eb.qp.QPN(), toA)
	if k, err := poller.Poll(); k != 0 || err != nil {
		t.Errorf("a poll after all %d were read: %d, %v; want 0 and no error", n, k, err)
	}
	if gc, err := a.prog.GroupCounters(group); err != nil || gc.Packets != n {
		t.Errorf("classifier: %+v, %v; want %d datagrams to %v", gc, err, n, group)
	}
	if st, err := a.conn.Stats(); err != nil || st.GroupReceived != n || st.GroupOverflow != 0 || st.TooLong != 0 {
		t.Errorf("conn stats %+v, %v; want %d group datagrams received, none over the queue or too long", st, err, n)
	}

	if err := ea.dev.DetachMulticast(ea.qp, group); err != nil {
		t.Fatal(err)
	}
	if _, err := poller.Poll(); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("a poll after the detach: %v, want ErrConnClosed", err)
	}
	if _, err := joined.TryReadBatch(make([]roce.Message, 1)); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("TryReadBatch of the group's closed conn: %v, want ErrConnClosed", err)
	}
}
