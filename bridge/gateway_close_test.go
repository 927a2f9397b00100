package bridge_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/integration/guest"
	"github.com/rbridge/rbridge/internal/testlog"
)

// openGateway starts a gateway on cfg's legs that the test closes itself
// (startGateway's cleanup closes it again).
func openGateway(t *testing.T) *bridge.Gateway {
	t.Helper()
	if guest.InGuest() {
		t.Skip("the kernel's rxe owns UDP 4791 in the guest's initial namespace: these loopback gateways run on the host")
	}
	g, err := bridge.StartGateway(bridge.GatewayOptions{Config: gatewayConfig(t, ""), Logger: testlog.New(t), ConnectTimeout: 2 * time.Second,
		Pool: pool.Options{Size: 8 << 20, Trace: true}})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGatewayCloseIdleAtOnce: with no session, Close under a context
// already done (rbridge run --drain 0) or about to be (1ns) closes
// cleanly: the wait it bounds is the sessions', not the gateway's own
// accept loops', which end on Close whatever the context ("sessions still
// ending: context deadline exceeded" before, with none there).
func TestGatewayCloseIdleAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		drain time.Duration
	}{{"0", 0}, {"1ns", time.Nanosecond}} {
		t.Run(tc.name, func(t *testing.T) {
			g := openGateway(t)
			ctx, cancel := context.WithTimeout(context.Background(), tc.drain)
			defer cancel()
			<-ctx.Done()
			if err := g.Close(ctx); err != nil {
				t.Errorf("close with no session, drain %v: %v", tc.drain, err)
			}
			if s := g.RunState(); s != bridge.StateStopped {
				t.Errorf("after Close: %q, want stopped", s)
			}
		})
	}
}

// TestGatewayCloseCutsSessions: a session whose connection is still
// closing when the context ends (its client vanished: no one answers the
// gateway's disconnect) is cut, and Close says how many were, as
// ErrSessionsCut, at once rather than after the disconnect's retries. (Its
// target's connection is cut too: the session disconnects one side after
// the other, and the client's side holds the first.)
func TestGatewayCloseCutsSessions(t *testing.T) {
	client, target := newCMApp(t, lo("3")), newCMApp(t, lo("4"))
	ln, err := target.cm.Listen(7471, 8)
	if err != nil {
		t.Fatal(err)
	}
	g := openGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sessionThrough(t, ctx, client, target, ln)
	client.cm.Close()
	client.dev.Close() // the client is gone: no DREP will answer the gateway's DREQ
	dctx, dcancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer dcancel()
	start := time.Now()
	err = g.Close(dctx)
	if !errors.Is(err, bridge.ErrSessionsCut) || !strings.Contains(err.Error(), "1 sessions still closing") {
		t.Errorf("close with a session whose client vanished: %v, want ErrSessionsCut naming 1", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("Close took %v under a 100 ms drain", el)
	}
}
