package xdp

import (
	"fmt"
	"math"
)

// Fault is the classifier's fault injection, for tests: it drops
// well-formed RoCEv2 packets (for any QP) before they are classified, and
// counts them in Counters.DropFault. The zero Fault, the default, drops
// nothing.
type Fault struct {
	// EveryNth drops the Nth, 2Nth, ... RoCEv2 packet seen after SetFault
	// (counted over all CPUs); 0 is off.
	EveryNth uint32
	// Fraction drops each RoCEv2 packet with this probability, 0 to 1.
	Fraction float64
}

// SetFault sets the fault injection and restarts the EveryNth count.
func (p *Program) SetFault(f Fault) error {
	if !(f.Fraction >= 0 && f.Fraction <= 1) {
		return fmt.Errorf("xdp: fault fraction %v out of range 0-1", f.Fraction)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	v := classifierFault{
		EveryNth:  f.EveryNth,
		Threshold: uint64(math.Round(f.Fraction * (1 << 32))),
	}
	if err := p.objs.Faults.Put(uint32(0), v); err != nil {
		return fmt.Errorf("xdp: set fault: %w", err)
	}
	return nil
}
