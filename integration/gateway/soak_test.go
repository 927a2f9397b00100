package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/integration/guest"
)

// The soak (make soak, not in CI): rbridge run under connection churn and
// traffic with 1% loss on the RoCE side for RBRIDGE_SOAK (a duration),
// its resources sampled at rest every RBRIDGE_SOAK_SAMPLE (default 30s).
// It fails when a resource grows between the first and the last third of
// the run, when the gateway lost what it acknowledged or a verified
// message came back wrong, when a tool is left waiting (a client whose
// target was killed, a pair that never ends), or when most rounds failed.
// A round whose connection failed back with an error (its transport's
// retries ran out under loss on a slow guest) is counted, not a failure:
// nothing was acknowledged and then lost.

// soakSample is what the gateway held at one moment, with only the soak's
// idle session open.
type soakSample struct {
	at time.Duration
	// Counted by rbridge itself (SIGUSR1's "gateway state" line).
	sessions, goroutines, poolInUse, userQPs, userConns, verbsQPs, verbsCQs, verbsCMIDs int
	// The kernel's and the process's view.
	kernelQPs, fds int
	rss, heap      float64 // bytes: resident, and the Go heap in use
}

// soakFields names the integer counts that must not grow, in report order.
var soakFields = []struct {
	name string
	get  func(s soakSample) int
}{
	{"goroutines", func(s soakSample) int { return s.goroutines }},
	{"pool buffers in use", func(s soakSample) int { return s.poolInUse }},
	{"userspace QPs", func(s soakSample) int { return s.userQPs }},
	{"userspace CM connections", func(s soakSample) int { return s.userConns }},
	{"verbs QPs (rbridge's count)", func(s soakSample) int { return s.verbsQPs }},
	{"verbs CQs", func(s soakSample) int { return s.verbsCQs }},
	{"verbs CM ids", func(s soakSample) int { return s.verbsCMIDs }},
	{"QPs of rbridge in rdma res", func(s soakSample) int { return s.kernelQPs }},
	{"file descriptors", func(s soakSample) int { return s.fds }},
}

// soakWork runs workers until the soak ends, and stops them at rest for
// each sample: a worker finishes its round, then waits.
type soakWork struct {
	end time.Time

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	busy   int
	rounds map[string]int
	fails  []string
	// failedBack counts, per worker, the rounds whose connection failed
	// with an error to its application, by why.
	failedBack map[string]int
	cut        []time.Duration // how long a killed rping server's client took to end
	// perftestOwn counts the pairs that failed for perftest's own reasons
	// under TCG (pairAgain), by reason.
	perftestOwn map[string]int
}

// round waits until the work may go on and marks a worker busy; false
// once the soak ended.
func (w *soakWork) round() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.paused {
		w.cond.Wait()
	}
	if time.Now().After(w.end) {
		return false
	}
	w.busy++
	return true
}

// done ends a worker's round, and records its failure: errFailedBack's
// are counted apart.
func (w *soakWork) done(worker string, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.busy--
	w.rounds[worker]++
	switch {
	case errors.Is(err, errFailedBack):
		w.failedBack[worker]++
	case err != nil:
		w.fails = append(w.fails, fmt.Sprintf("%s round %d: %v", worker, w.rounds[worker], err))
	}
	w.cond.Broadcast()
}

// errFailedBack marks a round whose connection failed with an error to
// its application: the gateway failed it back, as it must when a far side
// does not answer, and nothing it acknowledged was lost.
var errFailedBack = errors.New("failed back with an error")

// pause waits until no worker is in a round (at most limit: a round
// runs a pair of tools under a deadline of its own); resume lets them go
// on.
func (w *soakWork) pause(limit time.Duration) error {
	stop := time.AfterFunc(limit, func() {
		w.mu.Lock()
		w.cond.Broadcast()
		w.mu.Unlock()
	})
	defer stop.Stop()
	deadline := time.Now().Add(limit)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.paused = true
	for w.busy > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d workers still in a round %v after the sample was due", w.busy, limit)
		}
		w.cond.Wait()
	}
	return nil
}

func (w *soakWork) resume() {
	w.mu.Lock()
	w.paused = false
	w.cond.Broadcast()
	w.mu.Unlock()
}

