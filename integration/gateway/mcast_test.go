package gateway_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/integration/guest"
)

// mcastConfig is the guest's gateway with a group each way: the RoCE
// side's (rxe1 and the user0 namespace's wire) to the IB fabric's (rxe2,
// rxe3) and back.
func mcastConfig(ns guest.Netns, ib guest.IBFabric) string {
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: udp, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
groups:
  - {name: to-ib, group: 239.192.7.1, roce: roce, ib: ib, direction: roce_to_ib}
  - {name: to-roce, group: 239.192.7.2, roce: roce, ib: ib, direction: ib_to_roce}
  - {name: both, group: 239.192.7.3, roce: roce, ib: ib}
`, ns.Netdev, ns.IP, ns.Name, ib.GatewayIP, ib.GatewayDevice)
}

// TestGuestRunMckey: unmodified mckey sends to a group on one fabric and
// unmodified mckey receives it on the other, through rbridge run, both
// ways; the group's counters in /status are what mckey sent. A group
// relayed both ways, joined in full on both legs, sends what crossed to
// the IB side only there: whatever the gateway hears of its own sends is
// dropped as its own, and nothing comes back to the RoCE side.
func TestGuestRunMckey(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, mcastConfig(ns, ib))
	admin := adminAddr(t, logs)
	const count, size = 10, 100
	for _, tc := range []struct {
		group, addr      string
		sender, receiver string // the bind addresses
		dir              int    // the group's direction in its counters
	}{
		{"to-ib", "239.192.7.1", ns.PeerIP.String(), ib.PeerIP.String(), 0},
		{"to-roce", "239.192.7.2", ib.PeerIP.String(), ns.PeerIP.String(), 1},
		{"both", "239.192.7.3", ns.PeerIP.String(), ib.PeerIP.String(), 0},
	} {
		t.Run(tc.group, func(t *testing.T) {
			g := runMckey(t, admin, tc.group, tc.addr, tc.sender, tc.receiver, count, size)
			var want bridge.UDStatsSnapshot
			want.Datagrams[tc.dir], want.Bytes[tc.dir] = count, count*size
			// What the gateway heard of its own sends (the HCA's or the
			// wire's loopback, if any): dropped, never relayed back.
			want.DropOwn = g.Stats.DropOwn
			t.Logf("group %s: %+v", tc.group, g.Stats)
			if g.Stats != want {
				t.Errorf("group %s's counters %+v, want %+v (mckey sent %d of %d bytes)", tc.group, g.Stats, want, count, size)
			}
		})
	}
}

// runMckey runs unmodified mckey receiving count datagrams of size bytes
// on the group at addr bound to receiver, and mckey sending them from
// sender, and returns the gateway's group in /status afterwards.
func runMckey(t *testing.T, admin, group, addr, sender, receiver string, count, size int) *bridge.GroupStatus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := []string{"-m", addr, "-C", fmt.Sprint(count), "-S", fmt.Sprint(size)}
	var rout, sout bytes.Buffer
	r := exec.CommandContext(ctx, "mckey", append([]string{"-b", receiver}, args...)...)
	r.Stdout, r.Stderr = &rout, &rout
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // its join (mckey then waits 3 s itself before it receives)
	s := exec.CommandContext(ctx, "mckey", append([]string{"-s", "-o", "-b", sender}, args...)...)
	s.Stdout, s.Stderr = &sout, &sout
	serr := s.Run()
	rerr := r.Wait()
	t.Logf("mckey sender:\n%s\nmckey receiver:\n%s", sout.String(), rout.String())
	if serr != nil || rerr != nil || !strings.Contains(rout.String(), "data transfers complete") {
		t.Fatalf("mckey through rbridge: sender %v, receiver %v", serr, rerr)
	}
	st := status(t, admin)
	for i := range st.Groups {
		if st.Groups[i].Name == group {
			return &st.Groups[i]
		}
	}
	t.Fatalf("no group %s in /status: %+v", group, st.Groups)
	return nil
}

// TestGuestRunMckeyBusyPoll: a group with busy_poll relays from the IB
// fabric (its verbs side's receive loop polling rxe2's CQ, which has no
// completion channel, on a thread of its own) to the RoCE side what
// unmodified mckey sends, every datagram; /status names the loop
// busy-polled. One loop: the guest has two CPUs.
func TestGuestRunMckeyBusyPoll(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0"}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: udp, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
groups:
  - {name: busy, group: 239.192.7.4, roce: roce, ib: ib, direction: ib_to_roce, busy_poll: true}
`, ns.Netdev, ns.IP, ns.Name, ib.GatewayIP, ib.GatewayDevice))
	const count, size = 10, 100
	g := runMckey(t, adminAddr(t, logs), "busy", "239.192.7.4", ib.PeerIP.String(), ns.PeerIP.String(), count, size)
	t.Logf("group busy: %+v, IB side %s", g.Stats, g.IBSide)
	if !strings.Contains(g.IBSide, "busy-polled") {
		t.Errorf("the IB side %q: want it busy-polled", g.IBSide)
	}
	if g.Stats.Datagrams[1] != count || g.Stats.Bytes[1] != count*size {
		t.Errorf("group busy's counters %+v: want %d datagrams of %d bytes to the RoCE side", g.Stats, count, size)
	}
}
