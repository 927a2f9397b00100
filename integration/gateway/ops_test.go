package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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
func adminAddr(t *testing.T, logs *syncBuffer) string {
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

// metric returns the value of the sample whose line starts with name.
func metric(t *testing.T, admin, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", sc.Text(), err)
			}
			return f
		}
	}
	t.Fatalf("no sample %s on /metrics", name)
	return 0
}

func status(t *testing.T, admin string) bridge.Status {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st bridge.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGuestRunOperations: rbridge run's admin server and reload with
// unmodified perftest and rping through it. /metrics counts what perftest
// sent through a route; /status shows the sessions while they run and none
// after; a SIGHUP that adds a route and removes another leaves an rping
// session on a third undisturbed, and the added route is in /status.
func TestGuestRunOperations(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	cfg := gatewayConfig("udp", ns, ib)
	logs, proc := startGatewayAt(t, path, cfg)
	admin := adminAddr(t, logs)

	// perftest through to-ib, /status polled while it runs.
	const n, size = 200, 4096
	seen := make(chan bool, 1)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				seen <- false
				return
			case <-time.After(50 * time.Millisecond):
			}
			for _, s := range status(t, admin).Sessions {
				if s.Route == "to-ib" && s.ClientSide != "" && s.TargetSide != "" {
					seen <- true
					return
				}
			}
		}
	}()
	args := []string{"-s", strconv.Itoa(size), "-n", strconv.Itoa(n)}
	pair(t, "ib_send_bw", append([]string{"-R", "-d", ib.PeerDevice, "-p", "18515"}, args...),
		append(append([]string{"-R", "-d", ns.PeerDevice, "-p", "18515"}, args...), ns.IP.String()))
	close(done)
	if !<-seen {
		t.Error("/status never showed the to-ib session while ib_send_bw ran")
	}
	waitSessionsEnded(t, logs)
	ops := metric(t, admin, `rbridge_route_operations_total{direction="to_target",route="to-ib"}`)
	bytes := metric(t, admin, `rbridge_route_payload_bytes_total{direction="to_target",route="to-ib"}`)
	t.Logf("to-ib after ib_send_bw -n %d -s %d: %v operations, %v bytes toward the target", n, size, ops, bytes)
	if ops < n || bytes < n*size {
		t.Errorf("to-ib counted %v operations and %v bytes, want at least perftest's %d SENDs of %d bytes", ops, bytes, n, size)
	}
	if open := metric(t, admin, `rbridge_route_sessions_open{route="to-ib"}`); open != 0 {
		t.Errorf("%v to-ib sessions open after perftest ended", open)
	}
	if st := status(t, admin); len(st.Sessions) != 0 {
		t.Errorf("/status lists %d sessions after every one ended", len(st.Sessions))
	}

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
	out := <-rpingDone
	if _, err := server(); err != nil {
		t.Errorf("rping server across the reload: %v", err)
	}
	if got := strings.Count(out, "ping data:"); got != 100 || strings.Contains(out, "(exit:") {
		t.Errorf("rping across the reload: %d of 100 pings verified:\n%s", got, out)
	}
	var routes []string
	for _, r := range status(t, admin).Routes {
		routes = append(routes, r.Name)
	}
	if got := strings.Join(routes, " "); got != "to-ib to-roce added" {
		t.Errorf("/status routes after the reload: %q, want to-ib to-roce added", got)
	}
}
