package xdp

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"
)

// Mode is how the classifier runs on an interface.
type Mode int

const (
	// ModeNative runs in the driver, before any socket buffer exists.
	ModeNative Mode = iota + 1
	// ModeGeneric runs in the kernel's generic hook, after the driver built
	// a socket buffer: every driver has it, at a cost.
	ModeGeneric
)

func (m Mode) String() string {
	switch m {
	case ModeNative:
		return "native"
	case ModeGeneric:
		return "generic"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ErrClosed is returned by a Program's methods after Close.
var ErrClosed = errors.New("xdp: program closed")

// Attach attaches the classifier to the interface with index ifindex in
// the calling thread's network namespace: in native mode if the driver
// supports it, else in generic mode (or in Options.Mode). It logs and
// returns the mode used.
func (p *Program) Attach(ifindex int) (Mode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, ErrClosed
	}
	if p.mode != 0 {
		flags := link.XDPDriverMode
		if p.mode == ModeGeneric {
			flags = link.XDPGenericMode
		}
		l, err := link.AttachXDP(link.XDPOptions{Program: p.objs.RbridgeClassify, Interface: ifindex, Flags: flags})
		if err != nil {
			return 0, fmt.Errorf("xdp: attach to ifindex %d in %v mode: %w", ifindex, p.mode, err)
		}
		p.log.Info("xdp: attached in the mode asked for", "ifindex", ifindex, "mode", p.mode)
		p.attached = append(p.attached, attachment{ifindex: ifindex, mode: p.mode, link: l})
		return p.mode, nil
	}
	l, nerr := link.AttachXDP(link.XDPOptions{
		Program:   p.objs.RbridgeClassify,
		Interface: ifindex,
		Flags:     link.XDPDriverMode,
	})
	mode := ModeNative
	if nerr != nil {
		var gerr error
		l, gerr = link.AttachXDP(link.XDPOptions{
			Program:   p.objs.RbridgeClassify,
			Interface: ifindex,
			Flags:     link.XDPGenericMode,
		})
		if gerr != nil {
			return 0, fmt.Errorf("xdp: attach to ifindex %d: native: %w; generic: %w", ifindex, nerr, gerr)
		}
		mode = ModeGeneric
		p.log.Warn("xdp: attached in generic mode: the driver has no native XDP", "ifindex", ifindex, "native_error", nerr)
	} else {
		p.log.Info("xdp: attached in native mode", "ifindex", ifindex)
	}
	p.attached = append(p.attached, attachment{ifindex: ifindex, mode: mode, link: l})
	return mode, nil
}

// Detach detaches the classifier from the interface with index ifindex.
func (p *Program) Detach(ifindex int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, a := range p.attached {
		if a.ifindex != ifindex {
			continue
		}
		p.attached = append(p.attached[:i], p.attached[i+1:]...)
		if err := a.link.Close(); err != nil {
			return fmt.Errorf("xdp: detach from ifindex %d: %w", ifindex, err)
		}
		p.log.Info("xdp: detached", "ifindex", ifindex, "mode", a.mode)
		return nil
	}
	return fmt.Errorf("xdp: detach from ifindex %d: not attached", ifindex)
}
