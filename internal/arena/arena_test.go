package arena_test

import (
	"testing"

	"github.com/rbridge/rbridge/internal/arena"
)

func TestMap(t *testing.T) {
	a, err := arena.Map(3<<20+1, arena.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("arena backing: %s", a.Backing())
	b := a.Bytes()
	if len(b) != 3<<20+1 {
		t.Errorf("arena of %d bytes, want %d", len(b), 3<<20+1)
	}
	b[0], b[len(b)-1] = 1, 2
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if a.Bytes() != nil {
		t.Errorf("Bytes after Close: %d bytes", len(a.Bytes()))
	}
	for _, n := range []int{0, -1} {
		if _, err := arena.Map(n, arena.Options{}); err == nil {
			t.Errorf("Map(%d): no error", n)
		}
	}
}
