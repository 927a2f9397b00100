package session_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/nvme"
	"github.com/rbridge/rbridge/ulp/nvme/nvmetest"
)

// stagedClasses are a staging rig's pool classes: regions up to 256 KiB.
var stagedClasses = []int{256, 4 << 10, 64 << 10, 256 << 10}

// stagedCommand is a command the host sends on a staged queue.
type stagedCommand struct {
	capsule []byte
	dir     nvme.Direction
	keyed   []nvme.SGLFields
	// answer is the status the gateway answers it with in the
	// controller's place (0: the controller completes it).
	answer nvme.Status
}

// stagedData is the pattern of command cid's bytes at host address a.
func stagedData(cid uint16, a uint64, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(cid)*31 + (int(a)+i)*11)
	}
	return b
}

// serveStaged plays the controller behind a verbs leg for the n-th
// capsule it received: its descriptors must name staging the gateway
// exposed (never the host's memory), with the invalidate subtype
// cleared; it READs a write's data through them (and checks it is the
// host's), WRITEs a read's, sends its completion, and returns the keys
// it used.
func serveStaged(t *testing.T, r *nvmeRig, n int, hostKey uint32) []usedKey {
	t.Helper()
	e := r.far.nthSend(t, n, fmt.Sprintf("capsule %d at the controller", n))
	c, err := nvme.ParseCapsule(e.data)
	if err != nil {
		t.Fatalf("capsule %d reached the controller unparsable: %v", n, err)
	}
	cmd := c.Command()
	var used []usedKey
	for _, d := range c.Keyed().All() {
		if d.Invalidate() {
			t.Errorf("command %d reached the controller asking it to invalidate key %#x: a gateway key", cmd.CommandID(), d.Key())
		}
		if d.Length() == 0 {
			continue
		}
		if d.Key() == hostKey {
			t.Fatalf("command %d reached the controller naming the host's memory (key %#x): not staged", cmd.CommandID(), d.Key())
		}
		used = append(used, usedKey{d.Fields(), cmd.Direction() == nvme.DirControllerToHost})
		if cmd.Direction() == nvme.DirControllerToHost {
			// What the host's matching descriptor will hold: known by
			// position in the test's layout, so written as a pattern the
			// test derives from the command ID and the region's length.
			if _, st := r.exposer.access(d.Address(), d.Key(), int(d.Length()), stagedData(cmd.CommandID(), uint64(d.Length()), int(d.Length()))); st != transport.StatusSuccess {
				t.Fatalf("the controller's WRITE of command %d's %d bytes to staging: %v", cmd.CommandID(), d.Length(), st)
			}
			continue
		}
		got, st := r.exposer.access(d.Address(), d.Key(), int(d.Length()), nil)
		if st != transport.StatusSuccess {
			t.Fatalf("the controller's READ of command %d's %d bytes from staging: %v", cmd.CommandID(), d.Length(), st)
		}
		if !bytes.Equal(got, stagedData(cmd.CommandID(), uint64(d.Length()), int(d.Length()))) {
			t.Fatalf("the controller READ command %d's %d bytes from staging: not the host's", cmd.CommandID(), d.Length())
		}
	}
	if reply := r.far.send(r.pool, nvmetest.Completion(cmd.CommandID(), nvme.StatusSuccess), 0, false); reply.Result != transport.Pending {
		t.Fatalf("command %d's completion: reply %v", cmd.CommandID(), reply.Result)
	}
	return used
}

// usedKey is a staging descriptor the controller used, and whether it
// WROTE through it.
type usedKey struct {
	nvme.SGLFields
	write bool
}

// TestSessionNVMeStaged: four I/O queues at depth 32 over a lossy
// network, each a session whose controller sits behind a verbs leg (an
// Exposer): every keyed descriptor reaches the controller rewritten to
// staging; a write's data was pulled from the host before its capsule
// went on, a read's pushed to the host before its completion; a
// completion of a command whose host asked for remote invalidation
// reaches the host as a SEND with invalidate of the host's key; once a
// command completed, its staging key is refused; and at the end no
// staging buffer or exposure is left.
func TestSessionNVMeStaged(t *testing.T) {
	for q := range 4 {
		t.Run(fmt.Sprintf("queue %d", q+1), func(t *testing.T) {
			t.Parallel()
			r := stagedQueue(t, rigOpts{net: simnet.Options{Loss: 0.01, Seed: uint64(40 + q)}, delay: 100 * time.Microsecond, lend: q%2 == 1, maxSGE: 4,
				classes: stagedClasses, exposes: true}, 32)
			if r.net.Stats().Lost.Load() == 0 {
				t.Error("the network lost nothing: the test proved nothing of loss")
			}
		})
	}
}

