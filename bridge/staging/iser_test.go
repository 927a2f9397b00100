package staging_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/iser"
)

// The session directions of an iSER connection whose initiator is on
// endpoint A, as the gateway makes them.
const (
	fromInitiator = 0
	fromTarget    = 1
)

func newISER(t *testing.T, st *staging.Stats, expected ...string) session.Stager {
	t.Helper()
	p, err := staging.New(staging.Options{Protocol: config.ProtocolISER, Route: "san", Host: fromInitiator, Stats: st, Logger: testlog.New(t, expected...)})
	if err != nil {
		t.Fatal(err)
	}
	return p.(session.Stager)
}

var ctrl = iser.HeaderFields{Opcode: iser.OpControl}

// login is a Login Request (from the initiator) or Response with keys,
// transiting to the full feature phase; tsih is the request's.
func login(response bool, itt uint32, tsih uint16, keys ...string) []byte {
	var text []byte
	for i := 0; i+1 < len(keys); i += 2 {
		text = iser.AppendKey(text, keys[i], keys[i+1])
	}
	f := iser.BHSFields{Opcode: iser.OpLogin, Immediate: true, Flags: 0x80 | 1<<2 | iser.FullFeature, LUN: 0x023d000000000000 | uint64(tsih), ITT: itt}
	if response {
		f.Opcode, f.Immediate = iser.OpLoginResp, false
	}
	return iser.AppendPDU(nil, &ctrl, f, nil, text)
}

// scsiCmd is a SCSI Command as the Linux initiator sends it: a write
// with imm bytes of immediate data and the write STag past what it sends
// unsolicited (final: no Data-Out follows), a read with the read STag, a
// bidirectional one with both and its read length in an AHS.
type scsiCmd struct {
	itt, edtl        uint32
	read, write      bool
	final            bool
	imm              int
	readLen          uint32 // bidirectional
	wKey, rKey       uint32
	wAddr, rAddr     uint64
	noWSV, noRSV     bool
	lun              uint64
	immediate        bool
	unsolicitedAfter int // the buffer offset the write STag's address starts at
}

func (c scsiCmd) bytes() []byte {
	h := iser.HeaderFields{Opcode: iser.OpControl}
	if c.write && !c.noWSV {
		h.WSV, h.WriteSTag, h.WriteVA = true, c.wKey, c.wAddr
	}
	if c.read && !c.noRSV {
		h.RSV, h.ReadSTag, h.ReadVA = true, c.rKey, c.rAddr
	}
	f := iser.SCSICommandFields{Final: c.final, Read: c.read, Write: c.write, Attr: 1, ITT: c.itt, EDTL: c.edtl, LUN: c.lun, CDB: [16]byte{0x28}}
	var ahs []byte
	if c.read && c.write {
		ahs = iser.AppendReadLengthAHS(nil, c.readLen)
	}
	return iser.AppendPDU(nil, &h, f.BHS(), ahs, bytes.Repeat([]byte{0xab}, c.imm))
}

func scsiRsp(itt uint32, f iser.SCSIResponseFields) []byte {
	f.ITT = itt
	return iser.AppendPDU(nil, &ctrl, f.BHS(), nil, nil)
}

func pdu(op iser.ISCSIOpcode, itt uint32, words ...uint32) []byte {
	f := iser.BHSFields{Opcode: op, Flags: 0x80, ITT: itt}
	copy(f.Words[:], words)
	return iser.AppendPDU(nil, &ctrl, f, nil, nil)
}

func tmf(itt uint32, function uint8, ref uint32) []byte {
	f := iser.BHSFields{Opcode: iser.OpTaskMgmt, Immediate: true, Flags: 0x80 | function, ITT: itt, Words: [7]uint32{ref}}
	return iser.AppendPDU(nil, &ctrl, f, nil, nil)
}

func tmfRsp(itt uint32, response uint8) []byte {
	return iser.AppendPDU(nil, &ctrl, iser.BHSFields{Opcode: iser.OpTaskMgmtResp, Flags: 0x80, Byte2: response, ITT: itt}, nil, nil)
}

