//go:build linux

package bridge_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// TestGatewayJoined: a joined_on entry finds the groups a member joins on
// its side and relays them to it. The members' side is a veth into a
// namespace of its own, where a member on kernel sockets joins groups
// (IP_ADD_MEMBERSHIP: its kernel sends the IGMP reports, of the version
// the interface is forced to); the other side is loopback, where a sender
// sends to the groups. The group the member joins first within the prefix
// is found, joined on loopback and relayed to the member; a second one is
// over max_groups and one outside the prefix is not taken, both counted;
// when the member leaves, the gateway stops relaying and leaves the group
// on loopback; when it joins again, the group is found again.
func TestGatewayJoined(t *testing.T) {
	for _, version := range []int{3, 2} {
		t.Run(fmt.Sprintf("IGMPv%d", version), func(t *testing.T) { testGatewayJoined(t, version) })
	}
}

func testGatewayJoined(t *testing.T, version int) {
	if guest.InGuest() {
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these gateways run on the host")
	}
	needs.Root(t, "network namespaces, AF_PACKET sockets")
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	tag := fmt.Sprintf("%d%d", os.Getpid()%100000, version)
	gwNS, peerNS := "rbj"+tag+"gw", "rbj"+tag+"pe"
	gwIf, peerIf := "rbj"+tag+"g", "rbj"+tag+"p"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{gwNS, peerNS} {
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ip("-n", gwNS, "link", "add", gwIf, "type", "veth", "peer", "name", peerIf, "netns", peerNS)
	for _, s := range []struct{ ns, ifc, addr string }{{gwNS, gwIf, "10.97.0.1/24"}, {peerNS, peerIf, "10.97.0.2/24"}} {
		ip("-n", s.ns, "addr", "add", s.addr, "dev", s.ifc)
		ip("-n", s.ns, "link", "set", s.ifc, "up")
		ip("-n", s.ns, "link", "set", "lo", "up")
	}
	if err := netns.Do(peerNS, func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/"+peerIf+"/force_igmp_version", []byte(fmt.Sprint(version)), 0)
	}); err != nil {
		t.Fatalf("IGMPv%d on %s: %v", version, peerIf, err)
	}

	// The groups: taken, over max_groups (1), outside within.
	taken := mcastGroup
	over := taken.Next()
	a := mcastGroup.As4()
	outside := netip.AddrFrom4([4]byte{238, a[1], a[2], a[3]})
	y := strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: ib, kind: userspace, interface: GWIF, ip: 10.97.0.1, io: udp, netns: GWNS}
  - {name: roce, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
groups:
  - {name: feeds, joined_on: ib, roce: roce, ib: ib, within: 239.0.0.0/8, max_groups: 1}
`)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, cfg, bridge.GatewayOptions{})

	// The member in the peer namespace: a device on a unicast socket
	// there, each group's socket joined on the veth.
	peerIP := netip.MustParseAddr("10.97.0.2")
	var uc *udpconn.Conn
	if err := netns.Do(peerNS, func() error {
		uc, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(peerIP, roce.Port)})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	member := &cmApp{ip: peerIP, pd: transport.NewPD(), mem: make([]byte, 1<<20), cq: transport.NewCQ(1024)}
	if member.dev, err = transport.NewDevice(uc, transport.DeviceOptions{Logger: testlog.New(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { member.dev.Close() })
	if member.mr, err = member.pd.RegisterMR(member.mem, transport.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	mqp, mcq := member.udQP(t, 64)
	join := func(group netip.Addr) {
		t.Helper()
		if err := member.dev.AttachMulticast(mqp, group, func() (roce.PacketConn, error) {
			var c *udpconn.Conn
			err := netns.Do(peerNS, func() error {
				ifi, err := net.InterfaceByName(peerIf)
				if err == nil {
					c, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(group, roce.Port), Interface: ifi.Index})
				}
				return err
			})
			if err != nil {
				return nil, err
			}
			return c, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// found waits until the entry relays exactly want (or fails at the
	// deadline).
	found := func(want []string, within time.Duration, what string) bridge.JoinedStatus {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			st := g.Status()
			if len(st.Joined) != 1 {
				t.Fatalf("status joined %+v: want the one entry", st.Joined)
			}
			if slices.Equal(st.Joined[0].Groups, want) {
				return st.Joined[0]
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after %v the entry relays %v, want %v (stats %+v)", what, within, st.Joined[0].Groups, want, st.Joined[0].Stats)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	sender := newCMApp(t, lo("3"))
	sqp, _ := sender.udQP(t, 1)
	gwIB := netip.MustParseAddr("10.97.0.1")
	const n = 6
	relayed := func(group netip.Addr, payload []byte, want int) {
		t.Helper()
		for range n {
			sender.sendUDTo(t, sqp, group, transport.MulticastQPN, payload)
		}
		got, wantFrom := drain(t, member, mcq, mqp, payload), map[netip.Addr]int{}
		if want > 0 {
			wantFrom[gwIB] = want
		}
		if d := cmp.Diff(wantFrom, got); d != "" {
			t.Errorf("the member got, by source (-want +got):\n%s", d)
		}
	}

	found([]string{}, 0, "before any join")
	join(taken)
	js := found([]string{taken.String()}, 5*time.Second, "the member joined "+taken.String())
	if !js.Querier || js.Leg != "ib" || js.Interface != gwIf || js.Within != "239.0.0.0/8" {
		t.Errorf("entry status %+v: want the querier on leg ib's %s, within 239.0.0.0/8", js, gwIf)
	}
	if !joinedOn(t, "", "lo", taken) {
		t.Errorf("the gateway relays %v but has not joined it on loopback (/proc/net/igmp)", taken)
	}
	relayed(taken, []byte("to the members' side"), n)
	name := "feeds/" + taken.String()
	st := g.GroupStats(name)
	if st == nil {
		t.Fatalf("no stats for group %s", name)
	}
	if want := (bridge.UDStatsSnapshot{Datagrams: [2]uint64{n, 0}, Bytes: [2]uint64{n * uint64(len("to the members' side")), 0}}); *st != want {
		t.Errorf("group %s stats %+v, want %+v", name, *st, want)
	}
	if gs := g.Status().Groups; len(gs) != 1 || gs[0].Name != name || gs[0].FoundBy != "feeds" || gs[0].Direction != config.DirectionRoCEToIB {
		t.Errorf("status groups %+v: want %s, found by feeds, roce_to_ib", gs, name)
	}

	join(over)
	join(outside)
	waitFor(t, 5*time.Second, "the reports of the groups not taken", func() bool {
		s := g.JoinedStats("feeds")
		return s.OverMax > 0 && s.Outside > 0
	})
	found([]string{taken.String()}, 0, "groups over max_groups and outside within")
	for _, a := range []netip.Addr{over, outside} {
		if joinedOn(t, "", "lo", a) {
			t.Errorf("the gateway joined %v on loopback: it is not taken", a)
		}
	}

	// The member leaves: the gateway queries the group, hears no answer,
	// and leaves it within the last member query time (2 s).
	left := time.Now()
	if err := member.dev.DetachMulticast(mqp, taken); err != nil {
		t.Fatal(err)
	}
	found([]string{}, 5*time.Second, "the member left "+taken.String())
	t.Logf("IGMPv%d: the gateway stopped relaying %v %v after the member left", version, taken, time.Since(left).Round(10*time.Millisecond))
	if joinedOn(t, "", "lo", taken) {
		t.Errorf("the member left %v, the gateway relays it no more, and still has it joined on loopback", taken)
	}
	if g.GroupStats(name) != nil {
		t.Errorf("group %s still has stats after it was left", name)
	}
	s := g.JoinedStats("feeds")
	if s.Joined != 1 || s.Left != 1 || s.Expired != 0 || s.QueriesSent < 2 || s.Heard < 3 || s.Malformed != 0 || s.JoinFailed != 0 {
		t.Errorf("entry stats %+v: want 1 joined, 1 left, our queries, the member's reports", *s)
	}

	// With the slot free, the group over max_groups is taken at its next
	// report: the member joins it again.
	if err := member.dev.DetachMulticast(mqp, over); err != nil {
		t.Fatal(err)
	}
	join(over)
	found([]string{over.String()}, 5*time.Second, "the member joined "+over.String()+" again, a slot free")
	relayed(over, []byte("now this one"), n)
	if s := g.JoinedStats("feeds"); s.Joined != 2 {
		t.Errorf("entry stats %+v: want 2 joined", *s)
	}
	// A reload that changes the entry's rate puts it on the group found
	// and on those found later; any other change to the entry is refused.
	cfg2, err := config.Parse("gw.yaml", []byte(strings.Replace(y, "max_groups: 1}", "max_groups: 1, rate: {packets: 100}}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Reload(cfg2)
	if err != nil || !slices.Equal(res.RateChanged, []string{"feeds"}) {
		t.Errorf("reload with a rate: %+v, %v; want the rate of feeds changed", res, err)
	}
	if gs := g.Status().Groups; len(gs) != 1 || gs[0].Rate == nil || gs[0].Rate.Packets != 100 {
		t.Errorf("status groups after the reload %+v: want feeds/%v at 100 datagrams a second", gs, over)
	}
	cfg3, err := config.Parse("gw.yaml", []byte(strings.Replace(y, "max_groups: 1}", "max_groups: 2}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Reload(cfg3); err == nil {
		t.Error("a reload that changes max_groups was applied; want it refused")
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(bridge.NewCollector(g)); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Errorf("pedantic gather: %v", err)
	}
	m, _ := scrape(t, startAdmin(t, g))
	for k, v := range map[string]float64{
		`rbridge_joined_groups_relayed{group="feeds"}`:                                              1,
		`rbridge_joined_group_events_total{event="joined",group="feeds"}`:                           2,
		`rbridge_joined_group_events_total{event="left",group="feeds"}`:                             1,
		fmt.Sprintf(`rbridge_group_datagrams_total{direction="roce_to_ib",group="feeds/%s"}`, over): n,
		`rbridge_joined_igmp_messages_total{group="feeds",kind="malformed"}`:                        0,
	} {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
}

// joinedOn reports whether the kernel of network namespace ns has group
// joined on interface ifname (igmp in the reading thread's /proc net:
// /proc/net is the main thread's, which a namespace may have kept).
func joinedOn(t *testing.T, ns, ifname string, group netip.Addr) bool {
	t.Helper()
	var b []byte
	if err := netns.Do(ns, func() error {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var err error
		b, err = os.ReadFile("/proc/thread-self/net/igmp")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	a := group.As4()
	hex := fmt.Sprintf("%02X%02X%02X%02X", a[3], a[2], a[1], a[0]) // the address as a little-endian word
	dev := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case !strings.HasPrefix(line, "\t"): // "1	lo        :     1      V3": a device
			if len(f) >= 2 {
				dev = f[1]
			}
		case dev == ifname && f[0] == hex: // "				010000E0     1 0:00000000		0": a group
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing after within.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
