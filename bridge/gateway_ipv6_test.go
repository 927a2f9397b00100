//go:build linux

package bridge_test

import (
	"bytes"
	"context"
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
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// IPv6 on the host: loopback holds ::1 alone (and the RoCEv2 port is
// the protocol's, so each side needs an address of its own), and Linux
// does not send IPv6 multicast on lo at all: a datagram to ff05::... from
// a socket whose multicast interface is lo is counted sent
// (Udp6OutDatagrams) and never reaches lo (tshark on lo sees nothing),
// with or without a multicast route for ff00::/8 there. So the IPv6 tests
// take a network namespace of their own with one veth end, v6wireIf, that
// holds every address (fd01::1, ...) and carries multicast: what is sent
// to a group there is looped back to the sockets joined on it, one wire
// as loopback is for IPv4. A second veth end, rbv2, holds nothing and has
// the multicast route the table prefers: a socket that does not name the
// interface its multicast leaves on sends there, and nobody hears it. The
// other ends have IPv6 off, so they route no group.

const v6wireIf = "rbv0"

// v6wire makes that namespace with hosts fd01::1 to fd01::<hosts> on
// v6wireIf, and returns its name.
func v6wire(t *testing.T, hosts int) string {
	t.Helper()
	ns := fabric(t, "6")
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %s: %v: %s", ns, strings.Join(args, " "), err, out)
		}
	}
	for _, pair := range [][2]string{{v6wireIf, "rbv1"}, {"rbv2", "rbv3"}} {
		ip("link", "add", pair[0], "type", "veth", "peer", "name", pair[1])
		if err := netns.Do(ns, func() error {
			return os.WriteFile("/proc/sys/net/ipv6/conf/"+pair[1]+"/disable_ipv6", []byte("1"), 0)
		}); err != nil {
			t.Fatalf("IPv6 off on %s: %v", pair[1], err)
		}
		ip("link", "set", pair[1], "up")
		ip("link", "set", pair[0], "up")
	}
	ip("-6", "route", "add", "multicast", "ff00::/8", "dev", "rbv2", "table", "local", "metric", "1")
	for h := 1; h <= hosts; h++ {
		ip("addr", "add", fmt.Sprintf("fd01::%d/64", h), "dev", v6wireIf, "nodad")
	}
	return ns
}

// v6Gateway starts a gateway of two userspace legs on the IPv6 wire:
// a at fd01::1, b at fd01::2 (path MTU 1024), and extra's routes and
// groups.
func v6Gateway(t *testing.T, ns, extra string) *bridge.Gateway {
	t.Helper()
	y := fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: %[1]s, netns: %[2]s, ip: "fd01::1", io: udp}
  - {name: b, kind: userspace, interface: %[1]s, netns: %[2]s, ip: "fd01::2", io: udp, mtu: 1024}
`, v6wireIf, ns) + extra
	c, err := config.Parse("gw.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return startGatewayWith(t, c, bridge.GatewayOptions{})
}

// TestGatewayUDIPv6: a UD route over IPv6: the client resolves the route
// through the gateway (SIDR with an IPv6 IP CM header both hops), and
// datagrams cross both ways from the gateway's IPv6 addresses, with a QPN
// in the immediate data rewritten, one too long for leg b dropped.
func TestGatewayUDIPv6(t *testing.T) {
	ns := v6wire(t, 4)
	client, target := newCMAppIn(t, ns, v6wireIf, "fd01::3", nil), newCMAppIn(t, ns, v6wireIf, "fd01::4", nil)
	ln, err := target.cm.ListenUD(7174, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tqp, tcq := target.udQP(t, 16)
	served := make(chan error, 1)
	go func() {
		req, err := ln.Next(context.Background())
		if err == nil {
			if req.Remote != netip.MustParseAddr("fd01::2") || !bytes.HasPrefix(req.PrivateData, []byte("v6 hello")) {
				err = fmt.Errorf("the target's SIDR_REQ from %v, private data %q", req.Remote, req.PrivateData)
			} else {
				err = req.Accept(cm.SIDRAcceptOptions{QP: tqp, PrivateData: []byte("v6 welcome")})
			}
		}
		served <- err
	}()
	g := v6Gateway(t, ns, `routes:
  - name: u
    ud: true
    listen: {leg: a, addr: "[fd01::1]:7174"}
    target: {leg: b, addr: "[fd01::4]:7174"}
