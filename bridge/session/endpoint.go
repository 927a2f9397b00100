package session

import (
	"errors"
	"github.com/rbridge/rbridge/bridge/pool"
	"sync/atomic"

	"github.com/rbridge/rbridge/roce/transport"
)

// An Endpoint is one end of a session: a connected RC queue pair on a leg,
// as the session drives it. rbridge has two: a QP of the userspace RoCEv2
// transport (NewUserspaceEndpoint), whose responder hands every request to
// the session before anything is acknowledged, and a verbs QP on an HCA,
// whose hardware acknowledges SENDs as they land and executes one-sided
// operations against the gateway's own memory (where they fail: the pool
// is registered for local access only).
//
// The session speaks one vocabulary to both: transport's Opcode, Status
// and Request; a verbs endpoint translates (the table in bridge/leg/endpoint_verbs_status.go).
type Endpoint interface {
	// Start hands the endpoint its session. Requests that arrive before
	// are held, or refused for lack of credit (the peer sends them again).
	Start(h Handler) error
	// Post issues ops toward the endpoint's peer, in order, and returns
	// how many it posted: each of those is reported to Handler.Done
	// exactly once, never from within Post, in the order posted (an RC
	// send queue completes in order). An error says why the rest
	// was refused (beyond Limits, the endpoint failed, an operation the
	// device cannot do); nothing is reported for them.
	Post(ops []*Op) (int, error)
	// Complete finishes a request that Handler.Request answered Pending.
	// A READ may be completed in parts (transport.Completion.More), each
	// a whole number of the endpoint's Limits.MTU but the last.
	Complete(tok transport.Token, c transport.Completion) error
	// Limits are what the endpoint's QP allows outstanding.
	Limits() Limits
	// Close tears the connection down; ops outstanding complete with
	// StatusWRFlushErr. It is idempotent.
	Close() error
}

// PeerLeaver is an endpoint that can tell, without waiting, that its
// peer released the connection (a DREQ): an op of the session flushed
// there is then the peer's disconnect, not a failure of the far side (the
// connection is released before its QP's work is flushed).
type PeerLeaver interface {
	PeerLeft() bool
}

// Handler is what an endpoint calls: a session's side.
type Handler interface {
	// Request is a request that arrived from the endpoint's peer, in PSN
	// order, as transport.Target.Request. It runs under the endpoint's
	// lock: it must not block or call an endpoint. buf, when not nil,
	// holds Payload (a received frame or receive buffer the handler may
	// take a reference to instead of copying).
	Request(r *transport.Request, buf *pool.Buf) transport.Reply
	// Flush follows a batch of Requests, with no lock held: the time to
	// post what they queued.
	Flush()
	// Done reports a posted op's outcome (op.Status, op.Orig).
	Done(op *Op)
	// Failed reports that the endpoint's connection failed (the QP left
	// RTS): outstanding ops complete with errors, requests pending at the
	// handler are void.
	Failed(err error)
}

// Resumer is an endpoint whose peer's requests the session may hold
// (transport.Hold) while the pool has no buffer for them, rather than
// refuse: nothing is answered until Resume asks the peer to send the held
// request again. A refusal's sequence NAK is honoured once per PSN, so a
// requester refused again before the pool had room waits for its
// retransmit timer; a held one is asked again once there is room.
type Resumer interface {
	Resume()
}

// SendHolder is an endpoint whose sends may wait while its handler takes a
// batch of completions: the completions it relays back, and the ops it
// posts meanwhile, leave in one write.
type SendHolder interface {
	HoldSends()
	ReleaseSends()
}

// DoneBatcher is a Handler told that a batch of Done calls begins and
// ends (an endpoint's completions taken together).
type DoneBatcher interface {
	BeginDone()
	EndDone()
}

