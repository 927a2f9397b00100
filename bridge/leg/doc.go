// Package leg is every fabric a gateway joins, behind one interface: Leg
// (listen, dial, and what status, metrics and health ask of it), with
// GroupLeg and UDLeg for the legs that carry multicast groups and UD
// routes. Opening a leg by its kind (OpenUserspace, OpenVerbs, OpenQUIC)
// is the one place that knows the kinds; nothing outside this package
// asks which kind a leg is.
//
// Files, one per kind and variant:
//   - leg_types.go: the interfaces (Leg, Listener, Incoming, Conn,
//     GroupLeg, UDLeg, UDPort), connection parameters and refusals, the UD
//     receive ring, the busy-poll Spin, a leg's Status and Counters;
//     ud_send.go: a UD port's sends outstanding, up to its window, each
//     buffer held until its completion (both UD ports' Send and Flush);
//   - leg_userspace.go, leg_userspace_ud.go: rbridge's own RoCEv2
//     transport over a UDP socket or AF_XDP, with its CM on QP1 (RC, then
//     UD and groups);
//   - leg_verbs.go, leg_verbs_ud.go: an HCA through libibverbs and
//     librdmacm (rxe, siw, real NICs), found by its ip (FindGID): the
//     RoCEv2 GID that holds it, or on an InfiniBand port GID 0 of the
//     port under the IPoIB interface that holds it;
//   - leg_quic.go: a peer rbridge gateway over QUIC (package tunnel's
//     framing), bound to an IPoIB interface with over:;
//   - endpoint_userspace.go, endpoint_verbs.go, endpoint_quic.go: each
//     kind's session.Endpoint, the RC connection a session drives;
//     endpoint_verbs_status.go is the one table between verbs' and
//     transport's opcodes and statuses; endpoint_slots.go names posted ops
//     by work request ID;
//   - spinloop.go: a busy-polled leg's loop (busy_poll), one locked OS
//     thread that polls the leg's device or CQs and runs its sessions'
//     relay inline;
//   - verbs_noport.go: what a verbs leg not found by its address says on
//     a host with no RDMA device or with InfiniBand ports (NoPortError);
//   - memlock.go: the hint a pinning (the pool's ibv_reg_mr, an AF_XDP
//     UMEM) that failed under RLIMIT_MEMLOCK carries;
//   - platform files: busypoll_*.go (pinning a polled loop to a CPU),
//     link_*.go (an interface's operational state), bindtodevice_*.go,
//     memlock_*.go (this process's RLIMIT_MEMLOCK).
//
// Package legtest holds the test doubles other packages' tests share: a
// pair of quic endpoints on loopback.
package leg
