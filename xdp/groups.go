package xdp

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Multicast groups. A RoCEv2 datagram to a group goes to destination QP
// 0xFFFFFF (IBA 10.5.2.1) and IP destination the group, which is the
// RoCEv2 GRH's DGID: the classifier looks that up among the groups Go
// added with AddGroup, keyed by the group's MGID as the kernel's rxe keys
// its multicast groups (rxe_rcv_mcast_pkt: an IPv4 destination mapped to
// ::ffff:a.b.c.d, an IPv6 one as it is). A joined group's datagrams are
// redirected to the AF_XDP socket of the receiving queue, counted per
// group; those of any other group go to the kernel (Counters.Unjoined).

// GroupCounters are one group's counters, summed over CPUs.
type GroupCounters struct {
	Packets uint64 // datagrams to the group redirected (or passed: no socket)
	Bytes   uint64 // their Ethernet frame bytes
	ECNCE   uint64 // of which marked ECN-CE
}

// groupKey is the classifier's key for group: its RoCEv2 MGID.
func groupKey(op string, group netip.Addr) (classifierGroupKey, error) {
	if !group.Unmap().IsMulticast() {
		return classifierGroupKey{}, fmt.Errorf("xdp: %s group %v: not an IP multicast address", op, group)
	}
	return classifierGroupKey{Mgid: group.As16()}, nil
}

// AddGroup makes the classifier send datagrams to the multicast group
// (destination QP 0xFFFFFF, IP destination group) to AF_XDP, its counters
// starting at zero. Adding a group already there keeps its counters. The
// classifier does not join the group: the interface must receive it (an
// IGMP or MLD membership, which Conn.JoinGroup holds).
func (p *Program) AddGroup(group netip.Addr) error {
	key, err := groupKey("add", group)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("xdp: add group %v: %w", group, err)
	}
	err = p.objs.Groups.Update(key, make([]classifierGroup, ncpu), ebpf.UpdateNoExist)
	if err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("xdp: add group %v: %w", group, err)
	}
	return nil
}

// RemoveGroup stops the redirection of the group's datagrams (they go to
// the kernel again) and drops its counters. Removing a group that is not
// there is an error matching ebpf.ErrKeyNotExist.
func (p *Program) RemoveGroup(group netip.Addr) error {
	key, err := groupKey("remove", group)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.objs.Groups.Delete(key); err != nil {
		return fmt.Errorf("xdp: remove group %v: %w", group, err)
	}
	return nil
}

// GroupCounters returns the counters of a group added with AddGroup,
// summed over CPUs.
func (p *Program) GroupCounters(group netip.Addr) (GroupCounters, error) {
	key, err := groupKey("counters of", group)
	if err != nil {
		return GroupCounters{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return GroupCounters{}, ErrClosed
	}
	var per []classifierGroup
	if err := p.objs.Groups.Lookup(key, &per); err != nil {
		return GroupCounters{}, fmt.Errorf("xdp: group %v counters: %w", group, err)
	}
	var c GroupCounters
	for _, s := range per {
		c.Packets += s.Packets
		c.Bytes += s.Bytes
		c.ECNCE += s.EcnCe
	}
	return c, nil
}
