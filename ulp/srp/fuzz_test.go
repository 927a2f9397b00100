package srp_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ulp/srp"
)

// Fuzz targets, seeded from the builders and the vectors. Run one with
//   go test ./ulp/srp -run '^$' -fuzz FuzzParseCmd -fuzztime 30s

// FuzzParseCmd parses arbitrary commands under arbitrary immediate data
// offsets: no panic; an accepted command satisfies CheckLen at its
// length and fails it one byte shorter; its descriptors lie inside it,
// rewriting them changes their va and key bytes and nothing else, and
// the rewritten command parses the same way.
func FuzzParseCmd(f *testing.F) {
	for _, tc := range cmdCases() {
		f.Add(buildCmd(f, tc.spec), uint16(tc.immOff))
	}
	f.Add(linuxRead4K, uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, immOff uint16) {
		c, n, err := srp.ParseCmd(b, int(immOff))
		if err != nil {
			var e *srp.Error
			if n != 0 || c.Len() != 0 || !errors.As(err, &e) {
				t.Fatalf("n %d with %v", n, err)
			}
			return
		}
		if n != c.Len() || n > len(b) || n < srp.CmdLen {
			t.Fatalf("n %d, Len %d, of %d bytes", n, c.Len(), len(b))
		}
		if err := c.CheckLen(len(b)); err != nil {
			t.Fatalf("accepted, but CheckLen(%d): %v", len(b), err)
		}
		if err := c.CheckLen(n - 1); !errors.Is(err, srp.ErrLength) {
			t.Fatalf("CheckLen(%d) of a %d-byte command: %v", n-1, n, err)
		}
		// From its bytes up to the descriptors' end, the same command.
		end := c.DataIn().Offset() + len(descBytes(c.DataIn()))
		h, hn, err := srp.ParseCmdHeader(b[:end], int(immOff))
		if err != nil || hn != end || h.Len() != n || h.DataOut().TotalLength() != c.DataOut().TotalLength() || h.DataIn().Count() != c.DataIn().Count() {
			t.Fatalf("from its first %d bytes: n %d, Len %d (whole %d): %v", end, hn, h.Len(), n, err)
		}
		if err := h.CheckLen(n - 1); !errors.Is(err, srp.ErrLength) {
			t.Fatalf("header-only CheckLen(%d) of a %d-byte command: %v", n-1, n, err)
		}
		// The bytes a rewrite may change: each descriptor's va and key.
		mayChange := make([]bool, len(b))
		mark := func(off int) {
			for i := off; i < off+12; i++ {
				mayChange[i] = true
			}
		}
		for _, d := range []srp.DataBuf{c.DataOut(), c.DataIn()} {
			off := d.Offset()
			switch d.Format() {
			case srp.FormatDirect:
				mark(off)
			case srp.FormatIndirect:
				mark(off)
				for i := range d.Count() {
					mark(off + srp.IndirectHeaderLen + i*srp.DescLen)
				}
			case srp.FormatImmediate:
				if data := d.ImmediateData(); uint32(len(data)) != d.TotalLength() || !bytes.Equal(data, b[int(immOff):int(immOff)+len(data)]) {
					t.Fatalf("%d bytes of immediate data, the descriptor says %d", len(data), d.TotalLength())
				}
			}
			if (d.Format() == srp.FormatIndirect) != (d.Table() != nil) || (d.Format() != srp.FormatImmediate) != (d.ImmediateData() == nil) {
				t.Fatalf("%v: table %v, immediate data %d bytes", d.Format(), d.Table(), len(d.ImmediateData()))
			}
		}
		orig := bytes.Clone(b)
		if err := rewrite(b, int(immOff), 0xa5a5a5a5a5a5a5a5, 0x5a5a5a5a); err != nil {
			t.Fatal(err)
		}
		for i := range b {
			if b[i] != orig[i] && !mayChange[i] {
				t.Fatalf("rewriting changed byte %d", i)
			}
		}
		c2, n2, err := srp.ParseCmd(b, int(immOff))
		if err != nil || n2 != n || c2.DataOut().Format() != c.DataOut().Format() || c2.DataIn().Format() != c.DataIn().Format() ||
			c2.DataOut().Count() != c.DataOut().Count() || c2.DataIn().Count() != c.DataIn().Count() ||
			c2.DataOut().TotalLength() != c.DataOut().TotalLength() || c2.DataIn().TotalLength() != c.DataIn().TotalLength() {
			t.Fatalf("the rewritten command: n %d, %v", n2, err)
		}
		for _, d := range []srp.DataBuf{c2.DataOut(), c2.DataIn()} {
			for i, x := range d.All() {
				if x.VA() != 0xa5a5a5a5a5a5a5a5+uint64(i)<<20 || x.Key() != 0x5a5a5a5a {
					t.Fatalf("descriptor %d reads %v", i, x)
				}
			}
		}
	})
}