// Limits bound what a session keeps outstanding on an endpoint.
type Limits struct {
	MaxSend     int // work requests posted and not completed
	MaxRdAtomic int // READs and atomics outstanding (the peer's responder resources)
	MTU         int // path MTU
	// MaxSGE is how many pieces of memory one op may gather (Op.Frags);
	// 0 or 1: an op's bytes lie in one buffer.
	MaxSGE int
	// NoProbe says the endpoint's peer is not probed for liveness with a
	// zero-length RDMA WRITE (an iWARP peer may check its STag all the
	// same; a peer gateway's link has its own keepalive).
	NoProbe bool
}

// Op is one work request a session posts on an endpoint.
type Op struct {
	Opcode   transport.Opcode
	Buf      *pool.Buf // the local bytes: sent, written, read into, or the atomic's 8
	Off, Len int       // the span of Buf (or, with Frags, their total length)
	// Frags, when not empty (Buf nil), are the bytes of a SEND or WRITE
	// gathered from where they were received (AF_XDP frames), in order:
	// at most the endpoint's Limits.MaxSGE.
	Frags   []Frag
	Remote  uint64
	RKey    uint32
	Imm     uint32
	InvRKey uint32
	Compare uint64
	SwapAdd uint64

	// Set by the endpoint before Done.
	Status transport.Status
	Orig   uint64 // an atomic's original value

	// The session's.
	tok   transport.Token
	relay *relay
	next  *Op // free list
	// A READ longer than a part (split) waits in the queue whole and is
	// posted a part at a time (cut: the bytes posted so far); a part says
	// where it lies in its READ (partOff) and whether parts follow (more).
	split, more  bool
	cut, partOff int
	// chain says Frags are the pool's largest buffers a long SEND was
	// copied into (the last one partly filled), not lent frames.
	chain bool
	// ulp says the session's Protocol accepted the op's message and gave
	// it ulpTag: its completion is reported to the Protocol.
	ulp    bool
	ulpTag uint64
	// held says the op waits in the queue for its staging (and holds up
	// what follows); void that it was answered in place: completed to its
	// sender, never posted; own that the session issued it for a staging
	// (a pull, a push, a reply in place): nothing is completed back.
	held, void bool
	own        *staged
	// probe says the op is a liveness probe (a zero-length WRITE): its
	// completion is the session's alone.
	probe bool
}

// Frag is a span of a pool buffer.
type Frag struct {
	Buf      *pool.Buf
	Off, Len int
}

// Bytes returns the op's local bytes (nil for gathered ones: see Frags).
func (o *Op) Bytes() []byte {
	if o.Buf == nil {
		return nil
	}
	return o.Buf.B()[o.Off : o.Off+o.Len]
}

// ErrPeerDisconnected matches the end of a session because a peer
// disconnected (a DREQ, rdma_cm's DISCONNECTED): how sessions normally end.
var ErrPeerDisconnected = errors.New("the peer disconnected")

// ErrEndpointFailed matches posts on an endpoint whose connection failed.
var ErrEndpointFailed = errors.New("endpoint failed")

// Two kinds of endpoint tell the session more, by implementing these
// optional interfaces.

// A Drainer is an endpoint whose peer's requests were acknowledged before
// the session relayed them (a verbs QP: the HCA acknowledges a SEND as it
// lands): when its connection ends, the session first relays what it had
// received, then ends.
type Drainer interface {
	Endpoint
	// Drained is closed once every request the endpoint received has
	// been handed to the session (its QP's receives flushed).
	Drained() <-chan struct{}
}

// A StartNotifier is an endpoint that can fail before the session has
// started both endpoints (a verbs client that disconnected before its
// connection was handed over): the session calls Started once both
// started, and the endpoint reports such a failure to its Handler then.
type StartNotifier interface {
	Endpoint
	Started()
}

// A HandlerSlot holds an endpoint's Handler: empty until Start sets it,
// once. Every endpoint keeps one, read from its own goroutines.
type HandlerSlot struct{ p atomic.Pointer[Handler] }

// Set stores h; it reports false when the slot was set already.
func (s *HandlerSlot) Set(h Handler) bool { return s.p.CompareAndSwap(nil, &h) }

// Get returns the Handler, nil before Set.
func (s *HandlerSlot) Get() Handler {
	if p := s.p.Load(); p != nil {
		return *p
	}
	return nil
}
