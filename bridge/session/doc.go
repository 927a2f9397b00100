// Package session is rbridge's RC data plane, with no I/O of its own: a
// Session pairs two Endpoints (a connected RC queue pair on each leg) and
// relays every operation between them with end-to-end completion.
//
// Files, in the order an operation travels:
//   - endpoint.go: the Endpoint contract a leg implements (Post, Complete,
//     Limits, Close; Done in post order), the Handler it calls, the Op it
//     carries, and the optional Drainer and StartNotifier;
//   - session.go: a session's lifecycle (New, drain, teardown, Cut and
//     Close) and the relay: request, send, write and lend, pump, done;
//   - protocol.go: the Protocol a route may carry (Options.Protocol),
//     handed every SEND-family message whole (Message, its bytes as
//     Pieces) before the relay queues it, and each one's completion; a
//     refusal fails the message back and ends the session;
//   - stage.go: staging, for a Protocol that is a Stager, where the far
//     endpoint is an Exposer (a verbs QP, whose HCA executes its peer's
//     one-sided operations against gateway memory): a message's
//     descriptors rewritten to staging the far endpoint exposed, the data
//     pulled from the originator before the message goes on and pushed
//     to it before the response does, exposures revoked before the
//     response goes on, failures answered in place (routineStage,
//     routineRevoke).
//
// The endpoints live with their legs in package leg
// (bridge/leg/endpoint_*.go); the pool the relay takes its buffers from is
// package pool; the Protocols are in package staging. The tests run a
// session between a userspace endpoint and a fake far leg over a lossy
// simulated network (session_test.go, fake_test.go), and across a quic
// tunnel.
package session
