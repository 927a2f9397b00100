package harness

import (
	"testing"
	"time"
)

// A benchmark that logs nothing gets a run event and no end event; it
// passed if the binary did.
func TestBenchmarkWithoutEndEvent(t *testing.T) {
	p := &Pass{running: map[string]time.Time{}}
	for _, e := range []Event{
		{Action: "run", Test: "BenchmarkX"},
		{Action: "output", Test: "BenchmarkX", Output: "BenchmarkX-2 \t 100\t 10 ns/op\n"},
		{Action: "pass"},
	} {
		p.event(e)
	}
	p.finish(0)
	if p.Passed != 1 || p.Failed != 0 {
		t.Errorf("passed %d failed %d, want 1 and 0", p.Passed, p.Failed)
	}
	q := &Pass{running: map[string]time.Time{}}
	q.event(Event{Action: "run", Test: "BenchmarkY"})
	q.finish(2)
	if q.Failed != 1 {
		t.Errorf("benchmark of a failed binary: failed %d, want 1", q.Failed)
	}
}
