package rpcrdma_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// Vectors built word by word from what the Linux kernel (6.1) writes:
// the client's rpcrdma_marshal_req (net/sunrpc/xprtrdma/rpc_rdma.c, with
// rpcrdma_encode_read_list, _write_list and _reply_chunk, "1 - PHLOO - 1
// - PHLOO - 0"), the server's svc_rdma_sendto and
// svc_rdma_send_error_msg (svc_rdma_sendto.c). Keys and addresses are of
// the shape FRWR gives (an 8-bit key byte in the rkey's low bits; a
// kernel virtual or DMA address). The RPC message that follows is cut to
// its first words (xid, msg_type): the transport never reads past them.
var vectors = []struct {
	name string
	// what the kernel does to write it
	source string
	hex    string
	want   rpcrdma.MessageFields
	body   int // bytes of RPC message after the header
}{
	{
		name:   "NFS READ call: a write chunk of one FRWR segment and the write pad",
		source: "rpcrdma_marshal_req with wtype rpcrdma_writech (XDRBUF_READ, results past the inline threshold): credit rb_max_requests (128), RDMA_MSG; rpcrdma_encode_write_list: present, segcount, the MR's segment, re_write_pad_mr's 4-byte segment (the payload is not XDR-aligned), absent; reply chunk absent",
		hex: `5a4b3c2d 1 80 0
			0
			1 2  4c5a01 100000 ffff8881068c0000  4c3f03 4 0000000107f3a000
			0
			0
			5a4b3c2d 0`,
		want: rpcrdma.MessageFields{XID: 0x5a4b3c2d, Vers: 1, Credits: 128, Proc: rpcrdma.ProcMsg,
			Writes: [][]rpcrdma.SegmentFields{{{Handle: 0x4c5a01, Length: 1 << 20, Offset: 0xffff8881068c0000}, {Handle: 0x4c3f03, Length: 4, Offset: 0x107f3a000}}}},
		body: 8,
	},
	{
		name:   "NFS WRITE call: a read chunk at the data's XDR position",
		source: "rpcrdma_marshal_req with rtype rpcrdma_readch (XDRBUF_WRITE): rpcrdma_encode_read_list: present, position (the data's offset in the RPC message, 0x8c), handle, length, offset, absent; write list and reply chunk absent",
		hex: `5a4b3c2e 1 80 0
			1 8c 4c5b07 20000 ffff888104200000
			0
			0
			0
			5a4b3c2e 0`,
		want: rpcrdma.MessageFields{XID: 0x5a4b3c2e, Vers: 1, Credits: 128, Proc: rpcrdma.ProcMsg,
			Reads: []rpcrdma.ReadSegmentFields{{Position: 0x8c, SegmentFields: rpcrdma.SegmentFields{Handle: 0x4c5b07, Length: 0x20000, Offset: 0xffff888104200000}}}},
		body: 8,
	},
	{
		name:   "long call: the whole RPC message in a position-zero read chunk, and a reply chunk",
		source: "rpcrdma_marshal_req with rtype rpcrdma_areadch (arguments past the inline threshold, no DDP): RDMA_NOMSG, the read list's segments at position 0 (two MRs), absent; write list absent; rpcrdma_encode_reply_chunk (wtype rpcrdma_replych): present, segcount 1, the segment",
		hex: `5a4b3c2f 1 80 1
			1 0 4c5c11 1000 ffff888106a31000
			1 0 4c5d12 234 ffff888106a32000
			0
			0
			1 1 4c5e13 8000 ffff888106b00000`,
		want: rpcrdma.MessageFields{XID: 0x5a4b3c2f, Vers: 1, Credits: 128, Proc: rpcrdma.ProcNoMsg,
			Reads: []rpcrdma.ReadSegmentFields{
				{SegmentFields: rpcrdma.SegmentFields{Handle: 0x4c5c11, Length: 0x1000, Offset: 0xffff888106a31000}},
				{SegmentFields: rpcrdma.SegmentFields{Handle: 0x4c5d12, Length: 0x234, Offset: 0xffff888106a32000}}},
			Reply: []rpcrdma.SegmentFields{{Handle: 0x4c5e13, Length: 0x8000, Offset: 0xffff888106b00000}}},
	},
	{
		name:   "nfsd's reply to the READ call: the write list echoed with what it wrote",
		source: "svc_rdma_sendto: the call's xid and version, sc_fc_credits (64), RDMA_MSG; svc_rdma_encode_read_list: absent; svc_rdma_encode_write_chunk: present, ch_segcount, each segment's handle and offset with min(remaining, length) (12 KiB of data: the pad segment gets 0), absent; reply chunk absent",
		hex: `5a4b3c2d 1 40 0
			0
			1 2  4c5a01 3000 ffff8881068c0000  4c3f03 0 0000000107f3a000
			0
			0
			5a4b3c2d 1`,
		want: rpcrdma.MessageFields{XID: 0x5a4b3c2d, Vers: 1, Credits: 64, Proc: rpcrdma.ProcMsg,
			Writes: [][]rpcrdma.SegmentFields{{{Handle: 0x4c5a01, Length: 0x3000, Offset: 0xffff8881068c0000}, {Handle: 0x4c3f03, Offset: 0x107f3a000}}}},
		body: 8,
	},
	{
		name:   "nfsd's long reply: RDMA_NOMSG, the reply chunk echoed with the reply's length",
		source: "svc_rdma_sendto with a reply chunk (svc_rdma_send_reply_chunk wrote rc_size bytes): RDMA_NOMSG; read and write lists absent; svc_rdma_encode_reply_chunk: present, segcount, the segment with rc_size",
		hex: `5a4b3c2f 1 40 1
			0
			0
			1 1 4c5e13 1a74 ffff888106b00000`,
		want: rpcrdma.MessageFields{XID: 0x5a4b3c2f, Vers: 1, Credits: 64, Proc: rpcrdma.ProcNoMsg,
			Reply: []rpcrdma.SegmentFields{{Handle: 0x4c5e13, Length: 0x1a74, Offset: 0xffff888106b00000}}},
	},
	{
		name:   "nfsd's ERR_CHUNK",
		source: "svc_rdma_send_error_msg for a call whose chunks it could not use (-EINVAL, -E2BIG): the call's xid and version, sc_fc_credits, RDMA_ERROR, err_chunk",
		hex:    `5a4b3c30 1 40 4 2`,
		want:   rpcrdma.MessageFields{XID: 0x5a4b3c30, Vers: 1, Credits: 64, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk},
	},
	{
		name:   "nfsd's ERR_VERS",
		source: "svc_rdma_send_error_msg for -EPROTONOSUPPORT: err_vers, then rpcrdma_version twice (low, high)",
		hex:    `5a4b3c31 1 40 4 1 1 1`,
		want:   rpcrdma.MessageFields{XID: 0x5a4b3c31, Vers: 1, Credits: 64, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrVers, VersLow: 1, VersHigh: 1},
	},
}

