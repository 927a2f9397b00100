// Package rpcrdma is the wire format of RPC-over-RDMA version 1 (RFC
// 8166, NFS over RDMA's transport; RFC 8797's connection private data),
// as typed views for a gateway that parses the transport headers passing
// through it and rewrites their RDMA segments in place to point at its
// own staging memory.
//
// Every SEND of an RPC-over-RDMA connection starts with a transport
// header; the RPC message (untouched here: RPCSEC_GSS may sign it)
// follows it, or travels in a chunk:
//
//	requester (NFS client) -> responder (nfsd): call
//	+-------------+-----------+------------+-------------+--------------+
//	| xid vers    | read list | write list | reply chunk | RPC call     |
//	| credit proc | (responder| (responder | (responder  | (RDMA_MSG)   |
//	|             |  READs)   |  WRITEs)   |  WRITEs)    |              |
//	+-------------+-----------+------------+-------------+--------------+
//	responder -> requester: reply, the same header: the write list and
//	reply chunk echoed with the bytes written in each segment, then the
//	RPC reply (RDMA_MSG) or nothing (RDMA_NOMSG: it is in the reply
//	chunk); or RDMA_ERROR (ERR_VERS, ERR_CHUNK).
//
// A segment names requester memory as handle (the RDMA key), length and
// 64-bit offset (the address). Parse checks a header and returns a
// Message; its Segments iterate over every segment with where it lies,
// as views whose setters rewrite it in place without allocating:
//
//	m, n, err := rpcrdma.Parse(msg)
//	if err != nil { /* not RPC-over-RDMA version 1 */ }
//	for s := range m.Segments() {
//		s.Segment.SetHandle(stagingRKey)
//		s.Segment.SetOffset(stagingAddr)
//	}
//	body := msg[n:] // the RPC message of an RDMA_MSG
//
// Every layout is checked against the Linux kernel (6.1):
// include/linux/sunrpc/rpc_rdma.h, the client's
// net/sunrpc/xprtrdma/rpc_rdma.c (rpcrdma_marshal_req, the reply
// handler) and the server's svc_rdma_recvfrom.c (svc_rdma_xdr_decode_req)
// and svc_rdma_sendto.c (svc_rdma_encode_write_list, _reply_chunk,
// svc_rdma_send_error_msg). All fields are big-endian XDR words.
//
// Files:
//
//   - header.go: Header (the fixed words), Proc, ErrCode
//   - segment.go: Segment, ReadSegmentFields, List, SegmentRef
//   - message.go: Parse, Message (the chunk lists), MessageFields, Append
//   - connect.go: ConnectPrivate, RFC 8797's rdma_cm private data
//   - errors.go: Error and the sentinels it wraps
//
// Parsers return (view, n, err), never panic on short or malformed
// input, and do not allocate unless they fail.
package rpcrdma
