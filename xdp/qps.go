package xdp

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// QP is what the classifier knows of a queue pair rbridge owns.
type QP struct {
	// RemoteQPN is the peer's QP number: the destination of the CNPs that
	// answer ECN-CE on this QP. UD QPs take it from each packet's DETH.
	RemoteQPN uint32
}

// QPCounters are one QP's counters, summed over CPUs.
type QPCounters struct {
	Packets uint64 // packets for the QP (redirected or answered with a CNP)
	Bytes   uint64 // their Ethernet frame bytes
	ECNCE   uint64 // of which marked ECN-CE
	CNPs    uint64 // CNPs sent in answer
}

const maxQPN = 1<<24 - 1

// AddQP makes the classifier send packets for local QP number qpn to
// AF_XDP, its counters starting at zero. Adding a QP already there updates
// its RemoteQPN and keeps its counters (an increment racing with the update
// may be lost).
func (p *Program) AddQP(qpn uint32, qp QP) error {
	if qpn > maxQPN || qp.RemoteQPN > maxQPN {
		return fmt.Errorf("xdp: add qp %#x: QP numbers are 24 bits", qpn)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return fmt.Errorf("xdp: add qp %#x: %w", qpn, err)
	}
	// The CNP time goes in first: once the classifier sees the QP, it is there.
	if err := p.objs.CnpLast.Update(qpn, uint64(0), ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("xdp: add qp %#x CNP time: %w", qpn, err)
	}
	per := make([]classifierQp, ncpu)
	err = p.objs.Qps.Lookup(qpn, &per)
	if err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: add qp %#x: %w", qpn, err)
	}
	added := err != nil
	for i := range per {
		per[i].RemoteQpn = qp.RemoteQPN
	}
	if err := p.objs.Qps.Put(qpn, per); err != nil {
		return fmt.Errorf("xdp: add qp %#x: %w", qpn, err)
	}
	if added {
		// The filter bit last: the classifier looks further only once the
		// QP's entry is there.
		if err := p.setFilterLocked(qpn, +1); err != nil {
			p.objs.Qps.Delete(qpn)
			return fmt.Errorf("xdp: add qp %#x: %w", qpn, err)
		}
	}
	return nil
}

// setFilterLocked counts one more (delta +1) or one fewer (-1) owned QP on
// qpn's bit of the classifier's qp_filter, setting the bit at the first and
// clearing it after the last.
func (p *Program) setFilterLocked(qpn uint32, delta int) error {
	key := uint16(qpn)
	n := p.filterRefs[key] + delta
	if (delta > 0 && n > 1) || (delta < 0 && n > 0) {
		p.filterRefs[key] = n
		return nil
	}
	word := uint32(key >> 6)
	var bits uint64
	if err := p.objs.QpFilter.Lookup(word, &bits); err != nil {
		return fmt.Errorf("QP filter word %d: %w", word, err)
	}
	if delta > 0 {
		bits |= 1 << (key & 63)
	} else {
		bits &^= 1 << (key & 63)
	}
	if err := p.objs.QpFilter.Update(word, bits, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("QP filter word %d: %w", word, err)
	}
	if n > 0 {
		p.filterRefs[key] = n
	} else {
		delete(p.filterRefs, key)
	}
	return nil
}

// RemoveQP stops the redirection of qpn's packets (they go to the kernel
// again) and drops its counters. Removing a QP that is not there is an error
// matching ebpf.ErrKeyNotExist.
func (p *Program) RemoveQP(qpn uint32) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if err := p.objs.Qps.Delete(qpn); err != nil {
		return fmt.Errorf("xdp: remove qp %#x: %w", qpn, err)
	}
	if err := p.setFilterLocked(qpn, -1); err != nil {
		return fmt.Errorf("xdp: remove qp %#x: %w", qpn, err)
	}
	if err := p.objs.CnpLast.Delete(qpn); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("xdp: remove qp %#x CNP time: %w", qpn, err)
	}
	return nil
}

// QPCounters returns the counters of qpn, summed over CPUs.
func (p *Program) QPCounters(qpn uint32) (QPCounters, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return QPCounters{}, ErrClosed
	}
	var per []classifierQp
	if err := p.objs.Qps.Lookup(qpn, &per); err != nil {
		return QPCounters{}, fmt.Errorf("xdp: qp %#x counters: %w", qpn, err)
	}
	var c QPCounters
	for _, s := range per {
		c.Packets += s.Packets
		c.Bytes += s.Bytes
		c.ECNCE += s.EcnCe
		c.CNPs += s.Cnps
	}
	return c, nil
}
