package ibv_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rbridge/rbridge/ibv"
	"github.com/rbridge/rbridge/integration/guest"
)

// Type 2 memory windows in the guest: the server end of a connection ("A",
// the gateway) binds a window over part of an MR that grants no remote
// access itself; the client end ("B", the storage peer) reads and writes
// through the window's rkey. A refused access is a class C error: both
// QPs go to ERR, so each refusal gets a fresh connection.

const (
	winSize   = 64 << 10 // A's memory behind the windows
	winOff    = 4096     // the window most cases bind: [winOff, winOff+winLen)
	winLen    = 8192
	bLocal    = 32 << 10 // B's buffer (in its own MR) for READ and WRITE
	bindID    = 500
	invID     = 501
	accessID  = 77
	winAccess = ibv.AccessLocalWrite | ibv.AccessMWBind
)

// mwPair is a connection whose A end has a window and the memory behind it.
type mwPair struct {
	a, b  *peer
	win   *ibv.Arena
	winMR *ibv.MR // in A's PD; winAccess unless the case says otherwise
	mw    *ibv.MW
}

func newMWPair(t *testing.T, d guest.Dev, mrAccess ibv.Access) *mwPair {
	t.Helper()
	cli, srv, _, _ := connectRC(t, d, connectOptions{})
	p := &mwPair{a: srv, b: cli}
	var err error
	p.win, err = ibv.MapArena(winSize, ibv.ArenaOptions{})
	check(t, err)
	t.Cleanup(func() { p.win.Close() }) // its MR, and the window bound to it, with it
	p.winMR, err = srv.pd.RegMR(p.win.Bytes(), mrAccess)
	check(t, err)
	fill(p.win.Bytes(), 0x40)
	p.mw, err = srv.pd.AllocMW(ibv.MWType2)
	check(t, err)
	t.Cleanup(func() {
		if err := p.mw.Close(); err != nil {
			t.Errorf("close window: %v", err)
		}
	})
	return p
}

// requireMW returns the device pass; on siw, which has no windows, it skips
// naming what the device reported; on rxe a device without type 2 windows
// fails the test.
func requireMW(t *testing.T) guest.Dev {
	t.Helper()
	d := guest.Device(t)
	dev, err := ibv.OpenDevice(d.Name)
	check(t, err)
	defer dev.Close()
	a, err := dev.Attr()
	check(t, err)
	switch {
	case d.Kind == "siw" && !a.MWType2():
		t.Skipf("%s has no type 2 memory windows to bind (device_cap_flags %v, max_mw %d; TestGuestMWCaps asserts it)", d.Name, a.CapFlags, a.MaxMW)
	case !a.MWType2():
		t.Fatalf("%s (%s) reports no type 2 memory windows (device_cap_flags %v, max_mw %d)", d.Name, d.Kind, a.CapFlags, a.MaxMW)
	}
	return d
}

// waitID waits for the completion of work request id on cq, passing over
// receives flushed by a QP gone to ERR.
func waitID(t *testing.T, cq *ibv.CQ, id uint64) ibv.WorkCompletion {
	t.Helper()
	for {
		wc := wait(t, cq, 1)[0]
		if wc.ID == id {
			return wc
		}
		if wc.ID < 1000 || wc.Status != ibv.WCWRFlushErr {
			t.Fatalf("waiting for wr %d: %s", id, describe([]ibv.WorkCompletion{wc}))
		}
	}
}

// postBind binds the window over [off, off+n) of mr with the next rkey,
// signaled, settles the bind with its completion and returns the rkey and
// the completion.
func (p *mwPair) postBind(t *testing.T, mr *ibv.MR, off, n int, acc ibv.Access) (uint32, ibv.WorkCompletion) {
	t.Helper()
	rkey := p.mw.NextRKey()
	send(t, p.a.qp, ibv.SendWR{ID: bindID, Op: ibv.OpBindMW, Flags: ibv.SendSignaled,
		Bind: ibv.MWBind{MW: p.mw, RKey: rkey, MR: mr, Addr: mr.Addr() + uint64(off), Length: uint64(n), Access: acc}})
	wc := waitID(t, p.a.cq, bindID)
	check(t, p.mw.BindCompleted(wc.Status))
	return rkey, wc
}

