package ibv

import "fmt"

// Memory windows (struct ibv_mw) hand a peer a key to part of an MR for a
// while, without registering memory. rbridge binds type 2 windows: a window
// is allocated once (PD.AllocMW), then bound by a BIND_MW work request on the
// send queue of the one QP whose peer may use it, and invalidated by a
// LOCAL_INV of its rkey when the peer's turn is over.
//
//	AllocMW(MWType2) ---> FREE
//	FREE  --- BIND_MW(rkey k, MR span, access) completes ---> VALID (k, this QP only)
//	VALID --- LOCAL_INV(k) completes ---> FREE (k refused from now on)
//	any   --- Close ---> freed (closed with its PD, and with the MR of its last bind)
//
// A type 2 bind needs the window FREE (IBA o10-37.2.30; rxe refuses a bind
// of a bound window with an MW_BIND_ERR completion), the MR registered with
// AccessMWBind in the QP's PD, and the span inside the MR; a window that
// grants remote write needs an MR with local write (C10-74). The MR itself
// need not grant any remote access: the window does.
//
// Keys: each bind gives the window a new rkey, the old one with its low 8
// bits (the key) replaced (ibv_inc_rkey: MW.NextRKey). The window's RKey
// changes only when its bind is settled as successful (MW.BindCompleted);
// until then the window has a bind pending and PostSend refuses another.

// MWType is a memory window's type (enum ibv_mw_type).
type MWType uint8

// Memory window types.
const (
	// MWType1 windows are bound by a verb (ibv_bind_mw), not on a QP's
	// send queue; rbridge allocates them but does not bind them.
	MWType1 MWType = 1
	// MWType2 windows are bound by a BIND_MW work request and usable only
	// through the QP that bound them.
	MWType2 MWType = 2
)

func (t MWType) String() string {
	switch t {
	case MWType1:
		return "type 1"
	case MWType2:
		return "type 2"
	}
	return fmt.Sprintf("MWType(%d)", uint8(t))
}

// MWBind is what a BIND_MW work request binds (SendWR.Bind; struct
// ibv_send_wr's bind_mw and struct ibv_mw_bind_info): the window, its new
// rkey, and the span of an MR it opens with which rights.
type MWBind struct {
	MW *MW
	// RKey is the window's rkey once bound: MW.NextRKey(). Only its low 8
	// bits are the caller's; the rest must be the window's.
	RKey uint32
	MR   *MR
	// Addr and Length are the span, inside MR (a peer names Addr in its
	// RDMA requests).
	Addr   uint64
	Length uint64
	// Access is what the peer may do: AccessRemoteRead, AccessRemoteWrite,
	// AccessRemoteAtomic.
	Access Access
}

// checkBind checks a bind's arguments against the window's state: its
// type, its current rkey and whether a bind is pending.
func checkBind(b *MWBind, typ MWType, cur uint32, pending bool) error {
	switch {
	case b.MR == nil:
		return fmt.Errorf("bind mw rkey 0x%x: no MR", cur)
	case typ != MWType2:
		return fmt.Errorf("bind mw rkey 0x%x: a %v window is bound by ibv_bind_mw, not a work request: %w", cur, typ, ErrNotSupported)
	case pending:
		return fmt.Errorf("bind mw rkey 0x%x: a bind is pending; settle it with BindCompleted first", cur)
	case b.RKey>>8 != cur>>8:
		return fmt.Errorf("bind mw rkey 0x%x: new rkey 0x%x has another index (only the low 8 bits change; use NextRKey)", cur, b.RKey)
	case b.RKey == cur:
		return fmt.Errorf("bind mw rkey 0x%x: the new rkey is the current one (use NextRKey)", cur)
	case b.Length == 0:
		return fmt.Errorf("bind mw rkey 0x%x: zero length (a type 2 window is unbound by LOCAL_INV)", cur)
	case b.Access&^(AccessRemoteRead|AccessRemoteWrite|AccessRemoteAtomic|AccessLocalWrite|AccessZeroBased) != 0:
		return fmt.Errorf("bind mw rkey 0x%x: access %v: only remote read, write, atomic, local write and zero based apply to a window", cur, b.Access)
	}
	return nil
}
