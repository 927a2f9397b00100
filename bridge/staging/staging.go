package staging

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/ulp/nvme"
)

// Options configures New.
type Options struct {
	// Protocol is the route's protocol (config.ProtocolNVMe).
	Protocol string
	// Route names the route, in errors.
	Route string
	// Host is the session direction that carries the host's (the
	// initiator's) messages: 0 when the host is on endpoint A. The gateway
	// puts the side that connected, the route's listen side, on A.
	Host int
	// Stats is where the session counts (shared by the route's sessions).
	Stats *Stats
	// Logger receives what is wrong but not fatal (default
	// slog.Default()).
	Logger *slog.Logger
	// MaxTransfer is the most bytes a staged region may hold (the
	// pool's largest buffer), or 0 for no bound. An NVMe controller's
	// largest transfer (MDTS) is clamped to it on its way to the host,
	// so that the host never sends a command the gateway cannot stage.
	MaxTransfer int
}

// ErrUnknownProtocol matches New's error for a protocol it does not
// understand.
var ErrUnknownProtocol = errors.New("unknown protocol")

// New returns the Protocol of one session of a route that carries
// o.Protocol.
func New(o Options) (session.Protocol, error) {
	if o.Stats == nil || o.Host < 0 || o.Host > 1 {
		return nil, fmt.Errorf("staging: route %q: new: stats and a host direction (0 or 1) are required", o.Route)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	switch o.Protocol {
	case config.ProtocolNVMe:
		return newNVMeQueue(o), nil
	case config.ProtocolNFS:
		return newNFSConn(o), nil
	case config.ProtocolISER:
		return newISERConn(o), nil
	case config.ProtocolSRP:
		return newSRPChannel(o), nil
	}
	return nil, fmt.Errorf("staging: route %q: protocol %q: %w", o.Route, o.Protocol, ErrUnknownProtocol)
}

// DataDirection is the way the data of a command moves: a command's
// descriptors name the host's memory, which the controller READs (host to
// controller) or WRITEs (controller to host).
type DataDirection uint8

// Data directions (NVMe's, the low two bits of the opcode).
const (
	DataNone DataDirection = iota
	DataHostToController
	DataControllerToHost
	DataBidirectional
	NumDataDirections
)

var dataDirectionNames = [NumDataDirections]string{"none", "host_to_controller", "controller_to_host", "bidirectional"}

// String names d as the metrics' direction label does.
func (d DataDirection) String() string {
	if d < NumDataDirections {
		return dataDirectionNames[d]
	}
	return fmt.Sprintf("DataDirection(%d)", uint8(d))
}

// Why is what was wrong with a message.
type Why uint8

// What can be wrong. The malformed ones end the session (a message the
// gateway does not understand is never relayed); the others are counted,
// logged (the first of each in a session) and relayed: the host learns of
// them from its own protocol stack.
const (
	// WhyMalformedCommand: a message from the host side that is not a
	// command capsule.
	WhyMalformedCommand Why = iota
	// WhyMalformedCompletion: a message from the controller side that is
	// not a completion.
	WhyMalformedCompletion
	// WhyUnknownCommandID: a completion for no command outstanding on its
	// queue.
	WhyUnknownCommandID
	// WhyReusedCommandID: a command whose ID is outstanding on its queue
	// already.
	WhyReusedCommandID
	// WhyUnstageable: a command whose data the gateway could not stage
	// (answered in the controller's place).
	WhyUnstageable
	// WhyProtection: a command with protection information, which the
	// gateway does not move (answered in the controller's place).
	WhyProtection
	NumWhys
)

var whyNames = [NumWhys]string{"malformed_command", "malformed_completion", "unknown_command_id", "reused_command_id", "unstageable", "protection_information"}

// String names w as the metrics' why label does.
func (w Why) String() string {
	if w < NumWhys {
		return whyNames[w]
	}
	return fmt.Sprintf("Why(%d)", uint8(w))
}

// Stats counts what a route's sessions saw of its protocol; every field
// is updated atomically.
type Stats struct {
	// Commands counts the host's commands by the way their data moves.
	Commands [NumDataDirections]atomic.Uint64
	// Descriptors counts the memory descriptors the commands carry that
	// name memory (NVMe: keyed SGL data blocks of a length above 0), and
	// DescribedBytes the bytes they name; Invalidations counts those
	// that ask the controller to invalidate their key remotely (NVMe: the
	// invalidate subtype).
	Descriptors, DescribedBytes, Invalidations atomic.Uint64
	// Completions counts the controller's completions; Answered the
	// completions the gateway made in the controller's place.
	Completions, Answered atomic.Uint64
	// Errors counts what was wrong, by Why.
	Errors [NumWhys]atomic.Uint64
}

// StatsSnapshot is Stats read at one moment, as plain values.
type StatsSnapshot struct {
	Commands                                   [NumDataDirections]uint64
	Descriptors, DescribedBytes, Invalidations uint64
	Completions, Answered                      uint64
	Errors                                     [NumWhys]uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	var out StatsSnapshot
	for i := range s.Commands {
		out.Commands[i] = s.Commands[i].Load()
	}
	out.Descriptors, out.DescribedBytes, out.Invalidations = s.Descriptors.Load(), s.DescribedBytes.Load(), s.Invalidations.Load()
	out.Completions, out.Answered = s.Completions.Load(), s.Answered.Load()
	for i := range s.Errors {
		out.Errors[i] = s.Errors[i].Load()
	}
	return out
}

// Queue is what a connection of a protocol route carries at most, as its
// connect request says: the messages either peer may have in flight
// (Depth: the receives each side of the gateway keeps posted for it), and
// the largest message the target (the listen side's far peer) sends,
// when the protocol bounds it (ResponseSize; 0 when it does not), and the
// largest the client sends (RequestSize; 0 when not bounded).
type Queue struct {
	Depth        int
	ResponseSize int
	RequestSize  int
}

// QueueOf reads a protocol connection's queue from the private data of
// the client's connect request; ok is false when the protocol has no such
// data or this is not it (the leg's own receives then stand). An nfs
// connection always has one: its depth is not in the private data
// (nfsQueue).
func QueueOf(protocol string, privateData []byte) (q Queue, ok bool) {
	switch protocol {
	case config.ProtocolNVMe:
		// The NVMe/RDMA connect request (NVMe over Fabrics 1.1, 7.4.1):
		// the host's receive queue (the completions it takes) and its
		// send queue, 0's based (the commands it sends). Each capsule
		// crossing toward the controller, and each completion back, needs
		// a receive on its way; a controller's responses are 16-byte
		// completions, with no data in them.
		r := nvme.CMRequest(privateData)
		if !r.IsValid() {
			return Queue{}, false
		}
		depth := max(int(r.HRQSize()), int(r.HSQSize())+1)
		if depth <= 1 {
			return Queue{}, false
		}
		return Queue{Depth: depth, ResponseSize: nvme.CompletionLen}, true
	case config.ProtocolNFS:
		return nfsQueue(privateData), true
	case config.ProtocolISER:
		return iserQueue(privateData)
	case config.ProtocolSRP:
		return srpQueue(privateData)
	}
	return Queue{}, false
}

// ConnectData is a protocol connection's rdma_cm private data as the
// gateway passes it on: the client's connect request toward the target
// (toTarget), or the target's reply toward the client. stages says that
// the target sits behind a verbs leg, so that the gateway stages its
// one-sided operations: what the private data offers on the client's
// behalf that staging cannot keep (remote invalidation of the client's
// keys, which the target would do with the gateway's) is withdrawn. It
// returns the data to pass on: b itself when unchanged, else a copy (b
// is never written); an error refuses the connection, and names what was
// wrong. A protocol whose private data the gateway passes unchanged (NVMe:
// its queue sizes) returns b.
func ConnectData(protocol string, toTarget, stages bool, b []byte) ([]byte, error) {
	switch protocol {
	case config.ProtocolNVMe:
		return b, nil
	case config.ProtocolNFS:
		return nfsConnectData(toTarget, stages, b), nil
	case config.ProtocolISER:
		return iserConnectData(toTarget, stages, b)
	}
	return b, nil
}

// ConnectDataOf is ConnectData for the connection of the session whose
// Protocol is p (New's; nil on a route without one): a protocol whose
// rewriting of one side's private data depends on the other's (iSER: the
// accept toward the initiator says the gateway invalidates its STags
// remotely only when its connect request offered to take that) keeps
// what it needs in p.
func ConnectDataOf(p session.Protocol, protocol string, toTarget, stages bool, b []byte) ([]byte, error) {
	if c, ok := p.(interface {
		connectData(toTarget, stages bool, b []byte) ([]byte, error)
	}); ok {
		return c.connectData(toTarget, stages, b)
	}
	return ConnectData(protocol, toTarget, stages, b)
}

// noteOnce counts why in stats and logs msg at warning level the first
// time warned has not seen why (each protocol logs a session's first of
// each, and counts the rest); on names what the later ones are counted on
// ("connection", "queue").
func noteOnce(stats *Stats, warned *[NumWhys]bool, log *slog.Logger, on string, why Why, msg string, args ...any) {
	stats.Errors[why].Add(1)
	if warned[why] {
		return
	}
	warned[why] = true
	log.Warn(msg+" (further ones on this "+on+" are counted only)", append(args, "why", why.String())...)
}
