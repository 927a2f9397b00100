//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include "shim.h"

static struct ibv_srq *rb_create_srq(struct ibv_pd *pd, uintptr_t h, uint32_t max_wr, uint32_t max_sge, uint32_t limit, int *err) {
	struct ibv_srq_init_attr a = {0};
	a.srq_context = (void *)h;
	a.attr.max_wr = max_wr;
	a.attr.max_sge = max_sge;
	a.attr.srq_limit = limit;
	errno = 0;
	struct ibv_srq *srq = ibv_create_srq(pd, &a);
	*err = srq ? 0 : (errno ? errno : ENOMEM);
	return srq;
}
static int rb_arm_srq(struct ibv_srq *srq, uint32_t limit) {
	struct ibv_srq_attr a = {0};
	a.srq_limit = limit;
	return ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT);
}
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"sync"
	"syscall"
)

// SRQ is a shared receive queue (struct ibv_srq): one pool of receive
// buffers for many QPs.
type SRQ struct {
	res    resource
	srq    *C.struct_ibv_srq
	handle cgo.Handle

	mu   sync.Mutex // guards wrs, sges
	wrs  []C.struct_rb_recv_wr
	sges []C.struct_ibv_sge
}

// NewSRQ creates a shared receive queue.
func (pd *PD) NewSRQ(opts SRQOptions) (*SRQ, error) {
	if opts.MaxWR == 0 {
		return nil, fmt.Errorf("new srq: MaxWR must be > 0")
	}
	opts.MaxSGE = max(opts.MaxSGE, 1)
	s := &SRQ{}
	err := s.res.create(kindSRQ, []*resource{&pd.res}, func() (func() error, error) {
		s.handle = cgo.NewHandle(s)
		var cerr C.int
		s.srq = C.rb_create_srq(pd.pd, C.uintptr_t(s.handle), C.uint32_t(opts.MaxWR), C.uint32_t(opts.MaxSGE), C.uint32_t(opts.Limit), &cerr)
		if s.srq == nil {
			s.handle.Delete()
			return nil, fmt.Errorf("ibv_create_srq %d wrs: %w", opts.MaxWR, syscall.Errno(cerr))
		}
		s.wrs = cAlloc[C.struct_rb_recv_wr](MaxBatch)
		s.sges = cAlloc[C.struct_ibv_sge](MaxBatch * int(opts.MaxSGE))
		return s.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("new srq: %w", err)
	}
	return s, nil
}

func (s *SRQ) free() error {
	var err error
	if rc := C.ibv_destroy_srq(s.srq); rc != 0 {
		err = fmt.Errorf("ibv_destroy_srq: %w", syscall.Errno(rc))
	}
	s.mu.Lock()
	cFree(s.wrs)
	cFree(s.sges)
	s.wrs, s.sges = nil, nil
	s.mu.Unlock()
	s.handle.Delete()
	return err
}

// Close destroys the SRQ and, first, the QPs that receive from it.
func (s *SRQ) Close() error {
	if s == nil {
		return nil
	}
	return s.res.close()
}

// PostRecv posts receive buffers to the shared queue, one cgo call per
// MaxBatch, and returns how many were posted.
func (s *SRQ) PostRecv(wrs []RecvWR) (int, error) {
	if err := s.res.acquire(); err != nil {
		return 0, err
	}
	defer s.res.op.RUnlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	return postRecv(nil, s.srq, s.wrs, s.sges, wrs, "srq")
}

// Arm sets the limit below which the device raises EventSRQLimitReached.
func (s *SRQ) Arm(limit uint32) error {
	if err := s.res.acquire(); err != nil {
		return err
	}
	defer s.res.op.RUnlock()
	if rc := C.rb_arm_srq(s.srq, C.uint32_t(limit)); rc != 0 {
		return fmt.Errorf("ibv_modify_srq limit %d: %w", limit, syscall.Errno(rc))
	}
	return nil
}
