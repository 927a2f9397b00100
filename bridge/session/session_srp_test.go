package session_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/srp"
)

// srpRig is a session of a protocol: srp route whose target sits behind
// a verbs leg (the far leg exposes): the client is the initiator, on the
// userspace leg (the route's listen side).
type srpRig struct {
	*rig
	stats *staging.Stats
}

// The client's memory: commands at srpSlot each, receives for the
// target's responses at 1 MiB, each command's data from 2 MiB at
// srpSpan each.
const (
	srpSlot   = 16 << 10
	srpRecv   = 1 << 20
	srpData   = 2 << 20
	srpSpan   = 320 << 10
	srpImmOff = 68 // the Linux initiator's immediate data offset
)

func newSRPRig(t *testing.T, o rigOpts, depth int) *srpRig {
	t.Helper()
	st := &staging.Stats{}
	p, err := staging.New(staging.Options{Protocol: config.ProtocolSRP, Route: "srp", Host: 0, Stats: st, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	// ib_srp's login over RDMA/CM, asking for immediate data, and
	// srpt's response granting it.
	req := make([]byte, srp.LoginReqRDMALen)
	binary.BigEndian.PutUint16(req[8:], srp.BufFmtDirect|srp.BufFmtIndirect)
	req[10], req[11] = srp.ImmedRequested, byte(srp.OpLoginReq)
	binary.BigEndian.PutUint32(req[12:], srpSlot)
	binary.BigEndian.PutUint16(req[48:], srpImmOff)
	rsp := make([]byte, srp.LoginRspLen)
	rsp[0], rsp[26] = byte(srp.OpLoginRsp), srp.ImmedSupported
	binary.BigEndian.PutUint32(rsp[4:], uint32(depth))
	for i, b := range [][]byte{req, rsp} {
		if _, err := staging.ConnectDataOf(p, config.ProtocolSRP, i == 0, true, b); err != nil {
			t.Fatal(err)
		}
	}
	o.protocol, o.exposes = p, true
	o.clientAccess = transport.AccessRemoteRead | transport.AccessRemoteWrite
	o.clientMem = srpData + (depth+2)*srpSpan
	if o.classes == nil {
		o.classes = stagedClasses
	}
	return &srpRig{rig: newRig(t, o), stats: st}
}

// srpTestCmd is a command of the rig's and what the target does with it:
// a read of n bytes (transferred written, the rest its residual), a
// write of n bytes, or a write carried whole as immediate data; in
// pieces descriptors (1: direct, more: indirect, each a piece of the
// span, apart from the others).
type srpTestCmd struct {
	tag          uint64
	read, write  bool
	n            int
	pieces       int
	imm          bool
	transferred  int
	status       uint8
	sense        int
	wantAnswered bool // the gateway answers it in the target's place
}

func (r *srpRig) dataAt(tag uint64) uint64 { return r.cmr.Addr() + srpData + tag*srpSpan }

// srpPattern is command tag's data.
func srpPattern(tag uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(tag)*31 + i*5 + i>>9)
	}
	return b
}

// piece is descriptor i of c: the data's i-th share, 4 KiB past the
// end of the share before it in the span (what lies between the shares
// is not the command's).
func (r *srpRig) piece(c srpTestCmd, i int) (addr uint64, off, n int) {
	share := (c.n + c.pieces - 1) / c.pieces
	off = i * share
	return r.dataAt(c.tag) + uint64(i*(share+4096)), off, min(share, c.n-off)
}