// bind is postBind that must succeed; it returns the rkey and the address
// the peer names.
func (p *mwPair) bind(t *testing.T, off, n int, acc ibv.Access) (uint32, uint64) {
	t.Helper()
	rkey, wc := p.postBind(t, p.winMR, off, n, acc)
	if wc.Status != ibv.WCSuccess || wc.Opcode != ibv.WCBindMW {
		t.Fatalf("bind [%d, %d) %v: %s, want a successful BIND_MW", off, off+n, acc, describe([]ibv.WorkCompletion{wc}))
	}
	if got := p.mw.RKey(); got != rkey {
		t.Fatalf("after the bind the window's rkey is 0x%x, want 0x%x", got, rkey)
	}
	return rkey, p.winMR.Addr() + uint64(off)
}

// invalidate posts LOCAL_INV of rkey on A, signaled, and waits for it.
func (p *mwPair) invalidate(t *testing.T, rkey uint32) {
	t.Helper()
	send(t, p.a.qp, ibv.SendWR{ID: invID, Op: ibv.OpLocalInv, Flags: ibv.SendSignaled, Imm: rkey})
	if wc := waitID(t, p.a.cq, invID); wc.Status != ibv.WCSuccess || wc.Opcode != ibv.WCLocalInv {
		t.Fatalf("LOCAL_INV 0x%x: %s, want a successful LOCAL_INV", rkey, describe([]ibv.WorkCompletion{wc}))
	}
}

// access has peer q READ or WRITE n bytes at (rkey, addr) through its QP,
// from or into its buffer at bLocal (0xFF before a READ; a pattern before a
// WRITE), and returns the completion.
func access(t *testing.T, q *peer, op ibv.Opcode, rkey uint32, addr uint64, n int) ibv.WorkCompletion {
	t.Helper()
	buf := q.mr.Bytes()[bLocal : bLocal+n]
	if op == ibv.OpRead {
		fillFF(buf)
	} else {
		fill(buf, 0x77)
	}
	send(t, q.qp, ibv.SendWR{ID: accessID, Op: op, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(q.mr, bLocal, n)}, RemoteAddr: addr, RKey: rkey})
	return waitID(t, q.cq, accessID)
}

func fillFF(b []byte) {
	for i := range b {
		b[i] = 0xFF
	}
}

// onlyFF reports whether b was never written.
func onlyFF(b []byte) bool { return len(bytes.Trim(b, "\xff")) == 0 }

// What each device reports, and AllocMW agreeing with it: rxe offers type 2
// windows, siw none.
func TestGuestMWCaps(t *testing.T) {
	d := guest.Device(t)
	dev, err := ibv.OpenDevice(d.Name)
	check(t, err)
	defer dev.Close()
	a, err := dev.Attr()
	check(t, err)
	info, err := dev.Info()
	check(t, err)
	if info.Attr != a {
		t.Errorf("Info().Attr = %+v, Attr() = %+v", info.Attr, a)
	}
	t.Logf("%s: device_cap_flags 0x%x (%v), max_mw %d: type 1 %v, type 2 %v", d.Name, uint64(a.CapFlags), a.CapFlags, a.MaxMW, a.MWType1(), a.MWType2())
	pd, err := dev.AllocPD()
	check(t, err)
	mw, err := pd.AllocMW(ibv.MWType2)
	switch d.Kind {
	case "rxe":
		if !a.MWType2() || a.CapFlags&ibv.DeviceMemWindowType2B == 0 {
			t.Errorf("rxe: device_cap_flags %v, max_mw %d: want MEM_WINDOW_TYPE_2B and windows", a.CapFlags, a.MaxMW)
		}
		check(t, err)
		rkey := mw.RKey()
		if mw.Type() != ibv.MWType2 || mw.NextRKey() != rkey&^0xff|(rkey+1)&0xff {
			t.Errorf("window: type %v rkey 0x%x next 0x%x", mw.Type(), rkey, mw.NextRKey())
		}
		if err := mw.BindCompleted(ibv.WCSuccess); err == nil || mw.RKey() != rkey {
			t.Errorf("BindCompleted with no bind pending: %v, rkey 0x%x (was 0x%x)", err, mw.RKey(), rkey)
		}
		t.Logf("rxe: type 2 window rkey 0x%x, next 0x%x", rkey, mw.NextRKey())
		mw1, err := pd.AllocMW(ibv.MWType1)
		check(t, err)
		t.Logf("rxe: type 1 window rkey 0x%x", mw1.RKey())
	case "siw":
		if a.MWType2() || a.MaxMW != 0 {
			t.Errorf("siw: device_cap_flags %v, max_mw %d: want no windows", a.CapFlags, a.MaxMW)
		}
		if !errors.Is(err, ibv.ErrNotSupported) {
			t.Fatalf("siw: AllocMW(type 2) = %v, want an error matching ErrNotSupported", err)
		}
		t.Logf("siw: AllocMW(type 2): %v", err)
	}
	check(t, pd.Close()) // takes the windows with it
	if mw != nil {
		check(t, mw.Close())
	}
}

