//go:build linux

package xdp

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/roce"
)

// Multicast receive over AF_XDP. The classifier redirects a joined group's
// datagrams (Program.AddGroup) to the AF_XDP socket of the receiving queue,
// the one the Conn reads its unicast packets from. The Conn hands each
// frame whose IP destination is a multicast address to the GroupConn of
// that group, copied into a bounded queue, so a transport reads the group
// on a packet conn of its own, as it reads a UDP socket bound to a group
// (transport.Device.AttachMulticast). The group's membership stays the
// kernel's: a UDP socket joined to the group on the Conn's interface
// (IGMP or MLD, so switches forward the group and the NIC's multicast
// filter admits its Ethernet address), which never receives a datagram
// itself (it is bound to no port; the classifier takes the group's RoCEv2
// packets before the IP stack sees them).
//
// The Conns of one UMEM (ConnOptions.Share, OpenQueues: a socket per
// receive queue) share the first one's groups: RSS puts a group's
// datagrams on any queue, and each Conn hands them to that Conn's
// GroupConns (c.groupsOf).
//
// Concurrency: c.groups is guarded by c.groupsMu, held for reading while a
// received datagram is queued and for writing by JoinGroup and
// GroupConn.Close. A GroupConn's queue has a producer per Conn of the
// UMEM (the goroutines reading them) and its readers.

// groupQueue is how many datagrams a GroupConn holds for its reader; more
// are dropped (ConnStats.GroupOverflow).
const groupQueue = 256

// GroupConn receives one multicast group's datagrams from a Conn: a
// roce.PacketConn for the transport's group receive. It delivers only
// while the Conn itself is read (the transport's device reads it all the
// time). WriteBatch sends through the Conn.
type GroupConn struct {
	c      *Conn
	group  netip.Addr
	member int // the socket that holds the kernel's membership

	q    chan groupPacket
	free chan []byte // buffers of datagrams read, for the next ones
	done chan struct{}
	once sync.Once
}

type groupPacket struct {
	buf []byte
	src netip.AddrPort
	ecn uint8
}

var _ roce.PacketConn = (*GroupConn)(nil)

// JoinGroup joins the multicast group on the Conn's interface, in the
// calling thread's network namespace (the Conn's), and returns the conn the
// group's datagrams arrive on. With ConnOptions.Program the classifier
// learns the group (Program.AddGroup); without it the caller adds it to
// the classifier that feeds the Conn. A group joined twice on one Conn is
// an error, as is an address that is not multicast or not of the Conn's
// family. On a Conn that shares another's UMEM it joins on the first
// Conn of that UMEM, whose groups every Conn of it feeds.
func (c *Conn) JoinGroup(group netip.Addr) (*GroupConn, error) {
	if c.groupsOf != c {
		return c.groupsOf.JoinGroup(group)
	}
	group = group.Unmap()
	switch {
	case !group.IsMulticast():
		return nil, fmt.Errorf("xdp: join %v: not an IP multicast address", group)
	case group.Is4() != c.local.Addr().Unmap().Is4():
		return nil, fmt.Errorf("xdp: join %v on a Conn of %v: address families differ", group, c.local.Addr())
	}
	c.groupsMu.Lock()
	defer c.groupsMu.Unlock()
	if c.closed.Load() {
		return nil, fmt.Errorf("xdp: join %v: %w", group, roce.ErrConnClosed)
	}
	if c.groups[group] != nil {
		return nil, fmt.Errorf("xdp: join %v on ifindex %d: joined already", group, c.ifindex)
	}
	fd, err := joinMembership(group, c.ifindex)
	if err != nil {
		return nil, fmt.Errorf("xdp: join %v on ifindex %d: %w", group, c.ifindex, err)
	}
	g := &GroupConn{c: c, group: group, member: fd,
		q: make(chan groupPacket, groupQueue), free: make(chan []byte, groupQueue), done: make(chan struct{})}
	// The Conn knows the group before the classifier sends it any.
	c.groups[group] = g
	if c.prog != nil {
		if err := c.prog.AddGroup(group); err != nil {
			delete(c.groups, group)
			unix.Close(fd)
			return nil, err
		}
	}
	return g, nil
}

