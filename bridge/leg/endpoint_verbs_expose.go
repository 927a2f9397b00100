package leg

import (
	"errors"
	"fmt"

	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/ibv"
)

// Staging on a verbs leg (session.Exposer): the peer of a verbs QP is an
// HCA's RC peer, which executes the one-sided operations a protocol's
// descriptors ask of it against the gateway's memory. The pool's MR
// grants no remote access, so each staging buffer the session stages for
// a request is exposed on its own, and revoked when the request
// completed:
//
//   - with windows (a device with type 2 memory windows: rxe, ConnectX):
//     the buffer is registered by an MR of its own that grants no remote
//     access (local write and window binding only), and a type 2 window
//     bound on this connection's QP opens it to the peer, for remote read
//     or remote write alone. The key is valid on this QP only: another
//     connection's peer, even on the same HCA, gets a remote access
//     error. Revoke deallocates the window. The MR is the request's
//     extent exactly, which keeps the window's bounds exact where the
//     device checks a window's accesses against its MR's range instead of
//     the window's (rxe does: ibv's TestGuestMWRefused); the device keeps
//     it idle for the next exposure of that extent (stagingMRs), so a
//     request costs no registration of its own.
//   - without them (siw): the MR itself grants the remote access, and its
//     key is valid on every QP of its protection domain until Revoke
//     deregisters it. So the connection's QP is in a PD of its own
//     (VerbsOptions.OwnPD, made by verbsLeg.scope for a route that
//     stages), where the pool's arena is registered again: no other
//     connection's peer, even on the same device, can use the key. An
//     endpoint without one refuses to expose.
//
// Binds (BIND_MW work requests) take send queue entries the session does
// not count: windowReserve of the QP's are kept for them.

var _ session.Exposer = (*VerbsEndpoint)(nil)

// windowReserve is the send queue entries kept for window work requests,
// and so the exposures an endpoint binds at once.
const windowReserve = 32

// localBit marks the work request IDs of window work requests.
const localBit = 1 << 62

// Expose implements session.Exposer: b (in the pool's arena, whose
// memory is mapped outside Go's heap) is opened to the peer for READ, or
// WRITE when write.
func (e *VerbsEndpoint) Expose(b []byte, write bool) (session.Exposure, error) {
	if len(b) == 0 {
		return nil, fmt.Errorf("bridge: verbs QP %d: expose no bytes", e.qp.QPN())
	}
	remote := ibv.AccessRemoteRead
	if write {
		remote = ibv.AccessRemoteWrite
	}
	if !e.windows {
		if e.ownPD == nil {
			return nil, fmt.Errorf("bridge: verbs QP %d: expose staging: the device has no memory windows and the QP shares the leg's protection domain, where the key would be valid on every connection", e.qp.QPN())
		}
		access := remote
		if write {
			access |= ibv.AccessLocalWrite
		}
		mr, err := e.qp.PD().RegMR(b, access)
		if err != nil {
			return nil, fmt.Errorf("bridge: verbs QP %d: expose %d bytes of staging: %w", e.qp.QPN(), len(b), err)
		}
		e.stats.Registered.Add(1)
		e.stats.Exposed.Add(1)
		return &verbsExposure{e: e, mr: mr, rkey: mr.RKey()}, nil
	}
	select {
	case e.windowSlots <- struct{}{}:
	case <-e.done:
		return nil, fmt.Errorf("bridge: verbs QP %d: expose staging: %w", e.qp.QPN(), session.ErrEndpointFailed)
	}
	x, err := e.bind(b, remote)
	if err != nil {
		<-e.windowSlots
		return nil, err
	}
	e.stats.Exposed.Add(1)
	return x, nil
}

