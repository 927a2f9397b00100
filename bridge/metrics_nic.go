package bridge

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rbridge/rbridge/internal/portcounters"
)

// A verbs leg's NIC keeps counters of its own, per port, in sysfs: the
// IBTA port counters (port_rcv_data, symbol_error, ...) and the driver's
// hw_counters (mlx5's np_cnp_sent, out_of_sequence, ...; rxe's
// rcvd_seq_err, ...). A scrape reads them and exports each as
// rbridge_nic_<name>_total{leg,device,port}, the name as the driver
// spells it in snake case, _bytes before _total for the data counters.
// Which counters a port has depends on its driver: the gateway learns
// them when it starts and describes those.

// nicLabels label a port's counters: the verbs leg, and the device and
// port its address chose (bounded by the config).
var nicLabels = []string{"leg", "device", "port"}

// nicPort is a verbs leg's port, whose counters a scrape reads.
type nicPort struct {
	leg, device string
	port        int
	// descs are the metrics of the counters the port had when the gateway
	// started, by metric name.
	descs map[string]*prometheus.Desc
}

// newNICPort reads a port's counters under the sysfs at root and describes
// their metrics.
func newNICPort(root, lg, device string, port int) (*nicPort, error) {
	p, err := portcounters.Read(root, device, port)
	if err != nil {
		return nil, err
	}
	n := &nicPort{leg: lg, device: device, port: port, descs: map[string]*prometheus.Desc{}}
	for _, c := range p.Counters {
		name := nicMetricName(c)
		if _, ok := n.descs[name]; ok {
			continue // the same name in counters and hw_counters: the first
		}
		n.descs[name] = prometheus.NewDesc(name, nicHelp(c), nicLabels, nil)
	}
	return n, nil
}

// collect exports p's counters that n describes, each once.
func (n *nicPort) collect(ch chan<- prometheus.Metric, p *portcounters.Port) {
	seen := make(map[string]bool, len(p.Counters))
	port := strconv.Itoa(n.port)
	for _, c := range p.Counters {
		name := nicMetricName(c)
		d := n.descs[name]
		if d == nil || seen[name] {
			continue
		}
		seen[name] = true
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(c.Value), n.leg, n.device, port)
	}
}

// nicMetricName is the metric of a port counter.
func nicMetricName(c portcounters.Counter) string {
	name := strings.TrimSuffix(snakeCase(c.Name), "_total")
	if c.Bytes {
		name = strings.TrimSuffix(name, "_bytes") + "_bytes"
	}
	return "rbridge_nic_" + name + "_total"
}

// nicHelp is a counter's help text: it depends on its metric's name only,
// as Prometheus asks of every metric of one name.
func nicHelp(c portcounters.Counter) string {
	unit := ""
	if c.Bytes {
		unit = ", in bytes"
	}
	return "The verbs leg's RDMA port counter " + c.Name + " (sysfs: the IBTA port counters, or the driver's hw_counters), as the NIC counts it" + unit + "."
}

// snakeCase makes a driver's counter name a metric name's part: lower
// case, words joined by _ (irdma's ip4InOctets is ip4_in_octets), any
// other character _.
func snakeCase(s string) string {
	var b strings.Builder
	lower := func(r byte) bool { return r >= 'a' && r <= 'z' || r >= '0' && r <= '9' }
	upper := func(r byte) bool { return r >= 'A' && r <= 'Z' }
	for i := 0; i < len(s); i++ {
		r := s[i]
		switch {
		case upper(r):
			// A word starts here: after a lower-case letter or digit, or
			// as the last capital of an acronym (ECNMarked: ecn_marked).
			if i > 0 && (lower(s[i-1]) || upper(s[i-1]) && i+1 < len(s) && s[i+1] >= 'a' && s[i+1] <= 'z') {
				b.WriteByte('_')
			}
			b.WriteByte(r + 'a' - 'A')
		case lower(r) || r == '_':
			b.WriteByte(r)
		default:
			b.WriteByte('_')
		}
	}
	return b.String()
}
