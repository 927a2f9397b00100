package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/integration/guest"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// The admin server on a gateway with one session that carried a SEND and
// a WRITE of 19 bytes each: /metrics counts exactly them (and keeps
// counting them once the session ended), passes promtool, and /status
// lists the session while it runs.

const payload = "through the gateway" // 19 bytes

func startAdmin(t *testing.T, g *bridge.Gateway) string {
	t.Helper()
	a, err := bridge.StartAdmin(bridge.AdminOptions{Gateway: g, Addr: "127.0.0.1:0", Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Close(context.Background()); err != nil {
			t.Errorf("admin close: %v", err)
		}
	})
	return "http://" + a.Addr().String()
}

// dialThrough connects client through the gateway's route at addr ("host
// of loNet:port") to target's listener ln; the target's QP has two
// 4 KiB receives posted.
func dialThrough(t *testing.T, ctx context.Context, client, target *cmApp, ln *cm.Listener, addr string) (cc, tc *cm.Conn, cqp *transport.QP) {
	t.Helper()
	return dialThroughTo(t, ctx, client, target, ln, netip.MustParseAddrPort(lo(addr)))
}

// dialThroughTo is dialThrough to a route's listen address to.
func dialThroughTo(t *testing.T, ctx context.Context, client, target *cmApp, ln *cm.Listener, to netip.AddrPort) (cc, tc *cm.Conn, cqp *transport.QP) {
	t.Helper()
	accepted := make(chan *cm.Conn, 1)
	tqp := target.qp(t)
	go func() {
		r, err := ln.Next(ctx)
		if err != nil {
			t.Error(err)
			accepted <- nil
			return
		}
		if err := tqp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			t.Error(err)
		}
		if err := tqp.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: target.mr, Offset: 0, Length: 4096}},
			transport.RecvWR{ID: 2, Local: transport.SGE{MR: target.mr, Offset: 4096, Length: 4096}}); err != nil {
			t.Error(err)
		}
		c, err := r.Accept(ctx, cm.AcceptOptions{QP: tqp})
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	cqp = client.qp(t)
	cc, err := client.cm.Dial(ctx, to, cm.DialOptions{QP: cqp})
	if err != nil {
		t.Fatalf("dial through the gateway: %v", err)
	}
	if tc = <-accepted; tc == nil {
		t.FailNow()
	}
	return cc, tc, cqp
}

// sessionThrough connects the client through the gateway to the target
// and sends a SEND and a WRITE_WITH_IMM of payload; it returns both ends'
// connections once everything completed.
func sessionThrough(t *testing.T, ctx context.Context, client, target *cmApp, ln *cm.Listener) (cc, tc *cm.Conn) {
	t.Helper()
	cc, tc, cqp := dialThrough(t, ctx, client, target, ln, "1:7471")
	sessionOps(t, ctx, client, target, cqp)
	return cc, tc
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", url, resp.Status, b)
	}
	return b
}

// scrape reads /metrics: every sample of the rbridge_ families, keyed by
// name and labels as `name{k="v",...}`.
func scrape(t *testing.T, base string) (map[string]float64, []byte) {
	t.Helper()
	b := get(t, base+"/metrics")
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, b)
	}
	out := map[string]float64{}
	for name, mf := range mfs {
		if !strings.HasPrefix(name, "rbridge_") {
			continue
		}
		for _, m := range mf.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, l.GetName()+"="+`"`+l.GetValue()+`"`)
			}
			out[name+"{"+strings.Join(ls, ",")+"}"] = value(mf.GetType(), m)
		}
	}
	return out, b
}

func value(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	}
	return -1
}

