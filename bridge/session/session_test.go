package session_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/leg/legtest"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// A session between a userspace endpoint on a simulated RoCE network
// (lossy, duplicating, reordering as asked) and the fake far leg. The
// client is a plain transport QP on the same network: an application on
// the RoCE side that reaches the far side only through the session.
type rig struct {
	t          *testing.T
	net        *simnet.Net
	pool       *pool.Pool
	far        *fakeLeg
	near       *leg.UserspaceEndpoint
	sess       *session.Session
	client     *transport.QP
	cmem       []byte
	cmr        *transport.MR
	scq        *transport.CQ
	rcq        *transport.CQ
	clients    *transport.Device
	lender     *lendingConn     // with rigOpts.lend
	drainer    *drainingLeg     // with rigOpts.drains: the far leg as the session has it
	exposer    *exposingLeg     // with rigOpts.exposes: the far leg as the session has it
	farSess    *session.Session // with rigOpts.tunnel: the far gateway's session
	stopTunnel func()
}

type rigOpts struct {
	net      simnet.Options
	delay    time.Duration
	failAt   int // the op (1-based) whose WRITE the far side fails
	failAs   transport.Status
	poolSize int
	lend     bool // the gateway's conn lends pool frames (lendingConn)
	drains   bool // the far leg is drained when its connection ends (as a verbs leg)
	maxSGE   int  // the far leg's Limits.MaxSGE
	// tunnel puts a QUIC tunnel between the session and the far leg: the
	// session's far endpoint is a QUIC endpoint whose peer's session
	// relays to the far leg, as two gateways do.
	tunnel bool
	// farMem and clientMem size the far leg's and the client's memory
	// (default 4 and 8 MiB); clientPSN is the client's first PSN.
	farMem, clientMem int
	clientPSN         uint32
	classes           []int // the pool's (default 256, 4 KiB, 64 KiB)
	farChunk          int   // with tunnel: the far gateway's session's MaxChunk
	slowFailure       time.Duration
	// protocol is the session's (the near one's, with tunnel).
	protocol session.Protocol
	// clientAccess is the remote access the client's memory grants (the
	// far peer's own READs and WRITEs of it: request), beyond local.
	clientAccess transport.Access
	// exposes makes the far leg an Exposer: its peer reaches the
	// gateway's memory, as a verbs leg's does (the session stages).
	exposes bool
	// liveness is the session's (Options.Liveness).
	liveness time.Duration
	// clientTimeout is the client's ACK timeout exponent (default 17:
	// 0.5 s).
	clientTimeout uint8
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	if o.poolSize == 0 {
		o.poolSize = 32 << 20
	}
	goroutines := runtime.NumGoroutine()
	r := &rig{t: t, net: simnet.New(o.net)}
	var err error
	if o.classes == nil {
		o.classes = []int{256, 4 << 10, 64 << 10}
	}
	if o.farMem == 0 {
		o.farMem = 4 << 20
	}
	if o.clientMem == 0 {
		o.clientMem = 8 << 20
	}
	if o.clientPSN == 0 {
		o.clientPSN = 0x777
	}
	// A rig that stages keeps a reserve for it, as a gateway that stages
	// does (bridge.StagingPoolReserve).
	reserve := 0.0
	if o.exposes {
		reserve = 0.125
	}
	r.pool, err = pool.New(pool.Options{Size: o.poolSize, Classes: o.classes, Reserve: reserve})
	if err != nil {
		t.Fatal(err)
	}
	r.far = newFakeLeg(uint64(o.failAt)+1, o.farMem, o.delay)
	r.far.lim.MaxSGE, r.far.slowFailure = o.maxSGE, o.slowFailure
	if o.failAt > 0 {
		r.far.failOn, r.far.failAs = r.far.base+uint64(o.failAt-1)*4096, o.failAs
	}

	gwAddr, clAddr := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	gc, err := r.net.Listen(gwAddr)
	if err != nil {
		t.Fatal(err)
	}
	var gconn roce.PacketConn = gc
	var frames *pool.Frames
	if o.lend {
		if r.lender, err = newLendingConn(gc, r.pool); err != nil {
			t.Fatal(err)
		}
		gconn, frames = r.lender, r.lender.frames
	}
	gw, err := transport.NewDevice(gconn, transport.DeviceOptions{Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := r.net.Listen(clAddr)
	if err != nil {
		t.Fatal(err)
	}
	r.clients, err = transport.NewDevice(cc, transport.DeviceOptions{Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	gpd := transport.NewPD()
	pmr, err := gpd.RegisterMR(r.pool.Arena(), transport.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	r.near, err = leg.NewUserspaceEndpoint(leg.UserspaceOptions{Device: gw, PD: gpd, MR: pmr, Frames: frames})
	if err != nil {
		t.Fatal(err)
	}
	cpd := transport.NewPD()
	r.cmem = make([]byte, o.clientMem)
	if r.cmr, err = cpd.RegisterMR(r.cmem, transport.AccessLocalWrite|o.clientAccess); err != nil {
		t.Fatal(err)
	}
	r.scq, r.rcq = transport.NewCQ(4096), transport.NewCQ(4096)
	if r.client, err = r.clients.CreateQP(cpd, transport.QPInitAttr{Type: transport.RC, SendCQ: r.scq, RecvCQ: r.rcq}); err != nil {
		t.Fatal(err)
	}
	nq := r.near.QP()
	if o.clientTimeout == 0 {
		o.clientTimeout = 17
	}
	for _, p := range []struct {
		qp      *transport.QP
		peer    *transport.QP
		remote  netip.AddrPort
		sq, rq  uint32
		timeout uint8
	}{{nq, r.client, clAddr, 0xffff00, o.clientPSN, 17}, {r.client, nq, gwAddr, o.clientPSN, 0xffff00, o.clientTimeout}} {
		for _, a := range []transport.QPAttr{{State: transport.StateInit},
			{State: transport.StateRTR, DestQPN: p.peer.QPN(), Remote: p.remote, RQPSN: p.rq, PathMTU: 1024, MinRNRTimer: 1, MaxDestRdAtomic: 16},
			// Timeout 17 (0.5 s, seven retries): the gateway answers only once
			// the far side completed, so a slow far side (a loaded host, the
			// guest under TCG, a tunnel) must not run the client out of
			// retries before the answer comes.
			{State: transport.StateRTS, SQPSN: p.sq, Timeout: p.timeout, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16}} {
			if err := p.qp.Modify(a); err != nil {
				t.Fatal(err)
			}
		}
	}
	var far session.Endpoint = r.far
	if o.exposes {
		r.exposer = &exposingLeg{fakeLeg: r.far}
		far = r.exposer
	}
	if o.drains {
		r.drainer = &drainingLeg{fakeLeg: r.far, drained: make(chan struct{})}
		far = r.drainer
	}
	if o.tunnel {
		qa, qb, stop := legtest.QUICPair(t, r.pool)
		r.stopTunnel = stop
		r.farSess, err = session.New(session.Options{A: qb, B: far, Pool: r.pool, MaxChunk: o.farChunk, Logger: testlog.New(t)})
		if err != nil {
			t.Fatal(err)
		}
		far = qa
	}
	r.sess, err = session.New(session.Options{A: r.near, B: far, Pool: r.pool, Logger: testlog.New(t), Protocol: o.protocol, Liveness: o.liveness})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = r.sess.Close()
		if r.farSess != nil {
			_ = r.farSess.Close()
			r.stopTunnel()
		}
		r.clients.Close()
		gw.Close()
		// Every buffer is back in the pool (Close refuses otherwise), and
		// every goroutine ended.
		waitUntil(t, "every pool buffer released", func() bool { return r.pool.Close() == nil })
		waitUntil(t, "the session's goroutines ended", func() bool { return runtime.NumGoroutine() <= goroutines })
	})
	return r
}

// receives waits (20 s at most) for n completions on the client's receive
// CQ; what names them when they do not come.
func (r *rig) receives(n int, what string) []transport.WC {
	r.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make([]transport.WC, 0, n)
	wcs := make([]transport.WC, 64)
	for len(got) < n {
		k, err := r.rcq.PollWait(ctx, wcs)
		if err != nil {
			r.t.Fatalf("%d of %d %s: %v", len(got), n, what, err)
		}
		got = append(got, wcs[:k]...)
	}
	return got
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5 s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// clientOp is one operation the client posted, and what it expects.
type clientOp struct {
	wr   transport.SendWR
	data []byte // SEND/WRITE: the bytes sent
	want []byte // READ: the far bytes
}

const (
	readArea  = 0       // far memory the client reads (a pattern)
	writeArea = 1 << 20 // far memory the client writes, a region per op
	counterVA = 3 << 20 // the far counter the atomics add to
	casVA     = counterVA + 8
)

// workload posts n random operations of every kind, window at a time,
// and checks every completion and the far side's record of them.
func (r *rig) workload(n, window int, seed uint64) {
	t := r.t
	rng := rand.New(rand.NewPCG(seed, 1))
	far := r.far
	for i := range 1 << 20 {
		far.mem[readArea+i] = byte(i*7 + i>>9)
	}
	binary.LittleEndian.PutUint64(far.mem[counterVA:], 0)
	var ops []clientOp
	off := 0 // where in client memory the next op's bytes go
	adds := 0
	for i := range n {
		var o clientOp
		size := []int{0, 1, 100, 1024, 3000, 4096, 20000, 70000, 150000}[rng.IntN(9)]
		o.wr = transport.SendWR{ID: uint64(i), Signaled: true}
		kind := rng.IntN(8)
		switch kind {
		case 0, 1, 2: // SEND family
			o.wr.Opcode = []transport.Opcode{transport.OpSend, transport.OpSendWithImm, transport.OpSendWithInv}[kind]
			o.wr.Imm, o.wr.InvRKey = uint32(i)*3, uint32(i)*5
			size = max(size, 8) % 70000
			if size < 8 {
				size = 8
			}
		case 3, 4:
			o.wr.Opcode = []transport.Opcode{transport.OpWrite, transport.OpWriteWithImm}[kind-3]
			o.wr.Imm = uint32(i) * 11
			o.wr.Remote, o.wr.RKey = far.base+writeArea+uint64(i%8)*(160<<10), far.rkey
			if size == 0 && o.wr.Opcode == transport.OpWriteWithImm {
				size = 1
			}
		case 5:
			o.wr.Opcode = transport.OpRead
			size = min(size, 64<<10)
			ro := rng.IntN(1<<20 - size)
			o.wr.Remote, o.wr.RKey = far.base+readArea+uint64(ro), far.rkey
			o.want = far.mem[readArea+ro : readArea+ro+size]
		case 6:
			o.wr.Opcode, o.wr.SwapAdd = transport.OpFetchAdd, 1
			o.wr.Remote, o.wr.RKey = far.base+counterVA, far.rkey
			size = 8
			adds++
		case 7:
			o.wr.Opcode, o.wr.Compare, o.wr.SwapAdd = transport.OpCompareSwap, 0, uint64(i)
			o.wr.Remote, o.wr.RKey = far.base+casVA, far.rkey
			size = 8
		}
		if off+size > len(r.cmem) {
			off = 0
		}
		o.wr.Local = transport.SGE{MR: r.cmr, Offset: off, Length: size}
		if o.wr.Opcode != transport.OpRead && kind < 6 {
			for j := range size {
				r.cmem[off+j] = byte(rng.Uint32())
			}
			if size >= 8 {
				binary.LittleEndian.PutUint64(r.cmem[off:], uint64(i)) // the op's name
			}
			o.data = append([]byte(nil), r.cmem[off:off+size]...)
		}
		off += (size + 63) &^ 63
		ops = append(ops, o)
	}
	// Post window at a time; complete in order.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wcs := make([]transport.WC, 64)
	var got []transport.WC
	next := 0
	for len(got) < n {
		for next < n && next-len(got) < window {
			// Local memory is reused across the run: post only ops whose
			// buffers are not in use (the window is much smaller than
			// the client's memory).
			if err := r.client.PostSend(ops[next].wr); err != nil {
				t.Fatal(err)
			}
			next++
		}
		k, err := r.scq.PollWait(ctx, wcs)
		if err != nil {
			t.Fatalf("after %d of %d completions: %v (session: %v)", len(got), n, err, r.sess.Err())
		}
		got = append(got, wcs[:k]...)
	}
	// Every op completed once, in order, with success.
	for i, wc := range got {
		if wc.ID != uint64(i) || wc.Status != transport.StatusSuccess {
			t.Fatalf("completion %d: %+v (%v), want op %d success", i, wc, wc.Status, i)
		}
	}
	// The far side executed every op once, in the order posted, with the
	// client's bytes, remote addresses, immediates and invalidated rkeys.
	// A WRITE may cross as several chunks: join them back. A READ whose
	// responses were lost is served again (executed again on the far
	// side, as IBTA lets a responder): leave those repeats out.
	var served []farExec
	isRepeat := func(e farExec) bool {
		for _, s := range served {
			if e.op == transport.OpRead && e.remote >= s.remote && e.remote+uint64(e.n) <= s.remote+uint64(s.n) {
				return true
			}
		}
		return false
	}
	var ex []farExec
	raw := far.executed()
	repeats := 0
	for i := 0; i < len(raw); i++ {
		e := raw[i]
		if e.op == transport.OpRead {
			if len(ex) < len(ops) && ops[len(ex)].wr.Opcode == transport.OpRead && ops[len(ex)].wr.Remote == e.remote {
				served = append(served, e)
			} else if isRepeat(e) {
				repeats++
				continue
			}
		}
		if e.op == transport.OpWrite && len(ex) < len(ops) {
			want := len(ops[len(ex)].data)
			for len(e.data) < want && i+1 < len(raw) {
				nx := raw[i+1]
				if isRepeat(nx) {
					i++
					repeats++
					continue
				}
				if nx.remote != e.remote+uint64(len(e.data)) || (nx.op != transport.OpWrite && nx.op != transport.OpWriteWithImm) {
					break
				}
				i++
				e.data = append(e.data, nx.data...)
				e.op, e.imm = nx.op, nx.imm
				if e.op == transport.OpWriteWithImm {
					break
				}
			}
		}
		ex = append(ex, e)
	}
	if len(ex) != n {
		for i := range min(len(ex), len(ops)) {
			if ex[i].op != ops[i].wr.Opcode || ex[i].remote != ops[i].wr.Remote {
				t.Logf("first difference at %d: far %v %#x len %d, client %v %#x len %d", i, ex[i].op, ex[i].remote, len(ex[i].data), ops[i].wr.Opcode, ops[i].wr.Remote, len(ops[i].data))
				break
			}
		}
		t.Fatalf("the far side executed %d ops (and %d READs again), want %d", len(ex), repeats, n)
	}
	r.t.Logf("%d READs served again", repeats)
	var wantOrig uint64
	for i, o := range ops {
		e := ex[i]
		wr := o.wr
		if e.op != wr.Opcode || e.status != transport.StatusSuccess {
			t.Fatalf("far op %d: %v (%v), want %v", i, e.op, e.status, wr.Opcode)
		}
		switch wr.Opcode {
		case transport.OpSend, transport.OpSendWithImm, transport.OpSendWithInv, transport.OpWrite, transport.OpWriteWithImm:
			if !bytes.Equal(e.data, o.data) {
				t.Fatalf("far op %d (%v): %d bytes arrived, not the %d sent", i, wr.Opcode, len(e.data), len(o.data))
			}
		}
		switch wr.Opcode {
		case transport.OpSendWithImm, transport.OpWriteWithImm:
			if e.imm != wr.Imm {
				t.Fatalf("far op %d: immediate %#x, want %#x", i, e.imm, wr.Imm)
			}
		case transport.OpSendWithInv:
			if e.inv != wr.InvRKey {
				t.Fatalf("far op %d: invalidated rkey %#x, want %#x", i, e.inv, wr.InvRKey)
			}
		case transport.OpRead:
			got := r.cmem[wr.Local.Offset : wr.Local.Offset+wr.Local.Length]
			if !bytes.Equal(got, o.want) {
				t.Fatalf("READ %d of %d bytes: the client got other bytes than the far memory's", i, len(o.want))
			}
		case transport.OpFetchAdd:
			// Executed once each, in order: the counter's values in turn.
			if e.orig != wantOrig {
				t.Fatalf("FETCH_ADD %d saw %d, want %d (an atomic executed twice or out of order)", i, e.orig, wantOrig)
			}
			if v := binary.LittleEndian.Uint64(r.cmem[wr.Local.Offset:]); v != wantOrig {
				t.Fatalf("FETCH_ADD %d returned %d to the client, want %d", i, v, wantOrig)
			}
			wantOrig++
		}
		if e.remote != wr.Remote && wr.Opcode != transport.OpSend && wr.Opcode != transport.OpSendWithImm && wr.Opcode != transport.OpSendWithInv {
			t.Fatalf("far op %d: remote %#x, want %#x (one-sided ops pass through)", i, e.remote, wr.Remote)
		}
	}
	if c := binary.LittleEndian.Uint64(far.mem[counterVA:]); c != uint64(adds) {
		t.Fatalf("the far counter is %d after %d FETCH_ADDs", c, adds)
	}
}

func TestSessionRelaysEveryKind(t *testing.T) {
	for _, tc := range []struct {
		name string
		net  simnet.Options
	}{
		{"lossless", simnet.Options{}},
		{"loss1", simnet.Options{Loss: 0.01, Seed: 1}},
		{"loss5", simnet.Options{Loss: 0.05, Seed: 2}},
		{"dup-reorder", simnet.Options{Duplicate: 0.03, Reorder: 0.03, Seed: 3}},
		{"tunnel", simnet.Options{}},
		{"tunnel-loss1", simnet.Options{Loss: 0.01, Seed: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, rigOpts{net: tc.net, delay: 200 * time.Microsecond, tunnel: strings.HasPrefix(tc.name, "tunnel")})
			r.workload(300, 16, 9)
			st := r.net.Stats()
			if tc.net.Loss > 0 && st.Lost.Load() == 0 || tc.net.Duplicate > 0 && st.Duplicated.Load() == 0 ||
				tc.net.Reorder > 0 && st.Reordered.Load() == 0 {
				t.Errorf("the impairment did not happen (lost %d, duplicated %d, reordered %d): the test proved nothing",
					st.Lost.Load(), st.Duplicated.Load(), st.Reordered.Load())
			}
			t.Logf("net: sent %d lost %d dup %d reordered %d; session copied %d bytes in, %d ops",
				st.Sent.Load(), st.Lost.Load(), st.Duplicated.Load(), st.Reordered.Load(),
				r.sess.Stats().Copied[0].Load(), r.sess.Stats().Snapshot().TotalOps(0))
		})
	}
}

// A far failure reaches the requester as an error completion, never as a
// success: the op the far side failed, and everything after it.
func TestSessionFarFailureIsNeverAcknowledged(t *testing.T) {
	for _, tc := range []struct {
		failAs, want transport.Status
	}{
		{transport.StatusRemAccessErr, transport.StatusRemAccessErr},
		{transport.StatusRemOpErr, transport.StatusRemOpErr},
		{transport.StatusLocProtErr, transport.StatusRemAccessErr},
		{transport.StatusRetryExcErr, transport.StatusRemOpErr},
	} {
		for _, c := range []struct {
			failAt int // a WRITE
			tunnel bool
			// slow: the far side refuses posts for a while before the
			// failed op completes; what it refused must not overtake it.
			slow bool
		}{{1, false, false}, {7, false, false}, {22, false, false}, {1, true, false}, {22, true, false}, {1, false, true}, {1, true, true}} {
			failAt := c.failAt
			name := fmt.Sprintf("%v/%d", tc.failAs, failAt)
			if c.tunnel {
				name += "/tunnel"
			}
			o := rigOpts{delay: 300 * time.Microsecond, failAt: failAt, failAs: tc.failAs, tunnel: c.tunnel}
			if c.slow {
				name += "/slow"
				o.slowFailure = 100 * time.Millisecond
			}
			t.Run(name, func(t *testing.T) {
				r := newRig(t, o)
				const n = 40
				for i := range n {
					wr := transport.SendWR{ID: uint64(i), Opcode: transport.OpWrite, Signaled: true, RKey: r.far.rkey,
						Remote: r.far.base + uint64(i)*4096, Local: transport.SGE{MR: r.cmr, Offset: i * 4096, Length: 2000}}
					binary.LittleEndian.PutUint64(r.cmem[i*4096:], uint64(i)) // a SEND's name
					if i%3 == 1 {
						wr.Opcode, wr.Local.Length = transport.OpSend, 64
					}
					if err := r.client.PostSend(wr); err != nil {
						t.Fatal(err)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				wcs := make([]transport.WC, n)
				var got []transport.WC
				for len(got) < n {
					k, err := r.scq.PollWait(ctx, wcs)
					if err != nil {
						t.Fatalf("%d of %d completions: %v", len(got), n, err)
					}
					got = append(got, wcs[:k]...)
				}
				// The checker: a success at the client means the far side
				// executed that op with success.
				farOK := map[uint64]bool{} // by remote address (WRITEs) or the SEND's name
				for _, e := range r.far.executed() {
					if e.status != transport.StatusSuccess {
						continue
					}
					if e.op == transport.OpSend {
						farOK[binary.LittleEndian.Uint64(e.data)] = true
					} else {
						farOK[(e.remote-r.far.base)/4096] = true
					}
				}
				for i, wc := range got {
					if wc.ID != uint64(i) {
						t.Fatalf("completion %d is op %d", i, wc.ID)
					}
					if wc.Status == transport.StatusSuccess && !farOK[uint64(i)] {
						t.Fatalf("op %d completed with success at the client, but the far side never executed it", i)
					}
					switch {
					case i < failAt-1:
						if wc.Status != transport.StatusSuccess {
							t.Fatalf("op %d before the failure: client %v", i, wc.Status)
						}
					case i == failAt-1:
						if wc.Status != tc.want {
							t.Fatalf("the failed op completed %v at the client, want %v", wc.Status, tc.want)
						}
					default:
						if wc.Status == transport.StatusSuccess {
							t.Fatalf("op %d after the far failure completed with success", i)
						}
					}
				}
				select {
				case <-r.sess.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("the session did not end after the far failure")
				}
				if r.sess.Stats().Failed[0].Load() == 0 {
					t.Error("no far failure counted")
				}
			})
		}
	}
}

// SENDs from the far peer reach the client, in order, with their
// immediates and invalidated rkeys, and the far side learns each was
// delivered only once the client acknowledged it.
func TestSessionRelaysFarSends(t *testing.T) {
	r := newRig(t, rigOpts{net: simnet.Options{Loss: 0.02, Seed: 5}})
	const n = 50
	for i := range n {
		if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: i * 8192, Length: 8192}}); err != nil {
			t.Fatal(err)
		}
	}
	copied := 0
	for i := range n {
		msg := bytes.Repeat([]byte{byte(i)}, 100+i*97)
		// Every third SEND arrives as a verbs receive lands, in a pool
		// buffer: it is relayed from there.
		var pl *pool.Pool
		if i%3 == 0 {
			pl = r.pool
		} else {
			copied += len(msg)
		}
		op, arg := transport.OpSend, uint32(i)
		switch {
		case i%5 == 4: // SEND_WITH_INV: the client sees the key invalidated
			op, arg = transport.OpSendWithInv, 0x5000+uint32(i)
		case i%2 == 0:
			op = transport.OpSendWithImm
		}
		if reply := r.far.sendOp(pl, msg, op, arg); reply.Result != transport.Pending {
			t.Fatalf("far SEND %d: reply %v", i, reply.Result)
		}
	}
	got := r.receives(n, "receives")
	for i, wc := range got {
		want := bytes.Repeat([]byte{byte(i)}, 100+i*97)
		if wc.ID != uint64(i) || wc.Status != transport.StatusSuccess || wc.ByteLen != len(want) ||
			!bytes.Equal(r.cmem[i*8192:i*8192+wc.ByteLen], want) || wc.HasImm != (i%2 == 0 && i%5 != 4) || wc.HasImm && wc.Imm != uint32(i) ||
			wc.HasInv != (i%5 == 4) || wc.HasInv && wc.InvRKey != 0x5000+uint32(i) {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
	waitUntil(t, "the far side told of every delivery", func() bool {
		r.far.mu.Lock()
		defer r.far.mu.Unlock()
		return len(r.far.inDone) == n
	})
	for i, s := range r.far.inDone {
		if s != transport.StatusSuccess {
			t.Fatalf("far SEND %d completed %v", i, s)
		}
	}
	if got := r.sess.Stats().Copied[1].Load(); got != uint64(copied) {
		t.Errorf("%d payload bytes copied, want %d: only the SENDs not in pool buffers", got, copied)
	}
}

// drainingLeg is the fake far leg as the session sees a verbs endpoint:
// what it received was acknowledged already, so when its connection ends
// the session relays it before ending.
type drainingLeg struct {
	*fakeLeg
	drained chan struct{}
}

func (d *drainingLeg) Drained() <-chan struct{} { return d.drained }

// TestSessionDeliversWhatAPeerSentBeforeItDisconnected: a far peer whose
// SENDs its HCA acknowledged, and which then disconnects at once, loses
// none of them: the session relays every one to the client (over a lossy
// network, so they are still in flight at the disconnect) and only then
// ends, as a disconnect. Without the drain, 16 of the 40 arrive.
func TestSessionDeliversWhatAPeerSentBeforeItDisconnected(t *testing.T) {
	r := newRig(t, rigOpts{net: simnet.Options{Loss: 0.05, Seed: 8}, drains: true})
	const n = 40
	for i := range n {
		if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: i * 8192, Length: 8192}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range n {
		if reply := r.far.send(r.pool, bytes.Repeat([]byte{byte(i)}, 1000+i*100), uint32(i), false); reply.Result != transport.Pending {
			t.Fatalf("far SEND %d: reply %v", i, reply.Result)
		}
	}
	// The peer disconnects; its receive queue flushed, nothing more comes.
	close(r.drainer.drained)
	r.far.handler().Failed(fmt.Errorf("the far QP: %w", session.ErrPeerDisconnected))
	got := r.receives(n, "SENDs sent before the disconnect reached the client")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, wc := range got {
		if wc.ID != uint64(i) || wc.Status != transport.StatusSuccess || wc.ByteLen != 1000+i*100 || r.cmem[i*8192] != byte(i) {
			t.Fatalf("receive %d: %+v", i, wc)
		}
	}
	select {
	case <-r.sess.Done():
	case <-ctx.Done():
		t.Fatal("the session did not end after relaying what the disconnected peer sent")
	}
	if err := r.sess.Err(); !errors.Is(err, session.ErrPeerDisconnected) {
		t.Errorf("the session ended with %v, want the peer's disconnect", err)
	}
	if r.net.Stats().Lost.Load() == 0 {
		t.Error("the network lost nothing: the SENDs were never in flight at the disconnect, the test proved nothing")
	}
}

// TestSessionFlushedAfterPeerLeft: an op flushed on the far endpoint after
// its peer released the connection (a DREQ, which releases the connection
// before the QP's work is flushed) ends the session as that peer's
// disconnect, not as a failure of the far side: the initiator that
// disconnected while a response of its target was on its way.
func TestSessionFlushedAfterPeerLeft(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.far.mu.Lock()
	r.far.left = true
	r.far.mu.Unlock()
	if err := r.client.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Length: 64}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived its far peer's disconnect by 10 s")
	}
	if err := r.sess.Err(); !errors.Is(err, session.ErrPeerDisconnected) {
		t.Errorf("the session ended with %v, want the far peer's disconnect", err)
	}
}
