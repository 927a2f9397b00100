package cm

import "github.com/rbridge/rbridge/roce"

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
	return roce.MTU(pd[n-1]).Bytes()
}
