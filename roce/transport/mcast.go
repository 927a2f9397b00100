package transport

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rbridge/rbridge/roce"
)

// MulticastQPN is the destination QP of a datagram to a multicast group
// (IBA 10.5.2.1; ibv's MulticastQPN).
const MulticastQPN = 0xFFFFFF

// Multicast receive. A UD QP attached to a group (AttachMulticast, as
// ibv_attach_mcast) receives the group's datagrams: RoCEv2 packets to the
// group's IP address with DestQP 0xFFFFFF. They arrive on a packet conn of
// their own (a socket bound to the group and joined to it on the
// interface: the device's own conn, bound to its unicast address, does not
// receive them; or, over AF_XDP, the group's xdp.GroupConn, which the
// device's own conn feeds), which the device opens on a group's first
// attach, reads in routineGroup, and closes on its last detach. Every attached QP gets
// its own copy, checked against its Q_Key as any UD datagram.
//
// Sending to a group needs nothing of this: a UD send to the group's
// address and MulticastQPN leaves through the device's conn.

// A group may instead be polled (AttachMulticastPolled): no goroutine of
// the device reads its conn; the caller's GroupPoller.Poll reads what it
// holds, without waiting, and hands it on as routineGroup does. That is
// for a caller that spins (busy-polls) on the QP's CQ anyway: one loop
// then takes a datagram from the socket to its completion, with no
// goroutine to wake on the way.

// mgroup is a group some QP is attached to. qps is guarded by Device.mu.
type mgroup struct {
	conn   roce.PacketConn
	qps    map[*QP]struct{}
	polled bool // read by a GroupPoller, not by routineGroup
}

// TryReader is a packet conn that can read without waiting (udpconn's
// TryReadBatch): what a polled group's conn must be.
type TryReader interface {
	// TryReadBatch reads what has arrived, up to len(msgs) packets: 0
	// and no error when nothing has.
	TryReadBatch(msgs []roce.Message) (int, error)
}

// TryLender is a conn that lends its frames (roce.FrameLender) and can
// read without waiting (xdp.Conn's TryReadBatchLent): a polled device
// on it leaves packets where they landed, as a device that waits does.
type TryLender interface {
	roce.FrameLender
	// TryReadBatchLent is ReadBatchLent that never waits: 0 and no
	// error when nothing has arrived.
	TryReadBatchLent(msgs []roce.Message) (int, error)
}

// GroupPoller reads a polled group's conn (AttachMulticastPolled). Poll
// is called by one goroutine at a time.
type GroupPoller struct {
	d    *Device
	g    *mgroup
	try  TryReader
	msgs []roce.Message
	pkt  roce.Packet
	qps  []*QP
}

// Poll reads the datagrams the group's conn holds now, without waiting,
// hands each to every QP attached (their CQs get the completions), and
// returns how many packets it read. It returns roce.ErrConnClosed once
// the group's last QP detached (or the device closed).
func (p *GroupPoller) Poll() (int, error) {
	n, err := p.try.TryReadBatch(p.msgs)
	if err != nil {
		return 0, err
	}
	p.d.deliverGroup(p.g, p.msgs[:n], &p.pkt, &p.qps)
	return n, nil
}

// AttachMulticastPolled attaches qp to group as AttachMulticast does, but
// no goroutine reads the group's conn: the GroupPoller returned does,
// when its Poll is called. open's conn must be a TryReader. A group is
// either polled or not: attaching to it the other way is an error.
func (d *Device) AttachMulticastPolled(qp *QP, group netip.Addr, open func() (roce.PacketConn, error)) (*GroupPoller, error) {
	g, err := d.attach(qp, group, open, true)
	if err != nil {
		return nil, err
	}
	p := &GroupPoller{d: d, g: g, try: g.conn.(TryReader), msgs: make([]roce.Message, 8)}
	for i := range p.msgs {
		p.msgs[i].Buf = make([]byte, roce.MaxPacket)
	}
	return p, nil
}

// AttachMulticast attaches qp, a UD QP, to group. open makes the group's
// packet conn; it is called on the group's first attach only. Attaching
// twice is an error, as is a QP that is not UD or an address that is not
// multicast.
func (d *Device) AttachMulticast(qp *QP, group netip.Addr, open func() (roce.PacketConn, error)) error {
	_, err := d.attach(qp, group, open, false)
	return err
}

