package gateway_test

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/integration/guest"
)

// A route's fallback through a peer gateway, in the QUIC leg's topology
// (quic_test.go) with one more address: gateway A's route has a target
// leg of its own, a userspace leg on the link's interface gl0 at
// 198.18.7.3, that reaches rxeq1 straight (rbqb routes it, as it routes
// the direct traffic), and a fallback over the quic leg to gateway B,
// whose route dials the same server from its userspace leg:
//
//	rxeq0 --> A's roce leg 198.18.5.3 --> A's direct leg 198.18.7.3 --(rbqb routes)--> rxeq1 198.18.6.1
//	                                  \-> A's quic leg --QUIC--> B's quic leg -> B's roce leg 198.18.6.3 --> rxeq1
//
// The route's own path is cut in rbqb: blackhole rules for packets from
// and to 198.18.7.3, which leave the QUIC traffic between 198.18.7.1 and
// 198.18.7.2, and B's own, flowing.

// fbDirectIP is A's target leg's address, on gl0 beside its quic leg's.
var fbDirectIP = netip.MustParseAddr("198.18.7.3")

// fbPings is how many pings each run makes (a new connection each).
const fbPings = 10

// fbRunLimit bounds one rping client through the gateways (TCG is slow).
const fbRunLimit = 60 * time.Second