// message is the SRP_CMD the initiator sends for c, as ib_srp builds it.
func (r *srpRig) message(c srpTestCmd) []byte {
	b := make([]byte, srp.CmdLen)
	b[0] = byte(srp.OpCmd)
	binary.LittleEndian.PutUint64(b[8:], c.tag)
	b[32] = 0x28
	if c.imm {
		b[5] = byte(srp.FormatImmediate) << 4
		b = binary.BigEndian.AppendUint32(b, uint32(c.n))
		b = append(b, make([]byte, srpImmOff-len(b))...)
		return append(b, srpPattern(c.tag, c.n)...)
	}
	if !c.read && !c.write {
		return b
	}
	var list []byte
	for i := range c.pieces {
		addr, _, n := r.piece(c, i)
		list = binary.BigEndian.AppendUint64(list, addr)
		list = binary.BigEndian.AppendUint32(list, r.cmr.RKey())
		list = binary.BigEndian.AppendUint32(list, uint32(n))
	}
	f := byte(srp.FormatDirect)
	if c.pieces > 1 {
		// The table descriptor names the list in the initiator's memory,
		// with its key, as ib_srp fills it in.
		f = byte(srp.FormatIndirect)
		head := binary.BigEndian.AppendUint64(nil, r.cmr.Addr())
		head = binary.BigEndian.AppendUint32(head, r.cmr.RKey())
		head = binary.BigEndian.AppendUint32(head, uint32(len(list)))
		head = binary.BigEndian.AppendUint32(head, uint32(c.n))
		list = append(head, list...)
	}
	if c.write {
		b[5], b[6] = f<<4, byte(c.pieces)
	} else {
		b[5], b[7] = f, byte(c.pieces)
	}
	return append(b, list...)
}

// run sends cmds at once, serves them as a target behind a verbs leg and
// checks what the initiator got back; it returns the bytes the target
// READ and WROTE through staging.
func (r *srpRig) run(cmds []srpTestCmd) (pulled, pushed uint64) {
	t := r.t
	t.Helper()
	key := r.cmr.RKey()
	byTag := map[uint64]srpTestCmd{}
	for i, c := range cmds {
		byTag[c.tag] = c
		off := int(r.dataAt(c.tag) - r.cmr.Addr())
		span := r.cmem[off : off+srpSpan]
		for j := range span {
			span[j] = 0xff
		}
		if c.write {
			for k := range c.pieces {
				addr, doff, n := r.piece(c, k)
				copy(r.cmem[addr-r.cmr.Addr():], srpPattern(c.tag, c.n)[doff:doff+n])
			}
		}
		if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: srpRecv + i*256, Length: 256}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		b := r.message(c)
		copy(r.cmem[i*srpSlot:], b)
		if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Offset: i * srpSlot, Length: len(b)}}); err != nil {
			t.Fatal(err)
		}
	}
	var keys []exposedKey
	served := 0
	for _, c := range cmds {
		if !c.wantAnswered {
			served++
		}
	}
	for n := range served {
		e := r.far.nthSend(t, n, fmt.Sprintf("command %d at the target", n))
		cmd, _, err := srp.ParseCmd(e.data, srpImmOff)
		if err != nil {
			t.Fatalf("command %d reached the target unparsable: %v", n, err)
		}
		c := byTag[cmd.Tag()]
		if c.wantAnswered {
			t.Fatalf("command %#x reached the target: the gateway should have answered it", c.tag)
		}
		r.serveSRP(c, cmd, key, func(k uint32, a uint64, w bool) { keys = append(keys, exposedKey{k, a, w}) })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, wc := range pollWCs(t, ctx, r.scq, len(cmds), "the initiator's SENDs") {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the initiator's message %d: %v", wc.ID, wc.Status)
		}
	}
	got := map[uint64]bool{}
	for _, wc := range r.receives(len(cmds), "SRP_RSPs") {
		if wc.Status != transport.StatusSuccess || wc.HasInv {
			t.Fatalf("the initiator's receive %d: %+v", wc.ID, wc)
		}
		rsp, _, err := srp.ParseRsp(r.cmem[srpRecv+int(wc.ID)*256 : srpRecv+int(wc.ID)*256+wc.ByteLen])
		if err != nil {
			t.Fatalf("the initiator's receive %d: %v", wc.ID, err)
		}
		c, ok := byTag[rsp.Tag()]
		if !ok || got[c.tag] {
			t.Fatalf("a response for tag %#x: known %v, answered before %v", rsp.Tag(), ok, got[c.tag])
		}
		got[c.tag] = true
		wantStatus := c.status
		if c.wantAnswered {
			wantStatus = 0x02
		}
		if rsp.Status() != wantStatus || rsp.ReqLimDelta() != 1 {
			t.Errorf("tag %#x: status %#x credit %d; want %#x, 1", c.tag, rsp.Status(), rsp.ReqLimDelta(), wantStatus)
		}
	}
	for _, c := range cmds {
		if !got[c.tag] {
			t.Errorf("tag %#x: no SRP_RSP at the initiator", c.tag)
		}
		if c.wantAnswered || !c.read {
			if c.write && !c.imm && !c.wantAnswered {
				pulled += uint64(c.n)
			}
			continue
		}
		pushed += uint64(c.transferred)
		want := srpPattern(c.tag, c.n)
		left := c.transferred
		for i := range c.pieces {
			addr, doff, n := r.piece(c, i)
			off := int(addr - r.cmr.Addr())
			w := min(n, left)
			left -= w
			if !bytes.Equal(r.cmem[off:off+w], want[doff:doff+w]) {
				t.Errorf("tag %#x descriptor %d: the initiator's buffer does not hold the %d bytes the target wrote", c.tag, i, w)
			}
			if rest := r.cmem[off+w : off+n+4096]; !bytes.Equal(rest, bytes.Repeat([]byte{0xff}, len(rest))) {
				t.Errorf("tag %#x descriptor %d: the gateway wrote past the %d bytes the target says it wrote", c.tag, i, w)
			}
		}
	}
	r.checkStagingEnded(keys, pulled, pushed)
	return pulled, pushed
}