func stagedQueue(t *testing.T, o rigOpts, depth int) *nvmeRig {
	o.clientMem = 2<<20 + (depth+1)*(stagedSpan)
	r := newNVMeRig(t, o)
	runStaged(t, r, stagedCommands(r, depth))
	return r
}

// stagedSpan is the host memory each command's data has.
const stagedSpan = 320 << 10

// stagedAt is where command cid's data lies in the host's memory, off
// bytes in: capsules are at 0 (4 KiB each), completions at 1 MiB, data
// from 2 MiB.
func stagedAt(r *nvmeRig, cid uint16, off int) uint64 {
	return r.cmr.Addr() + 2<<20 + uint64(cid)*stagedSpan + uint64(off)
}

// stagedCommands are depth commands of every form, IDs from 1: writes
// and reads of one keyed descriptor (with remote invalidation every
// other), SPDK lists of three (one of them empty), writes with their
// data in the capsule; of 512 bytes to 128 KiB and one past 64 KiB.
func stagedCommands(r *nvmeRig, depth int) []stagedCommand {
	key := r.cmr.RKey()
	at := func(cid uint16, off int) uint64 { return stagedAt(r, cid, off) }
	sizes := []uint32{512, 4096, 12000, 65536, 131072, 65537}
	var cmds []stagedCommand
	for cid := uint16(1); cid <= uint16(depth); cid++ {
		n := sizes[int(cid)%len(sizes)]
		op, dir := nvme.OpWrite, nvme.DirHostToController
		if cid%2 == 0 {
			op, dir = nvme.OpRead, nvme.DirControllerToHost
		}
		var c stagedCommand
		switch cid % 4 {
		case 0, 1: // one keyed descriptor; remote invalidation every other
			st := nvme.SGLAddress
			if cid%4 == 0 {
				st = nvme.SGLInvalidate
			}
			k := nvmetest.Keyed(at(cid, 0), n, key, st)
			c = stagedCommand{capsule: nvmetest.Command(op, cid, k, nil), keyed: []nvme.SGLFields{k}}
		case 2: // an SPDK list of three, with a zero-length one
			ks := []nvme.SGLFields{nvmetest.Keyed(at(cid, 0), 4096, key, nvme.SGLAddress), nvmetest.Keyed(at(cid, 8192), 0, key, nvme.SGLAddress),
				nvmetest.Keyed(at(cid, 16384), n, key, nvme.SGLAddress)}
			var tail []byte
			for i := range ks {
				tail = append(tail, sglBytes(ks[i])...)
			}
			c = stagedCommand{capsule: nvmetest.Command(op, cid, nvme.SGLFields{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Length: uint32(len(tail))}, tail), keyed: ks}
		case 3: // a write with its data in the capsule: nothing to stage
			in := stagedData(cid, 3000, 3000)
			op, dir = nvme.OpWrite, nvme.DirHostToController
			c = stagedCommand{capsule: nvmetest.Command(op, cid, nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: uint32(len(in))}, in)}
		}
		c.dir = dir
		cmds = append(cmds, c)
	}
	return cmds
}

