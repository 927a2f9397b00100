package srp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/srp"
)

// The kernel's struct srp_login_req and srp_login_req_rdma, field by
// field.
var (
	loginReqFixed = []any{"opcode", 0, "reserved1", 1, "tag", 8, "req_it_iu_len", 16, "reserved2", 20, "req_buf_fmt", 24,
		"req_flags", 26, "reserved3", 27, "imm_data_offset", 28, "reserved4", 30, "initiator_port_id", 32, "target_port_id", 48}
	loginReqRDMAFixed = []any{"tag", 0, "req_buf_fmt", 8, "req_flags", 10, "opcode", 11, "req_it_iu_len", 12,
		"initiator_port_id", 16, "target_port_id", 32, "imm_data_offset", 48, "reserved", 50}
	loginRspFixed = []any{"opcode", 0, "reserved1", 1, "req_lim_delta", 4, "tag", 8, "max_it_iu_len", 16, "max_ti_iu_len", 20,
		"buf_fmt", 24, "rsp_flags", 26, "reserved2", 27}
	loginRejFixed = []any{"opcode", 0, "reserved1", 1, "reason", 4, "tag", 8, "reserved2", 16, "buf_fmt", 24, "reserved3", 26}
)

func TestLoginReq(t *testing.T) {
	want := srp.LoginReqFields{ReqITIULen: 8260, ReqBufFmt: srp.BufFmtDirect | srp.BufFmtIndirect, ReqFlags: srp.MultiChanMulti | srp.ImmedRequested,
		ImmDataOffset: 68, InitiatorPortID: initiatorPortID, TargetPortID: targetPortID}
	ib, n, err := srp.ParseLoginReq(loginReqIB(8260, true, true))
	if err != nil || n != 64 || len(ib) != 64 || !ib.IsValid() {
		t.Fatalf("IB CM: n %d, %v", n, err)
	}
	if d := cmp.Diff(want, ib.Fields()); d != "" {
		t.Errorf("IB CM (-want +got):\n%s", d)
	}
	rdma, n, err := srp.ParseLoginReqRDMA(loginReqRDMA(8260, true, true))
	if err != nil || n != 56 || len(rdma) != 56 || !rdma.IsValid() {
		t.Fatalf("RDMA/CM: n %d, %v", n, err)
	}
	if d := cmp.Diff(want, rdma.Fields()); d != "" {
		t.Errorf("RDMA/CM (-want +got):\n%s", d)
	}
	// Without immediate data the offset is left 0 (srp_send_req).
	single, _, _ := srp.ParseLoginReq(loginReqIB(8260, false, false))
	if f := single.Fields(); f.ReqFlags != srp.MultiChanSingle || f.ImmDataOffset != 0 {
		t.Errorf("single channel, no immediate data: %+v", f)
	}
}

