package staging_test

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// Client and server: the session directions of an RPC-over-RDMA
// connection whose client is on endpoint A, as the gateway makes them.
const (
	fromClient = 0
	fromServer = 1
)

// rpcBody is the start of an RPC message of XID xid and type t (0 call,
// 1 reply), then 0xa5 filler: what a gateway must never write.
func rpcBody(xid, t uint32, n int) []byte {
	b := binary.BigEndian.AppendUint32(nil, xid)
	b = binary.BigEndian.AppendUint32(b, t)
	return append(b, bytes.Repeat([]byte{0xa5}, n)...)
}

// nfsMsg is a transport header followed, for RDMA_MSG, by an RPC message
// of type t.
func nfsMsg(f rpcrdma.MessageFields, t uint32) []byte {
	if f.Vers == 0 {
		f.Vers = rpcrdma.Version
	}
	b := rpcrdma.Append(nil, &f)
	if f.Proc == rpcrdma.ProcMsg || f.Proc == rpcrdma.ProcMsgP {
		b = append(b, rpcBody(f.XID, t, 40)...)
	}
	return b
}

func seg(h, l uint32, o uint64) rpcrdma.SegmentFields {
	return rpcrdma.SegmentFields{Handle: h, Length: l, Offset: o}
}

func newNFS(t *testing.T, st *staging.Stats, expected ...string) session.Stager {
	t.Helper()
	p, err := staging.New(staging.Options{Protocol: config.ProtocolNFS, Route: "files", Host: fromClient, Stats: st, Logger: testlog.New(t, expected...)})
	if err != nil {
		t.Fatal(err)
	}
	return p.(session.Stager)
}

// stagedMessage is message with Staging set.
func stagedMessage(p session.Protocol, dir int, seq uint64, b []byte, cuts ...int) (*session.Message, error) {
	var pieces session.Pieces
	at := 0
	for _, c := range append(cuts, len(b)) {
		pieces = append(pieces, append([]byte(nil), b[at:c]...))
		at = c
	}
	m := &session.Message{Dir: dir, Seq: seq, Bytes: pieces, Staging: true}
	return m, p.Message(m)
}

func joined(p session.Pieces) []byte { return bytes.Join(p, nil) }

// TestNFSCounts: calls of every shape, without staging, and their
// replies: counted by the way their chunks move data, segments of a
// length above 0 and their bytes; nothing rewritten, no errors.
func TestNFSCounts(t *testing.T) {
	st := &staging.Stats{}
	c := newNFS(t, st)
	calls := [][]byte{
		nfsMsg(rpcrdma.MessageFields{XID: 1, Credits: 128, Proc: rpcrdma.ProcMsg}, 0), // GETATTR: inline
		nfsMsg(rpcrdma.MessageFields{XID: 2, Credits: 128, Proc: rpcrdma.ProcMsg, Reads: []rpcrdma.ReadSegmentFields{{Position: 0x8c, SegmentFields: seg(0x11, 8192, 0x10000)}}}, 0),
		nfsMsg(rpcrdma.MessageFields{XID: 3, Credits: 128, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{seg(0x12, 65536, 0x20000), seg(0x13, 4, 0x30000)}}}, 0),
		nfsMsg(rpcrdma.MessageFields{XID: 4, Credits: 128, Proc: rpcrdma.ProcMsg, Reply: []rpcrdma.SegmentFields{seg(0x14, 32768, 0x40000)}}, 0),
		nfsMsg(rpcrdma.MessageFields{XID: 5, Credits: 128, Proc: rpcrdma.ProcNoMsg, Reads: []rpcrdma.ReadSegmentFields{{SegmentFields: seg(0x15, 6000, 0x50000)}}, Reply: []rpcrdma.SegmentFields{seg(0x16, 0, 0)}}, 0),
	}
	for i, b := range calls {
		m, err := message(c, fromClient, uint64(i+1), b, len(b)/3)
		if err != nil {
			t.Fatalf("call %d: %v", i+1, err)
		}
		if !bytes.Equal(joined(m.Bytes), b) || m.Stage != nil {
			t.Errorf("call %d: rewritten or staged without staging", i+1)
		}
	}
	for i := range calls {
		r := nfsMsg(rpcrdma.MessageFields{XID: uint32(i + 1), Credits: 64, Proc: rpcrdma.ProcMsg}, 1)
		if i == 4 {
			r = nfsMsg(rpcrdma.MessageFields{XID: 5, Credits: 64, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk}, 0)
		}
		m, err := message(c, fromServer, uint64(i+1), r)
		if err != nil || m.Finishes || m.Push {
			t.Fatalf("reply %d: %v (finishes %v)", i+1, err, m.Finishes)
		}
	}
	got := st.Snapshot()
	want := staging.StatsSnapshot{Descriptors: 5, DescribedBytes: 8192 + 65536 + 4 + 32768 + 6000, Completions: 5}
	want.Commands[staging.DataNone] = 1
	want.Commands[staging.DataHostToController] = 1
	want.Commands[staging.DataControllerToHost] = 2
	want.Commands[staging.DataBidirectional] = 1
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stats (-want +got):\n%s", diff)
	}
}

