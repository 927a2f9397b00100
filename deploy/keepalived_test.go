//go:build linux

package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// The failover network: a client, gateways A and B and a target, each in
// a network namespace of its own, joined by two bridges in a fifth (the
// switch): the front (clients, the floating address) and the back
// (targets). Each gateway's interfaces have the same names, f0 and b0, as
// two hosts built alike would.
const (
	kaFront  = "10.96.1."
	kaBack   = "10.96.2."
	kaVIP    = kaFront + "100"
	kaRoute  = 7471
	kaAdvert = "0.2" // the test's VRRP advert interval (the shipped one: 1 s)
)

// TestKeepalivedFailover runs the shipped deploy/keepalived files: two
// `rbridge run` gateways with the same routes (rbridge.yaml, its listen
// leg freebind on the floating address) and keepalived on each
// (active.conf, standby.conf, with their check `rbridge status --ready`).
// A RoCE client reaches the target through the floating address on A;
// A's rbridge is killed and the address moves to B, the client's next
// connection going through B; A comes back and does not take the address
// (nopreempt); B's target-side link goes down, its /healthz fails, and the
// address moves back to A, the client's next connection going through A;
// A's host dies whole (keepalived too) and the address moves to B again.
// Sessions never move: a client reconnects.
func TestKeepalivedFailover(t *testing.T) {
	needs.Root(t, "network namespaces, keepalived")
	for _, tool := range []string{"ip", "keepalived", "go"} {
		_, err := exec.LookPath(tool)
		needs.Check(t, tool+" (make deps installs keepalived)", err)
	}
	dir := kaDir(t)
	bin := filepath.Join(dir, "rbridge")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/rbridge").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/rbridge: %v\n%s", err, out)
	}
	n := kaNetwork(t)

	// The shipped files, with this network's interfaces, addresses and
	// paths; the VRRP advert shortened, and nothing else changed.
	gwYAML := readShipped(t, "keepalived/rbridge.yaml")
	for _, gw := range []*kaGateway{n.a, n.b} {
		gw.yaml = filepath.Join(dir, gw.name+".yaml")
		y := strings.NewReplacer( // the longer address first: a Replacer tries them in order
			"interface: eth1", "interface: f0", "interface: eth2", "interface: b0",
			"198.18.1.100", kaVIP, "198.18.2.10", kaBack+"10", "198.18.2.1", gw.back,
			`listen: "127.0.0.1:9479"`, `listen: "127.0.0.1:9479"`+"\n  control: "+filepath.Join(dir, gw.name+".sock"),
		).Replace(gwYAML)
		kaWrite(t, gw.yaml, y)
		conf := readShipped(t, "keepalived/"+gw.conf)
		conf = strings.NewReplacer(
			"/usr/local/bin/rbridge", bin, "/etc/rbridge/rbridge.yaml", gw.yaml,
			"interface eth1", "interface f0", "198.18.1.100/32 dev eth1", kaVIP+"/32 dev f0",
			"advert_int 1\n", "advert_int "+kaAdvert+"\n",
		).Replace(conf)
		for _, want := range []string{bin, gw.yaml, "interface f0", kaVIP, "advert_int " + kaAdvert} {
			if !strings.Contains(conf, want) {
				t.Fatalf("%s: the test's substitution %q did not happen: the shipped file changed", gw.conf, want)
			}
		}
		gw.kaConf = filepath.Join(dir, gw.name+"-keepalived.conf")
		kaWrite(t, gw.kaConf, conf)
	}

	// The standby's check passes before it starts, and notes the address
	// it does not hold.
	out, err := n.b.exec(bin, "run", "--config", n.b.yaml, "--check").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `note: leg "front": ip `+kaVIP+" is not on f0") {
		t.Fatalf("run --check on B: %v\n%s", err, out)
	}
	n.a.startRbridge(t, bin)
	n.b.startRbridge(t, bin)
	n.a.waitReady(t, bin)
	n.b.waitReady(t, bin)
	// The active first: two BACKUPs with nopreempt started together elect
	// whichever times out first, and the address then stays there.
	started := time.Now()
	n.a.startKeepalived(t, dir)
	if err := n.a.vip.wait(true, 30*time.Second); err != nil {
		t.Fatalf("A did not take the floating address: %v\n%s", err, n.a.ka.String())
	}
	t.Logf("A took the floating address %v after its keepalived started", n.a.vip.last().Sub(started).Round(time.Millisecond))
	// keepalived reads a line it does not like as a warning and goes on
	// without it: the shipped files must have none.
	for _, l := range strings.Split(n.a.ka.String(), "\n") {
		for _, bad := range []string{"ignoring", "unknown keyword", "invalid", "warning", "security violation", "unsafe"} {
			if strings.Contains(strings.ToLower(l), bad) {
				t.Errorf("keepalived on A complains about its file (%q): %s", bad, l)
			}
		}
	}
	n.b.startKeepalived(t, dir)
	n.b.ka.waitFor(t, "Entering BACKUP STATE", 30*time.Second)
	// B is a warm standby: ready, without the address.
	if out, err := n.b.exec(bin, "status", "--ready", "--config", n.b.yaml).CombinedOutput(); err != nil {
		t.Fatalf("B, the standby, is not ready: %v\n%s", err, out)
	}
	if out, _ := n.b.exec(bin, "status", "--config", n.b.yaml).CombinedOutput(); !strings.Contains(string(out), "(standby: ip not here)") {
		t.Errorf("B's status does not say it is a standby:\n%s", out)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	client := newKAApp(t, n.cl, kaFront+"10")
	target := newKAApp(t, n.tg, kaBack+"10")
	ln, err := target.cm.Listen(kaRoute, 16)
	if err != nil {
		t.Fatal(err)
	}
	exchange(t, ctx, client, target, ln, "through A")
	n.a.wantSessions(t, bin, 1)
	n.b.wantSessions(t, bin, 0)

	// A's gateway dies.
	killed := time.Now()
	if err := n.a.rb.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := n.b.vip.wait(true, 30*time.Second); err != nil {
		t.Fatalf("the floating address did not move to B after A's rbridge was killed: %v\nA's keepalived:\n%s\nB's:\n%s", err, n.a.ka.String(), n.b.ka.String())
	}
	t.Logf("takeover after SIGKILL of A's rbridge: the address on B %v after the kill", n.b.vip.last().Sub(killed).Round(time.Millisecond))
	if err := n.a.vip.wait(false, 10*time.Second); err != nil {
		t.Errorf("A still holds the floating address: %v", err)
	}
	// keepalived moved it for the reason the test gave: no gateway
	// answered A's check.
	n.a.ka.waitFor(t, "VRRP_Script(rbridge_ready) failed (exited with status 3)", 10*time.Second)
	exchange(t, ctx, client, target, ln, "through B, after A died")
	n.b.wantSessions(t, bin, 1)

	// A comes back: ready, a standby now, and the address stays on B.
	n.a.startRbridge(t, bin)
	n.a.waitReady(t, bin)
	n.a.ka.waitFor(t, "Entering BACKUP STATE", 30*time.Second)
	if n.a.vip.held() || !n.b.vip.held() {
		t.Fatalf("after A came back: A holds the address %v, B %v; want it left on B (nopreempt)", n.a.vip.held(), n.b.vip.held())
	}

	// B's target-side link goes down: B is not ready, and the address
	// moves back to A.
	down := time.Now()
	n.b.ip(t, "link", "set", "b0", "down")
	if err := n.a.vip.wait(true, 30*time.Second); err != nil {
		t.Fatalf("the floating address did not move to A after B's back link went down: %v\nB's keepalived:\n%s", err, n.b.ka.String())
	}
	t.Logf("takeover after B's target-side link went down: the address on A %v after", n.a.vip.last().Sub(down).Round(time.Millisecond))
	// The impairment happened: B says it is not ready, and why.
	out, err = n.b.exec(bin, "status", "--ready", "--config", n.b.yaml).CombinedOutput()
	if ee := (*exec.ExitError)(nil); err == nil || !errorsAs(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), `leg "back" (userspace) is down`) {
		t.Errorf("B's status --ready with its back link down: %v\n%s", err, out)
	}
	if err := n.b.vip.wait(false, 10*time.Second); err != nil {
		t.Errorf("B still holds the floating address: %v", err)
	}
	n.b.ka.waitFor(t, "VRRP_Script(rbridge_ready) failed (exited with status 1)", 10*time.Second)
	exchange(t, ctx, client, target, ln, "through A again, after B's link went down")
	n.a.wantSessions(t, bin, 1)

	// B's link is back: B is a ready standby again. Then A's host dies
	// whole: keepalived and rbridge killed, its front cable out (a killed
	// keepalived leaves the address on the interface). B hears no more
	// adverts and takes the address after 3 advert intervals and a skew.
	n.b.ka.waitFor(t, "Entering FAULT STATE", 10*time.Second)
	backups := n.b.ka.count("Entering BACKUP STATE")
	n.b.ip(t, "link", "set", "b0", "up")
	n.b.waitReady(t, bin)
	// The session its link cut has ended, and B is out of FAULT.
	n.b.waitSessions(t, bin, 0)
	n.b.ka.waitForNth(t, "Entering BACKUP STATE", backups+1, 30*time.Second)

	// The cable first: a keepalived whose parent process is killed
	// still sends its goodbye (priority 0) from its VRRP child. Then
	// keepalived's parent (which would start a killed child again), then
	// every process left in A's namespace.
	dead := time.Now()
	n.a.ip(t, "link", "set", "f0", "down")
	if err := n.a.kaCmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	n.a.killAll(t)
	if err := n.b.vip.wait(true, 30*time.Second); err != nil {
		t.Fatalf("the floating address did not move to B after A's host died: %v\nB's keepalived:\n%s", err, n.b.ka.String())
	}
	t.Logf("takeover after A's host died (advert_int %s): the address on B %v after", kaAdvert, n.b.vip.last().Sub(dead).Round(time.Millisecond))
	exchange(t, ctx, client, target, ln, "through B again, after A's host died")
	n.b.wantSessions(t, bin, 1)
}