// fallbackPath gives A its target leg's address and has the initial
// namespace (rxeq1, and its rdma_cm's check of the route back to a
// client) and rbqb route to it.
func (q *quicTopo) fallbackPath(t *testing.T) {
	t.Helper()
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("/usr/sbin/ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ip("-n", q.nsA, "addr", "add", fbDirectIP.String()+"/32", "dev", q.linkA)
	ip("-n", q.nsB, "neigh", "replace", fbDirectIP.String(), "lladdr", "02:00:00:00:07:01", "dev", q.linkB, "nud", "permanent")
	ip("route", "add", fbDirectIP.String()+"/32", "via", q.gwBUser.String(), "dev", "vqb0", "src", q.serverIP.String())
	t.Cleanup(func() {
		// Before the topology's own cleanup, which deletes vqb0 and the
		// route with it.
		if out, err := exec.Command("/usr/sbin/ip", "route", "del", fbDirectIP.String()+"/32").CombinedOutput(); err != nil {
			t.Logf("cleanup: ip route del %v: %v %s", fbDirectIP, err, out)
		}
	})
}

// fbCutRules are the rules in rbqb that cut A's target leg off rxeq1.
func fbCutRules() [][]string {
	return [][]string{{"pref", "90", "from", fbDirectIP.String(), "blackhole"}, {"pref", "91", "to", fbDirectIP.String(), "blackhole"}}
}

// cutDirect cuts (or, with on false, restores) the route's own path only.
func (q *quicTopo) cutDirect(on bool) error {
	verb := "add"
	if !on {
		verb = "del"
	}
	for _, r := range fbCutRules() {
		if out, err := exec.Command("/usr/sbin/ip", append([]string{"-n", q.nsB, "rule", verb}, r...)...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip -n %s rule %s %s: %w: %s", q.nsB, verb, strings.Join(r, " "), err, out)
		}
	}
	return nil
}

// fallbackConfigA is gateway A's file: its route to rping's server on
// rxeq1 through its direct leg, with the fallback through gw-b.
func (q *quicTopo) fallbackConfigA() string {
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}    # in its own namespace
legs:
  - {name: roce, kind: userspace, interface: vqa1, ip: %v, io: udp}
  - {name: direct, kind: userspace, interface: %s, ip: %v, io: udp}
  - {name: gw-b, kind: quic, ip: %v, peer: "%v:%d", peer_name: gw-b, cert: %s, key: %s, ca: %s}
routes:
  - name: rping
    listen: {leg: roce, addr: "%v:%d"}
    target: {leg: direct, addr: "%v:%d"}
    fallback: {leg: gw-b, addr: "%v:%d"}
`, q.gwAUser, q.linkA, fbDirectIP, q.gwAQUIC, q.gwBQUIC, q.quicPort, q.certA, q.keyA, q.ca,
		q.gwAUser, q.rpingPort, q.serverIP, q.rpingPort, q.serverIP, q.rpingPort)
}

// fbTest drives rping clients through gateway A's route.
type fbTest struct {
	q      *quicTopo
	gwA    *quicGateway
	gwB    *quicGateway
	fbKey  string // A's rbridge_route_fallback_sessions_total sample
	swKey  string // A's rbridge_route_fallbacks_total sample
	upKeyA string // A's rbridge_route_sessions_total sample
}

// fbRun is one rping client's run: a new connection.
type fbRun struct {
	start, end time.Time
	err        error
	pings      int
	fellBack   bool // the gateway counted it through the fallback
	sawFB      bool // A's /status marked a session of the route fallback while it ran
	sawTarget  bool // and one not
	out        string
}

func (r fbRun) String() string {
	path := "the route's own target"
	if r.fellBack {
		path = "the fallback"
	}
	if r.err != nil {
		return fmt.Sprintf("FAILED after %v (%s): %s", r.end.Sub(r.start).Round(time.Millisecond), path, firstLine(r.err.Error()))
	}
	return fmt.Sprintf("%d pings verified in %v through %s", r.pings, r.end.Sub(r.start).Round(time.Millisecond), path)
}

func (f *fbTest) metrics(t *testing.T) map[string]float64 {
	t.Helper()
	b, err := getMetricsVia(f.gwA.hc, f.gwA.admin)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseSamples(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{f.fbKey, f.swKey, f.upKeyA} {
		if _, ok := m[k]; !ok {
			t.Fatalf("gateway A's /metrics has no %s", k)
		}
	}
	return m
}

// clientArgs are an rping client's toward A's route; pings 0 runs until
// it fails or is killed.
func (f *fbTest) clientArgs(pings int) []string {
	a := []string{"-c", "-I", f.q.clientIP.String(), "-a", f.q.gwAUser.String(), "-p", strconv.Itoa(f.q.rpingPort), "-S", "64", "-v", "-V"}
	if pings > 0 {
		a = append(a, "-C", strconv.Itoa(pings))
	}
	return a
}

// run runs one rping client of fbPings pings through A's route to the
// persistent server on rxeq1 and says which path the gateway gave it
// (its fallback sessions counter moved, or not) and what A's /status
// showed meanwhile. A client that does not end within fbRunLimit is
// killed and its run failed.
func (f *fbTest) run(t *testing.T) fbRun {
	t.Helper()
	before := f.metrics(t)
	stop, seen := make(chan struct{}), make(chan [2]bool, 1)
	go func() {
		var s [2]bool
		for {
			if st, err := f.gwA.status(); err == nil {
				for _, x := range st.Sessions {
					if x.Route == "rping" {
						s[0] = s[0] || x.Fallback
						s[1] = s[1] || !x.Fallback
					}
				}
			}
			select {
			case <-stop:
				seen <- s
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	r := fbRun{start: time.Now()}
	ctx, cancel := context.WithTimeout(context.Background(), fbRunLimit)
	out, err := exec.CommandContext(ctx, "rping", f.clientArgs(fbPings)...).CombinedOutput()
	timedOut := ctx.Err() != nil
	cancel()
	r.end, r.out = time.Now(), string(out)
	close(stop)
	s := <-seen
	r.sawFB, r.sawTarget = s[0], s[1]
	r.pings = strings.Count(r.out, "ping data:")
	switch {
	case timedOut:
		r.err = fmt.Errorf("rping client still running after %v: killed:\n%s", fbRunLimit, lastLines(r.out, 10))
	case err != nil:
		r.err = fmt.Errorf("rping client: %w:\n%s", err, lastLines(r.out, 10))
	case r.pings != fbPings:
		r.err = fmt.Errorf("rping client: %d of %d pings verified:\n%s", r.pings, fbPings, lastLines(r.out, 10))
	}
	// The counter moves before the session starts, so before the client's
	// first ping; a run that failed may not have got that far.
	after := f.metrics(t)
	switch d := after[f.fbKey] - before[f.fbKey]; d {
	case 0:
	case 1:
		r.fellBack = true
	default:
		t.Errorf("one run moved rbridge_route_fallback_sessions_total by %v", d)
	}
	t.Logf("run at %s: %v", r.start.Format("15:04:05.000"), r)
	return r
}

// waitNoSessions waits until A's /status lists no session.
func (f *fbTest) waitNoSessions(t *testing.T, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); ; time.Sleep(200 * time.Millisecond) {
		st, err := f.gwA.status()
		if err == nil && len(st.Sessions) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway A still lists sessions %v after %v (%v)", st.Sessions, within, err)
		}
	}
}

// routeFallback is A's route's fallback status.
func (f *fbTest) routeFallback(t *testing.T) (*bridge.FallbackStatus, bridge.Status) {
	t.Helper()
	st, err := f.gwA.status()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range st.Routes {
		if r.Name == "rping" {
			if r.Fallback == nil {
				t.Fatalf("gateway A's route rping shows no fallback: %+v", r)
			}
			return r.Fallback, st
		}
	}
	t.Fatalf("gateway A's /status has no route rping: %+v", st.Routes)
	return nil, st
}

// TestGuestRunQUICFallback: a route whose own RDMA path is cut while
// traffic runs on it continues over its fallback through a peer gateway,
// and goes back once the path is restored. Unmodified rping clients (each
// run a new connection, 10 pings verified) connect from rxeq0 through
// gateway A to a persistent rping server on rxeq1:
//  1. while the path is up, runs go to the route's own target: the
//     fallback is inactive, no session is marked fallback, B sees none;
//  2. the path is cut (rbqb blackholes A's target leg's address) while a
//     run is going. That run's session does not move: it fails when the
//     gateway's QP toward the target has a request outstanding, else it
//     waits (RC has no keepalive) and is killed. The next runs complete
//     through the fallback; the gap from the cut to the first completed
//     run is measured. A logs the switch at warning level once, counts it
//     (rbridge_route_fallbacks_total 1, rbridge_route_fallback_sessions_total
//     one per run), /status shows the fallback active since the cut with
//     why, sessions marked fallback, B's log their sessions;
//  3. the path is restored: after the retry interval (15 s) the next run
//     goes to the route's own target again, A logs it, the fallback is
//     inactive and was counted once.
//
// A PERF line has the gap and the times.
func TestGuestRunQUICFallback(t *testing.T) {
	guest.RequireKind(t, "rxe")
	testStart := time.Now()
	q := newQUICTopo(t)
	q.fallbackPath(t)
	_, cfgB := q.configs()
	dir := t.TempDir()
	gwB := &quicGateway{name: "B", hc: nsHTTP(q.nsB)}
	gwB.logs, gwB.proc = startGatewayIn(t, q.nsB, filepath.Join(dir, "b.yaml"), cfgB)
	gwA := &quicGateway{name: "A", hc: nsHTTP(q.nsA)}
	gwA.logs, gwA.proc = startGatewayIn(t, q.nsA, filepath.Join(dir, "a.yaml"), q.fallbackConfigA())
	for _, g := range []*quicGateway{gwA, gwB} {
		g.admin = adminAddr(t, g.logs)
		waitLog(t, g.logs, `msg="peer gateway connected"`)
	}
	f := &fbTest{q: q, gwA: gwA, gwB: gwB, fbKey: `rbridge_route_fallback_sessions_total{route="rping"}`,
		swKey: `rbridge_route_fallbacks_total{route="rping"}`, upKeyA: `rbridge_route_sessions_total{route="rping"}`}
	// One server for every run: a persistent rping server serves each
	// connection on a thread of its own, so the run whose session the cut
	// strands does not hold the port.
	startServer(t, "rping", "-s", "-P", "-a", q.serverIP.String(), "-p", strconv.Itoa(q.rpingPort), "-S", "64", "-V")

	// 1. The route's own path.
	for i := range 2 {
		r := f.run(t)
		if r.err != nil {
			t.Fatalf("run %d on the route's own path: %v", i+1, r.err)
		}
		if r.fellBack || r.sawFB || !r.sawTarget {
			t.Errorf("run %d with the path up: through the fallback %v, /status marked a session fallback %v, showed one on the target %v; want the target",
				i+1, r.fellBack, r.sawFB, r.sawTarget)
		}
	}
	if fb, _ := f.routeFallback(t); fb.Active {
		t.Errorf("route's fallback with the path up: %+v, want inactive", fb)
	}
	if up, _ := gwB.sessionCounts(); up != 0 {
		t.Errorf("gateway B logged %d sessions with A's own path up, want 0", up)
	}
	m := f.metrics(t)
	if m[f.swKey] != 0 || m[f.fbKey] != 0 || m[f.upKeyA] != 2 {
		t.Errorf("with the path up: fallbacks %v, fallback sessions %v, sessions %v; want 0, 0, 2", m[f.swKey], m[f.fbKey], m[f.upKeyA])
	}

	// 2. Cut the path under a run that goes on until it fails.
	f.waitNoSessions(t, 30*time.Second)
	ictx, icancel := context.WithCancel(context.Background())
	defer icancel()
	icmd := exec.CommandContext(ictx, "rping", f.clientArgs(0)...)
	iout := &syncBuffer{}
	icmd.Stdout, icmd.Stderr = iout, iout
	if err := icmd.Start(); err != nil {
		t.Fatal(err)
	}
	type ended struct {
		err error
		at  time.Time
	}
	idone := make(chan ended, 1)
	go func() {
		err := icmd.Wait()
		idone <- ended{err, time.Now()}
	}()
	// Cut once its session on the target's path has relayed some pings
	// (A's /status: rping's stdout is a pipe, so what it printed lags).
	var cutSession bridge.SessionStatus
	for deadline := time.Now().Add(fbRunLimit); cutSession.ToTarget.Ops < 20; time.Sleep(20 * time.Millisecond) {
		select {
		case e := <-idone:
			t.Fatalf("the run to be cut ended before the cut: %v\n%s", e.err, lastLines(iout.String(), 10))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the run to be cut relayed fewer than 20 operations in %v:\n%s", fbRunLimit, lastLines(iout.String(), 10))
		}
		if st, err := gwA.status(); err == nil && len(st.Sessions) == 1 {
			cutSession = st.Sessions[0]
		}
	}
	if cutSession.Fallback {
		t.Fatalf("the run to be cut is on the fallback already: %+v", cutSession)
	}
	if err := q.cutDirect(true); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	restored := false
	defer func() {
		if !restored {
			if err := q.cutDirect(false); err != nil {
				t.Error(err)
			}
		}
	}()
	t.Logf("path cut at %s, under a run (client %s) whose session had relayed %d operations to the target and %d back",
		cut.Format("15:04:05.000"), cutSession.Client, cutSession.ToTarget.Ops, cutSession.ToClient.Ops)

	// New clients come at once, while the cut run is still going.
	var fbRuns []fbRun
	var firstDone time.Time
	for deadline := cut.Add(90 * time.Second); len(fbRuns) < 3; {
		if time.Now().After(deadline) {
			t.Fatalf("%d runs completed through the fallback within 90 s of the cut", len(fbRuns))
		}
		r := f.run(t)
		if r.err != nil {
			t.Errorf("a run after the cut: %v", r.err)
			continue
		}
		if !r.fellBack || !r.sawFB {
			t.Errorf("a run after the cut completed, through the fallback %v, marked fallback in /status %v; want both", r.fellBack, r.sawFB)
			continue
		}
		if firstDone.IsZero() {
			firstDone = r.end
		}
		fbRuns = append(fbRuns, r)
	}
	gap := firstDone.Sub(cut)
	// The cut run: its session stayed on the cut path. It never ends by
	// itself (no -C): it ended because its session failed (the gateway's
	// QP toward the target had a request outstanding and gave up on it;
	// rping exits 0 all the same), or it is still waiting and is killed
	// now, as an application's own timeout would: the gateway's QP there
	// had nothing outstanding (the target was the requester, or nobody
	// was), and RC has no keepalive.
	var cutRun, cutShort string
	select {
	case e := <-idone:
		took := e.at.Sub(cut).Round(100 * time.Millisecond)
		cutShort = fmt.Sprintf("failed_after_%v", took)
		cutRun = fmt.Sprintf("ended (%v) %v after the cut: %s", e.err, took,
			strings.Join(strings.Fields(lastLines(iout.String(), 3)), " "))
	default:
		icancel()
		<-idone
		cutShort = fmt.Sprintf("waiting_killed_after_%v", time.Since(cut).Round(time.Second))
		cutRun = fmt.Sprintf("still waiting %v after the cut (the gateway's QP toward the target had nothing outstanding to time out, and what the target's side noticed cannot cross the cut): killed",
			time.Since(cut).Round(time.Second))
	}
	t.Logf("the run under the cut: %s", cutRun)
	// Either way, A ends its session: it failed, or the killed client's
	// disconnect ends it; it never moved to the fallback.
	f.waitNoSessions(t, 60*time.Second)
	var upLine, endLine string
	for _, l := range strings.Split(gwA.logs.String(), "\n") {
		switch {
		case !strings.Contains(l, "client="+cutSession.Client+" "):
		case upLine == "" && strings.Contains(l, `msg="session up"`):
			upLine = l
		case endLine == "" && (strings.Contains(l, `msg="session ended"`) || strings.Contains(l, `msg="session failed`)):
			endLine = l
		}
	}
	if !strings.Contains(upLine, "through_fallback=false") || endLine == "" {
		t.Errorf("gateway A on the cut run's session (client %s): up %q, end %q; want it up on the target and ended", cutSession.Client, upLine, endLine)
	}
	t.Logf("gateway A on the cut run's session: %s", endLine)
	switchLine := waitLog(t, gwA.logs, "route's target cannot be reached: new sessions go through the fallback")
	if !strings.Contains(switchLine, "level=WARN") || !strings.Contains(switchLine, fbDirectIP.String()) && !strings.Contains(switchLine, q.serverIP.String()) {
		t.Errorf("the switch's log line: %s\nwant a warning naming the target", switchLine)
	}
	if n := strings.Count(gwA.logs.String(), "route's target cannot be reached"); n != 1 {
		t.Errorf("gateway A logged the switch %d times, want once", n)
	}
	fb, st := f.routeFallback(t)
	if !fb.Active || fb.Since.Before(cut) || fb.Since.After(firstDone) || !strings.Contains(fb.Why, q.serverIP.String()) || !strings.Contains(fb.Why, `"direct"`) {
		t.Errorf("route's fallback after the cut: %+v; want active since between the cut (%v) and the first run through it, why naming the target and its leg", fb, cut)
	}
	for _, l := range st.Legs {
		if l.Kind == "quic" && (l.PeerConns == nil || *l.PeerConns != 1) {
			t.Errorf("gateway A's quic leg after the cut: %+v, want its one connection to B: the cut was not the RDMA path's alone", l)
		}
	}
	m = f.metrics(t)
	if m[f.swKey] != 1 || m[f.fbKey] != float64(len(fbRuns)) {
		t.Errorf("after the cut: rbridge_route_fallbacks_total %v, rbridge_route_fallback_sessions_total %v; want 1 and %d", m[f.swKey], m[f.fbKey], len(fbRuns))
	}
	if up, _ := gwB.sessionCounts(); up != len(fbRuns) {
		t.Errorf("gateway B logged %d sessions, want the %d runs through the fallback", up, len(fbRuns))
	}
	if n := strings.Count(gwA.logs.String(), "through_fallback=true"); n != len(fbRuns) {
		t.Errorf("gateway A logged %d sessions up through the fallback, want %d", n, len(fbRuns))
	}

	// 3. Restore the path: after the retry interval a new run goes to the
	// target again.
	f.waitNoSessions(t, 30*time.Second)
	if err := q.cutDirect(false); err != nil {
		t.Fatal(err)
	}
	restored = true
	restore := time.Now()
	var back fbRun
	for deadline := restore.Add(bridge.DefaultFallbackRetry + 45*time.Second); ; {
		if time.Now().After(deadline) {
			t.Fatalf("no run went to the route's own target within %v of the path's restoring", bridge.DefaultFallbackRetry+45*time.Second)
		}
		r := f.run(t)
		if r.err != nil {
			t.Errorf("a run after the path was restored: %v", r.err)
			continue
		}
		if !r.fellBack {
			back = r
			break
		}
	}
	if back.sawFB || !back.sawTarget {
		t.Errorf("the run back on the target: /status marked it fallback %v, showed it on the target %v", back.sawFB, back.sawTarget)
	}
	backLine := waitLog(t, gwA.logs, "route's target answers again")
	if !strings.Contains(backLine, "level=WARN") || !strings.Contains(backLine, "was_on_fallback_for=") {
		t.Errorf("the switch back's log line: %s", backLine)
	}
	if fb, _ := f.routeFallback(t); fb.Active {
		t.Errorf("route's fallback once the target answered: %+v, want inactive", fb)
	}
	m = f.metrics(t)
	if m[f.swKey] != 1 {
		t.Errorf("rbridge_route_fallbacks_total %v at the end, want 1 (one switch)", m[f.swKey])
	}
	for _, g := range []*quicGateway{gwA, gwB} {
		for _, l := range strings.Split(g.logs.String(), "\n") {
			if strings.Contains(l, "level=ERROR") {
				t.Errorf("gateway %s logged an error: %s", g.name, l)
			}
		}
	}
	t.Logf("PERF quic-fallback cut_to_first_run_through_fallback=%v runs_through_fallback=%d restore_to_run_on_target=%v (retry every %v) run_under_cut=%s fallbacks_total=%v fallback_sessions_total=%v test=%v",
		gap.Round(time.Millisecond), len(fbRuns), back.end.Sub(restore).Round(time.Millisecond), bridge.DefaultFallbackRetry,
		cutShort, m[f.swKey], m[f.fbKey], time.Since(testStart).Round(time.Second))
}
