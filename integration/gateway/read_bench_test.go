package gateway_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/rbridge/rbridge/integration/guest"
)

// BenchmarkGuestReadThroughVsDirect: unmodified ib_read_bw -R at 1 MiB
// (READs of 16 pool buffers each, crossing in parts) in one run: through
// `rbridge run` from the RoCE side (rxe1) to a server on the IB fabric
// (rxe3), over the userspace leg's UDP socket and over AF_XDP; and direct
// on the IB fabric (rxe2 to rxe3: the through path's second hop alone).
// An op is one ib_read_bw run of readIters READs; each row reports
// perftest's average MB/s, and the through rows x-direct, their rate over
// the direct row's. It runs only when asked: make integration
// PKG=./integration/gateway RUN='^$' GUEST_BENCH=GuestReadThroughVsDirect
// BASELINE=false.
func BenchmarkGuestReadThroughVsDirect(b *testing.B) {
	guest.RequireKind(b, "rxe")
	ns, ib := guest.UserNetns(b), guest.IB(b)
	const size, readIters = 1 << 20, 20
	args := []string{"-s", fmt.Sprint(size), "-n", fmt.Sprint(readIters)}
	direct := directRates{}
	b.Run("direct-ib", func(b *testing.B) {
		server := []string{"-R", "-d", ib.PeerDevice, "-p", "18600"}
		client := []string{"-R", "-d", ib.GatewayDevice, "--source_ip", ib.GatewayIP.String(), "-p", "18600", ib.PeerIP.String()}
		direct.add("ib", perftestRounds(b, "ib_read_bw", server, client, args, size, readIters, nil))
	})
	for _, io := range []string{"udp", "afxdp"} {
		b.Run("through-"+io, func(b *testing.B) {
			startRbridge(b, "", filepath.Join(b.TempDir(), "gateway.yaml"), gatewayConfig(io, ns, ib), "--log-level", "info")
			server := []string{"-R", "-d", ib.PeerDevice, "-p", "18515"}
			client := []string{"-R", "-d", ns.PeerDevice, "-p", "18515", ns.IP.String()}
			mb := perftestRounds(b, "ib_read_bw", server, client, args, size, readIters, nil)
			if d := direct.median("ib"); d > 0 {
				b.ReportMetric(mb/d, "x-direct")
			}
		})
	}
}
