package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/cpu"
)

// Options configures a Pool.
type Options struct {
	// Size is the arena's size in bytes (default 64 MiB).
	Size int
	// Classes are the buffer sizes, ascending powers of two (default 256,
	// 1 KiB, 4 KiB, 16 KiB, 64 KiB). Each class gets an equal share of the
	// arena.
	Classes []int
	// HugePages asks for explicit huge pages (MAP_HUGETLB); without them,
	// or when none are reserved, the arena asks for transparent huge pages.
	HugePages bool
	// Reserve is the share of each class's buffers (0 to 0.5) that only
	// GetReserve and GetWaitReserve take: at least one buffer of each
	// class when above 0. Whoever holds a buffer until another's work
	// is done must not be able to take the buffers that work needs: a
	// gateway that stages keeps a reserve for its staging, which
	// messages queued behind a staged one would otherwise fill.
	Reserve float64
	// Trace records, for every buffer, who last took, referenced and
	// released it (a few call stacks each); Close then names the holders
	// of any buffer still referenced. It slows every Get, Ref and Release:
	// it is for finding a leak, not for production.
	Trace bool
}

// ErrExhausted matches a Get that found its size class empty.
var ErrExhausted = errors.New("pool exhausted")

// ErrClosed matches a Get after Close: the arena is gone.
var ErrClosed = errors.New("pool closed")

// Pool is a refcounted buffer pool over one arena.
type Pool struct {
	arena   *Arena
	classes []*sizeClass
	closed  atomic.Bool
}

// A size class keeps its free buffers where the receive loops on
// different CPUs taking and releasing them at once do not meet (one lock
// per class made every Get and Release of every loop queue on it):
//
//   - in shards, each a stack under a lock of its own, two per P: a
//     Frames (a loop's) looks first in a shard of its own, a Get in its
//     P's (pHint), and a buffer goes back to the shard it came from; a
//     shard found empty sends the search on to the others;
//   - held back, apart from the shards: reserved, which only a reserve's
//     Get takes (Options.Reserve), and kept, which every Get takes but no
//     Frames (LendFrames' keep, less the reserve, which a Frames does
//     not take either). A release puts its buffer there first while
//     either is short of its target (short); otherwise neither is
//     touched.
//
// So a Get takes a buffer while one is free where it may look, and
// reports the class exhausted once it found none; under concurrent
// releases that search is not one instant (a buffer released into a
// shard it had passed is not seen). A GetWait looks again after it
// registered as waiting, so it misses no release.
type sizeClass struct {
	size int
	bufs []Buf // every buffer of the class, by index

	shards []shard       // len a power of two
	mask   uint32        // len(shards)-1
	next   atomic.Uint32 // the first shard of the next Frames

	heldMu   sync.Mutex   // guards reserved, kept, keep
	reserved []int32      // free buffers only a reserve's Get takes, up to reserve
	kept     []int32      // free buffers no Frames takes, up to keep
	keep     int          // the largest LendFrames keep less the reserve
	short    atomic.Bool  // reserved or kept below its target: set and cleared under heldMu
	heldN    atomic.Int32 // len(reserved)+len(kept): set under heldMu, read without it

	// reserve is how many buffers only a reserve's Get takes.
	reserve int

	waitMu sync.Mutex // guards wake
	// wake is closed, and replaced, by a release while a GetWait waits
	// (waiting): every waiter then looks again, so that two releases
	// wake two waiters, and a waiter that may not take the reserve does
	// not swallow the wake-up of one that may.
	wake    chan struct{}
	waiting atomic.Bool // set under waitMu; a release reads it once its buffer is back

	exhausted, overreleased atomic.Uint64

	trace *bufTrace // nil unless Options.Trace
}

// shard is a stack of a class's free buffers, on cache lines of its own.
type shard struct {
	_    cpu.CacheLinePad
	mu   sync.Mutex    // guards free
	free []int32       // indices of free buffers
	n    atomic.Int32  // len(free), read without mu to pass over an empty shard
	gets atomic.Uint64 // Gets that looked here first
	_    cpu.CacheLinePad
}

