//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <endian.h>
#include <infiniband/verbs.h>
#include "shim.h"

// rb_post_send posts n (<= 64) work requests with one ibv_post_send. On
// failure *bad is the index of the first WR not posted.
static int rb_post_send(struct ibv_qp *qp, const struct rb_send_wr *w, int n, struct ibv_sge *sges, int *bad) {
	struct ibv_send_wr wr[64];
	if (n > 64) n = 64;
	for (int i = 0; i < n; i++) {
		memset(&wr[i], 0, sizeof(wr[i]));
		wr[i].wr_id = w[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = sges + w[i].sge_off;
		wr[i].num_sge = w[i].num_sge;
		wr[i].opcode = w[i].opcode;
		wr[i].send_flags = w[i].send_flags;
		switch (w[i].opcode) {
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_SEND_WITH_IMM:
			wr[i].imm_data = htobe32(w[i].imm);
			break;
		case IBV_WR_SEND_WITH_INV:
		case IBV_WR_LOCAL_INV:
			wr[i].invalidate_rkey = w[i].imm;
			break;
		}
		switch (w[i].opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			wr[i].wr.rdma.remote_addr = w[i].remote_addr;
			wr[i].wr.rdma.rkey = w[i].rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			wr[i].wr.atomic.remote_addr = w[i].remote_addr;
			wr[i].wr.atomic.compare_add = w[i].compare_add;
			wr[i].wr.atomic.swap = w[i].swap;
			wr[i].wr.atomic.rkey = w[i].rkey;
			break;
		case IBV_WR_BIND_MW:
			wr[i].bind_mw.mw = w[i].mw;
			wr[i].bind_mw.rkey = w[i].bind_rkey;
			wr[i].bind_mw.bind_info.mr = w[i].bind_mr;
			wr[i].bind_mw.bind_info.addr = w[i].bind_addr;
			wr[i].bind_mw.bind_info.length = w[i].bind_length;
			wr[i].bind_mw.bind_info.mw_access_flags = w[i].bind_access;
			break;
		case IBV_WR_LOCAL_INV:
			break;
		default:
			if (w[i].ah) {
				wr[i].wr.ud.ah = w[i].ah;
				wr[i].wr.ud.remote_qpn = w[i].remote_qpn;
				wr[i].wr.ud.remote_qkey = w[i].remote_qkey;
			}
		}
	}
	struct ibv_send_wr *badwr = NULL;
	int rc = ibv_post_send(qp, wr, &badwr);
	if (rc < 0) rc = -rc;
	*bad = (rc && badwr) ? (int)(badwr - wr) : 0;
	return rc;
}

// rb_post_recv posts n (<= 64) receive WRs to qp, or to srq when qp is NULL.
static int rb_post_recv(struct ibv_qp *qp, struct ibv_srq *srq, const struct rb_recv_wr *w, int n, struct ibv_sge *sges, int *bad) {
	struct ibv_recv_wr wr[64];
	if (n > 64) n = 64;
	for (int i = 0; i < n; i++) {
		wr[i].wr_id = w[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = sges + w[i].sge_off;
		wr[i].num_sge = w[i].num_sge;
	}
	struct ibv_recv_wr *badwr = NULL;
	int rc = qp ? ibv_post_recv(qp, wr, &badwr) : ibv_post_srq_recv(srq, wr, &badwr);
	if (rc < 0) rc = -rc;
	*bad = (rc && badwr) ? (int)(badwr - wr) : 0;
	return rc;
}

static struct ibv_qp *rb_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a, uintptr_t h, int *err) {
	errno = 0;
	a->qp_context = (void *)h;
	struct ibv_qp *qp = ibv_create_qp(pd, a);
	*err = qp ? 0 : (errno ? errno : ENOMEM);
	return qp;
}

static void rb_set_dgid(struct ibv_ah_attr *a, const void *gid) { memcpy(a->grh.dgid.raw, gid, 16); }
static void rb_get_dgid(const struct ibv_ah_attr *a, void *gid) { memcpy(gid, a->grh.dgid.raw, 16); }
*/
import "C"

import (
	"fmt"
	"runtime/cgo"
	"sync"
	"syscall"
	"unsafe"
)

// QP is a queue pair (struct ibv_qp), RC or UD, made by PD.NewQP or on an
// rdma_cm id by CMID.CreateQP.
type QP struct {
	res     resource
	qp      *C.struct_ibv_qp
	qpn     uint32
	typ     QPType
	pd      *PD
	handle  cgo.Handle
	cap     QPCap
	iwarp   bool         // iWARP has no immediate data and no atomics
	destroy func() C.int // ibv_destroy_qp, or rdma_destroy_qp for a cm_id's QP

	sendMu    sync.Mutex            // guards sendWRs, sendSGEs, sendBinds
	sendWRs   []C.struct_rb_send_wr // MaxBatch, C memory
	sendSGEs  []C.struct_ibv_sge    // MaxBatch*MaxSendSGE, C memory
	sendBinds []heldBind            // the windows and MRs of the batch being posted

	recvMu   sync.Mutex // guards recvWRs, recvSGEs
	recvWRs  []C.struct_rb_recv_wr
	recvSGEs []C.struct_ibv_sge
}

// NewQP creates a queue pair in the RESET state.
func (pd *PD) NewQP(opts QPOptions) (*QP, error) {
	return newQP(pd, opts, nil, func(a *C.struct_ibv_qp_init_attr, h cgo.Handle) (*C.struct_ibv_qp, func() C.int, error) {
		var cerr C.int
		qp := C.rb_create_qp(pd.pd, a, C.uintptr_t(h), &cerr)
		if qp == nil {
			return nil, nil, fmt.Errorf("ibv_create_qp %v: %w", opts.Type, syscall.Errno(cerr))
		}
		return qp, func() C.int { return C.ibv_destroy_qp(qp) }, nil
	})
}

type qpMaker func(a *C.struct_ibv_qp_init_attr, h cgo.Handle) (*C.struct_ibv_qp, func() C.int, error)

func newQP(pd *PD, opts QPOptions, extra *resource, mk qpMaker) (*QP, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	q := &QP{pd: pd, typ: opts.Type, iwarp: pd.device.ctx.device.transport_type == C.IBV_TRANSPORT_IWARP}
	parents := []*resource{&pd.res, &opts.SendCQ.res, &opts.RecvCQ.res, extra}
	if opts.SRQ != nil {
		parents = append(parents, &opts.SRQ.res)
	}
	err := q.res.create(kindQP, parents, func() (func() error, error) {
		var a C.struct_ibv_qp_init_attr
		a.send_cq = opts.SendCQ.cq
		a.recv_cq = opts.RecvCQ.cq
		if opts.SRQ != nil {
			a.srq = opts.SRQ.srq
		}
		a.cap = C.struct_ibv_qp_cap{
			max_send_wr:     C.uint32_t(opts.Cap.MaxSendWR),
			max_recv_wr:     C.uint32_t(opts.Cap.MaxRecvWR),
			max_send_sge:    C.uint32_t(opts.Cap.MaxSendSGE),
			max_recv_sge:    C.uint32_t(opts.Cap.MaxRecvSGE),
			max_inline_data: C.uint32_t(opts.Cap.MaxInlineData),
		}
		a.qp_type = C.enum_ibv_qp_type(opts.Type)
		if opts.SigAll {
			a.sq_sig_all = 1
		}
		q.handle = cgo.NewHandle(q)
		qp, destroy, err := mk(&a, q.handle)
		if err != nil {
			q.handle.Delete()
			return nil, err
		}
		q.qp, q.destroy, q.qpn = qp, destroy, uint32(qp.qp_num)
		q.cap = QPCap{ // what the device granted
			MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		}
		sendSGE := max(int(opts.Cap.MaxSendSGE), 1)
		recvSGE := max(int(opts.Cap.MaxRecvSGE), 1)
		q.sendWRs = cAlloc[C.struct_rb_send_wr](MaxBatch)
		q.sendSGEs = cAlloc[C.struct_ibv_sge](MaxBatch * sendSGE)
		q.recvWRs = cAlloc[C.struct_rb_recv_wr](MaxBatch)
		q.recvSGEs = cAlloc[C.struct_ibv_sge](MaxBatch * recvSGE)
		return q.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("new %v qp: %w", opts.Type, err)
	}
	return q, nil
}

// cAlloc allocates a zeroed array of n T in C memory (never nil).
func cAlloc[T any](n int) []T {
	var zero T
	p := C.calloc(C.size_t(n), C.size_t(unsafe.Sizeof(zero)))
	if p == nil {
		panic("ibv: out of C memory")
	}
	return unsafe.Slice((*T)(p), n)
}

func cFree[T any](s []T) {
	if s != nil {
		C.free(unsafe.Pointer(unsafe.SliceData(s)))
	}
}

func (q *QP) free() error {
	var err error
	if rc := q.destroy(); rc != 0 {
		err = fmt.Errorf("destroy qp %d: %w", q.qpn, syscall.Errno(rc))
	}
	q.sendMu.Lock()
	cFree(q.sendWRs)
	cFree(q.sendSGEs)
	q.sendWRs, q.sendSGEs = nil, nil
	q.sendMu.Unlock()
	q.recvMu.Lock()
	cFree(q.recvWRs)
	cFree(q.recvSGEs)
	q.recvWRs, q.recvSGEs = nil, nil
	q.recvMu.Unlock()
	q.handle.Delete()
	return err
}

// Close destroys the QP. Outstanding work requests are not completed.
func (q *QP) Close() error {
	if q == nil {
		return nil
	}
	return q.res.close()
}

// QPN is the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// Type is RC or UD.
func (q *QP) Type() QPType { return q.typ }

// PD is the protection domain the QP belongs to.
func (q *QP) PD() *PD { return q.pd }

// Cap is what the device granted at creation (at least what was asked).
func (q *QP) Cap() QPCap { return q.cap }

// Modify changes the attributes named by mask (ibv_modify_qp). The
// transition helpers ToInit, ToRTR, ToRTS, ToErr and ToReset pick the masks.
func (q *QP) Modify(attr *QPAttr, mask QPAttrMask) error {
	if err := q.res.acquire(); err != nil {
		return err
	}
	defer q.res.op.RUnlock()
	var a C.struct_ibv_qp_attr
	qpAttrToC(attr, &a)
	if rc := C.ibv_modify_qp(q.qp, &a, C.int(mask)); rc != 0 {
		if rc < 0 {
			rc = -rc
		}
		return fmt.Errorf("ibv_modify_qp qp %d to %v mask %v: %w", q.qpn, attr.State, mask, syscall.Errno(rc))
	}
	return nil
}

// Query reads the QP's current attributes (ibv_query_qp, all fields).
func (q *QP) Query() (QPAttr, error) {
	if err := q.res.acquire(); err != nil {
		return QPAttr{}, err
	}
	defer q.res.op.RUnlock()
	var a C.struct_ibv_qp_attr
	var init C.struct_ibv_qp_init_attr
	const all = QPAttrState | QPAttrCurState | QPAttrAccessFlags | QPAttrPKeyIndex | QPAttrPort | QPAttrQKey |
		QPAttrAV | QPAttrPathMTU | QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrRQPSN |
		QPAttrMaxQPRDAtomic | QPAttrMinRNRTimer | QPAttrSQPSN | QPAttrMaxDestRDAtomic | QPAttrCap | QPAttrDestQPN
	if rc := C.ibv_query_qp(q.qp, &a, C.int(all), &init); rc != 0 {
		return QPAttr{}, fmt.Errorf("ibv_query_qp qp %d: %w", q.qpn, syscall.Errno(rc))
	}
	return qpAttrFromC(&a), nil
}

// PostSend posts wrs with one ibv_post_send per MaxBatch requests and
// returns how many were posted. On error, wrs[n] is the one that failed.
func (q *QP) PostSend(wrs []SendWR) (int, error) {
	if err := q.res.acquire(); err != nil {
		return 0, err
	}
	defer q.res.op.RUnlock()
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	maxSGE := len(q.sendSGEs) / MaxBatch
	posted := 0
	for len(wrs) > 0 {
		n := min(len(wrs), MaxBatch)
		cw := q.sendWRs[:n]
		for i := range cw {
			w := &wrs[i]
			if len(w.SGEs) > maxSGE {
				q.releaseBindsLocked(0)
				return posted, fmt.Errorf("post send qp %d wr %d: %d SGEs, QP has room for %d", q.qpn, w.ID, len(w.SGEs), maxSGE)
			}
			if q.iwarp && w.Op != OpSend && w.Op != OpWrite && w.Op != OpRead && w.Op != OpSendWithInv {
				// siw accepts these and then drops them without a completion.
				q.releaseBindsLocked(0)
				return posted, fmt.Errorf("post send qp %d wr %d: %v on iWARP: %w", q.qpn, w.ID, w.Op, ErrNotSupported)
			}
			c := &cw[i]
			c.wr_id = C.uint64_t(w.ID)
			c.remote_addr = C.uint64_t(w.RemoteAddr)
			c.compare_add = C.uint64_t(w.CompareAdd)
			c.swap = C.uint64_t(w.Swap)
			c.rkey = C.uint32_t(w.RKey)
			c.imm = C.uint32_t(w.Imm)
			c.ah = nil
			if w.AH != nil {
				c.ah = w.AH.ah
			}
			c.remote_qpn = C.uint32_t(w.RemoteQPN)
			c.remote_qkey = C.uint32_t(w.RemoteQKey)
			off := i * maxSGE
			c.sge_off = C.uint32_t(off)
			c.num_sge = C.uint32_t(len(w.SGEs))
			c.opcode = C.uint32_t(w.Op)
			c.send_flags = C.uint32_t(w.Flags)
			c.mw, c.bind_mr = nil, nil
			if w.Op == OpBindMW {
				if err := q.holdBindLocked(i, &w.Bind); err != nil {
					q.releaseBindsLocked(0)
					return posted, fmt.Errorf("post send qp %d wr %d: %w", q.qpn, w.ID, err)
				}
				b := &w.Bind
				c.mw, c.bind_mr = b.MW.mw, b.MR.mr
				c.bind_rkey, c.bind_access = C.uint32_t(b.RKey), C.uint32_t(b.Access)
				c.bind_addr, c.bind_length = C.uint64_t(b.Addr), C.uint64_t(b.Length)
			}
			for j, s := range w.SGEs {
				q.sendSGEs[off+j] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
			}
		}
		var bad C.int
		rc := C.rb_post_send(q.qp, &cw[0], C.int(n), &q.sendSGEs[0], &bad)
		if rc != 0 {
			q.releaseBindsLocked(int(bad))
			posted += int(bad)
			return posted, fmt.Errorf("ibv_post_send qp %d wr %d (%v): %w", q.qpn, wrs[bad].ID, wrs[bad].Op, syscall.Errno(rc))
		}
		q.releaseBindsLocked(n)
		posted += n
		wrs = wrs[n:]
	}
	return posted, nil
}

// heldBind is a window and an MR that a BIND_MW of the batch being posted
// names, acquired (their C objects stay valid) until the post returns.
type heldBind struct {
	idx          int // the work request's index in the batch
	mw           *MW
	mr           *MR
	ownMW, ownMR bool // acquired by this entry (an earlier one may hold them)
}

// holdBindLocked acquires b's window and MR, checks them against the QP
// and marks the bind pending on the window; must hold q.sendMu.
func (q *QP) holdBindLocked(idx int, b *MWBind) error {
	if b.MW == nil || b.MR == nil {
		return fmt.Errorf("BIND_MW needs SendWR.Bind.MW and .MR")
	}
	h := heldBind{idx: idx, mw: b.MW, mr: b.MR, ownMW: true, ownMR: true}
	for _, o := range q.sendBinds { // a read lock is never taken twice
		h.ownMW = h.ownMW && o.mw != b.MW
		h.ownMR = h.ownMR && o.mr != b.MR
	}
	if h.ownMW {
		if err := b.MW.res.acquire(); err != nil {
			return fmt.Errorf("bind mw: %w", err)
		}
	}
	if h.ownMR {
		if err := b.MR.res.acquire(); err != nil {
			h.release(false)
			return fmt.Errorf("bind mw rkey 0x%x to mr: %w", b.MW.RKey(), err)
		}
	}
	if b.MW.mw.pd != q.qp.pd || b.MR.mr.pd != q.qp.pd {
		h.release(false)
		return fmt.Errorf("bind mw rkey 0x%x: the window and the MR must be in the QP's PD", b.MW.RKey())
	}
	if err := b.MW.markBind(b); err != nil {
		h.release(false)
		return err
	}
	if q.sendBinds == nil {
		q.sendBinds = make([]heldBind, 0, MaxBatch)
	}
	q.sendBinds = append(q.sendBinds, h)
	return nil
}

// release unlocks what h acquired and, if undo, takes back its bind mark.
func (h *heldBind) release(undo bool) {
	if undo {
		h.mw.undoBind()
	}
	if h.ownMR {
		h.mr.res.op.RUnlock()
	}
	if h.ownMW {
		h.mw.res.op.RUnlock()
	}
}

// releaseBindsLocked releases the batch's windows and MRs, taking back the
// marks of binds from index posted on (not posted); must hold q.sendMu.
func (q *QP) releaseBindsLocked(posted int) {
	for i := len(q.sendBinds) - 1; i >= 0; i-- {
		h := &q.sendBinds[i]
		h.release(h.idx >= posted)
	}
	q.sendBinds = q.sendBinds[:0]
}

// PostRecv posts receive work requests, one ibv_post_recv per MaxBatch, and
// returns how many were posted.
func (q *QP) PostRecv(wrs []RecvWR) (int, error) {
	if err := q.res.acquire(); err != nil {
		return 0, err
	}
	defer q.res.op.RUnlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	return postRecv(q.qp, nil, q.recvWRs, q.recvSGEs, wrs, fmt.Sprintf("qp %d", q.qpn))
}

// postRecv fills C memory from wrs and posts them to qp, or srq if qp is nil.
func postRecv(qp *C.struct_ibv_qp, srq *C.struct_ibv_srq, cwrs []C.struct_rb_recv_wr, sges []C.struct_ibv_sge, wrs []RecvWR, what string) (int, error) {
	maxSGE := len(sges) / MaxBatch
	posted := 0
	for len(wrs) > 0 {
		n := min(len(wrs), MaxBatch)
		cw := cwrs[:n]
		for i := range cw {
			w := &wrs[i]
			if len(w.SGEs) > maxSGE {
				return posted, fmt.Errorf("post recv %s wr %d: %d SGEs, room for %d", what, w.ID, len(w.SGEs), maxSGE)
			}
			off := i * maxSGE
			cw[i] = C.struct_rb_recv_wr{wr_id: C.uint64_t(w.ID), sge_off: C.uint32_t(off), num_sge: C.uint32_t(len(w.SGEs))}
			for j, s := range w.SGEs {
				sges[off+j] = C.struct_ibv_sge{addr: C.uint64_t(s.Addr), length: C.uint32_t(s.Length), lkey: C.uint32_t(s.LKey)}
			}
		}
		var bad C.int
		if rc := C.rb_post_recv(qp, srq, &cw[0], C.int(n), &sges[0], &bad); rc != 0 {
			posted += int(bad)
			return posted, fmt.Errorf("ibv_post_recv %s wr %d: %w", what, wrs[bad].ID, syscall.Errno(rc))
		}
		posted += n
		wrs = wrs[n:]
	}
	return posted, nil
}

func qpAttrToC(g *QPAttr, a *C.struct_ibv_qp_attr) {
	a.qp_state = C.enum_ibv_qp_state(g.State)
	a.cur_qp_state = C.enum_ibv_qp_state(g.CurState)
	a.path_mtu = C.enum_ibv_mtu(g.PathMTU)
	a.qkey = C.uint32_t(g.QKey)
	a.rq_psn = C.uint32_t(g.RQPSN)
	a.sq_psn = C.uint32_t(g.SQPSN)
	a.dest_qp_num = C.uint32_t(g.DestQPN)
	a.qp_access_flags = C.uint(g.Access)
	a.cap = C.struct_ibv_qp_cap{
		max_send_wr: C.uint32_t(g.Cap.MaxSendWR), max_recv_wr: C.uint32_t(g.Cap.MaxRecvWR),
		max_send_sge: C.uint32_t(g.Cap.MaxSendSGE), max_recv_sge: C.uint32_t(g.Cap.MaxRecvSGE),
		max_inline_data: C.uint32_t(g.Cap.MaxInlineData),
	}
	ahAttrToC(&g.AH, &a.ah_attr)
	a.pkey_index = C.uint16_t(g.PKeyIndex)
	a.max_rd_atomic = C.uint8_t(g.MaxRdAtomic)
	a.max_dest_rd_atomic = C.uint8_t(g.MaxDestRdAtomic)
	a.min_rnr_timer = C.uint8_t(g.MinRNRTimer)
	a.port_num = C.uint8_t(g.Port)
	a.timeout = C.uint8_t(g.Timeout)
	a.retry_cnt = C.uint8_t(g.RetryCnt)
	a.rnr_retry = C.uint8_t(g.RNRRetry)
}

func qpAttrFromC(a *C.struct_ibv_qp_attr) QPAttr {
	return QPAttr{
		State:    QPState(a.qp_state),
		CurState: QPState(a.cur_qp_state),
		PathMTU:  MTU(a.path_mtu),
		QKey:     uint32(a.qkey),
		RQPSN:    uint32(a.rq_psn),
		SQPSN:    uint32(a.sq_psn),
		DestQPN:  uint32(a.dest_qp_num),
		Access:   Access(a.qp_access_flags),
		Cap: QPCap{
			MaxSendWR: uint32(a.cap.max_send_wr), MaxRecvWR: uint32(a.cap.max_recv_wr),
			MaxSendSGE: uint32(a.cap.max_send_sge), MaxRecvSGE: uint32(a.cap.max_recv_sge),
			MaxInlineData: uint32(a.cap.max_inline_data),
		},
		AH:              ahAttrFromC(&a.ah_attr),
		PKeyIndex:       uint16(a.pkey_index),
		MaxRdAtomic:     uint8(a.max_rd_atomic),
		MaxDestRdAtomic: uint8(a.max_dest_rd_atomic),
		MinRNRTimer:     uint8(a.min_rnr_timer),
		Port:            uint8(a.port_num),
		Timeout:         uint8(a.timeout),
		RetryCnt:        uint8(a.retry_cnt),
		RNRRetry:        uint8(a.rnr_retry),
	}
}

func ahAttrToC(g *AHAttr, a *C.struct_ibv_ah_attr) {
	C.rb_set_dgid(a, unsafe.Pointer(&g.GRH.DGID))
	a.grh.flow_label = C.uint32_t(g.GRH.FlowLabel)
	a.grh.sgid_index = C.uint8_t(g.GRH.SGIDIndex)
	a.grh.hop_limit = C.uint8_t(g.GRH.HopLimit)
	a.grh.traffic_class = C.uint8_t(g.GRH.TrafficClass)
	a.dlid = C.uint16_t(g.DLID)
	a.sl = C.uint8_t(g.SL)
	a.src_path_bits = C.uint8_t(g.SrcPathBits)
	a.static_rate = C.uint8_t(g.StaticRate)
	a.is_global = 0
	if g.IsGlobal {
		a.is_global = 1
	}
	a.port_num = C.uint8_t(g.Port)
}

func ahAttrFromC(a *C.struct_ibv_ah_attr) AHAttr {
	var g AHAttr
	C.rb_get_dgid(a, unsafe.Pointer(&g.GRH.DGID))
	g.GRH.FlowLabel = uint32(a.grh.flow_label)
	g.GRH.SGIDIndex = uint8(a.grh.sgid_index)
	g.GRH.HopLimit = uint8(a.grh.hop_limit)
	g.GRH.TrafficClass = uint8(a.grh.traffic_class)
	g.DLID = uint16(a.dlid)
	g.SL = uint8(a.sl)
	g.SrcPathBits = uint8(a.src_path_bits)
	g.StaticRate = uint8(a.static_rate)
	g.IsGlobal = a.is_global != 0
	g.Port = uint8(a.port_num)
	return g
}
