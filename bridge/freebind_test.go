package bridge_test

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/roce/cm"
)

// TestGatewayFreeBind: a userspace leg with freebind: true listens on a
// floating address its interface does not hold yet, as a standby gateway
// does before keepalived moves the VRRP address to it. Without freebind
// the address is refused with what to do; with it the gateway starts, is
// ready (a standby is ready to take over: keepalived's check must pass
// there), says in its status that it does not hold the address, and
// answers no one. Once the address arrives a client connects through;
// once it leaves, the session through it ends and its target is
// disconnected.
func TestGatewayFreeBind(t *testing.T) {
	gwNS, peerNS, gwIf, peerIf := vethNamespaces(t, "network namespaces and a veth", "rbs", "10.92.0.1/24", "10.92.0.2/24")
	addr := func(op string) {
		t.Helper()
		if out, err := exec.Command("ip", "-n", gwNS, "addr", op, "10.92.0.100/32", "dev", gwIf).CombinedOutput(); err != nil {
			t.Fatalf("ip addr %s 10.92.0.100/32: %v: %s", op, err, out)
		}
	}
	target := newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: a, kind: userspace, interface: GWIF, ip: 10.92.0.100, io: udp, netns: GWNS, freebind: true}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "10.92.0.100:7471"}
    target: {leg: b, addr: "127.0.10.4:7471"}
`)
	// Without freebind, an address the interface does not hold is an
	// error that says what a floating one needs.
	strict, err := config.Parse("gw.yaml", []byte(strings.Replace(y, ", freebind: true", "", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := bridge.CheckLegs(strict); err == nil || !strings.Contains(err.Error(), "does not hold 10.92.0.100") || !strings.Contains(err.Error(), "freebind: true") {
		t.Errorf("CheckLegs of a leg on an address not here, without freebind: %v; want it refused, naming freebind", err)
	}
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if err := bridge.CheckLegs(cfg); err != nil {
		t.Errorf("CheckLegs with freebind: %v", err)
	}
	g := startGateway(t, cfg)
	held := func() *bool {
		for _, l := range g.Status().Legs {
			if l.Name == "a" {
				if !l.FreeBind {
					t.Errorf("leg a's status: freebind false")
				}
				return l.IPHeld
			}
		}
		t.Fatal("no leg a in the status")
		return nil
	}
	if err := g.Ready(); err != nil {
		t.Fatalf("a standby (its floating address elsewhere) is not ready: %v", err)
	}
	if h := held(); h == nil || *h {
		t.Errorf("leg a's ip_held before the address arrived: %v, want false", h)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	vip := netip.MustParseAddrPort("10.92.0.100:7471")
	client := newCMAppIn(t, peerNS, "", "10.92.0.2", nil)
	dctx, dcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = client.cm.Dial(dctx, vip, cm.DialOptions{QP: client.qp(t)})
	dcancel()
	if err == nil {
		t.Fatal("a client reached the floating address before it arrived")
	}

	// The client's REQs wait in its kernel's queue for an ARP answer:
	// dropped, or they would reach the gateway once the address arrives.
	if out, err := exec.Command("ip", "-n", peerNS, "neigh", "flush", "dev", peerIf).CombinedOutput(); err != nil {
		t.Fatalf("ip neigh flush: %v: %s", err, out)
	}

	addr("add")
	if h := held(); h == nil || !*h {
		t.Errorf("leg a's ip_held once the address arrived: %v, want true", h)
	}
	_, tc, cqp := dialThroughTo(t, ctx, client, target, ln, vip)
	sessionOps(t, ctx, client, target, cqp)
	time.Sleep(2 * bridge.LinkPoll) // the gateway's link watcher saw the address

	// Its client's packets now go elsewhere (the gateway cannot even
	// answer from the address): the session ends, and its target is
	// disconnected rather than left waiting.
	addr("del")
	leftAt := time.Now()
	select {
	case <-tc.Done():
		t.Logf("the target was disconnected %v after the floating address left", time.Since(leftAt).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived its floating address by 10 s")
	}
	for deadline := time.Now().Add(10 * time.Second); g.Sessions() != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d sessions 10 s after the target was disconnected, want 0", g.Sessions())
		}
	}
	if err := g.Ready(); err != nil {
		t.Errorf("not ready once the address left (a standby again): %v", err)
	}
}

// TestGatewayFreeBindAddrLeavesAsSessionStarts: a freebind leg's floating
// address leaves while a session through it is being made: both its
// connections are up, and the session is not yet in the gateway's table,
// where the link watch looks for what to end. The session ends all the
// same, its target disconnected.
func TestGatewayFreeBindAddrLeavesAsSessionStarts(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbw", "10.91.0.1/24", "10.91.0.2/24")
	if out, err := exec.Command("ip", "-n", gwNS, "addr", "add", "10.91.0.100/32", "dev", gwIf).CombinedOutput(); err != nil {
		t.Fatalf("ip addr add 10.91.0.100/32: %v: %s", err, out)
	}
	target := newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7476, 8)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("gw.yaml", []byte(strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: a, kind: userspace, interface: GWIF, ip: 10.91.0.100, io: udp, netns: GWNS, freebind: true}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "10.91.0.100:7476"}
    target: {leg: b, addr: "127.0.10.4:7476"}
`)))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfg)
	time.Sleep(2 * bridge.LinkPoll) // the gateway's link watcher saw the address held
	markBeforeTable(t, g, "a", "-n", gwNS, "addr", "del", "10.91.0.100/32", "dev", gwIf)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := newCMAppIn(t, peerNS, "", "10.91.0.2", nil)
	_, tc, _ := dialThroughTo(t, ctx, client, target, ln, netip.MustParseAddrPort("10.91.0.100:7476"))
	select {
	case <-tc.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("the session, made as its floating address left, outlived it by 10 s; %s", strandedState(g))
	}
}

