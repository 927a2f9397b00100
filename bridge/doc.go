// Package bridge is rbridge's gateway: it opens a configuration's legs,
// listens on every route, and for each client that connects pairs a queue
// pair on each leg in a session (package session) that relays between them
// with end-to-end completion, out of one registered memory pool (package
// pool).
//
// # An RC operation, from leg to leg
//
//   - gateway.go: StartGateway opens the legs behind one interface (leg:
//     listen, dial, status, link, counters, health) and runs each route's
//     accept loop: a client's connection request is answered only once the
//     target accepted on the other leg, then the two connections become a
//     session. fallback.go sends new sessions through a peer gateway while
//     a route's target does not answer; reload.go applies a changed
//     configuration without touching what did not change.
//   - the legs, one file per kind: leg_userspace.go (rbridge's own RoCEv2
//     transport over UDP or AF_XDP, with its CM on QP1), leg_verbs.go (an
//     HCA through libibverbs and librdmacm), leg_quic.go (a peer gateway
//     over QUIC: package tunnel's framing).
//   - the endpoints a session drives, one per kind: endpoint_userspace.go
//     (its responder hands every request to the session before anything
//     is acknowledged), endpoint_verbs.go (the HCA acknowledges SENDs as
//     they land; endpoint_verbs_status.go is the one table between verbs'
//     and transport's opcodes and statuses), endpoint_quic.go (Op and
//     Completion frames on the session's stream); endpoint_slots.go names
//     posted ops by work request ID.
//
// # A datagram
//
//   - ud.go: UD routes (SIDR answered once the target answered, a pair of
//     UD QPs per client), with leg_userspace_ud.go and leg_verbs_ud.go,
//     and udlimit.go's rate limits.
//   - mcast.go: multicast groups relayed between the legs, mcast_loop.go's
//     filter against a datagram coming back round, busypoll*.go's polled
//     receive loops; joined.go relays groups the members joined by IGMP or
//     MLD (joined_on).
//
// # Watching it
//
//   - gateway_status.go: Status (/status and rbridge status) and linkState;
//     metrics.go: the Prometheus collector that reads every counter's
//     Snapshot at scrape time; metrics_nic.go: a verbs port's counters;
//     admin.go: the admin server, reads over TCP (/metrics, /status,
//     /healthz; requests for a Host it does not know refused).
//     control.go: the control socket, changes over a unix socket
//     (/reload), its peers' credentials in control_linux.go.
//   - defaults.go: what the gateway takes when its options leave it out;
//     link_*.go: an interface's operational state; bindtodevice_*.go: a
//     quic leg's socket bound to its interface.
package bridge
