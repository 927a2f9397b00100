package roce

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// PacketConn moves RoCEv2 transport packets (a UDP payload: BTH to ICRC)
// between the userspace transport and the network, in batches. rbridge has
// three: a UDP socket (portable), AF_XDP (xdp.Conn, fast) and an in-memory
// simulated network for tests (SimNet).
//
// The transport hands WriteBatch packets whose ICRC trailer is zero; the
// conn, which knows the IP and UDP headers the packet travels with, fills it.
// On receive, a conn that sees those headers verifies the ICRC and drops (and
// counts) packets that fail; Message.ICRCChecked says whether it could.
//
// ReadBatch and WriteBatch may be called from different goroutines; neither
// may be called concurrently with itself.
type PacketConn interface {
	// ReadBatch blocks until at least one packet arrives, then fills up to
	// len(msgs) messages: each Buf[:N] holds a packet read into the caller's
	// Buf (its capacity must be at least MaxPacket). It returns the number
	// filled, or ErrConnClosed after Close.
	ReadBatch(msgs []Message) (int, error)
	// WriteBatch sends msgs[i].Buf[:N] to msgs[i].Addr and returns how many
	// were handed to the network; it reports the first failure.
	WriteBatch(msgs []Message) (int, error)
	// LocalAddr is the IP address and UDP port the conn sends from.
	LocalAddr() netip.AddrPort
	// Close unblocks ReadBatch and releases the conn; it is idempotent.
	Close() error
}

// A ReadDeadliner is a PacketConn whose ReadBatch can stop waiting: once
// the deadline t passes (the zero time: never), ReadBatch returns no
// packet and an error that matches os.ErrDeadlineExceeded, until a later
// deadline is set. The transport's receive loop sets one so that it wakes
// while nothing arrives, and its liveness can be told from a quiet link.
type ReadDeadliner interface {
	SetReadDeadline(t time.Time) error
}

// Message is one packet of a batch.
type Message struct {
	Buf  []byte         // the packet, or the buffer to read one into
	N    int            // bytes of Buf in use
	Addr netip.AddrPort // the peer: source on read, destination on write
	// ECN is the IP ECN codepoint: on read as received (ECNCE asks the
	// notification point for a CNP); on write, the codepoint to send with
	// (0 not ECN-capable, 1 or 2 ECN-capable; DCQCN flows use 2, ECT(0)).
	ECN uint8
	// ICRCChecked is set on read when the conn verified the ICRC.
	ICRCChecked bool
	// SrcPort, on write, is the UDP source port to send from (0: the conn's
	// own). The transport sets it per QP as the kernel does (SourcePort), so
	// ECMP spreads flows over paths; a conn that cannot choose it (a bound
	// UDP socket) sends from its own port. On read it is not set: Addr has
	// the peer's port.
	SrcPort uint16
	// Payload, on write, is the packet's payload when the sender did not
	// copy it into Buf (AppendPacketGather): the transport packet is then
	// Buf[:Hdr] (the headers), Payload, and Buf[Hdr:N] (pad and ICRC), and
	// the conn gathers the three. Nil otherwise: Buf[:N] is the packet.
	// Reads never set it.
	Payload []byte
	Hdr     int
	// Lent is set on a read by a FrameLender's ReadBatchLent: Buf[:N] lies
	// in the conn's receive frame Frame (not in memory the caller gave),
	// which stays the caller's until it hands Frame to ReturnFrames.
	Lent  bool
	Frame uint64
}

// A FrameLender is a PacketConn that can lend the memory packets landed in
// instead of copying them out (an AF_XDP socket whose UMEM frames come from
// the caller's pool): a consumer that keeps a packet's payload past the
// read takes a reference to the frame rather than a copy.
type FrameLender interface {
	PacketConn
	// LendsFrames reports whether ReadBatchLent lends: the conn was made
	// with frames to replace those it lends.
	LendsFrames() bool
	// ReadBatchLent is ReadBatch that leaves each packet where it
	// landed: msgs[i].Buf is set to it (the caller's Buf is not used),
	// with Lent and Frame set. Every frame returned must be handed back
	// through ReturnFrames once the caller is done with it.
	ReadBatchLent(msgs []Message) (int, error)
	// ReturnFrames hands frames lent by ReadBatchLent back. It is called
	// from the goroutine that reads; it may be called after Close.
	ReturnFrames(frames []uint64)
}

// Len is the length of the transport packet m carries, Payload included.
func (m *Message) Len() int { return m.N + len(m.Payload) }

// Sendable reports whether m holds a transport packet to write: at least a
// BTH and an ICRC in Buf[:N], and with a Payload, Hdr between the BTH and
// the ICRC.
func (m *Message) Sendable() bool {
	if m.N < BTHLen+ICRCLen || m.N > len(m.Buf) {
		return false
	}
	return m.Payload == nil || (m.Hdr >= BTHLen && m.Hdr <= m.N-ICRCLen)
}

// CopyTo copies the bytes m carries, its pieces put together, to dst and
// returns their length. It is an error, and nothing is copied, when N lies
// outside Buf (or, with a Payload, Hdr outside Buf[:N]) or dst is shorter
// than Len. It does not ask for a transport packet (Sendable does): a
// simulated network carries any datagram.
func (m *Message) CopyTo(dst []byte) (int, error) {
	if m.N < 0 || m.N > len(m.Buf) || (m.Payload != nil && (m.Hdr < 0 || m.Hdr > m.N)) {
		return 0, fmt.Errorf("roce: copy message: %d bytes (headers %d, payload %d) of a %d-byte buffer", m.N, m.Hdr, len(m.Payload), len(m.Buf))
	}
	if len(dst) < m.Len() {
		return 0, truncated("copy of the message", m.Len(), len(dst))
	}
	if m.Payload == nil {
		return copy(dst, m.Buf[:m.N]), nil
	}
	n := copy(dst, m.Buf[:m.Hdr])
	n += copy(dst[n:], m.Payload)
	return n + copy(dst[n:], m.Buf[m.Hdr:m.N]), nil
}

// MaxPacket is the largest transport packet rbridge sends or accepts: a
// 4096-byte path MTU's payload plus the largest header set and the ICRC.
const MaxPacket = 4096 + BTHLen + RETHLen + ImmDtLen + ICRCLen + 4

// ErrConnClosed is returned by a PacketConn's methods after Close.
var ErrConnClosed = errors.New("roce: packet conn closed")

// ErrNotSupported is the project's one sentinel for a feature this build,
// platform, kernel or device lacks. Every package's ErrNotSupported is this
// value (ibv, xdp, roce/udpconn, roce/transport, bridge), so errors.Is
// matches it whichever package's name a caller uses.
var ErrNotSupported = errors.New("not supported")