// serveSRP plays the target for command c as it arrived (cmd): its
// descriptors must name staging the gateway exposed, never the
// initiator's memory, and an indirect one's table descriptor nothing of
// the initiator's; it READs a write's data (and checks it is the
// initiator's), WRITEs what it transfers of a read, and sends its
// SRP_RSP.
func (r *srpRig) serveSRP(c srpTestCmd, cmd srp.Cmd, hostKey uint32, use func(uint32, uint64, bool)) {
	t := r.t
	t.Helper()
	want := srpPattern(c.tag, c.n)
	if c.imm {
		if !bytes.Equal(cmd.DataOut().ImmediateData(), want) {
			t.Fatalf("tag %#x: the immediate data changed on its way", c.tag)
		}
	}
	buf := cmd.DataIn()
	if c.write {
		buf = cmd.DataOut()
	}
	if tb := buf.Table(); tb != nil && (tb.Key() == hostKey || tb.VA() != 0) {
		t.Errorf("tag %#x: the table descriptor still names the initiator's memory: %v", c.tag, tb)
	}
	left := c.transferred
	if (c.read || c.write) && !c.imm {
		if buf.Count() != c.pieces {
			t.Fatalf("tag %#x: %d descriptors at the target, the initiator sent %d", c.tag, buf.Count(), c.pieces)
		}
		for i, d := range buf.All() {
			_, doff, n := r.piece(c, i)
			if d.Key() == hostKey || int(d.Len()) != n {
				t.Fatalf("tag %#x descriptor %d reached the target as %v: not staged, or its length changed", c.tag, i, d)
			}
			if c.write {
				got, st := r.exposer.access(d.VA(), d.Key(), n, nil)
				if st != transport.StatusSuccess || !bytes.Equal(got, want[doff:doff+n]) {
					t.Fatalf("tag %#x: the target's READ of descriptor %d: %v, the initiator's bytes %v (session: %v)", c.tag, i, st, bytes.Equal(got, want[doff:doff+n]), r.sess.Err())
				}
				if _, st := r.exposer.access(d.VA(), d.Key(), n+1, nil); st != transport.StatusRemAccessErr {
					t.Errorf("tag %#x: a READ past descriptor %d's staging: %v", c.tag, i, st)
				}
			} else if w := min(n, left); w > 0 {
				if _, st := r.exposer.access(d.VA(), d.Key(), w, want[doff:doff+w]); st != transport.StatusSuccess {
					t.Fatalf("tag %#x: the target's WRITE of %d bytes of descriptor %d: %v (session: %v)", c.tag, w, i, st, r.sess.Err())
				}
				left -= w
			}
			use(d.Key(), d.VA(), c.read)
		}
	}
	f := srp.RspFields{ReqLimDelta: 1, Tag: c.tag, Status: c.status, Sense: make([]byte, c.sense)}
	if c.read && c.transferred < c.n {
		f.Flags, f.DataInResidual = srp.DIUnder, uint32(c.n-c.transferred)
	}
	if reply := r.far.send(r.pool, srp.AppendRsp(nil, f), 0, false); reply.Result != transport.Pending {
		t.Fatalf("tag %#x's response: reply %v", c.tag, reply.Result)
	}
}

