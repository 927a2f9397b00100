package leg

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestXDPQueues: an AF_XDP leg binds every receive queue by default, its
// queues key when it has one, never more than the interface has; its
// rings shrink as queues grow so that they take at most half the pool's
// 4 KiB class, down to 32 entries, and past that the leg is refused.
func TestXDPQueues(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		queues, nq, want int
		err              string
	}{
		{0, 8, 8, ""},
		{4, 8, 4, ""},
		{8, 8, 8, ""},
		{9, 8, 0, "queues 9: eth1 has 8"},
		{0, 300, 0, "more than the 256 AF_XDP sockets"},
	} {
		got, why, err := xdpQueues(&config.Leg{Name: "roce", Queues: tc.queues}, tc.nq, "eth1 has 8", quiet)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("queues %d of %d: %v, want an error with %q", tc.queues, tc.nq, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || why == "" {
			t.Errorf("queues %d of %d: %d (%q), %v; want %d", tc.queues, tc.nq, got, why, err, tc.want)
		}
	}
	// The default pool's 4 KiB class: 128 MiB over three classes.
	frames := (128 << 20) / 3 / 4096
	for _, tc := range []struct{ queues, want int }{{1, 512}, {2, 512}, {4, 512}, {8, 256}, {16, 128}, {64, 32}} {
		got, err := xdpRing(tc.queues, frames)
		if err != nil || got != tc.want {
			t.Errorf("%d queues over %d frames: ring %d, %v; want %d", tc.queues, frames, got, err, tc.want)
		}
		if got*2*tc.queues > frames/2 {
			t.Errorf("%d queues: rings of %d take %d frames, more than half of %d", tc.queues, got, got*2*tc.queues, frames)
		}
	}
	if _, err := xdpRing(128, frames); err == nil || !strings.Contains(err.Error(), "fewer queues") {
		t.Errorf("128 queues over %d frames: %v, want refused", frames, err)
	}
}
