package doctor

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rbridge/rbridge/internal/portcounters"
)

// A troubleCounter is a port counter whose rise means trouble, and what.
type troubleCounter struct {
	dir, name string
	what      string
}

// troubleCounters are the port counters (mlx5's names in hw_counters, the
// IBTA's in counters) and Soft-RoCE's own names for the same.
var troubleCounters = []troubleCounter{
	{portcounters.DirHW, "np_cnp_sent", "congestion: ECN-marked packets arrived, CNPs sent"},
	{portcounters.DirHW, "rp_cnp_handled", "congestion: CNPs arrived, the sender slowed down"},
	{portcounters.DirHW, "out_of_sequence", "loss: packets arrived out of sequence"},
	{portcounters.DirHW, "packet_seq_err", "loss: sequence-error NAKs received"},
	{portcounters.DirHW, "local_ack_timeout_err", "loss: the transport timed out waiting for ACKs"},
	{portcounters.DirHW, "implied_nak_seq_err", "loss: READ responses or ACKs implied a missing packet"},
	{portcounters.DirHW, "rnr_nak_retry_err", "receivers without posted receives, retries exhausted"},
	{portcounters.DirCounters, "port_rcv_errors", "link: malformed packets received"},
	{portcounters.DirCounters, "port_xmit_discards", "link: packets discarded on send (congestion or a down link)"},
	{portcounters.DirCounters, "symbol_error", "link: bit errors on the wire (a bad cable or transceiver)"},
	{portcounters.DirCounters, "link_downed", "link: went down"},
	// rxe's
	{portcounters.DirHW, "rcvd_seq_err", "loss: sequence-error NAKs received"},
	{portcounters.DirHW, "out_of_seq_request", "loss: requests arrived out of sequence"},
	{portcounters.DirHW, "retry_exceeded_err", "loss: retries exhausted, QPs went to error"},
}

// sample is every trouble counter of one port, by name.
type sample map[string]uint64

// checkCounters samples the trouble counters of each port twice,
// Options.Interval apart, and names those that rose.
func (h *host) checkCounters(ts []rdmaTarget) {
	if len(ts) == 0 {
		return
	}
	first := make([]sample, len(ts))
	errs := make([]error, len(ts))
	for i, t := range ts {
		first[i], errs[i] = h.sampleCounters(t)
	}
	h.o.Sleep(h.o.Interval)
	for i, t := range ts {
		if errs[i] != nil {
			h.finding("counters", t.subject(), t.leg, Warn, fmt.Sprintf("counters unreadable: %v", errs[i]), "")
			continue
		}
		second, err := h.sampleCounters(t)
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
func (h *host) sampleCounters(t rdmaTarget) (sample, error) {
	p, err := portcounters.Read(filepath.Join(h.o.Root, "sys"), t.dev, t.port)
	if err != nil {
		return nil, err
	}
	s := sample{}
	for _, c := range troubleCounters {
		if v, ok := p.Get(c.dir, c.name); ok {
			s[c.name] = v
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
	return name
}
