// Package testlog gives tests a slog.Logger that fails the test on every
// record at error level: an invariant break that the code only logs is a
// bug the test must see, not a line in io.Discard.
package testlog

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// New returns a logger for t. Records at error level fail t (t.Errorf)
// unless their message contains one of the expected substrings. Records
// from RBRIDGE_TEST_LOG's level up (debug, info, warn) are written with
// t.Log as they come, to trace a failure. Without it, the last Kept
// records at info and warn level are kept, and written only should t
// fail: a failure that came once in CI says what the code logged before
// it. Records logged after t's cleanup began (goroutines winding down)
// are dropped.
func New(t testing.TB, expected ...string) *slog.Logger {
	h := &handler{s: &state{t: t, expected: expected, verbose: verbose()}}
	t.Cleanup(func() {
		h.s.mu.Lock()
		h.s.done = true
		kept := h.s.kept()
		h.s.mu.Unlock()
		if t.Failed() && len(kept) > 0 {
			t.Logf("the last %d log records (info and warn; RBRIDGE_TEST_LOG=debug writes every record as it comes):\n%s",
				len(kept), strings.Join(kept, "\n"))
		}
	})
	return slog.New(h)
}

// Kept is how many of the last records below RBRIDGE_TEST_LOG's level
// (info and warn) a logger keeps for a failure.
const Kept = 200

type state struct {
	t        testing.TB
	expected []string
	mu       sync.Mutex // guards done and calls into t
	done     bool
	verbose  slog.Level // records from this level up are t.Log'ed
	// ring holds the last Kept records below verbose (from info up),
	// formatted; next is where the next goes once it is full.
	ring []string
	next int
}

// kept is the ring's records, oldest first. s.mu must be held.
func (s *state) kept() []string {
	return append(append([]string(nil), s.ring[s.next:]...), s.ring[:s.next]...)
}

// verbose is the level RBRIDGE_TEST_LOG names, or error (nothing more
// than the failures).
func verbose() slog.Level {
	var l slog.Level
	if v := os.Getenv("RBRIDGE_TEST_LOG"); v != "" && l.UnmarshalText([]byte(v)) == nil {
		return l
	}
	return slog.LevelError
}

type handler struct {
	s     *state
	attrs []slog.Attr
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool {
	return l >= min(slog.LevelInfo, h.s.verbose)
}

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	fails := r.Level >= slog.LevelError
	for _, e := range h.s.expected {
		if strings.Contains(r.Message, e) {
			fails = false
		}
	}
	var b strings.Builder
	b.WriteString(r.Time.Format("15:04:05.000000") + " " + r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	switch {
	case h.s.done:
	case !fails && r.Level < h.s.verbose:
		if len(h.s.ring) < Kept {
			h.s.ring = append(h.s.ring, b.String())
		} else {
			h.s.ring[h.s.next] = b.String()
			h.s.next = (h.s.next + 1) % Kept
		}
	case !fails:
		h.s.t.Log(b.String())
	default:
		h.s.t.Errorf("logged at error level: %s", b.String())
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{s: h.s, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *handler) WithGroup(string) slog.Handler { return h }