// soakDuration is RBRIDGE_SOAK, and the sample period.
func soakDuration(t *testing.T) (run, every time.Duration) {
	v := os.Getenv("RBRIDGE_SOAK")
	if v == "" {
		t.Skip("the soak runs only when asked: make soak (RBRIDGE_SOAK=DURATION in the guest)")
	}
	run, err := time.ParseDuration(v)
	if err != nil || run < time.Minute {
		t.Fatalf("RBRIDGE_SOAK=%q: want a duration of a minute or more", v)
	}
	every = 30 * time.Second
	if v := os.Getenv("RBRIDGE_SOAK_SAMPLE"); v != "" {
		if every, err = time.ParseDuration(v); err != nil || every < 5*time.Second {
			t.Fatalf("RBRIDGE_SOAK_SAMPLE=%q: want a duration of 5s or more", v)
		}
	}
	if run/every < 6 {
		t.Fatalf("RBRIDGE_SOAK=%v with a sample every %v: fewer than 6 samples, too few thirds to compare", run, every)
	}
	return run, every
}

// TestGuestSoak: see the file's comment. Workloads: perftest -R pairs
// (WRITE, READ and SEND bandwidth, 64 KiB) from the RoCE side to the IB
// side, each a new connection; rping from the IB side to the RoCE side
// with every message verified, and every fourth rping server killed with
// SIGKILL mid-run, whose client must be disconnected within a minute; and
// one session idle for the whole run on a route with liveness 2s, which
// must stay up.
func TestGuestSoak(t *testing.T) {
	guest.RequireKind(t, "rxe")
	run, every := soakDuration(t)
	ns, ib := guest.UserNetns(t), guest.IB(t)
	const idlePort = 18517
	cfg := gatewayConfig("udp", ns, ib) + fmt.Sprintf(`  - name: idle
    listen: {leg: roce, addr: "%v:%d"}
    target: {leg: ib, addr: "%v:%d"}
    liveness: 2s
`, ns.IP, idlePort, ib.PeerIP, idlePort)
	// As a gateway runs in production: no debug log, no pool trace.
	logs, proc := startRbridge(t, "", filepath.Join(t.TempDir(), "gateway.yaml"), cfg)
	admin := adminAddr(t, logs)

	// The idle session: rping's server waits for its client's first
	// message, and the client sends none.
	srv := exec.Command("rping", "-s", "-a", ib.PeerIP.String(), "-p", fmt.Sprint(idlePort), "-C", "1")
	var srvOut syncBuffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	waitListen(t, "rping", &srvOut)
	ctx, cancel := context.WithTimeout(context.Background(), run+10*time.Minute)
	defer cancel()
	idle, err := scopeHost(ctx, t, ns, idlePort)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(logs.String(), "route=idle"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the idle session never came up")
		}
	}
	idleProbes := func() float64 {
		m, _ := scrape(t, admin)
		var n float64
		for k, v := range m {
			if strings.HasPrefix(k, "rbridge_route_liveness_probes_total{") && strings.Contains(k, `route="idle"`) {
				n += v
			}
		}
		return n
	}

	userWireLoss(t, ns, "1%")

	start := time.Now()
	w := &soakWork{end: start.Add(run), rounds: map[string]int{}, perftestOwn: map[string]int{}, failedBack: map[string]int{}}
	w.cond = sync.NewCond(&w.mu)
	var workers sync.WaitGroup
	workers.Add(2)
	go func() {
		defer workers.Done()
		tools := []string{"ib_write_bw", "ib_read_bw", "ib_send_bw"}
		for i := 0; w.round(); i++ {
			func() {
				// pairWithin may end the test (t.Fatal) on this goroutine:
				// the round still ends, so that a sample does not wait.
				err := errors.New("the round ended the test")
				defer func() { w.done("perftest", err) }()
				args := []string{"-s", "65536", "-n", "100"}
				_, _, err = pairOnce(t, 2*time.Minute, tools[i%3], append([]string{"-R", "-d", ib.PeerDevice, "-p", "18515"}, args...),
					append(append([]string{"-R", "-d", ns.PeerDevice, "-p", "18515"}, args...), ns.IP.String()))
				if err == nil {
					return
				}
				if why, own := pairAgain(err); own {
					// perftest's own trouble under TCG, not the gateway's:
					// the next round runs another pair.
					w.mu.Lock()
					w.perftestOwn[why]++
					w.mu.Unlock()
					err = nil
				} else if !errors.Is(err, errPairTimedOut) {
					err = fmt.Errorf("%w: %w", errFailedBack, err) // it ended, with an error
				}
			}()
		}
	}()
	go func() {
		defer workers.Done()
		for i := 1; w.round(); i++ {
			took, err := soakRping(ns.PeerIP.String(), ib.PeerIP.String(), ib.GatewayIP.String(), i%4 == 0)
			if took > 0 {
				w.mu.Lock()
				w.cut = append(w.cut, took)
				w.mu.Unlock()
			}
			w.done("rping", err)
		}
	}()

	var samples []soakSample
	for next := start.Add(every); ; next = next.Add(every) {
		time.Sleep(time.Until(next))
		if err := w.pause(4 * time.Minute); err != nil {
			w.resume()
			t.Fatalf("sample at %v: %v", time.Since(start).Round(time.Second), err)
		}
		s, err := soakSampleOf(admin, proc.Pid, logs)
		w.resume()
		if err != nil {
			t.Fatalf("sample at %v: %v", time.Since(start).Round(time.Second), err)
		}
		s.at = time.Since(start)
		samples = append(samples, s)
		t.Logf("sample %2d at %4v: %+v", len(samples), s.at.Round(time.Second), s)
		if !time.Now().Before(w.end) {
			break
		}
	}
	workers.Wait()

	// The idle session is up: no event on its client's connection.
	wait, waitCancel := context.WithTimeout(ctx, time.Second)
	ev, err := idle.ch.Next(wait)
	waitCancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the idle session, both peers alive: %v %v during the soak, want no event", ev.Type, err)
	}
	probes := idleProbes()
	if want := run.Seconds() / 2 / 2; probes < want {
		t.Errorf("the idle session was probed %v times in %v (liveness 2s, two connections): want %v at least", probes, run, want)
	}

	w.mu.Lock()
	rounds, fails, cut, own, back := w.rounds, w.fails, w.cut, w.perftestOwn, w.failedBack
	w.mu.Unlock()
	for _, f := range fails {
		t.Error(f)
	}
	out, _ := exec.Command("/usr/sbin/tc", "-s", "qdisc", "show", "dev", "vuser0").CombinedOutput()
	if strings.Contains(string(out), "dropped 0,") {
		t.Errorf("netem dropped nothing: the soak proved nothing of loss\n%s", out)
	}
	if len(cut) == 0 {
		t.Errorf("no rping server was killed mid-run: the soak proved nothing of stranded sessions")
	}
	for worker, n := range back {
		if n*2 > rounds[worker] {
			t.Errorf("%d of %d %s rounds failed back: the soak proved little", n, rounds[worker], worker)
		}
	}
	// A verbs leg's HCA acknowledges a SEND as it arrives: one whose far
	// side was killed before it was relayed is lost after its ack, and its
	// session ends with an error on both connections (lost_acked counts
	// them). rping has one SEND in flight: a killed server's session may
	// lose that one, and nothing else may.
	m, _ := scrape(t, admin)
	if v := sample(t, m, `rbridge_verbs_lost_acked_total{leg="ib"}`); v > float64(len(cut)) {
		t.Errorf("rbridge_verbs_lost_acked_total{ib} = %v with %d rping servers killed: the gateway lost acknowledged SENDs other than a killed server's", v, len(cut))
	} else {
		t.Logf("rbridge_verbs_lost_acked_total{ib} = %v, %d rping servers killed mid-run", v, len(cut))
	}
	if len(own) > 0 {
		t.Logf("perftest pairs that failed for perftest's own reasons under TCG (not counted as failures): %v", own)
	}
	report := soakReport(samples, run, rounds, probes, cut, back)
	t.Logf("soak figures:\n%s", report)
	guest.Artifact(t, "soak.md", []byte(report))
	third := len(samples) / 3
	first, last := samples[:third], samples[len(samples)-third:]
	// A count grew when the last third never came back down to the
	// first third's most: a leak stays, while a descriptor or goroutine
	// of work just ending at a sample does not (one such, 20 descriptors
	// against 19, failed a run that had leaked nothing).
	for _, f := range soakFields {
		if a, b := maxOf(first, f.get), minOf(last, f.get); b > a {
			t.Errorf("%s grew: at most %d in the first third of the run, at least %d in the last", f.name, a, b)
		}
	}
	// The RSS settles as the allocators warm (in the 10-minute soak it
	// rose 7% in the first third, then 1% more, then not at all): the last
	// third may not exceed the first's most by more than rssWarm.
	rssFirst, rssLast := slices.Max(rssOf(first)), slices.Min(rssOf(last))
	if rssLast > rssFirst*(1+rssWarm) {
		t.Errorf("RSS grew: at most %.1f MiB in the first third, at least %.1f MiB in the last (more than %.0f%% above)", rssFirst/(1<<20), rssLast/(1<<20), rssWarm*100)
	}
	if err := proc.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("rbridge run is gone: %v", err)
	}
}

