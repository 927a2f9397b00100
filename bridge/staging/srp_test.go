package staging_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/srp"
)

// srpDesc is a memory descriptor: address, key, length.
type srpDesc struct {
	va  uint64
	key uint32
	len uint32
}

// srpCmd is an SRP_CMD as the Linux initiator builds one
// (srp_queuecommand, srp_map_data): a 10-byte CDB, then one direction's
// descriptor: direct (one desc), indirect (a table descriptor whose
// length says tableLen descriptors, 0 for as many as listed, then the
// list) or immediate data at offset 68.
type srpCmd struct {
	tag      uint64
	lun      uint64
	out, in  []srpDesc
	indirect bool
	tableLen int
	imm      []byte
}

func (c srpCmd) bytes() []byte {
	b := make([]byte, srp.CmdLen)
	b[0] = byte(srp.OpCmd)
	binary.LittleEndian.PutUint64(b[8:], c.tag)
	binary.BigEndian.PutUint64(b[20:], c.lun)
	b[32] = 0x28 // READ(10)
	put := func(ds []srpDesc) []byte {
		var d []byte
		for _, x := range ds {
			d = binary.BigEndian.AppendUint64(d, x.va)
			d = binary.BigEndian.AppendUint32(d, x.key)
			d = binary.BigEndian.AppendUint32(d, x.len)
		}
		return d
	}
	dir := func(ds []srpDesc) (byte, []byte) {
		if !c.indirect {
			return byte(srp.FormatDirect), put(ds)
		}
		n, total := c.tableLen, uint32(0)
		if n == 0 {
			n = len(ds)
		}
		for _, x := range ds {
			total += x.len
		}
		d := put([]srpDesc{{va: 0x7777_0000, key: 0x7777, len: uint32(n * srp.DescLen)}})
		d = binary.BigEndian.AppendUint32(d, total)
		return byte(srp.FormatIndirect), append(d, put(ds)...)
	}
	switch {
	case c.imm != nil:
		b[5], b[6] = byte(srp.FormatImmediate)<<4, 0
		b = binary.BigEndian.AppendUint32(b, uint32(len(c.imm)))
		b = append(b, make([]byte, 68-len(b))...)
		b = append(b, c.imm...)
	case c.out != nil:
		f, d := dir(c.out)
		b[5], b[6] = f<<4, byte(len(c.out))
		b = append(b, d...)
	case c.in != nil:
		f, d := dir(c.in)
		b[5], b[7] = f, byte(len(c.in))
		b = append(b, d...)
	}
	return b
}

// srpRsp is an SRP_RSP to tag: status, data_in_res_cnt under DIUNDER
// when under is set.
func srpRsp(tag uint64, status uint8, under bool, residual uint32) []byte {
	f := srp.RspFields{ReqLimDelta: 1, Tag: tag, Status: status}
	if under {
		f.Flags, f.DataInResidual = srp.DIUnder, residual
	}
	return srp.AppendRsp(nil, f)
}

// srpIU is a fixed-size IU of opcode op with tag (TSK_MGMT: function fn
// on lun, for task taskTag).
func srpIU(op srp.Opcode, tag uint64, fn uint8, lun, taskTag uint64) []byte {
	b := make([]byte, op.FixedLen())
	b[0] = byte(op)
	binary.LittleEndian.PutUint64(b[8:], tag)
	if op == srp.OpTskMgmt {
		binary.BigEndian.PutUint64(b[20:], lun)
		b[30] = fn
		binary.LittleEndian.PutUint64(b[32:], taskTag)
	}
	return b
}

// srpTMFRsp is the Linux target's answer to a task management function:
// RSPVALID and 4 bytes of response data, the last the status.
func srpTMFRsp(tag uint64, status uint8) []byte {
	b := srp.AppendRsp(nil, srp.RspFields{ReqLimDelta: 1, Tag: tag})
	b[18] |= srp.RspValid
	binary.BigEndian.PutUint32(b[32:], 4)
	return append(b, 0, 0, 0, status)
}