// maxShards bounds a class's shards; each starts with at least
// minShardBufs buffers, so a small class has one.
const (
	maxShards    = 64
	minShardBufs = 8
)

// shardsFor is how many shards a class of n buffers gets: two per P
// (GOMAXPROCS), a power of two, within maxShards and minShardBufs.
func shardsFor(n int) int {
	s := 1
	for s < 2*runtime.GOMAXPROCS(0) && s < maxShards {
		s <<= 1
	}
	for s > 1 && n/s < minShardBufs {
		s >>= 1
	}
	return s
}

// hints hands each P a number of its own (sync.Pool keeps one per P),
// from which a Get picks the shard it looks in first: the Gets of one P
// meet in their shards, those of different Ps rarely. Which number a P
// holds may change (a collection empties the pool); only speed depends
// on it.
var (
	hints    = sync.Pool{New: func() any { h := new(uint32); *h = hintNext.Add(1); return h }}
	hintNext atomic.Uint32
)

// pHint is the calling P's number (hints).
func pHint() uint32 {
	h := hints.Get().(*uint32)
	v := *h
	hints.Put(h)
	return v
}

// Buf is a buffer of the pool. Its memory is B(); it stays valid while a
// reference is held.
type Buf struct {
	class *sizeClass
	data  []byte
	off   int // offset in the arena
	refs  atomic.Int32
	shard uint32 // the shard it came from, where Release puts it back
}

// New maps the arena and carves it.
func New(opts Options) (*Pool, error) {
	if opts.Size == 0 {
		opts.Size = 64 << 20
	}
	if opts.Classes == nil {
		opts.Classes = []int{256, 1 << 10, 4 << 10, 16 << 10, 64 << 10}
	}
	if len(opts.Classes) == 0 {
		return nil, fmt.Errorf("bridge: pool without size classes")
	}
	if !slices.IsSorted(opts.Classes) {
		return nil, fmt.Errorf("bridge: pool classes %v are not ascending", opts.Classes)
	}
	for _, c := range opts.Classes {
		if c <= 0 || c&(c-1) != 0 {
			return nil, fmt.Errorf("bridge: pool class %d is not a power of two", c)
		}
	}
	if !(opts.Reserve >= 0 && opts.Reserve <= 0.5) {
		return nil, fmt.Errorf("bridge: pool reserve %v is not from 0 to 0.5", opts.Reserve)
	}
	share := opts.Size / len(opts.Classes) &^ (classAlign - 1)
	if share < opts.Classes[len(opts.Classes)-1] {
		return nil, fmt.Errorf("bridge: pool of %d bytes cannot hold one %d-byte buffer per class", opts.Size, opts.Classes[len(opts.Classes)-1])
	}
	a, err := MapArena(opts.Size, ArenaOptions{HugePages: opts.HugePages})
	if err != nil {
		return nil, fmt.Errorf("bridge: pool: %w", err)
	}
	p := &Pool{arena: a}
	arena := a.Bytes()
	off := 0
	for _, size := range opts.Classes {
		off = (off + classAlign - 1) &^ (classAlign - 1) // frames: page-aligned
		n := share / size
		ns := shardsFor(n)
		c := &sizeClass{size: size, bufs: make([]Buf, n), shards: make([]shard, ns), mask: uint32(ns - 1), wake: make(chan struct{})}
		if opts.Reserve > 0 {
			c.reserve = max(1, int(float64(n)*opts.Reserve))
		}
		if opts.Trace {
			c.trace = newBufTrace(n)
		}
		for i := range n {
			c.bufs[i] = Buf{class: c, data: arena[off : off+size : off+size], off: off}
			off += size
		}
		// The highest addresses are the reserve; the rest are spread
		// over the shards, lowest addresses first in each.
		c.reserved = make([]int32, 0, c.reserve)
		for i := n - 1; i >= n-c.reserve; i-- {
			c.reserved = append(c.reserved, int32(i))
		}
		c.heldN.Store(int32(len(c.reserved)))
		for h := range c.shards {
			sh := &c.shards[h]
			sh.free = make([]int32, 0, (n-c.reserve+ns-1)/ns)
			for i := n - c.reserve - 1; i >= 0; i-- {
				if i&(ns-1) == h {
					sh.free = append(sh.free, int32(i))
					c.bufs[i].shard = uint32(h)
				}
			}
			sh.n.Store(int32(len(sh.free)))
		}
		p.classes = append(p.classes, c)
	}
	return p, nil
}

