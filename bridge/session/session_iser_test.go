package session_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/iser"
)

// iserRig is a session of a protocol: iser route whose target sits behind
// a verbs leg (the far leg exposes): the client is the initiator, on the
// userspace leg (the route's listen side).
type iserRig struct {
	*rig
	stats *staging.Stats
}

// The client's memory: messages it sends at iserSlot each, receives for
// the target's at 1 MiB, each command's data from 2 MiB at iserSpan each.
const (
	iserSlot = 16 << 10
	iserRecv = 1 << 20
	iserData = 2 << 20
	iserSpan = 320 << 10
)

// iserFirstBurst is the FirstBurstLength the rig's login negotiates,
// with InitialR2T=No: writes whose F bit is clear send that much
// unsolicited.
const iserFirstBurst = 16384

func newISERRig(t *testing.T, o rigOpts, depth int) *iserRig {
	t.Helper()
	st := &staging.Stats{}
	p, err := staging.New(staging.Options{Protocol: config.ProtocolISER, Route: "san", Host: 0, Stats: st, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	// ib_iser's connect request (it takes Send with Invalidate), and
	// isert's accept once told it may not use it: the gateway does.
	if _, err := staging.ConnectDataOf(p, config.ProtocolISER, true, true, []byte{iser.CMZBVANotSupported, 0, 0, 0}); err != nil {
		t.Fatal(err)
	}
	rep, err := staging.ConnectDataOf(p, config.ProtocolISER, false, true, []byte{iser.CMZBVANotSupported | iser.CMSendWInvNotSupported, 0, 0, 0})
	if err != nil || rep[0]&iser.CMSendWInvNotSupported != 0 {
		t.Fatalf("the accept toward the initiator: % x, %v", rep, err)
	}
	o.protocol, o.exposes = p, true
	o.clientAccess = transport.AccessRemoteRead | transport.AccessRemoteWrite
	o.clientMem = iserData + (depth+2)*iserSpan
	if o.classes == nil {
		o.classes = stagedClasses
	}
	return &iserRig{rig: newRig(t, o), stats: st}
}

// iserCmd is a command of the rig's and what the target does with it.
type iserCmd struct {
	itt         uint32
	read, write bool
	edtl        uint32
	imm         int  // immediate data
	final       bool // no unsolicited Data-Out follows
	// transferred is what the target writes of a read (its residual the
	// rest); status and response its answer.
	transferred      uint32
	status, response uint8
	sense            int // bytes of sense data in the response
}

// unsolicited is what the initiator sends of c's data before the target
// READs the rest: the immediate data, and Data-Out up to the first burst.
func (c iserCmd) unsolicited() uint32 {
	if !c.write {
		return 0
	}
	if c.final {
		return uint32(c.imm)
	}
	return min(iserFirstBurst, c.edtl)
}

func (r *iserRig) dataAt(itt uint32) uint64 { return r.cmr.Addr() + iserData + uint64(itt)*iserSpan }

// iserPattern is command itt's data.
func iserPattern(itt uint32, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(itt)*29 + i*7 + i>>8)
	}
	return b
}

// messages are what the initiator sends for c: the command (with its
// immediate data), then its unsolicited Data-Out, as ib_iser builds them.
func (r *iserRig) messages(c iserCmd) [][]byte {
	key, base := r.cmr.RKey(), r.dataAt(c.itt)
	h := iser.HeaderFields{Opcode: iser.OpControl}
	unsol := c.unsolicited()
	if c.write && unsol < c.edtl {
		h.WSV, h.WriteSTag, h.WriteVA = true, key, base+uint64(unsol)
	}
	if c.read {
		h.RSV, h.ReadSTag, h.ReadVA = true, key, base
	}
	f := iser.SCSICommandFields{Final: c.final, Read: c.read, Write: c.write, Attr: 1, ITT: c.itt, EDTL: c.edtl, CmdSN: c.itt}
	out := [][]byte{iser.AppendPDU(nil, &h, f.BHS(), nil, iserPattern(c.itt, int(c.edtl))[:c.imm])}
	if c.write && !c.final {
		data := iserPattern(c.itt, int(c.edtl))[c.imm:unsol]
		d := iser.BHSFields{Opcode: iser.OpDataOut, Flags: 0x80, ITT: c.itt, Words: [7]uint32{iser.ReservedTag, 0, 0, 0, 0, uint32(c.imm)}}
		out = append(out, iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, d, nil, data))
	}
	return out
}