// TestNFSStaged: where the server sits behind a verbs leg, a call's
// segments become regions (the read list's pulled, the write chunks' and
// reply chunk's pushed), Restage rewrites each in place, even across
// pieces, and nothing else; the reply's echoes give what to push and get
// the client's handles and offsets back; the RPC messages are untouched.
func TestNFSStaged(t *testing.T) {
	st := &staging.Stats{}
	c := newNFS(t, st)
	f := rpcrdma.MessageFields{XID: 0x77, Credits: 128, Proc: rpcrdma.ProcMsg,
		Reads:  []rpcrdma.ReadSegmentFields{{Position: 0x90, SegmentFields: seg(0x21, 4096, 0x1000)}, {Position: 0x90, SegmentFields: seg(0x22, 100, 0x3000)}},
		Writes: [][]rpcrdma.SegmentFields{{seg(0x23, 8192, 0x5000), seg(0x24, 0, 0x9000), seg(0x25, 4, 0xa000)}},
		Reply:  []rpcrdma.SegmentFields{seg(0x26, 16384, 0xb000)}}
	call := nfsMsg(f, 0)
	hdr := f
	hdr.Vers = 1
	n := hdr.Len()
	m, err := stagedMessage(c, fromClient, 9, call, 30, n-10) // cut inside segments
	if err != nil {
		t.Fatal(err)
	}
	want := []session.Region{{Remote: 0x1000, RKey: 0x21, Len: 4096}, {Remote: 0x3000, RKey: 0x22, Len: 100},
		{Remote: 0x5000, RKey: 0x23, Len: 8192, Write: true}, {Remote: 0xa000, RKey: 0x25, Len: 4, Write: true},
		{Remote: 0xb000, RKey: 0x26, Len: 16384, Write: true}}
	if diff := cmp.Diff(want, m.Stage); diff != "" {
		t.Fatalf("regions (-want +got):\n%s", diff)
	}
	for i := range want {
		if err := c.Restage(fromClient, m.Tag, m.Bytes, i, 0x5000_0000_0000+uint64(i)<<20, 0xe000+uint32(i)); err != nil {
			t.Fatalf("restage %d: %v", i, err)
		}
	}
	if err := c.Restage(fromClient, m.Tag, m.Bytes, len(want), 1, 1); err == nil {
		t.Error("restage of a region the call does not have: no error")
	}
	got := joined(m.Bytes)
	pm, _, err := rpcrdma.Parse(got)
	if err != nil {
		t.Fatalf("the restaged call does not parse: %v", err)
	}
	wantCall := hdr
	wantCall.Reads = []rpcrdma.ReadSegmentFields{{Position: 0x90, SegmentFields: seg(0xe000, 4096, 0x5000_0000_0000)}, {Position: 0x90, SegmentFields: seg(0xe001, 100, 0x5000_0010_0000)}}
	wantCall.Writes = [][]rpcrdma.SegmentFields{{seg(0xe002, 8192, 0x5000_0020_0000), seg(0x24, 0, 0x9000), seg(0xe003, 4, 0x5000_0030_0000)}}
	wantCall.Reply = []rpcrdma.SegmentFields{seg(0xe004, 16384, 0x5000_0040_0000)}
	if diff := cmp.Diff(wantCall, pm.Fields()); diff != "" {
		t.Errorf("restaged call (-want +got):\n%s", diff)
	}
	if !bytes.Equal(got[n:], call[n:]) {
		t.Error("the RPC call was written")
	}
	// nfsd's reply: the write chunk echoed with 5000 bytes written (the
	// pad segment none), the reply chunk with 3000: RDMA_NOMSG.
	reply := nfsMsg(rpcrdma.MessageFields{XID: 0x77, Credits: 64, Proc: rpcrdma.ProcNoMsg,
		Writes: [][]rpcrdma.SegmentFields{{seg(0xe002, 5000, 0x5000_0020_0000), seg(0x24, 0, 0x9000), seg(0xe003, 0, 0x5000_0030_0000)}},
		Reply:  []rpcrdma.SegmentFields{seg(0xe004, 3000, 0x5000_0040_0000)}}, 1)
	r, err := stagedMessage(c, fromServer, 1, reply, 40)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Finishes || r.Finish != m.Tag || !r.Push {
		t.Errorf("reply: finishes %v tag %#x push %v, want the call's %#x with a push", r.Finishes, r.Finish, r.Push, m.Tag)
	}
	if diff := cmp.Diff([]int{0, 0, 5000, 0, 3000}, r.Pushed); diff != "" {
		t.Errorf("pushed (-want +got):\n%s", diff)
	}
	rm, _, err := rpcrdma.Parse(joined(r.Bytes))
	if err != nil {
		t.Fatal(err)
	}
	wantReply := rpcrdma.MessageFields{XID: 0x77, Vers: 1, Credits: 64, Proc: rpcrdma.ProcNoMsg,
		Writes: [][]rpcrdma.SegmentFields{{seg(0x23, 5000, 0x5000), seg(0x24, 0, 0x9000), seg(0x25, 0, 0xa000)}},
		Reply:  []rpcrdma.SegmentFields{seg(0x26, 3000, 0xb000)}}
	if diff := cmp.Diff(wantReply, rm.Fields()); diff != "" {
		t.Errorf("the reply toward the client (-want +got):\n%s", diff)
	}
	// The call is answered: its XID is free, a second reply is no one's.
	if r2, err := stagedMessage(c, fromServer, 2, reply); err != nil || r2.Finishes {
		t.Errorf("a second reply: %v, finishes %v", err, r2.Finishes)
	}
	if got := st.Snapshot().Errors[staging.WhyUnknownCommandID]; got != 1 {
		t.Errorf("%d replies for no call counted, want 1", got)
	}
}