// classAlign is where each class starts: on a page, so that buffers of a
// class of 4 KiB or more are AF_XDP frames.
const classAlign = 4096

// Arena returns the whole arena, for memory registration and as UMEM.
func (p *Pool) Arena() []byte { return p.arena.Bytes() }

// BufAt returns the buffer at offset off of the arena, if a buffer starts
// there.
func (p *Pool) BufAt(off uint64) (*Buf, bool) {
	for _, c := range p.classes {
		if b, ok := c.bufAt(off); ok {
			return b, true
		}
	}
	return nil, false
}

// bufAt returns the class's buffer that starts at arena offset off.
func (c *sizeClass) bufAt(off uint64) (*Buf, bool) {
	if len(c.bufs) == 0 || off < uint64(c.bufs[0].off) {
		return nil, false
	}
	d := off - uint64(c.bufs[0].off)
	if i := d / uint64(c.size); i < uint64(len(c.bufs)) && d%uint64(c.size) == 0 {
		return &c.bufs[i], true
	}
	return nil, false
}

// Frames returns the pool's buffers of exactly size bytes as the frames of
// an AF_XDP UMEM over the arena (xdp.ConnOptions.Frames): a frame is a
// buffer with one reference, so a frame lent to a session and referenced
// by it returns to the pool only when both let go.
func (p *Pool) Frames(size int) (*Frames, error) {
	for _, c := range p.classes {
		if c.size == size {
			return &Frames{c: c, first: c.next.Add(1) - 1}, nil
		}
	}
	return nil, fmt.Errorf("bridge: the pool has no class of %d-byte buffers for AF_XDP frames", size)
}

// LendFrames is Frames for a conn that lends what it reads into them
// (udpconn.Options.Frames): AllocFrame leaves keep of the class's
// buffers (0 to 1) free for everything else, so packets held by slow
// sessions, each perhaps far shorter than its frame, cannot take the
// whole class.
func (p *Pool) LendFrames(size int, keep float64) (*Frames, error) {
	if !(keep >= 0 && keep <= 1) {
		return nil, fmt.Errorf("bridge: frames that keep %v of their class free: want 0 to 1", keep)
	}
	f, err := p.Frames(size)
	if err != nil {
		return nil, err
	}
	f.c.keepFree(int(float64(len(f.c.bufs)) * keep))
	return f, nil
}

// Frames is a pool's size class serving as AF_XDP frames: one for each
// socket (each receive loop), which looks for free frames in a shard of
// its own first. No Frames takes the class's reserve, nor what a
// LendFrames keeps free: while the class holds as many free buffers as
// the larger of the two, AllocFrame finds none.
type Frames struct {
	c     *sizeClass
	first uint32 // the shard AllocFrame looks in first
}

// AllocFrame implements xdp.FrameAllocator.
func (f *Frames) AllocFrame() (uint64, bool) {
	c := f.c
	if b := c.fromShards(c.counted(f.first)); b != nil {
		return uint64(b.off), true
	}
	c.exhausted.Add(1)
	return 0, false
}

// RefFrame implements udpconn.FrameSource: a reference more to the frame,
// for each packet a conn lends from it.
func (f *Frames) RefFrame(off uint64) {
	if b, ok := f.c.bufAt(off); ok {
		b.Ref()
		return
	}
	f.c.overreleased.Add(1) // not a frame of the class: a bug, counted
}

