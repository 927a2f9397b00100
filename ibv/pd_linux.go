//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <infiniband/verbs.h>

static struct ibv_pd *rb_alloc_pd(struct ibv_context *ctx, int *err) {
	errno = 0;
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	*err = pd ? 0 : (errno ? errno : ENOMEM);
	return pd;
}
*/
import "C"

import (
	"fmt"
	"syscall"
)

// PD is a protection domain (struct ibv_pd): the scope in which MRs, QPs,
// AHs and SRQs may be used together.
type PD struct {
	res    resource
	pd     *C.struct_ibv_pd
	device *Device
}

// AllocPD allocates a protection domain on d.
func (d *Device) AllocPD() (*PD, error) {
	pd := &PD{device: d}
	err := pd.res.create(kindPD, []*resource{&d.res}, func() (func() error, error) {
		var cerr C.int
		pd.pd = C.rb_alloc_pd(d.ctx, &cerr)
		if pd.pd == nil {
			return nil, fmt.Errorf("ibv_alloc_pd %s: %w", d.name, syscall.Errno(cerr))
		}
		return pd.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("alloc pd on %s: %w", d.name, err)
	}
	return pd, nil
}

func (pd *PD) free() error {
	if rc := C.ibv_dealloc_pd(pd.pd); rc != 0 {
		return fmt.Errorf("ibv_dealloc_pd %s: %w", pd.device.name, syscall.Errno(rc))
	}
	return nil
}

// Close frees the PD and, first, every MR, QP, AH and SRQ made from it.
func (pd *PD) Close() error {
	if pd == nil {
		return nil
	}
	return pd.res.close()
}

// Device is the device the PD belongs to.
func (pd *PD) Device() *Device { return pd.device }
