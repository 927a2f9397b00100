package session_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// nfsRig is a session of a protocol: nfs route whose server sits behind a
// verbs leg (an exposing far leg): the client is an RPC-over-RDMA
// requester on the userspace leg (the route's listen side), the fake far
// peer nfsd, which READs and WRITEs only what the gateway exposed.
type nfsRig struct {
	*rig
	stats *staging.Stats
}

func newNFSRig(t *testing.T, o rigOpts, expected ...string) *nfsRig {
	t.Helper()
	st := &staging.Stats{}
	p, err := staging.New(staging.Options{Protocol: config.ProtocolNFS, Route: "files", Host: 0, Stats: st, Logger: testlog.New(t, expected...)})
	if err != nil {
		t.Fatal(err)
	}
	o.protocol, o.exposes = p, true
	o.clientAccess = transport.AccessRemoteRead | transport.AccessRemoteWrite
	if o.classes == nil {
		o.classes = stagedClasses
	}
	return &nfsRig{rig: newRig(t, o), stats: st}
}

// The client's memory: calls at 0 (4 KiB each), its receives for
// replies at 1 MiB (4 KiB each), each call's data from 2 MiB.
const (
	nfsReplies = 1 << 20
	nfsDataAt  = 2 << 20
	nfsSpan    = 320 << 10
)

// nfsData is the pattern of XID xid's bytes at offset off of its data.
func nfsData(xid uint32, off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(int(xid)*13 + (off+i)*7)
	}
	return b
}

// nfsKind is what a call asks of the server.
type nfsKind int

const (
	nfsWrite     nfsKind = iota // NFS WRITE: a read chunk the server READs
	nfsRead                     // NFS READ: a write chunk and pad the server WRITEs less than
	nfsLongReply                // a reply chunk the server WRITEs its reply into
	nfsLongCall                 // RDMA_NOMSG: the call in a position-zero read chunk, and a reply chunk
	nfsError                    // the server answers RDMA_ERROR ERR_CHUNK
	nfsReadSplit                // a write chunk of two segments, written into both
	nfsTooLarge                 // a segment past the largest staging buffer: the gateway answers
	numNFSKinds
)

// nfsCallOf is call i: its header's fields (the client's memory named by
// address and the client's key), and what the server writes: into the
// write chunk (payload) or the reply chunk (reply).
type nfsCallOf struct {
	kind    nfsKind
	f       rpcrdma.MessageFields
	payload int // bytes the server WRITEs into the write chunk
	reply   int // bytes of reply the server WRITEs into the reply chunk
}

func (r *nfsRig) call(i int, kind nfsKind) nfsCallOf {
	xid := uint32(0x1000 + i)
	key := r.cmr.RKey()
	at := func(off int) uint64 { return r.cmr.Addr() + uint64(nfsDataAt+i*nfsSpan+off) }
	seg := func(off, n int) rpcrdma.SegmentFields {
		return rpcrdma.SegmentFields{Handle: key, Length: uint32(n), Offset: at(off)}
	}
	c := nfsCallOf{kind: kind, f: rpcrdma.MessageFields{XID: xid, Vers: 1, Credits: 128, Proc: rpcrdma.ProcMsg}}
	switch kind {
	case nfsWrite:
		c.f.Reads = []rpcrdma.ReadSegmentFields{{Position: 0x8c, SegmentFields: seg(0, 64<<10)}, {Position: 0x8c, SegmentFields: seg(128<<10, 12000)}}
	case nfsRead:
		c.f.Writes = [][]rpcrdma.SegmentFields{{seg(0, 100<<10), seg(200<<10, 4)}}
		c.payload = 50000
	case nfsLongReply:
		c.f.Reply = []rpcrdma.SegmentFields{seg(0, 32<<10)}
		c.reply = 20000
	case nfsLongCall:
		c.f.Proc = rpcrdma.ProcNoMsg
		c.f.Reads = []rpcrdma.ReadSegmentFields{{SegmentFields: seg(0, 9000)}}
		c.f.Reply = []rpcrdma.SegmentFields{seg(64<<10, 16<<10)}
		c.reply = 6000
	case nfsError:
		c.f.Writes = [][]rpcrdma.SegmentFields{{seg(0, 8192)}}
	case nfsReadSplit:
		c.f.Writes = [][]rpcrdma.SegmentFields{{seg(0, 32<<10), seg(64<<10, 32<<10)}}
		c.payload = 40000
	case nfsTooLarge:
		c.f.Writes = [][]rpcrdma.SegmentFields{{seg(0, 300<<10)}}
	}
	return c
}

