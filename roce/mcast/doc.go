// Package mcast maps IP multicast groups to the multicast GIDs (MGIDs) and
// Ethernet addresses that carry them on each fabric, and back, exactly as
// the Linux kernel computes them:
//
//   - RoCEv2 (Linux drivers/infiniband/core/cma.c, cma_iboe_set_mgid, for a
//     RoCEv2 GID): an IPv4 group is the IPv4-mapped ::ffff:a.b.c.d, an
//     IPv6 group is the group itself. Linux 6.1's rdma_join_multicast
//     refuses IPv6 groups on RoCEv2 (-ENOTSUPP); the mapping is still the
//     one its address handles use.
//   - InfiniBand, IPoIB form (include/net/ip.h ip_ib_mc_map,
//     include/net/if_inet6.h ipv6_ib_mc_map; RFC 4391 section 4): the MGID
//     ff1S:401b:PPPP::0xxx:xxxx for IPv4 (the group's low 28 bits) and
//     ff1S:601b:PPPP:<the group's low 80 bits> for IPv6, with the scope S
//     and the P_Key PPPP taken from the IPoIB link's broadcast address.
//     This is what the IPoIB driver joins for the groups the IP stack
//     joins; ib2roce's "IPv4" MGID format is this form with scope 5 and
//     P_Key 0xffff.
//   - InfiniBand, RDMA-CM form (cma.c cma_set_mgid, in the RDMA_PS_UDP port
//     space): the IPoIB form with its signature's low byte set to 0x01
//     (byte 7 of the 20-byte IPoIB multicast hardware address, byte 3 of
//     the MGID): ff1S:4001:PPPP:: and ff1S:6001:PPPP:. This is what
//     rdma_join_multicast joins on an IB port for a UDP-port-space ID (what
//     mckey does), and what ib2roce's "RDMA" MGID format leaves rdma_cm to
//     compute; ib2roce's "IB" format is this form with scope 5 and P_Key 0.
//   - An IPv6 "address" that is already an SA-assigned MGID (ff1x:a01b:...)
//     is passed through unchanged by cma_set_mgid in either port space.
//
// The IPoIB and RDMA-CM forms keep only part of the group: 28 bits of an
// IPv4 group (the other four are 1110 for every IPv4 multicast address, so
// nothing is lost) and the low 80 bits of an IPv6 group (its first 48 bits,
// flags and scope included, are lost: groups that differ only there share
// an MGID). ParseIB says how many bits an MGID fixed (Group.Bits).
//
// The Ethernet address of a group (RFC 1112 section 6.4, RFC 2464 section
// 7; Linux ip_eth_mc_map, ipv6_eth_mc_map, and ib_resolve_eth_dmac for a
// RoCE address handle): 01:00:5e and the group's low 23 bits for IPv4,
// 33:33 and its low 32 bits for IPv6.
//
// The IPv4 broadcast 255.255.255.255 is not a multicast group: on IPoIB it
// travels to the broadcast GID itself (ff12:401b:ffff::ffff:ffff on the
// default partition), which no function here computes.
package mcast