// promtool checks a scrape with Prometheus's own linter.
func promtool(t *testing.T, scrape []byte) {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		msg := "oracle promtool unavailable (" + err.Error() + "): run `make deps` (Debian package prometheus)"
		if os.Getenv("RBRIDGE_REQUIRE_ORACLES") == "1" {
			t.Fatal(msg)
		}
		t.Log(msg + ": the scrape is not linted")
		return
	}
	cmd := exec.Command(p, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

func TestAdminMetricsCountTraffic(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayConfig(t, ""))
	base := startAdmin(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	before, _ := scrape(t, base)
	cc, tc := sessionThrough(t, ctx, client, target, ln)
	during, b := scrape(t, base)
	promtool(t, b)
	// The collector describes every metric it collects, consistently (a
	// pedantic registry checks each collected metric against Describe).
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(bridge.NewCollector(g)); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("pedantic gather: %v", err)
	}
	if err := cc.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	<-tc.Done()
	waitUntil(t, "the session gone", func() bool { return g.Sessions() == 0 })
	after, b := scrape(t, base)
	promtool(t, b)

	// What moved, by exactly the traffic: one session, two operations of
	// 19 bytes to the target, nothing back.
	const n = float64(len(payload))
	for _, tc := range []struct {
		name                  string
		before, during, after float64
	}{
		{`rbridge_route_sessions_open{route="r"}`, 0, 1, 0},
		{`rbridge_route_sessions_total{route="r"}`, 0, 1, 1},
		{`rbridge_route_sessions_ended_total{route="r"}`, 0, 0, 1},
		{`rbridge_route_sessions_rejected_total{route="r"}`, 0, 0, 0},
		{`rbridge_route_sessions_refused_total{route="r"}`, 0, 0, 0},
		{`rbridge_route_sessions_failed_total{route="r"}`, 0, 0, 0},
		// By opcode: the WRITE_WITH_IMM is one, not a WRITE as well.
		{`rbridge_route_operations_total{direction="to_target",opcode="send",route="r"}`, 0, 1, 1},
		{`rbridge_route_operations_total{direction="to_target",opcode="write_with_imm",route="r"}`, 0, 1, 1},
		{`rbridge_route_operations_total{direction="to_target",opcode="write",route="r"}`, 0, 0, 0},
		{`rbridge_route_operations_total{direction="to_target",opcode="read",route="r"}`, 0, 0, 0},
		{`rbridge_route_operations_total{direction="to_client",opcode="send",route="r"}`, 0, 0, 0},
		{`rbridge_route_payload_bytes_total{direction="to_target",opcode="send",route="r"}`, 0, n, n},
		{`rbridge_route_payload_bytes_total{direction="to_target",opcode="write_with_imm",route="r"}`, 0, n, n},
		{`rbridge_route_payload_bytes_total{direction="to_target",opcode="write",route="r"}`, 0, 0, 0},
		{`rbridge_route_payload_bytes_total{direction="to_client",opcode="send",route="r"}`, 0, 0, 0},
		{`rbridge_route_operations_failed_total{direction="to_target",route="r"}`, 0, 0, 0},
	} {
		got := [3]float64{-1, -1, -1}
		for i, m := range []map[string]float64{before, during, after} {
			if v, ok := m[tc.name]; ok {
				got[i] = v
			}
		}
		if d := cmp.Diff([3]float64{tc.before, tc.during, tc.after}, got); d != "" {
			t.Errorf("%s before, during and after the session (-want +got):\n%s", tc.name, d)
		}
	}
	// Every opcode of each direction has its sample: 8 of each family.
	for _, fam := range []string{"rbridge_route_operations_total", "rbridge_route_payload_bytes_total"} {
		k := 0
		for name := range after {
			if strings.HasPrefix(name, fam+"{") {
				k++
			}
		}
		if k != 16 {
			t.Errorf("%d samples of %s, want 8 opcodes each way", k, fam)
		}
	}
	// Every leg's transport and CM counted the packets and MADs: the
	// client's leg a received the SEND's and WRITE's packets.
	for _, name := range []string{`rbridge_transport_rx_packets_total{leg="a"}`, `rbridge_transport_tx_packets_total{leg="b"}`,
		`rbridge_cm_rx_mads_total{leg="a"}`, `rbridge_cm_tx_mads_total{leg="b"}`, `rbridge_udp_rx_packets_total{leg="a"}`,
		`rbridge_udp_rx_calls_total{leg="a"}`, `rbridge_udp_tx_buffers_total{leg="b"}`} {
		if after[name] <= before[name] {
			t.Errorf("%s did not move: %v before, %v after", name, before[name], after[name])
		}
	}
	// The pool's classes (the gateway's default sizes), each with buffers.
	for _, size := range []string{"256", "4096", "65536"} {
		if after[`rbridge_pool_buffers{class_bytes="`+size+`"}`] <= 0 {
			t.Errorf("pool class %s: no rbridge_pool_buffers", size)
		}
	}
	for _, lg := range []string{"a", "b"} {
		if v, ok := after[`rbridge_leg_up{leg="`+lg+`"}`]; !ok || v != 1 {
			t.Errorf("rbridge_leg_up{leg=%q} = %v (present %v), want 1: lo is up", lg, v, ok)
		}
	}
	if after[`rbridge_leg_path_mtu_bytes{leg="a"}`] != 4096 {
		t.Errorf("leg a's path MTU %v, want 4096 (loopback)", after[`rbridge_leg_path_mtu_bytes{leg="a"}`])
	}
	// No label carries a client or a QPN.
	for name := range after {
		if strings.Contains(name, loNet) {
			t.Errorf("metric %s has an address for a label", name)
		}
	}
}

