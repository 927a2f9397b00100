// Package bridge joins rbridge's two legs: routes (a listener on one fabric
// mapped to a target on the other, with ACLs), sessions that pair a queue
// pair on each leg, the relay that moves work requests between them with end
// to end completion semantics, and the registered memory pool (one hugepage
// backed arena, carved into refcounted size classes, registered once with
// every protection domain and used as the AF_XDP UMEM).
//
// Built so far: the pool (pool.go) and the arena it carves (arena.go),
// which other users of large message memory map too (rbridge bench);
// sessions and the relay (session.go) between two Endpoints (endpoint.go):
// the userspace RoCEv2 transport's (userspace.go) and a verbs QP's
// (verbs.go); the gateway (gateway.go) that runs a config's legs
// (leg_userspace.go, leg_verbs.go) and routes; its admin server (admin.go)
// with the Prometheus collector that reads every counter's Snapshot at
// scrape time (metrics.go) and the gateway's Status (gateway_status.go);
// UD routes (ud.go: SIDR answered once the target answered, a pair of UD
// QPs per client; leg_userspace_ud.go, leg_verbs_ud.go) and multicast
// groups (mcast.go), with their rate limits (mcast_rate.go) and busy-poll
// receive loops (busypoll.go).
package bridge
