//go:build linux

package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestGatewayAFXDPFirstConnection: a route whose target is behind an
// AF_XDP leg, on a link the gateway has sent nothing on (its namespace's
// neighbour table has no entry for the target). The gateway has its
// kernel resolve the target's Ethernet address, and the client's very
// first connection goes through, the gateway's REQ sent once: not
// refused for want of a neighbour entry, nor left to the CM's retry
// (issue 22). The resolution is counted on /metrics, which promtool
// passes.
func TestGatewayAFXDPFirstConnection(t *testing.T) {
	gwNS, peerNS, gwIf, _ := vethNamespaces(t, "XDP, AF_XDP, network namespaces", "rbf", "10.95.0.1/24", "10.95.0.2/24")
	neighbour := func() string {
		t.Helper()
		out, err := exec.Command("ip", "-n", gwNS, "neigh", "show", "to", "10.95.0.2", "dev", gwIf).CombinedOutput()
		if err != nil {
			t.Fatalf("ip neigh show: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}

	target := newCMAppIn(t, peerNS, "", "10.95.0.2", nil)
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: GWIF, ip: 10.95.0.1, io: afxdp, netns: GWNS}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.10.1:7471"}
    target: {leg: b, addr: "10.95.0.2:7471"}
`)
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	// The AF_XDP socket takes 1024 of the pool's 4 KiB frames.
	g := startGatewayWith(t, cfg, bridge.GatewayOptions{Pool: pool.Options{Size: 16 << 20}})
	if e := neighbour(); e != "" {
		t.Fatalf("the gateway's neighbour table before the first connection: %q, want no entry for the target", e)
	}

	client := newCMApp(t, lo("3"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	accepted := make(chan *cm.Conn, 1)
	tqp := target.qp(t)
	go func() {
		r, err := ln.Next(ctx)
		if err != nil {
			t.Error(err)
			accepted <- nil
			return
		}
		if err := tqp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			t.Error(err)
		}
		c, err := r.Accept(ctx, cm.AcceptOptions{QP: tqp})
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	cc, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo("1:7471")), cm.DialOptions{QP: client.qp(t)})
	if err != nil {
		t.Fatalf("the first connection through the gateway: %v", err)
	}
	tc := <-accepted
	if tc == nil {
		t.FailNow()
	}
	if e := neighbour(); !strings.Contains(e, "lladdr") {
		t.Errorf("the gateway's neighbour table after: %q, want the target's address", e)
	}
	base := startAdmin(t, g)
	m, raw := scrape(t, base)
	promtool(t, raw) // an AF_XDP leg's metrics, the neighbours' among them
	for name, v := range map[string]float64{
		`rbridge_xdp_neighbor_resolutions_total{leg="b"}`: 1,
		`rbridge_xdp_neighbor_answered_total{leg="b"}`:    1,
		`rbridge_xdp_neighbor_failed_total{leg="b"}`:      0,
		`rbridge_xdp_tx_no_neighbor_total{leg="b"}`:       0,
		`rbridge_cm_retransmits_total{leg="b"}`:           0, // the first REQ got through
	} {
		if got, ok := m[name]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, v)
		}
	}
	if got := m[`rbridge_xdp_tx_held_for_neighbor_total{leg="b"}`]; got < 1 {
		t.Errorf(`rbridge_xdp_tx_held_for_neighbor_total{leg="b"} = %v, want the REQ held while the target was resolved`, got)
	}
	// veth has copy mode only, whose TX ring always asks for its sendto.
	if got := m[`rbridge_xdp_tx_kicks_total{leg="b"}`]; got < 1 {
		t.Errorf(`rbridge_xdp_tx_kicks_total{leg="b"} = %v, want the sends' sendto calls counted`, got)
	}
	var st bridge.Status
	if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Legs) != 2 || st.Legs[1].Name != "b" || !strings.HasPrefix(st.Legs[1].AFXDPWakeup, "need_wakeup on, tx budget ") || st.Legs[0].AFXDPWakeup != "" {
		t.Errorf("legs' AF_XDP wakeup: %+v, want b's bound with need_wakeup, a's (UDP) none", st.Legs)
	}
	if err := cc.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tc.Done():
	case <-ctx.Done():
		t.Fatal("the target's connection outlived the client's")
	}
}

// TestGatewayAFXDPQueues: an AF_XDP leg on a veth with four receive queues
// binds a socket on each (its default), and connections whose peers'
// packets arrive on different queues all carry their SENDs, both ways:
// eight targets, each on a UDP socket of its own, so eight flows that the
// peer end's transmit hash spreads over its four queues, each delivered
// to the gateway's queue of the same number. /status lists the four
// queues and how they were chosen; the classifier found a socket for
// every packet (rbridge_xdp_classifier_passed_no_socket_total 0), and
// more than one queue received: the gateway of one socket, on queue 0,
// lost what arrived on the others. Each target's SEND back is 24 KiB,
// six packets in a row on its flow's queue: a gateway QP numbered for
// another queue moves to that queue's loop (qps_moved_in).
func TestGatewayAFXDPQueues(t *testing.T) {
	const queues, targets = 4, 8
	gwNS, peerNS, gwIf, peerIf := vethNamespacesQueues(t, "XDP, AF_XDP, network namespaces", "rbq", "10.96.0.1/24", "10.96.0.2/24", queues)
	var routes strings.Builder
	apps := make([]*cmApp, targets)
	lns := make([]*cm.Listener, targets)
	for i := range targets {
		ip := fmt.Sprintf("10.96.0.%d", 10+i)
		if out, err := exec.Command("ip", "-n", peerNS, "addr", "add", ip+"/24", "dev", peerIf).CombinedOutput(); err != nil {
			t.Fatalf("ip addr add %s: %v: %s", ip, err, out)
		}
		apps[i] = newCMAppIn(t, peerNS, "", ip, nil)
		var err error
		if lns[i], err = apps[i].cm.Listen(7480, 4); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&routes, "  - name: r%d\n    listen: {leg: a, addr: \"127.0.10.1:%d\"}\n    target: {leg: b, addr: \"%s:7480\"}\n", i, 7480+i, ip)
	}
	y := strings.NewReplacer("127.0.10.", loNet, "GWNS", gwNS, "GWIF", gwIf).Replace(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: b, kind: userspace, interface: GWIF, ip: 10.96.0.1, io: afxdp, netns: GWNS}
