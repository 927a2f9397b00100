// Package gateway holds the guest tests of the rbridge command: `rbridge run`
// started with a config file between the guest's RoCE side (kernel rxe1,
// the user0 namespace) and its IB fabric (rxe2, rxe3), with unmodified
// rdma_cm tools (perftest, rping) on both sides.
package gateway