// bytes are the call as the client sends it: the header, then (RDMA_MSG)
// the RPC call.
func (c *nfsCallOf) bytes() []byte {
	b := rpcrdma.Append(nil, &c.f)
	if c.f.Proc == rpcrdma.ProcMsg {
		b = append(b, nfsRPC(c.f.XID, 0, 120)...)
	}
	return b
}

// nfsRPC is an RPC message of XID xid and type t (0 call, 1 reply),
// padded with its pattern to n bytes.
func nfsRPC(xid, t uint32, n int) []byte {
	b := binary.BigEndian.AppendUint32(nil, xid)
	b = binary.BigEndian.AppendUint32(b, t)
	return append(b, nfsData(xid, 8, n-8)...)
}

// prepare fills the client's memory for c: what the server READs holds
// its pattern, what it may WRITE 0xff.
func (r *nfsRig) prepare(c *nfsCallOf) {
	for _, s := range c.f.Reads {
		off := int(s.Offset - r.cmr.Addr())
		copy(r.cmem[off:], nfsData(c.f.XID, off, int(s.Length)))
	}
	var ws []rpcrdma.SegmentFields
	for _, w := range c.f.Writes {
		ws = append(ws, w...)
	}
	for _, s := range append(ws, c.f.Reply...) {
		off := int(s.Offset - r.cmr.Addr())
		for j := range int(s.Length) {
			r.cmem[off+j] = 0xff
		}
	}
}