func errorsAs(err error, ee **exec.ExitError) bool {
	e, ok := err.(*exec.ExitError)
	*ee = e
	return ok
}

// kaDir is a directory for the test's binary and files that keepalived
// takes a script from (enable_script_security): root's alone, 0755.
func kaDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func kaWrite(t *testing.T, path, s string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readShipped(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kaNet is the failover network's namespaces.
type kaNet struct {
	sw, cl, tg string
	a, b       *kaGateway
}

// kaGateway is a gateway's namespace, its processes and what it holds.
type kaGateway struct {
	name, ns, back string // back: its target-side address
	conf           string // its shipped keepalived file
	yaml, kaConf   string // its files, as written for the test
	rb             *exec.Cmd
	rbLog          *lineLog
	ka             *lineLog
	kaCmd          *exec.Cmd
	vip            *addrWatch
}

func kaNetwork(t *testing.T) *kaNet {
	t.Helper()
	id := fmt.Sprint(os.Getpid() % 100000)
	n := &kaNet{sw: "rbh" + id + "sw", cl: "rbh" + id + "cl", tg: "rbh" + id + "tg",
		a: &kaGateway{name: "a", ns: "rbh" + id + "a", back: kaBack + "1", conf: "active.conf"},
		b: &kaGateway{name: "b", ns: "rbh" + id + "b", back: kaBack + "2", conf: "standby.conf"}}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{n.sw, n.cl, n.tg, n.a.ns, n.b.ns} {
		run("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
		run("-n", ns, "link", "set", "lo", "up")
	}
	for _, br := range []string{"front", "back"} {
		run("-n", n.sw, "link", "add", br, "type", "bridge")
		run("-n", n.sw, "link", "set", br, "up")
	}
	// A port of the switch: a veth with one end in ns (ifname, addr) and
	// the other on bridge br.
	port := func(ns, ifname, addr, br, swName string) {
		run("-n", n.sw, "link", "add", swName, "type", "veth", "peer", "name", ifname, "netns", ns)
		run("-n", n.sw, "link", "set", swName, "master", br, "up")
		run("-n", ns, "addr", "add", addr+"/24", "dev", ifname)
		run("-n", ns, "link", "set", ifname, "up")
	}
	port(n.cl, "c0", kaFront+"10", "front", "fc")
	port(n.a.ns, "f0", kaFront+"1", "front", "fa")
	port(n.b.ns, "f0", kaFront+"2", "front", "fb")
	port(n.tg, "t0", kaBack+"10", "back", "bt")
	port(n.a.ns, "b0", n.a.back, "back", "ba")
	port(n.b.ns, "b0", n.b.back, "back", "bb")
	for _, gw := range []*kaGateway{n.a, n.b} {
		gw.vip = watchAddr(t, gw.ns, "f0", netip.MustParseAddr(kaVIP))
	}
	return n
}

// killAll kills every process in the gateway's namespace (SIGKILL) but
// the test's own: a goroutine that entered the namespace may have done so
// on the main thread, which Go then keeps there.
func (gw *kaGateway) killAll(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "pids", gw.ns).Output()
	if err != nil {
		t.Errorf("ip netns pids %s: %v", gw.ns, err)
		return
	}
	for _, pid := range strings.Fields(string(out)) {
		if n, err := strconv.Atoi(pid); err == nil && n != os.Getpid() {
			syscall.Kill(n, syscall.SIGKILL)
		}
	}
}

func (gw *kaGateway) exec(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", gw.ns, name}, args...)...)
}

func (gw *kaGateway) ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", gw.ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s %s: %v: %s", gw.ns, strings.Join(args, " "), err, out)
	}
}

