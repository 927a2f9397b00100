// Package ipoib knows IPoIB network devices: the 20-byte hardware address
// of an interface on an InfiniBand port and its fields, the multicast
// addresses IPoIB derives from IP groups, and the MTU each transport mode
// allows.
//
// # Wire formats
//
// HwAddr is a typed view of the hardware address (flags, the QPN of the
// interface's UD QP, the port's GID), MGID one of the multicast GID in a
// multicast address (scope, IPoIB signature, P_Key, group). Both follow
// package roce's conventions: getters and setters on the bytes, a Fields
// struct with Encode, IsValid as the precondition, ParseHwAddr returning
// (view, n, err), AppendHwAddr into a caller's buffer. ParseHwAddrText and
// HwAddr.String are the kernel's colon form as `ip link` prints it.
// Broadcast and MulticastHwAddr build the addresses
// drivers/infiniband/ulp/ipoib and ip_ib_mc_map/ipv6_ib_mc_map make.
//
// # MTU
//
// In datagram mode an IP packet is one IB packet: the MTU is the IB MTU
// less the 4-byte IPoIB header (DatagramMTU: 2044 on a 2048 link, 4092 on
// 4096). Connected mode opens an RC connection per neighbour and allows up
// to 65520 (ConnectedMTU), for unicast only, and only on an interface
// whose address carries FlagRC.
//
// Not implemented yet: finding the interfaces and their neighbours, and
// the QUIC fallback leg.
package ipoib
