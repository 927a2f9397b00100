package transport

import (
	"context"
	"errors"
	"sync"
)

// ErrCQOverflow is reported when a completion found its CQ full: Wait and
// PollWait return it once the completions queued before are taken, the QP
// whose completion was lost is in the error state, and its Device reports
// an EventCQError (Device.AsyncEvent), as verbs does.
var ErrCQOverflow = errors.New("completion queue overflow")

// MaxCQDepth is the deepest CQ NewCQ makes (verbs devices have such a
// limit too, ibv_device_attr.max_cqe).
const MaxCQDepth = 1 << 17

// CQ is a completion queue of fixed depth.
type CQ struct {
	mu       sync.Mutex // guards the fields below
	ring     []WC
	head, n  int
	overflow bool

	notify chan struct{} // a token when the queue goes from empty to not empty
}

// NewCQ returns a completion queue that holds depth completions.
// A depth below 1 is 1 and one above MaxCQDepth is MaxCQDepth.
func NewCQ(depth int) *CQ {
	depth = min(max(depth, 1), MaxCQDepth)
	return &CQ{ring: make([]WC, depth), notify: make(chan struct{}, 1)}
}

// push appends a completion and wakes a waiter; it reports false when the
// queue is full.
func (c *CQ) push(wc WC) bool {
	if !c.pushQuiet(wc) {
		return false
	}
	c.signal()
	return true
}

// pushQuiet appends a completion without waking a waiter: the caller
// signals once it has pushed a batch. It reports false when the queue is
// full.
func (c *CQ) pushQuiet(wc WC) bool {
	c.mu.Lock()
	if c.n == len(c.ring) {
		c.overflow = true
		c.mu.Unlock()
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = wc
	c.n++
	c.mu.Unlock()
	return true
}

// signal wakes a waiter, if any, to look at the queue.
func (c *CQ) signal() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Poll moves up to len(wcs) completions into wcs and returns how many.
func (c *CQ) Poll(wcs []WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(wcs) && c.n > 0 {
		wcs[n] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		n++
	}
	return n
}

// Overflowed reports whether a completion was ever lost to a full queue.
func (c *CQ) Overflowed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.overflow
}

// Wait blocks until the queue holds a completion or ctx ends.
func (c *CQ) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, overflow := c.n, c.overflow
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if overflow {
			return ErrCQOverflow
		}
		select {
		case <-c.notify:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// PollWait polls, waiting for at least one completion.
func (c *CQ) PollWait(ctx context.Context, wcs []WC) (int, error) {
	for {
		if n := c.Poll(wcs); n > 0 {
			return n, nil
		}
		if err := c.Wait(ctx); err != nil {
			return 0, err
		}
	}
}
