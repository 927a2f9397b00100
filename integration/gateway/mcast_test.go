package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/integration/guest"
)

// mcastConfig is the guest's gateway with a group each way: the RoCE
// side's (rxe1 and the user0 namespace's wire) to the IB fabric's (rxe2,
// rxe3) and back, the userspace leg on io (udp or afxdp).
func mcastConfig(io string, ns guest.Netns, ib guest.IBFabric) string {
	return fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: %s, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
groups:
  - {name: to-ib, group: 239.192.7.1, roce: roce, ib: ib, direction: roce_to_ib}
  - {name: to-roce, group: 239.192.7.2, roce: roce, ib: ib, direction: ib_to_roce}
  - {name: both, group: 239.192.7.3, roce: roce, ib: ib}
`, ns.Netdev, ns.IP, io, ns.Name, ib.GatewayIP, ib.GatewayDevice)
}

// TestGuestRunMckey: unmodified mckey sends to a group on one fabric and
// unmodified mckey receives it on the other, through rbridge run, both
// ways, with the userspace leg on a UDP socket and on AF_XDP (the
// classifier steering the group's datagrams to the leg's socket, the
// kernel holding the membership); the group's counters in /status are
// what mckey sent, and on AF_XDP so is what the classifier redirected. A
// group relayed both ways, joined in full on both legs, sends what crossed
// to the IB side only there: whatever the gateway hears of its own sends
// is dropped as its own, and nothing comes back to the RoCE side.
func TestGuestRunMckey(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	const count, size = 10, 100
	// The control: without the gateway the fabrics share no multicast,
	// so what mckey sends on the RoCE side never reaches the IB side.
	t.Run("without-gateway", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 12*time.Second)
		defer cancel()
		sout, rout, serr, _ := mckeyPair(ctx, "239.192.7.1", ns.PeerIP.String(), ib.PeerIP.String(), count, size)
		t.Logf("mckey sender:\n%s\nmckey receiver:\n%s", sout, rout)
		if serr != nil {
			t.Fatalf("mckey sender: %v", serr)
		}
		if strings.Contains(rout, "data transfers complete") {
			t.Fatal("mckey's datagrams crossed between the fabrics without the gateway: the test below would prove nothing")
		}
	})
	for _, io := range []string{"udp", "afxdp"} {
		t.Run(io, func(t *testing.T) { runMckey(t, io, ns, ib, count, size) })
	}
}

func runMckey(t *testing.T, io string, ns guest.Netns, ib guest.IBFabric, count, size int) {
	logs := startGateway(t, mcastConfig(io, ns, ib))
	admin := adminAddr(t, logs)
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
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			sout, rout, serr, rerr := mckeyPair(ctx, tc.addr, tc.sender, tc.receiver, count, size)
			t.Logf("mckey sender:\n%s\nmckey receiver:\n%s", sout, rout)
			if serr != nil || rerr != nil || !strings.Contains(rout, "data transfers complete") {
				t.Fatalf("mckey through rbridge: sender %v, receiver %v", serr, rerr)
			}
			var g *bridge.GroupStatus
			st := status(t, admin)
			for i := range st.Groups {
				if st.Groups[i].Name == tc.group {
					g = &st.Groups[i]
				}
			}
			if g == nil {
				t.Fatalf("no group %s in /status: %+v", tc.group, st.Groups)
			}
			var want bridge.UDStatsSnapshot
			want.Datagrams[tc.dir], want.Bytes[tc.dir] = uint64(count), uint64(count*size)
			// What the gateway heard of its own sends (the HCA's or the
			// wire's loopback, if any): dropped, never relayed back.
			want.DropOwn = g.Stats.DropOwn
			t.Logf("group %s: %+v", tc.group, g.Stats)
			if g.Stats != want {
				t.Errorf("group %s's counters %+v, want %+v (mckey sent %d of %d bytes)", tc.group, g.Stats, want, count, size)
			}
			// On AF_XDP the classifier redirected exactly mckey's
			// datagrams to the leg where the RoCE side receives the group.
			switch x := g.RoCESideXDP; {
			case io != "afxdp" || tc.dir != 0:
				if x != nil {
					t.Errorf("group %s: XDP counters %+v on a side that does not receive on AF_XDP", tc.group, *x)
				}
			case x == nil:
				t.Errorf("group %s: no XDP counters for the RoCE side", tc.group)
			case x.Packets != uint64(count):
				t.Errorf("group %s: the classifier redirected %d datagrams, want mckey's %d", tc.group, x.Packets, count)
			default:
				t.Logf("group %s: the classifier redirected %+v", tc.group, *x)
			}
		})
	}
}

// mckeyPair runs an unmodified mckey receiver bound to receiver and, once
// it joined, an mckey sender bound to sender, count datagrams of size
// bytes to group; their outputs and how each ended.
func mckeyPair(ctx context.Context, group, sender, receiver string, count, size int) (sout, rout string, serr, rerr error) {
	args := []string{"-m", group, "-C", fmt.Sprint(count), "-S", fmt.Sprint(size)}
	var rb, sb bytes.Buffer
	r := exec.CommandContext(ctx, "mckey", append([]string{"-b", receiver}, args...)...)
	r.Stdout, r.Stderr = &rb, &rb
	if err := r.Start(); err != nil {
		return "", "", nil, err
	}
	time.Sleep(2 * time.Second) // its join (mckey then waits 3 s itself before it receives)
	s := exec.CommandContext(ctx, "mckey", append([]string{"-s", "-o", "-b", sender}, args...)...)
	s.Stdout, s.Stderr = &sb, &sb
	serr = s.Run()
	rerr = r.Wait()
	return sb.String(), rb.String(), serr, rerr
}

// TestGuestRunMGIDIPoIBOnRoCE: a group in the IPoIB MGID form is joined
// in rdma_cm's IPoIB port space, which the kernel takes on InfiniBand
// ports only. On rxe (a RoCE port) rbridge run refuses to start, saying
// so and what to use, rather than join some other MGID.
func TestGuestRunMGIDIPoIBOnRoCE(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	cfg := fmt.Sprintf(`admin: {listen: "", control: ""}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: udp, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
groups:
  - {name: ipoib-form, group: 239.192.7.9, roce: roce, ib: ib, mgid: ipoib}
`, ns.Netdev, ns.IP, ns.Name, ib.GatewayIP, ib.GatewayDevice)
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, guest.Rbridge(t), "run", "--config", path).CombinedOutput()
	t.Logf("rbridge run:\n%s", out)
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		t.Fatalf("rbridge run with an IPoIB-form group on rxe: %v, want it to exit with an error", err)
	}
	for _, want := range []string{`group "ipoib-form"`, "IPoIB's port space", "mgid ipoib needs an InfiniBand port", "use mgid: rdma_cm"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("rbridge run's error does not say %q", want)
		}
	}
}

// TestGuestRunMckeyBusyPoll: a group with busy_poll relays what
// unmodified mckey sends, every datagram, with /status naming the loop
// busy-polled: from the IB fabric to the RoCE side, its verbs side's
// receive loop polling rxe2's CQ (which has no completion channel) on a
// thread of its own; and from the RoCE side to the IB fabric with the
// userspace leg on AF_XDP, its receive loop polling the group's queue
// that the leg's AF_XDP socket fills (the classifier redirecting exactly
// mckey's datagrams). One loop each: the guest has two CPUs.
func TestGuestRunMckeyBusyPoll(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	for _, tc := range []struct {
		name, io, direction string
		dir                 int // the group's direction in its counters
	}{
		{"verbs", "udp", "ib_to_roce", 1},
		{"afxdp", "afxdp", "roce_to_ib", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := startGateway(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: %s, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
groups:
  - {name: busy, group: 239.192.7.4, roce: roce, ib: ib, direction: %s, busy_poll: true}
`, ns.Netdev, ns.IP, tc.io, ns.Name, ib.GatewayIP, ib.GatewayDevice, tc.direction))
			const count, size = 10, 100
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			sender, receiver := ib.PeerIP.String(), ns.PeerIP.String()
			if tc.dir == 0 {
				sender, receiver = receiver, sender
			}
			sout, rout, serr, rerr := mckeyPair(ctx, "239.192.7.4", sender, receiver, count, size)
			t.Logf("mckey sender:\n%s\nmckey receiver:\n%s", sout, rout)
			if serr != nil || rerr != nil || !strings.Contains(rout, "data transfers complete") {
				t.Fatalf("mckey through rbridge: sender %v, receiver %v", serr, rerr)
			}
			st := status(t, adminAddr(t, logs))
			if len(st.Groups) != 1 {
				t.Fatalf("groups in /status: %+v", st.Groups)
			}
			g := st.Groups[0]
			side := [2]string{g.RoCESide, g.IBSide}[tc.dir] // the side receiving
			t.Logf("group busy: %+v, receiving side %s", g.Stats, side)
			if !strings.Contains(side, "busy-polled") {
				t.Errorf("the receiving side %q: want it busy-polled", side)
			}
			if g.Stats.Datagrams[tc.dir] != count || g.Stats.Bytes[tc.dir] != count*size {
				t.Errorf("group busy's counters %+v: want %d datagrams of %d bytes %s", g.Stats, count, size, tc.direction)
			}
			if tc.io == "afxdp" {
				if x := g.RoCESideXDP; x == nil || x.Packets != count {
					t.Errorf("the classifier's count of the group %+v: want mckey's %d datagrams", x, count)
				}
			}
		})
	}
}