// TestLoginSetters: each setter changes its field's bytes and no other.
func TestLoginSetters(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     []byte
		set   func([]byte)
		patch func([]byte)
	}{
		{"IB CM request: req_buf_fmt", loginReqIB(8260, true, true),
			func(b []byte) { r, _, _ := srp.ParseLoginReq(b); r.SetReqBufFmt(srp.BufFmtDirect) },
			func(b []byte) { binary.BigEndian.PutUint16(b[24:], 0x0002) }},
		{"IB CM request: req_flags", loginReqIB(8260, true, true),
			func(b []byte) { r, _, _ := srp.ParseLoginReq(b); r.SetReqFlags(r.ReqFlags() &^ srp.ImmedRequested) },
			func(b []byte) { b[26] = 0x01 }},
		{"RDMA/CM request: req_buf_fmt", loginReqRDMA(8260, true, true),
			func(b []byte) { r, _, _ := srp.ParseLoginReqRDMA(b); r.SetReqBufFmt(srp.BufFmtIndirect) },
			func(b []byte) { binary.BigEndian.PutUint16(b[8:], 0x0004) }},
		{"RDMA/CM request: req_flags", loginReqRDMA(8260, true, true),
			func(b []byte) { r, _, _ := srp.ParseLoginReqRDMA(b); r.SetReqFlags(r.ReqFlags() &^ srp.ImmedRequested) },
			func(b []byte) { b[10] = 0x01 }},
		{"response: buf_fmt", loginRsp(128, 8260, 8260, 0x82),
			func(b []byte) { r, _, _ := srp.ParseLoginRsp(b); r.SetBufFmt(srp.BufFmtDirect) },
			func(b []byte) { binary.BigEndian.PutUint16(b[24:], 0x0002) }},
		{"response: rsp_flags", loginRsp(128, 8260, 8260, 0x82),
			func(b []byte) { r, _, _ := srp.ParseLoginRsp(b); r.SetRspFlags(r.RspFlags() &^ srp.ImmedSupported) },
			func(b []byte) { b[26] = 0x02 }},
		{"response: req_lim_delta", loginRsp(128, 8260, 8260, 0x82),
			func(b []byte) { r, _, _ := srp.ParseLoginRsp(b); r.SetReqLimDelta(64) },
			func(b []byte) { binary.BigEndian.PutUint32(b[4:], 64) }},
	} {
		want := bytes.Clone(tc.b)
		tc.patch(want)
		tc.set(tc.b)
		if !bytes.Equal(tc.b, want) {
			t.Errorf("%s: rewritten\n% x\nwant\n% x", tc.name, tc.b, want)
		}
	}
}

func TestLoginRspRej(t *testing.T) {
	b := loginRsp(128, 8260, 8260, srp.ImmedSupported|srp.RspMultiChanMaintained)
	binary.LittleEndian.PutUint64(b[8:], 0x1122334455667788) // the request's tag, echoed
	r, n, err := srp.ParseLoginRsp(b)
	if err != nil || n != 52 || len(r) != 52 || !r.IsValid() {
		t.Fatalf("n %d, %v", n, err)
	}
	if r.ReqLimDelta() != 128 || r.Tag() != 0x1122334455667788 || r.MaxITIULen() != 8260 || r.MaxTIIULen() != 8260 || r.BufFmt() != 6 || r.RspFlags() != 0x82 {
		t.Errorf("delta %d, tag %#x, IU lengths %d %d, formats %#x, flags %#x", r.ReqLimDelta(), r.Tag(), r.MaxITIULen(), r.MaxTIIULen(), r.BufFmt(), r.RspFlags())
	}
	j, n, err := srp.ParseLoginRej(loginRej(uint32(srp.RejChannelLimitReached)))
	if err != nil || n != 32 || len(j) != 32 || !j.IsValid() || j.Reason() != srp.RejChannelLimitReached || j.BufFmt() != 6 || j.Tag() != 0 {
		t.Errorf("reject: n %d, %v: %v", n, err, j.Reason())
	}
	for r, want := range map[srp.RejReason]string{
		srp.RejUnableEstablishChannel: "unable to establish RDMA channel", srp.RejITIULenTooLarge: "requested max IU length too large",
		srp.RejChannelLimitReached: "channel limit reached", 0x00010007: "reject reason 0x00010007", 1: "reject reason 0x00000001",
	} {
		if r.String() != want {
			t.Errorf("%#x reads %q, want %q", uint32(r), r, want)
		}
	}
}