// TestNFSStagedError: an RDMA_ERROR finishes its call's staging without
// a push; a call that cannot be staged is answered with ERR_CHUNK for
// its XID, granting what the server last granted.
func TestNFSStagedError(t *testing.T) {
	st := &staging.Stats{}
	c := newNFS(t, st, "could not be staged")
	m, err := stagedMessage(c, fromClient, 1, nfsMsg(rpcrdma.MessageFields{XID: 5, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{seg(1, 4096, 0x1000)}}}, 0))
	if err != nil || len(m.Stage) != 1 {
		t.Fatalf("%v, %d regions", err, len(m.Stage))
	}
	if err := c.Restage(fromClient, m.Tag, m.Bytes, 0, 0x9000, 0x99); err != nil {
		t.Fatal(err)
	}
	r, err := stagedMessage(c, fromServer, 1, nfsMsg(rpcrdma.MessageFields{XID: 5, Credits: 48, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk}, 0))
	if err != nil || !r.Finishes || r.Finish != m.Tag || r.Push {
		t.Errorf("RDMA_ERROR: %v, finishes %v of %#x, push %v", err, r.Finishes, r.Finish, r.Push)
	}
	m, err = stagedMessage(c, fromClient, 2, nfsMsg(rpcrdma.MessageFields{XID: 6, Proc: rpcrdma.ProcMsg, Reads: []rpcrdma.ReadSegmentFields{{Position: 4, SegmentFields: seg(1, 2<<20, 0x1000)}}}, 0))
	if err != nil {
		t.Fatal(err)
	}
	answer := c.Unstaged(fromClient, m.Tag, session.ErrTooLarge)
	want := rpcrdma.Append(nil, &rpcrdma.MessageFields{XID: 6, Vers: 1, Credits: 48, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk})
	if !bytes.Equal(answer, want) {
		t.Errorf("the gateway's answer % x, want % x", answer, want)
	}
	if s := st.Snapshot(); s.Answered != 1 || s.Errors[staging.WhyUnstageable] != 1 {
		t.Errorf("answered %d, unstageable %d, want 1 and 1", s.Answered, s.Errors[staging.WhyUnstageable])
	}
	// Its XID is free again.
	if m, err := stagedMessage(c, fromClient, 3, nfsMsg(rpcrdma.MessageFields{XID: 6, Proc: rpcrdma.ProcMsg}, 0)); err != nil {
		t.Errorf("XID 6 again after its answer: %v (%v)", err, m.Tag)
	}
}