// TestISERCounts: a connection's login, commands of every direction and
// its other PDUs, and the target's answers, counted as they are, on a
// route that does not stage: nothing staged, no error.
func TestISERCounts(t *testing.T) {
	st := &staging.Stats{}
	q := newISER(t, st)
	steps := []struct {
		dir int
		b   []byte
	}{
		{fromInitiator, login(false, 1, 0, "InitiatorName", "iqn.2004-10.com.example:host", "InitialR2T", "No", "FirstBurstLength", "262144")},
		{fromTarget, login(true, 1, 0, "InitialR2T", "Yes", "FirstBurstLength", "65536")},
		{fromInitiator, scsiCmd{itt: 2, edtl: 4096, read: true, final: true, rKey: 0x11, rAddr: 0x1000}.bytes()},
		{fromInitiator, scsiCmd{itt: 3, edtl: 65536, write: true, final: true, imm: 8192, wKey: 0x12, wAddr: 0x2000}.bytes()},
		{fromInitiator, scsiCmd{itt: 4, edtl: 4096, read: true, write: true, readLen: 8192, final: true, wKey: 0x13, rKey: 0x14}.bytes()},
		{fromInitiator, scsiCmd{itt: 5, edtl: 0, final: true}.bytes()},                            // TEST UNIT READY
		{fromInitiator, scsiCmd{itt: 6, edtl: 4096, write: true, final: true, imm: 4096}.bytes()}, // all immediate: no STag
		{fromInitiator, pdu(iser.OpNOPOut, 7)},
		{fromInitiator, pdu(iser.OpText, 8, iser.ReservedTag)},
		{fromTarget, scsiRsp(4, iser.SCSIResponseFields{})},
		{fromTarget, scsiRsp(2, iser.SCSIResponseFields{Underflow: true, Residual: 512})},
		{fromTarget, scsiRsp(3, iser.SCSIResponseFields{})},
		{fromTarget, scsiRsp(5, iser.SCSIResponseFields{Status: iser.StatusCheckCondition})},
		{fromTarget, scsiRsp(6, iser.SCSIResponseFields{})},
		{fromTarget, pdu(iser.OpNOPIn, 7)},
		{fromTarget, pdu(iser.OpTextResp, 8)},
		{fromTarget, pdu(iser.OpAsync, iser.ReservedTag)},
		{fromInitiator, pdu(iser.OpLogout, 9)},
		{fromTarget, pdu(iser.OpLogoutResp, 9)},
	}
	for i, s := range steps {
		m, err := message(q, s.dir, uint64(i+1), s.b)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if len(m.Stage) > 0 || m.Finishes || m.Reply != nil {
			t.Errorf("step %d staged on a route that does not stage: %+v", i, m)
		}
		if itt := iser.BHS(s.b[iser.HeaderLen:]).ITT(); s.dir == fromInitiator && uint32(m.Tag) != itt {
			t.Errorf("step %d: tag %#x, want the ITT %#x in the low bits", i, m.Tag, itt)
		}
	}
	want := staging.StatsSnapshot{
		Commands:       [staging.NumDataDirections]uint64{staging.DataNone: 5, staging.DataHostToController: 2, staging.DataControllerToHost: 1, staging.DataBidirectional: 1},
		Descriptors:    4,
		DescribedBytes: 4096 + (65536 - 8192) + 4096 + 8192,
		Completions:    10,
	}
	if d := cmp.Diff(want, st.Snapshot()); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
}

// staged hands q the initiator's login (keys as given, both sides), then
// returns it ready for commands on a route that stages.
func stagedISER(t *testing.T, st *staging.Stats, initiator, target []string) session.Stager {
	t.Helper()
	q := newISER(t, st)
	for i, s := range []struct {
		dir int
		b   []byte
	}{{fromInitiator, login(false, 1, 0, initiator...)}, {fromTarget, login(true, 1, 0, target...)}} {
		m := &session.Message{Dir: s.dir, Seq: uint64(i + 1), Opcode: transport.OpSend, Bytes: session.Pieces{s.b}, Staging: s.dir == fromInitiator}
		if err := q.Message(m); err != nil {
			t.Fatal(err)
		}
	}
	return q
}

