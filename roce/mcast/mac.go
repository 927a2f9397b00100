package mcast

import (
	"fmt"
	"net"
	"net/netip"
)

// MAC is an Ethernet address.
type MAC [6]byte

func (m MAC) String() string { return net.HardwareAddr(m[:]).String() }

// EthernetMAC returns the Ethernet multicast address of an IP multicast
// group: 01:00:5e and the low 23 bits of an IPv4 group (RFC 1112 6.4,
// ip_eth_mc_map), 33:33 and the low 32 bits of an IPv6 one (RFC 2464 7,
// ipv6_eth_mc_map). An IPv4-mapped address is taken as the IPv4 group, as
// the kernel's ib_resolve_eth_dmac does for a RoCEv2 MGID.
func EthernetMAC(group netip.Addr) (MAC, error) {
	group = group.Unmap()
	if !group.IsMulticast() {
		return MAC{}, fmt.Errorf("mcast: Ethernet address of %v: %w", group, ErrNotMulticast)
	}
	a := group.As16()
	if group.Is4() {
		return MAC{0x01, 0x00, 0x5e, a[13] & 0x7f, a[14], a[15]}, nil
	}
	return MAC{0x33, 0x33, a[12], a[13], a[14], a[15]}, nil
}

// EthernetMAC returns the Ethernet address a RoCE address handle to g
// sends to (the kernel's ib_resolve_eth_dmac): the IPv4 group's for an
// IPv4-mapped MGID, else 33:33 and its low 32 bits.
func (g MGID) EthernetMAC() (MAC, error) {
	if !g.IsMulticast() {
		return MAC{}, fmt.Errorf("mcast: Ethernet address of GID %v: %w", g, ErrNotMulticast)
	}
	return EthernetMAC(netip.AddrFrom16(g))
}
