package bridge

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/portcounters"
	"github.com/rbridge/rbridge/internal/testlog"
)

// verbsGateway is a gateway with verbs legs on the named device ports, as
// a scrape reads it (the config's userspace leg and route are not open).
func verbsGateway(t *testing.T, ports map[string]string) *Gateway {
	t.Helper()
	y := "legs:\n"
	legs := map[string]leg.Leg{}
	for name, dp := range ports {
		dev, port, _ := strings.Cut(dp, "/")
		y += fmt.Sprintf("  - {name: %s, kind: verbs, ip: 198.18.3.%d, device: %s}\n", name, len(legs)+1, dev)
		var n int
		fmt.Sscan(port, &n)
		legs[name] = &verbsDouble{dev: dev, port: n}
	}
	y += `  - {name: roce, kind: userspace, interface: lo, ip: 127.0.0.1, io: udp}
routes:
  - {name: r, listen: {leg: roce, addr: "127.0.0.1:7471"}, target: {leg: ` + first(ports) + `, addr: "198.18.3.9:7471"}}
`
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	pl, err := pool.New(pool.Options{Size: 1 << 20, Classes: []int{4096}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	status := map[string]leg.Status{}
	for name := range legs {
		status[name] = leg.Status{Name: name, Kind: config.KindVerbs}
	}
	return &Gateway{cfg: cfg, log: testlog.New(t), pool: pl, legs: legs, legStatus: status, sessions: map[*session.Session]*sessionInfo{},
		stopped: map[string]error{}, ended: map[string]*session.StatsSnapshot{}, routeStats: map[string]*GatewayStats{}}
}

func first(m map[string]string) string {
	for k := range m {
		return k
	}
	return ""
}

// sysTree merges doctor's fixture trees (an mlx5 host's, the guest's rxe
// devices) into one sysfs and writes counter files: path under
// class/infiniband -> value.
func sysTree(t *testing.T, values map[string]uint64) string {
	t.Helper()
	if guest.InGuest() {
		// The guest runs the test binary beside its own testdata only;
		// its real rxe2 is read through rbridge run there
		// (integration/gateway's TestGuestRunOperations).
		t.Skip("doctor's fixture trees are not in the guest: a host test")
	}
	root := filepath.Join(t.TempDir(), "sys")
	for _, tree := range []string{"good", "rxe-good"} {
		if err := os.CopyFS(root, os.DirFS(filepath.Join("../doctor/testdata", tree, "sys"))); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	for f, v := range values {
		if err := os.WriteFile(filepath.Join(root, "class/infiniband", f), []byte(fmt.Sprintf("%d\n", v)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// nicSamples gathers the rbridge_nic_ samples: `name{leg,device,port}` ->
// value.
func nicSamples(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "rbridge_nic_") {
			continue
		}
		if mf.GetType() != dto.MetricType_COUNTER {
			t.Errorf("%s is a %v, want a counter", mf.GetName(), mf.GetType())
		}
		for _, m := range mf.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(ls, ",")+"}"] = m.GetCounter().GetValue()
		}
	}
	return out
}

// TestMetricsNICCounters: a verbs leg's port counters are on /metrics as
// the fixture trees hold them, per leg, device and port: mlx5's and the
// IBTA's through procfs (the data counters in bytes), rxe's own names
// read file by file; lifespan is not one. The metrics are described
// (a pedantic registry checks every sample against Describe) and pass
// Prometheus's linter (promtool's), rxe's link_downed and the IBTA's
// sharing one metric.
func TestMetricsNICCounters(t *testing.T) {
	g := verbsGateway(t, map[string]string{"ib": "mlx5_0/1", "soft": "rxe2/1"})
	root := sysTree(t, map[string]uint64{
		"mlx5_0/ports/1/hw_counters/np_cnp_sent": 40, "mlx5_0/ports/1/hw_counters/out_of_sequence": 7,
		"mlx5_0/ports/1/counters/port_xmit_data": 1000, "mlx5_0/ports/1/counters/link_downed": 2,
		"rxe2/ports/1/hw_counters/rcvd_seq_err": 3, "rxe2/ports/1/hw_counters/sent_pkts": 500, "rxe2/ports/1/hw_counters/link_downed": 1,
	})
	g.openNICs(root)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(g)); err != nil {
		t.Fatal(err)
	}
	got := nicSamples(t, reg)
	want := map[string]float64{
		"rbridge_nic_np_cnp_sent_total{mlx5_0,ib,1}":                40,
		"rbridge_nic_out_of_sequence_total{mlx5_0,ib,1}":            7,
		"rbridge_nic_port_xmit_data_bytes_total{mlx5_0,ib,1}":       4000, // 4-byte words
		"rbridge_nic_port_rcv_data_bytes_total{mlx5_0,ib,1}":        0,
		"rbridge_nic_link_downed_total{mlx5_0,ib,1}":                2,
		"rbridge_nic_rcvd_seq_err_total{rxe2,soft,1}":               3,
		"rbridge_nic_sent_pkts_total{rxe2,soft,1}":                  500,
		"rbridge_nic_link_downed_total{rxe2,soft,1}":                1,
		"rbridge_nic_duplicate_request_total{rxe2,soft,1}":          0,
		"rbridge_nic_retry_rnr_exceeded_err_total{rxe2,soft,1}":     0,
		"rbridge_nic_np_ecn_marked_roce_packets_total{mlx5_0,ib,1}": 0,
	}
	for name, v := range want {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, v)
		}
	}
	// Every counter file of the two ports but lifespan: 15 of mlx5_0's,
	// 15 of rxe2's.
	if len(got) != 30 {
		t.Errorf("%d NIC samples, want 30:\n%v", len(got), got)
	}
	for name := range got {
		if strings.Contains(name, "lifespan") {
			t.Errorf("%s: lifespan is not a counter", name)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}

	// A counter that moves is read again at the next scrape.
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/rxe2/ports/1/hw_counters/rcvd_seq_err"), []byte("9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if v := nicSamples(t, reg)["rbridge_nic_rcvd_seq_err_total{rxe2,soft,1}"]; v != 9 {
		t.Errorf("rcvd_seq_err after it rose to 9: %v", v)
	}
	// A port that went away has no samples, and the scrape goes on.
	if err := os.RemoveAll(filepath.Join(root, "class/infiniband/rxe2")); err != nil {
		t.Fatal(err)
	}
	after := nicSamples(t, reg)
	for name := range after {
		if strings.Contains(name, "rxe2") {
			t.Errorf("%s after rxe2 went away", name)
		}
	}
	if after["rbridge_nic_np_cnp_sent_total{mlx5_0,ib,1}"] != 40 {
		t.Error("mlx5_0's counters went with rxe2")
	}
}

// TestMetricsNICUnreadable: a verbs leg whose port has no counters to read
// gets none on /metrics; the gateway's other metrics are there.
func TestMetricsNICUnreadable(t *testing.T) {
	g := verbsGateway(t, map[string]string{"ib": "mlx5_9/1"})
	g.log = testlog.New(t) // a warning, not an error
	g.openNICs(sysTree(t, nil))
	if len(g.nics) != 0 {
		t.Errorf("nics %v for a device sysfs does not have", g.nics)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(g)); err != nil {
		t.Fatal(err)
	}
	if got := nicSamples(t, reg); len(got) != 0 {
		t.Errorf("NIC samples of a port never read: %v", got)
	}
}

func TestNICMetricName(t *testing.T) {
	for _, tc := range []struct {
		dir, name string
		bytes     bool
		want      string
	}{
		{"hw_counters", "np_cnp_sent", false, "rbridge_nic_np_cnp_sent_total"},
		{"counters", "port_rcv_data", true, "rbridge_nic_port_rcv_data_bytes_total"},
		{"counters_ext", "port_xmit_data_64", true, "rbridge_nic_port_xmit_data_64_bytes_total"},
		{"hw_counters", "ip4InOctets", false, "rbridge_nic_ip4_in_octets_total"},
		{"hw_counters", "RxECNMrkd", false, "rbridge_nic_rx_ecn_mrkd_total"},
		{"hw_counters", "tx-pause.frames", false, "rbridge_nic_tx_pause_frames_total"},
		{"hw_counters", "retries_total", false, "rbridge_nic_retries_total"},
	} {
		got := nicMetricName(portcountersCounter(tc.dir, tc.name, tc.bytes))
		if d := cmp.Diff(tc.want, got); d != "" {
			t.Errorf("%s/%s (-want +got):\n%s", tc.dir, tc.name, d)
		}
	}
}

func portcountersCounter(dir, name string, bytes bool) portcounters.Counter {
	return portcounters.Counter{Dir: dir, Name: name, Bytes: bytes}
}

// TestMetricsVerbsLeg: what a verbs leg's endpoints could not relay is
// counted per leg, over its connections.
func TestMetricsVerbsLeg(t *testing.T) {
	g := verbsGateway(t, map[string]string{"ib": "mlx5_9/1"})
	g.openNICs(sysTree(t, nil))
	v := g.legs["ib"].(*verbsDouble)
	v.stats.LostAcked.Add(2)
	v.stats.RecvStarved.Add(5)
	v.stats.QPErrors.Add(1)
	v.stats.Exposed.Add(7)
	v.stats.Revoked.Add(6)
	v.stats.Registered.Add(3)
	v.stats.OwnPDs.Add(4)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(g)); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "rbridge_verbs_") {
			for _, m := range mf.Metric {
				got[mf.GetName()+"{"+m.Label[0].GetValue()+"}"] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{"rbridge_verbs_lost_acked_total{ib}": 2, "rbridge_verbs_recv_starved_total{ib}": 5,
		"rbridge_verbs_qp_errors_total{ib}": 1, "rbridge_verbs_staging_exposed_total{ib}": 7, "rbridge_verbs_staging_revoked_total{ib}": 6,
		"rbridge_verbs_staging_registrations_total{ib}": 3, "rbridge_verbs_staging_own_pds_total{ib}": 4}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("verbs leg counters (-want +got):\n%s", d)
	}
}

