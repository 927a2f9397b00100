// Package ibv is rbridge's binding of libibverbs and librdmacm (cgo): devices,
// ports, GID tables, protection domains, memory regions over mmap'd arenas,
// completion queues wired into Go's poller, RC and UD queue pairs, address
// handles, SRQs, type 2 memory windows (bound and invalidated on a QP's send
// queue), async events, rdma_cm connection management and multicast
// joins (rdma_join_multicast_ex, full or send-only member). It drives
// real HCAs and the kernel's soft devices (rxe, siw).
//
// # Layout
//
// The cgo lives in thin files, one per verbs object: device_linux.go,
// pd_linux.go, mr_linux.go, mw_linux.go, cq_linux.go, qp_linux.go, ah_linux.go,
// srq_linux.go, cm_linux.go, mcast_linux.go. Everything above them is plain Go and builds
// everywhere: the enums (enums.go), a memory window's life and bind checks
// (mw.go), MTU negotiation (mtu.go), the GID choice (gid.go: the RoCEv2
// GID of an address, or GID 0 of the port under an IPoIB netdev), the
// object tree that makes Close idempotent and
// order-independent (resource.go) and the `rbridge devices` report
// (report.go). A build without cgo, or with the tag noibverbs (cgo but no
// libibverbs-dev/librdmacm-dev), compiles stub.go instead: every constructor
// returns an error that matches [ErrNotSupported].
//
// # Memory
//
// Memory handed to [PD.RegMR] must not live on the Go heap: use [MapArena]
// (anonymous mmap, optionally huge pages). Work requests are built in C
// memory owned by the QP and posted in batches with one cgo call;
// completions are polled in batches with one cgo call straight into the
// caller's []WorkCompletion.
//
// # rdma_cm and the path MTU
//
// On the IB transport (InfiniBand, RoCE) an RC QP made by [CMID.CreateQP] is
// moved to RTR and RTS by rbridge, not by librdmacm: in [CMID.Accept] on the
// passive side and in [EventChannel.Next] on the active side (the REP's
// CMConnectResponse becomes CMEstablished). Its path MTU is the minimum of
// both ends' active MTUs, which rdma_cm alone does not give; two rbridge
// ends tell each other theirs in the last 4 bytes of the private data.
// cmmtu.go has the details, and what happens against an unmodified peer.
//
// # Lifetime
//
// Every object has an idempotent Close. Objects form a tree (device -> PD ->
// MR, QP, AH, SRQ, MW; MR -> the MWs last bound to it; device -> CQ -> QP;
// event channel -> cm_id -> QP): closing
// a parent closes what depends on it first, so objects may be closed in any
// order. [LiveObjects] counts what is still open, per type; tests check it
// is empty at the end.
package ibv
