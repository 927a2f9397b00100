package leg

import (
	"container/list"
	"errors"
	"sync"
	"unsafe"

	"github.com/rbridge/rbridge/ibv"
)

// stagingMRs keeps the registrations that staging windows are bound over
// (endpoint_verbs_expose.go), one per extent of the pool's memory (its
// address and length), for a device's PD: exposing the same extent again
// binds a new window over the registration it had, instead of registering
// the memory again and deregistering it at revocation, two system calls
// that pin and unpin its pages, each on the path of a request's response.
//
// Only registrations that grant no remote access are kept (local write
// and window binding): an idle one reaches nothing from the network, and
// a window bound over it is what a peer reaches, for its request alone.
// The extent is exact, as a registration of its own was, so where a
// device checks a window's accesses against its MR's range (rxe) the
// bounds are still the request's. An extent has one window at a time:
// its registration is taken out while exposed, and a second exposure of
// the same extent meanwhile (there is none: a staging buffer is one
// request's until its revocation) gets a registration of its own.
//
// At most max registrations are kept idle, the least recently used given
// up first; close gives them all up (before the PD is deallocated).
type stagingMRs = regCache[*ibv.MR]

// newStagingMRs keeps up to max idle registrations made in pd.
func newStagingMRs(pd *ibv.PD, max int) *stagingMRs {
	return newRegCache(max, func(b []byte) (*ibv.MR, error) {
		return pd.RegMR(b, ibv.AccessLocalWrite|ibv.AccessMWBind)
	}, (*ibv.MR).Close)
}

// stagingMRsKept is how many idle staging registrations a device keeps:
// the extents of a storage workload's requests in flight on every
// session of the leg, with room for their sizes to vary.
const stagingMRsKept = 1024

// regExtent names the memory a registration covers.
type regExtent struct {
	addr uintptr
	n    int
}

// regCache is stagingMRs over any registration R (the host's tests use
// their own).
type regCache[R comparable] struct {
	reg     func([]byte) (R, error)
	release func(R) error
	max     int

	mu     sync.Mutex
	idle   map[regExtent]*list.Element // of *regEntry[R]
	lru    list.List                   // idle entries, least recently used first
	closed bool
}

type regEntry[R comparable] struct {
	at regExtent
	r  R
}

func newRegCache[R comparable](max int, reg func([]byte) (R, error), release func(R) error) *regCache[R] {
	return &regCache[R]{reg: reg, release: release, max: max, idle: map[regExtent]*list.Element{}}
}

// extentOf is the extent b covers.
func extentOf(b []byte) regExtent {
	return regExtent{addr: uintptr(unsafe.Pointer(unsafe.SliceData(b))), n: len(b)}
}

// get returns a registration of exactly b, idle until now (reused) or
// new.
func (c *regCache[R]) get(b []byte) (r R, reused bool, err error) {
	if len(b) == 0 {
		return r, false, errors.New("a registration of no bytes")
	}
	at := extentOf(b)
	c.mu.Lock()
	if el := c.idle[at]; el != nil {
		delete(c.idle, at)
		c.lru.Remove(el)
		c.mu.Unlock()
		return el.Value.(*regEntry[R]).r, true, nil
	}
	c.mu.Unlock()
	r, err = c.reg(b)
	return r, false, err
}

// put hands back r, a registration of exactly b that nothing uses any
// more (its window deallocated): it is kept idle, or given up when the
// cache is closed or already holds one of that extent. The least recently
// used idle one is given up when more than max would be kept.
func (c *regCache[R]) put(b []byte, r R) error {
	at := extentOf(b)
	c.mu.Lock()
	if c.closed || c.idle[at] != nil || c.max <= 0 {
		c.mu.Unlock()
		return c.release(r)
	}
	c.idle[at] = c.lru.PushBack(&regEntry[R]{at: at, r: r})
	var old []R
	for c.lru.Len() > c.max {
		e := c.lru.Remove(c.lru.Front()).(*regEntry[R])
		delete(c.idle, e.at)
		old = append(old, e.r)
	}
	c.mu.Unlock()
	var errs []error
	for _, r := range old {
		errs = append(errs, c.release(r))
	}
	return errors.Join(errs...)
}

// close gives up every idle registration; those handed back later are
// given up at once.
func (c *regCache[R]) close() error {
	c.mu.Lock()
	c.closed = true
	var all []R
	for el := c.lru.Front(); el != nil; el = el.Next() {
		all = append(all, el.Value.(*regEntry[R]).r)
	}
	c.lru.Init()
	clear(c.idle)
	c.mu.Unlock()
	var errs []error
	for _, r := range all {
		errs = append(errs, c.release(r))
	}
	return errors.Join(errs...)
}
