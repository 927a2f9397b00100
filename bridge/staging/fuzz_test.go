package staging_test

import (
	"bytes"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/iser"
	"github.com/rbridge/rbridge/ulp/nvme"
	"github.com/rbridge/rbridge/ulp/srp"
)

// FuzzNVMeQueue hands a queue random messages, cut at random into
// pieces: it never panics, and it takes a message from the host exactly
// when ParseCapsule takes it whole, one from the controller exactly when
// it is a 16-byte completion, counting a refusal once.
func FuzzNVMeQueue(f *testing.F) {
	for _, b := range [][]byte{
		connect(1, 0, false), connect(1, 3, true),
		command(nvme.OpRead, 2, keyed(0x10000, 4096, 0x11, nvme.SGLInvalidate), nil),
		inline(nvme.OpWrite, 4, make([]byte, 100)),
		list(nvme.OpRead, 5, keyed(0x30000, 4096, 0x13, nvme.SGLAddress), keyed(0x40000, 512, 0x14, nvme.SGLInvalidate)),
		completion(2, 0), nil,
	} {
		f.Add(b, false, uint16(0), uint16(0))
		f.Add(b, true, uint16(len(b)/2), uint16(len(b)/3))
	}
	f.Fuzz(func(t *testing.T, b []byte, fromCtrl bool, cut1, cut2 uint16) {
		c1, c2 := int(cut1)%(len(b)+1), int(cut2)%(len(b)+1)
		st := &staging.Stats{}
		q := newQueue(t, st)
		dir := fromHost
		if fromCtrl {
			dir = fromController
		}
		_, err := message(q, dir, 1, b, min(c1, c2), max(c1, c2))
		var want bool
		if dir == fromHost {
			_, perr := nvme.ParseCapsule(b)
			want = perr == nil
		} else {
			want = len(b) == nvme.CompletionLen
		}
		if (err == nil) != want {
			t.Fatalf("% x from direction %d, cut at %d and %d: %v, want accepted %v", b, dir, c1, c2, err, want)
		}
		s := st.Snapshot()
		refused := s.Errors[staging.WhyMalformedCommand] + s.Errors[staging.WhyMalformedCompletion]
		if (err != nil) != (refused == 1) || refused > 1 {
			t.Fatalf("%v, with %d refusals counted", err, refused)
		}
	})
}

