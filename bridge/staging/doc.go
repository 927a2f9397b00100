// Package staging is rbridge's understanding of the upper-layer protocols
// a route may carry (a route's protocol: key): one session.Protocol per
// session, which the session hands every SEND-family message it relays,
// whole, in both directions, before it is posted on the far side.
//
// It inspects and counts every message, and stages (design.md,
// "Protocol-aware staging"): where the peer that executes a command's
// one-sided operations sits behind a verbs leg (session.Message.Staging),
// it names each memory descriptor as a session.Region to stage, rewrites
// it to the staging the session exposed (session.Stager's Restage), and
// makes the protocol's own answer to a command the gateway cannot stage
// (Unstaged). The session moves the data (bridge/session/stage.go).
//
// Files:
//
//   - staging.go: New, the one switch from a route's protocol to its
//     Protocol; Options; the Stats every protocol counts into (one per
//     route and protocol, shared by the route's sessions) and Why, what
//     was wrong;
//   - nvme.go: NVMe over Fabrics on RDMA (package ulp/nvme parses): the
//     host side's messages are command capsules, the controller side's
//     completions, each matched to its command by command ID on its queue
//     (a session is one queue: the admin queue, or one I/O queue);
//   - nfs.go: NFS over RDMA, RPC-over-RDMA version 1 (package ulp/rpcrdma
//     parses): the client side's messages are calls, the server side's
//     replies, matched by XID on the connection (a session is one
//     connection); the segments of the calls' chunk lists are staged, and
//     the replies' echoes of them say what the server wrote;
//   - iser.go: iSER (package ulp/iser parses): the initiator's messages
//     are iSCSI PDUs under an iSER header whose SCSI Commands name STags,
//     the target's SCSI Responses end them by Initiator Task Tag (a
//     session is one connection); the login's text sizes unsolicited
//     data, and the connect's private data remote invalidation;
//   - srp.go: the SCSI RDMA Protocol (package ulp/srp parses): the
//     initiator's messages are SRP_CMDs whose direct or indirect
//     descriptors name its memory, the target's SRP_RSPs end them by tag
//     (a session is one channel); the login in the connect's private
//     data fixes where immediate data lies.
//
// Concurrency: a session calls its Protocol from both directions at once;
// each Protocol guards its state with a mutex of its own, a leaf lock
// (taken under the session's relay lock, never calling out). Stats are
// atomic counters.
package staging
