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
	"github.com/rbridge/rbridge/ulp/nvme"
)

// Host and controller: the session directions of a queue whose host is on
// endpoint A, as the gateway makes them.
const (
	fromHost       = 0
	fromController = 1
)

func keyed(addr uint64, n, key uint32, st nvme.SGLSubtype) nvme.SGLFields {
	return nvme.SGLFields{Type: nvme.SGLKeyedDataBlock, Subtype: st, Address: addr, Length: n, Key: key}
}

// command encodes a capsule: an SQE with the opcode, command ID and data
// pointer, flags 0x40 as a Linux host sends them, followed by tail.
func command(op nvme.Opcode, cid uint16, dptr nvme.SGLFields, tail []byte) []byte {
	b := bytes.Repeat([]byte{0xff}, nvme.CommandLen)
	nvme.Command(b).Encode(&nvme.CommandFields{Opcode: op, Flags: nvme.FlagSGLBuffer, CommandID: cid, NSID: 1, DPTR: dptr})
	return append(b, tail...)
}

// inline is a capsule with its data in the capsule, at offset 0.
func inline(op nvme.Opcode, cid uint16, data []byte) []byte {
	return command(op, cid, nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: uint32(len(data))}, data)
}

// list is an SPDK-style capsule: a last segment naming the keyed
// descriptors that follow the SQE.
func list(op nvme.Opcode, cid uint16, ds ...nvme.SGLFields) []byte {
	var tail []byte
	for i := range ds {
		d := make([]byte, nvme.SGLLen)
		nvme.SGL(d).Encode(&ds[i])
		tail = append(tail, d...)
	}
	return command(op, cid, nvme.SGLFields{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Length: uint32(len(tail))}, tail)
}

// connect is a Connect for queue qid, its data keyed (the admin queue's,
// as the Linux host sends it) or in the capsule (an I/O queue's).
func connect(cid, qid uint16, inCapsule bool) []byte {
	b := make([]byte, nvme.CommandLen)
	f := nvme.ConnectFields{Flags: nvme.FlagSGLBuffer, CommandID: cid, QID: qid, SQSize: 31, DPTR: keyed(0x1000, nvme.ConnectDataLen, 7, nvme.SGLAddress)}
	if inCapsule {
		f.DPTR = nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: nvme.ConnectDataLen}
		b = append(b, make([]byte, nvme.ConnectDataLen)...)
	}
	nvme.Connect(b).Encode(&f)
	return b
}

func completion(cid uint16, st nvme.Status) []byte {
	b := make([]byte, nvme.CompletionLen)
	nvme.Completion(b).Encode(&nvme.CompletionFields{CommandID: cid, Status: st, SQID: 1})
	return b
}

