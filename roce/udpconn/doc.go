// Package udpconn is the portable packet I/O of rbridge's userspace RoCEv2
// transport: a UDP socket (port 4791 by default) that implements
// roce.PacketConn with recvmmsg and sendmmsg, in batches, integrated with
// Go's network poller.
//
// The kernel writes the IP and UDP headers, so the conn predicts them to
// compute each packet's ICRC: it binds a specific source address and sets
// the don't-fragment bit, which makes Linux send IPv4 with IP ID 0 (the
// other covered fields are the addresses, ports and lengths; TOS, TTL and
// checksums are masked). On receive it verifies the ICRC of IPv6 packets; an
// IPv4 packet's ICRC covers the sender's IP ID, which a UDP socket does not
// see, so those are delivered with ICRCChecked false (AF_XDP, in package
// xdp, sees whole frames and checks every packet).
//
// The IP ECN field travels both ways: received as IP_TOS/IPV6_TCLASS
// ancillary data, sent per message the same way.
//
// The kernel's UDP batching (Offload; Options.NoGSO and NoGRO turn it
// off), probed at Listen, on by default where the kernel has it:
//   - GSO (gso_linux.go): WriteBatch hands a run of packets to one
//     destination with one ECN, of one length but the last, to the kernel
//     as one send with UDP_SEGMENT: at most 64 packets and 64 KiB. IPv4
//     numbers the datagrams cut from it 0, 1, 2, ... in their IP ID, which
//     the ICRC covers, so each packet's ICRC is computed for its place in
//     its send. At most 64: later kernels take 128, every kernel with GSO
//     takes 64. A send the kernel refuses with EIO (a route through IPsec;
//     on older kernels, a device without checksum offload) turns GSO off
//     for the conn, counted and logged, and the packets go again one
//     datagram each.
//   - GRO (gro_linux.go): the kernel hands datagrams of one flow that
//     arrived together as one buffer, with their length in a UDP_GRO
//     control message. ReadBatch then reads into buffers of the conn's own,
//     64 KiB each (as many as the batch asks for, allocated at the first
//     read), and copies the packets out into the caller's, in order; what
//     does not fit in the caller's batch waits for the next ReadBatch,
//     which takes no system call.
//
// ListenQueues (queues_linux.go) opens several conns on one address, a
// SO_REUSEPORT group, one per receive loop: a reuseport program (steer.c,
// its bpf2go output committed) steers each datagram to the conn of its
// destination QP's queue (roce.QueueOf).
//
// Stats counts system calls and the buffers they moved beside packets:
// packets per buffer is what the offload coalesced.
package udpconn
