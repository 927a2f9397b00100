package srp_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/ulp/srp"
)

func TestOpcodes(t *testing.T) {
	for _, tc := range []struct {
		op       srp.Opcode
		name     string
		len      int
		fromInit bool
	}{
		{0x00, "SRP_LOGIN_REQ", 64, true},
		{0x01, "SRP_TSK_MGMT", 48, true},
		{0x02, "SRP_CMD", 48, true},
		{0x03, "SRP_I_LOGOUT", 16, true},
		{0xc0, "SRP_LOGIN_RSP", 52, false},
		{0xc1, "SRP_RSP", 36, false},
		{0xc2, "SRP_LOGIN_REJ", 32, false},
		{0x80, "SRP_T_LOGOUT", 16, false},
		{0x81, "SRP_CRED_REQ", 16, false},
		{0x82, "SRP_AER_REQ", 36, false},
		{0x41, "SRP_CRED_RSP", 16, true},
		{0x42, "SRP_AER_RSP", 16, true},
	} {
		if tc.op.String() != tc.name || tc.op.FixedLen() != tc.len || tc.op.FromInitiator() != tc.fromInit || !tc.op.Known() {
			t.Errorf("%#02x: %q, %d bytes, from the initiator %v, known %v", uint8(tc.op), tc.op, tc.op.FixedLen(), tc.op.FromInitiator(), tc.op.Known())
		}
	}
	known := 0
	for o := range 256 {
		if op := srp.Opcode(o); op.Known() {
			known++
		} else if op.FixedLen() != 0 || op.String() == "" {
			t.Errorf("%#02x: %q, %d bytes", o, op, op.FixedLen())
		}
	}
	if known != 12 || srp.Opcode(0x43).String() != "SRP opcode 0x43" {
		t.Errorf("%d opcodes known; 0x43 reads %q", known, srp.Opcode(0x43))
	}
}

// iuCase is a fixed-size information unit, built as the kernel builds
// it, its fields named as the kernel's struct names them.
type iuCase struct {
	name   string
	b      []byte
	op     srp.Opcode
	fields []any
	parse  func([]byte) (int, error)
}

func iuCases() []iuCase {
	credReq := make([]byte, 16)
	credReq[0], credReq[1] = 0x81, 0x01
	binary.BigEndian.PutUint32(credReq[4:], 32)
	binary.LittleEndian.PutUint64(credReq[8:], 0x77)
	credRsp := make([]byte, 16) // srp_process_cred_req: opcode and the request's tag
	credRsp[0] = 0x41
	copy(credRsp[8:], credReq[8:16])
	aerReq := make([]byte, 36+len(senseData))
	aerReq[0] = 0x82
	binary.BigEndian.PutUint32(aerReq[4:], 1)
	binary.LittleEndian.PutUint64(aerReq[8:], 0x78)
	intToSCSILUN(aerReq[20:], 3)
	binary.BigEndian.PutUint32(aerReq[28:], uint32(len(senseData)))
	copy(aerReq[36:], senseData)
	aerRsp := make([]byte, 16)
	aerRsp[0] = 0x42
	copy(aerRsp[8:], aerReq[8:16])
	iLogout := make([]byte, 16)
	iLogout[0] = 0x03
	binary.LittleEndian.PutUint64(iLogout[8:], 0x79)
	tLogout := make([]byte, 16)
	tLogout[0], tLogout[1] = 0x80, 0x01
	binary.BigEndian.PutUint32(tLogout[4:], 0x2)
	binary.LittleEndian.PutUint64(tLogout[8:], 0x7a)
	parse := func(f func([]byte) (int, error)) func([]byte) (int, error) { return f }
	tsk := []any{"opcode", 0, "sol_not", 1, "reserved1", 2, "tag", 8, "reserved2", 16, "lun", 20, "reserved3", 28,
		"tsk_mgmt_func", 30, "reserved4", 31, "task_tag", 32, "reserved5", 40}
	return []iuCase{
		{"ABORT TASK", tskMgmt(srp.TagTaskMgmt|1, 0x1002a, 1, srp.TskAbortTask), srp.OpTskMgmt, tsk,
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseTskMgmt(b); return n, err })},
		{"LUN RESET", tskMgmt(srp.TagTaskMgmt|2, srp.TagNoRequest, 1, srp.TskLUNReset), srp.OpTskMgmt, tsk,
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseTskMgmt(b); return n, err })},
		{"SRP_CRED_REQ", credReq, srp.OpCredReq, []any{"opcode", 0, "sol_not", 1, "reserved", 2, "req_lim_delta", 4, "tag", 8},
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseCredReq(b); return n, err })},
		{"SRP_CRED_RSP", credRsp, srp.OpCredRsp, []any{"opcode", 0, "reserved", 1, "tag", 8},
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseCredRsp(b); return n, err })},
		{"SRP_AER_REQ", aerReq, srp.OpAerReq, []any{"opcode", 0, "sol_not", 1, "reserved", 2, "req_lim_delta", 4, "tag", 8,
			"reserved2", 16, "lun", 20, "sense_data_len", 28, "reserved3", 32, "sense data", 36},
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseAerReq(b); return n, err })},
		{"SRP_AER_RSP", aerRsp, srp.OpAerRsp, []any{"opcode", 0, "reserved", 1, "tag", 8},
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseAerRsp(b); return n, err })},
		{"SRP_I_LOGOUT", iLogout, srp.OpILogout, []any{"opcode", 0, "reserved", 1, "tag", 8},
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseILogout(b); return n, err })},
		{"SRP_T_LOGOUT", tLogout, srp.OpTLogout, []any{"opcode", 0, "sol_not", 1, "reserved", 2, "reason", 4, "tag", 8},
			parse(func(b []byte) (int, error) { _, n, err := srp.ParseTLogout(b); return n, err })},
	}
}

