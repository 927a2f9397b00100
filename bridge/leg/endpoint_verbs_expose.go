package leg

import (
	"fmt"

	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/ibv"
)

// Staging on a verbs leg (session.Exposer): the peer of a verbs QP is an
// HCA's RC peer, which executes the one-sided operations a protocol's
// descriptors ask of it against the gateway's memory. The pool's MR
// grants no remote access, so each staging buffer the session stages is
// exposed by a memory registration of its own, over that buffer alone,
// granting that access alone (remote read, or remote write), and
// deregistered when its request completed: the key is valid for that
// request's lifetime only, and names nothing else.
//
// Its scope is the leg's protection domain: while the request is
// outstanding, another QP of the same PD that learnt the key could use
// it. A memory window of type 2, bound to the session's QP, narrows that
// to the one connection where the device has them.

var _ session.Exposer = (*VerbsEndpoint)(nil)

// Expose implements session.Exposer: b (in the pool's arena, whose
// memory is mapped outside Go's heap) is registered for the peer's READ,
// or WRITE when write.
func (e *VerbsEndpoint) Expose(b []byte, write bool) (session.Exposure, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("bridge: verbs QP %d: expose no bytes", e.qp.QPN())
	}
	access := ibv.AccessRemoteRead
	if write {
		access = ibv.AccessLocalWrite | ibv.AccessRemoteWrite
	}
	mr, err := e.qp.PD().RegMR(b, access)
	if err != nil {
		return nil, fmt.Errorf("bridge: verbs QP %d: expose %d bytes of staging: %w", e.qp.QPN(), len(b), err)
	}
	e.stats.Exposed.Add(1)
	return verbsExposure{mr: mr, stats: e.stats}, nil
}

// verbsExposure is staging registered for one request.
type verbsExposure struct {
	mr    *ibv.MR
	stats *VerbsStats
}

func (x verbsExposure) Addr() uint64 { return x.mr.Addr() }
func (x verbsExposure) RKey() uint32 { return x.mr.RKey() }

// Revoke deregisters the staging: the key is gone from the device.
func (x verbsExposure) Revoke() error {
	x.stats.Revoked.Add(1)
	return x.mr.Close()
}