routes:
` + routes.String())
	cfg, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	// Four sockets' rings from the pool's 4 KiB class (at most half of it).
	g := startGatewayWith(t, cfg, bridge.GatewayOptions{Pool: pool.Options{Size: 32 << 20}})
	client := newCMApp(t, lo("3"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, app := range apps {
		accepted := make(chan *cm.Conn, 1)
		tqp := app.qp(t)
		go func() {
			r, err := lns[i].Next(ctx)
			if err == nil {
				err = tqp.Modify(transport.QPAttr{State: transport.StateInit})
			}
			if err == nil {
				err = tqp.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: app.mr, Length: 32 << 10}})
			}
			var c *cm.Conn
			if err == nil {
				c, err = r.Accept(ctx, cm.AcceptOptions{QP: tqp})
			}
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		cqp := client.qp(t)
		if err := cqp.Modify(transport.QPAttr{State: transport.StateInit}); err != nil {
			t.Fatal(err)
		}
		if err := cqp.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: client.mr, Length: 32 << 10}}); err != nil {
			t.Fatal(err)
		}
		cc, err := client.cm.Dial(ctx, netip.MustParseAddrPort(lo(fmt.Sprintf("1:%d", 7480+i))), cm.DialOptions{QP: cqp})
		if err != nil {
			t.Fatalf("connection %d through the gateway: %v", i, err)
		}
		tc := <-accepted
		if tc == nil {
			t.FailNow()
		}
		// A SEND each way, each completed end to end.
		for _, dir := range []struct {
			from, to   *cmApp
			qp         *transport.QP
			what, name string
		}{{client, app, cqp, fmt.Sprintf("to target %d", i), "client"},
			{app, client, tqp, strings.Repeat(fmt.Sprintf("from target %d, ", i), 24<<10/8)[:24<<10], "target"}} {
			copy(dir.from.mem[64<<10:], dir.what)
			if err := dir.qp.PostSend(transport.SendWR{ID: 2, Opcode: transport.OpSend, Signaled: true,
				Local: transport.SGE{MR: dir.from.mr, Offset: 64 << 10, Length: len(dir.what)}}); err != nil {
				t.Fatal(err)
			}
			for _, cq := range []*transport.CQ{dir.from.cq, dir.to.cq} {
				var wc [1]transport.WC
				if _, err := cq.PollWait(ctx, wc[:]); err != nil || wc[0].Status != transport.StatusSuccess {
					t.Fatalf("connection %d, the %s's SEND: %+v, %v", i, dir.name, wc[0], err)
				}
			}
			if got := string(dir.to.mem[:len(dir.what)]); got != dir.what {
				t.Errorf("connection %d, the %s's SEND of %d bytes: received other bytes", i, dir.name, len(dir.what))
			}
		}
		if err := cc.Disconnect(ctx); err != nil {
			t.Fatal(err)
		}
	}
	base := startAdmin(t, g)
	m, _ := scrape(t, base)
	if got, ok := m[`rbridge_xdp_classifier_passed_no_socket_total{leg="b"}`]; !ok || got != 0 {
		t.Errorf("packets for the leg's QPs that found no socket on their queue: %v (present %v), want 0", got, ok)
	}
	var st bridge.Status
	if err := json.Unmarshal(get(t, base+"/status"), &st); err != nil {
		t.Fatal(err)
	}
	b := st.Legs[1]
	if len(b.Queues) != queues || !strings.Contains(b.QueuesWhy, "every receive queue") {
		t.Fatalf("leg b's queues: %+v (%s), want %d, every receive queue of the interface", b.Queues, b.QueuesWhy, queues)
	}
	busy, moved := 0, uint64(0)
	for _, q := range b.Queues {
		if q.RxPackets > 0 {
			busy++
		}
		moved += q.QPsMovedIn
	}
	t.Logf("leg b's queues: %+v", b.Queues)
	if busy < 2 {
		t.Errorf("%d of the %d queues received: the eight flows should spread over several", busy, queues)
	}
	// Eight QPs over four queues, each numbered for one and its flow on
	// one: all on their own queues is a chance of 4^-8.
	if moved == 0 {
		t.Error("no QP moved to the queue its packets arrive on")
	}
	if got := m[`rbridge_leg_queue_qps_moved_in_total{leg="b",queue="0"}`] + m[`rbridge_leg_queue_qps_moved_in_total{leg="b",queue="1"}`] +
		m[`rbridge_leg_queue_qps_moved_in_total{leg="b",queue="2"}`] + m[`rbridge_leg_queue_qps_moved_in_total{leg="b",queue="3"}`]; got != float64(moved) {
		t.Errorf("rbridge_leg_queue_qps_moved_in_total sums to %v, /status to %d", got, moved)
	}
}
