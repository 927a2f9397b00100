//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <infiniband/verbs.h>

static struct ibv_mr *rb_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access, int *err) {
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, access);
	*err = mr ? 0 : (errno ? errno : ENOMEM);
	return mr;
}
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"
)

// MR is a registered memory region (struct ibv_mr).
type MR struct {
	res    resource
	mr     *C.struct_ibv_mr
	buf    []byte
	access Access
}

// RegMR registers mem with access rights. mem must not be on the Go heap
// (the device reads and writes it behind the garbage collector's back, for as
// long as the MR lives): take it from an Arena or another mmap. The MR keeps
// mem reachable until Close. An MR over an Arena is closed with it.
func (pd *PD) RegMR(mem []byte, access Access) (*MR, error) {
	if len(mem) == 0 {
		return nil, fmt.Errorf("reg mr: empty buffer")
	}
	mr := &MR{buf: mem, access: access}
	parents := []*resource{&pd.res}
	if a := arenaOf(mem); a != nil {
		parents = append(parents, &a.res)
	}
	err := mr.res.create(kindMR, parents, func() (func() error, error) {
		var cerr C.int
		mr.mr = C.rb_reg_mr(pd.pd, unsafe.Pointer(unsafe.SliceData(mem)), C.size_t(len(mem)), C.int(access), &cerr)
		if mr.mr == nil {
			return nil, fmt.Errorf("ibv_reg_mr %d bytes access %v: %w", len(mem), access, syscall.Errno(cerr))
		}
		return mr.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("reg mr on %s: %w", pd.device.name, err)
	}
	return mr, nil
}

func (mr *MR) free() error {
	if rc := C.ibv_dereg_mr(mr.mr); rc != 0 {
		return fmt.Errorf("ibv_dereg_mr lkey 0x%x: %w", mr.lkeyNoLock(), syscall.Errno(rc))
	}
	mr.buf = nil
	return nil
}

func (mr *MR) lkeyNoLock() uint32 { return uint32(mr.mr.lkey) }

// Close deregisters the MR.
func (mr *MR) Close() error {
	if mr == nil {
		return nil
	}
	return mr.res.close()
}

// LKey is the local key, for SGEs.
func (mr *MR) LKey() uint32 { return uint32(mr.mr.lkey) }

// RKey is the remote key a peer uses to READ, WRITE or do atomics here.
func (mr *MR) RKey() uint32 { return uint32(mr.mr.rkey) }

// Addr is the region's start address, as a peer names it in RDMA ops.
func (mr *MR) Addr() uint64 { return uint64(uintptr(mr.mr.addr)) }

// Bytes is the registered memory.
func (mr *MR) Bytes() []byte { return mr.buf }

// Access is what the MR was registered for.
func (mr *MR) Access() Access { return mr.access }

// SGE is the span [off, off+n) of the region as a scatter/gather element;
// a span outside the region is an error.
func (mr *MR) SGE(off, n int) (SGE, error) {
	if off < 0 || n < 0 || off+n > len(mr.buf) {
		return SGE{}, fmt.Errorf("ibv: MR SGE [%d, %d+%d) outside its %d bytes", off, off, n, len(mr.buf))
	}
	return SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}, nil
}
