package bridge_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestGatewayLinkDown: the interface of the leg a session's target is
// through goes down. The session ends at once, its client disconnected
// rather than left waiting on a peer it can no longer reach; /healthz
// (Ready) names the leg; a new connection whose target is through it is
// rejected; once the link is up, a new connection goes through again.
func TestGatewayLinkDown(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbl", "10.94.0.1/24", "10.94.0.2/24")
	link := func(state string) {
		t.Helper()
		if out, err := exec.Command("ip", "-n", gwNS, "link", "set", gwIf, state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s %s: %v: %s", gwIf, state, err, out)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, client, target, ln, cc := sessionOverVeth(t, ctx, gwNS, peerNS, gwIf, "10.94.0", 7471, "3")
	if err := g.Ready(); err != nil {
		t.Fatalf("ready with every link up: %v", err)
	}

	link("down")
	downAt := time.Now()
	select {
	case <-cc.Done():
		t.Logf("the client was disconnected %v after its target's leg went down", time.Since(downAt).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatalf("the client's connection outlived its target's leg by 10 s: stranded; %s", strandedState(g))
	}
	if err := g.Ready(); err == nil || !strings.Contains(err.Error(), `leg "b"`) {
		t.Errorf("ready with leg b down: %v, want an error naming it", err)
	}
	m, _ := scrape(t, startAdmin(t, g))
	for name, want := range map[string]float64{
		`rbridge_leg_link_downs_total{leg="b"}`:               1,
		`rbridge_leg_link_down_sessions_ended_total{leg="b"}`: 1,
		`rbridge_leg_link_downs_total{leg="a"}`:               0,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := client.cm.Dial(dctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: client.qp(t)})
	dcancel()
	if rj := (*cm.RejectError)(nil); err == nil || !errors.As(err, &rj) {
		t.Errorf("a connection while the target's leg is down: %v, want a reject", err)
	}

	link("up")
	for deadline := time.Now().Add(10 * time.Second); g.Ready() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 10 s after the link came up: %v", g.Ready())
		}
	}
	dialAgain(t, ctx, client, target, ln, "1:7471")
}

// strandedState says what the gateway's status shows of its legs and
// sessions, for a test whose client was not disconnected when it should
// have been; or, when the status does not come within 5 s (a link read
// stuck), every goroutine's stack.
func strandedState(g *bridge.Gateway) string {
	got := make(chan bridge.Status, 1)
	go func() { got <- g.Status() }()
	select {
	case st := <-got:
		var b strings.Builder
		for _, ls := range st.Legs {
			fmt.Fprintf(&b, "leg %s: state %q, up %v, link watch %q; ", ls.Name, ls.State, ls.Up, ls.LinkWatch)
		}
		fmt.Fprintf(&b, "%d sessions running, ready: %v", len(st.Sessions), g.Ready())
		return b.String()
	case <-time.After(5 * time.Second):
		var b strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		return "the gateway's status did not come in 5 s; goroutines:\n" + b.String()
	}
}

// dialAgain connects client to target through the gateway again (lo's
// host:port addr) and disconnects, once the link watch saw the link up:
// the gateway accepts through it again.
func dialAgain(t *testing.T, ctx context.Context, client, target *cmApp, ln *cm.Listener, addr string) {
	t.Helper()
	time.Sleep(3 * bridge.LinkPoll)
	again, _, _ := dialThrough(t, ctx, client, target, ln, addr)
	if err := again.Disconnect(ctx); err != nil {
		t.Error(err)
	}
}

// TestGatewayLinkDeleted: the interface of the leg a session's target is
// through is deleted under the running gateway. That is a link down, not
// a link that cannot be read: the session ends at once, /healthz names
// the leg, and /status says the interface is absent from the leg's
// namespace. Made again, the io: udp leg is up again and carries a new
// session.
func TestGatewayLinkDeleted(t *testing.T) {
	gwNS, peerNS, gwIf, peerIf := vethNamespaces(t, "network namespaces and a veth", "rbx", "10.96.0.1/24", "10.96.0.2/24")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	g, client, target, ln, cc := sessionOverVeth(t, ctx, gwNS, peerNS, gwIf, "10.96.0", 7473, "5")
	if out, err := exec.Command("ip", "-n", gwNS, "link", "del", gwIf).CombinedOutput(); err != nil {
		t.Fatalf("ip link del %s: %v: %s", gwIf, err, out)
	}
	select {
	case <-cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the client's connection outlived its target's interface by 10 s: stranded; %s", strandedState(g))
	}
	if err := g.Ready(); err == nil || !strings.Contains(err.Error(), `leg "b"`) || !strings.Contains(err.Error(), "absent") {
		t.Errorf("ready with leg b's interface deleted: %v, want an error naming the leg and its interface absent", err)
	}
	for _, ls := range g.Status().Legs {
		if ls.Name == "b" && (ls.Up || !strings.HasPrefix(ls.State, "absent: ") || !strings.Contains(ls.State, gwIf+" in network namespace "+gwNS)) {
			t.Errorf("leg b on /status: state %q, up %v; want absent, naming %s in %s", ls.State, ls.Up, gwIf, gwNS)
		}
	}
	// Made again with the leg's address: an io: udp leg's socket is bound
	// to the address, so the leg is up again and carries a new session.
	remakeVeth(t, gwNS, peerNS, gwIf, peerIf, "10.96.0.1/24", "10.96.0.2/24")
	waitUntil(t, "ready once the interface is made again", func() bool { return g.Ready() == nil })
	dialAgain(t, ctx, client, target, ln, "1:7473")
}

// TestGatewayLinkDownAsSessionStarts: the target's leg goes down while a
// session is being made: both its connections are up, and the session
// is not yet in the gateway's table, where the link watch looks for what
// the link down ends. The session ends all the same: its client is
// disconnected, and the session is counted as one the link down ended.
func TestGatewayLinkDownAsSessionStarts(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbd", "10.98.0.1/24", "10.98.0.2/24")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	target := newCMAppIn(t, peerNS, "", "10.98.0.2", nil)
	ln, err := target.cm.Listen(7475, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, twoLegConfig(t, gwNS, gwIf, "10.98.0.1", `
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7475"}
    target: {leg: b, addr: "10.98.0.2:7475"}
`))
	downBeforeTable(t, g, gwNS, gwIf)
	client := newCMApp(t, lo("5"))
	cc, _, _ := dialThrough(t, ctx, client, target, ln, "1:7475")
	select {
	case <-cc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the client's connection, made as its target's leg went down, outlived it by 10 s: stranded; %s", strandedState(g))
	}
	waitUntil(t, "the session out of the gateway's table", func() bool { return g.Sessions() == 0 })
	m, _ := scrape(t, startAdmin(t, g))
	for name, want := range map[string]float64{
		`rbridge_leg_link_downs_total{leg="b"}`:               1,
		`rbridge_leg_link_down_sessions_ended_total{leg="b"}`: 1,
	} {
		if got, ok := m[name]; !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
}

// downBeforeTable has g, as the first session or UD client's pair is
// about to enter its table, bring leg b's interface (gwIf in gwNS) down
// and wait until its link watch has the leg down.
func downBeforeTable(t *testing.T, g *bridge.Gateway, gwNS, gwIf string) {
	markBeforeTable(t, g, "b", "-n", gwNS, "link", "set", gwIf, "down")
}

// markBeforeTable has g, as the first session or UD client's pair is
// about to enter its table, run ip with args and wait until its link
// watch has leg down (or its floating address gone).
func markBeforeTable(t *testing.T, g *bridge.Gateway, leg string, args ...string) {
	var once sync.Once
	bridge.SetBeforeTable(g, func() {
		once.Do(func() {
			if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
				t.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
				return
			}
			for deadline := time.Now().Add(5 * time.Second); bridge.CrossesDown(g, leg) == nil; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("the link watch did not mark leg %s in 5 s", leg)
					return
				}
			}
		})
	})
}

