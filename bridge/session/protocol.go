package session

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/rbridge/rbridge/roce/transport"
)

// A Protocol is the upper-layer protocol a session's route carries
// (NVMe over Fabrics; later RPC-over-RDMA, iSER), as the session hands it
// the messages it relays: every SEND-family message (SEND, SEND_WITH_IMM,
// SEND_WITH_INV), in both directions, whole, before it is posted on the
// far endpoint, and the far endpoint's completion of each. One value
// serves one session, that is one queue pair of the protocol (an NVMe
// admin queue and each I/O queue are sessions of their own).
//
// One-sided operations (READ, WRITE, atomics) are not handed to it: they
// move the data the messages describe.
//
// Concurrency: the two directions call Message and Sent independently and
// at once; a Protocol guards its own state. Message runs under the
// relay's lock, itself under an endpoint's: it must not block, nor call
// the session or an endpoint.
type Protocol interface {
	// Message sees a message as it is queued for the far endpoint (its
	// last packet arrived). It may rewrite the message's bytes in place
	// (m.Bytes: the length never changes) and its Opcode, Imm and InvRKey
	// (within the SEND family), and set m.Tag, which Sent gives back. It
	// must not keep m or its bytes after it returns.
	//
	// An error refuses the message: it fails back to its sender (an
	// invalid request NAK, or an error completion of a receive that a
	// verbs leg acknowledged already), nothing after it is relayed in that
	// direction (what came before is, and completes), and then the
	// session ends with an error that matches ErrRefused and wraps this
	// one. The error names what was wrong with
	// the message; Message names the message (Describe).
	Message(m *Message) error
	// Sent reports the far endpoint's completion of a message Message
	// accepted: its direction, its Tag and the far side's status. A
	// message still queued when the session ended is not reported.
	Sent(dir int, tag uint64, status transport.Status)
}

// ErrRefused matches the end of a session whose Protocol refused a
// message.
var ErrRefused = errors.New("the route's protocol refused a message")

// Message is a SEND-family message as a Protocol sees it.
type Message struct {
	// Dir is the direction: 0 from endpoint A to B, 1 from B to A.
	Dir int
	// Seq numbers the SEND-family messages of the direction, from 1.
	Seq    uint64
	Opcode transport.Opcode
	Imm    uint32 // SEND_WITH_IMM's immediate
	// InvRKey is the rkey a SEND_WITH_INV invalidates at its receiver.
	InvRKey uint32
	// Bytes are the message's bytes where they lie.
	Bytes Pieces
	// Tag is the Protocol's: Sent gives it back.
	Tag uint64

	// Staging, set by the session, says the far endpoint's peer
	// executes one-sided operations against the gateway's memory (an
	// Exposer): descriptors in the message for it must be staged.
	Staging bool
	// Set by a Stager (stage.go) only. Stage are the regions of the
	// message to stage, in the order Restage numbers them (only when
	// Staging): the message waits until they are. Reply, when not nil,
	// goes back to the sender in the message's place: the message is not
	// relayed. Finishes says the message is the response that ends the
	// staging of the other direction's message tagged Finish: when Push,
	// the regions the far peer wrote are pushed to the originator first.
	Stage    []Region
	Reply    []byte
	Finish   uint64
	Finishes bool
	Push     bool
	// Pushed, when not nil with Push, are the bytes the far peer wrote
	// into each region of the finished message, as its response says
	// (RPC-over-RDMA's write list, iSER's residual): only those are
	// pushed, from the region's start. A region without an entry, or
	// whose entry is 0, is not pushed; an entry above the region's length
	// refuses the response. Nil pushes every region whole (NVMe).
	Pushed []int
	// Patch, when not nil with Push, sees what the far peer wrote into
	// each region of the finished message before it is pushed (b, the
	// bytes pushed of region i, in the order of the regions), and may
	// rewrite it in place (NVMe's Identify Controller data, whose
	// largest transfer the gateway clamps to its staging). It must not
	// keep b.
	Patch func(i int, b []byte)
}

// Describe names m for an error: its direction and number, its opcode,
// its length and its first bytes.
func (m *Message) Describe() string {
	var head [16]byte
	n, _ := m.Bytes.ReadAt(head[:], 0)
	more := ""
	if n < m.Bytes.Len() {
		more = " ..."
	}
	return fmt.Sprintf("message %d %s, a %v of %d bytes: % x%s", m.Seq, [2]string{"from A to B", "from B to A"}[m.Dir&1], m.Opcode, m.Bytes.Len(), head[:n], more)
}

// isSend reports whether o is of the SEND family.
func isSend(o transport.Opcode) bool {
	return o == transport.OpSend || o == transport.OpSendWithImm || o == transport.OpSendWithInv
}

