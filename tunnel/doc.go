// Package tunnel is the wire format and the QUIC transport of rbridge's
// gateway-to-gateway leg: RDMA operations framed over QUIC streams with
// mutual TLS, so that two rbridge gateways carry RDMA sessions across a
// link where RoCE's go-back-N would collapse (delay, loss), or over IPoIB
// when a route's RDMA path is down.
//
// # Sessions and streams
//
// One QUIC connection joins a pair of gateways (ALPN "rbridge-tunnel/1",
// both ends present a certificate signed by the configured CA); every
// session is one bidirectional stream on it, opened by the gateway whose
// client connected. The stream starts with connection management, end to
// end: the opener sends Open (the client's and the target's address, the
// client's private data and READ/atomic depths), the far gateway connects
// to the target on its own leg and answers Accept (the target's private
// data and depths, and how many operations it takes in flight) or Reject
// (the target's reason and private data). Then each side sends Op frames
// for the operations its peer's requester issued, in order, and Completion
// frames for the Ops it received, naming them by id, once its own far leg
// completed them: a gateway acknowledges its RoCE requester only after the
// Completion arrived, so the end-to-end rule holds across the tunnel.
// Close ends the session either way (a disconnect, a failure and why).
//
// # Framing
//
// Every frame is an 8-byte Header (type, body length) and a body: a fixed
// part per type, then a variable part (private data, payload, READ data,
// a reason's text). Parsers check every length and value and return an
// error naming what is wrong; they never panic on any input (fuzzed).
// Serializers append to a caller's buffer; payload bytes are written by
// the caller after the fixed part, from wherever they lie.
package tunnel