// srpLogin is the initiator's srp_login_req_rdma (immediate data asked
// at offset 68 when imm) and the target's SRP_LOGIN_RSP (granting it
// when imm).
func srpLogin(imm bool) (req, rsp []byte) {
	req = make([]byte, srp.LoginReqRDMALen)
	binary.BigEndian.PutUint16(req[8:], srp.BufFmtDirect|srp.BufFmtIndirect)
	req[11] = byte(srp.OpLoginReq)
	binary.BigEndian.PutUint32(req[12:], 8260)
	rsp = make([]byte, srp.LoginRspLen)
	rsp[0] = byte(srp.OpLoginRsp)
	binary.BigEndian.PutUint32(rsp[4:], 128)
	binary.BigEndian.PutUint32(rsp[16:], 8260)
	binary.BigEndian.PutUint32(rsp[20:], 8260)
	binary.BigEndian.PutUint16(rsp[24:], srp.BufFmtDirect|srp.BufFmtIndirect)
	if imm {
		req[10] = srp.ImmedRequested
		binary.BigEndian.PutUint16(req[48:], 68)
		rsp[26] = srp.ImmedSupported
	}
	return req, rsp
}

// newSRP is a channel whose login (immediate data granted) went through
// ConnectDataOf, as the gateway hands it the connect's private data.
func newSRP(t *testing.T, st *staging.Stats, stages bool, expected ...string) session.Stager {
	t.Helper()
	p, err := staging.New(staging.Options{Protocol: config.ProtocolSRP, Route: "srp", Host: fromInitiator, Stats: st, Logger: testlog.New(t, expected...)})
	if err != nil {
		t.Fatal(err)
	}
	req, rsp := srpLogin(true)
	for _, s := range []struct {
		toTarget bool
		b        []byte
	}{{true, req}, {false, rsp}} {
		out, err := staging.ConnectDataOf(p, config.ProtocolSRP, s.toTarget, stages, s.b)
		if err != nil || !bytes.Equal(out, s.b) {
			t.Fatalf("ConnectDataOf(toTarget %v): %v, passed on % x", s.toTarget, err, out)
		}
	}
	return p.(session.Stager)
}

// TestSRPCounts: a channel's commands of every descriptor format and
// direction, its other IUs, and the target's answers, counted as they
// are, on a route that does not stage: nothing staged or rewritten, no
// error; each message tagged with its Seq.
func TestSRPCounts(t *testing.T) {
	st := &staging.Stats{}
	q := newSRP(t, st, false)
	d := func(va uint64, key, n uint32) srpDesc { return srpDesc{va, key, n} }
	steps := []struct {
		dir int
		b   []byte
	}{
		{fromInitiator, srpCmd{tag: 1, in: []srpDesc{d(0x10000, 0x11, 4096)}}.bytes()},
		{fromInitiator, srpCmd{tag: 2, out: []srpDesc{d(0x20000, 0x12, 65536)}}.bytes()},
		{fromInitiator, srpCmd{tag: 3, in: []srpDesc{d(0x30000, 0x13, 4096), d(0x40000, 0x13, 8192), d(0, 0, 0)}, indirect: true}.bytes()},
		{fromInitiator, srpCmd{tag: 4, imm: bytes.Repeat([]byte{0xab}, 4096)}.bytes()},
		{fromInitiator, srpCmd{tag: 5}.bytes()}, // TEST UNIT READY: no data
		{fromInitiator, srpIU(srp.OpTskMgmt, 1<<31|6, srp.TskAbortTask, 0, 9)},
		{fromTarget, srpIU(srp.OpCredReq, 7, 0, 0, 0)},
		{fromInitiator, srpIU(srp.OpCredRsp, 7, 0, 0, 0)},
		{fromTarget, srpRsp(2, 0, false, 0)},
		{fromTarget, srpRsp(1, 0, true, 512)},
		{fromTarget, srpRsp(3, 0x02, false, 0)},
		{fromTarget, srpRsp(4, 0, false, 0)},
		{fromTarget, srpRsp(5, 0, false, 0)},
		{fromTarget, srpTMFRsp(1<<31|6, srp.TaskMgmtSuccess)},
	}
	for i, s := range steps {
		m, err := message(q, s.dir, uint64(i+1), s.b, len(s.b)/2)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if len(m.Stage) > 0 || m.Finishes || m.Reply != nil || !bytes.Equal(joined(m.Bytes), s.b) {
			t.Errorf("step %d staged or rewritten on a route that does not stage: %+v", i, m)
		}
		if s.dir == fromInitiator && m.Tag != uint64(i+1) {
			t.Errorf("step %d: tag %d, want its Seq", i, m.Tag)
		}
	}
	want := staging.StatsSnapshot{
		Commands:       [staging.NumDataDirections]uint64{staging.DataNone: 3, staging.DataHostToController: 2, staging.DataControllerToHost: 2},
		Descriptors:    4,
		DescribedBytes: 4096 + 65536 + 4096 + 8192,
		Completions:    7,
	}
	if d := cmp.Diff(want, st.Snapshot()); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
}

