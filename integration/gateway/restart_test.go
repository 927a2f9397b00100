package gateway_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/integration/guest"
)

// TestGuestRunRestarts: `rbridge run` started and stopped 20 times in a
// row while clients on the IB side keep connecting through it: each run
// comes up (its AF_XDP leg's XDP program attached, its routes listening),
// stops on SIGTERM with exit 0, and leaves nothing behind: no XDP program
// on the leg's interface, no QP, CQ, CM id, MR or PD of rbridge's in the
// kernel.
func TestGuestRunRestarts(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	cfg := gatewayConfig("afxdp", ns, ib)
	xdpOn := func() bool {
		out, err := exec.Command("/usr/sbin/ip", "-n", ns.Name, "-d", "link", "show", "dev", ns.Netdev).CombinedOutput()
		if err != nil {
			t.Fatalf("ip link show %s: %v\n%s", ns.Netdev, err, out)
		}
		return strings.Contains(string(out), "prog/xdp")
	}
	if xdpOn() {
		t.Fatalf("an XDP program is on %s before any run", ns.Netdev)
	}

	stop := make(chan struct{})
	var attempts atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // IB-side clients keep dialing the to-roce route
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = exec.CommandContext(ctx, "rping", "-c", "-I", ib.PeerIP.String(), "-a", ib.GatewayIP.String(), "-p", "7174", "-C", "1").Run()
			cancel()
			attempts.Add(1)
		}
	}()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	for i := range 20 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			startRbridge(t, "", path, cfg) // its cleanup stops it, and wants exit 0
			if i == 0 && !xdpOn() {
				t.Errorf("no XDP program on %s while rbridge runs: the check after proves nothing", ns.Netdev)
			}
			time.Sleep(200 * time.Millisecond)
		})
		if t.Failed() {
			break
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d connection attempts during the runs", attempts.Load())
	if xdpOn() {
		t.Errorf("an XDP program is still on %s after the runs", ns.Netdev)
	}
	for _, kind := range []string{"qp", "cq", "cm_id", "mr", "pd"} {
		out, err := exec.Command("rdma", "resource", "show", kind).CombinedOutput()
		if err != nil {
			t.Fatalf("rdma resource show %s: %v\n%s", kind, err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "comm rbridge") {
				t.Errorf("left behind: %s", l)
			}
		}
	}
}
