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
package udpconn
