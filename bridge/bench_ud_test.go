package bridge_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
)

// BenchmarkUDThroughVsDirect: datagrams of 256 bytes from a UD client to
// a UD service of rbridge's transport on loopback, one at a time (each
// received before the next leaves: UD has no flow control to keep a
// window from overrunning the receives), direct and through a gateway of
// two userspace legs, in one run.
func BenchmarkUDThroughVsDirect(b *testing.B) {
	client, target := newCMApp(b, lo("3")), newCMApp(b, lo("4"))
	ln, err := target.cm.ListenUD(7174, 4)
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	tqp, tcq := target.udQP(b, 16)
	go func() {
		for {
			req, err := ln.Next(context.Background())
			if err != nil {
				return
			}
			_ = req.Accept(cm.SIDRAcceptOptions{QP: tqp})
		}
	}()
	g := startGatewayWith(b, udConfig(b), bridge.GatewayOptions{})
	_ = g
	cqp, _ := client.udQP(b, 1)
	const size = 256
	for _, tc := range []struct {
		name string
		to   netip.AddrPort
	}{
		{"direct", netip.AddrPortFrom(target.ip, 7174)},
		{"gateway", netip.AddrPortFrom(netip.MustParseAddr(lo("1")), 7174)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			svc, err := client.cm.ResolveUD(ctx, tc.to, cm.ResolveOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(size)
			b.ReportAllocs()
			var wcs [1]transport.WC
			for b.Loop() {
				client.sendUD(b, cqp, svc.Addr.Addr(), svc.QPN, cqp.QPN(), size, 'x')
				if _, err := tcq.PollWait(ctx, wcs[:]); err != nil {
					b.Fatalf("datagram lost: %v", err)
				}
				if err := tqp.PostRecv(transport.RecvWR{ID: wcs[0].ID, Local: transport.SGE{MR: target.mr, Offset: 4096 * int(wcs[0].ID), Length: 4096}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "datagrams/s")
		})
	}
}