// joinMembership opens a UDP socket joined to group on the interface.
func joinMembership(group netip.Addr, ifindex int) (int, error) {
	family := unix.AF_INET6
	if group.Is4() {
		family = unix.AF_INET
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, fmt.Errorf("membership socket: %w", err)
	}
	if group.Is4() {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifindex)})
		if err != nil {
			err = fmt.Errorf("IP_ADD_MEMBERSHIP: %w", err)
		}
	} else {
		err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
			&unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifindex)})
		if err != nil {
			err = fmt.Errorf("IPV6_JOIN_GROUP: %w", err)
		}
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// toGroup queues the datagram f carries for the GroupConn of its
// destination (one of c.groupsOf's), copied: the frame goes back to the
// fill ring.
func (c *Conn) toGroup(f *roce.Frame) {
	p := f.UDPPayload()
	o := c.groupsOf
	o.groupsMu.RLock()
	defer o.groupsMu.RUnlock()
	g := o.groups[f.Dst.Addr()]
	switch {
	case g == nil:
		c.groupUnjoined.Add(1)
		return
	case len(g.q) == cap(g.q):
		c.groupOverflow.Add(1)
		return
	}
	var buf []byte
	select {
	case buf = <-g.free:
	default:
		buf = make([]byte, 0, roce.MaxPacket)
	}
	buf = append(buf[:0], p...)
	select {
	case g.q <- groupPacket{buf: buf, src: f.Src, ecn: f.ECN}:
		c.groupReceived.Add(1)
	default: // a reader of g closed it meanwhile, or the queue filled up
		c.groupOverflow.Add(1)
	}
}

// Group returns the group the conn receives.
func (g *GroupConn) Group() netip.Addr { return g.group }

// LocalAddr implements roce.PacketConn: the group and the RoCEv2 port.
func (g *GroupConn) LocalAddr() netip.AddrPort { return netip.AddrPortFrom(g.group, roce.Port) }

// ReadBatch implements roce.PacketConn: it waits for the group's first
// datagram, then takes what else is queued, up to len(msgs). A datagram
// longer than its message's buffer is dropped (ConnStats.TooLong).
func (g *GroupConn) ReadBatch(msgs []roce.Message) (int, error) {
	return g.read(msgs, true)
}

// TryReadBatch takes what the group's queue holds now, up to len(msgs),
// without waiting: 0 and no error when it holds nothing. It is what
// transport.Device.AttachMulticastPolled reads a busy-polled group with
// (transport.TryReader). The queue is filled by whatever reads the Conn
// (the transport's device, all the time), so a poller spins on the queue,
// not on the AF_XDP socket's receive ring.
func (g *GroupConn) TryReadBatch(msgs []roce.Message) (int, error) {
	return g.read(msgs, false)
}

// read takes queued datagrams into msgs; with wait it first waits for one.
func (g *GroupConn) read(msgs []roce.Message, wait bool) (int, error) {
	select {
	case <-g.done:
		return 0, roce.ErrConnClosed
	default:
	}
	n := 0
	for n < len(msgs) {
		var p groupPacket
		if n == 0 && wait {
			select {
			case <-g.done:
				return 0, roce.ErrConnClosed
			case p = <-g.q:
			}
		} else {
			select {
			case p = <-g.q:
			default:
				return n, nil
			}
		}
		m := &msgs[n]
		if cap(m.Buf) < len(p.buf) {
			g.c.tooLong.Add(1)
		} else {
			m.N = copy(m.Buf[:cap(m.Buf)], p.buf)
			m.Addr, m.ECN, m.ICRCChecked, m.Lent = p.src, p.ecn, true, false
			n++
		}
		select {
		case g.free <- p.buf:
		default:
		}
	}
	return n, nil
}

// WriteBatch implements roce.PacketConn: it sends through the Conn (from
// its address), to a group or to anyone else.
func (g *GroupConn) WriteBatch(msgs []roce.Message) (int, error) {
	select {
	case <-g.done:
		return 0, roce.ErrConnClosed
	default:
	}
	return g.c.WriteBatch(msgs)
}

// Close implements roce.PacketConn: the classifier forgets the group, the
// kernel's membership is left (closing the socket sends the IGMP or MLD
// leave), datagrams still queued are dropped, and ReadBatch returns
// roce.ErrConnClosed. It is idempotent.
func (g *GroupConn) Close() error {
	var err error
	g.once.Do(func() {
		c := g.c
		c.groupsMu.Lock()
		delete(c.groups, g.group)
		c.groupsMu.Unlock()
		if c.prog != nil {
			if rerr := c.prog.RemoveGroup(g.group); rerr != nil && !errors.Is(rerr, ErrClosed) {
				err = rerr
			}
		}
		if cerr := unix.Close(g.member); cerr != nil {
			err = errors.Join(err, fmt.Errorf("xdp: leave %v: %w", g.group, cerr))
		}
		close(g.done)
	})
	return err
}

// closeGroups closes the GroupConns still open (the Conn is closing).
func (c *Conn) closeGroups() error {
	c.groupsMu.Lock()
	gs := make([]*GroupConn, 0, len(c.groups))
	for _, g := range c.groups {
		gs = append(gs, g)
	}
	c.groupsMu.Unlock()
	var errs []error
	for _, g := range gs {
		errs = append(errs, g.Close())
	}
	return errors.Join(errs...)
}