// login logs the rig's initiator in: InitialR2T=No, FirstBurstLength
// iserFirstBurst on both sides.
func (r *iserRig) login() {
	t := r.t
	t.Helper()
	text := iser.AppendKey(iser.AppendKey(nil, "InitialR2T", "No"), "FirstBurstLength", fmt.Sprint(iserFirstBurst))
	req := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, iser.BHSFields{Opcode: iser.OpLogin, Immediate: true, Flags: 0x87, ITT: 0}, nil, text)
	if err := r.client.PostRecv(transport.RecvWR{ID: 1 << 20, Local: transport.SGE{MR: r.cmr, Offset: iserRecv, Length: 8192}}); err != nil {
		t.Fatal(err)
	}
	copy(r.cmem, req)
	if err := r.client.PostSend(transport.SendWR{ID: 1 << 20, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Length: len(req)}}); err != nil {
		t.Fatal(err)
	}
	e := r.far.nthSend(t, 0, "the login request at the target")
	if !bytes.Equal(e.data, req) {
		t.Fatal("the login request reached the target changed")
	}
	rsp := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, iser.BHSFields{Opcode: iser.OpLoginResp, Flags: 0x87, ITT: 0}, nil, text)
	if reply := r.far.send(r.pool, rsp, 0, false); reply.Result != transport.Pending {
		t.Fatalf("the login response: %v", reply.Result)
	}
	if wc := r.receives(1, "the login response"); wc[0].Status != transport.StatusSuccess || !bytes.Equal(r.cmem[iserRecv:iserRecv+len(rsp)], rsp) {
		t.Fatalf("the login response at the initiator: %+v", wc[0])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pollWCs(t, ctx, r.scq, 1, "the login request's SEND")
}

