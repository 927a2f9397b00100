package udpconn

import (
	"log/slog"
	"net/netip"
)

// Options configures a Conn.
type Options struct {
	// Addr is the local address: a specific IP (the ICRC covers it) and a
	// port (0 means 4791).
	Addr netip.AddrPort
	// Batch is the most messages one system call moves (default 64, at most
	// MaxBatch).
	Batch int
	// Interface, for an Addr that is a multicast group, is the index of
	// the interface the socket joins the group on (IGMP or MLD): the conn
	// then receives the group's RoCEv2 packets. Sockets of several
	// processes may bind the same group (SO_REUSEADDR). For an IPv6
	// unicast Addr it is the interface the conn's multicast leaves on
	// (IPV6_MULTICAST_IF; 0: as the routing table says); IPv4 multicast
	// leaves from the interface that holds Addr.
	Interface int
	// BusyPoll is for a reader that polls the conn (TryReadBatch in a
	// loop) rather than waits in ReadBatch: the socket gets SO_BUSY_POLL
	// (BusyPollMicros), with which each read polls a NAPI driver's
	// receive ring before it reports nothing. Setting it needs
	// CAP_NET_ADMIN; without, the conn is opened all the same
	// (Conn.SocketBusyPoll says which).
	BusyPoll bool
	// NoGSO and NoGRO turn the kernel's UDP batching off (Offload): a
	// send, a read, of one datagram per packet, as on a kernel without
	// it. For comparisons (rbridge bench) and tests.
	NoGSO, NoGRO bool
	// FreeBind binds Addr even when no interface holds it (IP_FREEBIND,
	// IPV6_FREEBIND): a floating address, such as a VRRP virtual IP, that
	// may arrive later. The conn receives what is sent to Addr once it is
	// this host's, and nothing before; until then a send fails
	// (ENETUNREACH: the kernel sends from its own addresses). Unicast only; an IPv4 conn's
	// multicast then leaves on Interface (none: as routes say).
	FreeBind bool
	// reusePort binds Addr as one socket of a SO_REUSEPORT group
	// (ListenQueues).
	reusePort bool
	// Logger receives the conn's warnings (GSO turned off by a send the
	// kernel refused); nil is slog.Default().
	Logger *slog.Logger
}

// BusyPollMicros is the SO_BUSY_POLL a BusyPoll conn's socket gets: how
// long a read polls the device's receive queue before it reports nothing.
const BusyPollMicros = 50

// MaxBatch is the most messages recvmmsg and sendmmsg take in one call
// (the kernel's UIO_MAXIOV).
const MaxBatch = 1024