// TestISERStage: on a route that stages, each command's descriptors are
// regions of the right length and direction, rewritten in place by
// Restage; the SCSI Response finishes the staging and pushes what the
// target says it wrote.
func TestISERStage(t *testing.T) {
	type want struct {
		regions []session.Region
		pushed  []int // nil: no push
	}
	for _, tc := range []struct {
		name      string
		initiator []string
		target    []string
		cmd       scsiCmd
		rsp       iser.SCSIResponseFields
		want      want
	}{
		{"read", nil, nil, scsiCmd{itt: 1, edtl: 4096, read: true, final: true, rKey: 0x11, rAddr: 0x10000}, iser.SCSIResponseFields{},
			want{[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 4096, Write: true}}, []int{4096}}},
		{"read, underflow", nil, nil, scsiCmd{itt: 1, edtl: 65536, read: true, final: true, rKey: 0x11, rAddr: 0x10000}, iser.SCSIResponseFields{Underflow: true, Residual: 61440},
			want{[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 65536, Write: true}}, []int{4096}}},
		{"read, overflow", nil, nil, scsiCmd{itt: 1, edtl: 4096, read: true, final: true, rKey: 0x11, rAddr: 0x10000}, iser.SCSIResponseFields{Overflow: true, Residual: 4096},
			want{[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 4096, Write: true}}, []int{4096}}},
		{"read, CHECK CONDITION with a residual", nil, nil, scsiCmd{itt: 1, edtl: 8192, read: true, final: true, rKey: 0x11, rAddr: 0x10000},
			iser.SCSIResponseFields{Status: iser.StatusCheckCondition, Underflow: true, Residual: 4608},
			want{[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 8192, Write: true}}, []int{3584}}},
		{"read, a residual past the length", nil, nil, scsiCmd{itt: 1, edtl: 8192, read: true, final: true, rKey: 0x11, rAddr: 0x10000}, iser.SCSIResponseFields{Underflow: true, Residual: 1 << 20},
			want{[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 8192, Write: true}}, []int{0}}},
		{"read, target failure", nil, nil, scsiCmd{itt: 1, edtl: 8192, read: true, final: true, rKey: 0x11, rAddr: 0x10000}, iser.SCSIResponseFields{Response: 1},
			want{[]session.Region{{Remote: 0x10000, RKey: 0x11, Len: 8192, Write: true}}, []int{0}}},
		{"write, no immediate data", nil, nil, scsiCmd{itt: 2, edtl: 65536, write: true, final: true, wKey: 0x12, wAddr: 0x20000}, iser.SCSIResponseFields{},
			want{[]session.Region{{Remote: 0x20000, RKey: 0x12, Len: 65536}}, nil}},
		{"write, immediate data", nil, nil, scsiCmd{itt: 2, edtl: 65536, write: true, final: true, imm: 8192, wKey: 0x12, wAddr: 0x22000}, iser.SCSIResponseFields{},
			want{[]session.Region{{Remote: 0x22000, RKey: 0x12, Len: 65536 - 8192}}, nil}},
		{"write, unsolicited Data-Out up to FirstBurstLength", []string{"InitialR2T", "No", "FirstBurstLength", "262144"}, []string{"InitialR2T", "No", "FirstBurstLength", "65536"},
			scsiCmd{itt: 2, edtl: 1 << 20, write: true, imm: 8192, wKey: 0x12, wAddr: 0x30000}, iser.SCSIResponseFields{},
			want{[]session.Region{{Remote: 0x30000, RKey: 0x12, Len: 1<<20 - 65536}}, nil}},
		{"write, unsolicited Data-Out the defaults allow", []string{"InitialR2T", "No"}, []string{"InitialR2T", "No"},
			scsiCmd{itt: 2, edtl: 1 << 20, write: true, wKey: 0x12, wAddr: 0x30000}, iser.SCSIResponseFields{},
			want{[]session.Region{{Remote: 0x30000, RKey: 0x12, Len: 1<<20 - 65536}}, nil}},
		{"bidirectional", nil, nil, scsiCmd{itt: 3, edtl: 4096, read: true, write: true, readLen: 12288, final: true, wKey: 0x13, wAddr: 0x40000, rKey: 0x14, rAddr: 0x50000},
			iser.SCSIResponseFields{BidiUnderflow: true, BidiResidual: 4096, Underflow: true, Residual: 100},
			want{[]session.Region{{Remote: 0x40000, RKey: 0x13, Len: 4096}, {Remote: 0x50000, RKey: 0x14, Len: 12288, Write: true}}, []int{0, 8192}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &staging.Stats{}
			q := stagedISER(t, st, tc.initiator, tc.target)
			b := tc.cmd.bytes()
			m, err := message(q, fromInitiator, 3, b)
			if err != nil {
				t.Fatal(err)
			}
			_ = m
			m = &session.Message{Dir: fromInitiator, Seq: 4, Opcode: transport.OpSend, Bytes: session.Pieces{b}, Staging: true}
			if err := q.Message(m); err == nil || !strings.Contains(err.Error(), "outstanding already") {
				t.Fatalf("the same ITT again on a route that stages: %v", err)
			}
			// Through a fresh connection: the command once, staged.
			q = stagedISER(t, st, tc.initiator, tc.target)
			m = &session.Message{Dir: fromInitiator, Seq: 3, Opcode: transport.OpSend, Bytes: session.Pieces{b[:40], b[40:]}, Staging: true}
			if err := q.Message(m); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want.regions, m.Stage); d != "" {
				t.Fatalf("regions (-want +got):\n%s", d)
			}
			for i := range m.Stage {
				if err := q.Restage(fromInitiator, m.Tag, m.Bytes, i, 0x5000_0000_0000+uint64(i), 0xe000_0000+uint32(i)); err != nil {
					t.Fatal(err)
				}
			}
			h := iser.Header(append(append([]byte(nil), m.Bytes[0]...), m.Bytes[1]...))
			if len(m.Stage) > 0 && m.Stage[0].Write == false {
				if h.WriteSTag() != 0xe000_0000 || h.WriteVA() != 0x5000_0000_0000 {
					t.Errorf("write descriptor after Restage: %#x %#x", h.WriteSTag(), h.WriteVA())
				}
			}
			if last := len(m.Stage) - 1; m.Stage[last].Write && (h.ReadSTag() != 0xe000_0000+uint32(last) || h.ReadVA() != 0x5000_0000_0000+uint64(last)) {
				t.Errorf("read descriptor after Restage: %#x %#x", h.ReadSTag(), h.ReadVA())
			}
			r := &session.Message{Dir: fromTarget, Seq: 3, Opcode: transport.OpSend, Bytes: session.Pieces{scsiRsp(tc.cmd.itt, tc.rsp)}}
			if err := q.Message(r); err != nil {
				t.Fatal(err)
			}
			if !r.Finishes || r.Finish != m.Tag || r.Push != (tc.want.pushed != nil) {
				t.Errorf("the response finishes %v %#x push %v; want %#x push %v", r.Finishes, r.Finish, r.Push, m.Tag, tc.want.pushed != nil)
			}
			if d := cmp.Diff(tc.want.pushed, r.Pushed); d != "" {
				t.Errorf("pushed (-want +got):\n%s", d)
			}
			if r.Opcode != transport.OpSend {
				t.Errorf("the response goes as a %v: the initiator did not offer remote invalidation", r.Opcode)
			}
			if s := st.Snapshot(); s.Errors != ([staging.NumWhys]uint64{staging.WhyReusedCommandID: 1}) {
				t.Errorf("errors %v, want the one reused ITT", s.Errors)
			}
		})
	}
}

