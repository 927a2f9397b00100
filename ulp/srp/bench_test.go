package srp_test

import (
	"testing"

	"github.com/rbridge/rbridge/ulp/srp"
)

// rewrite is what the staging engine does to a command: parse it and
// point every memory descriptor, and an indirect descriptor's table, at
// staging memory.
func rewrite(b []byte, immOff int, va uint64, key uint32) error {
	c, _, err := srp.ParseCmd(b, immOff)
	if err != nil {
		return err
	}
	for _, d := range []srp.DataBuf{c.DataOut(), c.DataIn()} {
		for i, x := range d.All() {
			x.Set(va+uint64(i)<<20, key)
		}
		if t := d.Table(); t != nil {
			t.Set(va-4096, key)
		}
	}
	return nil
}

func rewriteCmds(t testing.TB) map[string][]byte {
	return map[string][]byte{
		"direct":      buildCmd(t, cmdSpec{cdb: read10, in: dirSpec{descs: descs(1)}}),
		"indirect-64": buildCmd(t, cmdSpec{cdb: write10, out: dirSpec{descs: descs(64), table: tableDesc}}),
		"immediate":   buildCmd(t, cmdSpec{cdb: write10, out: dirSpec{imm: immData}}),
		"add-cdb":     buildCmd(t, cmdSpec{cdb: cdb32, in: dirSpec{descs: descs(2), table: tableDesc}}),
	}
}

// TestNoAllocs holds parsing and rewriting to zero allocations: commands
// by range over All and by index, responses, the other IUs, the login.
func TestNoAllocs(t *testing.T) {
	for name, b := range rewriteCmds(t) {
		if n := testing.AllocsPerRun(100, func() {
			if err := rewrite(b, 68, 0x7f0000000000, 0xabcd); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: parse and rewrite by range allocate %v times", name, n)
		}
		if n := testing.AllocsPerRun(100, func() {
			c, _, _ := srp.ParseCmd(b, 68)
			d := c.DataIn()
			for i := range d.Count() {
				d.At(i).SetKey(uint32(i))
			}
			if c.CheckLen(len(b)) != nil || c.DataOut().TableInIU() != true {
				t.Fatal("CheckLen, TableInIU")
			}
			_ = c.DataOut().ImmediateData()
		}); n != 0 {
			t.Errorf("%s: parse and rewrite by index allocate %v times", name, n)
		}
	}
	rsp := buildRsp(rspSpec{reqLimDelta: 1, tag: 4, flags: srp.SnsValid, status: 0x02, sense: senseData})
	abort := tskMgmt(srp.TagTaskMgmt|1, 0x1002a, 1, srp.TskAbortTask)
	req, lrsp := loginReqRDMA(8260, true, true), loginRsp(128, 8260, 8260, 0x82)
	for name, f := range map[string]func(){
		"SRP_RSP": func() {
			r, _, err := srp.ParseRsp(rsp)
			if err != nil || r.CheckLen(len(rsp)) != nil || len(r.SenseData()) != 18 {
				t.Fatal(err)
			}
			r.SetReqLimDelta(1)
		},
		"CheckIU and SRP_TSK_MGMT": func() {
			if op, err := srp.CheckIU(abort); err != nil || op != srp.OpTskMgmt {
				t.Fatal(err)
			}
			m, _, _ := srp.ParseTskMgmt(abort)
			_ = m.TaskTag()
		},
		"login": func() {
			q, _, err := srp.ParseLoginReqRDMA(req)
			if err != nil {
				t.Fatal(err)
			}
			r, _, err := srp.ParseLoginRsp(lrsp)
			if err != nil || srp.ImmDataOffset(q.Fields(), r) != 68 {
				t.Fatal(err)
			}
			q.SetReqFlags(q.ReqFlags())
			r.SetRspFlags(r.RspFlags())
		},
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocations", name, n)
		}
	}
}

// BenchmarkRewrite parses a command and rewrites its descriptors in
// place.
func BenchmarkRewrite(b *testing.B) {
	for _, name := range []string{"direct", "indirect-64", "immediate", "add-cdb"} {
		m := rewriteCmds(b)[name]
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(m)))
			for b.Loop() {
				if err := rewrite(m, 68, 0x7f0000000000, 0xabcd); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkCheckIU is the first look at every message.
func BenchmarkCheckIU(b *testing.B) {
	m := rewriteCmds(b)["direct"]
	b.ReportAllocs()
	for b.Loop() {
		if _, err := srp.CheckIU(m); err != nil {
			b.Fatal(err)
		}
	}
}
