// Package xdp is rbridge's RoCEv2 fast path on the gateway's Ethernet NIC:
// an XDP classifier (classifier.c, compiled by bpf2go; the objects are
// committed, so building needs no clang) and an AF_XDP socket that gives
// the userspace RoCEv2 transport its packet I/O.
//
// The classifier parses Ethernet (up to two VLAN tags), IPv4 or IPv6, UDP to
// port 4791 and the BTH. Packets for the queue pairs Go added with
// Program.AddQP go to the AF_XDP socket of the receiving queue; all other
// traffic goes to the kernel as before; malformed RoCEv2 (truncated, BTH
// version not 0, reserved opcode) is dropped. Everything is counted
// (Program.Counters, Program.QPCounters). An ECN-CE packet for an owned QP
// goes to the socket with its mark, for the transport to answer with a CNP;
// with Options.CNP the classifier answers it itself from XDP (XDP_TX), at
// most one per QP per Options.CNPInterval, consuming the marked packet to
// make the CNP (XDP cannot emit a second frame; the sender retransmits it).
// Program.SetFault drops RoCEv2 packets on purpose, for tests.
//
// Multicast: datagrams to QPN 0xFFFFFF whose IP destination is a group
// added with Program.AddGroup go to the AF_XDP socket too, counted per
// group (Program.GroupCounters); other groups' go to the kernel
// (Counters.Unjoined). Conn.JoinGroup holds the group's membership in the
// kernel (IGMP/MLD on the interface), adds the group to the classifier and
// returns a GroupConn that the group's datagrams arrive on, for the
// transport's Device.AttachMulticast (or, read without waiting with
// TryReadBatch, Device.AttachMulticastPolled); a Conn sends to a group's
// Ethernet multicast address.
//
//	prog, err := xdp.Load(xdp.Options{})            // needs root
//	mode, err := prog.Attach(ifindex)               // native, else generic; logged
//	neigh, err := xdp.NewResolver(xdp.ResolverOptions{Ifindex: ifindex})
//	conn, err := xdp.NewConn(xdp.ConnOptions{
//		Ifindex: ifindex, Queue: 0, UMEM: arena,     // arena: mmap'd, the pool's
//		LocalAddr: netip.MustParseAddrPort("10.0.0.1:4791"),
//		Neighbors: neigh, Program: prog,
//	})
//	prog.AddQP(localQPN, xdp.QP{RemoteQPN: peerQPN})
//	n, err := conn.ReadBatch(msgs)                  // a roce.PacketConn
//
// Conn is a roce.PacketConn over an AF_XDP socket (copy mode, or zero-copy
// where the driver has it) on a UMEM the caller supplies. It builds the
// Ethernet, IP and UDP headers of what it sends and fills the ICRC; it
// checks the ICRC of what it receives. It moves each ring's index once a
// batch and makes a system call for a ring only when the kernel's flag on
// it asks (XDP_USE_NEED_WAKEUP; Conn.Wakeup says how it is bound, and
// ConnStats counts the calls made and skipped). The destination Ethernet address
// comes from its Neighbors: a Resolver (resolver_linux.go) reads the
// kernel's neighbour table of the Conn's namespace and has the kernel
// resolve (ARP, IPv6 neighbour discovery) a peer it does not know; the
// Conn holds a packet to a neighbour being resolved, without waiting,
// and sends it once the neighbour answered.
//
// A NIC's RSS spreads packets over its receive queues, and a socket sees
// one. OpenQueues binds a Conn on each of an interface's receive queues
// (RxQueues counts them), the first registering the UMEM and the others
// sharing it (ConnOptions.Share, XDP_SHARED_UMEM), each with rings of its
// own and frames from one FrameAllocator; they share the first one's
// multicast groups.
package xdp
