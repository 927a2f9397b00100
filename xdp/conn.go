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
	// Logger receives the bind mode; nil means slog.Default().
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

// ConnStats are an AF_XDP Conn's counters.
type ConnStats struct {
	Received    uint64 // transport packets handed to ReadBatch's caller
	Sent        uint64 // transport packets put on the transmit ring
	BadFrames   uint64 // received frames that are not well-formed RoCEv2: dropped
	BadICRC     uint64 // received RoCEv2 packets whose ICRC is wrong: dropped
	TooLong     uint64 // received packets longer than the caller's buffer: dropped
	RXRingDrops uint64 // frames the kernel dropped: RX ring full or no free receive frame
	Lent        uint64 // received frames lent to the caller (ReadBatchLent)
	FillShort   uint64 // times the Frames had no frame to refill the fill ring with

	// Datagrams to a multicast group (JoinGroup).
	GroupReceived uint64 // queued for the group's conn
	GroupOverflow uint64 // dropped: the group's conn had 256 datagrams unread
	GroupUnjoined uint64 // dropped: to a multicast address the Conn has not joined

	// Sending to a neighbour the Neighbors resolves.
	HeldForNeighbor uint64 // packets held while their neighbour was resolved
	NoNeighbor      uint64 // packets dropped for want of their neighbour's address: it did not answer, no route, or too many held
}