// TestISERInvalidation: an initiator that offered to take Send with
// Invalidate gets its STag invalidated with each SCSI Response, as the
// Linux target picks it (read, else write; none for a bidirectional
// command); the target never invalidates a gateway key.
func TestISERInvalidation(t *testing.T) {
	st := &staging.Stats{}
	q := newISER(t, st)
	req := []byte{iser.CMZBVANotSupported, 0, 0, 0, 0, 0, 0, 0} // ib_iser's default, padded
	toTarget, err := staging.ConnectDataOf(q, config.ProtocolISER, true, true, req)
	if err != nil || toTarget[0] != iser.CMZBVANotSupported|iser.CMSendWInvNotSupported || req[0] != iser.CMZBVANotSupported || len(toTarget) != len(req) {
		t.Fatalf("the request toward a staging target: % x (from % x), %v; want both bits set in a copy", toTarget, req, err)
	}
	rep := []byte{iser.CMZBVANotSupported | iser.CMSendWInvNotSupported, 0, 0, 0}
	toInitiator, err := staging.ConnectDataOf(q, config.ProtocolISER, false, true, rep)
	if err != nil || toInitiator[0] != iser.CMZBVANotSupported || rep[0] != iser.CMZBVANotSupported|iser.CMSendWInvNotSupported {
		t.Fatalf("the accept toward the initiator: % x, %v; want Send with Invalidate allowed, in a copy", toInitiator, err)
	}
	for i, s := range [][]byte{login(false, 1, 0), login(true, 1, 0)} {
		m := &session.Message{Dir: i, Seq: 1, Opcode: transport.OpSend, Bytes: session.Pieces{s}, Staging: i == fromInitiator}
		if err := q.Message(m); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		cmd    scsiCmd
		invKey uint32
	}{
		{scsiCmd{itt: 10, edtl: 4096, read: true, final: true, rKey: 0x11}, 0x11},
		{scsiCmd{itt: 11, edtl: 4096, write: true, final: true, wKey: 0x12}, 0x12},
		{scsiCmd{itt: 12, edtl: 4096, read: true, write: true, readLen: 4096, final: true, wKey: 0x13, rKey: 0x14}, 0},
		{scsiCmd{itt: 13, final: true}, 0},
	} {
		m := &session.Message{Dir: fromInitiator, Seq: 2, Opcode: transport.OpSend, Bytes: session.Pieces{tc.cmd.bytes()}, Staging: true}
		if err := q.Message(m); err != nil {
			t.Fatal(err)
		}
		// The target sends with invalidate of a (gateway) key anyway.
		r := &session.Message{Dir: fromTarget, Seq: 2, Opcode: transport.OpSendWithInv, InvRKey: 0xe0000101, Bytes: session.Pieces{scsiRsp(tc.cmd.itt, iser.SCSIResponseFields{})}}
		if err := q.Message(r); err != nil {
			t.Fatal(err)
		}
		if (tc.invKey != 0) != (r.Opcode == transport.OpSendWithInv) || r.InvRKey != tc.invKey {
			t.Errorf("ITT %d's response: a %v invalidating %#x, want %#x", tc.cmd.itt, r.Opcode, r.InvRKey, tc.invKey)
		}
	}
	if got := st.Snapshot().Invalidations; got != 2 {
		t.Errorf("%d invalidations counted, want 2", got)
	}
	// Without the offer, or on a route that does not stage, nothing is
	// rewritten toward the initiator.
	q = newISER(t, &staging.Stats{})
	if _, err := staging.ConnectDataOf(q, config.ProtocolISER, true, true, []byte{0xc0, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if out, _ := staging.ConnectDataOf(q, config.ProtocolISER, false, true, rep); !bytes.Equal(out, rep) {
		t.Errorf("accept toward an initiator that did not offer: % x, want % x", out, rep)
	}
	for _, toTarget := range []bool{true, false} {
		if out, err := staging.ConnectData(config.ProtocolISER, toTarget, false, req); err != nil || &out[0] != &req[0] {
			t.Errorf("a route that does not stage rewrote % x: % x, %v", req, out, err)
		}
	}
	// On a route that does not stage, the target's own Send with
	// Invalidate of the initiator's STag passes as it is.
	q = newISER(t, &staging.Stats{})
	if _, err := staging.ConnectDataOf(q, config.ProtocolISER, true, false, req); err != nil {
		t.Fatal(err)
	}
	if _, err := staging.ConnectDataOf(q, config.ProtocolISER, false, false, []byte{iser.CMZBVANotSupported, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := q.Message(&session.Message{Dir: fromInitiator, Seq: 1, Opcode: transport.OpSend, Bytes: session.Pieces{scsiCmd{itt: 20, edtl: 4096, read: true, final: true, rKey: 0x21}.bytes()}}); err != nil {
		t.Fatal(err)
	}
	r := &session.Message{Dir: fromTarget, Seq: 1, Opcode: transport.OpSendWithInv, InvRKey: 0x21, Bytes: session.Pieces{scsiRsp(20, iser.SCSIResponseFields{})}}
	if err := q.Message(r); err != nil || r.Opcode != transport.OpSendWithInv || r.InvRKey != 0x21 || r.Finishes {
		t.Errorf("the target's own invalidation on a route that does not stage: a %v of %#x (finishes %v), %v", r.Opcode, r.InvRKey, r.Finishes, err)
	}
	if _, err := staging.ConnectData(config.ProtocolISER, true, true, []byte{0x80, 0}); !errors.Is(err, iser.ErrTruncated) || !strings.Contains(err.Error(), "iSER CM header") {
		t.Errorf("a 2-byte connect request toward a staging target: %v", err)
	}
	if out, err := staging.ConnectData(config.ProtocolISER, false, true, nil); err != nil || out != nil {
		t.Errorf("an accept without private data: % x, %v; want it as it is", out, err)
	}
}

// TestISERRefuses: what is not iSER on its side is refused, with an error
// naming the route, the phase and what is wrong, and counted once.
func TestISERRefuses(t *testing.T) {
	read := scsiCmd{itt: 1, edtl: 4096, read: true, final: true, rKey: 1}.bytes()
	nopWithSTag := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl, RSV: true, ReadSTag: 5}, iser.BHSFields{Opcode: iser.OpNOPOut}, nil, nil)
	bidiNoAHS := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl, RSV: true, WSV: true}, (&iser.SCSICommandFields{Read: true, Write: true, EDTL: 1}).BHS(), nil, nil)
	rsvNoR := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl, RSV: true}, (&iser.SCSICommandFields{Write: true, EDTL: 1}).BHS(), nil, nil)
	wsvNoW := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl, WSV: true}, (&iser.SCSICommandFields{Read: true, EDTL: 1}).BHS(), nil, nil)
	immPast := scsiCmd{itt: 1, edtl: 100, write: true, final: true, imm: 200, wKey: 1}.bytes()
	stagRsp := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl, WSV: true}, (&iser.SCSIResponseFields{}).BHS(), nil, nil)
	for _, tc := range []struct {
		name string
		dir  int
		b    []byte
		want error
		why  staging.Why
		text string
	}{
		{"nothing", fromInitiator, nil, iser.ErrTruncated, staging.WhyMalformedCommand, "from the initiator, not an iSER message"},
		{"75 bytes", fromInitiator, read[:75], iser.ErrTruncated, staging.WhyMalformedCommand, "75 bytes, need 76"},
		{"data cut", fromInitiator, immPast[:len(immPast)-1], iser.ErrLength, staging.WhyMalformedCommand, "200 data bytes"},
		{"trailing bytes", fromInitiator, append(read, 1, 2, 3, 4), iser.ErrLength, staging.WhyMalformedCommand, "message of 80 bytes"},
		{"Hello", fromInitiator, append([]byte{0x20}, read[1:]...), iser.ErrNotPDU, staging.WhyMalformedCommand, "iSER Hello"},
		{"a target's opcode", fromInitiator, scsiRsp(1, iser.SCSIResponseFields{}), nil, staging.WhyMalformedCommand, "a SCSI Response, not a PDU an initiator sends"},
		{"vendor-specific", fromInitiator, pdu(0x1c, 1), nil, staging.WhyMalformedCommand, "iSCSI opcode 0x1c"},
		{"a NOP-Out with a STag", fromInitiator, nopWithSTag, nil, staging.WhyMalformedCommand, "a NOP-Out whose iSER header advertises STags"},
		{"bidirectional without its read length", fromInitiator, bidiNoAHS, nil, staging.WhyMalformedCommand, "no Bidirectional Read Expected Data Transfer Length AHS"},
		{"a read STag without R", fromInitiator, rsvNoR, nil, staging.WhyMalformedCommand, "a read STag and no R flag"},
		{"a write STag without W", fromInitiator, wsvNoW, nil, staging.WhyMalformedCommand, "a write STag and no W flag"},
		{"immediate data past EDTL", fromInitiator, immPast, nil, staging.WhyMalformedCommand, "200 bytes of unsolicited data and an Expected Data Transfer Length of 100"},
		{"bad login text", fromInitiator, iser.AppendPDU(nil, &ctrl, iser.BHSFields{Opcode: iser.OpLogin}, nil, []byte("NoEquals\x00")), iser.ErrText, staging.WhyMalformedCommand, "login text"},
		{"nothing from the target", fromTarget, nil, iser.ErrTruncated, staging.WhyMalformedCompletion, "from the target, not an iSER message"},
		{"Data-In", fromTarget, pdu(iser.OpDataIn, 1), nil, staging.WhyMalformedCompletion, "a SCSI Data-In as a message: iSER moves a command's data with RDMA WRITE and READ"},
		{"R2T", fromTarget, pdu(iser.OpR2T, 1), nil, staging.WhyMalformedCompletion, "a Ready To Transfer as a message"},
		{"an initiator's opcode", fromTarget, read, nil, staging.WhyMalformedCompletion, "a SCSI Command, not a PDU a target sends"},
		{"a response with STags", fromTarget, stagRsp, nil, staging.WhyMalformedCompletion, "advertises STags"},
		{"a HelloReply", fromTarget, append([]byte{0x30}, read[1:]...), iser.ErrNotPDU, staging.WhyMalformedCompletion, "iSER HelloReply"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cuts := range [][]int{nil, {min(len(tc.b), 10)}, {min(len(tc.b), 1), min(len(tc.b), 40)}} {
				st := &staging.Stats{}
				q := newISER(t, st)
				_, err := message(q, tc.dir, 1, tc.b, cuts...)
				if err == nil {
					t.Fatalf("cut at %v: accepted", cuts)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("cut at %v: %v, want it to match %v", cuts, err, tc.want)
				}
				if !strings.HasPrefix(err.Error(), `route "san": iser connection (login phase): `) || !strings.Contains(err.Error(), tc.text) {
					t.Errorf("cut at %v: %q, want it to name the route, the phase and %q", cuts, err, tc.text)
				}
				want := staging.StatsSnapshot{}
				want.Errors[tc.why] = 1
				if d := cmp.Diff(want, st.Snapshot()); d != "" {
					t.Errorf("cut at %v: stats (-want +got):\n%s", cuts, d)
				}
			}
		})
	}
}