// TestGatewayLinkReplacedAFXDP: the interface of an io: afxdp leg is
// deleted and another made under its name, with the leg's address. The
// leg's classifier and AF_XDP sockets went with the first: the leg stays
// down, its state saying the interface was replaced and what to do.
func TestGatewayLinkReplacedAFXDP(t *testing.T) {
	gwNS, peerNS, gwIf, peerIf := vethNamespaces(t, "network namespaces, a veth and AF_XDP", "rbr", "10.97.0.1/24", "10.97.0.2/24")
	cfg := twoLegConfig(t, gwNS, gwIf, "10.97.0.1", `
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7474"}
    target: {leg: b, addr: "10.97.0.2:7474"}
`)
	cfg.Legs[1].IO = config.IOAFXDP
	g := startGateway(t, cfg)
	if err := g.Ready(); err != nil {
		t.Fatalf("ready before: %v", err)
	}
	if out, err := exec.Command("ip", "-n", gwNS, "link", "del", gwIf).CombinedOutput(); err != nil {
		t.Fatalf("ip link del %s: %v: %s", gwIf, err, out)
	}
	remakeVeth(t, gwNS, peerNS, gwIf, peerIf, "10.97.0.1/24", "10.97.0.2/24")
	var state string
	waitUntil(t, "leg b seen replaced", func() bool {
		for _, ls := range g.Status().Legs {
			if ls.Name == "b" {
				state = ls.State
				return strings.HasPrefix(ls.State, "replaced: ") && !ls.Up
			}
		}
		return false
	})
	if !strings.Contains(state, "restart the gateway") {
		t.Errorf("leg b's state %q: want it to say what to do", state)
	}
	if err := g.Ready(); err == nil || !strings.Contains(err.Error(), `leg "b"`) {
		t.Errorf("ready with leg b's interface replaced: %v, want an error naming it", err)
	}
}