// TestGatewayFreeBindTargetAddrLeft: the floating address of the
// freebind leg a route's targets are through leaves this gateway. A new
// client is rejected at once, as when that leg's link is down, rather
// than left waiting while the gateway dials from an address whose answers
// go to another gateway; once the address is back, a client connects
// through again.
func TestGatewayFreeBindTargetAddrLeft(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "network namespaces and a veth", "rbt", "10.90.0.1/24", "10.90.0.2/24")
	addr := func(op string) {
		t.Helper()
		if out, err := exec.Command("ip", "-n", gwNS, "addr", op, "10.90.0.100/32", "dev", gwIf).CombinedOutput(); err != nil {
			t.Fatalf("ip addr %s 10.90.0.100/32: %v: %s", op, err, out)
		}
	}
	addr("add")
	target := newCMAppIn(t, peerNS, "", "10.90.0.2", nil)
	ln, err := target.cm.Listen(7477, 8)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("gw.yaml", []byte(strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: GWIF, ip: 10.90.0.100, io: udp, netns: GWNS, freebind: true}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7477"}
    target: {leg: b, addr: "10.90.0.2:7477"}
`)))
	if err != nil {
		t.Fatal(err)
	}
	g := startGateway(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := newCMApp(t, lo("3"))
	dialAgain(t, ctx, client, target, ln, "1:7477")

	addr("del")
	time.Sleep(3 * bridge.LinkPoll) // the gateway's link watcher saw it leave
	admin := startAdmin(t, g)
	m, _ := scrape(t, admin)
	const sent = `rbridge_cm_tx_mads_total{leg="b"}`
	before := m[sent]
	dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
	start := time.Now()
	_, err = client.cm.Dial(dctx, netip.MustParseAddrPort(lo("1:7477")), cm.DialOptions{QP: client.qp(t)})
	dcancel()
	if rj := (*cm.RejectError)(nil); err == nil || !errors.As(err, &rj) {
		t.Fatalf("a connection while the targets' leg's floating address is elsewhere: %v after %v, want a reject", err, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("rejected after %v", time.Since(start).Round(time.Microsecond))
	m, _ = scrape(t, admin)
	if m[sent] != before {
		t.Errorf("the gateway sent %v MADs on leg b, from an address it no longer holds: it dialed the target", m[sent]-before)
	}
	if got := m[`rbridge_route_sessions_rejected_total{route="r"}`]; got != 1 {
		t.Errorf(`rbridge_route_sessions_rejected_total{route="r"} = %v, want 1`, got)
	}

	addr("add")
	dialAgain(t, ctx, client, target, ln, "1:7477")
}
