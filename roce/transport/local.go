package transport

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"unsafe"
)

// localTarget is the Target a QP has when none is given: it executes
// requests at once against the QP's receive queue and its PD's memory
// regions, with the rkey, bounds and access checks of IBTA 9.7.4. It runs
// under QP.mu, as every Target does.
type localTarget struct {
	qp *QP
	// A SEND in progress: the receive WQE it fills.
	cur    *RecvWR
	curOff int
	// An RDMA WRITE in progress: the region it lands in.
	wmr *MR
}

var _ Target = (*localTarget)(nil)

func (t *localTarget) Request(r *Request) Reply {
	switch r.Op {
	case OpSend, OpSendWithImm, OpSendWithInv:
		return t.send(r)
	case OpWrite, OpWriteWithImm:
		return t.write(r)
	case OpRead:
		return t.read(r)
	}
	return t.atomic(r)
}

func (t *localTarget) Abandon() {
	if t.cur != nil {
		t.qp.pushRecvLocked(WC{ID: t.cur.ID, Status: StatusWRFlushErr, Opcode: OpRecv, QPN: t.qp.qpn})
		t.cur = nil
	}
	t.wmr = nil
}

func (t *localTarget) send(r *Request) Reply {
	qp := t.qp
	if r.First {
		if len(qp.rq) == 0 {
			return Reply{Result: NoCredit}
		}
		wr := qp.rq[0]
		qp.rq = qp.rq[1:]
		t.cur, t.curOff = &wr, 0
	}
	buf, _ := t.cur.Local.bytes()
	if t.curOff+len(r.Payload) > len(buf) {
		qp.pushRecvLocked(WC{ID: t.cur.ID, Status: StatusLocLenErr, Opcode: OpRecv, QPN: qp.qpn})
		t.cur = nil
		return Reply{Result: Failed, Status: StatusRemInvReqErr}
	}
	t.curOff += copy(buf[t.curOff:], r.Payload)
	if r.Last {
		wc := WC{ID: t.cur.ID, Opcode: OpRecv, ByteLen: t.curOff, QPN: qp.qpn}
		switch r.Op {
		case OpSendWithImm:
			wc.Imm, wc.HasImm = r.Imm, true
		case OpSendWithInv:
			wc.InvRKey, wc.HasInv = r.InvRKey, true
		}
		qp.pushRecvLocked(wc)
		t.cur = nil
	}
	return Reply{}
}

func (t *localTarget) write(r *Request) Reply {
	qp := t.qp
	// A write with immediate consumes a receive WQE: without one, RNR NAK
	// before anything is written, so the retry finds the same state.
	if r.Op == OpWriteWithImm && len(qp.rq) == 0 {
		return Reply{Result: NoCredit}
	}
	if r.First {
		t.wmr = nil
		if r.Length > 0 {
			mr, ok := qp.pd.lookup(r.RKey, AccessRemoteWrite)
			if ok {
				_, ok = mr.slice(r.VA, r.Length)
			}
			if !ok {
				return Reply{Result: Failed, Status: StatusRemAccessErr}
			}
			t.wmr = mr
		}
	}
	if n := uint32(len(r.Payload)); n > 0 {
		dst, ok := t.wmr.slice(r.VA, n)
		if !ok {
			return Reply{Result: Failed, Status: StatusRemAccessErr}
		}
		copy(dst, r.Payload)
	}
	if r.Last {
		t.wmr = nil
		if r.Op == OpWriteWithImm {
			wr := qp.rq[0]
			qp.rq = qp.rq[1:]
			qp.pushRecvLocked(WC{ID: wr.ID, Opcode: OpRecvWriteWithImm, ByteLen: int(r.Length), Imm: r.Imm, HasImm: true, QPN: qp.qpn})
		}
	}
	return Reply{}
}

func (t *localTarget) read(r *Request) Reply {
	if r.Length == 0 {
		return Reply{}
	}
	mr, ok := t.qp.pd.lookup(r.RKey, AccessRemoteRead)
	var data []byte
	if ok {
		data, ok = mr.slice(r.VA, r.Length)
	}
	if !ok {
		return Reply{Result: Failed, Status: StatusRemAccessErr}
	}
	return Reply{Data: data}
}

func (t *localTarget) atomic(r *Request) Reply {
	mr, ok := t.qp.pd.lookup(r.RKey, AccessRemoteAtomic)
	var b []byte
	if ok {
		b, ok = mr.slice(r.VA, 8)
	}
	if !ok {
		return Reply{Result: Failed, Status: StatusRemAccessErr}
	}
	return Reply{Orig: atomic64(b, r.Op == OpCompareSwap, r.Compare, r.SwapAdd)}
}

// unalignedAtomics serializes atomics on memory that is not 8-byte aligned.
var unalignedAtomics sync.Mutex

// atomic64 runs an atomic on the 8 bytes of b (host byte order, little
// endian on the platforms rbridge runs on) and returns the value before.
func atomic64(b []byte, cas bool, compare, swapAdd uint64) uint64 {
	if uintptr(unsafe.Pointer(&b[0]))%8 == 0 {
		p := (*uint64)(unsafe.Pointer(&b[0]))
		if !cas {
			return atomic.AddUint64(p, swapAdd) - swapAdd
		}
		for {
			old := atomic.LoadUint64(p)
			if old != compare {
				return old
			}
			if atomic.CompareAndSwapUint64(p, old, swapAdd) {
				return old
			}
		}
	}
	unalignedAtomics.Lock()
	defer unalignedAtomics.Unlock()
	old := binary.LittleEndian.Uint64(b)
	switch {
	case !cas:
		binary.LittleEndian.PutUint64(b, old+swapAdd)
	case old == compare:
		binary.LittleEndian.PutUint64(b, swapAdd)
	}
	return old
}