// remakeVeth makes the veth pair of vethNamespaces again, after its
// gateway end was deleted (which deletes the pair).
func remakeVeth(t *testing.T, gwNS, peerNS, gwIf, peerIf, gwAddr, peerAddr string) {
	t.Helper()
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("-n", gwNS, "link", "add", gwIf, "type", "veth", "peer", "name", peerIf, "netns", peerNS)
	for _, s := range []struct{ ns, ifc, addr string }{{gwNS, gwIf, gwAddr}, {peerNS, peerIf, peerAddr}} {
		ip("-n", s.ns, "addr", "add", s.addr, "dev", s.ifc)
		ip("-n", s.ns, "link", "set", s.ifc, "up")
	}
}

// sessionOverVeth starts a gateway whose route r leads from leg a (the
// loopback, port) to a target at net.2 (net a /24, as "10.94.0") on leg
// b, across gwIf of vethNamespaces, and a client at lo(host) connected
// through it (cc).
func sessionOverVeth(t *testing.T, ctx context.Context, gwNS, peerNS, gwIf, net string, port uint16, host string) (g *bridge.Gateway, client, target *cmApp, ln *cm.Listener, cc *cm.Conn) {
	t.Helper()
	target = newCMAppIn(t, peerNS, "", net+".2", nil)
	ln, err := target.cm.Listen(port, 8)
	if err != nil {
		t.Fatal(err)
	}
	g = startGateway(t, twoLegConfig(t, gwNS, gwIf, net+".1", fmt.Sprintf(`
  - name: r
    listen: {leg: a, addr: "127.0.10.1:%d"}
    target: {leg: b, addr: "%s.2:%d"}
`, port, net, port)))
	client = newCMApp(t, lo(host))
	cc, _, _ = dialThrough(t, ctx, client, target, ln, fmt.Sprintf("1:%d", port))
	return g, client, target, ln, cc
}

// TestGatewayLinkDownClientSide: the leg a session's client is through
// goes down. Its connection's disconnect does not wait for an answer that
// cannot come (the DREQ goes on being resent), so the target, on the leg
// that is up, is disconnected at once: it waited the 5 s of that
// disconnect when the downed side was closed first.
func TestGatewayLinkDownClientSide(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbc", "10.95.0.1/24", "10.95.0.2/24")
	target := newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7472, 8)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	startGateway(t, twoLegConfig(t, gwNS, gwIf, "10.95.0.1", `
  - name: r
    listen: {leg: b, addr: "10.95.0.1:7472"}
    target: {leg: a, addr: "127.0.10.4:7472"}
`))
	client := newCMAppIn(t, peerNS, "", "10.95.0.2", nil)
	_, tc, _ := dialThroughTo(t, ctx, client, target, ln, netip.MustParseAddrPort("10.95.0.1:7472"))
	if out, err := exec.Command("ip", "-n", gwNS, "link", "set", gwIf, "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s down: %v: %s", gwIf, err, out)
	}
	downAt := time.Now()
	select {
	case <-tc.Done():
		d := time.Since(downAt)
		t.Logf("the target was disconnected %v after its client's leg went down", d.Round(time.Millisecond))
		// The watcher looks every LinkPoll; the downed side's disconnect
		// waited 5 s.
		if d > 3*time.Second {
			t.Errorf("the target was disconnected %v after its client's leg went down: the downed side's disconnect was waited for", d.Round(time.Millisecond))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the target's connection outlived its client's leg by 10 s: stranded")
	}
}

// twoLegConfig is a gateway with leg a on the loopback and leg b at bIP
// on gwIf in namespace gwNS, and routes (YAML list items).
func twoLegConfig(t *testing.T, gwNS, gwIf, bIP, routes string) *config.Config {
	t.Helper()
	y := strings.NewReplacer("127.0.10.", loNet).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: ` + gwIf + `, ip: ` + bIP + `, io: udp, netns: ` + gwNS + `}
