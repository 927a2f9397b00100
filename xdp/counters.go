package xdp

import "fmt"

// Counters are the classifier's global counters, summed over CPUs.
type Counters struct {
	NotRoCE       uint64 // passed: not IPv4/IPv6 UDP to port 4791
	Unowned       uint64 // passed: RoCEv2 for a QP not added with AddQP
	NoSocket      uint64 // passed: an owned QP, but no AF_XDP socket on the receiving queue
	Redirected    uint64 // sent to an AF_XDP socket
	DropTruncated uint64 // dropped: RoCEv2 shorter than its headers, or inconsistent lengths
	DropVersion   uint64 // dropped: BTH transport version not 0
	DropOpcode    uint64 // dropped: reserved or unsupported opcode (RD, ...)
	DropFault     uint64 // dropped by fault injection
	CNPSent       uint64 // CNPs sent in answer to ECN-CE
	CNPLimited    uint64 // ECN-CE within a QP's CNP interval: no CNP
	CNPFailed     uint64 // a CNP was due but the packet could not be resized into one
	Unjoined      uint64 // passed: RoCEv2 to QPN 0xFFFFFF for a group not added with AddGroup
}

// Counters returns the global counters.
func (p *Program) Counters() (Counters, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Counters{}, ErrClosed
	}
	var c Counters
	for i, dst := range []*uint64{
		classifierCounterCOUNTER_NOT_ROCE:       &c.NotRoCE,
		classifierCounterCOUNTER_UNOWNED:        &c.Unowned,
		classifierCounterCOUNTER_NO_SOCKET:      &c.NoSocket,
		classifierCounterCOUNTER_REDIRECT:       &c.Redirected,
		classifierCounterCOUNTER_DROP_TRUNCATED: &c.DropTruncated,
		classifierCounterCOUNTER_DROP_VERSION:   &c.DropVersion,
		classifierCounterCOUNTER_DROP_OPCODE:    &c.DropOpcode,
		classifierCounterCOUNTER_DROP_FAULT:     &c.DropFault,
		classifierCounterCOUNTER_CNP_SENT:       &c.CNPSent,
		classifierCounterCOUNTER_CNP_LIMITED:    &c.CNPLimited,
		classifierCounterCOUNTER_CNP_FAILED:     &c.CNPFailed,
		classifierCounterCOUNTER_UNJOINED:       &c.Unjoined,
	} {
		var per []uint64
		if err := p.objs.Counters.Lookup(uint32(i), &per); err != nil {
			return Counters{}, fmt.Errorf("xdp: read counter %d: %w", i, err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return c, nil
}