// TestSRPStage: on a route that stages, each memory descriptor of a
// length above 0 is a region of its length and direction, rewritten in
// place by Restage, its length kept; an indirect descriptor's table
// descriptor and a descriptor of length 0 no longer name the
// initiator's memory; the SRP_RSP finishes the staging and pushes what
// the target says it wrote, in the command's order.
func TestSRPStage(t *testing.T) {
	d := func(va uint64, key, n uint32) srpDesc { return srpDesc{va, key, n} }
	for _, tc := range []struct {
		name    string
		cmd     srpCmd
		rsp     []byte
		regions []session.Region
		pushed  []int // nil: no push
	}{
		{"read, direct", srpCmd{tag: 1, in: []srpDesc{d(0x10000, 0x11, 4096)}}, srpRsp(1, 0, false, 0),
			[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 4096, Write: true}}, []int{4096}},
		{"read, underflow", srpCmd{tag: 1, in: []srpDesc{d(0x10000, 0x11, 65536)}}, srpRsp(1, 0, true, 61440),
			[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 65536, Write: true}}, []int{4096}},
		{"read, a residual past the length", srpCmd{tag: 1, in: []srpDesc{d(0x10000, 0x11, 8192)}}, srpRsp(1, 0x02, true, 1<<20),
			[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 8192, Write: true}}, []int{0}},
		{"read, indirect, underflow into the second", srpCmd{tag: 2, in: []srpDesc{d(0x20000, 0x21, 4096), d(0, 0, 0), d(0x30000, 0x22, 8192), d(0x40000, 0x23, 512)}, indirect: true},
			srpRsp(2, 0, true, 512+4096),
			[]session.Region{{Remote: 0x20000, RKey: 0x21, Len: 4096, Write: true}, {Remote: 0x30000, RKey: 0x22, Len: 8192, Write: true}, {Remote: 0x40000, RKey: 0x23, Len: 512, Write: true}},
			[]int{4096, 4096, 0}},
		{"write, direct", srpCmd{tag: 3, out: []srpDesc{d(0x50000, 0x31, 65536)}}, srpRsp(3, 0, false, 0),
			[]session.Region{{Remote: 0x50000, RKey: 0x31, Len: 65536}}, nil},
		{"write, indirect of 64", srpCmd{tag: 4, out: srpDescs(64), indirect: true}, srpRsp(4, 0, false, 0), srpRegions(64, false), nil},
		{"write, immediate data: nothing staged", srpCmd{tag: 5, imm: bytes.Repeat([]byte{0xcd}, 8192)}, srpRsp(5, 0, false, 0), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &staging.Stats{}
			q := newSRP(t, st, true)
			b := tc.cmd.bytes()
			m, err := stagedMessage(q, fromInitiator, 3, b, 40, 56) // the fixed part and the first descriptor cut
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.regions, m.Stage); d != "" {
				t.Fatalf("regions (-want +got):\n%s", d)
			}
			for i := range m.Stage {
				if err := q.Restage(fromInitiator, m.Tag, m.Bytes, i, 0x5000_0000_0000+uint64(i), 0xe000_0000+uint32(i)); err != nil {
					t.Fatal(err)
				}
			}
			got := joined(m.Bytes)
			if len(got) != len(b) {
				t.Fatalf("%d bytes after staging, %d before", len(got), len(b))
			}
			c, _, err := srp.ParseCmd(got, 68)
			if err != nil {
				t.Fatal(err)
			}
			region := 0
			for _, buf := range []srp.DataBuf{c.DataOut(), c.DataIn()} {
				if tb := buf.Table(); tb != nil && (tb.VA() != 0 || tb.Key() != 0 || tb.Len() != uint32(buf.Count()*srp.DescLen)) {
					t.Errorf("table descriptor after staging: %v, want address and key 0, its length kept", tb)
				}
				for i, desc := range buf.All() {
					orig := tc.cmd.in
					if buf.Format() != srp.FormatNone && c.DataOut().Format() == buf.Format() && c.DataOut().Offset() == buf.Offset() {
						orig = tc.cmd.out
					}
					if desc.Len() != orig[i].len {
						t.Errorf("descriptor %d: length %d, was %d", i, desc.Len(), orig[i].len)
					}
					if orig[i].len == 0 {
						if desc.VA() != 0 || desc.Key() != 0 {
							t.Errorf("descriptor %d of length 0 still names %v", i, desc)
						}
						continue
					}
					if desc.VA() != 0x5000_0000_0000+uint64(region) || desc.Key() != 0xe000_0000+uint32(region) {
						t.Errorf("descriptor %d after Restage: %v, want region %d's staging", i, desc, region)
					}
					region++
				}
			}
			if tc.cmd.imm != nil && !bytes.Equal(got, b) {
				t.Errorf("a command with immediate data rewritten")
			}
			r := &session.Message{Dir: fromTarget, Seq: 1, Opcode: transport.OpSend, Bytes: session.Pieces{tc.rsp}}
			if err := q.Message(r); err != nil {
				t.Fatal(err)
			}
			if staged := len(tc.regions) > 0; r.Finishes != staged || (staged && r.Finish != m.Tag) || r.Push != (tc.pushed != nil) {
				t.Errorf("the response finishes %v %#x push %v; want %v %#x push %v", r.Finishes, r.Finish, r.Push, staged, m.Tag, tc.pushed != nil)
			}
			if tc.pushed != nil {
				if d := cmp.Diff(tc.pushed, r.Pushed); d != "" {
					t.Errorf("pushed (-want +got):\n%s", d)
				}
			}
			// The tag is free again: the same command stages anew.
			if _, err := stagedMessage(q, fromInitiator, 4, b); err != nil {
				t.Errorf("the tag again after its response: %v", err)
			}
		})
	}
}

