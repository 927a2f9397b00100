// Package gateway holds the guest tests of the rbridge command: `rbridge run`
// started with a config file between the guest's RoCE side (kernel rxe1,
// the user0 namespace) and its IB fabric (rxe2, rxe3), with unmodified
// rdma_cm tools (perftest, rping) on both sides; and two `rbridge run`
// processes in network namespaces of their own, joined by their quic legs
// over a delayed and lossy link, between rxe devices the test adds, next to
// the same tools straight across the same link (quic_test.go), and a route
// that falls back through the peer gateway when its own path is cut
// (fallback_test.go). BenchmarkGuestUDThroughVsDirect (ud_bench_test.go)
// measures datagrams per second on kernel rxe UD QPs through rbridge run,
// on a UD route and a group, next to the same traffic direct on each
// fabric; it runs only when asked (GUEST_BENCH).
package gateway