// run sends cmds at once after the login, serves them as a target behind
// a verbs leg and checks what the initiator got back; it returns the
// bytes the target READ and WROTE.
func (r *iserRig) run(cmds []iserCmd) (pulled, pushed uint64) {
	t := r.t
	t.Helper()
	r.login()
	key := r.cmr.RKey()
	byITT := map[uint32]iserCmd{}
	var sends [][]byte
	for _, c := range cmds {
		byITT[c.itt] = c
		off := int(r.dataAt(c.itt) - r.cmr.Addr())
		if c.write {
			copy(r.cmem[off:], iserPattern(c.itt, int(c.edtl)))
		} else {
			for i := range c.edtl {
				r.cmem[off+int(i)] = 0xff
			}
		}
		sends = append(sends, r.messages(c)...)
	}
	for i := range cmds {
		if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: iserRecv + i*256, Length: 256}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, b := range sends {
		copy(r.cmem[i*iserSlot:], b)
		if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Offset: i * iserSlot, Length: len(b)}}); err != nil {
			t.Fatal(err)
		}
	}
	// The target: every message in order after the login.
	var keys []exposedKey
	unsolicited := map[uint32][]byte{}
	headers := map[uint32]iser.Header{}
	for n := 1; n <= len(sends); n++ {
		e := r.far.nthSend(t, n, fmt.Sprintf("message %d at the target", n))
		p, _, err := iser.ParsePDU(e.data)
		if err != nil {
			t.Fatalf("message %d reached the target unparsable: %v", n, err)
		}
		b, h := p.BHS, p.Header
		c := byITT[b.ITT()]
		data := e.data[p.DataOffset():]
		if b.Opcode() == iser.OpDataOut {
			unsolicited[c.itt] = append(unsolicited[c.itt], data...)
			if b.Final() {
				r.serveISER(c, headers[c.itt], unsolicited[c.itt], key, func(k uint32, a uint64, w bool) { keys = append(keys, exposedKey{k, a, w}) })
			}
			continue
		}
		unsolicited[c.itt] = append([]byte(nil), data...)
		headers[c.itt] = h
		if c.final || !c.write {
			r.serveISER(c, h, unsolicited[c.itt], key, func(k uint32, a uint64, w bool) { keys = append(keys, exposedKey{k, a, w}) })
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, wc := range pollWCs(t, ctx, r.scq, len(sends), "the initiator's SENDs") {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the initiator's message %d: %v", wc.ID, wc.Status)
		}
	}
	got := map[uint32]transport.WC{}
	for _, wc := range r.receives(len(cmds), "SCSI Responses") {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the initiator's receive %d: %+v", wc.ID, wc)
		}
		p, _, err := iser.ParsePDU(r.cmem[iserRecv+int(wc.ID)*256 : iserRecv+int(wc.ID)*256+wc.ByteLen])
		if err != nil || p.BHS.Opcode() != iser.OpSCSIResponse {
			t.Fatalf("the initiator's receive %d: %v", wc.ID, err)
		}
		c := byITT[p.BHS.ITT()]
		if _, dup := got[c.itt]; dup {
			t.Errorf("ITT %d answered twice", c.itt)
		}
		got[c.itt] = wc
		if p.BHS.Status() != c.status || p.BHS.Response() != c.response || p.DataLen() != c.sense {
			t.Errorf("ITT %d: status %#x response %d, %d bytes of sense; want %#x %d %d", c.itt, p.BHS.Status(), p.BHS.Response(), p.DataLen(), c.status, c.response, c.sense)
		}
	}
	for _, c := range cmds {
		wc, ok := got[c.itt]
		if !ok {
			t.Errorf("ITT %d: no SCSI Response at the initiator", c.itt)
			continue
		}
		// The Linux target's choice, made by the gateway: the read STag,
		// else the write STag that was sent.
		inv := c.read || (c.write && c.unsolicited() < c.edtl)
		if inv != wc.HasInv || (inv && wc.InvRKey != key) {
			t.Errorf("ITT %d's response: with invalidate %v of %#x, want %v of the initiator's %#x", c.itt, wc.HasInv, wc.InvRKey, inv, key)
		}
		if c.write {
			pulled += uint64(c.edtl - c.unsolicited())
			continue
		}
		pushed += uint64(c.transferred)
		off := int(r.dataAt(c.itt) - r.cmr.Addr())
		if !bytes.Equal(r.cmem[off:off+int(c.transferred)], iserPattern(c.itt, int(c.transferred))) {
			t.Errorf("ITT %d: the initiator's buffer does not hold the %d bytes the target wrote", c.itt, c.transferred)
		}
		if rest := r.cmem[off+int(c.transferred) : off+int(c.edtl)]; !bytes.Equal(rest, bytes.Repeat([]byte{0xff}, len(rest))) {
			t.Errorf("ITT %d: the gateway wrote past the %d bytes the target says it wrote", c.itt, c.transferred)
		}
	}
	r.checkStagingEnded(keys, pulled, pushed)
	return pulled, pushed
}