func TestAdminStatus(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, gatewayConfig(t, ""))
	base := startAdmin(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cc, tc := sessionThrough(t, ctx, client, target, ln)
	// A session enters the gateway's table once it started, which its
	// first operations may outrun.
	waitUntil(t, "the session in the gateway's table", func() bool { return g.Sessions() == 1 })

	var st bridge.Status
	if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Legs) != 2 || st.Legs[0].Name != "a" || st.Legs[0].Kind != "userspace" || st.Legs[0].IP != lo("1") ||
		st.Legs[0].Interface != "lo" || st.Legs[0].IO != "udp" || st.Legs[0].MTU != 4096 || !strings.Contains(st.Legs[0].MTUWhy, "loopback") ||
		!strings.HasPrefix(st.Legs[0].UDPOffload, "gso ") {
		t.Errorf("legs %+v", st.Legs)
	}
	// Loopback's operational state is "unknown", which the kernel counts
	// as up.
	for _, l := range st.Legs {
		if l.State != "unknown" || !l.Up {
			t.Errorf("leg %s on lo: state %q, up %v; want unknown, up", l.Name, l.State, l.Up)
		}
	}
	if st.State != bridge.StateRunning {
		t.Errorf("gateway state %q, want running", st.State)
	}
	wantRoutes := []bridge.RouteStatus{{Name: "r", ListenLeg: "a", Listen: lo("1:7471"), TargetLeg: "b", Target: lo("4:7471"), Sessions: 1}}
	if d := cmp.Diff(wantRoutes, st.Routes); d != "" {
		t.Errorf("routes (-want +got):\n%s", d)
	}
	if len(st.Sessions) != 1 {
		t.Fatalf("sessions %+v, want one", st.Sessions)
	}
	s := st.Sessions[0]
	if s.Route != "r" || !strings.HasPrefix(s.Client, lo("3:")) || s.Target != lo("4:7471") || s.AgeSeconds <= 0 || s.AgeSeconds > 20 {
		t.Errorf("session %+v", s)
	}
	for side, d := range map[string]string{"client": s.ClientSide, "target": s.TargetSide} {
		if !strings.Contains(d, "QP 0x") || !strings.Contains(d, ", MTU ") {
			t.Errorf("the %s side is described %q: want its QPNs and MTU", side, d)
		}
	}
	if d := cmp.Diff(bridge.DirectionStatus{Ops: 2, Bytes: 2 * uint64(len(payload)), OpsByOpcode: map[string]uint64{"send": 1, "write_with_imm": 1}}, s.ToTarget, cmpCopied); d != "" {
		t.Errorf("to target (-want +got):\n%s", d)
	}
	if d := cmp.Diff(bridge.DirectionStatus{}, s.ToClient); d != "" {
		t.Errorf("to client (-want +got):\n%s", d)
	}

	if err := cc.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	<-tc.Done()
	waitUntil(t, "the session gone", func() bool { return g.Sessions() == 0 })
	st = bridge.Status{}
	if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Sessions) != 0 || st.Routes[0].Sessions != 0 {
		t.Errorf("after the session ended: sessions %+v, routes %+v", st.Sessions, st.Routes)
	}
}