// soakRping runs one rping pair through the to-roce route: its server on
// the RoCE side, its client on the IB fabric, every message verified.
// With kill, the server is killed with SIGKILL once the client is under
// way: the client must then end, with an error, within a minute.
func soakRping(serverIP, clientIP, gatewayIP string, kill bool) (time.Duration, error) {
	count := "40"
	if kill {
		count = "100000"
	}
	srv := exec.Command("rping", "-s", "-a", serverIP, "-p", "7174", "-C", count, "-S", "1024", "-V")
	var srvOut syncBuffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		return 0, err
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	defer srv.Process.Kill()
	for deadline := time.Now().Add(30 * time.Second); !rdmaListening("rping"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("rping's server never listened: %s", srvOut.String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cli := exec.CommandContext(ctx, "rping", "-c", "-I", clientIP, "-a", gatewayIP, "-p", "7174", "-C", count, "-S", "1024", "-V", "-v")
	var cliOut syncBuffer
	cli.Stdout, cli.Stderr = &cliOut, &cliOut
	if err := cli.Start(); err != nil {
		return 0, err
	}
	cliDone := make(chan error, 1)
	go func() { cliDone <- cli.Wait() }()
	if !kill {
		err := <-cliDone
		if strings.Contains(cliOut.String(), "data mismatch") {
			return 0, fmt.Errorf("rping client: a ping came back with other data than it sent:\n%s", lastLines(cliOut.String(), 10))
		}
		if n := strings.Count(cliOut.String(), "ping data:"); err != nil || n != 40 {
			// It ended, each ping it counted verified: its connection
			// failed and it was told.
			return 0, fmt.Errorf("%w: rping client: %v, %d of 40 pings verified:\n%s", errFailedBack, err, n, lastLines(cliOut.String(), 4))
		}
		select {
		case err := <-srvDone:
			if err != nil {
				return 0, fmt.Errorf("rping server: %v:\n%s", err, lastLines(srvOut.String(), 10))
			}
		case <-time.After(20 * time.Second):
			return 0, fmt.Errorf("rping server still running 20 s after its client ended")
		}
		return 0, nil
	}
	for deadline := time.Now().Add(time.Minute); strings.Count(cliOut.String(), "ping data:") < 5; time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-cliDone:
			// Its connection ended, and it was told (a mismatch would
			// show): a round that failed back, not a stranded one.
			if strings.Contains(cliOut.String(), "data mismatch") {
				return 0, fmt.Errorf("rping client: a ping came back with other data than it sent:\n%s", lastLines(cliOut.String(), 10))
			}
			return 0, fmt.Errorf("%w: rping client ended (%v) before its server was killed:\n%s", errFailedBack, err, lastLines(cliOut.String(), 4))
		default:
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("rping client made fewer than 5 pings in a minute:\n%s", lastLines(cliOut.String(), 10))
		}
	}
	_ = srv.Process.Kill()
	killed := time.Now()
	// rping's client exits 0 on a disconnect as well: that it ends, and
	// soon, is the point.
	select {
	case <-cliDone:
		return time.Since(killed), nil
	case <-time.After(time.Minute):
		return 0, fmt.Errorf("rping client still waiting %v after its server was killed", time.Since(killed).Round(time.Second))
	}
}

