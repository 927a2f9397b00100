package roce_test

import (
	"testing"

	"github.com/rbridge/rbridge/roce"
)

func TestOpcodeTable(t *testing.T) {
	if n := len(allOpcodes()); n != 38 {
		t.Errorf("table has %d opcodes, want 38 (RC 23, UC 12, UD 2, CNP)", n)
	}
	// Spot checks against include/rdma/ib_pack.h and rxe_opcode.c.
	for _, tc := range []struct {
		op      roce.Opcode
		num     uint8
		name    string
		hdrs    roce.Header
		hdrLen  int
		payload bool
		pos     roce.Position
	}{
		{roce.RCSendFirst, 0x00, "RC_SEND_FIRST", 0, 0, true, roce.PositionFirst},
		{roce.RCSendLastWithImmediate, 0x03, "RC_SEND_LAST_WITH_IMMEDIATE", roce.HdrImmDt, 4, true, roce.PositionLast},
		{roce.RCRDMAWriteOnlyWithImmediate, 0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", roce.HdrRETH | roce.HdrImmDt, 20, true, roce.PositionOnly},
		{roce.RCRDMAReadRequest, 0x0c, "RC_RDMA_READ_REQUEST", roce.HdrRETH, 16, false, roce.PositionOnly},
		{roce.RCRDMAReadResponseMiddle, 0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", 0, 0, true, roce.PositionMiddle},
		{roce.RCAcknowledge, 0x11, "RC_ACKNOWLEDGE", roce.HdrAETH, 4, false, roce.PositionNone},
		{roce.RCAtomicAcknowledge, 0x12, "RC_ATOMIC_ACKNOWLEDGE", roce.HdrAETH | roce.HdrAtomicAckETH, 12, false, roce.PositionNone},
		{roce.RCCompareSwap, 0x13, "RC_COMPARE_SWAP", roce.HdrAtomicETH, 28, false, roce.PositionOnly},
		{roce.RCFetchAdd, 0x14, "RC_FETCH_ADD", roce.HdrAtomicETH, 28, false, roce.PositionOnly},
		{roce.RCSendOnlyWithInvalidate, 0x17, "RC_SEND_ONLY_WITH_INVALIDATE", roce.HdrIETH, 4, true, roce.PositionOnly},
		{roce.UCRDMAWriteOnly, 0x2a, "UC_RDMA_WRITE_ONLY", roce.HdrRETH, 16, true, roce.PositionOnly},
		{roce.UDSendOnly, 0x64, "UD_SEND_ONLY", roce.HdrDETH, 8, true, roce.PositionOnly},
		{roce.UDSendOnlyWithImmediate, 0x65, "UD_SEND_ONLY_WITH_IMMEDIATE", roce.HdrDETH | roce.HdrImmDt, 12, true, roce.PositionOnly},
		{roce.CNP, 0x81, "CNP", roce.HdrCNP, 16, false, roce.PositionNone},
	} {
		if uint8(tc.op) != tc.num || tc.op.String() != tc.name || tc.op.Headers() != tc.hdrs ||
			tc.op.HeaderLen() != tc.hdrLen || tc.op.HasPayload() != tc.payload || tc.op.Position() != tc.pos {
			t.Errorf("%s: got 0x%02x %q hdrs=%b len=%d payload=%v pos=%v", tc.name, uint8(tc.op), tc.op,
				tc.op.Headers(), tc.op.HeaderLen(), tc.op.HasPayload(), tc.op.Position())
		}
	}
	if got := roce.Opcode(0x15).String(); got != "RESERVED_0x15" {
		t.Errorf("Opcode(0x15) = %q, want RESERVED_0x15", got)
	}
	// UC mirrors RC for send and write.
	for op := roce.RCSendFirst; op <= roce.RCRDMAWriteOnlyWithImmediate; op++ {
		uc := op + 0x20
		if uc.String() != "UC_"+op.String()[3:] || uc.Headers() != op.Headers() {
			t.Errorf("UC opcode 0x%02x = %v %b, want UC twin of %v %b", uint8(uc), uc, uc.Headers(), op, op.Headers())
		}
	}
	for _, op := range allOpcodes() {
		if want := op.Kind() == roce.KindSend || op.Kind() == roce.KindWrite || op.Kind() == roce.KindReadRequest || op.Kind() == roce.KindAtomic; op.IsRequest() != want {
			t.Errorf("%v.IsRequest() = %v", op, op.IsRequest())
		}
	}
}