// serve plays nfsd for the n-th call it received: every segment must name
// staging (not the client's key); it READs the read chunks (checking
// they hold the client's bytes), WRITEs c.payload bytes across the write
// chunk and c.reply bytes of reply into the reply chunk, and replies with
// the echoes. It returns the staging segments it used.
func (r *nfsRig) serve(n int, calls map[uint32]nfsCallOf) []rpcrdma.SegmentFields {
	t := r.t
	t.Helper()
	e := r.far.nthSend(t, n, fmt.Sprintf("call %d at the server", n))
	m, hn, err := rpcrdma.Parse(e.data)
	if err != nil {
		t.Fatalf("call %d reached the server unparsable: %v", n, err)
	}
	c, ok := calls[m.XID()]
	if !ok {
		t.Fatalf("call %d at the server: XID %#x is no call the client sent", n, m.XID())
	}
	if !bytes.Equal(e.data[hn:], c.bytes()[hn:]) {
		t.Fatalf("XID %#x: the RPC call reached the server changed", c.f.XID)
	}
	f := m.Fields()
	var used []rpcrdma.SegmentFields
	for i, s := range f.Reads {
		if s.Handle == r.cmr.RKey() {
			t.Fatalf("XID %#x: read segment %d reached the server naming the client's memory", c.f.XID, i)
		}
		used = append(used, s.SegmentFields)
		got, st := r.exposer.access(s.Offset, s.Handle, int(s.Length), nil)
		cs := c.f.Reads[i]
		off := int(cs.Offset - r.cmr.Addr())
		if st != transport.StatusSuccess || !bytes.Equal(got, nfsData(c.f.XID, off, int(cs.Length))) {
			t.Fatalf("XID %#x: the server's READ of read segment %d: %v, the client's bytes %v", c.f.XID, i, st, st == transport.StatusSuccess && bytes.Equal(got, nfsData(c.f.XID, off, int(cs.Length))))
		}
	}
	rf := rpcrdma.MessageFields{XID: c.f.XID, Vers: 1, Credits: 64, Proc: rpcrdma.ProcMsg}
	if c.kind == nfsError {
		rf = rpcrdma.MessageFields{XID: c.f.XID, Vers: 1, Credits: 64, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk}
	}
	write := func(s rpcrdma.SegmentFields, cs rpcrdma.SegmentFields, k int) {
		if s.Handle == r.cmr.RKey() {
			t.Fatalf("XID %#x: a write segment reached the server naming the client's memory", c.f.XID)
		}
		used = append(used, s)
		if k == 0 {
			return
		}
		off := int(cs.Offset - r.cmr.Addr())
		if _, st := r.exposer.access(s.Offset, s.Handle, k, nfsData(c.f.XID, off, k)); st != transport.StatusSuccess {
			t.Fatalf("XID %#x: the server's WRITE of %d bytes: %v", c.f.XID, k, st)
		}
	}
	for w, chunk := range f.Writes {
		left := c.payload
		echo := []rpcrdma.SegmentFields{}
		for j, s := range chunk {
			k := min(left, int(s.Length))
			if c.kind == nfsError {
				k = 0
			}
			left -= k
			write(s, c.f.Writes[w][j], k)
			s.Length = uint32(k)
			echo = append(echo, s)
		}
		if c.kind != nfsError {
			rf.Writes = append(rf.Writes, echo)
		}
	}
	body := nfsRPC(c.f.XID, 1, 100)
	if f.Reply != nil && c.kind != nfsError {
		s := f.Reply[0]
		write(s, c.f.Reply[0], c.reply)
		s.Length = uint32(c.reply)
		rf.Proc, rf.Reply, body = rpcrdma.ProcNoMsg, []rpcrdma.SegmentFields{s}, nil
	}
	if c.kind == nfsError {
		body = nil
	}
	if reply := r.far.send(r.pool, append(rpcrdma.Append(nil, &rf), body...), 0, false); reply.Result != transport.Pending {
		t.Fatalf("XID %#x: the reply: %v", c.f.XID, reply.Result)
	}
	return used
}

// TestSessionNFSStaged: an NFS client on the RoCE side, nfsd behind a
// verbs leg, over a lossy network, with calls of every shape in flight
// at once: an NFS WRITE's read chunk pulled before its call goes on; an
// NFS READ's write chunk pushed only as far as the server wrote (less
// than the chunk, across one segment or two); a long reply through the
// reply chunk; a long call (RDMA_NOMSG) through a position-zero read
// chunk; RDMA_ERROR finishing a call with no push; a call whose segment
// no staging buffer holds answered ERR_CHUNK by the gateway. Each reply
// reaches the client with its own handles and offsets and the lengths
// written; every staging key is refused once its call completed, and no
// buffer or exposure is left.
func TestSessionNFSStaged(t *testing.T) {
	for q, lend := range []bool{false, true} {
		t.Run(fmt.Sprintf("lend %v", lend), func(t *testing.T) {
			t.Parallel()
			r := newNFSRig(t, rigOpts{net: simnet.Options{Loss: 0.01, Seed: uint64(80 + q)}, delay: 100 * time.Microsecond, lend: lend, maxSGE: 4,
				clientMem: nfsDataAt + 32*nfsSpan}, "could not be staged")
			runNFS(t, r, 28)
			if r.net.Stats().Lost.Load() == 0 {
				t.Error("the network lost nothing: the test proved nothing of loss")
			}
		})
	}
}

