package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/integration/guest"
)

// adminAddr is the admin server's address, from rbridge run's log.
func adminAddr(t testing.TB, logs *syncBuffer) string {
	t.Helper()
	re := regexp.MustCompile(`msg="admin server listening" addr=(\S+)`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("rbridge run logged no admin address:\n%s", logs.String())
	return ""
}

// scrape reads /metrics: every sample, keyed as its line has it
// (`name{label="value",...}`), and the scrape as sent.
func scrape(t *testing.T, admin string) (map[string]float64, []byte) {
	t.Helper()
	b, err := getMetrics(admin)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseSamples(b)
	if err != nil {
		t.Fatal(err)
	}
	return m, b
}

// parseSamples is every sample of a scrape, keyed as its line has it.
func parseSamples(b []byte) (map[string]float64, error) {
	m := map[string]float64{}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		i := strings.LastIndexByte(l, ' ')
		if i < 0 {
			return nil, fmt.Errorf("/metrics: line %q", l)
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("/metrics: line %q: %w", l, err)
		}
		m[l[:i]] = v
	}
	return m, nil
}

// getMetrics is /metrics as the gateway sent it.
func getMetrics(admin string) ([]byte, error) { return getMetricsVia(http.DefaultClient, admin) }

// getMetricsVia is getMetrics with hc (whose connections may start in
// another network namespace).
func getMetricsVia(hc *http.Client, admin string) ([]byte, error) {
	resp, err := hc.Get("http://" + admin + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return b, err
}

// sample is the value of name in m, failing the test when it is absent.
func sample(t *testing.T, m map[string]float64, name string) float64 {
	t.Helper()
	v, ok := m[name]
	if !ok {
		t.Fatalf("no sample %s on /metrics", name)
	}
	return v
}

// perftestReport is the message size and iterations a bandwidth test's
// report line says (under "#bytes #iterations ...").
func perftestReport(t *testing.T, out string) (size, iters int) {
	t.Helper()
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "#bytes" && f[1] == "#iterations" && i+1 < len(lines) {
			if v := strings.Fields(lines[i+1]); len(v) >= 2 {
				size, err1 := strconv.Atoi(v[0])
				iters, err2 := strconv.Atoi(v[1])
				if err1 == nil && err2 == nil {
					return size, iters
				}
			}
		}
	}
	t.Fatalf("no report line in perftest's output:\n%s", out)
	return 0, 0
}

// measuredPair runs a perftest pair through the gateway as pair does, and
// scrapes /metrics right before the attempt that ran: the difference is
// that run's traffic alone. from is the gateway log's line count then.
func measuredPair(t *testing.T, logs *syncBuffer, admin, tool string, server, client []string) (out string, from int, before, after map[string]float64) {
	t.Helper()
	for try := 1; ; try++ {
		// A session of an earlier attempt that has not ended yet would log
		// its end after from.
		for deadline := time.Now().Add(30 * time.Second); len(status(t, admin).Sessions) > 0; time.Sleep(100 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("sessions still open 30 s after %s's last attempt", tool)
			}
		}
		before, _ = scrape(t, admin)
		from = strings.Count(logs.String(), "\n")
		o, _, err := pairOnce(t, 3*time.Minute, tool, server, client) // TCG is slow
		if err == nil {
			after, _ = scrape(t, admin)
			return o, from, before, after
		}
		if why, again := pairAgain(err); again && try < pairTries {
			t.Logf("%s %s; again", tool, why)
			continue
		}
		t.Fatal(err)
	}
}

// sessionEnds are the "session ended" lines of route's sessions in the log
// from line from on: each session's operations and bytes toward the target.
func sessionEnds(logs string, from int, route string) (ops, bytes []int) {
	re := regexp.MustCompile(`msg="session ended" route=` + regexp.QuoteMeta(route) + ` .* ops_to_target=(\d+) ops_to_client=\d+ bytes_to_target=(\d+) `)
	for _, l := range strings.Split(logs, "\n")[from:] {
		if m := re.FindStringSubmatch(l); m != nil {
			o, _ := strconv.Atoi(m[1])
			b, _ := strconv.Atoi(m[2])
			ops, bytes = append(ops, o), append(bytes, b)
		}
	}
	return ops, bytes
}

func status(t testing.TB, admin string) bridge.Status {
	t.Helper()
	st, err := statusVia(http.DefaultClient, admin)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// statusVia reads a gateway's /status with hc (whose connections may
// start in another network namespace).
func statusVia(hc *http.Client, admin string) (bridge.Status, error) {
	var st bridge.Status
	resp, err := hc.Get("http://" + admin + "/status")
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s/status: %s", admin, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("GET %s/status: %w", admin, err)
	}
	return st, nil
}

