//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <stdint.h>
#include <endian.h>
#include <infiniband/verbs.h>
#include "shim.h"

// rb_poll_cq polls up to n (<= 64) completions into out: one cgo call.
static int rb_poll_cq(struct ibv_cq *cq, int n, struct rb_wc *out) {
	struct ibv_wc wc[64];
	if (n > 64) n = 64;
	int got = ibv_poll_cq(cq, n, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode = wc[i].opcode;
		out[i].vendor_err = wc[i].vendor_err;
		out[i].byte_len = wc[i].byte_len;
		out[i].imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) ? be32toh(wc[i].imm_data) : wc[i].invalidated_rkey;
		out[i].qp_num = wc[i].qp_num;
		out[i].src_qp = wc[i].src_qp;
		out[i].wc_flags = wc[i].wc_flags;
		out[i].pkey_index = wc[i].pkey_index;
		out[i].slid = wc[i].slid;
		out[i].sl = wc[i].sl;
		out[i].dlid_path_bits = wc[i].dlid_path_bits;
	}
	return got;
}

static struct ibv_comp_channel *rb_create_comp_channel(struct ibv_context *ctx, int *err) {
	errno = 0;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	*err = ch ? 0 : (errno ? errno : ENOMEM);
	return ch;
}
static struct ibv_cq *rb_create_cq(struct ibv_context *ctx, int cqe, uintptr_t h, struct ibv_comp_channel *ch, int vec, int *err) {
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(ctx, cqe, (void *)h, ch, vec);
	*err = cq ? 0 : (errno ? errno : ENOMEM);
	return cq;
}
static int rb_req_notify_cq(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }
// rb_get_cq_event returns 0 with an event, else errno (EAGAIN: none yet).
static int rb_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	return ibv_get_cq_event(ch, &cq, &ctx) ? errno : 0;
}
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/cgo"
	"sync"
	"syscall"
	"unsafe"
)

// CQ is a completion queue (struct ibv_cq), with its own completion channel
// unless it busy-polls. Wait sleeps in Go's poller on the channel's fd.
type CQ struct {
	res      resource
	cq       *C.struct_ibv_cq
	ch       *C.struct_ibv_comp_channel // nil when busy-polling
	file     *os.File                   // dup of ch's fd, in Go's poller
	handle   cgo.Handle
	device   *Device
	busyPoll bool
	entries  int

	mu      sync.Mutex // serializes Wait; guards unacked
	unacked int        // completion events read but not acknowledged
}