// TestAdminStatusWhileDraining: while Close ends the sessions, /status
// says the gateway is draining (here a client that vanished keeps its
// session's disconnect waiting for an answer), and /healthz fails; the
// admin server answers throughout.
func TestAdminStatusWhileDraining(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g, err := bridge.StartGateway(bridge.GatewayOptions{Config: gatewayConfig(t, ""), Logger: testlog.New(t), ConnectTimeout: 2 * time.Second,
		Pool: pool.Options{Size: 8 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	base := startAdmin(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, tc := sessionThrough(t, ctx, client, target, ln)
	state := func() bridge.RunState {
		var st bridge.Status
		if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
			t.Fatal(err)
		}
		return st.State
	}
	if s := state(); s != bridge.StateRunning {
		t.Fatalf("before: %q", s)
	}
	client.cm.Close()
	client.dev.Close() // the client is gone: no DREP will answer the gateway's DREQ
	closed := make(chan error, 1)
	go func() { closed <- g.Close(ctx) }()
	waitUntil(t, "/status saying draining", func() bool { return state() == bridge.StateDraining })
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz while draining: %d, want 503", resp.StatusCode)
	}
	select {
	case err := <-closed:
		t.Fatalf("Close ended (%v) at once: the vanished client's disconnect did not wait", err)
	default:
	}
	if err := <-closed; err != nil {
		t.Fatalf("close: %v", err)
	}
	<-tc.Done()
	if s := state(); s != bridge.StateStopped {
		t.Errorf("after Close: %q, want stopped", s)
	}
}

// cmpCopied ignores how much of the payload the relay copied (that
// depends on how packets arrived, not on the traffic).
var cmpCopied = cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".Copied" }, cmp.Ignore())

