// Package testlog gives tests a slog.Logger that fails the test on every
// record at error level: an invariant break that the code only logs is a
// bug the test must see, not a line in io.Discard.
package testlog

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// New returns a logger for t. Records at error level fail t (t.Errorf)
// unless their message contains one of the expected substrings; lower
// levels are dropped. Records logged after t's cleanup began (goroutines
// winding down) are dropped.
func New(t testing.TB, expected ...string) *slog.Logger {
	h := &handler{s: &state{t: t, expected: expected}}
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
}

type handler struct {
	s     *state
	attrs []slog.Attr
}

func (h *handler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }

func (h *handler) Handle(_ context.Context, r slog.Record) error {
	for _, e := range h.s.expected {
		if strings.Contains(r.Message, e) {
			return nil
		}
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
	if !h.s.done {
		h.s.t.Errorf("logged at error level: %s", b.String())
	}
	return nil
}

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{s: h.s, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *handler) WithGroup(string) slog.Handler { return h }
