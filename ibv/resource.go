package ibv

import (
	"errors"
	"sync"
	"sync/atomic"
)

// objKind names a type of verbs object, for LiveObjects.
type objKind int

const (
	// kindUncounted is for wrappers of objects another library owns
	// (librdmacm's device contexts): tracked for Close, not for leaks.
	kindUncounted objKind = -1

	kindDevice objKind = iota - 1
	kindPD
	kindMR
	kindCQ
	kindQP
	kindAH
	kindSRQ
	kindEventChannel
	kindCMID
	kindArena
	kindMW
	numKinds
)

var kindNames = [numKinds]string{"Device", "PD", "MR", "CQ", "QP", "AH", "SRQ", "EventChannel", "CMID", "Arena", "MW"}

var live [numKinds]atomic.Int64

// LiveObjects counts the objects of this package that are open (created and
// not yet closed), by type name ("QP", "MR", ...). Types with none open are
// left out, so an empty map means nothing leaked. It is cheap enough for a
// metrics endpoint.
func LiveObjects() map[string]int64 {
	m := make(map[string]int64)
	for k := range numKinds {
		if n := live[k].Load(); n != 0 {
			m[kindNames[k]] = n
		}
	}
	return m
}

// treeMu guards the dependency edges and closed flags of every resource.
// Closing is rare, so one lock for the whole forest keeps the cascade
// deadlock-free.
var treeMu sync.Mutex

// resource is the lifetime of one verbs object: its dependents (objects that
// must be freed before it, e.g. the QPs of a CQ), the objects it depends on,
// and the function that frees it.
//
// The object's own operations hold op.RLock while they use the C handle
// (acquire); free runs with op held for writing, so an operation never sees
// a freed handle. Operations that block (waiting on a completion channel)
// are woken by interrupt, which close calls before it takes op. Creating and
// freeing happen under treeMu, so a parent cannot be freed while a child is
// being made from it.
type resource struct {
	kind   objKind
	op     sync.RWMutex
	closed atomic.Bool // set under treeMu, read anywhere

	// guarded by treeMu
	dependents map[*resource]struct{}
	dependsOn  []*resource
	free       func() error // frees the C object; called once, with op held
	interrupt  func()       // optional: wakes blocked operations; called before op is taken
}

// create runs mk, which makes the C object and returns the function that
// frees it, and registers r as live and as a dependent of parents. It fails
// with ErrClosed, without calling mk, when a parent is closed.
func (r *resource) create(kind objKind, parents []*resource, mk func() (free func() error, err error)) error {
	treeMu.Lock()
	defer treeMu.Unlock()
	for _, p := range parents {
		if p != nil && p.closed.Load() {
			return ErrClosed
		}
	}
	free, err := mk()
	if err != nil {
		return err
	}
	r.kind = kind
	r.free = free
	for _, p := range parents {
		if p == nil {
			continue
		}
		if p.dependents == nil {
			p.dependents = make(map[*resource]struct{})
		}
		p.dependents[r] = struct{}{}
		r.dependsOn = append(r.dependsOn, p)
	}
	if kind != kindUncounted {
		live[kind].Add(1)
	}
	return nil
}

// close frees r after everything that depends on it. It is idempotent: the
// second and later calls return nil.
func (r *resource) close() error {
	treeMu.Lock()
	defer treeMu.Unlock()
	return r.closeLocked()
}

// closeLocked is close; must hold treeMu.
func (r *resource) closeLocked() error {
	if r.free == nil || r.closed.Load() {
		return nil
	}
	r.closed.Store(true)
	var errs []error
	for d := range r.dependents {
		errs = append(errs, d.closeLocked())
	}
	r.dependents = nil
	if r.interrupt != nil {
		r.interrupt()
	}
	r.op.Lock()
	errs = append(errs, r.free())
	r.op.Unlock()
	for _, p := range r.dependsOn {
		delete(p.dependents, r)
	}
	r.dependsOn = nil
	if r.kind != kindUncounted {
		live[r.kind].Add(-1)
	}
	return errors.Join(errs...)
}

// dependOn makes r, already created, a dependent of p in place of its
// dependency on any other object of p's kind (a memory window moves to the
// MR of its latest bind). It does nothing when either is closed.
func (r *resource) dependOn(p *resource) {
	treeMu.Lock()
	defer treeMu.Unlock()
	if r.closed.Load() || p.closed.Load() {
		return
	}
	kept := r.dependsOn[:0]
	for _, q := range r.dependsOn {
		if q != p && q.kind == p.kind {
			delete(q.dependents, r)
			continue
		}
		kept = append(kept, q)
	}
	r.dependsOn = kept
	if _, ok := p.dependents[r]; ok {
		return
	}
	if p.dependents == nil {
		p.dependents = make(map[*resource]struct{})
	}
	p.dependents[r] = struct{}{}
	r.dependsOn = append(r.dependsOn, p)
}

// isClosed reports whether close has started.
func (r *resource) isClosed() bool { return r.closed.Load() }

// acquire takes the operation lock for reading and fails with ErrClosed
// after Close. Pair with r.op.RUnlock.
func (r *resource) acquire() error {
	r.op.RLock()
	if r.closed.Load() {
		r.op.RUnlock()
		return ErrClosed
	}
	return nil
}