// startRbridge starts `rbridge run` with the gateway's file, in its
// namespace; the test's end stops it and logs what it wrote.
func (gw *kaGateway) startRbridge(t *testing.T, bin string) {
	t.Helper()
	cmd := gw.exec(bin, "run", "--config", gw.yaml)
	cmd.WaitDelay = 5 * time.Second // its output's pipe, should a child hold it
	gw.rbLog = &lineLog{}
	cmd.Stdout, cmd.Stderr = gw.rbLog, gw.rbLog
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gw.rb = cmd
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	logs := gw.rbLog
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		t.Logf("rbridge run on %s:\n%s", gw.name, logs.String())
	})
}

// waitReady waits until the gateway's status --ready passes.
func (gw *kaGateway) waitReady(t *testing.T, bin string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := gw.exec(bin, "status", "--ready", "--config", gw.yaml).CombinedOutput()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s not ready after 30 s: %v\n%s\n%s", gw.name, err, out, gw.rbLog.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// wantSessions checks how many sessions the gateway runs, from its status.
func (gw *kaGateway) wantSessions(t *testing.T, bin string, want int) {
	t.Helper()
	out, err := gw.exec(bin, "status", "--json", "--config", gw.yaml).Output()
	if err != nil {
		t.Fatalf("status of %s: %v", gw.name, err)
	}
	var st bridge.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status of %s: %v\n%s", gw.name, err, out)
	}
	if len(st.Sessions) != want {
		t.Errorf("gateway %s runs %d sessions, want %d", gw.name, len(st.Sessions), want)
	}
}

