package session_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/nvme"
	"github.com/rbridge/rbridge/ulp/nvme/nvmetest"
)

// nvmeRig is a session of a protocol: nvme route: the client is the NVMe
// host (on the userspace leg, the route's listen side), the fake far leg
// the controller, which moves each command's data with READs and WRITEs
// of its own toward the host's memory (as a controller on a leg that
// delivers them: the placement that works today) and answers each with
// its completion.
type nvmeRig struct {
	*rig
	stats *staging.Stats
}

func newNVMeRig(t *testing.T, o rigOpts) *nvmeRig {
	t.Helper()
	st := &staging.Stats{}
	p, err := staging.New(staging.Options{Protocol: config.ProtocolNVMe, Route: "storage", Host: 0, Stats: st, Logger: testlog.New(t)})
	if err != nil {
		t.Fatal(err)
	}
	o.protocol = p
	o.clientAccess = transport.AccessRemoteRead | transport.AccessRemoteWrite
	return &nvmeRig{rig: newRig(t, o), stats: st}
}

// farResult waits (20 s at most) for the far peer's request id.
func (r *nvmeRig) farResult(id uint32, what string) farResult {
	r.t.Helper()
	var res farResult
	ok := false
	for deadline := time.Now().Add(20 * time.Second); !ok; {
		if res, ok = r.far.result(id); !ok {
			if time.Now().After(deadline) {
				r.t.Fatalf("%s: no completion within 20 s (session: %v)", what, r.sess.Err())
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	return res
}

// controller serves the n-th capsule the far side received: it moves the
// data its keyed descriptors name (READs them from the host for a write,
// WRITEs want into them for a read), then sends its completion; it
// returns the command.
func (r *nvmeRig) controller(n int, want func(cid uint16, d nvme.SGL) []byte) nvme.Command {
	t := r.t
	t.Helper()
	e := r.far.nthSend(t, n, "the capsule at the controller")
	c, err := nvme.ParseCapsule(e.data)
	if err != nil {
		t.Fatalf("capsule %d reached the controller unparsable: %v", n, err)
	}
	cmd := c.Command()
	for _, d := range c.Keyed().All() {
		if d.Length() == 0 {
			continue
		}
		// A READ whole (the session posts a long one in parts); a WRITE
		// in requests of at most 64 KiB, as a peer gateway's session
		// sends its chunks (one request is at most a chunk).
		var qs []transport.Request
		if cmd.Direction() == nvme.DirControllerToHost {
			b := want(cmd.CommandID(), d)
			for off := 0; off < len(b); off += 64 << 10 {
				p := b[off:min(off+64<<10, len(b))]
				qs = append(qs, transport.Request{Op: transport.OpWrite, VA: d.Address() + uint64(off), RKey: d.Key(), Length: uint32(len(p)), Payload: p})
			}
		} else {
			qs = append(qs, transport.Request{Op: transport.OpRead, VA: d.Address(), RKey: d.Key(), Length: d.Length()})
		}
		for _, q := range qs {
			id, reply := r.far.request(q)
			if reply.Result != transport.Pending {
				t.Fatalf("the controller's %v of command %d: reply %v", q.Op, cmd.CommandID(), reply.Result)
			}
			res := r.farResult(id, "the controller's "+q.Op.String())
			if res.status != transport.StatusSuccess {
				t.Fatalf("the controller's %v of command %d's %d bytes: %v", q.Op, cmd.CommandID(), q.Length, res.status)
			}
			if q.Op == transport.OpRead && !bytes.Equal(res.data, want(cmd.CommandID(), d)) {
				t.Fatalf("the controller READ command %d's %d bytes: not the host's", cmd.CommandID(), d.Length())
			}
		}
	}
	if reply := r.far.send(r.pool, nvmetest.Completion(cmd.CommandID(), nvme.StatusSuccess), 0, false); reply.Result != transport.Pending {
		t.Fatalf("command %d's completion: reply %v", cmd.CommandID(), reply.Result)
	}
	return cmd
}

// TestSessionNVMeQueue: an I/O queue at depth 32 over a lossy network,
// through a session that understands NVMe: the host's Connect (data in
// the capsule), then writes and reads of every data pointer form (one
// keyed descriptor, with and without remote invalidation, an SPDK list
// of them, in-capsule data; up to 128 KiB, so the controller's READs
// cross in parts), all in flight at once. The controller's own READs and
// WRITEs of the host's memory pass the protocol by, as they do without
// it; every capsule is inspected and counted, every completion matched to
// its command. A completion for no command is counted and relayed.
func TestSessionNVMeQueue(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    rigOpts
	}{
		{"assembled", rigOpts{net: simnet.Options{Loss: 0.01, Seed: 21}, delay: 100 * time.Microsecond}},
		{"lent", rigOpts{net: simnet.Options{Loss: 0.01, Seed: 22}, delay: 100 * time.Microsecond, lend: true, maxSGE: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newNVMeRig(t, tc.o)
			const depth = 32
			// Host memory: capsules at 0 (4 KiB each), completions at 1 MiB,
			// data from 2 MiB, 128 KiB a command.
			data := func(cid uint16, d nvme.SGL) []byte {
				off := int(d.Address() - r.cmr.Addr())
				b := make([]byte, d.Length())
				for i := range b {
					b[i] = byte(int(cid)*29 + (off+i)*7)
				}
				return b
			}
			key := r.cmr.RKey()
			at := func(cid uint16, off int) uint64 { return r.cmr.Addr() + 2<<20 + uint64(cid)*(128<<10) + uint64(off) }
			type cmdCase struct {
				capsule []byte
				dir     nvme.Direction
				keyed   []nvme.SGLFields
			}
			var cmds []cmdCase
			// The Connect of I/O queue 1, data in the capsule.
			con := make([]byte, nvme.CommandLen+nvme.ConnectDataLen)
			nvme.Connect(con).Encode(&nvme.ConnectFields{Flags: nvme.FlagSGLBuffer, CommandID: 0, QID: 1, SQSize: depth - 1,
				DPTR: nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: nvme.ConnectDataLen}})
			cmds = append(cmds, cmdCase{capsule: con, dir: nvme.DirHostToController})
			sizes := []uint32{512, 4096, 12000, 65536, 131072}
			for cid := uint16(1); cid <= depth; cid++ {
				n := sizes[int(cid)%len(sizes)]
				op, dir := nvme.OpWrite, nvme.DirHostToController
				if cid%2 == 0 {
					op, dir = nvme.OpRead, nvme.DirControllerToHost
				}
				var c cmdCase
				switch cid % 4 {
				case 0, 1: // one keyed descriptor; remote invalidation every other
					st := nvme.SGLAddress
					if cid%4 == 0 {
						st = nvme.SGLInvalidate
					}
					k := nvmetest.Keyed(at(cid, 0), n, key, st)
					c = cmdCase{capsule: nvmetest.Command(op, cid, k, nil), keyed: []nvme.SGLFields{k}}
				case 2: // an SPDK list of three
					ks := []nvme.SGLFields{nvmetest.Keyed(at(cid, 0), 4096, key, nvme.SGLAddress), nvmetest.Keyed(at(cid, 8192), 1000, key, nvme.SGLAddress),
						nvmetest.Keyed(at(cid, 16384), n/2, key, nvme.SGLAddress)}
					var tail []byte
					for i := range ks {
						b := make([]byte, nvme.SGLLen)
						nvme.SGL(b).Encode(&ks[i])
						tail = append(tail, b...)
					}
					c = cmdCase{capsule: nvmetest.Command(op, cid, nvme.SGLFields{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Length: uint32(len(tail))}, tail), keyed: ks}
				case 3: // a write with its data in the capsule (a Linux host's I/O queue form)
					in := data(cid, nvme.SGL(make([]byte, nvme.SGLLen)))[:0]
					for i := range 3000 {
						in = append(in, byte(i*5+int(cid)))
					}
					op, dir = nvme.OpWrite, nvme.DirHostToController
					c = cmdCase{capsule: nvmetest.Command(op, cid, nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: uint32(len(in))}, in)}
				}
				c.dir = dir
				cmds = append(cmds, c)
			}
			// The host's data for its writes, nothing yet where reads land.
			for _, c := range cmds {
				cid := nvme.Command(c.capsule).CommandID()
				for _, k := range c.keyed {
					off := int(k.Address - r.cmr.Addr())
					if c.dir == nvme.DirHostToController {
						copy(r.cmem[off:], data(cid, nvme.SGL(sglBytes(k))))
					} else {
						clear(r.cmem[off : off+int(k.Length)])
					}
				}
			}
			for i := range len(cmds) + 1 {
				if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: 1<<20 + i*64, Length: 64}}); err != nil {
					t.Fatal(err)
				}
			}
			// All in flight at once.
			for i, c := range cmds {
				copy(r.cmem[i*4096:], c.capsule)
				if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true,
					Local: transport.SGE{MR: r.cmr, Offset: i * 4096, Length: len(c.capsule)}}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range cmds {
				r.controller(i, data)
			}
			// A completion for no command: relayed, counted.
			if reply := r.far.send(r.pool, nvmetest.Completion(999, nvme.StatusInvalidField), 0, false); reply.Result != transport.Pending {
				t.Fatalf("a completion for no command: reply %v", reply.Result)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for _, wc := range pollWCs(t, ctx, r.scq, len(cmds), "the host's SENDs") {
				if wc.Status != transport.StatusSuccess {
					t.Fatalf("the host's capsule %d: %v", wc.ID, wc.Status)
				}
			}
			got := map[uint16]int{}
			for _, wc := range r.receives(len(cmds)+1, "completions") {
				cqe := nvme.Completion(r.cmem[1<<20+int(wc.ID)*64:])
				if wc.Status != transport.StatusSuccess || wc.ByteLen != nvme.CompletionLen {
					t.Fatalf("the host's receive %d: %+v", wc.ID, wc)
				}
				got[cqe.CommandID()]++
			}
			for _, c := range cmds {
				cid := nvme.Command(c.capsule).CommandID()
				if got[cid] != 1 {
					t.Errorf("command %d: %d completions at the host", cid, got[cid])
				}
				if c.dir == nvme.DirControllerToHost {
					for _, k := range c.keyed {
						off := int(k.Address - r.cmr.Addr())
						if !bytes.Equal(r.cmem[off:off+int(k.Length)], data(cid, nvme.SGL(sglBytes(k)))) {
							t.Errorf("command %d: the host's buffer at %#x does not hold what the controller wrote", cid, k.Address)
						}
					}
				}
			}
			if got[999] != 1 {
				t.Errorf("the completion for no command reached the host %d times, want once", got[999])
			}

			// Counted: every command by direction, the descriptors and
			// their bytes, remote invalidations, every completion.
			want := staging.StatsSnapshot{Completions: uint64(len(cmds) + 1)}
			for _, c := range cmds {
				want.Commands[c.dir]++
				for _, k := range c.keyed {
					want.Descriptors++
					want.DescribedBytes += uint64(k.Length)
					if k.Subtype == nvme.SGLInvalidate {
						want.Invalidations++
					}
				}
			}
			want.Errors[staging.WhyUnknownCommandID] = 1
			if d := cmp.Diff(want, r.stats.Snapshot()); d != "" {
				t.Errorf("NVMe stats (-want +got):\n%s", d)
			}
			ss := r.sess.Stats().Snapshot()
			if ss.Ops[1][transport.OpRead] == 0 || ss.Ops[1][transport.OpWrite] == 0 || r.sess.Err() != nil {
				t.Errorf("the controller's READs %d and WRITEs %d; the session: %v", ss.Ops[1][transport.OpRead], ss.Ops[1][transport.OpWrite], r.sess.Err())
			}
			if r.net.Stats().Lost.Load() == 0 {
				t.Error("the network lost nothing: the test proved nothing of loss")
			}
		})
	}
}

