package leg

import (
	"testing"

	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/roce/transport"
)

func TestOpcodeTable(t *testing.T) {
	// The metrics' opcode label: the verbs name in snake case, without
	// RDMA_ and ATOMIC_.
	labels := map[transport.Opcode]string{transport.OpSend: "send", transport.OpSendWithImm: "send_with_imm",
		transport.OpSendWithInv: "send_with_inv", transport.OpWrite: "write", transport.OpWriteWithImm: "write_with_imm",
		transport.OpRead: "read", transport.OpCompareSwap: "compare_swap", transport.OpFetchAdd: "fetch_add"}
	for o := transport.OpSend; o <= transport.OpFetchAdd; o++ {
		v, ok := verbsOpcode(o)
		if !ok {
			t.Fatalf("%v has no verbs opcode", o)
		}
		// Both worlds name their opcodes after the IBTA's verbs.
		if v.String() != o.String() {
			t.Errorf("%v translates to verbs %v", o, v)
		}
		if back, ok := transportOpcode(v); !ok || back != o {
			t.Errorf("%v -> %v -> %v", o, v, back)
		}
		// The sessions' counters are indexed by opcode, the metrics'
		// label named from the table: both need the table in order.
		if int(o) >= len(opcodes) || int(o) >= session.NumOpcodes {
			t.Fatalf("%v is beyond the opcode table (%d) or the counted opcodes (%d)", o, len(opcodes), session.NumOpcodes)
		}
		if opcodes[o].t != o {
			t.Errorf("%v is not at its own index of the opcode table", o)
		}
		if got := opcodes[o].name; got != labels[o] {
			t.Errorf("%v is named %q in the metrics, want %q", o, got, labels[o])
		}
	}
	if len(opcodes) != session.NumOpcodes {
		t.Errorf("%d opcodes in the table, %d counted", len(opcodes), session.NumOpcodes)
	}
	for _, v := range []ibv.Opcode{ibv.OpLocalInv, ibv.OpBindMW} {
		if o, ok := transportOpcode(v); ok {
			t.Errorf("verbs %v translates to %v; the transport has no such operation", v, o)
		}
	}
}

func TestStatusTable(t *testing.T) {
	for s := transport.StatusSuccess; s <= transport.StatusRNRRetryExcErr; s++ {
		v := verbsStatus(s)
		if v == ibv.WCGeneralErr {
			t.Fatalf("%v has no verbs status", s)
		}
		if back := transportStatus(v); back != s {
			t.Errorf("%v -> %v -> %v", s, v, back)
		}
	}
	// What the transport cannot name reaches a requester on the other leg
	// as a remote operational error, and its NAK says so.
	for _, v := range []ibv.WCStatus{ibv.WCLocEECOpErr, ibv.WCMWBindErr, ibv.WCRemAbortErr, ibv.WCFatalErr, ibv.WCRespTimeoutErr, ibv.WCGeneralErr} {
		if s := transportStatus(v); s != transport.StatusRemOpErr {
			t.Errorf("verbs %v -> %v, want a remote operational error", v, s)
		}
	}
	// A far completion, as the requester on the other leg sees it.
	for v, want := range map[ibv.WCStatus]transport.Status{
		ibv.WCRemAccessErr: transport.StatusRemAccessErr, ibv.WCLocProtErr: transport.StatusRemAccessErr,
		ibv.WCRemInvReqErr: transport.StatusRemInvReqErr, ibv.WCLocLenErr: transport.StatusRemInvReqErr,
		ibv.WCRetryExcErr: transport.StatusRemOpErr, ibv.WCWRFlushErr: transport.StatusRemOpErr, ibv.WCFatalErr: transport.StatusRemOpErr,
	} {
		if got := transport.NAKStatus(transport.NAKCode(transportStatus(v))); got != want {
			t.Errorf("far %v reaches the requester as %v, want %v", v, got, want)
		}
	}
}

func TestAccessTable(t *testing.T) {
	all := transport.AccessLocalWrite | transport.AccessRemoteWrite | transport.AccessRemoteRead | transport.AccessRemoteAtomic
	for a := transport.Access(0); a <= all; a++ {
		if back := transportAccess(verbsAccess(a)); back != a {
			t.Errorf("%#x -> %v -> %#x", a, verbsAccess(a), back)
		}
	}
	if v := verbsAccess(all); v != ibv.AccessAll {
		t.Errorf("every transport right is %v in verbs, want %v", v, ibv.AccessAll)
	}
}