// srpCommands are depth commands of every kind, tags from 1: reads the
// target answers whole, short (an underflow into a later descriptor)
// and with CHECK CONDITION after writing nothing; writes; a write
// carried whole as immediate data; a command without data; direct and
// indirect descriptors (up to 5), of 4 KiB to 256 KiB, some odd.
func srpCommands(depth int) []srpTestCmd {
	sizes := []int{4096, 65536, 131073, 262144, 12000, 8192}
	var cmds []srpTestCmd
	for tag := uint64(1); tag <= uint64(depth); tag++ {
		n := sizes[int(tag)%len(sizes)]
		pieces := 1 + int(tag)%5
		var c srpTestCmd
		switch tag % 6 {
		case 0:
			c = srpTestCmd{read: true, n: n, pieces: pieces, transferred: n}
		case 1:
			c = srpTestCmd{read: true, n: n, pieces: pieces, transferred: n*2/3 + 1}
		case 2:
			c = srpTestCmd{read: true, n: n, pieces: pieces, status: 0x02, sense: 18}
		case 3:
			c = srpTestCmd{write: true, n: n, pieces: pieces}
		case 4:
			c = srpTestCmd{write: true, n: 8192, pieces: 1, imm: true}
		case 5:
			c = srpTestCmd{}
		}
		c.tag = tag
		cmds = append(cmds, c)
	}
	return cmds
}

// TestSessionSRPStaged: SRP channels whose target sits behind a verbs
// leg, 30 commands of every kind in flight at once over a lossy network:
// every descriptor reaches the target rewritten to staging, an indirect
// one's table descriptor to nothing; a write's data was pulled before
// its command went on, a read's pushed before its response, only as
// much as the target says it wrote, across its descriptors in order;
// once a command completed its staging keys are refused; and at the end
// no staging buffer or exposure is left.
func TestSessionSRPStaged(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprintf("channel %d", i+1), func(t *testing.T) {
			t.Parallel()
			r := newSRPRig(t, rigOpts{net: simnet.Options{Loss: 0.01, Seed: uint64(90 + i)}, delay: 100 * time.Microsecond, lend: i%2 == 1, maxSGE: 4}, 30)
			pulled, pushed := r.run(srpCommands(30))
			if pulled == 0 || pushed == 0 {
				t.Errorf("pulled %d and pushed %d: the test proved nothing of staging", pulled, pushed)
			}
			if r.net.Stats().Lost.Load() == 0 {
				t.Error("the network lost nothing: the test proved nothing of loss")
			}
			if s := r.stats.Snapshot(); s.Errors != ([staging.NumWhys]uint64{}) || s.Completions != 30 {
				t.Errorf("protocol stats %+v, want 30 completions and no error", s)
			}
		})
	}
}

// TestSessionSRPTooLarge: a command with a descriptor larger than the
// pool's largest buffer (256 KiB here) is answered in the target's place
// with CHECK CONDITION and its credit back, never reaching the target,
// and the channel goes on: the commands around it cross and are staged.
func TestSessionSRPTooLarge(t *testing.T) {
	r := newSRPRig(t, rigOpts{}, 4)
	r.run([]srpTestCmd{
		{tag: 1, read: true, n: 65536, pieces: 1, transferred: 65536},
		{tag: 2, read: true, n: 300 << 10, pieces: 1, wantAnswered: true},
		{tag: 3, write: true, n: 131072, pieces: 2},
	})
	if s := r.stats.Snapshot(); s.Answered != 1 || s.Errors[staging.WhyUnstageable] != 1 {
		t.Errorf("protocol stats %+v, want one answered, one unstageable", s)
	}
}
