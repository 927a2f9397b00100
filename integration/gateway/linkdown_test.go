package gateway_test

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/integration/guest"
)

// TestGuestRunLinkDownUnderLoad: ib_write_bw from the RoCE side (rxe1)
// to the IB side (rxe3) through rbridge run, and the userspace leg's
// interface taken down in the middle of it. The gateway ends the session
// at once: the IB side's server, whose fabric is up, is disconnected
// within seconds. A connection through the downed leg meanwhile is
// rejected at once, not left to time out. The RoCE side's client cannot
// hear anything while its link is down (on rxe 6.1 its own retries never
// end: it asks for 7, which rxe reads as forever); once the link is up,
// the gateway's DREQ, still being resent, reaches it and it ends. Then a
// new pair goes through.
func TestGuestRunLinkDownUnderLoad(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, gatewayConfig("udp", ns, ib))
	admin := adminAddr(t, logs)
	ipNS := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("/usr/sbin/ip", append([]string{"-n", ns.Name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %s: %v\n%s", ns.Name, strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("/usr/sbin/ip", "-n", ns.Name, "link", "set", ns.Netdev, "up").Run() })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"-R", "-p", "18515", "-s", "65536", "-n", "1000000"}
	var srvOut, cliOut syncBuffer
	srv := exec.CommandContext(ctx, "ib_write_bw", append([]string{"-d", ib.PeerDevice}, args...)...)
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Wait() }()
	waitListen(t, "ib_write_bw", &srvOut)
	cli := exec.CommandContext(ctx, "ib_write_bw", append(append([]string{"-d", ns.PeerDevice}, args...), ns.IP.String())...)
	cli.Stdout, cli.Stderr = &cliOut, &cliOut
	if err := cli.Start(); err != nil {
		t.Fatal(err)
	}
	cliDone := make(chan error, 1)
	go func() { cliDone <- cli.Wait() }()

	// Under load: the route's payload grows by 4 MiB (64 WRITEs) first.
	waitLog(t, logs, `msg="session up" route=to-ib`)
	base := routeBytes(t, admin)
	for deadline := time.Now().Add(2 * time.Minute); routeBytes(t, admin)-base < 4<<20; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ib_write_bw moved %.0f bytes through the gateway in 2 minutes\nclient:\n%s\nserver:\n%s", routeBytes(t, admin)-base, cliOut.String(), srvOut.String())
		}
	}

	ipNS("link", "set", ns.Netdev, "down")
	down := time.Now()
	// perftest reads no CM event in the middle of its test: that its
	// connections were disconnected shows in their state.
	for !cmDisconnected("ib_write_bw", ib.PeerDevice) {
		if time.Since(down) > 30*time.Second {
			out, _ := exec.Command("rdma", "resource", "show", "cm_id").CombinedOutput()
			t.Fatalf("the IB side's server was not disconnected within 30 s of the RoCE leg's link going down\n%s\nrbridge:\n%s", out, lastLines(logs.String(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the IB side's server was disconnected %v after the RoCE leg's link went down", time.Since(down).Round(time.Millisecond))
	_ = srv.Process.Kill() // it would wait for its client's report for ever
	<-srvDone
	if l := waitLog(t, logs, `msg="session ended" route=to-ib`); !strings.Contains(l, "down") {
		t.Errorf("the session's end does not say the link went down: %s", l)
	}

	// A connection whose target is through the downed leg is rejected.
	tried := time.Now()
	out, err := exec.CommandContext(ctx, "rping", "-c", "-I", ib.PeerIP.String(), "-a", ib.GatewayIP.String(), "-p", "7174", "-C", "1").CombinedOutput()
	if took := time.Since(tried); !strings.Contains(string(out), "REJECTED") || took > 15*time.Second {
		t.Errorf("rping to a route through the downed leg: %v after %v, want a rejection at once:\n%s", err, took.Round(time.Millisecond), out)
	}

	ipNS("link", "set", ns.Netdev, "up")
	up := time.Now()
	for len(cliDone) == 0 && !cmDisconnected("ib_write_bw", ns.PeerDevice) {
		if time.Since(up) > 90*time.Second {
			out, _ := exec.Command("rdma", "resource", "show", "cm_id").CombinedOutput()
			t.Fatalf("the RoCE side's client was not disconnected within 90 s of its link coming back\n%s\nclient:\n%s", out, lastLines(cliOut.String(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the RoCE side's client was disconnected %v after its link came back; it was down %v", time.Since(up).Round(time.Millisecond), up.Sub(down).Round(time.Millisecond))
	_ = cli.Process.Kill()
	<-cliDone
	m, _ := scrape(t, admin)
	if v := sample(t, m, `rbridge_leg_link_downs_total{leg="roce"}`); v < 1 {
		t.Errorf("rbridge_leg_link_downs_total{roce} = %v, want 1 or more", v)
	}
	if v := sample(t, m, `rbridge_verbs_lost_acked_total{leg="ib"}`); v != 0 {
		t.Errorf("rbridge_verbs_lost_acked_total{ib} = %v: the gateway acknowledged what it then lost", v)
	}

	// The kernel's netlink updates told the gateway, not its timer.
	if l := waitLog(t, logs, `msg="a leg's link went down`); !strings.Contains(l, "leg=roce") || !strings.Contains(l, "by=update") {
		t.Errorf("the link that went down, not read on its netlink update: %s", l)
	}
	// Served again once the link is up.
	if l := waitLog(t, logs, "link is up again"); !strings.Contains(l, "leg=roce") || !strings.Contains(l, "by=update") {
		t.Errorf("the link that came back, not read on its netlink update: %s", l)
	}
	pair(t, "ib_send_bw", []string{"-R", "-d", ib.PeerDevice, "-p", "18515", "-n", "50"},
		[]string{"-R", "-d", ns.PeerDevice, "-p", "18515", "-n", "50", ns.IP.String()})
	waitSessionsEnded(t, logs)
}

// TestGuestRunVerbsPortDown: the verbs leg's port goes down with its
// netdev (rxe's port follows it) and comes back. The gateway learns both
// from the device's port events (by=update in its logs: its timer reads
// a port it is told of only every 2 s), says which leg is down in
// /healthz meanwhile, and is ready again after.
func TestGuestRunVerbsPortDown(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, gatewayConfig("udp", ns, ib))
	admin := adminAddr(t, logs)
	setLink := func(state string) {
		t.Helper()
		if out, err := exec.Command("/usr/sbin/ip", "link", "set", ib.GatewayNetdev, state).CombinedOutput(); err != nil {
			t.Fatalf("ip link set %s %s: %v\n%s", ib.GatewayNetdev, state, err, out)
		}
	}
	t.Cleanup(func() { _ = exec.Command("/usr/sbin/ip", "link", "set", ib.GatewayNetdev, "up").Run() })
	if l := logs.String(); strings.Contains(l, "link updates cannot be had") {
		t.Fatalf("the gateway could not subscribe to a leg's link updates:\n%s", lastLines(l, 20))
	}
	for _, l := range status(t, admin).Legs {
		if l.LinkWatch != "updates" {
			t.Errorf("leg %s (%s): link_watch %q in /status, want \"updates\"", l.Name, l.Kind, l.LinkWatch)
		}
	}

	setLink("down")
	down := time.Now()
	l := waitLog(t, logs, `msg="a leg's link went down`)
	t.Logf("the gateway saw the verbs leg's port down %v after its netdev went down", time.Since(down).Round(time.Millisecond))
	if !strings.Contains(l, "leg=ib") || !strings.Contains(l, "by=update") {
		t.Errorf("the port that went down, not read on its device's port event: %s", l)
	}
	resp, err := http.Get("http://" + admin + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || !strings.Contains(string(body), `leg "ib"`) {
		t.Errorf("/healthz with the verbs leg's port down: %d %s, want it naming leg \"ib\"", resp.StatusCode, body)
	}

	setLink("up")
	up := time.Now()
	l = waitLog(t, logs, "link is up again")
	t.Logf("the gateway saw the verbs leg's port active %v after its netdev came up", time.Since(up).Round(time.Millisecond))
	if !strings.Contains(l, "leg=ib") || !strings.Contains(l, "by=update") {
		t.Errorf("the port that came back, not read on its device's port event: %s", l)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz not ready 30 s after the verbs leg's port came back")
		}
	}
}

// cmDisconnected reports whether comm's rdma_cm ids on device dev have all
// left the connected state (the peer's DREQ arrived), and it had some:
// an id that was never connected (a listener) does not count.
func cmDisconnected(comm, dev string) bool {
	out, _ := exec.Command("rdma", "resource", "show", "cm_id").CombinedOutput()
	seen := false
	for _, l := range strings.Split(string(out), "\n") {
		if !strings.Contains(l, "comm "+comm) || !strings.Contains(l, "link "+dev+"/") || strings.Contains(l, "state LISTEN") {
			continue
		}
		if strings.Contains(l, "state CONNECT") {
			return false
		}
		seen = true
	}
	return seen
}