func runNFS(t *testing.T, r *nfsRig, n int) {
	calls := map[uint32]nfsCallOf{}
	var order []nfsCallOf
	for i := range n {
		c := r.call(i, nfsKind(i%int(numNFSKinds)))
		r.prepare(&c)
		calls[c.f.XID] = c
		order = append(order, c)
	}
	for i := range order {
		if err := r.client.PostRecv(transport.RecvWR{ID: uint64(i), Local: transport.SGE{MR: r.cmr, Offset: nfsReplies + i*4096, Length: 4096}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range order {
		b := c.bytes()
		copy(r.cmem[i*4096:], b)
		if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true,
			Local: transport.SGE{MR: r.cmr, Offset: i * 4096, Length: len(b)}}); err != nil {
			t.Fatal(err)
		}
	}
	var used []rpcrdma.SegmentFields
	served := 0
	var pulled, pushed uint64
	for _, c := range order {
		if c.kind == nfsTooLarge {
			continue
		}
		used = append(used, r.serve(served, calls)...)
		served++
		for _, s := range c.f.Reads {
			pulled += uint64(s.Length)
		}
		if c.kind != nfsError {
			pushed += uint64(c.payload + c.reply)
		}
	}
	got := map[uint32]bool{}
	for _, wc := range r.receives(len(order), "replies") {
		if wc.Status != transport.StatusSuccess {
			t.Fatalf("the client's receive %d: %v", wc.ID, wc.Status)
		}
		b := r.cmem[nfsReplies+int(wc.ID)*4096:][:wc.ByteLen]
		m, hn, err := rpcrdma.Parse(b)
		if err != nil {
			t.Fatalf("a reply the client cannot parse: %v", err)
		}
		c, ok := calls[m.XID()]
		if !ok || got[m.XID()] {
			t.Fatalf("a reply of XID %#x: a call's %v, its second %v", m.XID(), ok, got[m.XID()])
		}
		got[m.XID()] = true
		checkNFSReply(t, r, c, m, b[hn:])
	}
	// A completed call's staging is out of the server's reach.
	for _, s := range used {
		if _, st := r.exposer.access(s.Offset, s.Handle, 1, nil); st != transport.StatusRemAccessErr {
			t.Errorf("staging key %#x after its call completed: %v, want a remote access error", s.Handle, st)
		}
	}
	waitUntil(t, "staging released", func() bool { return r.sess.Stats().StagingInUse.Load() == 0 })
	if k := r.exposer.live(); k != 0 {
		t.Errorf("%d exposures live after every call completed", k)
	}
	// The pushes' own completions may follow the reply they preceded.
	waitUntil(t, "pulls and pushes counted", func() bool {
		ss := r.sess.Stats().Snapshot()
		return ss.Pulled[0] == pulled && ss.Pushed[0] == pushed
	})
	tooLarge := uint64(0)
	for _, c := range order {
		if c.kind == nfsTooLarge {
			tooLarge++
		}
	}
	if s := r.stats.Snapshot(); s.Answered != tooLarge || s.Completions != uint64(served) || s.Errors[staging.WhyUnstageable] != tooLarge {
		t.Errorf("answered %d, completions %d, unstageable %d; want %d, %d, %d", s.Answered, s.Completions, s.Errors[staging.WhyUnstageable], tooLarge, served, tooLarge)
	}
	if r.sess.Err() != nil {
		t.Errorf("the session ended: %v", r.sess.Err())
	}
}

// checkNFSReply checks the reply to c as the client got it (m, then
// body), and the client's memory the server wrote.
func checkNFSReply(t *testing.T, r *nfsRig, c nfsCallOf, m rpcrdma.Message, body []byte) {
	t.Helper()
	f := m.Fields()
	switch c.kind {
	case nfsError, nfsTooLarge:
		if f.Proc != rpcrdma.ProcError || f.Err != rpcrdma.ErrChunk {
			t.Errorf("XID %#x: %v %v, want RDMA_ERROR ERR_CHUNK", c.f.XID, f.Proc, f.Err)
		}
		for _, w := range c.f.Writes {
			for _, s := range w {
				off := int(s.Offset - r.cmr.Addr())
				if got := r.cmem[off : off+int(s.Length)]; !bytes.Equal(got, bytes.Repeat([]byte{0xff}, len(got))) {
					t.Errorf("XID %#x: the client's memory was written though the call failed", c.f.XID)
				}
			}
		}
		return
	}
	// The echoes: the client's own handles and offsets, the lengths
	// written.
	left := c.payload
	for w, chunk := range c.f.Writes {
		for j, s := range chunk {
			k := min(left, int(s.Length))
			left -= k
			if w >= len(f.Writes) || j >= len(f.Writes[w]) {
				t.Fatalf("XID %#x: the reply's write list %+v lacks segment %d.%d", c.f.XID, f.Writes, w, j)
			}
			want := s
			want.Length = uint32(k)
			if f.Writes[w][j] != want {
				t.Errorf("XID %#x: write segment %d.%d echoed %+v, want %+v", c.f.XID, w, j, f.Writes[w][j], want)
			}
			off := int(s.Offset - r.cmr.Addr())
			if !bytes.Equal(r.cmem[off:off+k], nfsData(c.f.XID, off, k)) {
				t.Errorf("XID %#x: the client's %d bytes at %#x do not hold what the server wrote", c.f.XID, k, s.Offset)
			}
			if rest := r.cmem[off+k : off+int(s.Length)]; !bytes.Equal(rest, bytes.Repeat([]byte{0xff}, len(rest))) {
				t.Errorf("XID %#x: past the %d bytes the server wrote, the client's memory was written", c.f.XID, k)
			}
		}
	}
	if c.f.Reply != nil {
		s := c.f.Reply[0]
		want := s
		want.Length = uint32(c.reply)
		if f.Proc != rpcrdma.ProcNoMsg || len(f.Reply) != 1 || f.Reply[0] != want {
			t.Errorf("XID %#x: %v with reply chunk %+v, want RDMA_NOMSG with %+v", c.f.XID, f.Proc, f.Reply, want)
		}
		off := int(s.Offset - r.cmr.Addr())
		if !bytes.Equal(r.cmem[off:off+c.reply], nfsData(c.f.XID, off, c.reply)) {
			t.Errorf("XID %#x: the reply chunk does not hold the server's reply", c.f.XID)
		}
		if rest := r.cmem[off+c.reply : off+int(s.Length)]; !bytes.Equal(rest, bytes.Repeat([]byte{0xff}, len(rest))) {
			t.Errorf("XID %#x: past the reply, the client's reply chunk was written", c.f.XID)
		}
		return
	}
	if !bytes.Equal(body, nfsRPC(c.f.XID, 1, 100)) {
		t.Errorf("XID %#x: the RPC reply reached the client changed", c.f.XID)
	}
}

// TestSessionNFSPushed: a reply whose echo says the server wrote more
// than a segment holds, or wrote into a read chunk's staging, refuses
// the reply (Message.Pushed past its region, or into a region the far
// peer READs): the session ends, naming it, and the client's memory is
// not written.
func TestSessionNFSPushed(t *testing.T) {
	for _, tc := range []struct {
		name string
		echo func(f rpcrdma.MessageFields) [][]rpcrdma.SegmentFields
		want string
	}{
		{"more than the segment", func(f rpcrdma.MessageFields) [][]rpcrdma.SegmentFields {
			s := f.Writes[0][0]
			s.Length = 9000
			return [][]rpcrdma.SegmentFields{{s}}
		}, "the far peer wrote 9000 bytes into region 1 of 2"},
		{"into a read chunk", func(f rpcrdma.MessageFields) [][]rpcrdma.SegmentFields {
			s := f.Reads[0].SegmentFields
			s.Length = 100
			return [][]rpcrdma.SegmentFields{{s}}
		}, "the far peer wrote 100 bytes into region 0 of 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newNFSRig(t, rigOpts{})
			key := r.cmr.RKey()
			c := nfsCallOf{f: rpcrdma.MessageFields{XID: 0x42, Vers: 1, Proc: rpcrdma.ProcMsg,
				Reads:  []rpcrdma.ReadSegmentFields{{Position: 0x8c, SegmentFields: rpcrdma.SegmentFields{Handle: key, Length: 4096, Offset: r.cmr.Addr() + nfsDataAt}}},
				Writes: [][]rpcrdma.SegmentFields{{{Handle: key, Length: 8192, Offset: r.cmr.Addr() + nfsDataAt + 64<<10}}}}}
			r.prepare(&c)
			for i := range 4096 {
				r.cmem[nfsDataAt+i] = 0xee
			}
			if err := r.client.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: r.cmr, Offset: nfsReplies, Length: 4096}}); err != nil {
				t.Fatal(err)
			}
			b := c.bytes()
			copy(r.cmem, b)
			if err := r.client.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Length: len(b)}}); err != nil {
				t.Fatal(err)
			}
			e := r.far.nthSend(t, 0, "the call at the server")
			m, _, err := rpcrdma.Parse(e.data)
			if err != nil {
				t.Fatal(err)
			}
			f := m.Fields()
			w := f.Writes[0][0]
			if _, st := r.exposer.access(w.Offset, w.Handle, 8192, bytes.Repeat([]byte{0x11}, 8192)); st != transport.StatusSuccess {
				t.Fatalf("the server's WRITE: %v", st)
			}
			rf := rpcrdma.MessageFields{XID: 0x42, Vers: 1, Credits: 64, Proc: rpcrdma.ProcMsg, Writes: tc.echo(f)}
			if reply := r.far.send(r.pool, append(rpcrdma.Append(nil, &rf), nfsRPC(0x42, 1, 100)...), 0, false); reply.Result != transport.Failed {
				t.Errorf("the refused reply: %v, want failed", reply.Result)
			}
			select {
			case <-r.sess.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the session did not end after the refusal")
			}
			if err := r.sess.Err(); !errors.Is(err, session.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("the session ended with %v: want ErrRefused naming %q", err, tc.want)
			}
			if got := r.cmem[nfsDataAt+64<<10 : nfsDataAt+64<<10+8192]; !bytes.Equal(got, bytes.Repeat([]byte{0xff}, 8192)) {
				t.Error("the client's write chunk was written by a refused reply")
			}
			if k := r.exposer.live(); k != 0 {
				t.Errorf("%d exposures live after the session ended", k)
			}
		})
	}
}