// bind registers b (or takes the idle registration of b the device kept:
// stagingMRs) and binds a window over it on the QP.
func (e *VerbsEndpoint) bind(b []byte, remote ibv.Access) (*verbsExposure, error) {
	var mr *ibv.MR
	var reused bool
	var err error
	if e.mrs != nil {
		mr, reused, err = e.mrs.get(b)
	} else {
		mr, err = e.qp.PD().RegMR(b, ibv.AccessLocalWrite|ibv.AccessMWBind)
	}
	if err != nil {
		return nil, fmt.Errorf("bridge: verbs QP %d: register %d bytes of staging: %w", e.qp.QPN(), len(b), err)
	}
	if !reused {
		e.stats.Registered.Add(1)
	}
	mw, err := e.qp.PD().AllocMW(ibv.MWType2)
	if err != nil {
		e.releaseMR(b, mr)
		return nil, fmt.Errorf("bridge: verbs QP %d: a window for staging: %w", e.qp.QPN(), err)
	}
	x := &verbsExposure{e: e, mr: mr, mw: mw, rkey: mw.NextRKey(), b: b}
	wr := ibv.SendWR{Op: ibv.OpBindMW, Flags: ibv.SendSignaled,
		Bind: ibv.MWBind{MW: mw, RKey: x.rkey, MR: mr, Addr: mr.Addr(), Length: uint64(len(b)), Access: remote}}
	bound := func(st ibv.WCStatus) {
		_ = mw.BindCompleted(st)
		if st != ibv.WCSuccess && st != ibv.WCWRFlushErr {
			// The QP left RTS: what follows on it flushes. Said here, as
			// the session sees no op of its own fail for it.
			e.report(fmt.Errorf("bind a window over %d bytes of staging (rkey %#x): %v", len(b), x.rkey, st))
		}
	}
	if err := e.postLocal(&wr, bound); err != nil {
		mw.Close()
		e.releaseMR(b, mr)
		return nil, fmt.Errorf("bridge: verbs QP %d: bind a window over staging: %w", e.qp.QPN(), err)
	}
	return x, nil
}

// releaseMR hands back the registration of b a window was bound over,
// once no window is: to the device's idle ones (stagingMRs), or
// deregistered.
func (e *VerbsEndpoint) releaseMR(b []byte, mr *ibv.MR) error {
	if e.mrs != nil {
		return e.mrs.put(b, mr)
	}
	return mr.Close()
}

// postLocal posts a window work request; done gets its completion's
// status (a flushed one when the QP failed), on the completion goroutine.
func (e *VerbsEndpoint) postLocal(wr *ibv.SendWR, done func(ibv.WCStatus)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return session.ErrEndpointFailed
	}
	e.localNext++
	id := e.localNext
	wr.ID = localBit | id
	e.local[id] = done
	if _, err := e.qp.PostSend([]ibv.SendWR{*wr}); err != nil {
		delete(e.local, id)
		return err
	}
	return nil
}

// localDone takes a window work request's completion.
func (e *VerbsEndpoint) localDone(wc *ibv.WorkCompletion) {
	id := wc.ID &^ localBit
	e.mu.Lock()
	done := e.local[id]
	delete(e.local, id)
	e.mu.Unlock()
	if done != nil {
		done(wc.Status)
	}
}

// verbsExposure is staging opened to the peer for one request.
type verbsExposure struct {
	e    *VerbsEndpoint
	mr   *ibv.MR
	mw   *ibv.MW // nil without windows
	rkey uint32
	b    []byte // with a window: the memory mr registers
}

func (x *verbsExposure) Addr() uint64 { return x.mr.Addr() }
func (x *verbsExposure) RKey() uint32 { return x.rkey }

// Revoke ends the peer's access. A window is deallocated, which
// invalidates it at once: no work request, so no wait behind the send
// queue's earlier work (rxe fences a LOCAL_INV behind all of it, which
// at a queue depth of 32 held each command's completion for tens of
// milliseconds). Its registration, which grants no remote access, goes
// back to the device's idle ones (or is deregistered, without them).
func (x *verbsExposure) Revoke() error {
	e := x.e
	e.stats.Revoked.Add(1)
	if x.mw == nil {
		return x.mr.Close()
	}
	defer func() { <-e.windowSlots }()
	if err := x.mw.Close(); err != nil {
		// A window not known to be gone: its registration is given up,
		// never kept for another request.
		return errors.Join(err, x.mr.Close())
	}
	return e.releaseMR(x.b, x.mr)
}