func TestSmallIUs(t *testing.T) {
	cs := iuCases()
	abort, reset, credReq, credRsp, aerReq, aerRsp, iLogout, tLogout := cs[0].b, cs[1].b, cs[2].b, cs[3].b, cs[4].b, cs[5].b, cs[6].b, cs[7].b
	tm, n, err := srp.ParseTskMgmt(abort)
	if err != nil || n != 48 || !tm.IsValid() || tm.Tag() != srp.TagTaskMgmt|1 || tm.TaskTag() != 0x1002a || tm.Function() != srp.TskAbortTask || tm.LUN() != 0x0001000000000000 || tm.SolNot() != 0 {
		t.Errorf("ABORT TASK: n %d, %v: tag %#x, task tag %#x, function %#x, LUN %#x", n, err, tm.Tag(), tm.TaskTag(), tm.Function(), tm.LUN())
	}
	if tm, _, err := srp.ParseTskMgmt(reset); err != nil || tm.TaskTag() != srp.TagNoRequest || tm.Function() != srp.TskLUNReset {
		t.Errorf("LUN RESET: %v: task tag %#x, function %#x", err, tm.TaskTag(), tm.Function())
	}
	cq, n, err := srp.ParseCredReq(credReq)
	if err != nil || n != 16 || !cq.IsValid() || cq.ReqLimDelta() != 32 || cq.Tag() != 0x77 || cq.SolNot() != 1 {
		t.Errorf("SRP_CRED_REQ: n %d, %v: delta %d, tag %#x", n, err, cq.ReqLimDelta(), cq.Tag())
	}
	if cr, n, err := srp.ParseCredRsp(credRsp); err != nil || n != 16 || !cr.IsValid() || cr.Tag() != cq.Tag() {
		t.Errorf("SRP_CRED_RSP: n %d, %v: tag %#x", n, err, cr.Tag())
	}
	ar, n, err := srp.ParseAerReq(aerReq)
	if err != nil || n != 54 || ar.Len() != 54 || !ar.IsValid() || ar.ReqLimDelta() != 1 || ar.Tag() != 0x78 || ar.LUN() != 0x0003000000000000 || ar.SenseDataLen() != 18 || !bytes.Equal(ar.SenseData(), senseData) || ar.SolNot() != 0 {
		t.Errorf("SRP_AER_REQ: n %d, %v: delta %d, tag %#x, LUN %#x, sense % x", n, err, ar.ReqLimDelta(), ar.Tag(), ar.LUN(), ar.SenseData())
	}
	if err := ar.CheckLen(54); err != nil || ar.CheckLen(60) != nil {
		t.Error(err)
	}
	if err := ar.CheckLen(53); !errors.Is(err, srp.ErrLength) || err.Error() != "srp: check SRP_AER_REQ: sense data (byte 36): message shorter than its contents: 53 bytes, the request takes 54" {
		t.Errorf("CheckLen(53): %v", err)
	}
	if ap, n, err := srp.ParseAerRsp(aerRsp); err != nil || n != 16 || !ap.IsValid() || ap.Tag() != ar.Tag() {
		t.Errorf("SRP_AER_RSP: n %d, %v", n, err)
	}
	if il, n, err := srp.ParseILogout(iLogout); err != nil || n != 16 || !il.IsValid() || il.Tag() != 0x79 {
		t.Errorf("SRP_I_LOGOUT: n %d, %v", n, err)
	}
	if tl, n, err := srp.ParseTLogout(tLogout); err != nil || n != 16 || !tl.IsValid() || tl.Tag() != 0x7a || tl.Reason() != 2 || tl.SolNot() != 1 {
		t.Errorf("SRP_T_LOGOUT: n %d, %v", n, err)
	}
	// Credit setters change the 4 bytes of req_lim_delta alone.
	for _, x := range []struct {
		name string
		b    []byte
		set  func([]byte)
	}{
		{"SRP_CRED_REQ", credReq, func(b []byte) { c, _, _ := srp.ParseCredReq(b); c.SetReqLimDelta(-2) }},
		{"SRP_AER_REQ", aerReq, func(b []byte) { a, _, _ := srp.ParseAerReq(b); a.SetReqLimDelta(-2) }},
	} {
		b, want := bytes.Clone(x.b), bytes.Clone(x.b)
		binary.BigEndian.PutUint32(want[4:], 0xfffffffe)
		x.set(b)
		if !bytes.Equal(b, want) {
			t.Errorf("%s: rewritten\n% x\nwant\n% x", x.name, b, want)
		}
	}
}