// TestGuestRunJoined: a group no config line names crosses to the IB
// fabric because an application there joined it. Unmodified mckey on rxe3
// joins 239.192.8.1 (rdma_join_multicast on RoCE: the kernel sends the
// IGMP report on rxe3's netdev), rbridge run with a joined_on: ib entry
// hears it on the verbs leg's netdev, joins the group on the RoCE side,
// and relays what unmodified mckey sends there to the IB side, every
// datagram; when the receiver is done and leaves, the gateway stops
// relaying the group and says what it relayed.
func TestGuestRunJoined(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: udp, netns: %s}
  - {name: ib, kind: verbs, ip: %v, device: %s}
groups:
  - {name: feeds, joined_on: ib, roce: roce, ib: ib, within: 239.192.8.0/24}
`, ns.Netdev, ns.IP, ns.Name, ib.GatewayIP, ib.GatewayDevice))
	admin := adminAddr(t, logs)
	const count, size = 10, 100
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sout, rout, serr, rerr := mckeyPair(ctx, "239.192.8.1", ns.PeerIP.String(), ib.PeerIP.String(), count, size)
	t.Logf("mckey sender:\n%s\nmckey receiver:\n%s", sout, rout)
	if serr != nil || rerr != nil || !strings.Contains(rout, "data transfers complete") {
		t.Fatalf("mckey through rbridge: sender %v, receiver %v", serr, rerr)
	}
	found := waitLog(t, logs, `msg="multicast group joined on the members' side: relayed to it"`)
	t.Logf("found: %s", found)
	if !strings.Contains(found, "group=feeds/239.192.8.1") || !strings.Contains(found, "member="+ib.PeerIP.String()) {
		t.Errorf("the gateway found %q; want feeds/239.192.8.1, joined by %v", found, ib.PeerIP)
	}
	gone := waitLog(t, logs, `msg="multicast group gone from the members' side: no longer relayed"`)
	t.Logf("gone: %s", gone)
	if want := fmt.Sprintf("group=feeds/239.192.8.1 why=left datagrams=%d bytes=%d", count, count*size); !strings.Contains(gone, want) {
		t.Errorf("the gateway stopped relaying with %q; want %q", gone, want)
	}
	st := status(t, admin)
	if len(st.Joined) != 1 {
		t.Fatalf("joined in /status: %+v", st.Joined)
	}
	j := st.Joined[0]
	t.Logf("entry feeds: %+v", j)
	if j.Interface != ib.GatewayNetdev || len(j.Groups) != 0 || j.Stats.Joined != 1 || j.Stats.Left != 1 || !j.Querier {
		t.Errorf("entry feeds %+v: want it querier on %s, the group joined once and left", j, ib.GatewayNetdev)
	}
}

// TestGuestRunMckeyTooLong: a datagram longer than the far leg's MTU is
// dropped and counted there, never truncated. The RoCE leg carries 512
// bytes (its mtu key); unmodified mckey sends 800-byte datagrams from the
// IB fabric (rxe3, MTU 1024) to a member on the RoCE side, which gets
// none of them, while the group counts each as too long; then 400-byte
// ones, which cross.
func TestGuestRunMckeyTooLong(t *testing.T) {
	guest.RequireKind(t, "rxe")
	ns, ib := guest.UserNetns(t), guest.IB(t)
	logs := startGateway(t, fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: roce, kind: userspace, interface: %s, ip: %v, io: udp, netns: %s, mtu: 512}
  - {name: ib, kind: verbs, ip: %v, device: %s}
groups:
  - {name: small, group: 239.192.7.6, roce: roce, ib: ib, direction: ib_to_roce}
`, ns.Netdev, ns.IP, ns.Name, ib.GatewayIP, ib.GatewayDevice))
	admin := adminAddr(t, logs)
	group := func() bridge.UDStatsSnapshot {
		for _, g := range status(t, admin).Groups {
			if g.Name == "small" {
				return g.Stats
			}
		}
		t.Fatal("no group small in /status")
		return bridge.UDStatsSnapshot{}
	}
	const count = 5
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	sout, rout, serr, _ := mckeyPair(ctx, "239.192.7.6", ib.PeerIP.String(), ns.PeerIP.String(), count, 800)
	cancel()
	t.Logf("800 bytes: mckey sender:\n%s\nmckey receiver:\n%s", sout, rout)
	if serr != nil {
		t.Fatalf("mckey sender: %v", serr)
	}
	if strings.Contains(rout, "data transfers complete") {
		t.Error("the member on the RoCE side received 800-byte datagrams through a 512-byte leg")
	}
	if st := group(); st.DropTooLong[1] != count || st.Datagrams[1] != 0 {
		t.Errorf("after %d datagrams of 800 bytes: too long %d, relayed %d; want %d and 0 (%+v)", count, st.DropTooLong[1], st.Datagrams[1], count, st)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sout, rout, serr, rerr := mckeyPair(ctx, "239.192.7.6", ib.PeerIP.String(), ns.PeerIP.String(), count, 400)
	t.Logf("400 bytes: mckey sender:\n%s\nmckey receiver:\n%s", sout, rout)
	if serr != nil || rerr != nil || !strings.Contains(rout, "data transfers complete") {
		t.Fatalf("400-byte datagrams through the 512-byte leg: sender %v, receiver %v", serr, rerr)
	}
	if st := group(); st.Datagrams[1] != count || st.Bytes[1] != count*400 || st.DropTooLong[1] != count {
		t.Errorf("after %d more of 400 bytes: relayed %d (%d bytes), too long %d; want %d (%d), %d", count, st.Datagrams[1], st.Bytes[1], st.DropTooLong[1], count, count*400, count)
	}
}
