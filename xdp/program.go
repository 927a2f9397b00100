package xdp

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Options configures Load.
type Options struct {
	// CNPInterval is the least time between two CNPs to one QP; 0 means
	// 50 µs, the usual DCQCN notification-point interval.
	CNPInterval time.Duration
	// CNP has the classifier answer an ECN-CE packet for an owned QP
	// itself, with a CNP built in XDP and sent back out of the interface
	// (XDP_TX), at most one per QP per CNPInterval. XDP emits one frame per
	// packet, so the marked packet is consumed to make the CNP and its
	// sender recovers it as a loss (a retransmission, and for go-back-N the
	// packets after it). Off, the default, ECN-CE packets are counted and
	// delivered with their mark (roce.Message.ECN) and the transport, the
	// notification point, sends the CNP: nothing is lost. Turn it on only
	// where CNP latency matters more than the retransmissions, and then set
	// the transport's DeviceOptions.NoCNP.
	CNP bool
	// CNPDSCP is the DSCP that CNPs carry; 0 means 48, NVIDIA's default
	// cnp_dscp. It must be below 64.
	CNPDSCP uint8
	// Mode forces an attach mode; 0 means native where the driver
	// supports it, else generic. On veth, ModeGeneric is the cheaper one
	// for traffic that reaches the veth from the kernel's stack (a bridge,
	// a route): veth's native XDP copies each such packet into a fresh
	// page before the program runs, while generic XDP runs on the socket
	// buffer (the transport over AF_XDP in the integration guest: up to 2x
	// at 64-byte messages; docs/performance.md). Native stays the choice
	// for NICs and for veths fed by XDP redirects.
	Mode Mode
	// Logger receives the attach mode and detach events; nil means
	// slog.Default().
	Logger *slog.Logger
}

// DefaultCNPInterval is the CNP interval when Options.CNPInterval is zero.
const DefaultCNPInterval = 50 * time.Microsecond

const defaultCNPDSCP = 48

func (o *Options) check() error {
	if o.CNPInterval < 0 {
		return fmt.Errorf("xdp: negative CNP interval %v", o.CNPInterval)
	}
	if o.Mode != 0 && o.Mode != ModeNative && o.Mode != ModeGeneric {
		return fmt.Errorf("xdp: attach mode %v", o.Mode)
	}
	if o.CNPDSCP > 63 {
		return fmt.Errorf("xdp: CNP DSCP %d out of range 0-63", o.CNPDSCP)
	}
	return nil
}

// Program is the loaded classifier and its maps. It may be attached to
// several interfaces; Close detaches it from all of them and frees it.
// Its methods are safe for concurrent use.
type Program struct {
	objs classifierObjects
	log  *slog.Logger
	mode Mode // forced attach mode, or 0

	mu       sync.Mutex // guards the fields below
	attached []attachment
	closed   bool
	// filterRefs counts the owned QPs per bit of the classifier's
	// qp_filter (qpn & 0xffff): a bit is cleared when its count drops to 0.
	filterRefs map[uint16]int
}

type attachment struct {
	ifindex int
	mode    Mode
	link    link.Link
}

// Load loads the classifier into the kernel. It needs CAP_BPF and
// CAP_NET_ADMIN (root).
func Load(opts Options) (*Program, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	spec, err := loadClassifier()
	if err != nil {
		return nil, fmt.Errorf("xdp: load classifier spec: %w", err)
	}
	interval := opts.CNPInterval
	if interval == 0 {
		interval = DefaultCNPInterval
	}
	dscp := opts.CNPDSCP
	if dscp == 0 {
		dscp = defaultCNPDSCP
	}
	enabled := uint8(0)
	if opts.CNP {
		enabled = 1
	}
	for name, v := range map[string]any{
		"cnp_interval_ns": uint64(interval.Nanoseconds()),
		"cnp_enabled":     enabled,
		"cnp_dscp":        dscp,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("xdp: set %s: %w", name, err)
		}
	}
	p := &Program{log: opts.Logger, mode: opts.Mode, filterRefs: make(map[uint16]int)}
	if p.log == nil {
		p.log = slog.Default()
	}
	if err := spec.LoadAndAssign(&p.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("xdp: load classifier: %+v", ve)
		}
		return nil, fmt.Errorf("xdp: load classifier: %w", err)
	}
	return p, nil
}

// Close detaches the program from every interface and frees it and its
// maps. It is idempotent.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	var errs []error
	for _, a := range p.attached {
		if err := a.link.Close(); err != nil {
			errs = append(errs, fmt.Errorf("xdp: detach from ifindex %d: %w", a.ifindex, err))
			continue
		}
		p.log.Info("xdp: detached", "ifindex", a.ifindex, "mode", a.mode)
	}
	p.attached = nil
	if err := p.objs.Close(); err != nil {
		errs = append(errs, fmt.Errorf("xdp: close classifier: %w", err))
	}
	return errors.Join(errs...)
}

// setSocket puts the AF_XDP socket fd in the classifier's map for queue.
func (p *Program) setSocket(queue, fd int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.objs.Xsks.Put(uint32(queue), uint32(fd)); err != nil {
		return fmt.Errorf("xdp: add AF_XDP socket for queue %d: %w", queue, err)
	}
	return nil
}