// TestGuestRunOperations: rbridge run's admin server and reload with
// unmodified perftest and rping through it. /status names the legs' links
// (the userspace leg's interface in its namespace up, the verbs leg's port
// ACTIVE) and the gateway running, and shows the sessions while they run
// and none after; /metrics, scraped while perftest runs and after, counts
// what perftest reports, by opcode: ib_write_bw's WRITEs and their bytes
// exactly, ib_send_bw's SENDs exactly as the gateway's sessions logged them
// (its data connection carrying what perftest reports, its control
// connection's SENDs besides), the verbs leg's NIC counting the packets;
// both scrapes go to the host, where promtool lints them. A SIGHUP that
// adds a route and removes another leaves an rping session on a third
// undisturbed, and rbridge reload (on the control socket) then finds
// nothing to change.
func TestGuestRunOperations(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "gateway.yaml")
	// The control socket rbridge reload uses, this test's own.
	control := filepath.Join(dir, "control.sock")
	cfg := strings.Replace(gatewayConfig("udp", ns, ib), `control: ""`, "control: "+control, 1)
	if !strings.Contains(cfg, "control: "+control) {
		t.Fatal("the guest's config has no admin.control to set")
	}
	logs, proc := startGatewayAt(t, path, cfg)
	admin := adminAddr(t, logs)
	bin := guest.Rbridge(t)

	st := status(t, admin)
	if st.State != bridge.StateRunning {
		t.Errorf("gateway state %q, want running", st.State)
	}
	want := map[string]string{"roce": "up", "ib": "ACTIVE"} // vuser1 in user0; rxe2's port
	for _, l := range st.Legs {
		if l.State != want[l.Name] || !l.Up {
			t.Errorf("leg %s: link %q, up %v; want %q, up", l.Name, l.State, l.Up, want[l.Name])
		}
	}
	table, err := exec.Command(bin, "status", "--admin", admin).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(table), "gateway running\n") || !regexp.MustCompile(`(?m)^roce +userspace +\S+ +up `).Match(table) {
		t.Errorf("rbridge status: %v:\n%s", err, table)
	}

	// ib_send_bw through to-ib; /status and /metrics read while it runs.
	const n, size = 200, 4096
	type during struct {
		scrape []byte
		err    error
	}
	seen := make(chan during, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				seen <- during{err: errors.New("/status never showed the to-ib session while ib_send_bw ran")}
				return
			case <-time.After(50 * time.Millisecond):
			}
			resp, err := http.Get("http://" + admin + "/status")
			if err != nil {
				seen <- during{err: err}
				return
			}
			var st bridge.Status
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil {
				seen <- during{err: err}
				return
			}
			for _, s := range st.Sessions {
				if s.Route == "to-ib" && s.ClientSide != "" && s.TargetSide != "" {
					b, err := getMetrics(admin)
					seen <- during{scrape: b, err: err}
					return
				}
			}
		}
	}()
	args := []string{"-s", strconv.Itoa(size), "-n", strconv.Itoa(n)}
	out, from, before, after := measuredPair(t, logs, admin, "ib_send_bw", append([]string{"-R", "-d", ib.PeerDevice, "-p", "18515"}, args...),
		append(append([]string{"-R", "-d", ns.PeerDevice, "-p", "18515"}, args...), ns.IP.String()))
	close(done)
	if d := <-seen; d.err != nil {
		t.Error(d.err)
	} else {
		guest.Artifact(t, "metrics-during-ib_send_bw.prom", d.scrape)
	}
	waitSessionsEnded(t, logs)
	after, _ = scrape(t, admin) // the sessions' ends counted
	msgSize, iters := perftestReport(t, out)
	ops, bytes := sessionEnds(logs.String(), from, "to-ib")
	data, sumOps, sumBytes := 0, 0, 0
	for i := range ops {
		if ops[i] == iters && bytes[i] == iters*msgSize {
			data++
		}
		sumOps, sumBytes = sumOps+ops[i], sumBytes+bytes[i]
	}
	t.Logf("ib_send_bw reported %d iterations of %d bytes; the route's sessions since: %v operations, %v bytes toward the target", iters, msgSize, ops, bytes)
	if data == 0 {
		t.Errorf("no to-ib session carried exactly ib_send_bw's %d SENDs of %d bytes: %v ops, %v bytes", iters, msgSize, ops, bytes)
	}
	delta := func(name string) float64 { return sample(t, after, name) - sample(t, before, name) }
	const toIB = `{direction="to_target",opcode="%s",route="to-ib"}`
	if got := delta(fmt.Sprintf("rbridge_route_operations_total"+toIB, "send")); got != float64(sumOps) {
		t.Errorf("to-ib counted %v SENDs toward the target, its sessions %d", got, sumOps)
	}
	if got := delta(fmt.Sprintf("rbridge_route_payload_bytes_total"+toIB, "send")); got != float64(sumBytes) {
		t.Errorf("to-ib counted %v SEND bytes toward the target, its sessions %d", got, sumBytes)
	}
	if open := sample(t, after, `rbridge_route_sessions_open{route="to-ib"}`); open != 0 {
		t.Errorf("%v to-ib sessions open after perftest ended", open)
	}
	if st := status(t, admin); len(st.Sessions) != 0 {
		t.Errorf("/status lists %d sessions after every one ended", len(st.Sessions))
	}

	// ib_write_bw: its WRITEs are its data connection's alone.
	out, _, before, after = measuredPair(t, logs, admin, "ib_write_bw", append([]string{"-R", "-d", ib.PeerDevice, "-p", "18515"}, args...),
		append(append([]string{"-R", "-d", ns.PeerDevice, "-p", "18515"}, args...), ns.IP.String()))
	msgSize, iters = perftestReport(t, out)
	for _, c := range []struct {
		opcode     string
		ops, bytes int
	}{
		{"write", iters, iters * msgSize},
		{"write_with_imm", 0, 0}, {"read", 0, 0}, {"compare_swap", 0, 0}, {"fetch_add", 0, 0}, {"send_with_imm", 0, 0},
	} {
		o, b := delta(fmt.Sprintf("rbridge_route_operations_total"+toIB, c.opcode)), delta(fmt.Sprintf("rbridge_route_payload_bytes_total"+toIB, c.opcode))
		if o != float64(c.ops) || b != float64(c.bytes) {
			t.Errorf("ib_write_bw (%d iterations of %d bytes): to-ib counted %v %s operations of %v bytes, want %d of %d", iters, msgSize, o, c.opcode, b, c.ops, c.bytes)
		}
	}
	// rxe2, the verbs leg's NIC, sent every WRITE on (a packet each at
	// least), and lost nothing it acknowledged.
	const rxe2 = `{device="rxe2",leg="ib",port="1"}`
	if got := delta("rbridge_nic_sent_pkts_total" + rxe2); got < float64(iters) {
		t.Errorf("rxe2's sent_pkts rose by %v during ib_write_bw's %d WRITEs", got, iters)
	}
	for _, name := range []string{`rbridge_verbs_lost_acked_total{leg="ib"}`, `rbridge_leg_up{leg="ib"}`, `rbridge_leg_up{leg="roce"}`} {
		if v, w := sample(t, after, name), map[bool]float64{true: 1, false: 0}[strings.HasPrefix(name, "rbridge_leg_up")]; v != w {
			t.Errorf("%s = %v, want %v", name, v, w)
		}
	}
	waitSessionsEnded(t, logs)

	// An rping session on to-roce runs across a reload that removes
	// to-roce-any and adds another route.
	server := startServer(t, "rping", "-s", "-a", ns.PeerIP.String(), "-p", "7174", "-C", "100", "-v")
	rpingDone := make(chan string, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute) // TCG
		defer cancel()
		out, err := exec.CommandContext(ctx, "rping", "-c", "-I", ib.PeerIP.String(), "-a", ib.GatewayIP.String(), "-p", "7174", "-C", "100", "-v").CombinedOutput()
		if err != nil {
			out = append(out, fmt.Sprintf("\n(exit: %v)", err)...)
		}
		rpingDone <- string(out)
	}()
	waitLog(t, logs, "route=to-roce client=")
	next := strings.Replace(cfg, `  - name: to-roce-any               # a server that binds every address (perftest) listens on another port
    listen: {leg: ib, addr: "`+ib.GatewayIP.String()+`:7175"}
    target: {leg: roce, addr: "`+ns.PeerIP.String()+`:7176"}
`, `  - name: added
    listen: {leg: ib, addr: "`+ib.GatewayIP.String()+`:7177"}
    target: {leg: roce, addr: "`+ns.PeerIP.String()+`:7176"}
`, 1)
	if next == cfg {
		t.Fatal("the config to reload is the running one: the test would prove nothing")
	}
	if err := os.WriteFile(path, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := proc.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if l := waitLog(t, logs, "msg=reloaded"); !strings.Contains(l, `routes="added added; removed to-roce-any; unchanged to-ib, to-roce"`) {
		t.Errorf("reload: %s", l)
	}
	pings := <-rpingDone
	if _, err := server(); err != nil {
		t.Errorf("rping server across the reload: %v", err)
	}
	if got := strings.Count(pings, "ping data:"); got != 100 || strings.Contains(pings, "(exit:") {
		t.Errorf("rping across the reload: %d of 100 pings verified:\n%s", got, pings)
	}
	var routes []string
	for _, r := range status(t, admin).Routes {
		routes = append(routes, r.Name)
	}
	if got := strings.Join(routes, " "); got != "to-ib to-roce added" {
		t.Errorf("/status routes after the reload: %q, want to-ib to-roce added", got)
	}
	// rbridge reload, on the control socket: the file is the one SIGHUP
	// applied, nothing to change; the gateway logs who asked.
	if out, err := exec.Command(bin, "reload", "--control", control).CombinedOutput(); err != nil ||
		string(out) != "reloaded "+path+": unchanged added, to-ib, to-roce\n" {
		t.Errorf("rbridge reload: %v: %q", err, out)
	}
	if l := waitLog(t, logs, `msg="reload asked on the control socket"`); !strings.Contains(l, " uid=0 ") {
		t.Errorf("the reload asked on the control socket, logged without root's uid: %s", l)
	}
	_, b := scrape(t, admin)
	guest.Artifact(t, "metrics.prom", b)
}