func srpDescs(n int) []srpDesc {
	ds := make([]srpDesc, n)
	for i := range ds {
		ds[i] = srpDesc{va: 0x100000 + uint64(i)*0x1000, key: 0x40 + uint32(i), len: 4096}
	}
	return ds
}

func srpRegions(n int, write bool) []session.Region {
	rs := make([]session.Region, n)
	for i, d := range srpDescs(n) {
		rs[i] = session.Region{Remote: d.va, RKey: d.key, Len: int(d.len), Write: write}
	}
	return rs
}

// TestSRPAnswers: a command the gateway cannot stage is answered in the
// target's place with CHECK CONDITION, ILLEGAL REQUEST, its tag, and its
// credit back, and is not outstanding: an external descriptor table (the
// target would read it from the gateway's memory), and a region the
// session could not stage (Unstaged). A tag staged twice is refused.
func TestSRPAnswers(t *testing.T) {
	check := func(t *testing.T, reply []byte, tag uint64, asc uint8) {
		t.Helper()
		r, _, err := srp.ParseRsp(reply)
		if err != nil {
			t.Fatal(err)
		}
		sense := r.SenseData()
		if r.Tag() != tag || r.ReqLimDelta() != 1 || r.Status() != 0x02 || len(sense) < 13 || sense[2] != 0x05 || sense[12] != asc {
			t.Errorf("answer: tag %#x credit %d status %#x sense % x; want tag %#x, credit 1, CHECK CONDITION, ILLEGAL REQUEST, ASC %#x", r.Tag(), r.ReqLimDelta(), r.Status(), sense, tag, asc)
		}
	}
	t.Run("external table", func(t *testing.T) {
		st := &staging.Stats{}
		q := newSRP(t, st, true, "descriptor list is not all in it")
		m, err := stagedMessage(q, fromInitiator, 1, srpCmd{tag: 9, in: srpDescs(2), indirect: true, tableLen: 8}.bytes())
		if err != nil {
			t.Fatal(err)
		}
		if m.Reply == nil || m.Stage != nil {
			t.Fatalf("not answered: %+v", m)
		}
		check(t, m.Reply, 9, 0x26)
		if err := q.Message(&session.Message{Dir: fromTarget, Seq: 1, Opcode: transport.OpSend, Bytes: session.Pieces{srpRsp(9, 0, false, 0)}}); err != nil {
			t.Fatal(err)
		}
		if s := st.Snapshot(); s.Answered != 1 || s.Errors[staging.WhyUnstageable] != 1 || s.Errors[staging.WhyUnknownCommandID] != 1 {
			t.Errorf("stats %+v: want one answered, one unstageable, and the later response for no command", s)
		}
	})
	t.Run("unstaged", func(t *testing.T) {
		st := &staging.Stats{}
		q := newSRP(t, st, true, "could not be staged")
		m, err := stagedMessage(q, fromInitiator, 1, srpCmd{tag: 10, in: []srpDesc{{0x10000, 0x11, 1 << 30}}}.bytes())
		if err != nil || len(m.Stage) != 1 {
			t.Fatalf("%v, %+v", err, m)
		}
		check(t, q.Unstaged(fromInitiator, m.Tag, session.ErrTooLarge), 10, 0x24)
		if r := q.Unstaged(fromInitiator, m.Tag, session.ErrTooLarge); r != nil {
			t.Errorf("a second Unstaged of the same message answered: % x", r)
		}
		if _, err := stagedMessage(q, fromInitiator, 2, srpCmd{tag: 10, in: []srpDesc{{0x10000, 0x11, 4096}}}.bytes()); err != nil {
			t.Errorf("the tag again after its answer: %v", err)
		}
	})
	t.Run("a tag outstanding", func(t *testing.T) {
		q := newSRP(t, &staging.Stats{}, true)
		b := srpCmd{tag: 11, in: []srpDesc{{0x10000, 0x11, 4096}}}.bytes()
		if _, err := stagedMessage(q, fromInitiator, 1, b); err != nil {
			t.Fatal(err)
		}
		if _, err := stagedMessage(q, fromInitiator, 2, b); err == nil || !strings.Contains(err.Error(), "outstanding already") {
			t.Errorf("the same tag again on a route that stages: %v", err)
		}
	})
}

