//go:build linux

package bridge_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/roce/transport"
)

// fabric is a network namespace of its own whose loopback is one wire: a
// simulated fabric that what is sent on another does not reach.
func fabric(t *testing.T, tag string) string {
	t.Helper()
	if guest.InGuest() {
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these loopback gateways run on the host")
	}
	needs.Root(t, "network namespaces, one per simulated fabric")
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	name := fmt.Sprintf("rbl%d%s", os.Getpid()%100000, tag)
	for _, args := range [][]string{{"netns", "add", name}, {"-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		if args[0] == "netns" {
			t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
		}
	}
	return name
}

// loopGateway is a gateway relaying group both ways between loopback in
// namespace x (its roce leg, at ipX) and in namespace y (ipY), with peers
// in the group's peers.
func loopGateway(t *testing.T, x, y, ipX, ipY string, group netip.Addr, peers []string) *bridge.Gateway {
	t.Helper()
	yml := fmt.Sprintf(`legs:
  - {name: x, kind: userspace, interface: lo, netns: %s, ip: %s, io: udp}
  - {name: y, kind: userspace, interface: lo, netns: %s, ip: %s, io: udp}
groups:
  - {name: ticks, group: %v, roce: x, ib: y, direction: both, peers: [%s]}
`, x, ipX, y, ipY, group, strings.Join(peers, ", "))
	c, err := config.Parse("gw.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	return startGatewayWith(t, c, bridge.GatewayOptions{})
}

// collect counts the datagrams reaching cq by source, reposting each
// receive, until nothing came for quiet or until deadline (a storm never
// goes quiet); payloads must be one of want's.
func collect(t *testing.T, a *cmApp, cq *transport.CQ, qp *transport.QP, want map[string]bool, quiet time.Duration, deadline time.Time) map[netip.Addr]int {
	t.Helper()
	got := map[netip.Addr]int{}
	var wcs [16]transport.WC
	last := time.Now()
	for time.Since(last) < quiet && time.Now().Before(deadline) {
		n := cq.Poll(wcs[:])
		if n == 0 {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		last = time.Now()
		for _, wc := range wcs[:n] {
			if p := string(a.mem[4096*int(wc.ID):][:wc.ByteLen]); wc.Status != transport.StatusSuccess || !want[p] {
				t.Errorf("datagram %+v: payload %q, not one that was sent", wc, p)
			}
			got[wc.Src.Addr()]++
			if err := qp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: a.mr, Offset: 4096 * int(wc.ID), Length: 4096}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return got
}

// TestGatewayGroupTwoGateways: the looped topology. Two gateways, A and B,
// each relay the group both ways between fabric X and fabric Y (a network
// namespace each). A member on X sends n datagrams. Each gateway relays
// each datagram once, and a second after the last the counters have
// stopped: no storm.
//
// Without peers (automatic loop prevention) each gateway drops the other's
// copies as loops; usually the member's datagram reaches both before
// either's copy does, so members on Y get one copy from each gateway and
// members on X only the sender's (the wire's loopback). When a gateway
// hears the other's copy on Y before the original on X (its goroutine for
// X was late), it relays that copy to X instead and drops the original:
// then members on Y get one copy fewer and members on X one more, the same
// two copies in all. The test checks that sum and that what each member
// got matches each gateway's counters, whichever way each datagram went.
// With peers (each lists the other's addresses) the other's copies are
// never relayed: exactly 2n on Y and nothing back on X, in every order.
//
// Without the groups' loop filter (DropLoop) the automatic case fails: B's
// copy on Y has B's source, not A's, so A relays it back to X, where B
// hears A's copy and relays it to Y again, and so on; the counters never
// stop moving and members on both fabrics get copies without end.
func TestGatewayGroupTwoGateways(t *testing.T) {
	for _, peers := range []bool{false, true} {
		t.Run(fmt.Sprintf("peers=%v", peers), func(t *testing.T) {
			tag := map[bool]string{false: "a", true: "p"}[peers]
			x, y := fabric(t, "x"+tag), fabric(t, "y"+tag)
			group := netip.MustParseAddr("239.1.2.3") // the fabrics are this test's own
			ipAx, ipAy, ipBx, ipBy := "127.0.0.11", "127.0.0.12", "127.0.0.21", "127.0.0.22"
			var peersA, peersB []string
			if peers {
				peersA, peersB = []string{ipBx, ipBy}, []string{ipAx, ipAy}
			}
			ga := loopGateway(t, x, y, ipAx, ipAy, group, peersA)
			gb := loopGateway(t, x, y, ipBx, ipBy, group, peersB)

			sender := newCMAppIn(t, x, "lo", "127.0.0.3", nil)
			onX := newCMAppIn(t, x, "lo", "127.0.0.4", nil)
			onY := newCMAppIn(t, y, "lo", "127.0.0.5", nil)
			xqp, xcq := onX.joinGroup(t, group, "lo", 64)
			yqp, ycq := onY.joinGroup(t, group, "lo", 64)
			sqp, _ := sender.udQP(t, 1)

			const n = 20
			sent := map[string]bool{}
			var bytes uint64
			for i := range n {
				p := fmt.Sprintf("tick %d", i)
				sent[p], bytes = true, bytes+uint64(len(p))
				sender.sendUDTo(t, sqp, group, transport.MulticastQPN, []byte(p))
				time.Sleep(2 * time.Millisecond) // within the members' 64 receives
			}
			deadline := time.Now().Add(3 * time.Second)
			gotY := collect(t, onY, ycq, yqp, sent, 300*time.Millisecond, deadline)
			gotX := collect(t, onX, xcq, xqp, sent, 100*time.Millisecond, deadline)

			total := func() (sum uint64) {
				for _, g := range []*bridge.Gateway{ga, gb} {
					s := g.GroupStats("ticks")
					for d := range 2 {
						sum += s.Datagrams[d] + s.DropOwn[d] + s.DropLoop[d] + s.DropPeer[d] + s.DropNoReceive[d] + s.DropPoolEmpty[d] + s.DropSendFailed[d]
					}
				}
				return sum
			}
			before := total()
			time.Sleep(time.Second)
			if after := total(); after != before {
				t.Fatalf("the gateways' group counters moved from %d to %d in the second after the last datagram: a storm", before, after)
			}

			// What each member got, by source, from what each gateway
			// counted: A's and B's copies to Y, and back to X.
			sa, sb := *ga.GroupStats("ticks"), *gb.GroupStats("ticks")
			wantY := map[netip.Addr]int{netip.MustParseAddr(ipAy): int(sa.Datagrams[0]), netip.MustParseAddr(ipBy): int(sb.Datagrams[0])}
			wantX := map[netip.Addr]int{sender.ip: n}
			for ip, c := range map[string]uint64{ipAx: sa.Datagrams[1], ipBx: sb.Datagrams[1]} {
				if c > 0 {
					wantX[netip.MustParseAddr(ip)] = int(c)
				}
			}
			back := sa.Datagrams[1] + sb.Datagrams[1]
			t.Logf("copies relayed back to X (a gateway heard the other's copy first): %d of %d", back, 2*n)
			if peers && back != 0 {
				t.Errorf("%d copies relayed back to X with peers listed", back)
			}
			if d := cmp.Diff(wantY, gotY); d != "" {
				t.Errorf("the member on Y got, by source (-want +got):\n%s", d)
			}
			if d := cmp.Diff(wantX, gotX); d != "" {
				t.Errorf("the member on X got, by source (-want +got):\n%s", d)
			}
			if sum := sa.Datagrams[0] + sb.Datagrams[0] + back; sum != 2*n {
				t.Errorf("the gateways relayed %d copies, want %d: one each per datagram", sum, 2*n)
			}
			for name, s := range map[string]bridge.UDStatsSnapshot{"A": sa, "B": sb} {
				// Each gateway relays a datagram once, hears its own send
				// once, and drops the other's copy once (DropPeer with
				// peers, where that copy is on Y).
				got := [5]uint64{s.Datagrams[0] + s.Datagrams[1], s.Bytes[0] + s.Bytes[1], s.DropOwn[0] + s.DropOwn[1], s.DropLoop[0] + s.DropLoop[1], s.DropPeer[1]}
				want := [5]uint64{n, bytes, n, n, 0}
				if peers {
					want[3], want[4] = 0, n
				}
				if got != want {
					t.Errorf("gateway %s: relayed, bytes, own, loop and peer drops %v, want %v (%+v)", name, got, want, s)
				}
			}
			m, _ := scrape(t, startAdmin(t, ga))
			cause := map[bool]string{false: "loop", true: "peer"}[peers]
			var v float64
			for _, dir := range []string{"roce_to_ib", "ib_to_roce"} {
				v += m[`rbridge_group_dropped_total{cause="`+cause+`",direction="`+dir+`",group="ticks"}`]
			}
			if v != n {
				t.Errorf("gateway A's %s drops on /metrics: %v, want %d", cause, v, n)
			}
		})
	}
}
