//go:build linux

package bridge_test

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// TestGatewayGroupAFXDP: a group relayed both ways between an AF_XDP leg
// (its interface a veth into another namespace, where a member on kernel
// sockets sends and receives) and a UDP leg on loopback. What the member
// sends reaches the loopback receiver through the gateway, what a loopback
// sender sends reaches the member; the classifier redirected exactly the
// member's datagrams, counted in /status and on /metrics; the one own send
// the gateway hears back (on loopback) is dropped. Busy-polled, the
// group's receive loop on the AF_XDP leg (direction roce_to_ib: one loop,
// which keeps a CPU) reads the group's queue without waiting and relays
// the same, counted the same.
func TestGatewayGroupAFXDP(t *testing.T) {
	for _, tc := range []struct {
		name, keys string
		both       bool // relayed both ways, else roce_to_ib only
	}{
		{"both ways", "direction: both", true},
		{"busy-polled", "direction: roce_to_ib, busy_poll: true", false},
	} {
		t.Run(tc.name, func(t *testing.T) { testGatewayGroupAFXDP(t, tc.keys, tc.both) })
	}
}

func testGatewayGroupAFXDP(t *testing.T, keys string, both bool) {
	gwNS, peerNS, gwIf, peerIf := vethNamespaces(t, "XDP, AF_XDP, network namespaces", "rbg", "10.96.0.1/24", "10.96.0.2/24")

	y := strings.NewReplacer("127.0.10.", loNet, "GROUP", mcastGroup.String(), "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: a, kind: userspace, interface: GWIF, ip: 10.96.0.1, io: afxdp, netns: GWNS}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
groups:
  - {name: ticks, group: GROUP, roce: a, ib: b, KEYS}
`)
	y = strings.Replace(y, "KEYS", keys, 1)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	// The AF_XDP socket takes 1024 of the pool's 4 KiB frames.
	g := startGatewayWith(t, cfg, bridge.GatewayOptions{Pool: pool.Options{Size: 16 << 20}})

	// The member in the peer namespace: its sockets are made there.
	peerIP := netip.MustParseAddr("10.96.0.2")
	var uc, member *udpconn.Conn
	if err := netns.Do(peerNS, func() error {
		ifi, err := net.InterfaceByName(peerIf)
		if err != nil {
			return err
		}
		if uc, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(peerIP, roce.Port)}); err != nil {
			return err
		}
		member, err = udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(mcastGroup, roce.Port), Interface: ifi.Index})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	peer := &cmApp{ip: peerIP, pd: transport.NewPD(), mem: make([]byte, 1<<20), cq: transport.NewCQ(1024)}
	if peer.dev, err = transport.NewDevice(uc, transport.DeviceOptions{Logger: testlog.New(t)}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.dev.Close() })
	if peer.mr, err = peer.pd.RegisterMR(peer.mem, transport.AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	pqp, pcq := peer.udQP(t, 64)
	if err := peer.dev.AttachMulticast(pqp, mcastGroup, func() (roce.PacketConn, error) { return member, nil }); err != nil {
		t.Fatal(err)
	}

	receiver, sender := newCMApp(t, lo("4")), newCMApp(t, lo("3"))
	rqp, rcq := receiver.joinQP(t, 64)
	sqp, _ := sender.udQP(t, 1)
	gwA, gwB := netip.MustParseAddr("10.96.0.1"), netip.MustParseAddr(lo("2"))

	const n = 8
	toIB, toRoCE := []byte("from the AF_XDP side"), []byte("from loopback")
	for range n {
		peer.sendUDTo(t, pqp, mcastGroup, transport.MulticastQPN, toIB)
	}
	// The receiver gets the gateway's relay; the member its own sends,
	// looped back by its IP stack.
	if got, want := drain(t, receiver, rcq, rqp, toIB), map[netip.Addr]int{gwB: n}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the loopback receiver got, by source, %v; want %v", got, want)
	}
	if got, want := drain(t, peer, pcq, pqp, toIB), map[netip.Addr]int{peerIP: n}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the member got, by source, %v; want its own %v", got, want)
	}
	for range n * btoi(both) {
		sender.sendUDTo(t, sqp, mcastGroup, transport.MulticastQPN, toRoCE)
	}
	if both {
		if got, want := drain(t, peer, pcq, pqp, toRoCE), map[netip.Addr]int{gwA: n}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the member got, by source, %v; want the gateway's %v", got, want)
		}
		if got, want := drain(t, receiver, rcq, rqp, toRoCE), map[netip.Addr]int{sender.ip: n}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the loopback receiver got, by source, %v; want the sender's %v", got, want)
		}
	}

	st := g.Status()
	if len(st.Groups) != 1 {
		t.Fatalf("status groups %+v", st.Groups)
	}
	gs := st.Groups[0]
	want := bridge.UDStatsSnapshot{Datagrams: [2]uint64{n, n}, Bytes: [2]uint64{n * uint64(len(toIB)), n * uint64(len(toRoCE))},
		DropOwn: [2]uint64{0, n}} // leg b hears its relays of the member's datagrams on loopback
	if !both {
		// Leg b only sends: it hears nothing back.
		want = bridge.UDStatsSnapshot{Datagrams: [2]uint64{n, 0}, Bytes: [2]uint64{n * uint64(len(toIB)), 0}}
	}
	if gs.Stats != want {
		t.Errorf("group stats %+v, want %+v", gs.Stats, want)
	}
	if x := gs.RoCESideXDP; x == nil || x.Packets != n || x.Bytes == 0 {
		t.Errorf("the classifier's count of the group %+v, want %d datagrams", x, n)
	}
	if !strings.Contains(gs.RoCESide, "AF_XDP") || strings.Contains(gs.IBSide, "AF_XDP") {
		t.Errorf("sides described %q and %q: only the first is on AF_XDP", gs.RoCESide, gs.IBSide)
	}
	if got := strings.Contains(gs.RoCESide, "busy-polled"); got == both {
		t.Errorf("the AF_XDP side described %q: busy-polled %v, want %v", gs.RoCESide, got, !both)
	}
	if gs.IBSideXDP != nil {
		t.Errorf("XDP counts on the UDP leg: %+v", *gs.IBSideXDP)
	}
	m, _ := scrape(t, startAdmin(t, g))
	for name, v := range map[string]float64{
		`rbridge_xdp_rx_group_packets_total{leg="a"}`:                         n,
		`rbridge_xdp_rx_group_overflow_total{leg="a"}`:                        0,
		`rbridge_xdp_rx_group_unjoined_total{leg="a"}`:                        0,
		`rbridge_xdp_classifier_passed_unjoined_total{leg="a"}`:               0,
		`rbridge_group_datagrams_total{direction="roce_to_ib",group="ticks"}`: n,
		`rbridge_group_datagrams_total{direction="ib_to_roce",group="ticks"}`: float64(n * btoi(both)),
	} {
		if got, ok := m[name]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
