//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <infiniband/verbs.h>

// ibv_alloc_mw, ibv_dealloc_mw and ibv_inc_rkey are static inlines.
static struct ibv_mw *rb_alloc_mw(struct ibv_pd *pd, int type, int *err) {
	errno = 0;
	struct ibv_mw *mw = ibv_alloc_mw(pd, (enum ibv_mw_type)type);
	*err = mw ? 0 : (errno ? errno : ENOMEM);
	return mw;
}
static int rb_dealloc_mw(struct ibv_mw *mw) { return ibv_dealloc_mw(mw); }
static uint32_t rb_inc_rkey(uint32_t rkey) { return ibv_inc_rkey(rkey); }
*/
import "C"

import (
	"fmt"
	"sync"
	"syscall"
)

// MW is a memory window (struct ibv_mw); mw.go has the life of one.
type MW struct {
	res resource
	mw  *C.struct_ibv_mw
	pd  *PD
	typ MWType

	mu sync.Mutex // guards the fields below and mw.rkey
	// rkey is mw.rkey, readable after Close (which frees mw).
	rkey uint32
	// The bind posted and not yet settled by BindCompleted.
	pending     bool
	pendingRKey uint32
	pendingMR   *MR
}

// AllocMW allocates a memory window of type typ in pd. A device without
// windows (siw) fails with an error matching ErrNotSupported;
// DeviceAttr.MWType2 says beforehand.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, fmt.Errorf("alloc mw on %s: %v is not a window type", pd.device.name, typ)
	}
	mw := &MW{pd: pd, typ: typ}
	err := mw.res.create(kindMW, []*resource{&pd.res}, func() (func() error, error) {
		var cerr C.int
		mw.mw = C.rb_alloc_mw(pd.pd, C.int(typ), &cerr)
		if mw.mw == nil {
			err := fmt.Errorf("ibv_alloc_mw %v: %w", typ, syscall.Errno(cerr))
			if e := syscall.Errno(cerr); e == syscall.EOPNOTSUPP || e == syscall.ENOSYS {
				err = fmt.Errorf("%w: %w", err, ErrNotSupported)
			}
			return nil, err
		}
		mw.rkey = uint32(mw.mw.rkey)
		return mw.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("alloc mw on %s: %w", pd.device.name, err)
	}
	return mw, nil
}

func (mw *MW) free() error {
	if rc := C.rb_dealloc_mw(mw.mw); rc != 0 {
		return fmt.Errorf("ibv_dealloc_mw rkey 0x%x: %w", mw.RKey(), syscall.Errno(rc))
	}
	return nil
}

// Close frees the window (ibv_dealloc_mw); its rkey is refused from then on.
func (mw *MW) Close() error {
	if mw == nil {
		return nil
	}
	return mw.res.close()
}

// Type is the window's type.
func (mw *MW) Type() MWType { return mw.typ }

// RKey is the window's rkey: the one ibv_alloc_mw gave it, then that of
// each bind BindCompleted settled as successful. A LOCAL_INV does not change
// it (the window keeps its key, refused until its next bind).
func (mw *MW) RKey() uint32 {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	return mw.rkey
}

// NextRKey is the rkey for the window's next bind: RKey with its key (the
// low 8 bits) incremented (ibv_inc_rkey).
func (mw *MW) NextRKey() uint32 { return uint32(C.rb_inc_rkey(C.uint32_t(mw.RKey()))) }

// BindCompleted settles the window's pending bind with the status of its
// completion (or, for a bind posted unsignaled, of a later signaled work
// request of the same QP that completed: the send queue completes in order).
// On WCSuccess the bind's rkey becomes the window's, which its next bind
// names to the device, and the window becomes a dependent of the bind's MR
// (closing the MR closes it first: a device refuses to deregister an MR
// with bound windows). On any other status the window keeps its rkey: the
// device did not bind it. Either way another bind may then be posted.
func (mw *MW) BindCompleted(status WCStatus) error {
	if err := mw.res.acquire(); err != nil {
		return err
	}
	mw.mu.Lock()
	if !mw.pending {
		rkey := mw.rkey
		mw.mu.Unlock()
		mw.res.op.RUnlock()
		return fmt.Errorf("mw rkey 0x%x: no bind pending", rkey)
	}
	mr := mw.pendingMR
	if status == WCSuccess {
		// The provider names the window to the device by this field
		// when the next bind is posted (rxe: the kernel refuses a
		// bind naming another key than the window's).
		mw.rkey = mw.pendingRKey
		mw.mw.rkey = C.uint32_t(mw.rkey)
	}
	mw.pending, mw.pendingRKey, mw.pendingMR = false, 0, nil
	mw.mu.Unlock()
	mw.res.op.RUnlock()
	if status == WCSuccess {
		// Not under op: the tree lock comes first (resource.go).
		mw.res.dependOn(&mr.res)
	}
	return nil
}

// markBind checks b against the window and marks it pending; with the
// window acquired (PostSend). undoBind takes the mark back when the work
// request was not posted.
func (mw *MW) markBind(b *MWBind) error {
	mw.mu.Lock()
	defer mw.mu.Unlock()
	if err := checkBind(b, mw.typ, mw.rkey, mw.pending); err != nil {
		return err
	}
	mw.pending, mw.pendingRKey, mw.pendingMR = true, b.RKey, b.MR
	return nil
}

func (mw *MW) undoBind() {
	mw.mu.Lock()
	mw.pending, mw.pendingRKey, mw.pendingMR = false, 0, nil
	mw.mu.Unlock()
}
