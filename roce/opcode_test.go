package roce_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

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

// TestOpcodeTableRDAndXRC checks the opcodes of the services rbridge
// decodes but does not speak: named as the kernel's ib_pack.h names them
// (IB_OPCODE_RD_*; IB_OPCODE_XRC_* of the rxe XRC patches), with the
// headers of IBTA Table 38 (RD) and annex A14 (XRC), never Valid.
func TestOpcodeTableRDAndXRC(t *testing.T) {
	const (
		rd  = roce.HdrRDETH
		dt  = roce.HdrDETH
		xrc = roce.HdrXRCETH
	)
	for _, tc := range []struct {
		op      roce.Opcode
		name    string
		hdrs    roce.Header
		hdrLen  int
		payload bool
		pos     roce.Position
		kind    roce.Kind
	}{
		{0x40, "RD_SEND_FIRST", rd | dt, 12, true, roce.PositionFirst, roce.KindSend},
		{0x45, "RD_SEND_ONLY_WITH_IMMEDIATE", rd | dt | roce.HdrImmDt, 16, true, roce.PositionOnly, roce.KindSend},
		{0x46, "RD_RDMA_WRITE_FIRST", rd | dt | roce.HdrRETH, 28, true, roce.PositionFirst, roce.KindWrite},
		{0x47, "RD_RDMA_WRITE_MIDDLE", rd | dt, 12, true, roce.PositionMiddle, roce.KindWrite},
		{0x4c, "RD_RDMA_READ_REQUEST", rd | dt | roce.HdrRETH, 28, false, roce.PositionOnly, roce.KindReadRequest},
		{0x4d, "RD_RDMA_READ_RESPONSE_FIRST", rd | roce.HdrAETH, 8, true, roce.PositionFirst, roce.KindReadResponse},
		{0x4e, "RD_RDMA_READ_RESPONSE_MIDDLE", rd, 4, true, roce.PositionMiddle, roce.KindReadResponse},
		{0x51, "RD_ACKNOWLEDGE", rd | roce.HdrAETH, 8, false, roce.PositionNone, roce.KindAck},
		{0x52, "RD_ATOMIC_ACKNOWLEDGE", rd | roce.HdrAETH | roce.HdrAtomicAckETH, 16, false, roce.PositionNone, roce.KindAtomicAck},
		{0x53, "RD_COMPARE_SWAP", rd | dt | roce.HdrAtomicETH, 40, false, roce.PositionOnly, roce.KindAtomic},
		{0x54, "RD_FETCH_ADD", rd | dt | roce.HdrAtomicETH, 40, false, roce.PositionOnly, roce.KindAtomic},
		{0x55, "RD_RESYNC", rd | dt, 12, false, roce.PositionNone, roce.KindNone},
		{0xa0, "XRC_SEND_FIRST", xrc, 4, true, roce.PositionFirst, roce.KindSend},
		{0xa3, "XRC_SEND_LAST_WITH_IMMEDIATE", xrc | roce.HdrImmDt, 8, true, roce.PositionLast, roce.KindSend},
		{0xab, "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", xrc | roce.HdrRETH | roce.HdrImmDt, 24, true, roce.PositionOnly, roce.KindWrite},
		{0xac, "XRC_RDMA_READ_REQUEST", xrc | roce.HdrRETH, 20, false, roce.PositionOnly, roce.KindReadRequest},
		{0xad, "XRC_RDMA_READ_RESPONSE_FIRST", roce.HdrAETH, 4, true, roce.PositionFirst, roce.KindReadResponse},
		{0xb1, "XRC_ACKNOWLEDGE", roce.HdrAETH, 4, false, roce.PositionNone, roce.KindAck},
		{0xb2, "XRC_ATOMIC_ACKNOWLEDGE", roce.HdrAETH | roce.HdrAtomicAckETH, 12, false, roce.PositionNone, roce.KindAtomicAck},
		{0xb4, "XRC_FETCH_ADD", xrc | roce.HdrAtomicETH, 32, false, roce.PositionOnly, roce.KindAtomic},
		{0xb7, "XRC_SEND_ONLY_WITH_INVALIDATE", xrc | roce.HdrIETH, 8, true, roce.PositionOnly, roce.KindSend},
	} {
		got := []any{tc.op.String(), tc.op.Headers(), tc.op.HeaderLen(), tc.op.HasPayload(), tc.op.Position(), tc.op.Kind(), tc.op.Known(), tc.op.Valid()}
		want := []any{tc.name, tc.hdrs, tc.hdrLen, tc.payload, tc.pos, tc.kind, true, false}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("opcode %#02x (-want +got):\n%s", uint8(tc.op), diff)
		}
	}
	// RD has no SEND with invalidate; the rest of both ranges is reserved.
	known := 0
	for i := range 256 {
		op := roce.Opcode(i)
		if op.Known() && !op.Valid() {
			known++
			if s := op.Service(); s != 0x40 && s != 0xa0 {
				t.Errorf("%v (%#02x) is known, not valid, and neither RD nor XRC", op, i)
			}
		}
		if !op.Known() && !strings.HasPrefix(op.String(), "RESERVED_0x") {
			t.Errorf("opcode %#02x is not known but named %q", i, op)
		}
	}
	if known != 22+23 {
		t.Errorf("%d RD and XRC opcodes, want 22 RD and 23 XRC", known)
	}
	for _, op := range []roce.Opcode{0x56, 0x57, 0x5f, 0xb5, 0xb8, 0xbf} {
		if op.Known() {
			t.Errorf("opcode %#02x (%v) is known, want reserved", uint8(op), op)
		}
	}
}
