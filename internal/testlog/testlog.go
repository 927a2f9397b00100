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
// unless their message contains one of the expected substrings; lower
// levels are dropped, unless RBRIDGE_TEST_LOG names a level (debug,
// info, warn): records from it up are then written with t.Log, to trace
// a failure. Records logged after t's cleanup began (goroutines winding
// down) are dropped.
func New(t testing.TB, expected ...string) *slog.Logger {
	h := &handler{s: &state{t: t, expected: expected, verbose: verbose()}}
	t.Cleanup(func() {
		h.s.mu.Lock()
		h.s.done = true
		h.s.mu.Unlock()
	})
	return slog.New(h)
}

type state struct {
	t        testing.TB
	expected []string
	mu       sync.Mutex // guards done and calls into t
	done     bool
	verbose  slog.Level // records from this level up are t.Log'ed
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
	return l >= slog.LevelError || l >= h.s.verbose
}

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	fails := r.Level >= slog.LevelError
	for _, e := range h.s.expected {
		if strings.Contains(r.Message, e) {
			fails = false
		}
	}
	if !fails && r.Level < h.s.verbose {
		return nil
	}
	var b strings.Builder
	b.WriteString(r.Message)
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
	case !fails:
		h.s.t.Logf("%s %s %s", r.Time.Format("15:04:05.000000"), r.Level, b.String())
	default:
		h.s.t.Errorf("logged at error level: %s", b.String())
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{s: h.s, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *handler) WithGroup(string) slog.Handler { return h }
