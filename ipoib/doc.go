// Package ipoib knows IPoIB network devices: the 20-byte hardware address
// of an interface on an InfiniBand port and its fields, the multicast
// addresses IPoIB derives from IP groups, the MTU each transport mode
// allows, the machine's IPoIB interfaces with their RDMA device and port,
// and their neighbours' IP addresses mapped to GIDs and QPNs.
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
// whose address carries FlagRC (not mlx5's enhanced IPoIB, for one).
//
// # Interfaces and neighbours
//
// A Host (NewHost) finds the IPoIB interfaces (Host.Interfaces): the
// netlink links of type ARPHRD_INFINIBAND, each with its addresses and
// what sysfs says (/sys/class/net/IF: mode, umcast, pkey, parent; the RDMA
// device under device/infiniband and the port from dev_port, or dev_id on
// older kernels, checked against the port's GID 0, which the address
// carries). A P_Key child (ib0.8001) takes its parent's device and port.
// Host.InterfaceFor is the lookup "the IPoIB interface of RDMA device D
// port P" (ForPort on a list), Host.InterfaceWith the lookup "the IPoIB
// interface that holds address A" (WithAddr on a list): a verbs leg on an
// InfiniBand port is found by it, its GID being the port's GID 0
// (Interface.RDMAPort is what package ibv's GID choice takes). PortOf
// reads an interface's device and port from sysfs alone, for a reader of
// a captured tree (rbridge doctor). Host.Neighbors decodes the kernel's
// neighbour table on an interface (each entry's 20-byte lladdr: GID, QPN,
// whether unicast to it goes over connected mode); Host.Neighbor maps one
// IP to its entry. Host.Report is what `rbridge devices` shows.
//
// Netlink (the links, addresses and neighbours, *netlink.Handle by
// default) and the root that sysfs is read under (Options.Root) are
// parameters, so the tests run on crafted sysfs trees (testdata, written
// by testdata/mkfixtures.sh) with netlink values built in memory. What
// cannot be read about one interface goes into its Notes, never into a
// failure of the whole list.
//
// The QUIC leg between rbridge gateways, which carries the IP fallback, is
// package tunnel (its wire format and TLS) and bridge's quic leg; the
// fallback does not use Host.InterfaceFor yet.
package ipoib