// Pieces are a message's bytes as they lie, in order: in one pool buffer
// (assembled, or received whole), or in several (received frames lent
// where they lie, or a chain of the pool's largest buffers). A Protocol
// parses in place when one piece holds what it needs (Prefix), and
// rewrites through WriteAt, or through the slices themselves.
type Pieces [][]byte

// Len is the message's length.
func (p Pieces) Len() int {
	n := 0
	for _, b := range p {
		n += len(b)
	}
	return n
}

// ReadAt copies the bytes at off into b (io.ReaderAt).
func (p Pieces) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("session: pieces: negative offset")
	}
	if len(b) == 0 {
		return 0, nil
	}
	n := 0
	for _, s := range p {
		if off >= int64(len(s)) {
			off -= int64(len(s))
			continue
		}
		k := copy(b[n:], s[off:])
		n += k
		off = 0
		if n == len(b) {
			return n, nil
		}
	}
	return n, io.EOF
}

// WriteAt copies b over the bytes at off (io.WriterAt), in place; it
// never writes past the message's end (io.ErrShortWrite, with what it
// wrote).
func (p Pieces) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("session: pieces: negative offset")
	}
	n := 0
	for _, s := range p {
		if n == len(b) {
			break
		}
		if off >= int64(len(s)) {
			off -= int64(len(s))
			continue
		}
		k := copy(s[off:], b[n:])
		n += k
		off = 0
	}
	if n < len(b) {
		return n, io.ErrShortWrite
	}
	return n, nil
}

// Prefix returns the message's first n bytes (all of them when it is
// shorter): a view of the first piece when it holds them, else a copy in
// scratch (grown when too short).
func (p Pieces) Prefix(n int, scratch []byte) []byte {
	n = max(0, min(n, p.Len()))
	if len(p) > 0 && len(p[0]) >= n {
		return p[0][:n:n]
	}
	if cap(scratch) < n {
		scratch = make([]byte, n)
	}
	k, _ := p.ReadAt(scratch[:n], 0)
	return scratch[:k:k]
}

// messageLocked hands op, a whole SEND-family message about to be queued
// on r.to, to the session's Protocol. When the Protocol refuses it, op is
// released and the reply fails the message back to its sender; nothing
// after it is relayed in r's direction, what was queued before it is, and
// then the session ends (endAfterRefusal).
func (r *relay) messageLocked(op *Op) (transport.Reply, bool) {
	p := r.s.proto
	if p == nil {
		return transport.Reply{}, true
	}
	r.seq++
	r.pieces = opPieces(op, r.pieces[:0])
	m := &r.m
	*m = Message{Dir: r.dir, Seq: r.seq, Opcode: op.Opcode, Imm: op.Imm, InvRKey: op.InvRKey, Bytes: r.pieces, Staging: r.exposes}
	err := p.Message(m)
	if err == nil && !isSend(m.Opcode) {
		err = fmt.Errorf("the protocol made it a %v: a message stays of the SEND family", m.Opcode)
	}
	if err == nil {
		err = r.stageLocked(op, m)
	}
	if err != nil {
		err = fmt.Errorf("%w: %s: %w", ErrRefused, m.Describe(), err)
	} else {
		op.Opcode, op.Imm, op.InvRKey = m.Opcode, m.Imm, m.InvRKey
		op.ulp, op.ulpTag = true, m.Tag
	}
	*m = Message{}
	clear(r.pieces) // no reference to the buffers outlives the message
	if err != nil {
		r.releaseLocked(op)
		r.refusal = err
		go r.endAfterRefusal(err)
		return transport.Reply{Result: transport.Failed, Status: transport.StatusRemInvReqErr}, false
	}
	return transport.Reply{}, true
}

// causeOf is why the session ends when err ended it: a refusal of the
// protocol's comes first, whatever followed from it (the refused sender's
// QP leaves RTS once it got its NAK, before the session ends on its own).
func (s *Session) causeOf(err error) error {
	for _, r := range []*relay{&s.ab, &s.ba} {
		r.mu.Lock()
		refusal := r.refusal
		r.mu.Unlock()
		if refusal != nil && !errors.Is(err, ErrRefused) {
			return fmt.Errorf("%w; then: %w", refusal, err)
		}
	}
	return err
}

// endAfterRefusal ends the session once what r queued before a refused
// message was posted and completed (at most drainTimeout), so that those
// requesters learn their own outcome, and the refused message's sender
// its failure, before the connections go.
func (r *relay) endAfterRefusal(err error) {
	deadline := time.NewTimer(drainTimeout)
	defer deadline.Stop()
	if !r.waitIdle(deadline.C, r.s.done) {
		select {
		case <-r.s.done:
			return // it ended meanwhile
		default:
		}
		r.s.log.Warn("what was relayed before a refused message did not complete in time: the rest fails", "timeout", drainTimeout, "state", r.state())
	}
	r.s.fail(nil, err)
}