// TestSessionNFSStagedTeardown: a session that ends while calls are
// staged (pulls outstanding, others waiting for the pool) revokes every
// exposure and returns every buffer (the rig's cleanup checks the pool).
func TestSessionNFSStagedTeardown(t *testing.T) {
	r := newNFSRig(t, rigOpts{delay: 2 * time.Millisecond, poolSize: 4 << 20, clientMem: nfsDataAt + 32*nfsSpan})
	for i := range 24 {
		c := r.call(i, []nfsKind{nfsWrite, nfsRead, nfsLongCall}[i%3])
		b := c.bytes()
		copy(r.cmem[i*4096:], b)
		if err := r.client.PostSend(transport.SendWR{ID: uint64(i), Opcode: transport.OpSend, Signaled: true,
			Local: transport.SGE{MR: r.cmr, Offset: i * 4096, Length: len(b)}}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "staging under way", func() bool { return r.sess.Stats().StagingInUse.Load() > 0 })
	if err := r.sess.Close(); err != nil {
		t.Fatal(err)
	}
	if k := r.exposer.live(); k != 0 {
		t.Errorf("%d exposures live after the session ended", k)
	}
	if k := r.sess.Stats().StagingInUse.Load(); k != 0 {
		t.Errorf("%d bytes of staging held after the session ended", k)
	}
}