// TestNFSRefuses: what is not RPC-over-RDMA version 1 ends the session,
// named; so does what the gateway cannot match or stage where it stages.
// A reused XID without staging is counted and relayed.
func TestNFSRefuses(t *testing.T) {
	call := func(xid uint32) []byte {
		return nfsMsg(rpcrdma.MessageFields{XID: xid, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{seg(1, 4096, 0x1000)}}}, 0)
	}
	v2 := call(1)
	binary.BigEndian.PutUint32(v2[4:], 2)
	for _, tc := range []struct {
		name    string
		staging bool
		msgs    []struct {
			dir int
			b   []byte
		}
		want string
		why  staging.Why
	}{
		{"version 2", false, []struct {
			dir int
			b   []byte
		}{{fromClient, v2}}, `route "files": nfs: from the client, not an RPC-over-RDMA version 1 message: rpcrdma: parse header: rdma_vers (byte 4): not RPC-over-RDMA version 1: version 2`, staging.WhyMalformedCommand},
		{"an NVMe completion from the server", false, []struct {
			dir int
			b   []byte
		}{{fromServer, make([]byte, 16)}}, "from the server, not an RPC-over-RDMA version 1 message", staging.WhyMalformedCompletion},
		{"RDMA_MSG with no RPC message", false, []struct {
			dir int
			b   []byte
		}{{fromClient, rpcrdma.Append(nil, &rpcrdma.MessageFields{XID: 3, Vers: 1, Proc: rpcrdma.ProcMsg})}}, "no RPC message", staging.WhyMalformedCommand},
		{"an XID reused while outstanding, staging", true, []struct {
			dir int
			b   []byte
		}{{fromClient, call(7)}, {fromClient, call(7)}}, "XID 0x7, which is outstanding already", staging.WhyReusedCommandID},
		{"a backchannel call with chunks, staging", true, []struct {
			dir int
			b   []byte
		}{{fromServer, nfsMsg(rpcrdma.MessageFields{XID: 8, Proc: rpcrdma.ProcMsg, Reply: []rpcrdma.SegmentFields{seg(1, 1, 1)}}, 0)}}, "backchannel call from the server", staging.WhyUnstageable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &staging.Stats{}
			c := newNFS(t, st)
			var err error
			for i, m := range tc.msgs {
				if tc.staging {
					_, err = stagedMessage(c, m.dir, uint64(i+1), m.b)
				} else {
					_, err = message(c, m.dir, uint64(i+1), m.b)
				}
				if i < len(tc.msgs)-1 && err != nil {
					t.Fatalf("message %d: %v", i, err)
				}
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error with %q", err, tc.want)
			}
			if got := st.Snapshot().Errors[tc.why]; got != 1 {
				t.Errorf("%v counted %d times, want 1", tc.why, got)
			}
		})
	}
	t.Run("an XID reused while outstanding, no staging", func(t *testing.T) {
		st := &staging.Stats{}
		c := newNFS(t, st, "XID is outstanding")
		for i := range 2 {
			if _, err := message(c, fromClient, uint64(i+1), call(7)); err != nil {
				t.Fatal(err)
			}
		}
		if got := st.Snapshot().Errors[staging.WhyReusedCommandID]; got != 1 {
			t.Errorf("reused XIDs counted %d, want 1", got)
		}
	})
	t.Run("a reply whose echo names memory the gateway did not give", func(t *testing.T) {
		c := newNFS(t, &staging.Stats{})
		m, err := stagedMessage(c, fromClient, 1, call(9))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Restage(fromClient, m.Tag, m.Bytes, 0, 0x9000, 0x99); err != nil {
			t.Fatal(err)
		}
		_, err = stagedMessage(c, fromServer, 1, nfsMsg(rpcrdma.MessageFields{XID: 9, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{seg(1, 4096, 0x1000)}}}, 1))
		if err == nil || !strings.Contains(err.Error(), "which the gateway did not give it") {
			t.Errorf("got %v", err)
		}
	})
}

