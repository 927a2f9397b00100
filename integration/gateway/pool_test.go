package gateway_test

import (
	"strings"
	"testing"

	"github.com/rbridge/rbridge/integration/guest"
)

// TestGuestRunSmallPool: a gateway with the smallest pool (pool.size
// 16MiB: 85 buffers of 64 KiB, half of which the UDP leg's GRO may hold)
// under the kernel's requesters keeping more in flight than that: 128
// WRITEs of 64 KiB at once, and SENDs as long. The pool runs out, and
// every operation still completes: a WRITE's packet that finds it empty
// is held and asked for again once a buffer frees, a SEND's first packet
// gets an RNR NAK. Nothing fails and no connection is lost.
func TestGuestRunSmallPool(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, gatewayConfig("udp", ns, ib)+"pool: {size: 16MiB}\n")
	retries := retryCounts()
	for _, tc := range []struct {
		tool string
		args []string
	}{
		{"ib_write_bw", []string{"-s", "65536", "-n", "600", "-t", "128"}},
		{"ib_send_bw", []string{"-s", "65536", "-n", "300", "-t", "128"}},
	} {
		t.Run(tc.tool, func(t *testing.T) {
			server := append([]string{"-R", "-d", ib.PeerDevice, "-p", "18515"}, tc.args...)
			client := append(append([]string{"-R", "-d", ns.PeerDevice, "-p", "18515"}, tc.args...), ns.IP.String())
			out := pair(t, tc.tool, server, client)
			t.Logf("%s through a gateway with a 16 MiB pool:\n%s", tc.tool, lastLines(out, 4))
		})
	}
	m, raw := scrape(t, adminAddr(t, logs))
	guest.Artifact(t, "metrics-small-pool.prom", raw)
	var exhausted float64
	for k, v := range m {
		if strings.HasPrefix(k, "rbridge_pool_exhausted_total{") {
			exhausted += v
		}
	}
	if exhausted == 0 {
		t.Error("the pool was never found empty: the test proved nothing of a small pool")
	}
	t.Logf("the pool found empty %v times; requester retries since the start (rxe completer_retry_err): %s", exhausted, retriesSince(retries))
	waitSessionsEnded(t, logs)
}
