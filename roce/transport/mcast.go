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

// mgroup is a group some QP is attached to. qps is guarded by Device.mu.
type mgroup struct {
	conn roce.PacketConn
	qps  map[*QP]struct{}
}

// AttachMulticast attaches qp, a UD QP, to group. open makes the group's
// packet conn; it is called on the group's first attach only. Attaching
// twice is an error, as is a QP that is not UD or an address that is not
// multicast.
func (d *Device) AttachMulticast(qp *QP, group netip.Addr, open func() (roce.PacketConn, error)) error {
	group = group.Unmap()
	switch {
	case qp == nil || qp.dev != d:
		return fmt.Errorf("transport: attach to %v: the QP is not the device's", group)
	case qp.typ != UD:
		return fmt.Errorf("transport: attach QP %#x to %v: a %v QP; only UD QPs join groups", qp.qpn, group, qp.typ)
	case !group.IsMulticast():
		return fmt.Errorf("transport: attach QP %#x to %v: not a multicast address", qp.qpn, group)
	case open == nil:
		return fmt.Errorf("transport: attach QP %#x to %v: no packet conn for the group", qp.qpn, group)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	select {
	case <-d.closed:
		return fmt.Errorf("transport: attach QP %#x to %v: device closed", qp.qpn, group)
	default:
	}
	if d.qps[qp.qpn] != qp {
		return fmt.Errorf("transport: attach QP %#x to %v: the QP is closed", qp.qpn, group)
	}
	if d.groups == nil {
		d.groups = map[netip.Addr]*mgroup{}
	}
	g := d.groups[group]
	if g == nil {
		conn, err := open()
		if err != nil {
			return fmt.Errorf("transport: attach QP %#x to %v: %w", qp.qpn, group, err)
		}
		g = &mgroup{conn: conn, qps: map[*QP]struct{}{}}
		d.groups[group] = g
		d.wg.Add(1)
		go d.routineGroup(g)
	}
	if _, dup := g.qps[qp]; dup {
		return fmt.Errorf("transport: attach QP %#x to %v: attached already", qp.qpn, group)
	}
	g.qps[qp] = struct{}{}
	return nil
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
		for i := range n {
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
			qps = qps[:0]
			d.mu.RLock()
			for qp := range g.qps {
				qps = append(qps, qp)
			}
			d.mu.RUnlock()
			for _, qp := range qps {
				qp.receive(&pkt, m)
				qp.signalCQs()
			}
		}
	}
}
