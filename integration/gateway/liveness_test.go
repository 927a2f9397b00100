package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// TestGuestRunLiveness: an idle session through `rbridge run` stays up
// while both its peers answer the route's liveness probes; once its
// target on the IB fabric is cut off (rxe3 sends nothing: netem drops
// every packet it sends), the probe of the target's connection runs out
// of the transport's retries and the client, on the RoCE side, is
// disconnected, not left waiting on a peer it cannot reach.
func TestGuestRunLiveness(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	const port = 18517
	logs := startGateway(t, guestLegs("udp", ns, ib, "")+fmt.Sprintf(`routes:
  - name: to-ib
    listen: {leg: roce, addr: "%v:%d"}
    target: {leg: ib, addr: "%v:%d"}
    liveness: 2s
`, ns.IP, port, ib.PeerIP, port))
	// The target: rping's server, which waits for its client's first
	// message; the client sends none.
	srv := exec.Command("rping", "-s", "-a", ib.PeerIP.String(), "-p", fmt.Sprint(port), "-C", "1")
	var srvOut syncBuffer
	srv.Stdout, srv.Stderr = &srvOut, &srvOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	waitListen(t, "rping", &srvOut)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	h, err := scopeHost(ctx, t, ns, port)
	if err != nil {
		t.Fatal(err)
	}

	// Idle, both peers alive: three liveness periods without an event.
	idle, idleCancel := context.WithTimeout(ctx, 6*time.Second)
	ev, err := h.ch.Next(idle)
	idleCancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an idle session with both peers alive: %v %v, want no event for 6 s", ev.Type, err)
	}

	if out, err := exec.Command("/usr/sbin/modprobe", "sch_netem").CombinedOutput(); err != nil {
		t.Fatalf("modprobe sch_netem: %v\n%s", err, out)
	}
	if out, err := exec.Command("/usr/sbin/tc", "qdisc", "add", "dev", ib.PeerNetdev, "root", "netem", "loss", "100%").CombinedOutput(); err != nil {
		t.Fatalf("tc: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("/usr/sbin/tc", "qdisc", "del", "dev", ib.PeerNetdev, "root").Run() })
	cut := time.Now()
	if _, err := h.ch.Expect(ctx, ibv.CMDisconnected); err != nil {
		t.Fatalf("the client of a session whose target was cut off: %v after %v (rbridge:\n%s)", err, time.Since(cut).Round(time.Millisecond), lastLines(logs.String(), 20))
	}
	t.Logf("the client was disconnected %v after its target was cut off (liveness 2s, then the probe's retries)", time.Since(cut).Round(time.Millisecond))
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), "did not answer a liveness probe"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("rbridge did not say the target did not answer its probe:\n%s", lastLines(logs.String(), 20))
		}
	}
}