// runStaged sends cmds at once and serves them as a controller behind a
// verbs leg; it checks what the host got back.
func runStaged(t *testing.T, r *nvmeRig, cmds []stagedCommand) {
	t.Helper()
	key := r.cmr.RKey()
	for _, c := range cmds {
		cid := nvme.Command(c.capsule).CommandID()
		for _, k := range c.keyed {
			off := int(k.Address - r.cmr.Addr())
			if c.dir == nvme.DirHostToController {
				copy(r.cmem[off:], stagedData(cid, uint64(k.Length), int(k.Length)))
			} else {
				for i := range k.Length {
					r.cmem[off+int(i)] = 0xff
				}
			}
		}
	}
	for i := range cmds {
		if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: 1<<20 + i*64, Length: 64}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cmds {
		copy(r.cmem[i*4096:], c.capsule)
		if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true,
			Local: transport.SGE{MR: r.cmr, Offset: i * 4096, Length: len(c.capsule)}}); err != nil {
			t.Fatal(err)
		}
	}
	served := 0
	var used []usedKey
	for _, c := range cmds {
		if c.answer == 0 {
			used = append(used, serveStaged(t, r, served, key)...)
			served++
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, wc := range pollWCs(t, ctx, r.scq, len(cmds), "the host's SENDs") {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the host's capsule %d: %v", wc.ID, wc.Status)
		}
	}
	got := map[uint16]transport.WC{}
	status := map[uint16]nvme.Status{}
	for _, wc := range r.receives(len(cmds), "completions") {
		cqe := nvme.Completion(r.cmem[1<<20+int(wc.ID)*64:])
		if wc.Status != transport.StatusSuccess || wc.ByteLen != nvme.CompletionLen {
			t.Fatalf("the host's receive %d: %+v", wc.ID, wc)
		}
		if _, dup := got[cqe.CommandID()]; dup {
			t.Errorf("command %d completed twice at the host", cqe.CommandID())
		}
		got[cqe.CommandID()], status[cqe.CommandID()] = wc, cqe.Status()
	}
	for _, c := range cmds {
		cmd := nvme.Command(c.capsule)
		cid := cmd.CommandID()
		wc, ok := got[cid]
		if !ok {
			t.Errorf("command %d: no completion at the host", cid)
			continue
		}
		if status[cid] != c.answer {
			t.Errorf("command %d completed with %v, want %v", cid, status[cid], c.answer)
		}
		// The gateway's own answer is a plain SEND: a host that asked for
		// remote invalidation invalidates its key itself when a completion
		// does not (the Linux host's nvme_rdma_process_nvme_rsp, SPDK's).
		inv := len(c.keyed) > 0 && c.keyed[0].Subtype == nvme.SGLInvalidate && c.answer == 0
		if inv != wc.HasInv || (inv && wc.InvRKey != key) {
			t.Errorf("command %d's completion: with invalidate %v of %#x, want %v of the host's %#x", cid, wc.HasInv, wc.InvRKey, inv, key)
		}
		if c.dir != nvme.DirControllerToHost || c.answer != 0 {
			continue
		}
		for _, k := range c.keyed {
			off := int(k.Address - r.cmr.Addr())
			if !bytes.Equal(r.cmem[off:off+int(k.Length)], stagedData(cid, uint64(k.Length), int(k.Length))) {

				t.Errorf("command %d: the host's %d bytes at %#x do not hold what the controller wrote to staging", cid, k.Length, k.Address)
			}
		}
	}
	// A completed command's staging is out of the controller's reach.
	for _, u := range used {
		var data []byte
		if u.write {
			data = []byte{0xee}
		}
		if _, st := r.exposer.access(u.Address, u.Key, 1, data); st != transport.StatusRemAccessErr {
			t.Errorf("staging key %#x after its command completed: %v, want a remote access error", u.Key, st)
		}
	}
	waitUntil(t, "staging released", func() bool { return r.sess.Stats().StagingInUse.Load() == 0 })
	if n := r.exposer.live(); n != 0 {
		t.Errorf("%d exposures live after every command completed", n)
	}
	var pulled, pushed uint64
	for _, c := range cmds {
		if c.answer != 0 {
			continue
		}
		for _, k := range c.keyed {
			if c.dir == nvme.DirHostToController {
				pulled += uint64(k.Length)
			} else {
				pushed += uint64(k.Length)
			}
		}
	}
	// The pushes' own completions (their ACKs) may follow the host's
	// receipt of the completion they preceded.
	var ss session.StatsSnapshot
	deadline := time.Now().Add(5 * time.Second)
	for ss = r.sess.Stats().Snapshot(); (ss.Pulled[0] != pulled || ss.Pushed[0] != pushed) && time.Now().Before(deadline); ss = r.sess.Stats().Snapshot() {
		time.Sleep(time.Millisecond)
	}
	if ss.Pulled[0] != pulled || ss.Pushed[0] != pushed {
		t.Errorf("staging pulled %d and pushed %d bytes, want %d and %d", ss.Pulled[0], ss.Pushed[0], pulled, pushed)
	}
	if r.sess.Err() != nil {
		t.Errorf("the session ended: %v", r.sess.Err())
	}
}

