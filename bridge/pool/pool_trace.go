package pool

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
)

// bufTrace is Options.Trace's record of a class: for each buffer, its
// last few events with the call stack that made each.
type bufTrace struct {
	mu   sync.Mutex
	bufs [][traceDepth]traceEvent // by buffer index; a ring each
	next []uint32
}

// traceDepth is the events kept per buffer: enough to see a Get, the
// references a relay took and the releases that did or did not follow.
const traceDepth = 8

type traceKind uint8

const (
	traceGet traceKind = iota + 1
	traceRef
	traceRelease
)

func (k traceKind) String() string {
	switch k {
	case traceGet:
		return "get"
	case traceRef:
		return "ref"
	case traceRelease:
		return "release"
	}
	return "?"
}

type traceEvent struct {
	kind traceKind
	refs int32 // the count after the event
	pcs  [8]uintptr
}

func newBufTrace(n int) *bufTrace {
	return &bufTrace{bufs: make([][traceDepth]traceEvent, n), next: make([]uint32, n)}
}

// record notes an event on buffer i, with its caller's stack.
func (t *bufTrace) record(i int, k traceKind, refs int32) {
	e := traceEvent{kind: k, refs: refs}
	runtime.Callers(3, e.pcs[:]) // above record and Get/Ref/Release
	t.mu.Lock()
	t.bufs[i][t.next[i]%traceDepth] = e
	t.next[i]++
	t.mu.Unlock()
}

// held describes the events of c's buffers still referenced, oldest
// first, at most 8 buffers.
func (t *bufTrace) held(c *sizeClass) string {
	free := make(map[int32]bool, len(c.bufs))
	c.heldMu.Lock()
	for _, i := range append(slices.Clone(c.kept), c.reserved...) {
		free[i] = true
	}
	c.heldMu.Unlock()
	for k := range c.shards {
		sh := &c.shards[k]
		sh.mu.Lock()
		for _, i := range sh.free {
			free[i] = true
		}
		sh.mu.Unlock()
	}
	var sb strings.Builder
	t.mu.Lock()
	defer t.mu.Unlock()
	shown := 0
	for i := range c.bufs {
		if free[int32(i)] {
			continue
		}
		if shown == 8 {
			sb.WriteString("  (more not shown)\n")
			break
		}
		shown++
		fmt.Fprintf(&sb, "  buffer at arena offset %d (%d references):\n", c.bufs[i].off, c.bufs[i].refs.Load())
		n := int(t.next[i])
		for j := max(0, n-traceDepth); j < n; j++ {
			e := t.bufs[i][j%traceDepth]
			fmt.Fprintf(&sb, "    %v -> %d:%s\n", e.kind, e.refs, stack(e.pcs[:]))
		}
	}
	return sb.String()
}

// stack names the functions of pcs, innermost first.
func stack(pcs []uintptr) string {
	var sb strings.Builder
	frames := runtime.CallersFrames(pcs)
	for {
		f, more := frames.Next()
		if f.Function != "" {
			name := f.Function
			if i := strings.LastIndex(name, "/"); i >= 0 {
				name = name[i+1:]
			}
			fmt.Fprintf(&sb, " %s:%d", name, f.Line)
		}
		if !more {
			break
		}
	}
	return sb.String()
}
