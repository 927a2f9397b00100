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
// polls, MinNap doubling to MaxNap (one quiet spell counted), and returns
// the first poll that finds work; without an Idle it never pauses; a
// context that ends ends a napping wait. On a clock of its own, each poll
// taking 10 us of it, so that what it checks does not hang on the
// machine's speed.
func TestSpinWaitNaps(t *testing.T) {
	const (
		step  = 10 * time.Microsecond // a poll
		quiet = 60 * time.Millisecond // the spell: work found from then on
		idle  = 2 * time.Millisecond
	)
	type run struct {
		polls   int
		naps    []time.Duration // each sleep, in order
		firstAt time.Duration   // when the first began
		err     error
		n       int
	}
	wait := func(s Spin, ctx context.Context, cancelAt time.Duration, cancel func()) run {
		var r run
		var clock time.Duration
		start := time.Unix(1e9, 0)
		now := func() time.Time { return start.Add(clock) }
		sleep := func(d time.Duration) {
			if len(r.naps) == 0 {
				r.firstAt = clock
			}
			r.naps = append(r.naps, d)
			clock += d
		}
		r.n, r.err = s.wait(ctx, func() (int, error) {
			r.polls++
			clock += step
			if cancel != nil && clock >= cancelAt {
				cancel()
			}
			if clock >= quiet {
				return 1, nil
			}
			return 0, nil
		}, now, sleep)
		return r
	}

	var naps atomic.Uint64
	r := wait(Spin{On: true, CPU: -1, Idle: idle, Naps: &naps}, context.Background(), 0, nil)
	if r.n != 1 || r.err != nil {
		t.Fatalf("napping wait: %d, %v; want the poll that found work", r.n, r.err)
	}
	if r.firstAt < idle || r.firstAt > idle+2*step {
		t.Errorf("the first nap began %v into the spell; want at Idle (%v), within two polls", r.firstAt, idle)
	}
	for i, d := range r.naps {
		want := MinNap << i
		if i >= 5 || want > MaxNap {
			want = MaxNap
		}
		if d != want {
			t.Fatalf("nap %d of %d was %v, want %v (MinNap %v doubling to MaxNap %v): %v", i, len(r.naps), d, want, MinNap, MaxNap, r.naps)
		}
	}
	// From Idle to the end, one poll per nap and one more that found
	// work: about (60 - 2 ms) / 1 ms, not the thousands of a spin.
	if spun := int(idle / step); r.polls-spun != len(r.naps)+1 || len(r.naps) < 50 || len(r.naps) > 65 {
		t.Errorf("%d polls and %d naps in a 60 ms spell napping after 2 ms; want %d polls spinning, then one per nap, 50-65 naps", r.polls, len(r.naps), spun)
	}
	if naps.Load() != 1 {
		t.Errorf("one quiet spell: %d naps counted", naps.Load())
	}

	if r := wait(Spin{On: true, CPU: -1}, context.Background(), 0, nil); len(r.naps) != 0 || r.polls != int(quiet/step) || r.n != 1 {
		t.Errorf("without Idle: %d naps, %d polls, returned %d; want no nap and %d polls, the last finding work", len(r.naps), r.polls, r.n, int(quiet/step))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r = wait(Spin{On: true, CPU: -1, Idle: time.Millisecond}, ctx, 5*time.Millisecond, cancel)
	if !errors.Is(r.err, context.Canceled) || r.n != 0 {
		t.Errorf("a napping wait whose context ended: %d, %v; want context.Canceled", r.n, r.err)
	}
	if len(r.naps) == 0 || r.polls > 1000 {
		t.Errorf("the ended wait napped %d times in %d polls; want it napping, and ending at the poll that ended its context", len(r.naps), r.polls)
	}
}