func newQueue(t *testing.T, st *staging.Stats, expected ...string) session.Protocol {
	t.Helper()
	p, err := staging.New(staging.Options{Protocol: config.ProtocolNVMe, Route: "storage", Host: fromHost, Stats: st, Logger: testlog.New(t, expected...)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// message hands b to p as the seq-th message of direction dir, cut into
// pieces at cuts.
func message(p session.Protocol, dir int, seq uint64, b []byte, cuts ...int) (*session.Message, error) {
	var pieces session.Pieces
	at := 0
	for _, c := range append(cuts, len(b)) {
		pieces = append(pieces, append([]byte(nil), b[at:c]...))
		at = c
	}
	m := &session.Message{Dir: dir, Seq: seq, Opcode: transport.OpSend, Bytes: pieces}
	return m, p.Message(m)
}

// TestNVMeCounts: a queue's commands of every data pointer form and
// direction, and their completions, counted as they are: keyed
// descriptors that name memory and their bytes, remote invalidations, no
// errors; in-capsule data names no descriptor.
func TestNVMeCounts(t *testing.T) {
	st := &staging.Stats{}
	q := newQueue(t, st)
	cmds := [][]byte{
		connect(1, 0, false), // admin Connect: 1 KiB of host memory the controller READs
		command(nvme.OpRead, 2, keyed(0x10000, 4096, 0x11, nvme.SGLInvalidate), nil),
		command(nvme.OpWrite, 3, keyed(0x20000, 8192, 0x12, nvme.SGLAddress), nil),
		inline(nvme.OpWrite, 4, bytes.Repeat([]byte{0xab}, 512)),
		list(nvme.OpRead, 5, keyed(0x30000, 4096, 0x13, nvme.SGLAddress), keyed(0x40000, 512, 0x14, nvme.SGLInvalidate), keyed(0x50000, 100, 0x15, nvme.SGLAddress)),
		command(nvme.OpFlush, 6, keyed(0, 0, 0, nvme.SGLAddress), nil), // the Linux host's "no data" pointer
		connect(7, 3, true), // an I/O queue's Connect, data in the capsule
	}
	for i, c := range cmds {
		m, err := message(q, fromHost, uint64(i+1), c)
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if want := uint16(nvme.Command(c).CommandID()); uint16(m.Tag) != want {
			t.Errorf("command %d: tag %#x, want its command ID %d in the low bits", i, m.Tag, want)
		}
	}
	for i, cid := range []uint16{4, 2, 1, 3, 7, 6, 5} { // completed in any order
		if _, err := message(q, fromController, uint64(i+1), completion(cid, nvme.StatusSuccess)); err != nil {
			t.Fatalf("completion of %d: %v", cid, err)
		}
	}
	want := staging.StatsSnapshot{
		Commands:       [staging.NumDataDirections]uint64{staging.DataNone: 1, staging.DataHostToController: 4, staging.DataControllerToHost: 2},
		Descriptors:    6,
		DescribedBytes: 1024 + 4096 + 8192 + 4096 + 512 + 100,
		Invalidations:  2,
		Completions:    7,
	}
	if d := cmp.Diff(want, st.Snapshot()); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
}

// TestNVMeCapsuleInPieces: a capsule reads the same however its bytes are
// cut (lent frames, a chain of buffers): a list of descriptors and
// in-capsule data across pieces, cut at every byte.
func TestNVMeCapsuleInPieces(t *testing.T) {
	for _, c := range [][]byte{
		list(nvme.OpRead, 9, keyed(0x30000, 4096, 0x13, nvme.SGLAddress), keyed(0x40000, 512, 0x14, nvme.SGLInvalidate)),
		inline(nvme.OpWrite, 9, bytes.Repeat([]byte{0xcd}, 300)),
		append(command(nvme.OpRead, 9, keyed(0x10000, 4096, 0x11, nvme.SGLAddress), nil), 1, 2, 3),
	} {
		var whole staging.StatsSnapshot
		for cut := 0; cut <= len(c); cut++ {
			for _, cuts := range [][]int{{cut}, {cut / 2, cut}} {
				st := &staging.Stats{}
				q := newQueue(t, st)
				if _, err := message(q, fromHost, 1, c, cuts...); err != nil {
					t.Fatalf("cut at %v: %v", cuts, err)
				}
				if cut == 0 {
					whole = st.Snapshot()
				}
				if d := cmp.Diff(whole, st.Snapshot()); d != "" {
					t.Fatalf("cut at %v: stats differ from the whole capsule's (-whole +cut):\n%s", cuts, d)
				}
			}
		}
		if whole.Descriptors+whole.Commands[staging.DataHostToController] == 0 {
			t.Fatal("the capsule counted nothing: the test proved nothing")
		}
	}
}

// TestNVMeRefuses: a message from the host that is not a command capsule,
// or from the controller that is not a completion, is refused with an
// error naming the route, the queue and what is wrong (matching ulp/nvme's
// sentinel), and counted; whole or in pieces.
func TestNVMeRefuses(t *testing.T) {
	keyedRead := command(nvme.OpRead, 2, keyed(0x10000, 4096, 0x11, nvme.SGLAddress), nil)
	prp := append([]byte(nil), keyedRead...)
	prp[1] = 0 // PSDT: PRPs
	badSubtype := command(nvme.OpRead, 2, keyed(0x10000, 4096, 0x11, nvme.SGLOffset), nil)
	short := inline(nvme.OpWrite, 3, make([]byte, 100))[:nvme.CommandLen+99]
	farOffset := command(nvme.OpWrite, 3, nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Address: 1 << 63, Length: 10}, make([]byte, 20))
	nested := list(nvme.OpRead, 5, keyed(1, 1, 1, nvme.SGLAddress), nvme.SGLFields{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Length: 16})
	for _, tc := range []struct {
		name string
		dir  int
		b    []byte
		want error
		why  staging.Why
		text string
	}{
		{"nothing", fromHost, nil, nvme.ErrTruncated, staging.WhyMalformedCommand, "from the host, not a command capsule"},
		{"63 bytes", fromHost, keyedRead[:63], nvme.ErrTruncated, staging.WhyMalformedCommand, "need 64"},
		{"PRPs", fromHost, prp, nvme.ErrNotSGL, staging.WhyMalformedCommand, "PSDT 0"},
		{"keyed with the offset subtype", fromHost, badSubtype, nvme.ErrSGLSubtype, staging.WhyMalformedCommand, "subtype 0x1"},
		{"in-capsule data cut short", fromHost, short, nvme.ErrSGLBounds, staging.WhyMalformedCommand, "offset 0 length 100, 99 in-capsule bytes"},
		{"in-capsule offset far past", fromHost, farOffset, nvme.ErrSGLBounds, staging.WhyMalformedCommand, "in-capsule bytes"},
		{"a list in a list", fromHost, nested, nvme.ErrSGLNested, staging.WhyMalformedCommand, "list entry"},
		{"a completion from the host", fromHost, completion(1, 0), nvme.ErrTruncated, staging.WhyMalformedCommand, "16 bytes, need 64"},
		{"nothing from the controller", fromController, nil, nvme.ErrTruncated, staging.WhyMalformedCompletion, "from the controller, not a completion"},
		{"15 bytes", fromController, completion(1, 0)[:15], nvme.ErrTruncated, staging.WhyMalformedCompletion, "15 bytes, need 16"},
		{"17 bytes", fromController, append(completion(1, 0), 0), nil, staging.WhyMalformedCompletion, "17 bytes: the RDMA binding's response capsule is the 16-byte completion alone"},
		{"a capsule from the controller", fromController, keyedRead, nil, staging.WhyMalformedCompletion, "64 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, cuts := range [][]int{nil, {min(len(tc.b), 10)}, {min(len(tc.b), 1), min(len(tc.b), 40)}} {
				st := &staging.Stats{}
				q := newQueue(t, st)
				_, err := message(q, tc.dir, 1, tc.b, cuts...)
				if err == nil {
					t.Fatalf("cut at %v: accepted", cuts)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("cut at %v: %v, want it to match %v", cuts, err, tc.want)
				}
				if !strings.HasPrefix(err.Error(), `route "storage": nvme queue (no Connect seen): `) || !strings.Contains(err.Error(), tc.text) {
					t.Errorf("cut at %v: %q, want it to name the route, the queue and %q", cuts, err, tc.text)
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

// TestNVMeCommandIDs: a completion for no outstanding command, and a
// command whose ID is outstanding, are counted and relayed (logged once
// each per queue); a command whose SEND failed is no longer outstanding;
// errors name the queue its Connect named.
func TestNVMeCommandIDs(t *testing.T) {
	st := &staging.Stats{}
	q := newQueue(t, st)
	steps := []struct {
		dir int
		b   []byte
	}{
		{fromHost, connect(1, 2, true)},
		{fromController, completion(1, 0)},
		{fromController, completion(1, 0)},                           // again: unknown
		{fromController, completion(99, nvme.StatusInvalidField)},    // never sent
		{fromHost, command(nvme.OpRead, 5, keyed(1, 1, 1, 0), nil)},  //
		{fromHost, command(nvme.OpWrite, 5, keyed(1, 1, 1, 0), nil)}, // 5 reused
		{fromController, completion(5, 0)},                           //
		{fromHost, command(nvme.OpRead, 6, keyed(1, 1, 1, 0), nil)},  // its SEND fails: below
		{fromController, completion(6, nvme.StatusSuccess)},          // unknown then
		{fromController, completion(5, nvme.StatusSuccess)},          // unknown: 5 completed once
		{fromHost, command(nvme.OpRead, 5, keyed(1, 1, 1, 0), nil)},  // 5 free again
		{fromController, completion(5, nvme.StatusSuccess)},          //
		{fromHost, command(nvme.OpFlush, 0xffff, keyed(0, 0, 0, 0), nil)},
		{fromController, completion(0xffff, 0)},
	}
	for i, s := range steps {
		m, err := message(q, s.dir, uint64(i), s.b)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if s.dir == fromHost && nvme.Command(s.b).CommandID() == 6 {
			q.Sent(fromHost, m.Tag, transport.StatusRetryExcErr)
		}
		if s.dir == fromHost {
			q.Sent(fromHost, m.Tag, transport.StatusSuccess) // changes nothing
			q.Sent(fromController, m.Tag, transport.StatusRemOpErr)
		}
	}
	want := staging.StatsSnapshot{
		Commands:       [staging.NumDataDirections]uint64{staging.DataNone: 1, staging.DataHostToController: 2, staging.DataControllerToHost: 3},
		Descriptors:    4,
		DescribedBytes: 4,
		Completions:    8,
	}
	want.Errors[staging.WhyUnknownCommandID] = 4
	want.Errors[staging.WhyReusedCommandID] = 1
	if d := cmp.Diff(want, st.Snapshot()); d != "" {
		t.Errorf("stats (-want +got):\n%s", d)
	}
	_, err := message(q, fromController, 99, []byte("short"))
	if err == nil || !strings.HasPrefix(err.Error(), `route "storage": nvme I/O queue 2: `) {
		t.Errorf("an error after the Connect of queue 2: %v, want it to name I/O queue 2", err)
	}
}

// TestNew: the one switch refuses what it does not understand.
func TestNew(t *testing.T) {
	for _, o := range []staging.Options{
		{Protocol: "smb", Route: "r", Stats: &staging.Stats{}},
		{Protocol: "", Route: "r", Stats: &staging.Stats{}},
	} {
		if _, err := staging.New(o); !errors.Is(err, staging.ErrUnknownProtocol) || !strings.Contains(err.Error(), `route "r"`) {
			t.Errorf("New(%q): %v, want ErrUnknownProtocol naming the route", o.Protocol, err)
		}
	}
	for _, o := range []staging.Options{
		{Protocol: config.ProtocolNVMe, Route: "r"},
		{Protocol: config.ProtocolNVMe, Route: "r", Stats: &staging.Stats{}, Host: 2},
	} {
		if _, err := staging.New(o); err == nil {
			t.Errorf("New(%+v): no error", o)
		}
	}
	for d := range staging.NumDataDirections + 1 {
		if s := d.String(); s == "" || strings.Contains(s, " ") {
			t.Errorf("direction %d is named %q", d, s)
		}
	}
	for w := range staging.NumWhys + 1 {
		if s := w.String(); s == "" || strings.Contains(s, " ") {
			t.Errorf("why %d is named %q", w, s)
		}
	}
}

// TestNVMeClampMDTS: the Identify Controller data a staged queue pushes
// to the host says the gateway's largest staging buffer at most, in the
// controller's pages (its CAP's MPSMIN, read from the Property Get the
// host sends first), wherever byte 77 lies among the regions; a limit
// within it is left alone, and other Identify data is not touched.
func TestNVMeClampMDTS(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mpsMin  uint64 // CAP.MPSMIN; none when above 15 (no Property Get)
		mdts    uint8
		regions []uint32 // the Identify's keyed descriptors
		cns     uint32
		want    uint8
	}{
		{"no limit, 4 KiB pages", 0, 0, []uint32{4096}, nvme.CNSController, 8},
		{"no Property Get seen", 16, 0, []uint32{4096}, nvme.CNSController, 8},
		{"a larger limit, 16 KiB pages", 2, 9, []uint32{4096}, nvme.CNSController, 6},
		{"the Linux target's 1 MiB", 0, 8, []uint32{4096}, nvme.CNSController, 8},
		{"SPDK's 128 KiB", 0, 5, []uint32{4096}, nvme.CNSController, 5},
		{"byte 77 in the second region", 0, 0, []uint32{64, 4032}, nvme.CNSController, 8},
		{"Identify Namespace", 0, 0, []uint32{4096}, 0x00, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := staging.New(staging.Options{Protocol: config.ProtocolNVMe, Route: "storage", Host: fromHost, Stats: &staging.Stats{}, Logger: testlog.New(t), MaxTransfer: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			seq := uint64(0)
			send := func(dir int, b []byte) *session.Message {
				t.Helper()
				seq++
				m := &session.Message{Dir: dir, Seq: seq, Opcode: transport.OpSend, Bytes: session.Pieces{b}, Staging: true}
				if err := p.Message(m); err != nil {
					t.Fatal(err)
				}
				return m
			}
			send(fromHost, connect(1, 0, false))
			send(fromController, completion(1, nvme.StatusSuccess))
			if tc.mpsMin <= 15 {
				get := make([]byte, nvme.CommandLen)
				nvme.Command(get).Encode(&nvme.CommandFields{Opcode: nvme.OpFabrics, Flags: nvme.FlagSGLBuffer, CommandID: 2, NSID: uint32(nvme.FCPropertyGet), DPTR: keyed(0, 0, 0, nvme.SGLAddress), CDW10: [6]uint32{1, nvme.PropertyCAP}})
				send(fromHost, get)
				c := completion(2, nvme.StatusSuccess)
				capValue := uint64(0x0020_0030_0f01_03ff) | tc.mpsMin<<48
				nvme.Completion(c).SetDW0(uint32(capValue))
				nvme.Completion(c).SetDW1(uint32(capValue >> 32))
				send(fromController, c)
			}
			var ds []nvme.SGLFields
			for i, n := range tc.regions {
				ds = append(ds, keyed(0x10000+uint64(i)<<16, n, 9, nvme.SGLAddress))
			}
			id := list(nvme.OpIdentify, 3, ds...)
			nvme.Command(id).Encode(&nvme.CommandFields{Opcode: nvme.OpIdentify, Flags: nvme.FlagSGLBuffer, CommandID: 3,
				DPTR: nvme.SGLFields{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Length: uint32(len(ds) * nvme.SGLLen)}, CDW10: [6]uint32{tc.cns}})
			if m := send(fromHost, id); len(m.Stage) != len(tc.regions) {
				t.Fatalf("the Identify staged %d regions, want %d", len(m.Stage), len(tc.regions))
			}
			resp := send(fromController, completion(3, nvme.StatusSuccess))
			if !resp.Finishes || !resp.Push {
				t.Fatalf("the Identify's completion: Finishes %v, Push %v; want both", resp.Finishes, resp.Push)
			}
			data := make([]byte, 4096)
			data[nvme.IdentifyMDTS] = tc.mdts
			data[nvme.IdentifyMDTS-1], data[nvme.IdentifyMDTS+1] = 0xaa, 0xbb
			if resp.Patch != nil {
				at := 0
				for i, n := range tc.regions {
					resp.Patch(i, data[at:at+int(n)])
					at += int(n)
				}
			}
			if got := data[nvme.IdentifyMDTS]; got != tc.want {
				t.Errorf("MDTS pushed to the host: %d, want %d", got, tc.want)
			}
			if data[nvme.IdentifyMDTS-1] != 0xaa || data[nvme.IdentifyMDTS+1] != 0xbb {
				t.Error("the patch touched the bytes around MDTS")
			}
		})
	}
}
