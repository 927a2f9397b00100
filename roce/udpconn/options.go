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
	// Frames, with Arena, lets a conn with GRO lend what it reads
	// (roce.FrameLender): it reads into frames of FrameLen bytes taken
	// from Frames (a memory pool's buffers, at offsets into Arena) instead
	// of buffers of its own, and hands each packet out where it landed, so
	// a consumer that keeps a payload takes a reference to its frame
	// rather than a copy. When Frames has none free, a read goes into the
	// conn's own buffers and its packets are not lent. Without GRO the
	// conn does not lend.
	Frames FrameSource
	Arena  []byte
	// reusePort binds Addr as one socket of a SO_REUSEPORT group
	// (ListenQueues).
	reusePort bool
	// Logger receives the conn's warnings (GSO turned off by a send the
	// kernel refused); nil is slog.Default().
	Logger *slog.Logger
}

// FrameSource hands out the frames a conn lends (Options.Frames): memory
// of FrameLen bytes at an offset into Options.Arena, counted by
// reference. Safe for use by several conns at once.
type FrameSource interface {
	// AllocFrame returns a free frame's offset, with one reference, or
	// false when none is free.
	AllocFrame() (uint64, bool)
	// RefFrame adds a reference to a frame AllocFrame returned.
	RefFrame(off uint64)
	// FreeFrame drops a reference; the frame is free again after the
	// last.
	FreeFrame(off uint64)
}

// FrameLen is the size of the frames a conn lends: one GRO read's most
// (64 datagrams and 64 KiB of UDP payload).
const FrameLen = 1 << 16

// BusyPollMicros is the SO_BUSY_POLL a BusyPoll conn's socket gets: how
// long a read polls the device's receive queue before it reports nothing.
const BusyPollMicros = 50

// MaxBatch is the most messages recvmmsg and sendmmsg take in one call
// (the kernel's UIO_MAXIOV).
const MaxBatch = 1024
