package ibv

import "fmt"

// Path MTU over rdma_cm (IB transport: InfiniBand and RoCE).
//
// rdma_cm alone does not give both ends the minimum of their active MTUs.
// The active side's route carries its own MTU (on RoCE, what its netdev
// carries, iboe_get_mtu) in the REQ; the passive side's kernel CM takes the
// REQ's MTU as is, and the REP carries none back. An end with a smaller MTU
// than its peer then has QPs sized for the larger one, and every packet
// bigger than its link's MTU is dropped on the wire.
//
// So rbridge moves the QPs of its rdma_cm connections itself
// (rdma_init_qp_attr, then ibv_modify_qp with path_mtu lowered), and two
// rbridge ends tell each other their MTU in the last 4 bytes of the
// connection's private data (an MTU trailer: 'r', 'b', 1, enum ibv_mtu):
//
//   - connect (REQ): the active end sends min(route MTU, local port's active
//     MTU) at bytes 52-55 of the 56 that rdma_cm gives the REQ; the caller
//     has 52.
//   - accept (REP): the passive end applies min(REQ's MTU, its port's active
//     MTU, the active end's trailer) and sends what it applied at bytes
//     192-195 of the REP's 196; the caller has 192.
//   - on the REP, the active end applies min(route MTU, its port's active
//     MTU, the passive end's trailer).
//
// Both ends end with min(route MTU, active MTU of each port). The trailer is
// taken off the private data the caller sees. Against an unmodified peer
// (no trailer), each end uses what rdma_cm gives, lowered to its own port's
// active MTU: right when the unmodified end is the one with the smaller MTU,
// or when it is the passive end; an unmodified active end with a larger MTU
// than rbridge's passive end keeps its larger MTU (nothing in rdma_cm tells
// it otherwise), and must be configured down, as between any two rdma_cm
// applications. On iWARP (siw) there is no path MTU: TCP segments the
// stream, and rdma_cm moves the QP as before.

const (
	cmREQPrivateData = 56  // IB CM REQ private data (92) less rdma_cm's header (36)
	cmREPPrivateData = 196 // IB CM REP private data
	mtuTrailerLen    = 4
)

var mtuTrailerMagic = [3]byte{'r', 'b', 1}

// MaxConnectPrivateData and MaxAcceptPrivateData are how many bytes of
// private data the caller has on an RC connection over the IB transport
// (InfiniBand, RoCE): rdma_cm's limits less the 4-byte MTU trailer.
const (
	MaxConnectPrivateData = cmREQPrivateData - mtuTrailerLen // 52
	MaxAcceptPrivateData  = cmREPPrivateData - mtuTrailerLen // 192
)

// withMTUTrailer pads data to size-4 bytes and appends the MTU trailer.
func withMTUTrailer(data []byte, size int, m MTU) ([]byte, error) {
	if len(data) > size-mtuTrailerLen {
		return nil, fmt.Errorf("%d bytes of private data, at most %d on this transport (rbridge keeps the last %d for the path MTU)", len(data), size-mtuTrailerLen, mtuTrailerLen)
	}
	out := make([]byte, size)
	copy(out, data)
	copy(out[size-mtuTrailerLen:], mtuTrailerMagic[:])
	out[size-1] = byte(m)
	return out, nil
}

// splitMTUTrailer takes the MTU trailer off private data received over the
// IB transport (rdma_cm gives it padded to its full size). Without a valid
// trailer (an unmodified peer) data is returned whole, with MTU 0.
func splitMTUTrailer(data []byte) ([]byte, MTU) {
	n := len(data)
	if n < mtuTrailerLen || [3]byte(data[n-mtuTrailerLen:n-1]) != mtuTrailerMagic || !MTU(data[n-1]).Valid() {
		return data, 0
	}
	return data[:n-mtuTrailerLen], MTU(data[n-1])
}

// capMTU is the largest path MTU an end may apply: the minimum of what it
// knows (zero values are unknown and do not count), or 0 if it knows
// nothing.
func capMTU(ms ...MTU) MTU {
	var c MTU
	for _, m := range ms {
		if m.Valid() && (c == 0 || m < c) {
			c = m
		}
	}
	return c
}
