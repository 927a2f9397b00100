package staging_test

import (
	"bytes"
	"testing"

	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// FuzzNFSConn hands a connection a random call then a random reply, cut
// at random into pieces, with and without staging: it never panics; it
// takes a message exactly when rpcrdma.Parse takes its header (and an
// RDMA_MSG has an RPC message), counting a refusal once; a staged call's
// regions are its segments of a length above 0; and the RPC message
// after the header is never written.
func FuzzNFSConn(f *testing.F) {
	for _, b := range [][]byte{
		nfsMsg(rpcrdma.MessageFields{XID: 2, Proc: rpcrdma.ProcMsg, Reads: []rpcrdma.ReadSegmentFields{{Position: 0x8c, SegmentFields: seg(0x11, 8192, 0x10000)}}}, 0),
		nfsMsg(rpcrdma.MessageFields{XID: 3, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{seg(0x12, 65536, 0x20000), seg(0x13, 4, 0x30000)}}}, 0),
		nfsMsg(rpcrdma.MessageFields{XID: 5, Proc: rpcrdma.ProcNoMsg, Reads: []rpcrdma.ReadSegmentFields{{SegmentFields: seg(0x15, 6000, 0x50000)}}, Reply: []rpcrdma.SegmentFields{seg(0x16, 100, 0)}}, 0),
		nfsMsg(rpcrdma.MessageFields{XID: 5, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk}, 0),
	} {
		f.Add(b, b, true, uint16(len(b)/2))
		f.Add(b, nfsMsg(rpcrdma.MessageFields{XID: 3, Proc: rpcrdma.ProcMsg, Writes: [][]rpcrdma.SegmentFields{{seg(0xe000, 100, 0x5000_0000_0000), seg(0x13, 0, 0x30000)}}}, 1), true, uint16(3))
	}
	f.Fuzz(func(t *testing.T, call, reply []byte, stage bool, cut uint16) {
		st := &staging.Stats{}
		c := newNFS(t, st, "")
		send := message
		if stage {
			send = stagedMessage
		}
		for i, b := range [][]byte{call, reply} {
			dir := []int{fromClient, fromServer}[i]
			at := int(cut) % (len(b) + 1)
			m, err := send(c, dir, 1, b, at)
			h, n, perr := rpcrdma.Parse(b)
			if perr == nil && err != nil {
				// Refused for what the header says: no RPC message, or
				// what the gateway cannot stage.
				if h.Proc() != rpcrdma.ProcMsg && h.Proc() != rpcrdma.ProcMsgP && !stage {
					t.Fatalf("% x refused: %v", b, err)
				}
				return
			}
			if perr != nil {
				if err == nil {
					t.Fatalf("% x accepted; Parse says %v", b, perr)
				}
				s := st.Snapshot()
				if s.Errors[staging.WhyMalformedCommand]+s.Errors[staging.WhyMalformedCompletion] != 1 {
					t.Fatalf("a refusal counted %+v", s.Errors)
				}
				return
			}
			got := bytes.Join(m.Bytes, nil)
			if !bytes.Equal(got[n:], b[n:]) {
				t.Fatal("the RPC message was written")
			}
			if dir == fromClient && stage {
				k := 0
				for s := range h.Segments() {
					if s.Segment.Length() > 0 {
						k++
					}
				}
				if len(m.Stage) != k {
					t.Fatalf("%d regions for %d segments", len(m.Stage), k)
				}
				for j := range m.Stage {
					if err := c.Restage(fromClient, m.Tag, m.Bytes, j, 0x5000_0000_0000, 0xe000); err != nil {
						t.Fatalf("restage %d: %v", j, err)
					}
				}
			}
		}
	})
}
