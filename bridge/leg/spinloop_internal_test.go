package leg

import (
	"fmt"
	"os"
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
	removeA := l.Add(func() { a.Add(1) })
	removeB := l.Add(func() { b.Add(1) })
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
