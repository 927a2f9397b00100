package cm

import "fmt"

// MTU is an InfiniBand path MTU code (IBA 14.2.5.4, the REQ's Path Packet
// Payload MTU).
type MTU uint8

// Path MTU codes.
const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes returns the MTU in bytes, 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// MTUFromBytes returns the code of the largest MTU not above n (MTU256
// below 512).
func MTUFromBytes(n int) MTU {
	m := MTU256
	for m < MTU4096 && (m+1).Bytes() <= n {
		m++
	}
	return m
}

func (m MTU) String() string {
	if b := m.Bytes(); b != 0 {
		return fmt.Sprint(b)
	}
	return fmt.Sprintf("MTU(%d)", uint8(m))
}

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