// waitSessions waits until the gateway runs want sessions (one closing
// waits for its connections' disconnects to be answered or to time out).
func (gw *kaGateway) waitSessions(t *testing.T, bin string, want int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := gw.exec(bin, "status", "--json", "--config", gw.yaml).Output()
		var st bridge.Status
		if err == nil && json.Unmarshal(out, &st) == nil && len(st.Sessions) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s runs %d sessions after 20 s, want %d (%v)", gw.name, len(st.Sessions), want, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// startKeepalived runs keepalived (VRRP alone, in the foreground, logging
// to its standard error) with the gateway's file, in its namespace.
func (gw *kaGateway) startKeepalived(t *testing.T, dir string) {
	t.Helper()
	pid := func(what string) string { return filepath.Join(dir, gw.name+"-"+what+".pid") }
	cmd := gw.exec("keepalived", "--dont-fork", "--log-console", "--log-detail", "--no-syslog", "--vrrp",
		"--use-file", gw.kaConf, "--pid", pid("keepalived"), "--vrrp_pid", pid("vrrp"), "--checkers_pid", pid("checkers"))
	cmd.WaitDelay = 5 * time.Second // its output's pipe, which its children hold too
	gw.ka, gw.kaCmd = &lineLog{}, cmd
	cmd.Stdout, cmd.Stderr = gw.ka, gw.ka
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		gw.killAll(t) // a VRRP child whose parent was killed
		t.Logf("keepalived on %s:\n%s", gw.name, gw.ka.String())
	})
}

