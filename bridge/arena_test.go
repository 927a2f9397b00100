package bridge_test

import (
	"testing"

	"github.com/rbridge/rbridge/bridge"
)

func TestMapArena(t *testing.T) {
	a, err := bridge.MapArena(3<<20+1, bridge.ArenaOptions{})
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
		if _, err := bridge.MapArena(n, bridge.ArenaOptions{}); err == nil {
			t.Errorf("MapArena(%d): no error", n)
		}
	}
}