// TestLegLinkState: a verbs leg's link is its port's state, up while
// ACTIVE, on /status and as rbridge_leg_up.
func TestLegLinkState(t *testing.T) {
	g := verbsGateway(t, map[string]string{"ib": "mlx5_0/1"})
	root := sysTree(t, nil)
	g.openNICs(root)
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewCollector(g)); err != nil {
		t.Fatal(err)
	}
	up := func() float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "rbridge_leg_up" {
				for _, m := range mf.Metric {
					if m.Label[0].GetValue() == "ib" {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		t.Fatal("no rbridge_leg_up{leg=ib}")
		return -1
	}
	lg := func() leg.Status {
		t.Helper()
		for _, l := range g.Status().Legs {
			if l.Name == "ib" {
				return l
			}
		}
		t.Fatal("no leg ib in the status")
		return leg.Status{}
	}
	if l := lg(); l.State != "ACTIVE" || !l.Up || up() != 1 {
		t.Errorf("an ACTIVE port: state %q, up %v, rbridge_leg_up %v", l.State, l.Up, up())
	}
	if err := os.WriteFile(filepath.Join(root, "class/infiniband/mlx5_0/ports/1/state"), []byte("1: DOWN\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if l := lg(); l.State != "DOWN" || l.Up || up() != 0 {
		t.Errorf("a DOWN port: state %q, up %v, rbridge_leg_up %v", l.State, l.Up, up())
	}
	if err := os.RemoveAll(filepath.Join(root, "class/infiniband/mlx5_0")); err != nil {
		t.Fatal(err)
	}
	if l := lg(); !strings.HasPrefix(l.State, "unreadable: ") || l.Up || up() != 0 {
		t.Errorf("a port gone: state %q, up %v, rbridge_leg_up %v", l.State, l.Up, up())
	}
}

// TestRunState: what Status says the gateway is doing.
func TestRunState(t *testing.T) {
	g := verbsGateway(t, map[string]string{"ib": "mlx5_0/1"})
	for _, tc := range []struct {
		reloading, closing, closed bool
		want                       RunState
	}{
		{false, false, false, StateRunning},
		{true, false, false, StateReloading},
		{true, true, false, StateDraining},
		{false, true, true, StateStopped},
	} {
		g.reloading, g.closing, g.closed = tc.reloading, tc.closing, tc.closed
		if got := g.Status().State; got != tc.want {
			t.Errorf("reloading %v closing %v closed %v: %q, want %q", tc.reloading, tc.closing, tc.closed, got, tc.want)
		}
	}
}

// verbsDouble stands for a verbs leg on a port whose sysfs the test built:
// what the gateway asks of it for /metrics and /status.
type verbsDouble struct {
	leg.Leg // nil: what a test here does not ask
	dev     string
	port    int
	stats   leg.VerbsStats
}

func (v *verbsDouble) NICPort() (string, int, bool) { return v.dev, v.port, true }
func (v *verbsDouble) Link(root string, withPort bool) (string, bool, *portcounters.Port) {
	if !withPort {
		return leg.PortState(root, v.dev, v.port)
	}
	return leg.PortLink(root, v.dev, v.port)
}
func (v *verbsDouble) Counters(c *leg.Counters) {
	s := v.stats.Snapshot()
	c.Verbs = &s
}
func (v *verbsDouble) Status(*leg.Status)                    {}
func (v *verbsDouble) Health(time.Time, time.Duration) error { return nil }
func (v *verbsDouble) Objects() (int, int)                   { return 0, 0 }
func (v *verbsDouble) Close() error                          { return nil }