// TestISERUnsolicitedUnknown: on a route that stages, a write that
// announces unsolicited Data-Out is refused where the gateway cannot
// size it: InitialR2T=Yes allows none, and a connection that joined a
// session did not negotiate FirstBurstLength itself.
func TestISERUnsolicitedUnknown(t *testing.T) {
	w := scsiCmd{itt: 2, edtl: 1 << 20, write: true, wKey: 0x12}.bytes() // F clear
	for _, tc := range []struct {
		name  string
		login []byte
		text  string
	}{
		{"InitialR2T=Yes", login(false, 1, 0, "InitialR2T", "Yes"), "InitialR2T=Yes"},
		{"a connection joining session 0x12", login(false, 1, 0x12, "InitialR2T", "No"), "joined session 0x12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &staging.Stats{}
			q := newISER(t, st)
			for i, b := range [][]byte{tc.login, w} {
				m := &session.Message{Dir: fromInitiator, Seq: uint64(i + 1), Opcode: transport.OpSend, Bytes: session.Pieces{b}, Staging: true}
				err := q.Message(m)
				if i == 0 && err != nil {
					t.Fatal(err)
				}
				if i == 1 && (err == nil || !strings.Contains(err.Error(), tc.text)) {
					t.Errorf("the write: %v, want a refusal naming %q", err, tc.text)
				}
			}
			if got := st.Snapshot().Errors[staging.WhyUnstageable]; got != 1 {
				t.Errorf("%d unstageable, want 1", got)
			}
		})
	}
}

