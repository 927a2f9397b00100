package srp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/srp"
)

// fixedSpans names bytes from..to of a fixed layout: fields as
// (name, offset) pairs in order, the last ending at end.
func fixedSpans(end int, fields ...any) []span {
	s := make([]span, end)
	for i := 0; i < len(fields); i += 2 {
		name, from := fields[i].(string), fields[i+1].(int)
		to := end
		if i+3 < len(fields) {
			to = fields[i+3].(int)
		}
		for j := from; j < to; j++ {
			s[j] = span{name, from}
		}
	}
	return s
}

// The kernel's struct srp_rsp, field by field.
var rspFixed = []any{"opcode", 0, "sol_not", 1, "reserved1", 2, "req_lim_delta", 4, "tag", 8, "reserved2", 16,
	"flags", 18, "status", 19, "data_out_res_cnt", 20, "data_in_res_cnt", 24, "sense_data_len", 28, "resp_data_len", 32}

// senseData is fixed-format sense data: MEDIUM ERROR, unrecovered read
// error.
var senseData = []byte{0x70, 0, 0x03, 0, 0, 0, 0, 0x0a, 0, 0, 0, 0, 0x11, 0x00, 0, 0, 0, 0}

// rspView is what a test reads of an Rsp.
type rspView struct {
	ReqLimDelta         int32
	Tag                 uint64
	Flags, Status       uint8
	DOResidual, DIResid uint32
	SenseLen, RespLen   uint32
	Response, Sense     []byte
	TaskMgmt            uint8
	TaskMgmtOK          bool
	Len                 int
}

func rspOf(r srp.Rsp) rspView {
	v := rspView{ReqLimDelta: r.ReqLimDelta(), Tag: r.Tag(), Flags: r.Flags(), Status: r.Status(), DOResidual: r.DataOutResidual(),
		DIResid: r.DataInResidual(), SenseLen: r.SenseDataLen(), RespLen: r.RespDataLen(), Response: r.ResponseData(), Sense: r.SenseData(), Len: r.Len()}
	v.TaskMgmt, v.TaskMgmtOK = r.TaskMgmtStatus()
	return v
}

func TestParseRsp(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want rspView
	}{
		{"GOOD", buildRsp(rspSpec{reqLimDelta: 1, tag: 0x1002a}),
			rspView{ReqLimDelta: 1, Tag: 0x1002a, Response: []byte{}, Len: 36}},
		{"GOOD, data-in underflow by 512, credit returned for an aborted task", buildRsp(rspSpec{reqLimDelta: 2, tag: 0x2002b, flags: srp.DIUnder, diRes: 512}),
			rspView{ReqLimDelta: 2, Tag: 0x2002b, Flags: srp.DIUnder, DIResid: 512, Response: []byte{}, Len: 36}},
		{"WRITE overflow", buildRsp(rspSpec{reqLimDelta: 1, tag: 3, flags: srp.DOOver, doRes: 4096}),
			rspView{ReqLimDelta: 1, Tag: 3, Flags: srp.DOOver, DOResidual: 4096, Response: []byte{}, Len: 36}},
		{"CHECK CONDITION with sense data", buildRsp(rspSpec{reqLimDelta: 1, tag: 4, flags: srp.SnsValid, status: 0x02, sense: senseData}),
			rspView{ReqLimDelta: 1, Tag: 4, Flags: srp.SnsValid, Status: 0x02, SenseLen: 18, Response: []byte{}, Sense: senseData, Len: 54}},
		{"a sense length without SNSVALID is not read", buildRsp(rspSpec{reqLimDelta: 1, tag: 5, senseLenOverride: 1 << 30}),
			rspView{ReqLimDelta: 1, Tag: 5, SenseLen: 1 << 30, Response: []byte{}, Len: 36}},
		{"task management: success", tskMgmtRsp(srp.TagTaskMgmt|1, srp.TaskMgmtSuccess),
			rspView{ReqLimDelta: 1, Tag: srp.TagTaskMgmt | 1, Flags: srp.RspValid, RespLen: 4, Response: []byte{0, 0, 0, 0}, TaskMgmtOK: true, Len: 40}},
		{"task management: not supported", tskMgmtRsp(srp.TagTaskMgmt|2, srp.TaskMgmtNotSupported),
			rspView{ReqLimDelta: 1, Tag: srp.TagTaskMgmt | 2, Flags: srp.RspValid, RespLen: 4, Response: []byte{0, 0, 0, 4}, TaskMgmt: 4, TaskMgmtOK: true, Len: 40}},
		{"a negative credit", buildRsp(rspSpec{reqLimDelta: 0xffffffff, tag: 6}),
			rspView{ReqLimDelta: -1, Tag: 6, Response: []byte{}, Len: 36}},
	} {
		r, n, err := srp.ParseRsp(tc.b)
		if err != nil || n != tc.want.Len || len(r) != n {
			t.Errorf("%s: n %d, %v", tc.name, n, err)
			continue
		}
		if d := cmp.Diff(tc.want, rspOf(r)); d != "" {
			t.Errorf("%s (-want +got):\n%s", tc.name, d)
		}
		if err := r.CheckLen(len(tc.b)); err != nil || r.CheckLen(len(tc.b)+100) != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if op, err := srp.CheckIU(tc.b); err != nil || op != srp.OpRsp || !r.IsValid() {
			t.Errorf("%s: CheckIU: %v, %v", tc.name, op, err)
		}
	}
}