func sglBytes(f nvme.SGLFields) []byte {
	b := make([]byte, nvme.SGLLen)
	nvme.SGL(b).Encode(&f)
	return b
}

// TestSessionNVMeRefuses: on a protocol: nvme route, a message the host
// side sends that is not a command capsule, or one the controller side
// sends that is not a completion, fails back to its sender and ends the
// session with an error that names the route, the queue and the message;
// it never reaches the other side.
func TestSessionNVMeRefuses(t *testing.T) {
	t.Run("from the host", func(t *testing.T) {
		r := newNVMeRig(t, rigOpts{})
		copy(r.cmem, nvmetest.Command(nvme.OpFlush, 1, nvmetest.Keyed(0, 0, 0, nvme.SGLAddress), nil))
		prp := nvmetest.Command(nvme.OpRead, 2, nvmetest.Keyed(0x1000, 512, 1, nvme.SGLAddress), nil)
		prp[1] = 0 // PRPs: not over fabrics
		copy(r.cmem[4096:], prp)
		if err := r.client.PostSend(
			transport.SendWR{ID: 0, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Length: nvme.CommandLen}},
			transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Offset: 4096, Length: nvme.CommandLen}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		wcs := pollWCs(t, ctx, r.scq, 2, "the host's capsules")
		if wcs[0].Status != transport.StatusSuccess || wcs[1].Status != transport.StatusRemInvReqErr {
			t.Errorf("the host's capsules completed %v and %v, want success and remote invalid request", wcs[0].Status, wcs[1].Status)
		}
		nvmeEnded(t, r, nvme.ErrNotSGL, `message 2 from A to B, a SEND of 64 bytes: 02 00 02 00`, `route "storage": nvme queue (no Connect seen): from the host, not a command capsule: nvme: parse capsule: flags (byte 1): data pointer is not an SGL: PSDT 0`)
		if n := len(r.far.executed()); n != 1 {
			t.Errorf("the controller got %d messages, want the Flush alone", n)
		}
		if got := r.stats.Snapshot().Errors[staging.WhyMalformedCommand]; got != 1 {
			t.Errorf("%d malformed commands counted, want 1", got)
		}
	})
	t.Run("from the controller", func(t *testing.T) {
		r := newNVMeRig(t, rigOpts{})
		if err := r.client.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: r.cmr, Length: 64}}); err != nil {
			t.Fatal(err)
		}
		if reply := r.far.send(r.pool, nvmetest.Completion(1, 0)[:15], 0, false); reply.Result != transport.Failed {
			t.Fatalf("a 15-byte completion: reply %v, want failed", reply.Result)
		}
		nvmeEnded(t, r, nvme.ErrTruncated, `message 1 from B to A, a SEND of 15 bytes`, `route "storage": nvme queue (no Connect seen): from the controller, not a completion: nvme: parse completion: truncated: 15 bytes, need 16`)
		if k := r.rcq.Poll(make([]transport.WC, 1)); k > 0 {
			t.Error("the host received what the protocol refused")
		}
		r.far.mu.Lock()
		defer r.far.mu.Unlock()
		if len(r.far.inDone) != 1 || r.far.inDone[0] == transport.StatusSuccess {
			t.Errorf("the controller's SEND completed %v, want a failure", r.far.inDone)
		}
	})
}

func nvmeEnded(t *testing.T, r *nvmeRig, sentinel error, names ...string) {
	t.Helper()
	select {
	case <-r.sess.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the session did not end")
	}
	err := r.sess.Err()
	if !errors.Is(err, session.ErrRefused) || !errors.Is(err, sentinel) {
		t.Errorf("the session ended with %v, want ErrRefused and %v", err, sentinel)
	}
	for _, n := range names {
		if !strings.Contains(errString(err), n) {
			t.Errorf("the session's error:\n%v\nwant it to name:\n%s", err, n)
		}
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