// TestIUCutAtEveryPrefix: CheckIU and each parser refuse every prefix
// of every message, naming the field it ends in.
func TestIUCutAtEveryPrefix(t *testing.T) {
	for _, tc := range iuCases() {
		spans := fixedSpans(len(tc.b), tc.fields...)
		for i := range tc.b {
			n, err := tc.parse(tc.b[:i:i])
			var e *srp.Error
			if !errors.Is(err, srp.ErrTruncated) || !errors.As(err, &e) || n != 0 || (span{e.Field, e.Offset}) != spans[i] {
				t.Errorf("%s cut at %d: n %d, %v; want ErrTruncated naming %v", tc.name, i, n, err, spans[i])
			}
			if i >= tc.op.FixedLen() {
				continue
			}
			op, err := srp.CheckIU(tc.b[:i:i])
			if !errors.Is(err, srp.ErrTruncated) || !errors.As(err, &e) || op != 0 || (span{e.Field, e.Offset}) != spans[i] {
				t.Errorf("%s: CheckIU cut at %d: %v, %v; want ErrTruncated naming %v", tc.name, i, op, err, spans[i])
			}
		}
		if n, err := tc.parse(tc.b); err != nil || n != len(tc.b) {
			t.Errorf("%s whole: n %d, %v", tc.name, n, err)
		}
		if op, err := srp.CheckIU(tc.b); err != nil || op != tc.op {
			t.Errorf("%s: CheckIU: %v, %v", tc.name, op, err)
		}
	}
}

func TestCheckIU(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want error
		text string
	}{
		{"empty", nil, srp.ErrTruncated, "srp: check IU: opcode (byte 0): truncated: 0 bytes, need 1"},
		{"opcode 0x04", make16(0x04), srp.ErrOpcode, "srp: check IU: opcode (byte 0): unexpected opcode: SRP opcode 0x04"},
		{"opcode 0xc3", make16(0xc3), srp.ErrOpcode, "SRP opcode 0xc3"},
		{"a 16-byte SRP_CMD", make16(0x02), srp.ErrTruncated, "srp: check IU SRP_CMD: reserved2 (byte 16): truncated: 16 bytes, need 48"},
	} {
		op, err := srp.CheckIU(tc.b)
		if !errors.Is(err, tc.want) || op != 0 || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, %v; want %v saying %q", tc.name, op, err, tc.want, tc.text)
		}
	}
	// Each parser refuses the others' messages.
	msgs := map[srp.Opcode][]byte{srp.OpCmd: linuxRead4K, srp.OpRsp: tskMgmtRsp(1, 0), srp.OpLoginRsp: loginRsp(128, 8260, 8260, 0x82),
		srp.OpLoginRej: loginRej(0x10001), srp.OpLoginReq: loginReqIB(8260, false, true)}
	for _, c := range iuCases() {
		msgs[c.op] = c.b
	}
	parsers := map[srp.Opcode]func([]byte) error{
		srp.OpCmd:      func(b []byte) error { _, _, err := srp.ParseCmd(b, 68); return err },
		srp.OpRsp:      func(b []byte) error { _, _, err := srp.ParseRsp(b); return err },
		srp.OpTskMgmt:  func(b []byte) error { _, _, err := srp.ParseTskMgmt(b); return err },
		srp.OpCredReq:  func(b []byte) error { _, _, err := srp.ParseCredReq(b); return err },
		srp.OpCredRsp:  func(b []byte) error { _, _, err := srp.ParseCredRsp(b); return err },
		srp.OpAerReq:   func(b []byte) error { _, _, err := srp.ParseAerReq(b); return err },
		srp.OpAerRsp:   func(b []byte) error { _, _, err := srp.ParseAerRsp(b); return err },
		srp.OpILogout:  func(b []byte) error { _, _, err := srp.ParseILogout(b); return err },
		srp.OpTLogout:  func(b []byte) error { _, _, err := srp.ParseTLogout(b); return err },
		srp.OpLoginReq: func(b []byte) error { _, _, err := srp.ParseLoginReq(b); return err },
		srp.OpLoginRsp: func(b []byte) error { _, _, err := srp.ParseLoginRsp(b); return err },
		srp.OpLoginRej: func(b []byte) error { _, _, err := srp.ParseLoginRej(b); return err },
	}
	if len(msgs) != len(parsers) {
		t.Fatalf("%d messages for %d parsers", len(msgs), len(parsers))
	}
	for po, parse := range parsers {
		for mo, b := range msgs {
			err := parse(b)
			if (err == nil) != (po == mo) || (err != nil && !errors.Is(err, srp.ErrOpcode)) {
				t.Errorf("the %v parser on an %v: %v", po, mo, err)
			}
		}
	}
}

func make16(op byte) []byte {
	b := make([]byte, 16)
	b[0] = op
	return b
}
