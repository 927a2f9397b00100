package gateway_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/integration/guest"
)

// udaddy (rdmacm-utils) serves and resolves rdma_cm's UDP port space on
// port 7174, fixed in udaddy: the client resolves the server (SIDR), sends
// -C datagrams of -S bytes with its QPN as immediate data, and waits for
// as many replies; the server answers each datagram's sender at the QPN
// in its immediate data. Both exit 0 when every datagram arrived.
const udaddyPort = 7174

// udConfig is the guest's gateway with a UD route each way on udaddy's
// port.
func udConfig(io string, ns guest.Netns, ib guest.IBFabric) string {
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: %s, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
routes:
  - name: ud-to-ib                  # udaddy clients on the RoCE side reach a server on the IB side
    ud: true
    listen: {leg: roce, addr: "%v:%d"}
    target: {leg: ib, addr: "%v:%d"}
  - name: ud-to-roce                # and the reverse
    ud: true
    listen: {leg: ib, addr: "%v:%d"}
    target: {leg: roce, addr: "%v:%d"}
`, ns.Netdev, ns.IP, io, ns.Name, ib.GatewayIP, ib.GatewayDevice,
		ns.IP, udaddyPort, ib.PeerIP, udaddyPort, ib.GatewayIP, udaddyPort, ns.PeerIP, udaddyPort)
}

// TestGuestRunUdaddy: unmodified udaddy through rbridge run, both ways,
// with the userspace leg on a UDP socket and on AF_XDP: the client
// resolves the gateway's listen address, the gateway resolves the server
// on the other fabric first, and the client's datagrams and the server's
// replies cross; /status counts exactly what udaddy sent each way, with
// nothing dropped.
func TestGuestRunUdaddy(t *testing.T) {
	guest.RequireKind(t, "rxe")
	for _, io := range []string{"udp", "afxdp"} {
		t.Run(io, func(t *testing.T) { runUdaddy(t, io) })
	}
}

func runUdaddy(t *testing.T, io string) {
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, udConfig(io, ns, ib))
	admin := adminAddr(t, logs)
	const count, size = 10, 200
	for _, tc := range []struct {
		route          string
		server, client []string
	}{
		{"ud-to-ib", []string{"-b", ib.PeerIP.String()}, []string{"-b", ns.PeerIP.String(), "-s", ns.IP.String()}},
		{"ud-to-roce", []string{"-b", ns.PeerIP.String()}, []string{"-b", ib.PeerIP.String(), "-s", ib.GatewayIP.String()}},
	} {
		t.Run(tc.route, func(t *testing.T) {
			args := []string{"-C", fmt.Sprint(count), "-S", fmt.Sprint(size)}
			out := udaddyPair(t, append(tc.server, args...), append(tc.client, args...))
			t.Logf("udaddy through rbridge:\n%s", out)
			var r *bridge.RouteStatus
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				st := status(t, admin)
				for i := range st.Routes {
					if st.Routes[i].Name == tc.route {
						r = &st.Routes[i]
					}
				}
				if r == nil || r.UD == nil {
					t.Fatalf("route %s has no UD status: %+v", tc.route, st.Routes)
				}
				if r.UD.Stats.Datagrams == [2]uint64{count, count} || time.Now().After(deadline) {
					break
				}
			}
			s := r.UD.Stats
			want := bridge.UDStatsSnapshot{Resolved: 1, Datagrams: [2]uint64{count, count}, Bytes: [2]uint64{count * size, count * size},
				ImmQPNRewritten: [2]uint64{count, count}}
			if s != want {
				t.Errorf("route %s's UD counters %+v, want %+v (udaddy sent %d of %d bytes each way, nothing dropped)", tc.route, s, want, count, size)
			}
			if r.UD.Clients != 1 {
				t.Errorf("route %s: %d UD clients, want udaddy's one", tc.route, r.UD.Clients)
			}
		})
	}
}

// udaddyPair runs the udaddy server, waits for it to listen, then the
// client; both must exit 0 within a minute.
func udaddyPair(t testing.TB, server, client []string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var sout, cout syncBuffer
	s := exec.CommandContext(ctx, "udaddy", server...)
	s.Stdout, s.Stderr = &sout, &sout
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	waitListen(t, "udaddy")
	c := exec.CommandContext(ctx, "udaddy", client...)
	c.Stdout, c.Stderr = &cout, &cout
	cerr := c.Run()
	serr := s.Wait()
	if cerr != nil || serr != nil || !strings.Contains(cout.String(), "data transfers complete") || !strings.Contains(sout.String(), "data transfers complete") {
		t.Fatalf("udaddy %v through rbridge: client %v, server %v\nclient:\n%s\nserver:\n%s", client, cerr, serr, cout.String(), sout.String())
	}
	return "client:\n" + cout.String() + "server:\n" + sout.String()
}
