//go:build linux && cgo

package ibv

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// TestWaitReadDeadline: a wait that ends because its context's deadline
// passed says so (context.DeadlineExceeded), every time: the file's own
// deadline, set from the context's, fires first now and then, and used to
// come back as "i/o timeout".
func TestWaitReadDeadline(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for i := range 200 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		err := waitRead(ctx, r, func() bool { return false })
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait %d past its context's deadline: %v, want context.DeadlineExceeded", i, err)
		}
	}
}