func TestImmDataOffset(t *testing.T) {
	rsp := func(flags byte) srp.LoginRsp {
		r, _, _ := srp.ParseLoginRsp(loginRsp(128, 8260, 8260, flags))
		return r
	}
	req := func(flags uint8, off uint16) srp.LoginReqFields {
		return srp.LoginReqFields{ReqFlags: flags, ImmDataOffset: off}
	}
	for _, tc := range []struct {
		name string
		req  srp.LoginReqFields
		rsp  srp.LoginRsp
		want int
	}{
		{"asked and granted (ib_srp, srpt)", req(srp.ImmedRequested, 68), rsp(srp.ImmedSupported), 68},
		{"asked at 80 and granted", req(srp.ImmedRequested|srp.MultiChanMulti, 80), rsp(srp.ImmedSupported | srp.RspMultiChanMaintained), 80},
		{"asked, not granted (srpt with an SRQ)", req(srp.ImmedRequested, 68), rsp(srp.RspMultiChanMaintained), 0},
		{"not asked (use_imm_data off)", req(0, 0), rsp(srp.ImmedSupported), 0},
		{"granted, but the offset is inside the command", req(srp.ImmedRequested, 47), rsp(srp.ImmedSupported), 0},
		{"asked at 48, the command's end", req(srp.ImmedRequested, 48), rsp(srp.ImmedSupported), 48},
	} {
		if got := srp.ImmDataOffset(tc.req, tc.rsp); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
	// From the parsed login, both forms.
	ib, _, _ := srp.ParseLoginReq(loginReqIB(8260, false, true))
	rdma, _, _ := srp.ParseLoginReqRDMA(loginReqRDMA(8260, false, true))
	if a, b := srp.ImmDataOffset(ib.Fields(), rsp(srp.ImmedSupported)), srp.ImmDataOffset(rdma.Fields(), rsp(srp.ImmedSupported)); a != 68 || b != 68 {
		t.Errorf("IB CM %d, RDMA/CM %d; want 68", a, b)
	}
}

func TestLoginCutAtEveryPrefix(t *testing.T) {
	for _, tc := range []struct {
		name   string
		b      []byte
		len    int
		fields []any
		parse  func([]byte) (int, error)
	}{
		{"IB CM request", loginReqIB(8260, true, true), 64, loginReqFixed,
			func(b []byte) (int, error) { _, n, err := srp.ParseLoginReq(b); return n, err }},
		{"RDMA/CM request", loginReqRDMA(8260, true, true), 56, loginReqRDMAFixed,
			func(b []byte) (int, error) { _, n, err := srp.ParseLoginReqRDMA(b); return n, err }},
		{"response", loginRsp(128, 8260, 8260, 0x82), 52, loginRspFixed,
			func(b []byte) (int, error) { _, n, err := srp.ParseLoginRsp(b); return n, err }},
		{"reject", loginRej(0x10001), 32, loginRejFixed,
			func(b []byte) (int, error) { _, n, err := srp.ParseLoginRej(b); return n, err }},
	} {
		spans := fixedSpans(tc.len, tc.fields...)
		for i := range tc.len {
			n, err := tc.parse(tc.b[:i:i])
			var e *srp.Error
			if !errors.Is(err, srp.ErrTruncated) || !errors.As(err, &e) || n != 0 || (span{e.Field, e.Offset}) != spans[i] {
				t.Errorf("%s cut at %d: n %d, %v; want ErrTruncated naming %v", tc.name, i, n, err, spans[i])
			}
		}
		// The CM's padding is not the parser's business.
		if n, err := tc.parse(tc.b); err != nil || n != tc.len {
			t.Errorf("%s padded to %d bytes: n %d, %v", tc.name, len(tc.b), n, err)
		}
	}
	// The RDMA/CM request's opcode is at byte 11.
	b := loginReqRDMA(8260, true, true)
	b[11] = 0xc0
	if _, _, err := srp.ParseLoginReqRDMA(b); !errors.Is(err, srp.ErrOpcode) || !strings.Contains(err.Error(), "opcode (byte 11)") {
		t.Errorf("opcode 0xc0: %v", err)
	}
	if _, _, err := srp.ParseLoginReqRDMA(b[:12]); !errors.Is(err, srp.ErrOpcode) {
		t.Errorf("opcode 0xc0, cut at 12: %v", err)
	}
}