// TestSessionNVMeStagedFailures: a command the gateway cannot stage is
// answered in the controller's place, with the NVMe status that says
// why, and never reaches the controller; the queue goes on. Staging that
// waits for the pool waits in order, and delivers.
func TestSessionNVMeStagedFailures(t *testing.T) {
	rigFor := func(t *testing.T, poolSize int) *nvmeRig {
		return newNVMeRig(t, rigOpts{net: simnet.Options{Loss: 0.01, Seed: 61}, delay: 50 * time.Microsecond, classes: stagedClasses,
			exposes: true, poolSize: poolSize, clientMem: 2<<20 + 34*stagedSpan})
	}
	// The I/O queue's Connect comes first: protection information is an
	// I/O command's.
	connect := func() stagedCommand {
		con := make([]byte, nvme.CommandLen+nvme.ConnectDataLen)
		nvme.Connect(con).Encode(&nvme.ConnectFields{Flags: nvme.FlagSGLBuffer, CommandID: 0, QID: 1, SQSize: 31,
			DPTR: nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: nvme.ConnectDataLen}})
		return stagedCommand{capsule: con, dir: nvme.DirHostToController}
	}
	t.Run("the far leg would not expose it", func(t *testing.T) {
		r := rigFor(t, 0)
		r.exposer.failExpose = 12000
		cmds := append([]stagedCommand{connect()}, stagedCommands(r, 16)...)
		refused := 0
		for i := range cmds {
			for _, k := range cmds[i].keyed {
				if k.Length == 12000 {
					cmds[i].answer = nvme.StatusDataXferError
					refused++
					break
				}
			}
		}
		runStaged(t, r, cmds)
		if ss := r.sess.Stats().Snapshot(); ss.StageFailed[0] != uint64(refused) || refused == 0 {
			t.Errorf("%d messages failed staging, want %d", ss.StageFailed[0], refused)
		}
		if got := r.stats.Snapshot(); got.Answered != uint64(refused) || got.Errors[staging.WhyUnstageable] != uint64(refused) {
			t.Errorf("%d answered by the gateway and %d unstageable, want %d", got.Answered, got.Errors[staging.WhyUnstageable], refused)
		}
	})
	t.Run("larger than the largest staging buffer", func(t *testing.T) {
		r := rigFor(t, 0)
		key := r.cmr.RKey()
		k := nvmetest.Keyed(stagedAt(r, 2, 0), 300<<10, key, nvme.SGLAddress)
		cmds := []stagedCommand{connect(),
			{capsule: nvmetest.Command(nvme.OpWrite, 1, nvmetest.Keyed(stagedAt(r, 1, 0), 4096, key, nvme.SGLAddress), nil), dir: nvme.DirHostToController,
				keyed: []nvme.SGLFields{nvmetest.Keyed(stagedAt(r, 1, 0), 4096, key, nvme.SGLAddress)}},
			{capsule: nvmetest.Command(nvme.OpRead, 2, k, nil), dir: nvme.DirControllerToHost, keyed: []nvme.SGLFields{k}, answer: nvme.StatusDataXferError},
		}
		runStaged(t, r, cmds)
	})
	t.Run("protection information", func(t *testing.T) {
		r := rigFor(t, 0)
		key := r.cmr.RKey()
		k := nvmetest.Keyed(stagedAt(r, 1, 0), 4096, key, nvme.SGLAddress)
		pi := nvmetest.Command(nvme.OpWrite, 1, k, nil)
		nvme.Command(pi).SetDWord(12, 0x7|1<<29) // PRINFO: PRCHK guard
		plain := nvmetest.Command(nvme.OpWrite, 2, nvmetest.Keyed(stagedAt(r, 2, 0), 4096, key, nvme.SGLAddress), nil)
		cmds := []stagedCommand{connect(),
			{capsule: pi, dir: nvme.DirHostToController, keyed: []nvme.SGLFields{k}, answer: nvme.StatusInvalidField | nvme.StatusDNR},
			{capsule: plain, dir: nvme.DirHostToController, keyed: []nvme.SGLFields{nvmetest.Keyed(stagedAt(r, 2, 0), 4096, key, nvme.SGLAddress)}},
		}
		runStaged(t, r, cmds)
		if got := r.stats.Snapshot().Errors[staging.WhyProtection]; got != 1 {
			t.Errorf("%d commands with protection information counted, want 1", got)
		}
	})
	t.Run("the pool exhausted", func(t *testing.T) {
		// 4 MiB: a 1 MiB share of 256 KiB buffers, four of them, for 32
		// commands of up to two regions of up to 128 KiB each.
		r := rigFor(t, 4<<20)
		cmds := stagedCommands(r, 32)
		runStaged(t, r, cmds)
		if w := r.sess.Stats().Snapshot().StageWaits[0]; w == 0 {
			t.Error("no region waited for the pool: the test proved nothing of exhaustion")
		}
	})
}

