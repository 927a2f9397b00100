package leg

import (
	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/roce/transport"
)

// One vocabulary: a session speaks transport's opcodes, statuses and
// access flags; the verbs endpoint translates to and from libibverbs'
// numbering here, and nowhere else. NAK syndromes meet statuses in
// transport.NAKCode and transport.NAKStatus.

// opcodes pairs every send opcode of the two worlds, with the name the
// metrics give it (their opcode label), in transport's order.
var opcodes = [...]struct {
	t    transport.Opcode
	v    ibv.Opcode
	name string
}{
	{transport.OpSend, ibv.OpSend, "send"},
	{transport.OpSendWithImm, ibv.OpSendWithImm, "send_with_imm"},
	{transport.OpSendWithInv, ibv.OpSendWithInv, "send_with_inv"},
	{transport.OpWrite, ibv.OpWrite, "write"},
	{transport.OpWriteWithImm, ibv.OpWriteWithImm, "write_with_imm"},
	{transport.OpRead, ibv.OpRead, "read"},
	{transport.OpCompareSwap, ibv.OpCompareSwap, "compare_swap"},
	{transport.OpFetchAdd, ibv.OpFetchAdd, "fetch_add"},
}

// verbsOpcode returns the verbs opcode of a send opcode.
func verbsOpcode(o transport.Opcode) (ibv.Opcode, bool) {
	for _, p := range opcodes {
		if p.t == o {
			return p.v, true
		}
	}
	return 0, false
}

// OpcodeName is the name the metrics and /status give a send opcode (their
// opcode label): "send", "rdma_write", ...; the table is in transport's
// order.
func OpcodeName(o transport.Opcode) string {
	if int(o) < len(opcodes) && opcodes[o].t == o {
		return opcodes[o].name
	}
	return o.String()
}

// transportOpcode returns the send opcode of a verbs opcode.
func transportOpcode(o ibv.Opcode) (transport.Opcode, bool) {
	for _, p := range opcodes {
		if p.v == o {
			return p.t, true
		}
	}
	return 0, false
}

// statuses pairs every completion status the transport knows with verbs'.
var statuses = [...]struct {
	t transport.Status
	v ibv.WCStatus
}{
	{transport.StatusSuccess, ibv.WCSuccess},
	{transport.StatusLocLenErr, ibv.WCLocLenErr},
	{transport.StatusLocQPOpErr, ibv.WCLocQPOpErr},
	{transport.StatusLocProtErr, ibv.WCLocProtErr},
	{transport.StatusWRFlushErr, ibv.WCWRFlushErr},
	{transport.StatusBadRespErr, ibv.WCBadRespErr},
	{transport.StatusLocAccessErr, ibv.WCLocAccessErr},
	{transport.StatusRemInvReqErr, ibv.WCRemInvReqErr},
	{transport.StatusRemAccessErr, ibv.WCRemAccessErr},
	{transport.StatusRemOpErr, ibv.WCRemOpErr},
	{transport.StatusRetryExcErr, ibv.WCRetryExcErr},
	{transport.StatusRNRRetryExcErr, ibv.WCRNRRetryExcErr},
}

// transportStatus returns the status of a verbs completion. Statuses the
// transport has no name for (RD, EEC, memory windows, fatal and general
// errors) are remote operational errors to a requester on the other leg.
func transportStatus(s ibv.WCStatus) transport.Status {
	for _, p := range statuses {
		if p.v == s {
			return p.t
		}
	}
	return transport.StatusRemOpErr
}

// verbsStatus returns the verbs status of a transport status.
func verbsStatus(s transport.Status) ibv.WCStatus {
	for _, p := range statuses {
		if p.t == s {
			return p.v
		}
	}
	return ibv.WCGeneralErr
}

// accesses pairs the access rights of the two worlds.
var accesses = [...]struct {
	t transport.Access
	v ibv.Access
}{
	{transport.AccessLocalWrite, ibv.AccessLocalWrite},
	{transport.AccessRemoteWrite, ibv.AccessRemoteWrite},
	{transport.AccessRemoteRead, ibv.AccessRemoteRead},
	{transport.AccessRemoteAtomic, ibv.AccessRemoteAtomic},
}

// verbsAccess returns the verbs flags of transport access rights.
func verbsAccess(a transport.Access) ibv.Access {
	var v ibv.Access
	for _, p := range accesses {
		if a&p.t != 0 {
			v |= p.v
		}
	}
	return v
}

// transportAccess returns the transport rights of verbs flags (those the
// transport has).
func transportAccess(v ibv.Access) transport.Access {
	var a transport.Access
	for _, p := range accesses {
		if v&p.v != 0 {
			a |= p.t
		}
	}
	return a
}