// FreeFrame implements xdp.FrameAllocator: it drops the frame's reference.
func (f *Frames) FreeFrame(off uint64) {
	if b, ok := f.c.bufAt(off); ok {
		b.Release()
		return
	}
	f.c.overreleased.Add(1) // not a frame of the class: a bug, counted
}

// Len returns how many buffers the class holds: the most frames there
// are to share between the sockets that take them.
func (f *Frames) Len() int { return len(f.c.bufs) }

// Buf returns the buffer of a frame (once per received packet: one
// division, no search over the classes).
func (f *Frames) Buf(off uint64) (*Buf, bool) { return f.c.bufAt(off) }

// Backing says how the arena is backed: "hugetlb", "thp" or "4k".
func (p *Pool) Backing() string { return p.arena.Backing() }

// Largest returns the size of the pool's largest buffers.
func (p *Pool) Largest() int { return p.classes[len(p.classes)-1].size }

// classFor returns the smallest class that holds n bytes.
func (p *Pool) classFor(n int) (*sizeClass, error) {
	if p.closed.Load() {
		return nil, fmt.Errorf("bridge: get a %d-byte buffer: %w", n, ErrClosed)
	}
	for _, c := range p.classes {
		if n <= c.size {
			return c, nil
		}
	}
	return nil, fmt.Errorf("bridge: no pool class holds %d bytes (largest %d)", n, p.classes[len(p.classes)-1].size)
}

// Holds says why the pool cannot give a buffer of n bytes (closed, or no
// class that large), or nil when it can (once one is free).
func (p *Pool) Holds(n int) error {
	_, err := p.classFor(n)
	return err
}

// Get returns a buffer of at least n bytes with one reference, or an error
// matching ErrExhausted when its class is empty, but for its reserve
// (ErrClosed after Close).
func (p *Pool) Get(n int) (*Buf, error) { return p.get(n, false) }

// GetReserve is Get that may take the class's reserve (Options.Reserve).
func (p *Pool) GetReserve(n int) (*Buf, error) { return p.get(n, true) }

func (p *Pool) get(n int, reserve bool) (*Buf, error) {
	c, err := p.classFor(n)
	if err != nil {
		return nil, err
	}
	first := c.counted(pHint())
	if b, _ := c.take(reserve, false, first); b != nil {
		return b, nil
	}
	c.exhausted.Add(1)
	return nil, fmt.Errorf("bridge: %d-byte buffers: %w", c.size, ErrExhausted)
}

// GetWait is Get that waits for a release while the class is empty.
func (p *Pool) GetWait(ctx context.Context, n int) (*Buf, error) {
	return p.getWait(ctx, n, false)
}

// GetWaitReserve is GetWait that may take the class's reserve.
func (p *Pool) GetWaitReserve(ctx context.Context, n int) (*Buf, error) {
	return p.getWait(ctx, n, true)
}

func (p *Pool) getWait(ctx context.Context, n int, reserve bool) (*Buf, error) {
	c, err := p.classFor(n)
	if err != nil {
		return nil, err
	}
	first := c.counted(pHint())
	for {
		b, wake := c.take(reserve, true, first)
		if b != nil {
			return b, nil
		}
		c.exhausted.Add(1)
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, fmt.Errorf("bridge: waiting for a %d-byte buffer: %w", c.size, ctx.Err())
		}
	}
}

// counted counts a Get (ClassStats.Gets) on shard first, the one it
// looks in first, and returns first.
func (c *sizeClass) counted(first uint32) uint32 {
	c.shards[first&c.mask].gets.Add(1)
	return first
}

// take takes a free buffer, from the shards (shard first first), then
// what is kept, then, if reserve, the reserve; when it finds none and
// wait, it returns the channel a release closes.
func (c *sizeClass) take(reserve, wait bool, first uint32) (*Buf, <-chan struct{}) {
	if b := c.takeOnce(reserve, first); b != nil || !wait {
		return b, nil
	}
	c.waitMu.Lock()
	wake := c.wake
	c.waiting.Store(true)
	c.waitMu.Unlock()
	// A release that put its buffer back before it saw waiting set: look
	// again now that it is, or its wake-up is lost.
	if b := c.takeOnce(reserve, first); b != nil {
		return b, nil
	}
	return nil, wake
}

