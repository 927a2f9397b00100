package bridge_test

import (
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
)

// waitUntil polls cond until it holds, failing t after 5 s: for what a
// gateway does on goroutines of its own (a session ending, a counter).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitState polls g's state until cond holds, failing t after 5 s with the
// last state read: a buffer or an object a receive loop lets go just after
// the peer saw what it carried is counted until then.
func waitState(t *testing.T, g *bridge.Gateway, what string, cond func(bridge.GatewayState) bool) {
	t.Helper()
	s := g.State()
	for deadline := time.Now().Add(5 * time.Second); !cond(s); s = g.State() {
		if time.Now().After(deadline) {
			t.Fatalf("gateway state %+v: want %s, not within 5 s", s, what)
		}
		time.Sleep(time.Millisecond)
	}
}