// TestSessionNVMeStagedTeardown: a session that ends while commands are
// staged (their pulls outstanding, others waiting for the pool) revokes
// every exposure and returns every buffer (the rig's cleanup checks the
// pool).
func TestSessionNVMeStagedTeardown(t *testing.T) {
	r := newNVMeRig(t, rigOpts{delay: 2 * time.Millisecond, classes: stagedClasses, exposes: true, poolSize: 4 << 20, clientMem: 2<<20 + 34*stagedSpan})
	cmds := stagedCommands(r, 32)
	for i, c := range cmds {
		copy(r.cmem[i*4096:], c.capsule)
		if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true,
			Local: transport.SGE{MR: r.cmr, Offset: i * 4096, Length: len(c.capsule)}}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "staging under way", func() bool { return r.sess.Stats().StagingInUse.Load() > 0 })
	if err := r.sess.Close(); err != nil {
		t.Fatal(err)
	}
	if n := r.exposer.live(); n != 0 {
		t.Errorf("%d exposures live after the session ended", n)
	}
	if n := r.sess.Stats().StagingInUse.Load(); n != 0 {
		t.Errorf("%d bytes of staging held after the session ended", n)
	}
}

// TestSessionNVMeStagedVerbsHost: the host behind a leg that
// acknowledges its SENDs on arrival (a verbs leg, as in a gateway with
// verbs legs on both sides): the pulls and pushes are the session's
// READs and WRITEs on that leg, and every command completes.
func TestSessionNVMeStagedVerbsHost(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: 16 << 20, Classes: stagedClasses})
	if err != nil {
		t.Fatal(err)
	}
	host := newFakeLeg(1, 4<<20, 50*time.Microsecond)
	host.lim.MaxRdAtomic = 1
	ctl := &exposingLeg{fakeLeg: newFakeLeg(2, 1<<20, 50*time.Microsecond)}
	st := &staging.Stats{}
	p, err := staging.New(staging.Options{Protocol: config.ProtocolNVMe, Route: "storage", Host: 0, Stats: st, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := session.New(session.Options{A: host, B: ctl, Pool: pl, Logger: testlog.New(t), Protocol: p})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = s.Close()
		waitUntil(t, "every pool buffer released", func() bool { return pl.Close() == nil })
	}()
	const n = 8
	for cid := uint16(1); cid <= n; cid++ {
		op, size := nvme.OpWrite, 4096*int(cid)
		if cid%2 == 0 {
			op = nvme.OpRead
		}
		addr := host.base + uint64(cid)*(64<<10)
		if op == nvme.OpWrite {
			copy(host.mem[addr-host.base:], stagedData(cid, uint64(size), size))
		}
		k := nvmetest.Keyed(addr, uint32(size), host.rkey, nvme.SGLAddress)
		if reply := host.sendOp(pl, nvmetest.Command(op, cid, k, nil), transport.OpSend, 0); reply.Result != transport.Pending {
			t.Fatalf("command %d: reply %v", cid, reply.Result)
		}
	}
	var cmds []stagedCommand
	for i := range n {
		// The controller: serveStaged's, on this rig's legs.
		e := ctl.nthSend(t, i, fmt.Sprintf("capsule %d at the controller", i))
		c, err := nvme.ParseCapsule(e.data)
		if err != nil {
			t.Fatal(err)
		}
		cmd := c.Command()
		d := c.Keyed().At(0)
		if cmd.Direction() == nvme.DirControllerToHost {
			if _, st := ctl.access(d.Address(), d.Key(), int(d.Length()), stagedData(cmd.CommandID(), uint64(d.Length()), int(d.Length()))); st != transport.StatusSuccess {
				t.Fatalf("command %d: the controller's WRITE: %v", cmd.CommandID(), st)
			}
		} else if got, st := ctl.access(d.Address(), d.Key(), int(d.Length()), nil); st != transport.StatusSuccess || !bytes.Equal(got, stagedData(cmd.CommandID(), uint64(d.Length()), int(d.Length()))) {
			t.Fatalf("command %d: the controller's READ: %v, the host's bytes %v", cmd.CommandID(), st, bytes.Equal(got, stagedData(cmd.CommandID(), uint64(d.Length()), int(d.Length()))))
		}
		if reply := ctl.sendOp(pl, nvmetest.Completion(cmd.CommandID(), nvme.StatusSuccess), transport.OpSend, 0); reply.Result != transport.Pending {
			t.Fatalf("command %d's completion: reply %v", cmd.CommandID(), reply.Result)
		}
		cmds = append(cmds, stagedCommand{capsule: e.data})
	}
	waitUntil(t, "every completion at the host", func() bool {
		k := 0
		for _, x := range host.executed() {
			if x.op == transport.OpSend {
				k++
			}
		}
		return k == n
	})
	for cid := uint16(2); cid <= n; cid += 2 {
		size := 4096 * int(cid)
		addr := uint64(cid) * (64 << 10)
		if !bytes.Equal(host.mem[addr:addr+uint64(size)], stagedData(cid, uint64(size), size)) {
			t.Errorf("command %d: the host's memory does not hold what the controller wrote", cid)
		}
	}
	if s.Err() != nil {
		t.Errorf("the session ended: %v", s.Err())
	}
}

