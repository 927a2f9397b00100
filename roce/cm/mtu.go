package cm

import "github.com/rbridge/rbridge/roce"

// MTU is an InfiniBand path MTU code (IBA 14.2.5.4, the REQ's Path Packet
// Payload MTU), roce.MTU.
type MTU = roce.MTU

// Path MTU codes.
const (
	MTU256  = roce.MTU256
	MTU512  = roce.MTU512
	MTU1024 = roce.MTU1024
	MTU2048 = roce.MTU2048
	MTU4096 = roce.MTU4096
)

// MTUFromBytes returns the code of the largest MTU not above n, 0 below 256.
func MTUFromBytes(n int) MTU { return roce.MTUFromBytes(n) }

// trailerMTU returns the path MTU in bytes that rbridge's MTU trailer at
// the end of private data names, or 0 without one. Package ibv's rdma_cm
// ends end their REP's private data with 'r', 'b', 1 and the IB MTU code
// of the MTU they applied: the minimum of the REQ's and their port's
// active MTU (ibv/cmmtu.go). The active side must use the same.
func trailerMTU(pd []byte) int {
	n := len(pd)
	if n < 4 || pd[n-4] != 'r' || pd[n-3] != 'b' || pd[n-2] != 1 {
		return 0
	}
	return MTU(pd[n-1]).Bytes()
}