// TestISERTasks: a response for no command, and a reused ITT where the
// route does not stage, are counted and relayed; a failed SEND, a
// completed ABORT TASK, a LUN reset and a Reject end their commands (a
// staged one's staging finishes with the TMF response or the Reject).
func TestISERTasks(t *testing.T) {
	st := &staging.Stats{}
	q := newISER(t, st, "a SCSI Response for no command outstanding", "a SCSI Command whose ITT is outstanding", "aborted staged commands")
	read := func(itt uint32, lun uint64) []byte {
		return scsiCmd{itt: itt, edtl: 4096, read: true, final: true, rKey: 0x11, lun: lun}.bytes()
	}
	send := func(dir int, staged bool, b []byte) *session.Message {
		t.Helper()
		m := &session.Message{Dir: dir, Seq: 1, Opcode: transport.OpSend, Bytes: session.Pieces{b}, Staging: staged && dir == fromInitiator}
		if err := q.Message(m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	send(fromTarget, false, scsiRsp(99, iser.SCSIResponseFields{}))
	send(fromInitiator, false, read(5, 0))
	send(fromInitiator, false, read(5, 0))
	send(fromTarget, false, scsiRsp(5, iser.SCSIResponseFields{}))
	send(fromTarget, false, scsiRsp(5, iser.SCSIResponseFields{})) // unknown now
	m := send(fromInitiator, false, read(6, 0))
	q.Sent(fromInitiator, m.Tag, transport.StatusRetryExcErr)
	send(fromTarget, false, scsiRsp(6, iser.SCSIResponseFields{})) // unknown: never reached the target
	// Staged from here.
	c := send(fromInitiator, true, read(7, 0))
	send(fromInitiator, true, tmf(8, iser.TMFAbortTask, 7))
	if r := send(fromTarget, false, tmfRsp(8, iser.TMFRespComplete)); !r.Finishes || r.Finish != c.Tag || r.Push {
		t.Errorf("ABORT TASK's response: finishes %v %#x push %v, want %#x, no push", r.Finishes, r.Finish, r.Push, c.Tag)
	}
	send(fromInitiator, true, read(7, 0)) // 7 free again
	send(fromInitiator, true, read(9, 1<<48))
	send(fromInitiator, true, tmf(10, iser.TMFLUNReset, 0))
	send(fromTarget, false, tmfRsp(10, iser.TMFRespComplete)) // forgets 7 (LUN 0), keeps 9
	send(fromInitiator, true, read(7, 0))                     // so 7 is free
	c = send(fromInitiator, true, read(11, 0))
	rej := iser.AppendPDU(nil, &ctrl, iser.BHSFields{Opcode: iser.OpReject, Flags: 0x80, Byte2: 9, ITT: iser.ReservedTag}, nil, read(11, 0)[iser.HeaderLen:])
	if r := send(fromTarget, false, rej); !r.Finishes || r.Finish != c.Tag {
		t.Errorf("a Reject of ITT 11: finishes %v %#x, want %#x", r.Finishes, r.Finish, c.Tag)
	}
	if r := send(fromTarget, false, scsiRsp(9, iser.SCSIResponseFields{})); !r.Finishes {
		t.Error("ITT 9 (another LUN) was forgotten by the LUN reset")
	}
	s := st.Snapshot()
	if s.Errors[staging.WhyUnknownCommandID] != 3 || s.Errors[staging.WhyReusedCommandID] != 1 {
		t.Errorf("%d unknown and %d reused, want 3 and 1", s.Errors[staging.WhyUnknownCommandID], s.Errors[staging.WhyReusedCommandID])
	}
}

// TestISERInPieces: a message reads the same however its bytes are cut.
func TestISERInPieces(t *testing.T) {
	for _, b := range [][]byte{
		scsiCmd{itt: 3, edtl: 4096, read: true, write: true, readLen: 8192, final: true, imm: 100, wKey: 0x13, rKey: 0x14}.bytes(),
		login(false, 1, 0, "InitialR2T", "No", "FirstBurstLength", "262144"),
	} {
		var whole staging.StatsSnapshot
		for cut := 0; cut <= len(b); cut++ {
			for _, cuts := range [][]int{{cut}, {cut / 2, cut}} {
				st := &staging.Stats{}
				q := newISER(t, st)
				m, err := message(q, fromInitiator, 1, b, cuts...)
				if err != nil {
					t.Fatalf("cut at %v: %v", cuts, err)
				}
				_ = m
				if cut == 0 {
					whole = st.Snapshot()
				}
				if d := cmp.Diff(whole, st.Snapshot()); d != "" {
					t.Fatalf("cut at %v: stats differ from the whole message's (-whole +cut):\n%s", cuts, d)
				}
			}
		}
	}
}

// TestISERLoginContinued: login text split over PDUs (Continue), a key
// across the cut, still sizes unsolicited data.
func TestISERLoginContinued(t *testing.T) {
	text := iser.AppendKey(iser.AppendKey(nil, "InitialR2T", "No"), "FirstBurstLength", "131072")
	st := &staging.Stats{}
	q := newISER(t, st)
	for i, part := range [][]byte{text[:20], text[20:]} {
		f := iser.BHSFields{Opcode: iser.OpLogin, Immediate: true, Flags: 1 << 2, ITT: 1}
		if i == 0 {
			f.Flags |= 0x40 // Continue
		}
		m := &session.Message{Dir: fromInitiator, Seq: uint64(i + 1), Opcode: transport.OpSend, Bytes: session.Pieces{iser.AppendPDU(nil, &ctrl, f, nil, part)}, Staging: true}
		if err := q.Message(m); err != nil {
			t.Fatal(err)
		}
	}
	m := &session.Message{Dir: fromTarget, Seq: 1, Opcode: transport.OpSend, Bytes: session.Pieces{login(true, 1, 0, "InitialR2T", "No", "FirstBurstLength", "262144")}}
	if err := q.Message(m); err != nil {
		t.Fatal(err)
	}
	m = &session.Message{Dir: fromInitiator, Seq: 3, Opcode: transport.OpSend, Bytes: session.Pieces{scsiCmd{itt: 2, edtl: 1 << 20, write: true, wKey: 1}.bytes()}, Staging: true}
	if err := q.Message(m); err != nil {
		t.Fatal(err)
	}
	if len(m.Stage) != 1 || m.Stage[0].Len != 1<<20-131072 {
		t.Errorf("regions %+v, want one of 1 MiB less 128 KiB", m.Stage)
	}
}

// TestISERQueue: an iSER connect request sizes its connection's receives
// to what a Linux target takes at once; no CM header, none.
func TestISERQueue(t *testing.T) {
	if q, ok := staging.QueueOf(config.ProtocolISER, []byte{0x80, 0, 0, 0}); !ok || q != (staging.Queue{Depth: 134}) {
		t.Errorf("QueueOf = %+v, %v; want depth 134", q, ok)
	}
	for n := range iser.CMHeaderLen {
		if q, ok := staging.QueueOf(config.ProtocolISER, make([]byte, n)); ok {
			t.Errorf("%d bytes: QueueOf = %+v", n, q)
		}
	}
}