// NewCQ creates a completion queue on d.
func (d *Device) NewCQ(opts CQOptions) (*CQ, error) {
	if opts.Entries <= 0 {
		return nil, fmt.Errorf("new cq on %s: Entries must be > 0", d.name)
	}
	cq := &CQ{device: d, busyPoll: opts.BusyPoll}
	err := cq.res.create(kindCQ, []*resource{&d.res}, func() (func() error, error) {
		var cerr C.int
		if !opts.BusyPoll {
			cq.ch = C.rb_create_comp_channel(d.ctx, &cerr)
			if cq.ch == nil {
				return nil, fmt.Errorf("ibv_create_comp_channel %s: %w", d.name, syscall.Errno(cerr))
			}
			f, err := pollFile(int(cq.ch.fd), d.name+" completion channel")
			if err != nil {
				C.ibv_destroy_comp_channel(cq.ch)
				return nil, err
			}
			cq.file = f
		}
		cq.handle = cgo.NewHandle(cq)
		cq.cq = C.rb_create_cq(d.ctx, C.int(opts.Entries), C.uintptr_t(cq.handle), cq.ch, C.int(opts.CompVector), &cerr)
		if cq.cq == nil {
			cq.handle.Delete()
			if cq.ch != nil {
				cq.file.Close()
				C.ibv_destroy_comp_channel(cq.ch)
			}
			return nil, fmt.Errorf("ibv_create_cq %s %d entries: %w", d.name, opts.Entries, syscall.Errno(cerr))
		}
		cq.entries = int(cq.cq.cqe)
		return cq.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("new cq: %w", err)
	}
	cq.res.interrupt = cq.interrupt
	return cq, nil
}

func (cq *CQ) interrupt() {
	if cq.file != nil {
		cq.file.Close()
	}
}

func (cq *CQ) free() error {
	cq.mu.Lock()
	if cq.unacked > 0 {
		C.ibv_ack_cq_events(cq.cq, C.uint(cq.unacked))
		cq.unacked = 0
	}
	cq.mu.Unlock()
	var err error
	if rc := C.ibv_destroy_cq(cq.cq); rc != 0 {
		err = fmt.Errorf("ibv_destroy_cq %s: %w", cq.device.name, syscall.Errno(rc))
	}
	if cq.ch != nil {
		if rc := C.ibv_destroy_comp_channel(cq.ch); rc != 0 && err == nil {
			err = fmt.Errorf("ibv_destroy_comp_channel %s: %w", cq.device.name, syscall.Errno(rc))
		}
	}
	cq.handle.Delete()
	return err
}

// Close destroys the CQ and, first, the QPs that use it.
func (cq *CQ) Close() error {
	if cq == nil {
		return nil
	}
	return cq.res.close()
}

// Entries is the CQ's actual size (at least what was asked for).
func (cq *CQ) Entries() int { return cq.entries }

// Poll takes up to len(wcs) completions without waiting and returns how many
// it took. One cgo call per MaxBatch completions.
func (cq *CQ) Poll(wcs []WorkCompletion) (int, error) {
	if err := cq.res.acquire(); err != nil {
		return 0, err
	}
	defer cq.res.op.RUnlock()
	return cq.pollLocked(wcs)
}

func (cq *CQ) pollLocked(wcs []WorkCompletion) (int, error) {
	total := 0
	for len(wcs) > 0 {
		n := min(len(wcs), MaxBatch)
		got := C.rb_poll_cq(cq.cq, C.int(n), (*C.struct_rb_wc)(unsafe.Pointer(&wcs[0])))
		if got < 0 {
			return total, fmt.Errorf("ibv_poll_cq %s: %w", cq.device.name, syscall.Errno(-got))
		}
		total += int(got)
		if int(got) < n {
			break
		}
		wcs = wcs[n:]
	}
	return total, nil
}

// Wait returns at least one completion (up to len(wcs)), waiting for it if
// needed: on the completion channel in Go's poller (no thread, no spinning),
// or by spinning on Poll when the CQ busy-polls. Only one goroutine should
// Wait on a CQ at a time.
func (cq *CQ) Wait(ctx context.Context, wcs []WorkCompletion) (int, error) {
	if len(wcs) == 0 {
		return 0, fmt.Errorf("cq wait: empty completion slice")
	}
	if err := cq.res.acquire(); err != nil {
		return 0, err
	}
	defer cq.res.op.RUnlock()
	if cq.busyPoll {
		for {
			if n, err := cq.pollLocked(wcs); n > 0 || err != nil {
				return n, err
			}
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			runtime.Gosched()
		}
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	for {
		if n, err := cq.pollLocked(wcs); n > 0 || err != nil {
			return n, err
		}
		if rc := C.rb_req_notify_cq(cq.cq); rc != 0 {
			return 0, fmt.Errorf("ibv_req_notify_cq %s: %w", cq.device.name, syscall.Errno(rc))
		}
		// A completion may have arrived between the poll and the arm.
		if n, err := cq.pollLocked(wcs); n > 0 || err != nil {
			return n, err
		}
		var rc C.int
		err := waitRead(ctx, cq.file, func() bool {
			rc = C.rb_get_cq_event(cq.ch)
			return syscall.Errno(rc) != syscall.EAGAIN
		})
		if err != nil {
			return 0, fmt.Errorf("cq wait on %s: %w", cq.device.name, err)
		}
		if rc != 0 {
			return 0, fmt.Errorf("ibv_get_cq_event %s: %w", cq.device.name, syscall.Errno(rc))
		}
		// Acknowledging takes a mutex inside libibverbs: do it in batches.
		if cq.unacked++; cq.unacked >= 64 {
			C.ibv_ack_cq_events(cq.cq, C.uint(cq.unacked))
			cq.unacked = 0
		}
	}
}