func TestRspCutAtEveryPrefix(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     []byte
		spans []span
	}{
		{"GOOD", buildRsp(rspSpec{tag: 1}), fixedSpans(36, rspFixed...)},
		{"sense data", buildRsp(rspSpec{flags: srp.SnsValid, status: 2, sense: senseData}), fixedSpans(54, append(rspFixed, "sense data", 36)...)},
		{"task management", tskMgmtRsp(1, 0), fixedSpans(40, append(rspFixed, "response data", 36)...)},
		{"response and sense data", buildRsp(rspSpec{flags: srp.SnsValid | srp.RspValid, respData: []byte{0, 0, 0, 5}, sense: senseData}),
			fixedSpans(58, append(rspFixed, "response data", 36, "sense data", 40)...)},
	} {
		whole, _, err := srp.ParseRsp(tc.b)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i := range tc.b {
			r, n, err := srp.ParseRsp(tc.b[:i:i])
			var e *srp.Error
			if !errors.Is(err, srp.ErrTruncated) || !errors.As(err, &e) || n != 0 || r != nil || (span{e.Field, e.Offset}) != tc.spans[i] {
				t.Errorf("%s cut at %d: n %d, %v; want ErrTruncated naming %v", tc.name, i, n, err, tc.spans[i])
			}
			err = whole.CheckLen(i)
			if !errors.Is(err, srp.ErrLength) || !errors.As(err, &e) || (span{e.Field, e.Offset}) != tc.spans[i] {
				t.Errorf("%s: CheckLen(%d): %v; want ErrLength naming %v", tc.name, i, err, tc.spans[i])
			}
		}
	}
	// A huge sense length: truncated, and no overflow on the way.
	b := buildRsp(rspSpec{flags: srp.SnsValid, senseLenOverride: 0xffffffff})
	binary.BigEndian.PutUint32(b[32:], 0xffffffff)
	if _, _, err := srp.ParseRsp(b); err == nil || err.Error() != "srp: parse SRP_RSP: response data (byte 36): truncated: 36 bytes, need 8589934626 (4294967295 of response data, 4294967295 of sense data)" {
		t.Errorf("4 GiB of response and sense data: %v", err)
	}
}

func TestRspSetReqLimDelta(t *testing.T) {
	b := buildRsp(rspSpec{reqLimDelta: 5, tag: 9, flags: srp.SnsValid, status: 2, sense: senseData})
	want := bytes.Clone(b)
	binary.BigEndian.PutUint32(want[4:], 0xfffffffd)
	r, _, err := srp.ParseRsp(b)
	if err != nil {
		t.Fatal(err)
	}
	r.SetReqLimDelta(-3)
	if !bytes.Equal(b, want) || r.ReqLimDelta() != -3 {
		t.Errorf("rewritten\n% x\nwant\n% x", b, want)
	}
}

// TestAppendRsp: what AppendRsp writes parses back to its fields, after
// what b held, with the tag's bytes as a command carried them.
func TestAppendRsp(t *testing.T) {
	sense := []byte{0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x26, 0, 0, 0, 0, 0}
	f := srp.RspFields{SolNot: 1, ReqLimDelta: 1, Tag: 0x0102030405060708, Flags: srp.DIUnder | srp.RspValid, Status: 0x02,
		DataInResidual: 4096, Sense: sense}
	b := srp.AppendRsp([]byte{0xee, 0xee}, f)
	if b[0] != 0xee || b[1] != 0xee || len(b) != 2+srp.RspLen+len(sense) {
		t.Fatalf("% x", b)
	}
	r, n, err := srp.ParseRsp(b[2:])
	if err != nil || n != srp.RspLen+len(sense) {
		t.Fatalf("n %d: %v", n, err)
	}
	if r.SolNot() != 1 || r.ReqLimDelta() != 1 || r.Tag() != f.Tag || r.Flags() != srp.DIUnder|srp.SnsValid || r.Status() != 0x02 ||
		r.DataInResidual() != 4096 || r.DataOutResidual() != 0 || r.RespDataLen() != 0 || !bytes.Equal(r.SenseData(), sense) {
		t.Errorf("parsed back: sol_not %d, credit %d, tag %#x, flags %#x, status %#x, residuals %d %d, %d bytes of response data, sense % x",
			r.SolNot(), r.ReqLimDelta(), r.Tag(), r.Flags(), r.Status(), r.DataInResidual(), r.DataOutResidual(), r.RespDataLen(), r.SenseData())
	}
	cmd := buildCmd(t, cmdSpec{tag: f.Tag, cdb: read10})
	if !bytes.Equal(b[2+8:2+16], cmd[8:16]) {
		t.Errorf("the tag's bytes % x, the command's % x", b[2+8:2+16], cmd[8:16])
	}
	if r := srp.AppendRsp(nil, srp.RspFields{Tag: 7}); len(r) != srp.RspLen || r[18] != 0 {
		t.Errorf("without sense: % x", r)
	}
}