// TestVectors parses each vector, compares its fields and the segments'
// places, and encodes the fields back to the same bytes.
func TestVectors(t *testing.T) {
	for _, v := range vectors {
		t.Run(v.name, func(t *testing.T) {
			b := words(t, v.hex)
			m, n, err := rpcrdma.Parse(b)
			if err != nil {
				t.Fatalf("parse (%s): %v", v.source, err)
			}
			if n != len(b)-v.body {
				t.Errorf("header of %d bytes, want %d", n, len(b)-v.body)
			}
			if diff := cmp.Diff(v.want, m.Fields()); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if got := rpcrdma.Append(nil, &v.want); !bytes.Equal(got, b[:n]) {
				t.Errorf("Append:\n got % x\nwant % x", got, b[:n])
			}
			if l := v.want.Len(); l != n {
				t.Errorf("Len %d, want %d", l, n)
			}
			for s := range m.Segments() {
				if !bytes.Equal(b[s.Off:s.Off+rpcrdma.SegmentLen], s.Segment) {
					t.Errorf("%v segment %d.%d: Off %d does not hold it", s.List, s.Chunk, s.Index, s.Off)
				}
			}
		})
	}
}

// TestConnectPrivateVectors: the Linux client's and server's private
// data.
func TestConnectPrivateVectors(t *testing.T) {
	for _, v := range []struct {
		name, source, hex string
		want              rpcrdma.ConnectPrivateFields
	}{
		{"client", "rpcrdma_ep_create: magic, version 1, RPCRDMA_CMP_F_SND_W_INV_OK, re_inline_send and re_inline_recv (4 KiB: RPCRDMA_DEF_INLINE) encoded",
			"f6ab0e18 01010303", rpcrdma.ConnectPrivateFields{Flags: rpcrdma.FlagSendWithInvalidateOK, SendSize: 4096, RecvSize: 4096}},
		{"server", "svc_rdma_accept: magic, version 1, flags 0, sc_max_req_size (svcrdma_max_req_size, 4 KiB) for both",
			"f6ab0e18 01000303", rpcrdma.ConnectPrivateFields{SendSize: 4096, RecvSize: 4096}},
	} {
		b := words(t, v.hex)
		c, n, err := rpcrdma.ParseConnectPrivate(append(b, make([]byte, 48)...)) // rdma_cm pads
		if err != nil || n != rpcrdma.ConnectPrivateLen {
			t.Fatalf("%s (%s): n=%d err=%v", v.name, v.source, n, err)
		}
		if diff := cmp.Diff(v.want, c.Fields()); diff != "" {
			t.Errorf("%s (-want +got):\n%s", v.name, diff)
		}
		if got := rpcrdma.AppendConnectPrivate(nil, &v.want); !bytes.Equal(got, b) {
			t.Errorf("%s: Append % x, want % x", v.name, got, b)
		}
	}
}