// TestSessionStagedFarPeerLeft: a command whose staging fails because the
// controller disconnected (its leg refuses to expose, its peer left) is
// not answered in the controller's place: the host hears of it by its own
// connection's end, as a transport's loss, and retries after it
// reconnects. An answer would be a data transfer error at the host's
// application. Nothing is counted as a staging failure.
func TestSessionStagedFarPeerLeft(t *testing.T) {
	r := newNVMeRig(t, rigOpts{classes: stagedClasses, exposes: true, clientMem: 2<<20 + 34*stagedSpan})
	r.exposer.failExpose = 12000
	r.far.mu.Lock()
	r.far.left = true
	r.far.mu.Unlock()
	k := nvmetest.Keyed(stagedAt(r, 1, 0), 12000, r.cmr.RKey(), nvme.SGLAddress)
	capsule := nvmetest.Command(nvme.OpRead, 1, k, nil)
	if err := r.client.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: r.cmr, Offset: 1 << 20, Length: 64}}); err != nil {
		t.Fatal(err)
	}
	copy(r.cmem, capsule)
	if err := r.client.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true,
		Local: transport.SGE{MR: r.cmr, Length: len(capsule)}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session outlived its controller's disconnect by 10 s")
	}
	if err := r.sess.Err(); !errors.Is(err, session.ErrPeerDisconnected) {
		t.Errorf("the session ended with %v, want the controller's disconnect", err)
	}
	if got := r.stats.Snapshot(); got.Answered != 0 {
		t.Errorf("%d commands answered in the controller's place after it left, want 0", got.Answered)
	}
	if ss := r.sess.Stats().Snapshot(); ss.StageFailed[0] != 0 {
		t.Errorf("%d staging failures counted for a controller that left, want 0", ss.StageFailed[0])
	}
	if n := r.exposer.live(); n != 0 {
		t.Errorf("%d exposures live after the session ended", n)
	}
}

// exposedKey is a staging key the far peer used: where, and whether it
// WROTE (else READ).
type exposedKey struct {
	key   uint32
	addr  uint64
	write bool
}

// checkStagingEnded checks a staging rig once every request completed:
// each key in keys is refused to the far peer, no staging is held or
// exposed, the session counted pulled and pushed bytes (its pushes' own
// completions may follow the responses they preceded), and it did not
// end.
func (r *rig) checkStagingEnded(keys []exposedKey, pulled, pushed uint64) {
	t := r.t
	t.Helper()
	for _, u := range keys {
		var data []byte
		if u.write {
			data = []byte{0xee}
		}
		if _, st := r.exposer.access(u.addr, u.key, 1, data); st != transport.StatusRemAccessErr {
			t.Errorf("staging key %#x after its request completed: %v, want a remote access error", u.key, st)
		}
	}
	waitUntil(t, "staging released", func() bool { return r.sess.Stats().StagingInUse.Load() == 0 })
	if n := r.exposer.live(); n != 0 {
		t.Errorf("%d exposures live after every request completed", n)
	}
	waitUntil(t, "the staging's moves counted", func() bool {
		ss := r.sess.Stats().Snapshot()
		return ss.Pulled[0] == pulled && ss.Pushed[0] == pushed
	})
	if r.sess.Err() != nil {
		t.Errorf("the session ended: %v", r.sess.Err())
	}
}
