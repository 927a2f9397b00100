// Package ipoib knows IPoIB network devices (ARPHRD_INFINIBAND, the 20-byte
// hardware address made of QPN and GID, IP to GID neighbours, datagram versus
// connected MTU) and carries rbridge's fallback leg: RDMA operations framed
// over QUIC between rbridge instances when the RDMA path is down.
//
// Not implemented yet: this package holds only its documentation.
package ipoib
