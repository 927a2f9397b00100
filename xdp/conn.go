package xdp

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/rbridge/rbridge/roce"
)

// BindMode says how an AF_XDP socket moves frames.
type BindMode int

const (
	// BindAuto tries zero-copy and falls back to copy mode.
	BindAuto BindMode = iota
	// BindCopy copies frames between the driver and the UMEM (any driver).
	BindCopy
	// BindZeroCopy has the driver use the UMEM directly (drivers with AF_XDP
	// zero-copy support only; veth has none).
	BindZeroCopy
)

func (m BindMode) String() string {
	switch m {
	case BindAuto:
		return "auto"
	case BindCopy:
		return "copy"
	case BindZeroCopy:
		return "zero-copy"
	}
	return fmt.Sprintf("BindMode(%d)", int(m))
}

// ErrNotSupported matches errors for features this kernel, driver or
// platform lacks: roce.ErrNotSupported, the project's one sentinel.
var ErrNotSupported = roce.ErrNotSupported

// ConnOptions configures an AF_XDP Conn.
type ConnOptions struct {
	// Ifindex is the interface to bind, in the calling thread's network
	// namespace.
	Ifindex int
	// Queue is the interface's receive queue to bind.
	Queue int
	// UMEM is the memory frames live in, supplied by the caller (rbridge's
	// pool arena): page-aligned (from mmap, never the Go heap), a multiple
	// of FrameSize, at least 4 frames. Without Frames, half the frames
	// receive and half send. The Conn does not free it; it must outlive
	// the Conn.
	UMEM []byte
	// Frames, if set, owns the UMEM's frames: the Conn takes the frames it
	// receives into and sends from there, and lends received frames to the
	// caller (ReadBatchLent), replacing each on the fill ring with a fresh
	// one, so a frame may stay lent for as long as the caller needs it.
	// Close gives every frame the Conn holds back.
	Frames FrameAllocator
	// FrameSize is the size of a UMEM frame: 2048 or 4096 (the default).
	// It bounds the largest frame sent or received.
	FrameSize int
	// RingSize is the number of entries of each ring, a power of two; 0
	// means the number of receive frames, at most 2048 (with Frames: 512,
	// and the Conn holds RingSize frames for each direction).
	RingSize int
	// Mode chooses copy or zero-copy; the default tries zero-copy first.
	Mode BindMode
	// NoNeedWakeup binds without XDP_USE_NEED_WAKEUP (see Wakeup), as on
	// a kernel that refuses it.
	NoNeedWakeup bool
	// LocalAddr is the IP address and UDP source port the Conn sends from.
	LocalAddr netip.AddrPort
	// LocalMAC is the source Ethernet address; nil means the interface's.
	LocalMAC net.HardwareAddr
	// Neighbors resolves a peer's IP address to the Ethernet address to
	// send to: a Resolver (the kernel's neighbour table, resolving what
	// it lacks) or StaticNeighbors.
	Neighbors Neighbors
	// Program, if set, gets the socket in its AF_XDP map for Queue, so the
	// classifier redirects the packets of added QPs to it.
	Program *Program
	// Share, if set, is an open Conn on another receive queue whose UMEM
	// registration this socket shares (XDP_SHARED_UMEM, Linux 5.10): one
	// UMEM for every queue of an interface (OpenQueues). UMEM and
	// FrameSize must be Share's and Frames must be set, as the Conns take
	// their frames from one allocator. The kernel binds it in Share's
	// mode and wakeup (a shared bind takes no flags: Mode and
	// NoNeedWakeup are ignored); it has fill, completion, RX and TX rings
	// of its own. Its multicast groups are Share's: a group joined on
	// either receives the datagrams that reach either.
	Share *Conn
	// Logger receives the bind mode and Wakeup; nil means slog.Default().
	Logger *slog.Logger
}

// A FrameAllocator owns the frames of a UMEM (rbridge's pool). It is
// called from the goroutines that read and write the Conn, and from Close.
type FrameAllocator interface {
	// AllocFrame returns the UMEM offset of a free frame, a multiple of
	// the frame size, or false when none is free.
	AllocFrame() (uint64, bool)
	// FreeFrame gives back a frame AllocFrame returned.
	FreeFrame(off uint64)
}

