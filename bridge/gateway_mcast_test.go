package bridge_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// The groups' host tests put both legs and the applications on loopback:
// one wire that every member hears, so the gateway hears its own sends on
// the other leg (a loop) and must not relay them again.

// mcastGroup is this process's group address (test processes running at
// once do not share it).
var mcastGroup = netip.MustParseAddr(fmt.Sprintf("239.201.%d.%d", os.Getpid()>>8%256, os.Getpid()%256))

func groupConfig(t *testing.T, direction string) *config.Config {
	t.Helper()
	y := `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
groups:
  - {name: ticks, group: GROUP, roce: a, ib: b, direction: DIR}
`
	y = strings.NewReplacer("127.0.10.", loNet, "GROUP", mcastGroup.String(), "DIR", direction).Replace(y)
	c, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// joinQP attaches a UD QP of the app to the group (on lo).
func (a *cmApp) joinQP(t *testing.T, n int) (*transport.QP, *transport.CQ) {
	t.Helper()
	qp, rcq := a.udQP(t, n)
	lo, err := net.InterfaceByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.dev.AttachMulticast(qp, mcastGroup, func() (roce.PacketConn, error) {
		return udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(mcastGroup, roce.Port), Interface: lo.Index})
	}); err != nil {
		t.Fatal(err)
	}
	return qp, rcq
}

// drain counts what reached cq, by source address, until nothing came for
// a while; each payload must be want's.
func drain(t *testing.T, a *cmApp, cq *transport.CQ, qp *transport.QP, want []byte) map[netip.Addr]int {
	t.Helper()
	got := map[netip.Addr]int{}
	var wcs [16]transport.WC
	for idle := 0; idle < 20; {
		n := cq.Poll(wcs[:])
		if n == 0 {
			idle++
			time.Sleep(20 * time.Millisecond)
			continue
		}
		idle = 0
		for _, wc := range wcs[:n] {
			if wc.Status != transport.StatusSuccess || !bytes.Equal(a.mem[4096*int(wc.ID):][:wc.ByteLen], want) {
				t.Errorf("datagram %+v: want %q", wc, want)
			}
			got[wc.Src.Addr()]++
			if err := qp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: a.mr, Offset: 4096 * int(wc.ID), Length: 4096}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return got
}

// TestGatewayGroup: what a member sends to the group on leg a crosses to
// the group on leg b; the gateway's own sends, heard back, are dropped and
// counted (both legs on one wire: a loop), so each datagram crosses once
// each way it may and nothing storms.
func TestGatewayGroup(t *testing.T) {
	for _, tc := range []struct {
		direction string
		// Copies the receiver gets: the sender's own, and the gateway's
		// from leg b (roce to ib) and from leg a (ib to roce: leg b heard
		// the sender too, on the one wire).
		fromB, fromA int
		want         bridge.UDStatsSnapshot
	}{
		{config.DirectionRoCEToIB, 1, 0, bridge.UDStatsSnapshot{Datagrams: [2]uint64{1, 0}, DropOwn: [2]uint64{1, 0}}},
		{config.DirectionBoth, 1, 1, bridge.UDStatsSnapshot{Datagrams: [2]uint64{1, 1}, DropOwn: [2]uint64{2, 2}}},
	} {
		t.Run(tc.direction, func(t *testing.T) {
			sender, receiver := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
			g := startGatewayWith(t, groupConfig(t, tc.direction), bridge.GatewayOptions{})
			rqp, rcq := receiver.joinQP(t, 32)
			sqp, _ := sender.udQP(t, 1)
			const n = 5
			payload := []byte("tick 42")
			for range n {
				sender.sendUDTo(t, sqp, mcastGroup, transport.MulticastQPN, payload)
			}
			got := drain(t, receiver, rcq, rqp, payload)
			gwA, gwB := netip.MustParseAddr(lo("1")), netip.MustParseAddr(lo("2"))
			want := map[netip.Addr]int{sender.ip: n, gwB: tc.fromB * n}
			if tc.fromA > 0 {
				want[gwA] = tc.fromA * n
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("the receiver got, by source, %v; want %v", got, want)
			}
			st := g.GroupStats("ticks")
			if st == nil {
				t.Fatal("no stats for group ticks")
			}
			w := tc.want
			for d := range 2 {
				w.Datagrams[d] *= n
				w.Bytes[d] = w.Datagrams[d] * uint64(len(payload))
				w.DropOwn[d] *= n
			}
			if *st != w {
				t.Errorf("group stats %+v, want %+v", *st, w)
			}
			m, _ := scrape(t, startAdmin(t, g))
			for name, v := range map[string]float64{
				`rbridge_group_datagrams_total{direction="roce_to_ib",group="ticks"}`:           float64(w.Datagrams[0]),
				`rbridge_group_dropped_total{cause="own",direction="roce_to_ib",group="ticks"}`: float64(w.DropOwn[0]),
			} {
				if got, ok := m[name]; !ok || got != v {
					t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
				}
			}
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(bridge.NewCollector(g)); err != nil {
				t.Fatal(err)
			}
			if _, err := reg.Gather(); err != nil {
				t.Errorf("pedantic gather: %v", err)
			}
			if s := g.Status(); len(s.Groups) != 1 || s.Groups[0].Direction != tc.direction || s.Groups[0].Group != mcastGroup.String() {
				t.Errorf("status groups %+v", s.Groups)
			}
		})
	}
}

// sendUDTo sends payload from offset 512 KiB of the app's memory with
// rdma_cm's Q_Key.
func (a *cmApp) sendUDTo(t *testing.T, qp *transport.QP, to netip.Addr, qpn uint32, payload []byte) {
	t.Helper()
	const off = 512 << 10
	copy(a.mem[off:], payload)
	if err := qp.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: transport.SGE{MR: a.mr, Offset: off, Length: len(payload)},
		UD: &transport.UDDest{Addr: netip.AddrPortFrom(to, roce.Port), QPN: qpn, QKey: cm.RDMAUDPQKey}}); err != nil {
		t.Fatal(err)
	}
}

// TestGatewayGroupReload: groups are joined once, as legs are opened: a
// reload whose groups differ is refused, one with the same groups applies.
func TestGatewayGroupReload(t *testing.T) {
	g := startGatewayWith(t, groupConfig(t, config.DirectionBoth), bridge.GatewayOptions{})
	if _, err := g.Reload(groupConfig(t, config.DirectionRoCEToIB)); !errors.Is(err, bridge.ErrLegsChanged) {
		t.Errorf("reload with a group's direction changed: %v, want ErrLegsChanged", err)
	}
	if _, err := g.Reload(groupConfig(t, config.DirectionBoth)); err != nil {
		t.Errorf("reload with the same groups: %v", err)
	}
	if s := g.Status(); len(s.Groups) != 1 || s.Groups[0].Direction != config.DirectionBoth {
		t.Errorf("groups after the reloads: %+v", s.Groups)
	}
}