// takeOnce looks once: the shards, then what is kept, then, if reserve,
// the reserve. nil: none found.
func (c *sizeClass) takeOnce(reserve bool, first uint32) *Buf {
	if b := c.fromShards(first); b != nil {
		return b
	}
	if c.heldN.Load() == 0 {
		return nil
	}
	c.heldMu.Lock()
	var i int32 = -1
	switch {
	case len(c.kept) > 0:
		i, c.kept = c.kept[len(c.kept)-1], c.kept[:len(c.kept)-1]
	case reserve && len(c.reserved) > 0:
		i, c.reserved = c.reserved[len(c.reserved)-1], c.reserved[:len(c.reserved)-1]
	}
	if i >= 0 {
		c.heldChangedLocked()
	}
	c.heldMu.Unlock()
	if i < 0 {
		return nil
	}
	// Its release puts it back where it is short, else in the taker's
	// shard.
	return c.handOut(i, first&c.mask)
}

// heldChangedLocked sets short and heldN after reserved or kept changed.
// The caller holds heldMu.
func (c *sizeClass) heldChangedLocked() {
	c.short.Store(len(c.kept) < c.keep || len(c.reserved) < c.reserve)
	c.heldN.Store(int32(len(c.kept) + len(c.reserved)))
}

// fromShards takes a free buffer from the shards (popShards) and hands
// it out. nil: none found.
func (c *sizeClass) fromShards(first uint32) *Buf {
	if i, h, ok := c.popShards(first); ok {
		return c.handOut(i, h)
	}
	return nil
}

// popShards pops a free buffer's index from the shards, shard first
// (masked) first: a round passing over shards empty or locked, then a
// round that waits for their locks. It returns the shard it came from.
func (c *sizeClass) popShards(first uint32) (i int32, h uint32, ok bool) {
	for round := range 2 {
		for k := range uint32(len(c.shards)) {
			h := (first + k) & c.mask
			sh := &c.shards[h]
			if sh.n.Load() == 0 {
				continue
			}
			if round == 0 {
				if !sh.mu.TryLock() {
					continue
				}
			} else {
				sh.mu.Lock()
			}
			n := len(sh.free)
			if n == 0 {
				sh.mu.Unlock()
				continue
			}
			i := sh.free[n-1]
			sh.free = sh.free[:n-1]
			sh.n.Store(int32(n - 1))
			sh.mu.Unlock()
			return i, h, true
		}
	}
	return 0, 0, false
}

// handOut gives buffer i, taken for shard h, its first reference.
func (c *sizeClass) handOut(i int32, h uint32) *Buf {
	b := &c.bufs[i]
	b.shard = h
	b.refs.Store(1)
	if c.trace != nil {
		c.trace.record(int(i), traceGet, 1)
	}
	return b
}

// keepFree has the class keep n of its buffers free for all but Frames
// (LendFrames), with the reserve counted in: the largest n asked stands.
// What is kept is taken from the shards now, as far as they have it,
// and from the releases that follow for the rest.
func (c *sizeClass) keepFree(n int) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if k := n - c.reserve; k > c.keep {
		c.keep = k
	}
	for len(c.kept) < c.keep {
		i, _, ok := c.popShards(0)
		if !ok {
			break
		}
		c.kept = append(c.kept, i)
	}
	c.heldChangedLocked()
}

// giveBack returns buffer i: to what is held back while it is short,
// else to the shard it came from; then wakes the waiters.
func (c *sizeClass) giveBack(b *Buf, i int32) {
	held := false
	if c.short.Load() {
		c.heldMu.Lock()
		switch {
		case len(c.reserved) < c.reserve:
			c.reserved, held = append(c.reserved, i), true
		case len(c.kept) < c.keep:
			c.kept, held = append(c.kept, i), true
		}
		c.heldChangedLocked()
		c.heldMu.Unlock()
	}
	if !held {
		sh := &c.shards[b.shard]
		sh.mu.Lock()
		sh.free = append(sh.free, i)
		sh.n.Store(int32(len(sh.free)))
		sh.mu.Unlock()
	}
	if c.waiting.Load() {
		c.waitMu.Lock()
		if c.waiting.Load() {
			close(c.wake)
			c.wake = make(chan struct{})
			c.waiting.Store(false)
		}
		c.waitMu.Unlock()
	}
}