// FuzzISERConn hands a connection random messages, cut at random into
// pieces, on a route that stages: it never panics, it takes only what
// ParsePDU and CheckLen take, counting a refusal once, and what it
// stages lies within what the command names.
func FuzzISERConn(f *testing.F) {
	for _, b := range [][]byte{
		login(false, 1, 0, "InitialR2T", "No"), login(true, 1, 0, "FirstBurstLength", "65536"),
		scsiCmd{itt: 2, edtl: 65536, write: true, final: true, imm: 100, wKey: 0x12}.bytes(),
		scsiCmd{itt: 3, edtl: 4096, read: true, write: true, readLen: 8192, final: true, wKey: 0x13, rKey: 0x14}.bytes(),
		scsiRsp(2, iser.SCSIResponseFields{Underflow: true, Residual: 5}), tmf(4, iser.TMFAbortTask, 2), nil,
	} {
		f.Add(b, false, uint16(0), uint16(0))
		f.Add(b, true, uint16(len(b)/2), uint16(len(b)/3))
	}
	f.Fuzz(func(t *testing.T, b []byte, fromTgt bool, cut1, cut2 uint16) {
		c1, c2 := int(cut1)%(len(b)+1), int(cut2)%(len(b)+1)
		st := &staging.Stats{}
		q, err := staging.New(staging.Options{Protocol: config.ProtocolISER, Route: "san", Host: fromInitiator, Stats: st, Logger: testlog.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		dir := fromInitiator
		if fromTgt {
			dir = fromTarget
		}
		var pieces session.Pieces
		at := 0
		for _, c := range []int{min(c1, c2), max(c1, c2), len(b)} {
			pieces = append(pieces, append([]byte(nil), b[at:c]...))
			at = c
		}
		m := &session.Message{Dir: dir, Seq: 1, Opcode: transport.OpSend, Bytes: pieces, Staging: dir == fromInitiator}
		err = q.Message(m)
		if err == nil {
			p, _, perr := iser.ParsePDU(b)
			if perr == nil {
				perr = p.CheckLen(len(b))
			}
			if perr != nil {
				t.Fatalf("% x accepted, and ParsePDU says %v", b, perr)
			}
			for _, g := range m.Stage {
				if g.Len <= 0 || uint32(g.Len) > max(p.BHS.EDTL(), func() uint32 { n, _ := p.ReadLength(); return n }()) {
					t.Fatalf("a region of %d bytes from a command of EDTL %d", g.Len, p.BHS.EDTL())
				}
			}
		}
		s := st.Snapshot()
		var refused uint64
		for _, n := range s.Errors {
			refused += n
		}
		if err != nil && refused != 1 {
			t.Fatalf("%v, with %d errors counted", err, refused)
		}
	})
}

// FuzzSRPChannel hands a channel (its login granting immediate data at
// 68) random messages, cut at random into pieces, on a route that
// stages: it never panics, it takes from the initiator only what CheckIU
// and, for a command, ParseCmd take, counting a refusal once; what it
// stages are the command's descriptors of a length above 0, and the
// message keeps its length.
func FuzzSRPChannel(f *testing.F) {
	for _, b := range [][]byte{
		srpCmd{tag: 1, in: []srpDesc{{0x10000, 0x11, 4096}}}.bytes(),
		srpCmd{tag: 2, out: srpDescs(3), indirect: true}.bytes(),
		srpCmd{tag: 3, imm: []byte{1, 2, 3}}.bytes(),
		srpRsp(1, 0, true, 5), srpTMFRsp(1<<31|4, 0), srpIU(srp.OpTskMgmt, 1<<31|4, srp.TskAbortTask, 0, 1), nil,
	} {
		f.Add(b, false, uint16(0), uint16(0))
		f.Add(b, true, uint16(len(b)/2), uint16(len(b)/3))
	}
	f.Fuzz(func(t *testing.T, b []byte, fromTgt bool, cut1, cut2 uint16) {
		c1, c2 := int(cut1)%(len(b)+1), int(cut2)%(len(b)+1)
		st := &staging.Stats{}
		q := newSRP(t, st, true)
		dir := fromInitiator
		if fromTgt {
			dir = fromTarget
		}
		orig := bytes.Clone(b)
		m, err := stagedMessage(q, dir, 1, b, min(c1, c2), max(c1, c2))
		if got := joined(m.Bytes); len(got) != len(orig) {
			t.Fatalf("%d bytes became %d", len(orig), len(got))
		}
		if err == nil && dir == fromInitiator {
			op, perr := srp.CheckIU(orig)
			if perr == nil && op == srp.OpCmd {
				var c srp.Cmd
				c, _, perr = srp.ParseCmd(orig, 68)
				if perr == nil && m.Reply == nil {
					n := 0
					for _, buf := range []srp.DataBuf{c.DataOut(), c.DataIn()} {
						for _, d := range buf.All() {
							if d.Len() > 0 {
								if n >= len(m.Stage) || m.Stage[n].Len != int(d.Len()) || m.Stage[n].Remote != d.VA() {
									t.Fatalf("descriptor %v is not region %d of %+v", d, n, m.Stage)
								}
								n++
							}
						}
					}
					if n != len(m.Stage) {
						t.Fatalf("%d regions from %d descriptors", len(m.Stage), n)
					}
				}
			}
			if perr != nil {
				t.Fatalf("% x accepted, and the parser says %v", orig, perr)
			}
		}
		var refused uint64
		for _, n := range st.Snapshot().Errors {
			refused += n
		}
		if err != nil && refused != 1 {
			t.Fatalf("%v, with %d errors counted", err, refused)
		}
	})
}
