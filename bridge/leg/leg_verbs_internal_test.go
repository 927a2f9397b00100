package leg

import (
	"bytes"
	"context"
	"net/netip"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/testlog"
)

// TestGuestVerbsAcceptedConnLeavesNoGoroutine: a connection the verbs
// leg accepted, then disconnected itself first (its session ended from
// the other leg), leaves no goroutine behind: its DISCONNECTED event comes
// after the listener forgot it, and the watch of the connection must end
// all the same.
func TestGuestVerbsAcceptedConnLeavesNoGoroutine(t *testing.T) {
	ib := guest.IB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pl, err := pool.New(pool.Options{Size: 8 << 20, Classes: []int{4 << 10, 64 << 10}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	lg, err := OpenVerbs(&config.Leg{Name: "ib", Kind: config.KindVerbs, IP: ib.GatewayIP, Device: ib.GatewayDevice}, pl, testlog.New(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lg.Close() })
	addr := netip.AddrPortFrom(ib.GatewayIP, 7191)
	ln, err := lg.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })

	// The IB-side client, on the fabric's other device.
	ch, err := ibv.NewEventChannel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close() })
	id, err := ch.NewID(ibv.PortSpaceTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveAddr(ib.PeerIP, addr, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Expect(ctx, ibv.CMAddrResolved); err != nil {
		t.Fatal(err)
	}
	if err := id.ResolveRoute(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Expect(ctx, ibv.CMRouteResolved); err != nil {
		t.Fatal(err)
	}
	dev, err := id.Device()
	if err != nil {
		t.Fatal(err)
	}
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Close() })
	cq, err := dev.NewCQ(ibv.CQOptions{Entries: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cq.Close() })
	if _, err := id.CreateQP(pd, ibv.QPOptions{Type: ibv.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: ibv.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		t.Fatal(err)
	}

	time.Sleep(100 * time.Millisecond) // the listener's goroutines run
	before := runtime.NumGoroutine()
	if err := id.Connect(ibv.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7, NoMTUTrailer: true}); err != nil {
		t.Fatal(err)
	}
	established := make(chan error, 1)
	go func() { // librdmacm answers the accept while the client reads its events
		_, err := ch.Expect(ctx, ibv.CMEstablished)
		established <- err
	}()
	in, err := ln.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c, err := in.Accept(ctx, Params{RespRes: 1, InitDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-established; err != nil {
		t.Fatal(err)
	}
	// The gateway disconnects first.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.Expect(ctx, ibv.CMDisconnected); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			var b bytes.Buffer
			pprof.Lookup("goroutine").WriteTo(&b, 1)
			t.Fatalf("%d goroutines after the connection closed, %d before it\n%s", runtime.NumGoroutine(), before, b.String())
		}
	}
}