// serveISER plays the target for command c, whose unsolicited data
// (immediate and Data-Out) it received: its descriptors must name
// staging the gateway exposed, never the initiator's memory; it READs a
// write's solicited data (and checks all of it is the initiator's),
// WRITEs what it transfers of a read, and sends its SCSI Response.
func (r *iserRig) serveISER(c iserCmd, h iser.Header, unsol []byte, hostKey uint32, use func(uint32, uint64, bool)) {
	t := r.t
	t.Helper()
	want := iserPattern(c.itt, int(c.edtl))
	if !bytes.Equal(unsol, want[:c.unsolicited()]) {
		t.Fatalf("ITT %d: the target received %d bytes of unsolicited data, not the initiator's %d", c.itt, len(unsol), c.unsolicited())
	}
	if c.write && c.unsolicited() < c.edtl {
		if !h.WSV() || h.WriteSTag() == hostKey {
			t.Fatalf("ITT %d reached the target naming the initiator's memory (write STag %#x): not staged", c.itt, h.WriteSTag())
		}
		n := int(c.edtl - c.unsolicited())
		got, st := r.exposer.access(h.WriteVA(), h.WriteSTag(), n, nil)
		if st != transport.StatusSuccess || !bytes.Equal(got, want[c.unsolicited():]) {
			t.Fatalf("ITT %d: the target's READ of %d bytes of staging: %v, the initiator's bytes %v (session: %v)", c.itt, n, st, bytes.Equal(got, want[c.unsolicited():]), r.sess.Err())
		}
		if _, st := r.exposer.access(h.WriteVA(), h.WriteSTag(), n+1, nil); st != transport.StatusRemAccessErr {
			t.Errorf("ITT %d: a READ past the staging: %v", c.itt, st)
		}
		use(h.WriteSTag(), h.WriteVA(), false)
	}
	if c.read {
		if !h.RSV() || h.ReadSTag() == hostKey {
			t.Fatalf("ITT %d reached the target naming the initiator's memory (read STag %#x): not staged", c.itt, h.ReadSTag())
		}
		if c.transferred > 0 {
			if _, st := r.exposer.access(h.ReadVA(), h.ReadSTag(), int(c.transferred), want[:c.transferred]); st != transport.StatusSuccess {
				t.Fatalf("ITT %d: the target's WRITE of %d bytes to staging at %#x key %#x: %v (session: %v)", c.itt, c.transferred, h.ReadVA(), h.ReadSTag(), st, r.sess.Err())
			}
		}
		use(h.ReadSTag(), h.ReadVA(), true)
	}
	f := iser.SCSIResponseFields{Response: c.response, Status: c.status, ITT: c.itt, StatSN: c.itt, DataSegmentLength: c.sense}
	if c.read && c.transferred < c.edtl {
		f.Underflow, f.Residual = true, c.edtl-c.transferred
	}
	rsp := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, f.BHS(), nil, make([]byte, c.sense))
	if reply := r.far.send(r.pool, rsp, 0, false); reply.Result != transport.Pending {
		t.Fatalf("ITT %d's response: reply %v", c.itt, reply.Result)
	}
}

// iserCommands are depth commands of every kind, ITTs from 1: reads the
// target answers whole, short (an underflow) and with CHECK CONDITION
// after writing nothing; writes with no immediate data, with immediate
// data, with unsolicited Data-Out, and wholly immediate (nothing to
// stage); of 4 KiB to 256 KiB, one of them odd.
func iserCommands(depth int) []iserCmd {
	sizes := []uint32{4096, 65536, 131073, 262144, 12000, 8192}
	var cmds []iserCmd
	for itt := uint32(1); itt <= uint32(depth); itt++ {
		n := sizes[int(itt)%len(sizes)]
		var c iserCmd
		switch itt % 7 {
		case 0: // a read answered whole
			c = iserCmd{read: true, edtl: n, final: true, transferred: n}
		case 1: // a read the target answers short
			c = iserCmd{read: true, edtl: n, final: true, transferred: n / 3}
		case 2: // a read that fails: CHECK CONDITION, nothing written
			c = iserCmd{read: true, edtl: n, final: true, status: iser.StatusCheckCondition, sense: 20}
		case 3: // a write, no immediate data
			c = iserCmd{write: true, edtl: n, final: true}
		case 4: // a write with 8 KiB of immediate data
			c = iserCmd{write: true, edtl: max(n, 8192), final: true, imm: 8192}
		case 5: // a write with unsolicited Data-Out after 1 KiB of immediate data
			c = iserCmd{write: true, edtl: max(n, 2*iserFirstBurst), imm: 1024}
		case 6: // a write carried whole in the command
			c = iserCmd{write: true, edtl: 4096, final: true, imm: 4096}
		}
		c.itt = itt
		cmds = append(cmds, c)
	}
	return cmds
}