// TestSRPTasks: a successful ABORT TASK finishes the staging of the
// command it names with nothing pushed, and the command's tag is free; a
// failed one leaves it outstanding; a LUN reset forgets its LUN's
// commands and no other's.
func TestSRPTasks(t *testing.T) {
	st := &staging.Stats{}
	q := newSRP(t, st, true, "aborted staged commands")
	read := func(tag, lun uint64) []byte {
		return srpCmd{tag: tag, lun: lun, in: []srpDesc{{0x10000 * tag, uint32(tag), 4096}}}.bytes()
	}
	m1, err := stagedMessage(q, fromInitiator, 1, read(1, 0))
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		dir int
		b   []byte
	}{
		{fromInitiator, srpIU(srp.OpTskMgmt, 1<<31|1, srp.TskAbortTask, 0, 1)},
		{fromTarget, srpTMFRsp(1<<31|1, srp.TaskMgmtFailed)},
		{fromInitiator, srpIU(srp.OpTskMgmt, 1<<31|2, srp.TskAbortTask, 0, 1)},
	}
	for i, s := range steps {
		if _, err := stagedMessage(q, s.dir, uint64(10+i), s.b); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
	}
	if _, err := stagedMessage(q, fromInitiator, 20, read(1, 0)); err == nil {
		t.Fatal("a failed ABORT TASK freed its command's tag")
	}
	r := &session.Message{Dir: fromTarget, Seq: 30, Opcode: transport.OpSend, Bytes: session.Pieces{srpTMFRsp(1<<31|2, srp.TaskMgmtSuccess)}}
	if err := q.Message(r); err != nil {
		t.Fatal(err)
	}
	if !r.Finishes || r.Finish != m1.Tag || r.Push {
		t.Errorf("ABORT TASK's response: finishes %v %#x push %v; want command 1's (%#x) without push", r.Finishes, r.Finish, r.Push, m1.Tag)
	}
	if _, err := stagedMessage(q, fromInitiator, 31, read(1, 0)); err != nil {
		t.Errorf("the aborted command's tag again: %v", err)
	}
	// LUN 5's commands go with its reset; LUN 0's stays.
	for i, tag := range []uint64{2, 3} {
		if _, err := stagedMessage(q, fromInitiator, uint64(40+i), read(tag, 5)); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range [][]byte{srpIU(srp.OpTskMgmt, 1<<31|3, srp.TskLUNReset, 5, 0), srpTMFRsp(1<<31|3, srp.TaskMgmtSuccess)} {
		if _, err := stagedMessage(q, i, uint64(50+i), b); err != nil {
			t.Fatal(err)
		}
	}
	for _, tag := range []uint64{2, 3} {
		if _, err := stagedMessage(q, fromInitiator, 60+tag, read(tag, 5)); err != nil {
			t.Errorf("LUN 5's tag %d after the reset: %v", tag, err)
		}
	}
	if _, err := stagedMessage(q, fromInitiator, 70, read(1, 0)); err == nil {
		t.Error("LUN 0's command was forgotten by LUN 5's reset")
	}
}

