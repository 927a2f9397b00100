// Package bridge is rbridge's gateway: it opens a configuration's legs,
// listens on every route, and for each client that connects pairs a queue
// pair on each leg in a session (package session) that relays between them
// with end-to-end completion, out of one registered memory pool (package
// pool).
//
// # An RC operation, from leg to leg
//
//   - gateway.go: StartGateway opens the legs (package leg: one interface,
//     listen, dial, status, link, counters, health) and runs each route's
//     accept loop: a client's connection request is answered only once the
//     target accepted on the other leg, then the two connections become a
//     session. fallback.go sends new sessions through a peer gateway while
//     a route's target does not answer; reload.go applies a changed
//     configuration without touching what did not change.
//   - the legs are package leg, behind one interface: rbridge's own
//     RoCEv2 transport (userspace), an HCA (verbs), a peer gateway (quic),
//     each with its session.Endpoint.
//
// # A datagram
//
//   - ud.go: UD routes (SIDR answered once the target answered, a pair of
//     UD QPs per client: each leg's UDPort), and udlimit.go's rate limits.
//   - mcast.go: multicast groups relayed between the legs (each leg's
//     GroupLeg port), mcast_loop.go's filter against a datagram coming
//     back round, busypoll.go's polled receive loops per direction;
//     joined.go relays groups the members joined by IGMP or MLD
//     (joined_on).
//   - udrelay.go: the relay both use, one per direction: batches
//     received, admitted or dropped by cause, posted on the other port
//     with a window of sends outstanding (leg.UDSendWindow), flushed
//     before it waits.
//
// # Watching it
//
//   - gateway_status.go: Status (/status and rbridge status) and linkState;
//     metrics.go: the Prometheus collector that reads every counter's
//     Snapshot at scrape time; metrics_nic.go: a verbs port's counters;
//     admin.go: the admin server, reads over TCP (/metrics, /status,
//     /healthz, /livez; requests for a Host it does not know refused);
//     ready.go: readiness (Ready, /healthz: every leg a route needs up)
//     beside liveness (Health, /livez and the systemd watchdog).
//     control.go: the control socket, changes over a unix socket
//     (/reload), its peers' credentials in control_linux.go.
//   - defaults.go: what the gateway takes when its options leave it out.
package bridge