// Wakeup says how an AF_XDP Conn wakes the kernel to work its rings, and
// why not where it does not, as udpconn.Offload does for the UDP path.
//
// NeedWakeup (XDP_USE_NEED_WAKEUP, Linux 5.4): the kernel flags a ring
// (XDP_RING_NEED_WAKEUP) when it needs a system call to look at it, and
// the Conn makes one only then: a sendto after a batch on the TX ring, a
// recvfrom after a batch on the fill ring or before waiting for frames. A
// zero-copy driver clears the TX flag while it is sending and sets the
// fill ring's when it ran out of frames or went idle, so a busy socket
// skips most calls. In copy mode the kernel sends only inside sendto (its
// TX flag stays set) and takes fill entries as frames arrive (its fill
// flag is never set): one sendto per TX budget of packets and no call for
// the fill ring, bound with the flag or not. Without it the Conn reads
// the same flags, which then say the same: sendto every batch, no
// recvfrom (a zero-copy driver polls the fill ring instead).
//
// TXBudget (XDP_MAX_TX_SKB_BUDGET, Linux 6.17) is how many descriptors one
// sendto sends in copy mode: the TX ring's size where the kernel has the
// option, else its default of 32, and a larger batch takes more sendtos.
type Wakeup struct {
	NeedWakeup bool
	TXBudget   int
	// NoNeedWakeup says why NeedWakeup is off: the options turned it off,
	// or the kernel refused the bind flag (and its error). NoTXBudget
	// says why TXBudget is the kernel's default. Empty while on.
	NoNeedWakeup, NoTXBudget string
}

// String is "need_wakeup on, tx budget 512", or with the reason for what
// is off.
func (w Wakeup) String() string {
	b := fmt.Sprintf("tx budget %d", w.TXBudget)
	if w.NoTXBudget != "" {
		b += " (" + w.NoTXBudget + ")"
	}
	nw := "on"
	if !w.NeedWakeup {
		nw = "off (" + w.NoNeedWakeup + ")"
	}
	return "need_wakeup " + nw + ", " + b
}

// LogValue logs the wakeup as a group: need_wakeup and tx_budget, and why
// not.
func (w Wakeup) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Bool("need_wakeup", w.NeedWakeup), slog.Int("tx_budget", w.TXBudget)}
	if !w.NeedWakeup {
		attrs = append(attrs, slog.String("no_need_wakeup", w.NoNeedWakeup))
	}
	if w.NoTXBudget != "" {
		attrs = append(attrs, slog.String("no_tx_budget", w.NoTXBudget))
	}
	return slog.GroupValue(attrs...)
}

// ConnStats are an AF_XDP Conn's counters.
type ConnStats struct {
	Received    uint64 // transport packets handed to ReadBatch's caller
	Sent        uint64 // transport packets put on the transmit ring
	RxBytes     uint64 // bytes of the Ethernet frames of the packets Received
	TxBytes     uint64 // bytes of the Ethernet frames of the packets Sent
	BadFrames   uint64 // received frames that are not well-formed RoCEv2: dropped
	BadICRC     uint64 // received RoCEv2 packets whose ICRC is wrong: dropped
	TooLong     uint64 // received packets longer than the caller's buffer: dropped
	RXRingDrops uint64 // frames the kernel dropped: RX ring full or no free receive frame
	Lent        uint64 // received frames lent to the caller (ReadBatchLent)
	FillShort   uint64 // times the Frames had no frame to refill the fill ring with
	RXWaits     uint64 // times a read found the RX ring empty and waited for frames

	// System calls that wake the kernel to work a ring (Wakeup), made
	// and skipped: per packet, what the batching and the kernel's flags
	// saved.
	TXKicks          uint64 // sendto calls that sent the TX ring
	TXKicksSkipped   uint64 // TX batches left to the kernel without a sendto: the ring's flag was clear
	FillKicks        uint64 // recvfrom calls that woke the driver for the fill ring
	FillKicksSkipped uint64 // times a read looked at the fill ring's flag (after its batch, before a wait) and found it clear: no recvfrom

	// Datagrams to a multicast group (JoinGroup).
	GroupReceived uint64 // queued for the group's conn
	GroupOverflow uint64 // dropped: the group's conn had 256 datagrams unread
	GroupUnjoined uint64 // dropped: to a multicast address the Conn has not joined

	// Sending to a neighbour the Neighbors resolves.
	HeldForNeighbor uint64 // packets held while their neighbour was resolved
	NoNeighbor      uint64 // packets dropped for want of their neighbour's address: it did not answer, no route, or too many held
}

// Add adds o's counters to s: the sockets of one interface's queues
// (OpenQueues) counted as one.
func (s *ConnStats) Add(o ConnStats) {
	s.Received += o.Received
	s.Sent += o.Sent
	s.RxBytes += o.RxBytes
	s.TxBytes += o.TxBytes
	s.BadFrames += o.BadFrames
	s.BadICRC += o.BadICRC
	s.TooLong += o.TooLong
	s.RXRingDrops += o.RXRingDrops
	s.Lent += o.Lent
	s.FillShort += o.FillShort
	s.RXWaits += o.RXWaits
	s.TXKicks += o.TXKicks
	s.TXKicksSkipped += o.TXKicksSkipped
	s.FillKicks += o.FillKicks
	s.FillKicksSkipped += o.FillKicksSkipped
	s.GroupReceived += o.GroupReceived
	s.GroupOverflow += o.GroupOverflow
	s.GroupUnjoined += o.GroupUnjoined
	s.HeldForNeighbor += o.HeldForNeighbor
	s.NoNeighbor += o.NoNeighbor
}