// attach attaches qp to group, opening the group's conn on its first
// attach, and starts routineGroup on it unless polled.
func (d *Device) attach(qp *QP, group netip.Addr, open func() (roce.PacketConn, error), polled bool) (*mgroup, error) {
	group = group.Unmap()
	switch {
	case qp == nil || qp.dev != d:
		return nil, fmt.Errorf("transport: attach to %v: the QP is not the device's", group)
	case qp.typ != UD:
		return nil, fmt.Errorf("transport: attach QP %#x to %v: a %v QP; only UD QPs join groups", qp.qpn, group, qp.typ)
	case !group.IsMulticast():
		return nil, fmt.Errorf("transport: attach QP %#x to %v: not a multicast address", qp.qpn, group)
	case open == nil:
		return nil, fmt.Errorf("transport: attach QP %#x to %v: no packet conn for the group", qp.qpn, group)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.closed:
		return nil, fmt.Errorf("transport: attach QP %#x to %v: device closed", qp.qpn, group)
	default:
	}
	if d.qps[qp.qpn] != qp {
		return nil, fmt.Errorf("transport: attach QP %#x to %v: the QP is closed", qp.qpn, group)
	}
	if d.groups == nil {
		d.groups = map[netip.Addr]*mgroup{}
	}
	g := d.groups[group]
	if g == nil {
		conn, err := open()
		if err != nil {
			return nil, fmt.Errorf("transport: attach QP %#x to %v: %w", qp.qpn, group, err)
		}
		if _, ok := conn.(TryReader); polled && !ok {
			conn.Close()
			return nil, fmt.Errorf("transport: attach QP %#x to %v polled: the group's conn cannot read without waiting", qp.qpn, group)
		}
		g = &mgroup{conn: conn, qps: map[*QP]struct{}{}, polled: polled}
		d.groups[group] = g
		if !polled {
			d.wg.Add(1)
			go d.routineGroup(g)
		}
	}
	if g.polled != polled {
		return nil, fmt.Errorf("transport: attach QP %#x to %v: the group is attached %s already", qp.qpn, group, map[bool]string{true: "polled", false: "with a reading goroutine"}[g.polled])
	}
	if _, dup := g.qps[qp]; dup {
		return nil, fmt.Errorf("transport: attach QP %#x to %v: attached already", qp.qpn, group)
	}
	g.qps[qp] = struct{}{}
	return g, nil
}

// DetachMulticast detaches qp from group; the group's conn closes with its
// last QP.
func (d *Device) DetachMulticast(qp *QP, group netip.Addr) error {
	group = group.Unmap()
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.groups[group]
	if g == nil {
		return fmt.Errorf("transport: detach QP %#x from %v: not attached", qp.qpn, group)
	}
	if _, ok := g.qps[qp]; !ok {
		return fmt.Errorf("transport: detach QP %#x from %v: not attached", qp.qpn, group)
	}
	d.detachLocked(qp, group, g)
	return nil
}

// detachLocked removes qp from g. Must hold d.mu.
func (d *Device) detachLocked(qp *QP, group netip.Addr, g *mgroup) {
	delete(g.qps, qp)
	if len(g.qps) == 0 {
		delete(d.groups, group)
		_ = g.conn.Close() // ends routineGroup
	}
}

// detachAllLocked detaches a QP that is closing from every group. Must
// hold d.mu.
func (d *Device) detachAllLocked(qp *QP) {
	for group, g := range d.groups {
		if _, ok := g.qps[qp]; ok {
			d.detachLocked(qp, group, g)
		}
	}
}

// closeGroupsLocked closes every group's conn (the device is closing).
// Must hold d.mu.
func (d *Device) closeGroupsLocked() {
	for group, g := range d.groups {
		_ = g.conn.Close()
		delete(d.groups, group)
	}
}

// MulticastGroups returns the groups a QP of the device is attached to now.
func (d *Device) MulticastGroups() []netip.Addr {
	d.mu.RLock()
	defer d.mu.RUnlock()
	out := make([]netip.Addr, 0, len(d.groups))
	for group := range d.groups {
		out = append(out, group)
	}
	return out
}

// routineGroup reads a group's conn until it is closed and hands each
// datagram to DestQP 0xFFFFFF to every QP attached then.
func (d *Device) routineGroup(g *mgroup) {
	defer d.wg.Done()
	msgs := make([]roce.Message, 8)
	for i := range msgs {
		msgs[i].Buf = make([]byte, roce.MaxPacket)
	}
	var pkt roce.Packet
	var qps []*QP
	for {
		n, err := g.conn.ReadBatch(msgs)
		if err != nil {
			if errors.Is(err, roce.ErrConnClosed) {
				return
			}
			select {
			case <-d.closed:
				return
			default:
			}
			d.log.Warn("read multicast packets", "err", err)
			continue
		}
		d.deliverGroup(g, msgs[:n], &pkt, &qps)
	}
}

// deliverGroup hands each of a group's datagrams to DestQP 0xFFFFFF to
// every QP attached then, and wakes each QP's waiters once, after the
// batch (as routineReceive does): a relay woken per datagram would post
// each on its own. pkt and qps are the caller's scratch.
func (d *Device) deliverGroup(g *mgroup, msgs []roce.Message, pkt *roce.Packet, qps *[]*QP) {
	var touched [8]*QP // the QPs to wake, beyond which they are woken at once
	nt := 0
	for i := range msgs {
		m := &msgs[i]
		d.stats.RxPackets.Add(1)
		if err := pkt.Decode(m.Buf[:m.N]); err != nil {
			d.stats.RxMalformed.Add(1)
			continue
		}
		if pkt.BTH.DestQP() != MulticastQPN {
			d.stats.RxUnknownQP.Add(1)
			continue
		}
		*qps = (*qps)[:0]
		d.mu.RLock()
		for qp := range g.qps {
			*qps = append(*qps, qp)
		}
		d.mu.RUnlock()
	qps:
		for _, qp := range *qps {
			qp.receive(pkt, m)
			for _, t := range touched[:nt] {
				if t == qp {
					continue qps
				}
			}
			if nt == len(touched) {
				qp.signalCQs()
				continue
			}
			touched[nt] = qp
			nt++
		}
	}
	for _, qp := range touched[:nt] {
		qp.signalCQs()
	}
}
