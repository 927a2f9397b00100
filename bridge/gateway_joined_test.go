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
	gwNS, peerNS, gwIf, peerIf := vethNamespaces(t, "network namespaces, AF_PACKET sockets", fmt.Sprintf("rbj%d", version), "10.97.0.1/24", "10.97.0.2/24")
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
	// The group's relay ends first, then its socket closes and the kernel
	// leaves the group: a moment apart.
	waitFor(t, 5*time.Second, "the gateway leaving "+taken.String()+" on loopback once the member left", func() bool {
		return !joinedOn(t, "", "lo", taken)
	})
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

// TestGatewayJoinedIPv6: the same over IPv6, found by MLD (v2, and v1
// forced): the gateway's two legs on two veths into two namespaces, a
// member in one joining an ff05:: group (its kernel sends the MLD
// report), a sender in the other; what the sender sends reaches the
// member through the gateway until the member leaves.
func TestGatewayJoinedIPv6(t *testing.T) {
	for _, version := range []int{2, 1} {
		t.Run(fmt.Sprintf("MLDv%d", version), func(t *testing.T) { testGatewayJoinedIPv6(t, version) })
	}
}

func testGatewayJoinedIPv6(t *testing.T, version int) {
	if guest.InGuest() {
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these gateways run on the host")
	}
	needs.Root(t, "network namespaces, AF_PACKET sockets")
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	tag := fmt.Sprintf("%d%d", os.Getpid()%100000, version)
	gwNS, peerNS, sendNS := "rbk"+tag+"gw", "rbk"+tag+"pe", "rbk"+tag+"se"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	sysctl := func(ns, path, v string) {
		t.Helper()
		if err := netns.Do(ns, func() error { return os.WriteFile("/proc/sys/net/"+path, []byte(v), 0) }); err != nil {
			t.Fatal(err)
		}
	}
	for _, ns := range []string{gwNS, peerNS, sendNS} {
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	// gw's m end to the member, s end to the sender.
	links := []struct{ ns, ifc, addr string }{
		{gwNS, "rbk" + tag + "m", "fd02::1/64"}, {peerNS, "rbk" + tag + "p", "fd02::2/64"},
		{gwNS, "rbk" + tag + "s", "fd03::1/64"}, {sendNS, "rbk" + tag + "t", "fd03::2/64"},
	}
	for i := 0; i < len(links); i += 2 {
		ip("-n", gwNS, "link", "add", links[i].ifc, "type", "veth", "peer", "name", links[i+1].ifc, "netns", links[i+1].ns)
	}
	for _, l := range links {
		sysctl(l.ns, "ipv6/conf/"+l.ifc+"/accept_dad", "0")
		ip("-n", l.ns, "addr", "add", l.addr, "dev", l.ifc, "nodad")
		ip("-n", l.ns, "link", "set", l.ifc, "up")
	}
	sysctl(peerNS, "ipv6/conf/"+links[1].ifc+"/force_mld_version", fmt.Sprint(version))
	gwIf, peerIf := links[0].ifc, links[1].ifc
	// Each end has IPv6 set up (its link-local address, and with it the
	// multicast route: until then the kernel drops what arrives as
	// unroutable) once the link has carrier; the gateway's queries leave
	// from its link-local address.
	for _, l := range links {
		waitFor(t, 5*time.Second, "a link-local address on "+l.ifc, func() bool {
			var ok bool
			netns.Do(l.ns, func() error {
				ifi, err := net.InterfaceByName(l.ifc)
				if err != nil {
					return err
				}
				as, _ := ifi.Addrs()
				for _, a := range as {
					ok = ok || strings.HasPrefix(a.String(), "fe80:")
				}
				return nil
			})
			return ok
		})
	}

	group := netip.AddrFrom16([16]byte{0xff, 0x05, 13: 0x15, 14: byte(os.Getpid() >> 8), 15: byte(os.Getpid())})
	y := strings.NewReplacer("GWNS", gwNS, "MIF", gwIf, "SIF", links[2].ifc).Replace(`legs:
  - {name: ib, kind: userspace, interface: MIF, ip: "fd02::1", io: udp, netns: GWNS}
  - {name: roce, kind: userspace, interface: SIF, ip: "fd03::1", io: udp, netns: GWNS}
groups:
  - {name: feeds, joined_on: ib, roce: roce, ib: ib, within: "ff05::/16"}
`)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	g := startGatewayWith(t, cfg, bridge.GatewayOptions{})

	peerIP := netip.MustParseAddr("fd02::2")
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
	relaying := func(want []string) bool {
		st := g.Status()
		return len(st.Joined) == 1 && slices.Equal(st.Joined[0].Groups, want)
	}
	waitFor(t, 5*time.Second, "the member's MLD join found", func() bool { return relaying([]string{group.String()}) })
	sender := newCMAppIn(t, sendNS, links[3].ifc, "fd03::2", nil)
	sqp, _ := sender.udQP(t, 1)
	const n = 6
	payload := []byte("over IPv6 to the members")
	for range n {
		sender.sendUDTo(t, sqp, group, transport.MulticastQPN, payload)
	}
	if got, want := drain(t, member, mcq, mqp, payload), map[netip.Addr]int{netip.MustParseAddr("fd02::1"): n}; !cmp.Equal(got, want) {
		t.Errorf("the member got, by source, %v; want %v", got, want)
	}
	if st := g.GroupStats("feeds/" + group.String()); st == nil || st.Datagrams[0] != n {
		t.Errorf("group feeds/%v stats %+v, want %d datagrams roce_to_ib", group, st, n)
	}
	if err := member.dev.DetachMulticast(mqp, group); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the member's MLD leave", func() bool { return relaying([]string{}) })
	if s := g.JoinedStats("feeds"); s.Joined != 1 || s.Left != 1 || s.QueriesSent < 2 || s.Malformed != 0 {
		t.Errorf("entry stats %+v: want 1 joined, 1 left, our queries", *s)
	}
}
