package bridge_test

import (
	"testing"
	"time"
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