// rdmaListening reports whether an rdma_cm listener of comm exists.
func rdmaListening(comm string) bool {
	out, _ := exec.Command("rdma", "resource", "show", "cm_id").CombinedOutput()
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "state LISTEN") && strings.Contains(l, "comm "+comm) {
			return true
		}
	}
	return false
}

// soakHTTP scrapes the gateway without keeping a connection open.
var soakHTTP = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

var stateLine = regexp.MustCompile(`msg="gateway state" sessions=(\d+) goroutines=(\d+) pool_in_use=(\d+) userspace.qps=(\d+) userspace.cm_conns=(\d+) verbs.qps=(\d+) verbs.cqs=(\d+) verbs.cm_ids=(\d+)`)

// soakSampleOf samples the gateway at rest: once only the idle session is
// left (the workers' sessions end as their tools exit), what rbridge
// counts (SIGUSR1's state line), the kernel's QPs of its pid, its
// descriptors and RSS.
func soakSampleOf(admin string, pid int, logs *syncBuffer) (soakSample, error) {
	var s soakSample
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		before := len(stateLine.FindAllString(logs.String(), -1))
		if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
			return s, err
		}
		var m []string
		for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
			if all := stateLine.FindAllStringSubmatch(logs.String(), -1); len(all) > before {
				m = all[len(all)-1]
				break
			}
		}
		if m == nil {
			return s, errors.New("rbridge run logged no gateway state within 5 s of SIGUSR1")
		}
		var v [8]int
		for i := range v {
			v[i], _ = strconv.Atoi(m[i+1])
		}
		s.sessions, s.goroutines, s.poolInUse, s.userQPs, s.userConns, s.verbsQPs, s.verbsCQs, s.verbsCMIDs = v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]
		if s.sessions == 1 {
			break
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%d sessions open 60 s after the workers stopped, want the idle one alone", s.sessions)
		}
	}
	out, err := exec.Command("rdma", "resource", "show", "qp").CombinedOutput()
	if err != nil {
		return s, fmt.Errorf("rdma resource show qp: %v: %s", err, out)
	}
	// The kernel names the thread that made each QP, whose pid is the
	// thread's: count by the command's name.
	s.kernelQPs = strings.Count(string(out), "comm rbridge")
	// No connection of the scrape's outlives it (the admin server's end
	// of a kept-alive one would count among the descriptors).
	m, err := getMetricsVia(soakHTTP, admin)
	if err != nil {
		return s, err
	}
	time.Sleep(100 * time.Millisecond) // the server closes its end after the response
	samples, err := parseSamples(m)
	if err != nil {
		return s, err
	}
	s.heap = samples["go_memstats_heap_inuse_bytes"]
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, l := range strings.Split(string(status), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			s.rss = kb * 1024
		}
	}
	return s, nil
}

