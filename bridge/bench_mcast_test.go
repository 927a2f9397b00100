package bridge_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// benchGroup is this process's i-th group address for the benchmarks.
func benchGroup(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("239.%d.%d.%d", 210+i, os.Getpid()>>8%256, os.Getpid()%256))
}

// echoRule is what the echo server answers: datagrams from src, to the
// group reply.
type echoRule struct {
	src, reply netip.Addr
}

// BenchmarkGroupPingPong: one datagram of 64 bytes at a time from a
// client to a multicast group, answered by a server on another group,
// the next leaving once the answer is back: a round trip per op. Direct
// (the server hears the client's group itself), through a gateway whose
// group "ping" carries the request from leg a to leg b and group "pong"
// the answer back, and through a second gateway alike whose ping group
// busy-polls (busy_poll: true: one loop spinning on its own thread; its
// pong group does not, so that on a two-core host one core is left to the
// rest), in one run. All of it is on loopback in one process: the client,
// the server and both gateways share the host's cores.
func BenchmarkGroupPingPong(b *testing.B) {
	client, server := newCMApp(b, lo("3")), newCMApp(b, lo("4"))
	var groups [6]netip.Addr // direct ping, pong; gateway's; busy gateway's
	for i := range groups {
		groups[i] = benchGroup(i)
	}
	gwConfig := func(a, bb string, ping, pong netip.Addr, pingKeys string) *config.Config {
		y := fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: lo, ip: %s, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: %s, io: udp}
groups:
  - {name: ping, group: %v, roce: a, ib: b, direction: roce_to_ib%s}
  - {name: pong, group: %v, roce: a, ib: b, direction: ib_to_roce}
`, a, bb, ping, pingKeys, pong)
		c, err := config.Parse("gw.yaml", []byte(y))
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	startGatewayWith(b, gwConfig(lo("1"), lo("2"), groups[2], groups[3], ""), bridge.GatewayOptions{})
	startGatewayWith(b, gwConfig(lo("5"), lo("6"), groups[4], groups[5], ", busy_poll: true"), bridge.GatewayOptions{})
	loIdx := func() int {
		ifi, err := net.InterfaceByName("lo")
		if err != nil {
			b.Fatal(err)
		}
		return ifi.Index
	}()
	attach := func(a *cmApp, n int, gs ...netip.Addr) (*transport.QP, *transport.CQ) {
		qp, cq := a.udQP(b, n)
		for _, g := range gs {
			if err := a.dev.AttachMulticast(qp, g, func() (roce.PacketConn, error) {
				return udpconn.Listen(udpconn.Options{Addr: netip.AddrPortFrom(g, roce.Port), Interface: loIdx})
			}); err != nil {
				b.Fatal(err)
			}
		}
		return qp, cq
	}
	sqp, scq := attach(server, 32, groups[0], groups[2], groups[4])
	cqp, ccq := attach(client, 32, groups[1], groups[3], groups[5])
	var rule atomic.Pointer[echoRule]
	ctx, stop := context.WithCancel(context.Background())
	echoed := make(chan error, 1)
	go func() { echoed <- echoGroup(ctx, server, sqp, scq, &rule) }()
	defer func() {
		stop()
		if err := <-echoed; err != nil {
			b.Error(err)
		}
	}()
	const size = 64
	copy(client.mem[512<<10:], strings.Repeat("p", size))
	for _, tc := range []struct {
		name       string
		ping       netip.Addr // where the client sends
		serverHear netip.Addr // whom the server answers
		pong       netip.Addr // where the server answers
		clientHear netip.Addr // whom the client takes the answer from
	}{
		{"direct", groups[0], client.ip, groups[1], server.ip},
		{"gateway", groups[2], netip.MustParseAddr(lo("2")), groups[3], netip.MustParseAddr(lo("1"))},
		{"gateway_busy_poll", groups[4], netip.MustParseAddr(lo("6")), groups[5], netip.MustParseAddr(lo("5"))},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rule.Store(&echoRule{src: tc.serverHear, reply: tc.pong})
			b.SetBytes(2 * size)
			b.ReportAllocs()
			var wcs [4]transport.WC
			for b.Loop() {
				if err := cqp.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: transport.SGE{MR: client.mr, Offset: 512 << 10, Length: size},
					UD: &transport.UDDest{Addr: netip.AddrPortFrom(tc.ping, roce.Port), QPN: transport.MulticastQPN, QKey: cm.RDMAUDPQKey}}); err != nil {
					b.Fatal(err)
				}
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				for answered := false; !answered; {
					n, err := ccq.PollWait(wctx, wcs[:])
					if err != nil {
						cancel()
						b.Fatalf("no answer from %v: %v", tc.clientHear, err)
					}
					for _, wc := range wcs[:n] {
						answered = answered || (wc.Status == transport.StatusSuccess && wc.Src.Addr() == tc.clientHear && wc.ByteLen == size)
						if err := cqp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: client.mr, Offset: 4096 * int(wc.ID), Length: 4096}}); err != nil {
							b.Fatal(err)
						}
					}
				}
				cancel()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "us/roundtrip")
		})
	}
}

// echoGroup answers the datagrams qp receives from the rule's source to
// the rule's group, with the same payload, until ctx ends; others (the
// copies a looped wire brings) it takes and drops.
func echoGroup(ctx context.Context, a *cmApp, qp *transport.QP, cq *transport.CQ, rule *atomic.Pointer[echoRule]) error {
	var wcs [16]transport.WC
	for {
		n, err := cq.PollWait(ctx, wcs[:])
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("echo: %w", err)
		}
		r := rule.Load()
		for _, wc := range wcs[:n] {
			off := 4096 * int(wc.ID)
			if r != nil && wc.Status == transport.StatusSuccess && wc.Src.Addr() == r.src {
				if err := qp.PostSend(transport.SendWR{Opcode: transport.OpSend, Local: transport.SGE{MR: a.mr, Offset: off, Length: wc.ByteLen},
					UD: &transport.UDDest{Addr: netip.AddrPortFrom(r.reply, roce.Port), QPN: transport.MulticastQPN, QKey: cm.RDMAUDPQKey}}); err != nil {
					return fmt.Errorf("echo to %v: %w", r.reply, err)
				}
			}
			// A UD PostSend has written the datagram out: the buffer
			// takes the next one.
			if err := qp.PostRecv(transport.RecvWR{ID: wc.ID, Local: transport.SGE{MR: a.mr, Offset: off, Length: 4096}}); err != nil {
				return fmt.Errorf("echo: %w", err)
			}
		}
	}
}