`)
	gwA, gwB := netip.MustParseAddr("fd01::1"), netip.MustParseAddr("fd01::2")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	svc, err := client.cm.ResolveUD(ctx, netip.AddrPortFrom(gwA, 7174), cm.ResolveOptions{PrivateData: []byte("v6 hello")})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(svc.PrivateData, []byte("v6 welcome")) {
		t.Errorf("resolved %+v: want the target's private data", svc)
	}
	cqp, ccq := client.udQP(t, 16)
	const n = 3
	for i := range n {
		client.sendUD(t, cqp, gwA, svc.QPN, cqp.QPN(), 100+i, byte('a'+i))
		wc := waitUD(t, tcq)
		if wc.Status != transport.StatusSuccess || wc.ByteLen != 100+i || wc.Src.Addr() != gwB || wc.Imm != wc.SrcQPN ||
			!bytes.Equal(target.mem[4096*int(wc.ID):][:wc.ByteLen], bytes.Repeat([]byte{byte('a' + i)}, 100+i)) {
			t.Fatalf("datagram %d at the target: %+v, want %d bytes from %v with the gateway's QPN as immediate data", i, wc, 100+i, gwB)
		}
		target.sendUD(t, tqp, wc.Src.Addr(), wc.SrcQPN, 0xbeef, 200+i, byte('A'+i))
		wc = waitUD(t, ccq)
		if wc.Status != transport.StatusSuccess || wc.ByteLen != 200+i || wc.Src.Addr() != gwA || wc.SrcQPN != svc.QPN || wc.Imm != 0xbeef ||
			!bytes.Equal(client.mem[4096*int(wc.ID):][:wc.ByteLen], bytes.Repeat([]byte{byte('A' + i)}, 200+i)) {
			t.Fatalf("reply %d at the client: %+v, want %d bytes from the gateway's QP %#x at %v", i, wc, 200+i, svc.QPN, gwA)
		}
	}
	client.sendUD(t, cqp, gwA, svc.QPN, 7, 2000, 'x') // longer than leg b's 1024
	noUD(t, tcq, "a datagram longer than the target leg's MTU")
	want := bridge.UDStatsSnapshot{Resolved: 1, Datagrams: [2]uint64{n, n}, ImmQPNRewritten: [2]uint64{n, 0}, DropTooLong: [2]uint64{1, 0}}
	for i := range n {
		want.Bytes[0] += uint64(100 + i)
		want.Bytes[1] += uint64(200 + i)
	}
	if d := cmp.Diff(want, *g.UDStats("u")); d != "" {
		t.Errorf("UD stats (-want +got):\n%s", d)
	}
}

// TestGatewayGroupIPv6: an IPv6 group (MLD joins) relayed both ways on
// one wire, as TestGatewayGroup does for IPv4: the member's datagrams
// reach the receiver once from the gateway, and the gateway's own sends
// and the loop on the one wire are dropped and counted. The gateway's
// sends leave on its legs' interface, not where the routing table would
// send a group (rbv2).
func TestGatewayGroupIPv6(t *testing.T) {
	ns := v6wire(t, 4)
	group := netip.MustParseAddr("ff05::db8:15")
	g := v6Gateway(t, ns, fmt.Sprintf("groups:\n  - {name: ticks, group: %q, roce: a, ib: b}\n", group))
	sender, receiver := newCMAppIn(t, ns, v6wireIf, "fd01::3", nil), newCMAppIn(t, ns, v6wireIf, "fd01::4", nil)
	rqp, rcq := receiver.joinGroup(t, group, v6wireIf, 32)
	sqp, _ := sender.udQP(t, 1)
	const n = 5
	sent := map[string]bool{}
	for i := range n {
		p := fmt.Sprintf("v6 tick %d", i)
		sent[p] = true
		sender.sendUDTo(t, sqp, group, transport.MulticastQPN, []byte(p))
	}
	got := collect(t, receiver, rcq, rqp, sent, 300*time.Millisecond, time.Now().Add(3*time.Second))
	gwA, gwB := netip.MustParseAddr("fd01::1"), netip.MustParseAddr("fd01::2")
	if got[sender.ip] != n || got[gwA]+got[gwB] != n || len(got) > 3 {
		t.Errorf("the receiver got, by source, %v; want %d from the sender %v and %d from the gateway (%v or %v)", got, n, sender.ip, n, gwA, gwB)
	}
	st := g.GroupStats("ticks")
	if st == nil {
		t.Fatal("no stats for group ticks")
	}
	// What crossed a to b counts as roce_to_ib, b to a back; its arrival
	// on the other leg is a loop drop; the gateway hears its own send on
	// both legs.
	size := uint64(len("v6 tick 0"))
	want := bridge.UDStatsSnapshot{Datagrams: [2]uint64{uint64(got[gwB]), uint64(got[gwA])},
		Bytes: [2]uint64{uint64(got[gwB]) * size, uint64(got[gwA]) * size}, DropOwn: [2]uint64{n, n},
		DropLoop: [2]uint64{uint64(got[gwA]), uint64(got[gwB])}}
	if d := cmp.Diff(want, *st); d != "" {
		t.Errorf("group stats (-want +got):\n%s", d)
	}
	if s := g.Status(); len(s.Groups) != 1 || s.Groups[0].Group != group.String() {
		t.Errorf("status groups %+v", s.Groups)
	}
}