// lineLog collects a process's output, and signals each line.
type lineLog struct {
	mu    sync.Mutex
	b     strings.Builder
	waits []chan struct{}
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	for _, c := range l.waits {
		close(c)
	}
	l.waits = nil
	return len(p), nil
}

func (l *lineLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// count is how many times the output holds s.
func (l *lineLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// waitFor waits until the output holds s.
func (l *lineLog) waitFor(t *testing.T, s string, timeout time.Duration) {
	t.Helper()
	l.waitForNth(t, s, 1, timeout)
}

// waitForNth waits until the output holds s n times.
func (l *lineLog) waitForNth(t *testing.T, s string, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		if strings.Count(l.b.String(), s) >= n {
			l.mu.Unlock()
			return
		}
		c := make(chan struct{})
		l.waits = append(l.waits, c)
		l.mu.Unlock()
		select {
		case <-c:
		case <-deadline:
			t.Fatalf("no %q within %v:\n%s", s, timeout, l.String())
		}
	}
}

// addrWatch follows an address on an interface of a namespace, from the
// kernel's netlink notifications: whether it is there, and when it last
// came or went.
type addrWatch struct {
	mu      sync.Mutex
	here    bool
	changed time.Time
	signal  chan struct{} // closed and replaced at each change
}

func watchAddr(t *testing.T, ns, ifname string, ip netip.Addr) *addrWatch {
	t.Helper()
	h, err := vnetns.GetFromPath(netns.Path(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var index int
	if err := netns.Do(ns, func() error {
		l, err := netlink.LinkByName(ifname)
		if err == nil {
			index = l.Attrs().Index
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	w := &addrWatch{signal: make(chan struct{})}
	ch, done := make(chan netlink.AddrUpdate, 64), make(chan struct{})
	if err := netlink.AddrSubscribeWithOptions(ch, done, netlink.AddrSubscribeOptions{Namespace: &h, ListExisting: true}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(done) })
	go func() {
		for u := range ch {
			at := time.Now()
			if got, ok := netip.AddrFromSlice(u.LinkAddress.IP); u.LinkIndex != index || !ok || got.Unmap() != ip {
				continue
			}
			w.mu.Lock()
			if w.here != u.NewAddr {
				w.here, w.changed = u.NewAddr, at
				close(w.signal)
				w.signal = make(chan struct{})
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *addrWatch) held() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.here
}

func (w *addrWatch) last() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// wait waits until the address is there (here) or not.
func (w *addrWatch) wait(here bool, timeout time.Duration) error {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		now, c := w.here, w.signal
		w.mu.Unlock()
		if now == here {
			return nil
		}
		select {
		case <-c:
		case <-deadline:
			return fmt.Errorf("the address still %s after %v", map[bool]string{true: "there", false: "away"}[now], timeout)
		}
	}
}

// kaApp is a RoCE application (rbridge's userspace transport and IB CM on
// a UDP socket) in a namespace: the client or the target.
type kaApp struct {
	dev *transport.Device
	cm  *cm.Manager
	pd  *transport.PD
	mr  *transport.MR
	mem []byte
	cq  *transport.CQ
}

func newKAApp(t *testing.T, ns, ip string) *kaApp {
	t.Helper()
	a := &kaApp{pd: transport.NewPD(), mem: make([]byte, 1<<20), cq: transport.NewCQ(1024)}
	addr := netip.MustParseAddr(ip)
	var uc *udpconn.Conn
	if err := netns.Do(ns, func() error {
		var err error
		uc, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(addr, roce.Port)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var err error
	if a.dev, err = transport.NewDevice(uc, transport.DeviceOptions{Logger: testlog.New(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.dev.Close() })
	if a.cm, err = cm.New(cm.Options{Device: a.dev, Addr: addr, Logger: testlog.New(t), RetryTimeout: 100 * time.Millisecond, MaxRetries: 5}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.cm.Close() })
	if a.mr, err = a.pd.RegisterMR(a.mem, transport.AccessLocalWrite|transport.AccessRemoteWrite); err != nil {
		t.Fatal(err)
	}
	return a
}

func (a *kaApp) qp(t *testing.T) *transport.QP {
	t.Helper()
	qp, err := a.dev.CreateQP(a.pd, transport.QPInitAttr{Type: transport.RC, SendCQ: a.cq, RecvCQ: a.cq})
	if err != nil {
		t.Fatal(err)
	}
	return qp
}

// exchange connects the client to the floating address, and through the
// gateway that holds it to the target, then sends a SEND and a
// WRITE_WITH_IMM, each checked where it landed.
func exchange(t *testing.T, ctx context.Context, client, target *kaApp, ln *cm.Listener, what string) {
	t.Helper()
	payload := []byte(what)
	accepted := make(chan error, 1)
	tqp := target.qp(t)
	go func() {
		r, err := ln.Next(ctx)
		if err != nil {
			accepted <- err
			return
		}
		if err := tqp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			accepted <- err
			return
		}
		if err := tqp.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: target.mr, Length: 4096}},
			transport.RecvWR{ID: 2, Local: transport.SGE{MR: target.mr, Offset: 4096, Length: 4096}}); err != nil {
			accepted <- err
			return
		}
		_, err = r.Accept(ctx, cm.AcceptOptions{QP: tqp})
		accepted <- err
	}()
	cqp := client.qp(t)
	if _, err := client.cm.Dial(ctx, netip.MustParseAddrPort(fmt.Sprintf("%s:%d", kaVIP, kaRoute)), cm.DialOptions{QP: cqp}); err != nil {
		t.Fatalf("%s: the client's connection to %s: %v", what, kaVIP, err)
	}
	if err := <-accepted; err != nil {
		t.Fatalf("%s: the target's accept: %v", what, err)
	}
	clear(target.mem[:8192+len(payload)])
	copy(client.mem, payload)
	if err := cqp.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Local: transport.SGE{MR: client.mr, Length: len(payload)}, Signaled: true},
		transport.SendWR{ID: 2, Opcode: transport.OpWriteWithImm, Imm: 5, Local: transport.SGE{MR: client.mr, Length: len(payload)},
			Remote: target.mr.Addr() + 8192, RKey: target.mr.RKey(), Signaled: true}); err != nil {
		t.Fatal(err)
	}
	// The client's two completions; the target's two receives (the
	// WRITE_WITH_IMM consumes one).
	wcs := make([]transport.WC, 2)
	for _, cq := range []*transport.CQ{client.cq, target.cq} {
		for got := 0; got < 2; {
			k, err := cq.PollWait(ctx, wcs[:2-got])
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
			for _, wc := range wcs[:k] {
				if wc.Status != transport.StatusSuccess {
					t.Fatalf("%s: completion %+v: %v", what, wc, wc.Status)
				}
			}
			got += k
		}
	}
	if string(target.mem[:len(payload)]) != what || string(target.mem[8192:8192+len(payload)]) != what {
		t.Fatalf("%s: the target holds %q and %q", what, target.mem[:len(payload)], target.mem[8192:8192+len(payload)])
	}
}

// TestKeepalivedFiles: the shipped keepalived files agree with each other
// and with the gateway's: the two differ in their first lines and their
// priority alone (the active's higher), both start as BACKUP with
// nopreempt and track the readiness check, which runs the installed
// binary (make install's default prefix) on the unit's config file; the
// address keepalived moves is the listen leg's ip, on its interface, and
// that leg is freebind.
func TestKeepalivedFiles(t *testing.T) {
	active, standby := readShipped(t, "keepalived/active.conf"), readShipped(t, "keepalived/standby.conf")
	al, sl := strings.Split(active, "\n"), strings.Split(standby, "\n")
	if len(al) != len(sl) {
		t.Fatalf("active.conf has %d lines, standby.conf %d: want the same file but the priority", len(al), len(sl))
	}
	prio := map[string]int{}
	for i := range al {
		if al[i] == sl[i] || i < 3 { // the first lines say which file it is
			continue
		}
		var a, b int
		if _, err := fmt.Sscanf(strings.TrimSpace(al[i]), "priority %d", &a); err != nil {
			t.Errorf("line %d differs: %q, %q: want only the priority to", i+1, al[i], sl[i])
			continue
		}
		if _, err := fmt.Sscanf(strings.TrimSpace(sl[i]), "priority %d", &b); err != nil {
			t.Errorf("line %d differs: %q, %q: want only the priority to", i+1, al[i], sl[i])
			continue
		}
		prio["active"], prio["standby"] = a, b
	}
	if prio["active"] <= prio["standby"] {
		t.Errorf("priorities: active %d, standby %d: want the active's higher", prio["active"], prio["standby"])
	}

	kw := map[string]string{} // the first value of each keyword
	for _, l := range strings.Split(active, "\n") {
		f := strings.Fields(strings.SplitN(l, "#", 2)[0])
		if len(f) > 0 {
			if _, ok := kw[f[0]]; !ok {
				kw[f[0]] = strings.Join(f[1:], " ")
			}
		}
	}
	for k, want := range map[string]string{
		"state":                  "BACKUP",
		"script":                 `"/usr/local/bin/rbridge status --ready --config /etc/rbridge/rbridge.yaml --timeout 1s"`,
		"rbridge_ready":          "", // the track_script's entry
		"enable_script_security": "",
		"advert_int":             "1",
	} {
		if got, ok := kw[k]; !ok || got != want {
			t.Errorf("active.conf: %s %q (present %v), want %q", k, got, ok, want)
		}
	}
	if _, ok := kw["nopreempt"]; !ok {
		t.Error("active.conf: no nopreempt: a gateway that comes back would take the address and end every session through the other")
	}

	cfg, err := config.Parse("keepalived/rbridge.yaml", []byte(readShipped(t, "keepalived/rbridge.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	// The one address of virtual_ipaddress { ADDR/LEN dev IF }.
	_, block, _ := strings.Cut(active, "virtual_ipaddress {")
	block, _, _ = strings.Cut(block, "}")
	f := strings.Fields(strings.SplitN(strings.TrimSpace(block), "#", 2)[0])
	if len(f) != 3 || f[1] != "dev" {
		t.Fatalf("virtual_ipaddress %q: want one ADDR/LEN dev IF", block)
	}
	vip, err := netip.ParsePrefix(f[0])
	if err != nil {
		t.Fatal(err)
	}
	var listen *config.Leg
	for i := range cfg.Legs {
		if l := &cfg.Legs[i]; l.IP == vip.Addr() {
			listen = l
		}
	}
	switch {
	case listen == nil:
		t.Fatalf("no leg of rbridge.yaml has the address keepalived moves (%v)", vip.Addr())
	case !listen.FreeBind:
		t.Errorf("leg %q on the floating address is not freebind: the standby could not start", listen.Name)
	case listen.Interface != kw["interface"] || listen.Interface != f[2]:
		t.Errorf("leg %q is on %s; keepalived's interface is %q, the address goes on %q", listen.Name, listen.Interface, kw["interface"], f[2])
	}
	routed := false
	for _, r := range cfg.Routes {
		routed = routed || r.Listen.Leg == listen.Name
	}
	if !routed {
		t.Errorf("no route listens on leg %q, the floating address", listen.Name)
	}
	if cfg.Admin.Line() == 0 {
		t.Error("rbridge.yaml has no admin.listen: the check (status --ready --config) reads it there")
	}
}