// B reads and writes through the window: the bytes are A's, and a WRITE
// changes the window's span only.
func TestGuestMWReadWrite(t *testing.T) {
	d := requireMW(t)
	p := newMWPair(t, d, winAccess)
	mem := p.win.Bytes()
	rkey, addr := p.bind(t, winOff, winLen, ibv.AccessRemoteRead|ibv.AccessRemoteWrite)
	if rkey == p.winMR.RKey() || rkey == p.winMR.LKey() {
		t.Fatalf("window rkey 0x%x is the MR's (lkey 0x%x rkey 0x%x)", rkey, p.winMR.LKey(), p.winMR.RKey())
	}
	t.Logf("window rkey 0x%x over [0x%x, 0x%x) of MR lkey 0x%x", rkey, addr, addr+winLen, p.winMR.LKey())

	fill(mem[winOff:winOff+winLen], 0x21)
	for _, span := range [][2]int{{0, winLen}, {winLen - 100, 100}, {1000, 1}} {
		wc := access(t, p.b, ibv.OpRead, rkey, addr+uint64(span[0]), span[1])
		got := p.b.mr.Bytes()[bLocal : bLocal+span[1]]
		if wc.Status != ibv.WCSuccess || !bytes.Equal(got, mem[winOff+span[0]:winOff+span[0]+span[1]]) {
			t.Fatalf("READ [%d, +%d) of the window: %s, bytes equal %v", span[0], span[1], describe([]ibv.WorkCompletion{wc}), bytes.Equal(got, mem[winOff+span[0]:][:span[1]]))
		}
	}
	before := bytes.Clone(mem)
	wc := access(t, p.b, ibv.OpWrite, rkey, addr+1000, 4096)
	if wc.Status != ibv.WCSuccess || wc.Opcode != ibv.WCWrite {
		t.Fatalf("WRITE into the window: %s", describe([]ibv.WorkCompletion{wc}))
	}
	want := bytes.Clone(before)
	copy(want[winOff+1000:], p.b.mr.Bytes()[bLocal:bLocal+4096])
	if !bytes.Equal(mem, want) {
		t.Fatalf("after the WRITE A's memory differs from the expected (first difference at %d)", firstDiff(mem, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// Every access the window does not grant completes at B with a remote
// access error, and moves no byte: B's buffer keeps its 0xFF after a
// refused READ, A's memory is unchanged after a refused WRITE.
//
// Except, on rxe, an access outside the window but inside its MR: rxe
// checks the range of the window's MR, not the window's own
// (rxe_resp.c check_rkey: mr_check_range(mw->mr, ...); in Debian's 6.1 and
// in upstream at torvalds/linux 034e285f), so the access succeeds and bytes
// move. Those cases
// (rxeUnbounded) assert what rxe does, so that a kernel that starts
// refusing them is noticed; TestGuestMWWholeMR shows the remedy: a window
// over a whole MR, whose bounds rxe does enforce.
func TestGuestMWRefused(t *testing.T) {
	d := requireMW(t)
	rw := ibv.AccessRemoteRead | ibv.AccessRemoteWrite
	for _, tc := range []struct {
		name string
		acc  ibv.Access // the window's
		op   ibv.Opcode
		// before runs on A after the bind and returns the rkey and address B uses.
		before func(t *testing.T, p *mwPair, rkey uint32, addr uint64) (uint32, uint64)
		n      int
		// rxeUnbounded: outside the window, inside its MR (see above).
		rxeUnbounded bool
	}{
		{"READ past the window's end, inside the MR", rw, ibv.OpRead, shift(winLen - 64), 128, true},
		{"READ before the window's start, inside the MR", rw, ibv.OpRead, shift(-64), 128, true},
		{"WRITE past the window's end, inside the MR", rw, ibv.OpWrite, shift(winLen - 64), 128, true},
		{"READ past the MR's end", rw, ibv.OpRead, shift(winSize - winOff - 64), 128, false},
		{"WRITE through a read-only window", ibv.AccessRemoteRead, ibv.OpWrite, shift(0), 64, false},
		{"READ through a write-only window", ibv.AccessRemoteWrite, ibv.OpRead, shift(0), 64, false},
		{"READ with the MR's own rkey (the MR grants no remote access)", rw, ibv.OpRead,
			func(t *testing.T, p *mwPair, _ uint32, addr uint64) (uint32, uint64) { return p.winMR.RKey(), addr }, 64, false},
		{"READ after LOCAL_INV", rw, ibv.OpRead, invalidated, 64, false},
		{"WRITE after LOCAL_INV", rw, ibv.OpWrite, invalidated, 64, false},
		{"READ after the window is closed", rw, ibv.OpRead,
			func(t *testing.T, p *mwPair, rkey uint32, addr uint64) (uint32, uint64) {
				check(t, p.mw.Close())
				return rkey, addr
			}, 64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newMWPair(t, d, winAccess)
			rkey, addr := p.bind(t, winOff, winLen, tc.acc)
			rkey, addr = tc.before(t, p, rkey, addr)
			memBefore := bytes.Clone(p.win.Bytes())
			wc := access(t, p.b, tc.op, rkey, addr, tc.n)
			if tc.rxeUnbounded && d.Kind == "rxe" {
				if wc.Status != ibv.WCSuccess {
					t.Fatalf("rxe refused an access outside the window inside its MR (%s): it enforces window bounds now; make this case expect %v", describe([]ibv.WorkCompletion{wc}), ibv.WCRemAccessErr)
				}
				t.Logf("rxe does not enforce the window's bounds: %v of %d bytes at window offset %d succeeded", tc.op, tc.n, int64(addr)-int64(p.winMR.Addr())-winOff)
				return
			}
			if wc.Status != ibv.WCRemAccessErr {
				t.Errorf("%v of %d bytes at 0x%x rkey 0x%x: %s, want %v", tc.op, tc.n, addr, rkey, describe([]ibv.WorkCompletion{wc}), ibv.WCRemAccessErr)
			}
			if tc.op == ibv.OpRead && !onlyFF(p.b.mr.Bytes()[bLocal:bLocal+tc.n]) {
				t.Errorf("the refused READ wrote into B's buffer")
			}
			if i := firstDiff(p.win.Bytes(), memBefore); tc.op == ibv.OpWrite && i != winSize {
				t.Errorf("the refused WRITE changed A's memory at offset %d", i)
			}
			if a, err := p.a.qp.Query(); err == nil {
				t.Logf("A's QP after the refusal: %v", a.State)
			}
		})
	}
}

// A window over a whole MR: the MR's bounds are the window's, and rxe
// refuses accesses past either end (the remedy for rxe's unbounded windows,
// TestGuestMWRefused).
func TestGuestMWWholeMR(t *testing.T) {
	d := requireMW(t)
	for _, tc := range []struct {
		name string
		off  int // from the window's start
	}{
		{"READ past the end", winLen - 64},
		{"READ before the start", -64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newMWPair(t, d, winAccess)
			mr, err := p.a.pd.RegMR(p.win.Bytes()[winOff:winOff+winLen], winAccess)
			check(t, err)
			t.Cleanup(func() { mr.Close() })
			rkey, wc := p.postBind(t, mr, 0, winLen, ibv.AccessRemoteRead)
			if wc.Status != ibv.WCSuccess {
				t.Fatalf("bind over the whole MR: %s", describe([]ibv.WorkCompletion{wc}))
			}
			if wc := access(t, p.b, ibv.OpRead, rkey, mr.Addr(), winLen); wc.Status != ibv.WCSuccess {
				t.Fatalf("READ of the whole window: %s", describe([]ibv.WorkCompletion{wc}))
			}
			wc = access(t, p.b, ibv.OpRead, rkey, uint64(int64(mr.Addr())+int64(tc.off)), 128)
			if untouched := onlyFF(p.b.mr.Bytes()[bLocal : bLocal+128]); wc.Status != ibv.WCRemAccessErr || !untouched {
				t.Errorf("READ at window offset %d: %s (buffer untouched %v), want %v", tc.off, describe([]ibv.WorkCompletion{wc}), untouched, ibv.WCRemAccessErr)
			}
		})
	}
}

// shift is a case's before: the bound window's rkey, its address moved by off.
func shift(off int) func(*testing.T, *mwPair, uint32, uint64) (uint32, uint64) {
	return func(_ *testing.T, _ *mwPair, rkey uint32, addr uint64) (uint32, uint64) {
		return rkey, uint64(int64(addr) + int64(off))
	}
}

// invalidated is a case's before: A invalidates the window (and the
// LOCAL_INV completes) before B tries the old rkey.
func invalidated(t *testing.T, p *mwPair, rkey uint32, addr uint64) (uint32, uint64) {
	p.invalidate(t, rkey)
	return rkey, addr
}

// A type 2 window is bound to A's QP: D, connected to another QP (C) of
// the same PD on the same device, is refused the window's rkey, and the
// refusal leaves the window working for B.
func TestGuestMWOtherQP(t *testing.T) {
	d := requireMW(t)
	p := newMWPair(t, d, winAccess)
	fill(p.win.Bytes()[winOff:winOff+winLen], 0x31)
	rkey, addr := p.bind(t, winOff, winLen, ibv.AccessRemoteRead|ibv.AccessRemoteWrite)
	dPeer, c, _, _ := connectRC(t, d, connectOptions{serverPD: p.a.pd})
	if c.pd != p.a.pd || c.qp.QPN() == p.a.qp.QPN() {
		t.Fatalf("C: PD %p QPN %d; want A's PD %p and another QP than A's %d", c.pd, c.qp.QPN(), p.a.pd, p.a.qp.QPN())
	}
	memBefore := bytes.Clone(p.win.Bytes())
	wc := access(t, dPeer, ibv.OpRead, rkey, addr, 64)
	if untouched := onlyFF(dPeer.mr.Bytes()[bLocal : bLocal+64]); wc.Status != ibv.WCRemAccessErr || !untouched {
		t.Errorf("D's READ through C with A's window rkey 0x%x: %s (buffer untouched %v), want %v", rkey, describe([]ibv.WorkCompletion{wc}), untouched, ibv.WCRemAccessErr)
	}
	if !bytes.Equal(p.win.Bytes(), memBefore) {
		t.Errorf("D's refused access changed A's memory")
	}
	wc = access(t, p.b, ibv.OpRead, rkey, addr, winLen)
	if wc.Status != ibv.WCSuccess || !bytes.Equal(p.b.mr.Bytes()[bLocal:bLocal+winLen], p.win.Bytes()[winOff:winOff+winLen]) {
		t.Errorf("B's READ after D's refusal: %s", describe([]ibv.WorkCompletion{wc}))
	}
}

// The gateway's cycle: bind, use, invalidate, bind the same window over
// another span with the next rkey. The second round is posted as one
// batch, LOCAL_INV and BIND_MW unsignaled and unfenced, then a signaled
// SEND that tells B the rkey: its completion settles the bind. The old
// rkey is refused.
func TestGuestMWRebind(t *testing.T) {
	d := requireMW(t)
	p := newMWPair(t, d, winAccess)
	mem := p.win.Bytes()
	fill(mem, 0x51)
	k1, addr1 := p.bind(t, winOff, 4096, ibv.AccessRemoteRead)
	if wc := access(t, p.b, ibv.OpRead, k1, addr1, 4096); wc.Status != ibv.WCSuccess || !bytes.Equal(p.b.mr.Bytes()[bLocal:bLocal+4096], mem[winOff:winOff+4096]) {
		t.Fatalf("READ with the first rkey 0x%x: %s", k1, describe([]ibv.WorkCompletion{wc}))
	}

	const off2 = 16 << 10
	k2 := p.mw.NextRKey()
	if k2>>8 != k1>>8 || k2 == k1 {
		t.Fatalf("next rkey 0x%x after 0x%x: want the same index, another key", k2, k1)
	}
	bind2 := ibv.SendWR{ID: bindID, Op: ibv.OpBindMW,
		Bind: ibv.MWBind{MW: p.mw, RKey: k2, MR: p.winMR, Addr: p.winMR.Addr() + off2, Length: 4096, Access: ibv.AccessRemoteRead}}
	const note = 8 // A's SEND of the rkey, from A's own MR
	send(t, p.a.qp,
		ibv.SendWR{ID: invID, Op: ibv.OpLocalInv, Imm: k1},
		bind2,
		ibv.SendWR{ID: 502, Op: ibv.OpSend, Flags: ibv.SendSignaled, SGEs: []ibv.SGE{mustSGE(p.a.mr, 60<<10, note)}},
	)
	// A second bind while this one is pending is refused before the device sees it.
	if n, err := p.a.qp.PostSend([]ibv.SendWR{bind2}); n != 0 || err == nil || !contains(err.Error(), "pending") {
		t.Errorf("a second bind while one is pending: posted %d, %v; want 0 and a pending error", n, err)
	}
	sendWC := waitID(t, p.a.cq, 502)
	check(t, p.mw.BindCompleted(sendWC.Status))
	if sendWC.Status != ibv.WCSuccess || p.mw.RKey() != k2 {
		t.Fatalf("SEND after the unsignaled LOCAL_INV and BIND_MW: %s; window rkey 0x%x, want 0x%x", describe([]ibv.WorkCompletion{sendWC}), p.mw.RKey(), k2)
	}
	if rc := waitOK(t, p.b.cq, 1); rc[0].Opcode != ibv.WCRecv {
		t.Fatalf("B's receive: %s", describe(rc))
	}

	wc := access(t, p.b, ibv.OpRead, k2, p.winMR.Addr()+off2, 4096)
	if wc.Status != ibv.WCSuccess || !bytes.Equal(p.b.mr.Bytes()[bLocal:bLocal+4096], mem[off2:off2+4096]) {
		t.Fatalf("READ with the second rkey 0x%x: %s", k2, describe([]ibv.WorkCompletion{wc}))
	}
	wc = access(t, p.b, ibv.OpRead, k1, addr1, 64)
	if wc.Status != ibv.WCRemAccessErr || !onlyFF(p.b.mr.Bytes()[bLocal:bLocal+64]) {
		t.Errorf("READ with the old rkey 0x%x after the rebind: %s, want %v and no byte", k1, describe([]ibv.WorkCompletion{wc}), ibv.WCRemAccessErr)
	}
}

// Binds the device refuses complete with an error at A (rxe: MW_BIND_ERR),
// and the window keeps its rkey.
func TestGuestMWBindRefused(t *testing.T) {
	d := requireMW(t)
	for _, tc := range []struct {
		name     string
		mrAccess ibv.Access
		acc      ibv.Access
		off, n   int
		bound    bool // bind once first, and do not invalidate
	}{
		{"a bound window (no LOCAL_INV before the second bind)", winAccess, ibv.AccessRemoteRead, winOff, winLen, true},
		{"an MR without MW_BIND", ibv.AccessLocalWrite | ibv.AccessRemoteRead, ibv.AccessRemoteRead, winOff, winLen, false},
		{"a span past the MR's end", winAccess, ibv.AccessRemoteRead, winSize - 4096, 8192, false},
		{"a writable window over an MR without local write", ibv.AccessMWBind, ibv.AccessRemoteWrite, winOff, winLen, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newMWPair(t, d, tc.mrAccess)
			if tc.bound {
				p.bind(t, winOff, winLen, ibv.AccessRemoteRead)
			}
			old := p.mw.RKey()
			rkey, wc := p.postBind(t, p.winMR, tc.off, tc.n, tc.acc)
			if wc.Status == ibv.WCSuccess || (d.Kind == "rxe" && wc.Status != ibv.WCMWBindErr) {
				t.Errorf("bind with rkey 0x%x: %s, want %v", rkey, describe([]ibv.WorkCompletion{wc}), ibv.WCMWBindErr)
			}
			if p.mw.RKey() != old {
				t.Errorf("after the refused bind the window's rkey is 0x%x, want the old 0x%x", p.mw.RKey(), old)
			}
			if a, err := p.a.qp.Query(); err == nil {
				t.Logf("refused bind: %v; A's QP %v", wc.Status, a.State)
			}
		})
	}
}
