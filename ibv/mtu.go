package ibv

import "github.com/rbridge/rbridge/roce"

// MTU is an InfiniBand path or port MTU (enum ibv_mtu), roce.MTU.
type MTU = roce.MTU

// MTUs.
const (
	MTU256  = roce.MTU256
	MTU512  = roce.MTU512
	MTU1024 = roce.MTU1024
	MTU2048 = roce.MTU2048
	MTU4096 = roce.MTU4096
)

// MTUFromBytes is the largest IB MTU that fits in n bytes of RDMA payload
// (for RoCE: what fits in a netdev MTU once the headers are taken off, see
// MTUForNetdev). It returns 0 when n < 256.
func MTUFromBytes(n int) MTU { return roce.MTUFromBytes(n) }

// roceOverhead is what the kernel's iboe_get_mtu (include/rdma/ib_addr.h)
// takes off a netdev MTU: GRH/IPv6 (40) + UDP (8) + BTH (12) + XRC ext (4) +
// AtomicETH (28) + ICRC (4).
const roceOverhead = 40 + 8 + 12 + 4 + 28 + 4 // 96

// MTUForNetdev is the IB MTU that a RoCE port over a netdev with the given
// IP MTU can carry (1500 -> 1024, 9000 -> 4096), as the kernel computes it.
func MTUForNetdev(ipMTU int) MTU { return MTUFromBytes(ipMTU - roceOverhead) }

// PathMTU is the path MTU for a connection: the minimum of the two ends'
// active MTUs. An unknown (zero or invalid) side does not count; when both
// are unknown the result is MTU1024, which every RoCE and IB port carries.
func PathMTU(local, remote MTU) MTU {
	switch {
	case !local.Valid() && !remote.Valid():
		return MTU1024
	case !local.Valid():
		return remote
	case !remote.Valid():
		return local
	}
	return min(local, remote)
}