// FuzzParseIU hands arbitrary bytes to CheckIU and to every IU parser:
// no panic; a parser accepts only what CheckIU accepts, and no two
// parsers the same bytes; CheckIU accepts no fixed-length message its
// parser refuses; an accepted message satisfies its CheckLen at its
// length and fails it one byte shorter.
func FuzzParseIU(f *testing.F) {
	for _, c := range iuCases() {
		f.Add(c.b)
	}
	f.Add(linuxRead4K)
	f.Add(buildRsp(rspSpec{reqLimDelta: 1, tag: 4, flags: srp.SnsValid | srp.RspValid, status: 0x02, respData: []byte{0, 0, 0, 5}, sense: senseData}))
	f.Add(tskMgmtRsp(srp.TagTaskMgmt|1, srp.TaskMgmtSuccess))
	f.Fuzz(func(t *testing.T, b []byte) {
		op, ierr := srp.CheckIU(b)
		accepted := 0
		check := func(o srp.Opcode, n int, err error, checkLen func(int) error) {
			if err != nil {
				if n != 0 {
					t.Fatalf("%v: n %d with %v", o, n, err)
				}
				return
			}
			accepted++
			if n > len(b) || n < o.FixedLen() || ierr != nil || op != o {
				t.Fatalf("%v: n %d of %d bytes; CheckIU %v, %v", o, n, len(b), op, ierr)
			}
			if checkLen != nil {
				if err := checkLen(len(b)); err != nil {
					t.Fatalf("%v accepted, but CheckLen(%d): %v", o, len(b), err)
				}
				if err := checkLen(n - 1); !errors.Is(err, srp.ErrLength) {
					t.Fatalf("%v: CheckLen(%d) of %d bytes: %v", o, n-1, n, err)
				}
			}
		}
		r, n, err := srp.ParseRsp(b)
		check(srp.OpRsp, n, err, r.CheckLen)
		if err == nil {
			_, _ = r.TaskMgmtStatus()
			if len(r.ResponseData())+len(r.SenseData())+srp.RspLen != n || r.Len() != n {
				t.Fatalf("SRP_RSP: %d + %d data bytes in %d", len(r.ResponseData()), len(r.SenseData()), n)
			}
		}
		a, n, err := srp.ParseAerReq(b)
		check(srp.OpAerReq, n, err, a.CheckLen)
		if err == nil && len(a.SenseData()) != int(a.SenseDataLen()) {
			t.Fatalf("SRP_AER_REQ: %d sense bytes, says %d", len(a.SenseData()), a.SenseDataLen())
		}
		_, n, err = srp.ParseTskMgmt(b)
		check(srp.OpTskMgmt, n, err, nil)
		_, n, err = srp.ParseCredReq(b)
		check(srp.OpCredReq, n, err, nil)
		_, n, err = srp.ParseCredRsp(b)
		check(srp.OpCredRsp, n, err, nil)
		_, n, err = srp.ParseAerRsp(b)
		check(srp.OpAerRsp, n, err, nil)
		_, n, err = srp.ParseILogout(b)
		check(srp.OpILogout, n, err, nil)
		_, n, err = srp.ParseTLogout(b)
		check(srp.OpTLogout, n, err, nil)
		_, n, err = srp.ParseLoginReq(b)
		check(srp.OpLoginReq, n, err, nil)
		_, n, err = srp.ParseLoginRsp(b)
		check(srp.OpLoginRsp, n, err, nil)
		_, n, err = srp.ParseLoginRej(b)
		check(srp.OpLoginRej, n, err, nil)
		if accepted > 1 {
			t.Fatalf("%d parsers took the same bytes", accepted)
		}
		// A message of fixed length is whole once CheckIU takes it.
		if accepted == 0 && ierr == nil && op != srp.OpCmd && op != srp.OpRsp && op != srp.OpAerReq {
			t.Fatalf("CheckIU took an %v no parser takes", op)
		}
	})
}

// FuzzParseLogin parses arbitrary CM private data as each login
// message: no panic; an accepted one reads back what its setters write.
func FuzzParseLogin(f *testing.F) {
	f.Add(loginReqIB(8260, true, true))
	f.Add(loginReqRDMA(8260, false, true))
	f.Add(loginRsp(128, 8260, 8260, 0x82))
	f.Add(loginRej(0x10006))
	f.Fuzz(func(t *testing.T, b []byte) {
		orig := bytes.Clone(b)
		if r, n, err := srp.ParseLoginReq(b); err == nil {
			if n != srp.LoginReqLen || r.Fields().ImmDataOffset != r.ImmDataOffset() {
				t.Fatalf("n %d", n)
			}
			r.SetReqBufFmt(r.ReqBufFmt())
			r.SetReqFlags(r.ReqFlags())
		}
		if r, n, err := srp.ParseLoginReqRDMA(b); err == nil {
			if n != srp.LoginReqRDMALen || b[11] != 0 {
				t.Fatalf("n %d, opcode %#x", n, b[11])
			}
			r.SetReqBufFmt(r.ReqBufFmt())
			r.SetReqFlags(r.ReqFlags())
			if f := r.Fields(); f.Tag != r.Tag() || f.ReqITIULen != r.ReqITIULen() || f.TargetPortID != r.TargetPortID() {
				t.Fatalf("fields %+v", f)
			}
		}
		if r, n, err := srp.ParseLoginRsp(b); err == nil {
			if n != srp.LoginRspLen {
				t.Fatalf("n %d", n)
			}
			r.SetBufFmt(r.BufFmt())
			r.SetRspFlags(r.RspFlags())
			r.SetReqLimDelta(r.ReqLimDelta())
			for _, q := range []srp.LoginReqFields{{}, {ReqFlags: 0x80, ImmDataOffset: uint16(len(b))}} {
				if off := srp.ImmDataOffset(q, r); off != 0 && off < srp.CmdLen {
					t.Fatalf("immediate data offset %d", off)
				}
			}
		}
		if r, n, err := srp.ParseLoginRej(b); err == nil {
			if n != srp.LoginRejLen {
				t.Fatalf("n %d", n)
			}
			_ = r.Reason().String()
		}
		if !bytes.Equal(b, orig) {
			t.Fatal("setting fields to what they hold changed the bytes")
		}
	})
}