// TestSRPRefuses: what is not an IU of its side, a command its length
// or the login does not hold, ends the session with the error naming it;
// a SEND with invalidate from the target on a route that stages goes on
// as a plain SEND.
func TestSRPRefuses(t *testing.T) {
	cmd := srpCmd{tag: 1, in: []srpDesc{{0x10000, 0x11, 4096}}}.bytes()
	imm := srpCmd{tag: 2, imm: bytes.Repeat([]byte{1}, 512)}.bytes()
	for _, tc := range []struct {
		name string
		dir  int
		b    []byte
		want string
	}{
		{"an SRP_RSP from the initiator", fromInitiator, srpRsp(1, 0, false, 0), "not an IU an initiator sends"},
		{"an SRP_CMD from the target", fromTarget, cmd, "not an IU a target sends"},
		{"an unknown opcode", fromInitiator, append([]byte{0x7f}, make([]byte, 47)...), "opcode"},
		{"a login in a SEND", fromInitiator, append([]byte{0x00}, make([]byte, 63)...), "SRP_LOGIN_REQ"},
		{"a command cut in its descriptor", fromInitiator, cmd[:60], "data-in descriptor"},
		{"a command cut in its immediate data", fromInitiator, imm[:len(imm)-1], "immediate data"},
		{"an SRP_RSP cut in its sense data", fromTarget, srp.AppendRsp(nil, srp.RspFields{Tag: 1, Sense: make([]byte, 18)})[:40], "sense data"},
		{"an empty message", fromTarget, nil, "opcode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := newSRP(t, &staging.Stats{}, true)
			_, err := stagedMessage(q, tc.dir, 1, tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `route "srp"`) {
				t.Errorf("%v; want an error naming %q and the route", err, tc.want)
			}
		})
	}
	t.Run("immediate data without the login's offset", func(t *testing.T) {
		p, err := staging.New(staging.Options{Protocol: config.ProtocolSRP, Route: "srp", Host: fromInitiator, Stats: &staging.Stats{}})
		if err != nil {
			t.Fatal(err)
		}
		req, rsp := srpLogin(false)
		for _, s := range []struct {
			toTarget bool
			b        []byte
		}{{true, req}, {false, rsp}} {
			if _, err := staging.ConnectDataOf(p, config.ProtocolSRP, s.toTarget, true, s.b); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := message(p, fromInitiator, 1, imm); !errors.Is(err, srp.ErrImmediate) {
			t.Errorf("%v; want ErrImmediate", err)
		}
	})
	t.Run("SEND with invalidate from the target", func(t *testing.T) {
		q := newSRP(t, &staging.Stats{}, true, "for no command")
		if _, err := stagedMessage(q, fromInitiator, 1, cmd); err != nil {
			t.Fatal(err)
		}
		r := &session.Message{Dir: fromTarget, Seq: 1, Opcode: transport.OpSendWithInv, InvRKey: 0x99, Bytes: session.Pieces{srpIU(srp.OpCredReq, 5, 0, 0, 0)}}
		if err := q.Message(r); err != nil || r.Opcode != transport.OpSend || r.InvRKey != 0 {
			t.Errorf("%v: %v invalidating %#x; want a plain SEND", err, r.Opcode, r.InvRKey)
		}
	})
}

// TestSRPConnect: the login passes on unchanged both ways; a connect
// request or accept without one is refused, naming it; QueueOf sizes a
// channel from the login request.
func TestSRPConnect(t *testing.T) {
	req, rsp := srpLogin(true)
	p, err := staging.New(staging.Options{Protocol: config.ProtocolSRP, Route: "srp", Host: fromInitiator, Stats: &staging.Stats{}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := staging.ConnectDataOf(p, config.ProtocolSRP, true, true, req[:40]); err == nil || !strings.Contains(err.Error(), "srp_login_req_rdma") {
		t.Errorf("a cut login request: %v", err)
	}
	if _, err := staging.ConnectDataOf(p, config.ProtocolSRP, false, true, req); err == nil || !strings.Contains(err.Error(), "SRP_LOGIN_RSP") {
		t.Errorf("an accept carrying a login request: %v", err)
	}
	if _, err := staging.ConnectDataOf(p, config.ProtocolSRP, false, true, rsp); err != nil {
		t.Error(err)
	}
	if q, ok := staging.QueueOf(config.ProtocolSRP, req); !ok || q != (staging.Queue{Depth: 136, RequestSize: 8260}) {
		t.Errorf("QueueOf = %+v, %v; want depth 136, requests of 8260 bytes", q, ok)
	}
	if q, ok := staging.QueueOf(config.ProtocolSRP, req[:55]); ok {
		t.Errorf("a cut login request: QueueOf = %+v", q)
	}
}
