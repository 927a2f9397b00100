//go:build linux && cgo && !noibverbs

package ibv

/*
#include <errno.h>
#include <infiniband/verbs.h>

static struct ibv_ah *rb_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *a, int *err) {
	errno = 0;
	struct ibv_ah *ah = ibv_create_ah(pd, a);
	*err = ah ? 0 : (errno ? errno : ENOMEM);
	return ah;
}
*/
import "C"

import (
	"fmt"
	"syscall"
)

// AH is an address handle (struct ibv_ah): the destination of UD sends.
type AH struct {
	res  resource
	ah   *C.struct_ibv_ah
	attr AHAttr
}

// NewAH creates an address handle for attr.
func (pd *PD) NewAH(attr AHAttr) (*AH, error) {
	ah := &AH{attr: attr}
	err := ah.res.create(kindAH, []*resource{&pd.res}, func() (func() error, error) {
		var a C.struct_ibv_ah_attr
		ahAttrToC(&attr, &a)
		var cerr C.int
		ah.ah = C.rb_create_ah(pd.pd, &a, &cerr)
		if ah.ah == nil {
			return nil, fmt.Errorf("ibv_create_ah dgid %s sgid index %d: %w", attr.GRH.DGID, attr.GRH.SGIDIndex, syscall.Errno(cerr))
		}
		return ah.free, nil
	})
	if err != nil {
		return nil, fmt.Errorf("new ah: %w", err)
	}
	return ah, nil
}

func (ah *AH) free() error {
	if rc := C.ibv_destroy_ah(ah.ah); rc != 0 {
		return fmt.Errorf("ibv_destroy_ah: %w", syscall.Errno(rc))
	}
	return nil
}

// Close destroys the address handle.
func (ah *AH) Close() error {
	if ah == nil {
		return nil
	}
	return ah.res.close()
}

// Attr is the address vector the AH was made from.
func (ah *AH) Attr() AHAttr { return ah.attr }