// B returns the buffer's memory (its class size; use a prefix).
func (b *Buf) B() []byte { return b.data }

// Offset returns the buffer's offset in the arena: its address in the
// AF_XDP UMEM, and its address in a registered MR less the MR's base.
func (b *Buf) Offset() int { return b.off }

// Within returns where p lies in the buffer, if it lies there whole.
func (b *Buf) Within(p []byte) (int, bool) {
	if len(p) == 0 {
		return 0, true
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b.data)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	if at < base || at-base+uintptr(len(p)) > uintptr(len(b.data)) {
		return 0, false
	}
	return int(at - base), true
}

// Ref adds a reference.
func (b *Buf) Ref() {
	r := b.refs.Add(1)
	if t := b.class.trace; t != nil {
		t.record(b.index(), traceRef, r)
	}
}

// index is the buffer's index in its class.
func (b *Buf) index() int { return (b.off - b.class.bufs[0].off) / b.class.size }

// Release drops a reference; the last one returns the buffer to its class.
// Releasing more references than were taken is a bug: it is counted
// (ClassStats.Overreleased) and otherwise ignored, so the memory is never
// handed out twice.
func (b *Buf) Release() {
	r := b.refs.Add(-1)
	if t := b.class.trace; t != nil {
		t.record(b.index(), traceRelease, r)
	}
	switch {
	case r > 0:
		return
	case r < 0:
		b.refs.Add(1)
		b.class.overreleased.Add(1)
		return
	}
	b.class.giveBack(b, int32(b.index()))
}

// ClassStats describes one size class.
type ClassStats struct {
	Size, Total, Free int
	Reserve           int    // buffers only GetReserve and GetWaitReserve take
	Gets, Exhausted   uint64 // Gets asked; times a class was found empty
	Overreleased      uint64 // Releases of a buffer nobody held (bugs, counted)
}

// Stats returns every class's counters, read at one moment (the pool's
// form of a Snapshot: a value per class).
func (p *Pool) Stats() []ClassStats {
	out := make([]ClassStats, len(p.classes))
	for i, c := range p.classes {
		c.heldMu.Lock()
		free := len(c.kept) + len(c.reserved)
		c.heldMu.Unlock()
		var gets uint64
		for k := range c.shards {
			free += int(c.shards[k].n.Load())
			gets += c.shards[k].gets.Load()
		}
		out[i] = ClassStats{Size: c.size, Total: len(c.bufs), Free: free, Reserve: c.reserve, Gets: gets, Exhausted: c.exhausted.Load(), Overreleased: c.overreleased.Load()}
	}
	return out
}

// Idle reports whether every buffer is back in its class.
func (p *Pool) Idle() bool {
	for _, s := range p.Stats() {
		if s.Free != s.Total {
			return false
		}
	}
	return true
}

// Close unmaps the arena; later Gets fail with ErrClosed. Every buffer
// must have been released: Close refuses otherwise, as the memory may still
// be in a NIC's hands. It is idempotent, and must not race with Get.
func (p *Pool) Close() error {
	if p.closed.Load() {
		return nil
	}
	for i, s := range p.Stats() {
		if s.Free != s.Total {
			err := fmt.Errorf("bridge: close pool: %d of %d %d-byte buffers still referenced", s.Total-s.Free, s.Total, s.Size)
			if c := p.classes[i]; c.trace != nil {
				err = fmt.Errorf("%w; their holders:\n%s", err, c.trace.held(c))
			}
			return err
		}
	}
	p.closed.Store(true)
	return p.arena.Close()
}