// TestAdminHealthz: /healthz is 200 while the gateway serves and 503,
// saying why, once it is closing.
func TestAdminHealthz(t *testing.T) {
	newCMApp(t, lo("3")) // the host's loopback (skipped in the guest, where rxe owns UDP 4791)
	g := startGateway(t, gatewayConfig(t, ""))
	base := startAdmin(t, g)
	for _, path := range []string{"/healthz", "/livez"} {
		if b := get(t, base+path); string(b) != "ok\n" {
			t.Errorf("%s of a serving gateway: %q", path, b)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/healthz", "/livez"} {
		code, b := probe(t, base+path)
		if code != http.StatusServiceUnavailable || !strings.Contains(b, "closing") {
			t.Errorf("%s of a closed gateway: %d %q, want 503 saying it is closing", path, code, b)
		}
	}
}

// probe GETs a health endpoint: its status code and body.
func probe(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestAdminHealthzNamesADownTunnel: while a quic leg's peer gateway is not
// connected (here it refuses the leg's certificate), /healthz (readiness)
// is 503 naming the leg and why, as status's peer_why says it, while
// /livez (liveness, the watchdog's check) stays 200: the gateway is alive,
// and a restart would not bring the peer back. Once the peers trust each
// other, /healthz is 200.
func TestAdminHealthzNamesADownTunnel(t *testing.T) {
	newCMApp(t, lo("3")) // the host's loopback (skipped in the guest, where rxe owns UDP 4791)
	t.Run("refused", func(t *testing.T) {
		filesA, caA := tunnelFiles(t, "gw-a")
		filesB, caB := tunnelFiles(t, "gw-b")
		ga, _ := quicGateways(t, filesA["gw-a"], filesB["gw-b"], caA, caB)
		base := startAdmin(t, ga)
		var why string
		waitUntil(t, "gateway A's quic leg saying why it is down", func() bool {
			why = ga.Status().Legs[1].PeerWhy
			return why != ""
		})
		code, b := probe(t, base+"/healthz")
		if code != http.StatusServiceUnavailable || !strings.Contains(b, `leg "q" (quic) is down: no peer connection: `) || !strings.Contains(b, "certificate") {
			t.Errorf("/healthz with the tunnel down: %d %q, want 503 naming leg q and why (peer_why %q)", code, b, why)
		}
		if code, b := probe(t, base+"/livez"); code != http.StatusOK || b != "ok\n" {
			t.Errorf("/livez with the tunnel down: %d %q, want 200 ok: the gateway is alive", code, b)
		}
	})
	t.Run("trusted", func(t *testing.T) {
		files, ca := tunnelFiles(t, "gw-a", "gw-b")
		ga, _ := quicGateways(t, files["gw-a"], files["gw-b"], ca, ca)
		base := startAdmin(t, ga)
		waitUntil(t, "/healthz ok once the tunnel is up", func() bool {
			code, _ := probe(t, base+"/healthz")
			return code == http.StatusOK
		})
	})
}

// markingConn marks every ECN-capable packet it reads Congestion
// Experienced, as a congested switch before the reader would.
type markingConn struct {
	roce.PacketConn
	marked atomic.Uint64
}

func (c *markingConn) ReadBatch(msgs []roce.Message) (int, error) {
	n, err := c.PacketConn.ReadBatch(msgs)
	for i := range n {
		if ecn := msgs[i].ECN; ecn == 1 || ecn == 2 { // ECT(1), ECT(0)
			msgs[i].ECN = roce.ECNCE
			c.marked.Add(1)
		}
	}
	return n, err
}

// TestAdminDCQCN: on a leg with ecn: true the gateway's QPs send
// ECN-capable packets; a target whose network marks them answers with
// CNPs, and the gateway's QP toward it cuts its rate: /metrics counts the
// cuts and the rate-limited QP on that leg (none on the leg without ecn),
// /status shows the session's target side held below line rate while the
// marked traffic lasts.
func TestAdminDCQCN(t *testing.T) {
	var mark *markingConn
	client := newCMApp(t, lo("3"))
	target := newCMAppOver(t, lo("4"), func(c roce.PacketConn) roce.PacketConn { mark = &markingConn{PacketConn: c}; return mark })
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	cfg := gatewayConfig(t, "")
	for i := range cfg.Legs {
		cfg.Legs[i].ECN = cfg.Legs[i].Name == "b"
	}
	g := startGateway(t, cfg)
	base := startAdmin(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before, _ := scrape(t, base)
	cc, tc, cqp := dialThrough(t, ctx, client, target, ln, "1:7471")
	// WRITEs to the target until the test ends: a congested flow (every
	// packet marked) that keeps DCQCN cutting.
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		wcs := make([]transport.WC, 16)
		for i := uint64(0); ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := cqp.PostSend(transport.SendWR{ID: i, Opcode: transport.OpWrite, Local: transport.SGE{MR: client.mr, Length: 16 << 10},
				Remote: target.mr.Addr() + 8192, RKey: target.mr.RKey(), Signaled: true}); err != nil {
				t.Error(err)
				return
			}
			if _, err := client.cq.PollWait(ctx, wcs[:1]); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() {
		close(stop)
		<-stopped
		_ = cc.Disconnect(ctx)
		<-tc.Done()
	}()
	var during map[string]float64
	waitUntil(t, "leg b's QP rate-limited on /metrics", func() bool {
		m, b := scrape(t, base)
		if m[`rbridge_transport_dcqcn_rate_limited_qps{leg="b"}`] != 1 {
			return false
		}
		promtool(t, b)
		during = m
		return true
	})
	if mark.marked.Load() == 0 {
		t.Fatal("the target marked no packet: the test proved nothing")
	}
	for _, m := range []struct {
		name           string
		before, during float64 // during: at least
	}{
		{`rbridge_transport_dcqcn_rate_limited_qps{leg="a"}`, 0, 0},
		{`rbridge_transport_dcqcn_rate_cuts_total{leg="a"}`, 0, 0},
		{`rbridge_transport_dcqcn_rate_cuts_total{leg="b"}`, 0, 1},
		{`rbridge_transport_rx_cnps_total{leg="b"}`, 0, 1},
	} {
		if before[m.name] != m.before || during[m.name] < m.during || m.during == 0 && during[m.name] != 0 {
			t.Errorf("%s: %v before the session, %v during; want %v, then %v", m.name, before[m.name], during[m.name], m.before, m.during)
		}
	}
	var last string
	waitUntil(t, "the target side held below line rate on /status", func() bool {
		var st bridge.Status
		if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
			t.Fatal(err)
		}
		if len(st.Sessions) != 1 {
			t.Fatalf("sessions %+v", st.Sessions)
		}
		s := st.Sessions[0]
		if s.ClientSideDCQCN != nil {
			t.Fatalf("the client side, on leg a without ecn, has DCQCN: %+v", *s.ClientSideDCQCN)
		}
		d := s.TargetSideDCQCN
		if d == nil {
			t.Fatal("the target side, on leg b with ecn, has no DCQCN")
		}
		last = fmt.Sprintf("%+v", *d)
		return d.Limited && d.CNPs > 0 && d.Cuts > 0 && d.RateBytesPerSecond > 0 && d.RateBytesPerSecond < 25e9/8
	})
	t.Logf("target side: %s", last)
}

// TestAdminServesNoControl: the admin server's TCP listener serves what
// reads alone: POST /reload there is refused (404) with where control
// is, and changes nothing; other methods on what it serves are refused.
func TestAdminServesNoControl(t *testing.T) {
	newCMApp(t, lo("3")) // the host's loopback (skipped in the guest)
	g := startGateway(t, gatewayConfig(t, ""))
	a, err := bridge.StartAdmin(bridge.AdminOptions{Gateway: g, Addr: "127.0.0.1:0", Logger: testlog.New(t), Control: "/run/rbridge/control.sock"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	base := "http://" + a.Addr().String()
	for _, tc := range []struct {
		method, path string
		code         int
		body         string
	}{
		{http.MethodPost, "/reload", http.StatusNotFound, "reload is not served over TCP: it is on the gateway's control socket /run/rbridge/control.sock (admin.control)"},
		{http.MethodGet, "/reload", http.StatusNotFound, "rbridge reload --control /run/rbridge/control.sock, or SIGHUP"},
		{http.MethodPost, "/status", http.StatusMethodNotAllowed, ""},
		{http.MethodDelete, "/metrics", http.StatusMethodNotAllowed, ""},
		{http.MethodHead, "/healthz", http.StatusOK, ""},
	} {
		req, err := http.NewRequest(tc.method, base+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code || !strings.Contains(string(b), tc.body) {
			t.Errorf("%s %s: %d %q; want %d, %q", tc.method, tc.path, resp.StatusCode, b, tc.code, tc.body)
		}
	}
	if st := g.Status(); st.State != bridge.StateRunning || len(st.Routes) != 1 {
		t.Errorf("after POST /reload over TCP: %s, routes %+v; want running as it was", st.State, st.Routes)
	}
	off, err := bridge.StartAdmin(bridge.AdminOptions{Gateway: g, Addr: "127.0.0.1:0", Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close(context.Background())
	resp, err := http.Post("http://"+off.Addr().String()+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if want := `send the gateway SIGHUP (its control socket is off: admin.control is "")`; resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), want) {
		t.Errorf("POST /reload with no control socket: %d %q; want 404, %q", resp.StatusCode, b, want)
	}
}

// TestAdminHostChecked: the admin server answers requests addressed to an
// IP address, localhost or a name in AdminOptions.Hosts; another name (a
// rebound one, in a browser) is refused 421 with why.
func TestAdminHostChecked(t *testing.T) {
	newCMApp(t, lo("3")) // the host's loopback (skipped in the guest)
	g := startGateway(t, gatewayConfig(t, ""))
	a, err := bridge.StartAdmin(bridge.AdminOptions{Gateway: g, Addr: "127.0.0.1:0", Logger: testlog.New(t), Hosts: []string{"gw1.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	port := a.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		host string
		code int
	}{
		{fmt.Sprintf("127.0.0.1:%d", port), http.StatusOK},
		{"127.0.0.1", http.StatusOK},
		{"[::1]:9479", http.StatusOK},
		{"[::1]", http.StatusOK},
		{"198.18.3.1:9479", http.StatusOK},
		{"localhost:9479", http.StatusOK},
		{"LocalHost.", http.StatusOK},
		{"gw1.example.com:9479", http.StatusOK},
		{"GW1.example.com", http.StatusOK},
		{"attacker.example.com:9479", http.StatusMisdirectedRequest},
		{"gw1.example.com.attacker.example", http.StatusMisdirectedRequest},
		{"127.0.0.1.nip.io", http.StatusMisdirectedRequest},
		{"localhost.attacker.example", http.StatusMisdirectedRequest},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+a.Addr().String()+"/status", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("GET /status for host %q: %d %q, want %d", tc.host, resp.StatusCode, b, tc.code)
		}
		if want := fmt.Sprintf("host %q is not this admin server's: it answers requests addressed to an IP address, localhost, or a name in admin.hosts (a guard against DNS rebinding)\n", tc.host); tc.code != http.StatusOK && string(b) != want {
			t.Errorf("GET /status for host %q: %q, want %q", tc.host, b, want)
		}
	}
}

// TestAdminNonLoopbackWarns: an admin server on an address that is not a
// loopback one says at warning level that what it serves is readable
// from the network; one on loopback says nothing of the kind.
func TestAdminNonLoopbackWarns(t *testing.T) {
	newCMApp(t, lo("3")) // the host's loopback (skipped in the guest)
	g := startGateway(t, gatewayConfig(t, ""))
	for _, tc := range []struct {
		addr string
		want string // "": no warning
	}{
		{"0.0.0.0:0", `level=WARN msg="metrics and status are readable from the network" at=0.0.0.0:`},
		{"127.0.0.1:0", ""},
		{"[::1]:0", ""},
	} {
		var logs logBuffer
		a, err := bridge.StartAdmin(bridge.AdminOptions{Gateway: g, Addr: tc.addr, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		a.Close(context.Background())
		switch l := logs.String(); {
		case tc.want == "" && strings.Contains(l, "WARN"):
			t.Errorf("admin server on %s warned:\n%s", tc.addr, l)
		case !strings.Contains(l, tc.want) || tc.want != "" && !strings.Contains(l, "hint=\"/metrics, /status, /healthz and /livez are readable from every network this host is on"):
			t.Errorf("admin server on %s logged:\n%s\nwant %q and the hint", tc.addr, l, tc.want)
		}
	}
}

// logBuffer is a log's text, written by the logger's goroutines and read
// by the test's.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAdminBuildAndUptime: /metrics names the binary (rbridge_build_info,
// 1 with its version, commit and Go version as labels) and /status says
// the version, when the gateway started and how long ago.
func TestAdminBuildAndUptime(t *testing.T) {
	build := bridge.BuildInfo{Version: "v9.8.7", Commit: "abc123", GoVersion: "go1.26"}
	g := startGatewayWith(t, gatewayConfig(t, ""), bridge.GatewayOptions{Pool: pool.Options{Size: 4 << 20}, Build: build})
	base := startAdmin(t, g)
	m, raw := scrape(t, base)
	promtool(t, raw)
	if v := m[`rbridge_build_info{commit="abc123",goversion="go1.26",version="v9.8.7"}`]; v != 1 {
		t.Errorf("rbridge_build_info with the build's labels: %v; want 1", v)
	}
	time.Sleep(20 * time.Millisecond)
	var st bridge.Status
	if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Version != "v9.8.7 (commit abc123) go1.26" {
		t.Errorf("/status version %q", st.Version)
	}
	if since := time.Since(st.Started); st.Started.IsZero() || since < 20*time.Millisecond || since > time.Minute {
		t.Errorf("/status started %v (%v ago)", st.Started, since)
	}
	if st.UptimeSeconds < 0.02 {
		t.Errorf("/status uptime %v s, want at least 0.02", st.UptimeSeconds)
	}
}

// TestLogStateKeyValue: the state rbridge run logs on SIGUSR1 is key=value
// throughout, the pool's classes included (it was Go's struct syntax:
// pool="[{Size:256 ...}]").
func TestLogStateKeyValue(t *testing.T) {
	if guest.InGuest() {
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these loopback gateways run on the host")
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))
	g, err := bridge.StartGateway(bridge.GatewayOptions{Config: gatewayConfig(t, ""), Logger: log, Pool: pool.Options{Size: 4 << 20, Classes: []int{256, 4096}}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close(context.Background())
	g.LogState()
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if !strings.Contains(out, "pool.4096.in_use=") || !strings.Contains(out, "pool.256.total=") || strings.Contains(out, "{Size:") {
		t.Errorf("the state's pool is not key=value:\n%s", out)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