// rssWarm is how much the RSS may settle above the first third's most.
const rssWarm = 0.05

func maxOf(ss []soakSample, get func(soakSample) int) int {
	m := 0
	for _, s := range ss {
		m = max(m, get(s))
	}
	return m
}

func minOf(ss []soakSample, get func(soakSample) int) int {
	m := math.MaxInt
	for _, s := range ss {
		m = min(m, get(s))
	}
	return m
}

func rssOf(ss []soakSample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = s.rss
	}
	return out
}

// soakReport is the soak's figures as docs/reliability.md shows them.
func soakReport(samples []soakSample, run time.Duration, rounds map[string]int, probes float64, cut []time.Duration, back map[string]int) string {
	var b strings.Builder
	first, last := samples[0], samples[len(samples)-1]
	fmt.Fprintf(&b, "Soak of %v: %d perftest pairs (%d failed back with an error), %d rping pairs (%d failed back; %d servers killed mid-run: their clients ended at most %v after), one idle session probed %v times; %d samples at rest.\n\n",
		run, rounds["perftest"], back["perftest"], rounds["rping"], back["rping"], len(cut), slices.Max(append(cut, 0)).Round(time.Millisecond), probes, len(samples))
	third := len(samples) / 3
	b.WriteString("| at rest | first sample | last sample | max, first third | min and max, last third |\n|---|---|---|---|---|\n")
	lastThird := samples[len(samples)-third:]
	for _, f := range soakFields {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d, %d |\n", f.name, f.get(first), f.get(last), maxOf(samples[:third], f.get), minOf(lastThird, f.get), maxOf(lastThird, f.get))
	}
	fmt.Fprintf(&b, "| RSS (MiB) | %.1f | %.1f | %.1f | %.1f, %.1f |\n", first.rss/(1<<20), last.rss/(1<<20),
		slices.Max(rssOf(samples[:third]))/(1<<20), slices.Min(rssOf(lastThird))/(1<<20), slices.Max(rssOf(lastThird))/(1<<20))
	fmt.Fprintf(&b, "| Go heap in use (MiB) | %.1f | %.1f | | |\n", first.heap/(1<<20), last.heap/(1<<20))
	return b.String()
}