routes:` + routes)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestOperStateKeepsThreads: reading a leg's link in another network
// namespace, as the gateway does every half second, ends no OS thread of
// the process. A thread that dies takes from `rdma res` the RDMA
// resources it made (the kernel shows a resource while its maker's
// thread lives), and entering the namespace on a thread of its own for
// each read killed one each time.
func TestOperStateKeepsThreads(t *testing.T) {
	gwNS, _, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbt", "10.93.0.1/24", "10.93.0.2/24")
	tasks := func() map[string]bool {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, e := range ents {
			m[e.Name()] = true
		}
		return m
	}
	l, err := leg.OpenLink(gwNS, gwIf)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := tasks()
	for range 50 {
		s, _, err := l.OperState()
		if err != nil || s != "up" {
			t.Fatalf("%s in %s: %q, %v; want up", gwIf, gwNS, s, err)
		}
	}
	after := tasks()
	for id := range before {
		if !after[id] {
			t.Errorf("thread %s ended while the link was read 50 times", id)
		}
	}
}

// TestGatewayLinkDownUD: a UD route's client relaying through a leg
// whose link goes down is ended (its QPs closed, as an idle one's are),
// a resolution meanwhile is answered "no QP" at once, and once the link
// is up a new resolution goes through.
func TestGatewayLinkDownUD(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbu", "10.95.0.1/24", "10.95.0.2/24")
	link := func(state string) {
		t.Helper()
		if out, err := exec.Command("ip", "-n", gwNS, "link", "set", gwIf, state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s %s: %v: %s", gwIf, state, err, out)
		}
	}
	g, client, tcq := udRouteOverVeth(t, gwNS, peerNS, gwIf, "10.95.0")
	gwA := netip.MustParseAddr(lo("1"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	svc, err := client.cm.ResolveUD(ctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cqp, _ := client.udQP(t, 16)
	client.sendUD(t, cqp, gwA, svc.QPN, cqp.QPN(), 100, 'a')
	if wc := waitUD(t, tcq); wc.Status != transport.StatusSuccess || wc.ByteLen != 100 {
		t.Fatalf("a datagram through the route: %+v", wc)
	}
	clients := func() int { return len(g.Status().UDClients) }
	if n := clients(); n != 1 {
		t.Fatalf("%d UD clients relaying, want 1", n)
	}

	link("down")
	for deadline := time.Now().Add(10 * time.Second); clients() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the UD client still relays 10 s after its target's leg went down")
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = client.cm.ResolveUD(rctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{})
	rcancel()
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a resolution while the target's leg is down: %v, want an answer of no QP", err)
	}

	link("up")
	time.Sleep(3 * bridge.LinkPoll)
	for deadline := time.Now().Add(10 * time.Second); g.Ready() != nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not ready 10 s after the link came up: %v", g.Ready())
		}
	}
	svc, err = client.cm.ResolveUD(ctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{})
	if err != nil {
		t.Fatalf("a resolution once the link is up: %v", err)
	}
	client.sendUD(t, cqp, gwA, svc.QPN, cqp.QPN(), 64, 'b')
	if wc := waitUD(t, tcq); wc.Status != transport.StatusSuccess || wc.ByteLen != 64 {
		t.Fatalf("a datagram once the link is up: %+v", wc)
	}
}

// udRouteOverVeth starts a gateway whose UD route u leads from leg a (the
// loopback, port 7174) to a target at net.2 on leg b, across gwIf of
// vethNamespaces, and a client at lo("3"); tcq is the target's receive
// queue's CQ.
func udRouteOverVeth(t *testing.T, gwNS, peerNS, gwIf, net string) (g *bridge.Gateway, client *cmApp, tcq *transport.CQ) {
	t.Helper()
	target := newCMAppIn(t, peerNS, "", net+".2", nil)
	_, tcq = udTarget(t, target, 16)
	y := strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf, "NET", net).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: GWIF, ip: NET.1, io: udp, netns: GWNS}
routes:
  - name: u
    ud: true
    listen: {leg: a, addr: "127.0.10.1:7174"}
    target: {leg: b, addr: "NET.2:7174"}
`)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return startGateway(t, cfg), newCMApp(t, lo("3")), tcq
}

// TestGatewayLinkDownAsUDClientResolves: the target's leg goes down while
// a UD client's pair is being made: the client has its answer, and the
// pair is not yet in the gateway's table, where the link watch looks for
// what the link down ends. The pair ends all the same.
func TestGatewayLinkDownAsUDClientResolves(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbv", "10.99.0.1/24", "10.99.0.2/24")
	g, client, _ := udRouteOverVeth(t, gwNS, peerNS, gwIf, "10.99.0")
	downBeforeTable(t, g, gwNS, gwIf)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := client.cm.ResolveUD(ctx, netip.AddrPortFrom(netip.MustParseAddr(lo("1")), 7174), cm.ResolveOptions{}); err != nil {
		t.Fatal(err)
	}
	// Resolved counts the pair once it is in the table.
	for deadline := time.Now().Add(10 * time.Second); g.UDStats("u").Resolved != 1 || len(g.Status().UDClients) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the UD client, resolved as its target's leg went down, still relays 10 s after (resolved %d): %s", g.UDStats("u").Resolved, strandedState(g))
		}
	}
}
