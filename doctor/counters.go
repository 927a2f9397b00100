package doctor

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/prometheus/procfs/sysfs"
)

// A troubleCounter is a port counter whose rise means trouble, and what.
type troubleCounter struct {
	name string
	what string
	get  func(*sysfs.InfiniBandPort) *uint64
}

// troubleCounters are read with procfs (hw_counters and counters);
// rxeCounters are Soft-RoCE's names for the same, which procfs leaves out.
var (
	troubleCounters = []troubleCounter{
		{"np_cnp_sent", "congestion: ECN-marked packets arrived, CNPs sent", func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.NpCnpSent }},
		{"rp_cnp_handled", "congestion: CNPs arrived, the sender slowed down", func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RpCnpHandled }},
		{"out_of_sequence", "loss: packets arrived out of sequence", func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.OutOfSequence }},
		{"packet_seq_err", "loss: sequence-error NAKs received", func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.PacketSeqErr }},
		{"local_ack_timeout_err", "loss: the transport timed out waiting for ACKs", func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.LocalAckTimeoutErr }},
		{"implied_nak_seq_err", "loss: READ responses or ACKs implied a missing packet", func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ImpliedNakSeqErr }},
		{"rnr_nak_retry_err", "receivers without posted receives, retries exhausted", func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RnrNakRetryErr }},
		{"port_rcv_errors", "link: malformed packets received", func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvErrors }},
		{"port_xmit_discards", "link: packets discarded on send (congestion or a down link)", func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitDiscards }},
		{"symbol_error", "link: bit errors on the wire (a bad cable or transceiver)", func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.SymbolError }},
		{"link_downed", "link: went down", func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LinkDowned }},
	}
	rxeCounters = []struct{ name, what string }{
		{"rcvd_seq_err", "loss: sequence-error NAKs received"},
		{"out_of_seq_request", "loss: requests arrived out of sequence"},
		{"retry_exceeded_err", "loss: retries exhausted, QPs went to error"},
	}
)

// sample is every trouble counter of one port, by name.
type sample map[string]uint64

// checkCounters samples the trouble counters of each port twice,
// Options.Interval apart, and names those that rose.
func (h *host) checkCounters(ts []rdmaTarget) {
	if len(ts) == 0 {
		return
	}
	sfs, err := sysfs.NewFS(filepath.Join(h.o.Root, "sys"))
	if err != nil {
		h.finding("counters", "host", nil, Warn, fmt.Sprintf("sysfs unreadable: %v", err), "")
		return
	}
	first := make([]sample, len(ts))
	errs := make([]error, len(ts))
	for i, t := range ts {
		first[i], errs[i] = h.sampleCounters(sfs, t)
	}
	h.o.Sleep(h.o.Interval)
	for i, t := range ts {
		if errs[i] != nil {
			h.finding("counters", t.subject(), t.leg, Warn, fmt.Sprintf("counters unreadable: %v", errs[i]), "")
			continue
		}
		second, err := h.sampleCounters(sfs, t)
		if err != nil {
			h.finding("counters", t.subject(), t.leg, Warn, fmt.Sprintf("counters unreadable: %v", err), "")
			continue
		}
		if len(second) == 0 {
			h.finding("counters", t.subject(), t.leg, OK, "the device has no trouble counters (hw_counters) to watch", "")
			continue
		}
		var rose []string
		for name, v := range second {
			if a, ok := first[i][name]; ok && v > a {
				rose = append(rose, fmt.Sprintf("%s +%d (%s)", name, v-a, counterWhat(name)))
			}
		}
		sort.Strings(rose)
		if len(rose) == 0 {
			h.finding("counters", t.subject(), t.leg, OK, fmt.Sprintf("none of %d trouble counters rose in %v", len(second), h.o.Interval), "")
			continue
		}
		h.finding("counters", t.subject(), t.leg, Warn,
			fmt.Sprintf("rising in %v: %s", h.o.Interval, strings.Join(rose, "; ")),
			"loss with PFC on points at the switch (pause frames, buffer); without PFC, check ECN marking on the switch (Kmin/Kmax) and ECN for RoCE here; link errors: the cable or transceiver")
	}
}

// sampleCounters reads one port's trouble counters.
func (h *host) sampleCounters(sfs sysfs.FS, t rdmaTarget) (sample, error) {
	s := sample{}
	dev, err := sfs.InfiniBandDevice(t.dev)
	if err != nil {
		return nil, err
	}
	p, ok := dev.Ports[uint(t.port)]
	if !ok {
		return nil, fmt.Errorf("port %d not in %s's sysfs", t.port, t.dev)
	}
	for _, c := range troubleCounters {
		if v := c.get(&p); v != nil {
			s[c.name] = *v
		}
	}
	for _, c := range rxeCounters {
		if v, err := h.readInt(h.portFile(t, filepath.Join("hw_counters", c.name))); err == nil && v >= 0 {
			s[c.name] = uint64(v)
		}
	}
	return s, nil
}

func counterWhat(name string) string {
	for _, c := range troubleCounters {
		if c.name == name {
			return c.what
		}
	}
	for _, c := range rxeCounters {
		if c.name == name {
			return c.what
		}
	}
	return name
}
