package leg

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestDialBackoff: waits double from 100 ms to 30 s, each with at most a
// quarter more at random, and start again after reset.
func TestDialBackoff(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var b dialBackoff
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond,
		3200 * time.Millisecond, 6400 * time.Millisecond, 12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second}
	jittered := false
	for i, w := range want {
		got := b.next(rng)
		if got < w || got > w+w/4 {
			t.Errorf("wait %d: %v, want %v to %v", i, got, w, w+w/4)
		}
		jittered = jittered || got != w
	}
	for range 100 { // far past the cap: no overflow
		if got := b.next(rng); got < dialMaxWait || got > dialMaxWait+dialMaxWait/4 {
			t.Fatalf("a wait past the cap: %v", got)
		}
	}
	if !jittered {
		t.Error("no wait had jitter")
	}
	b.reset()
	if got := b.next(rng); got > dialFirstWait+dialFirstWait/4 {
		t.Errorf("after reset: %v", got)
	}
}
