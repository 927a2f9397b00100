package transport

import "testing"

// TestRoomForKeepsItsArray: a queue kept full, popped at its front and
// appended to at its end, keeps its order and stops taking new arrays once
// its array holds twice its length; what was popped is not reachable from
// the array.
func TestRoomForKeepsItsArray(t *testing.T) {
	var q, arr []*int
	next, head := 0, 0 // the next value appended, the value at the front
	arrays := 0
	for round := range 10000 {
		n := 1 + round%7 // appended this round
		before := len(arr)
		q = roomFor(q, &arr, n)
		if len(arr) != before && round >= 100 {
			arrays++ // after the queue reached its window
		}
		if cap(q)-len(q) < n {
			t.Fatalf("round %d: room for %d, want %d", round, cap(q)-len(q), n)
		}
		for range n {
			v := next
			next++
			q = append(q, &v)
		}
		for len(q) > 40 { // popped down to a window of 40
			if *q[0] != head {
				t.Fatalf("round %d: front %d, want %d: out of order", round, *q[0], head)
			}
			head++
			q[0] = nil
			q = q[1:]
		}
		live := 0
		for _, p := range arr {
			if p != nil {
				live++
			}
		}
		if live != len(q) {
			t.Fatalf("round %d: %d values reachable from the array, %d in the queue", round, live, len(q))
		}
	}
	if arrays > 0 {
		t.Errorf("%d arrays made after the queue reached its window of 40 (at most 47 with a round's), want none", arrays)
	}
	if n := testing.AllocsPerRun(100, func() {
		q = roomFor(q, &arr, 7)
		for range 7 {
			q = append(q, nil)
		}
		clear(q[:7])
		q = q[7:]
	}); n != 0 {
		t.Errorf("%v allocations a round once the array holds the window, want 0", n)
	}
}
