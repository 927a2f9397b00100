package leg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
)

// TestSpinLoop: a poller added is called round after round; once its
// removal returned it is never called again; Close ends the loop, and its
// locked thread exits (unless it was the main thread, which Go parks).
func TestSpinLoop(t *testing.T) {
	l := NewSpinLoop(Spin{CPU: -1}, testlog.New(t))
	tid := l.Thread()
	if tid == 0 {
		t.Fatal("the loop names no thread")
	}
	var a, b atomic.Int64
	removeA := l.Add(func() bool { a.Add(1); return false })
	removeB := l.Add(func() bool { b.Add(1); return false })
	for a.Load() < 1000 || b.Load() < 1000 {
		time.Sleep(time.Millisecond)
	}
	removeA()
	after := a.Load()
	for start := b.Load(); b.Load() < start+1000; {
		time.Sleep(time.Millisecond)
	}
	if got := a.Load(); got != after {
		t.Errorf("a removed poller was called %d more times", got-after)
	}
	removeA() // twice: nothing
	l.Close()
	l.Close() // idempotent
	removeB() // after Close: returns
	if tid == os.Getpid() {
		return // the main thread: parked, not gone
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", tid)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loop's thread %d still exists 5 s after Close", tid)
		}
	}
}

// TestSpinLoopNaps: a loop with an Idle spins while its poller finds
// work and for Idle after, then naps: its rounds fall from the spinning
// rate to at most one per MinNap (in fact about one per MaxNap), its
// status says "napping" and Naps counts the spell; the first round that
// finds work has it spin again; a loop without Idle never naps.
func TestSpinLoopNaps(t *testing.T) {
	const idle = 20 * time.Millisecond
	l := NewSpinLoop(Spin{CPU: -1, Idle: idle}, testlog.New(t))
	defer l.Close()
	var rounds atomic.Int64
	var work atomic.Bool
	l.Add(func() bool { rounds.Add(1); return work.Load() })

	// roundsIn counts the loop's rounds over d.
	roundsIn := func(d time.Duration) int64 {
		start := rounds.Load()
		time.Sleep(d)
		return rounds.Load() - start
	}
	waitNapping := func(want bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); strings.HasSuffix(l.Describe(), "napping") != want; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the loop's status %q 5 s on; want napping %v", l.Describe(), want)
			}
		}
	}
	waitNapping(true)
	if n := l.Naps(); n != 1 {
		t.Errorf("Naps() = %d after one quiet spell, want 1", n)
	}
	// At most one round per MinNap while napping: 2000 in 100 ms (each
	// round that finds nothing sleeps at least that). A loop that spins
	// makes far more: millions of these rounds a second.
	const window = 100 * time.Millisecond
	if n, most := roundsIn(window), int64(window/MinNap); n > most {
		t.Errorf("%d rounds in %v while napping; want at most %d (one per %v)", n, window, most, MinNap)
	}

	work.Store(true)
	waitNapping(false)
	if n := l.Naps(); n != 1 {
		t.Errorf("Naps() = %d while working, want 1", n)
	}
	work.Store(false)
	waitNapping(true)
	if n := l.Naps(); n != 2 {
		t.Errorf("Naps() = %d after a second quiet spell, want 2", n)
	}

	// Without Idle: no nap, however long nothing is found.
	never := NewSpinLoop(Spin{CPU: -1}, testlog.New(t))
	defer never.Close()
	var neverRounds atomic.Int64
	never.Add(func() bool { neverRounds.Add(1); return false })
	time.Sleep(5 * idle)
	if n := never.Naps(); n != 0 || strings.Contains(never.Describe(), "nap") {
		t.Errorf("a loop without Idle: Naps() = %d, status %q; want 0 and no naps said", n, never.Describe())
	}
}

// TestSpinWaitNaps: a group's busy-polled wait (Spin.Wait) with an Idle
// polls without pause until the spell is that long, then naps between
// polls (one quiet spell counted), and returns the first poll that finds
// work; without an Idle it never pauses; a context that ends ends a
// napping wait.
func TestSpinWaitNaps(t *testing.T) {
	const quiet = 60 * time.Millisecond
	wait := func(s Spin) (late int) {
		t.Helper()
		start := time.Now()
		n, err := s.Wait(context.Background(), func() (int, error) {
			since := time.Since(start)
			if since >= quiet {
				return 1, nil
			}
			if since >= 10*time.Millisecond {
				late++ // a poll well after the Idle below
			}
			return 0, nil
		})
		if n != 1 || err != nil {
			t.Fatalf("wait: %d, %v; want the poll that found work", n, err)
		}
		return late
	}
	var naps atomic.Uint64
	// From 10 ms to 60 ms at least 50 us and at most 1 ms apart: 50
	// polls and a few of the first doubling naps, not thousands.
	if late := wait(Spin{On: true, CPU: -1, Idle: 2 * time.Millisecond, Naps: &naps}); late > 200 || late < 5 {
		t.Errorf("napping after 2 ms: %d polls in the last 50 ms of a 60 ms spell, want about 50 (naps of 50 us doubling to 1 ms)", late)
	}
	if naps.Load() != 1 {
		t.Errorf("one quiet spell: %d naps counted", naps.Load())
	}
	if late := wait(Spin{On: true, CPU: -1}); late < 1000 {
		t.Errorf("never napping: %d polls in the last 50 ms of a 60 ms spell, want it spinning", late)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := (Spin{On: true, CPU: -1, Idle: time.Millisecond}).Wait(ctx, func() (int, error) { return 0, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a napping wait whose context ended: %v", err)
	}
}