// TestNFSBackchannel: NFSv4.1 backchannel calls from the server and the
// client's replies pass untracked, without staging; a reply for a
// forward call still matches it.
func TestNFSBackchannel(t *testing.T) {
	st := &staging.Stats{}
	c := newNFS(t, st)
	if _, err := stagedMessage(c, fromClient, 1, nfsMsg(rpcrdma.MessageFields{XID: 0x100, Proc: rpcrdma.ProcMsg}, 0)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir int
		b   []byte
	}{
		{fromServer, nfsMsg(rpcrdma.MessageFields{XID: 0x100, Credits: 64, Proc: rpcrdma.ProcMsg}, 0)}, // CB_SEQUENCE, the same XID space as ours by chance
		{fromClient, nfsMsg(rpcrdma.MessageFields{XID: 0x100, Credits: 16, Proc: rpcrdma.ProcMsg}, 1)},
		{fromServer, nfsMsg(rpcrdma.MessageFields{XID: 0x100, Credits: 64, Proc: rpcrdma.ProcMsg}, 1)}, // the forward reply
	} {
		m, err := stagedMessage(c, tc.dir, 2, tc.b)
		if err != nil || m.Stage != nil || m.Finishes {
			t.Fatalf("%v, staged %v, finishes %v", err, m.Stage, m.Finishes)
		}
	}
	if s := st.Snapshot(); s.Completions != 1 || s.Commands[staging.DataNone] != 1 || s.Errors != [staging.NumWhys]uint64{} {
		t.Errorf("stats %+v: want one call, one reply, no error", s)
	}
}

// TestNFSQueueOf: every RPC-over-RDMA connection keeps the receives the
// Linux client's calls and backchannel may take; the server's SENDs are
// bounded by the client's inline receive size, and the client's by its
// inline send size, where RFC 8797 says them.
func TestNFSQueueOf(t *testing.T) {
	linux := rpcrdma.AppendConnectPrivate(nil, &rpcrdma.ConnectPrivateFields{Flags: rpcrdma.FlagSendWithInvalidateOK, SendSize: 4096, RecvSize: 4096})
	for _, tc := range []struct {
		name string
		pd   []byte
		want staging.Queue
	}{
		{"the Linux client's", append(linux, make([]byte, 48)...), staging.Queue{Depth: 160, ResponseSize: 4096, RequestSize: 4096}},
		{"a 1 KiB receive", rpcrdma.AppendConnectPrivate(nil, &rpcrdma.ConnectPrivateFields{SendSize: 8192, RecvSize: 1024}), staging.Queue{Depth: 160, ResponseSize: 1024, RequestSize: 8192}},
		{"none", nil, staging.Queue{Depth: 160}},
		{"not RFC 8797's", []byte("somebody else's private data"), staging.Queue{Depth: 160}},
		{"cut", linux[:7], staging.Queue{Depth: 160}},
	} {
		if got, ok := staging.QueueOf(config.ProtocolNFS, tc.pd); got != tc.want || !ok {
			t.Errorf("%s: %+v, %v; want %+v", tc.name, got, ok, tc.want)
		}
	}
}

// TestNFSConnectData: toward a server the gateway stages for, the
// client's offer of remote invalidation is withdrawn in a copy; nothing
// else changes, and nothing changes elsewhere.
func TestNFSConnectData(t *testing.T) {
	linux := rpcrdma.AppendConnectPrivate(nil, &rpcrdma.ConnectPrivateFields{Flags: rpcrdma.FlagSendWithInvalidateOK, SendSize: 4096, RecvSize: 4096})
	padded := append(bytes.Clone(linux), make([]byte, 48)...)
	orig := bytes.Clone(padded)
	got, err := staging.ConnectData(config.ProtocolNFS, true, true, padded)
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Clone(orig)
	want[5] = 0
	if !bytes.Equal(got, want) || !bytes.Equal(padded, orig) {
		t.Errorf("toward a staged server: % x, want % x (the original % x)", got, want, padded)
	}
	server := rpcrdma.AppendConnectPrivate(nil, &rpcrdma.ConnectPrivateFields{SendSize: 4096, RecvSize: 4096})
	for _, tc := range []struct {
		name             string
		toTarget, stages bool
		b                []byte
	}{
		{"toward a server not staged for", true, false, linux},
		{"the server's accept", false, true, server},
		{"not RFC 8797's", true, true, []byte{1, 2, 3, 4, 5, 1, 3, 3}},
		{"none", true, true, nil},
	} {
		got, err := staging.ConnectData(config.ProtocolNFS, tc.toTarget, tc.stages, tc.b)
		if err != nil || !bytes.Equal(got, tc.b) {
			t.Errorf("%s: % x, %v; want it unchanged", tc.name, got, err)
		}
	}
	if _, err := staging.ConnectData(config.ProtocolNFS, true, true, []byte{0xf6, 0xab}); err != nil {
		t.Errorf("cut private data: %v", err)
	}
}