// TestSessionISERStaged: iSER connections whose target sits behind a
// verbs leg, 32 commands of every kind in flight at once over a lossy
// network: every STag reaches the target rewritten to staging; a write's
// solicited data (past its immediate and unsolicited data) was pulled
// before its command went on, a read's pushed before its response, only
// as much as the target says it wrote; responses carry the invalidation
// of the initiator's STag; once a command completed its staging key is
// refused; and at the end no staging buffer or exposure is left.
func TestSessionISERStaged(t *testing.T) {
	for i := range 3 {
		t.Run(fmt.Sprintf("connection %d", i+1), func(t *testing.T) {
			t.Parallel()
			r := newISERRig(t, rigOpts{net: simnet.Options{Loss: 0.01, Seed: uint64(70 + i)}, delay: 100 * time.Microsecond, lend: i%2 == 1, maxSGE: 4}, 32)
			pulled, pushed := r.run(iserCommands(32))
			if pulled == 0 || pushed == 0 {
				t.Errorf("pulled %d and pushed %d: the test proved nothing of staging", pulled, pushed)
			}
			if r.net.Stats().Lost.Load() == 0 {
				t.Error("the network lost nothing: the test proved nothing of loss")
			}
			s := r.stats.Snapshot()
			if s.Errors != ([staging.NumWhys]uint64{}) || s.Completions != 33 {
				t.Errorf("protocol stats %+v, want 33 completions and no error", s)
			}
		})
	}
}

// TestSessionISERPoolExhausted: staging that waits for the pool waits in
// order, and delivers. A 4 MiB pool has four 256 KiB buffers for 32
// commands of 128 to 256 KiB; the messages themselves are small (at most
// 1 KiB of immediate data), so that what the initiator sends never takes
// the class the staging waits for: a message queued behind a held one
// holds its buffer until it is relayed (the class both want is
// TestSessionISERMessagesFillThePool's).
func TestSessionISERPoolExhausted(t *testing.T) {
	r := newISERRig(t, rigOpts{net: simnet.Options{Loss: 0.01, Seed: 77}, delay: 50 * time.Microsecond, poolSize: 4 << 20}, 32)
	var cmds []iserCmd
	for itt := uint32(1); itt <= 32; itt++ {
		n := []uint32{131073, 262144, 200000, 180000}[itt%4]
		c := iserCmd{itt: itt, read: true, edtl: n, final: true, transferred: n - itt}
		if itt%2 == 0 {
			c = iserCmd{itt: itt, write: true, edtl: n, final: true, imm: 1024}
		}
		cmds = append(cmds, c)
	}
	r.run(cmds)
	if w := r.sess.Stats().Snapshot().StageWaits[0]; w == 0 {
		t.Error("no region waited for the pool: the test proved nothing of exhaustion")
	}
}

// TestSessionISERMessagesFillThePool: commands whose own messages take
// the class their staging needs (15 KiB of immediate data, a 64 KiB
// buffer each, and 64 KiB left to pull) fill that class with messages
// queued behind the first staged command; the pool's reserve, which only
// staging takes, lets that command go on, and every one after it.
// Without the reserve, in about half of the runs, a command waited for a
// buffer held by the messages behind it, and nothing moved again.
func TestSessionISERMessagesFillThePool(t *testing.T) {
	r := newISERRig(t, rigOpts{poolSize: 4 << 20}, 32)
	var cmds []iserCmd
	for itt := uint32(1); itt <= 32; itt++ {
		cmds = append(cmds, iserCmd{itt: itt, write: true, edtl: 79 << 10, final: true, imm: 15 << 10})
	}
	r.run(cmds)
	if w := r.sess.Stats().Snapshot().StageWaits[0]; w == 0 {
		t.Error("no region waited for the pool: the test proved nothing of a full class")
	}
}

// TestSessionISERTooLarge: a command larger than the pool's largest
// buffer cannot be staged, and no answer in the target's place would be
// correct: the session ends, with an error naming why, and leaves
// nothing staged.
func TestSessionISERTooLarge(t *testing.T) {
	r := newISERRig(t, rigOpts{}, 2)
	r.login()
	c := iserCmd{itt: 1, read: true, edtl: 300 << 10, final: true}
	b := r.messages(c)[0]
	copy(r.cmem, b)
	if err := r.client.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Length: len(b)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
	}
	if err := r.sess.Err(); err == nil || !bytes.Contains([]byte(err.Error()), []byte("larger than the largest staging buffer")) {
		t.Errorf("the session ended with %v, want it to name the staging buffer", err)
	}
	if n := r.exposer.live(); n != 0 {
		t.Errorf("%d exposures live after the session ended", n)
	}
	if got := r.stats.Snapshot().Errors[staging.WhyUnstageable]; got != 1 {
		t.Errorf("%d unstageable, want 1", got)
	}
}
