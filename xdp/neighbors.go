package xdp

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Neighbors gives the Ethernet address that frames to a peer's IP address
// go to: the peer's own on the same link, the gateway's for a routed peer.
// An AF_XDP Conn builds its frames itself, so it needs one; it asks on its
// send path, so Lookup must not wait for the network.
type Neighbors interface {
	// Lookup returns ip's Ethernet address; or, while the address is
	// being resolved, a channel that is closed when that resolution ends,
	// to ask again then; or an error (wrapping ErrNoNeighbor for an
	// address nobody answers for).
	Lookup(ip netip.Addr) (mac net.HardwareAddr, pending <-chan struct{}, err error)
}

// ErrNoNeighbor is returned when a Neighbors does not know an address.
var ErrNoNeighbor = errors.New("xdp: no neighbor entry")

// StaticNeighbors is a fixed table of neighbors.
type StaticNeighbors map[netip.Addr]net.HardwareAddr

var _ Neighbors = StaticNeighbors(nil)

// Lookup implements Neighbors: an address is in the table or it is not.
func (s StaticNeighbors) Lookup(ip netip.Addr) (net.HardwareAddr, <-chan struct{}, error) {
	if mac, ok := s[ip.Unmap()]; ok {
		return mac, nil, nil
	}
	return nil, nil, fmt.Errorf("%w for %v", ErrNoNeighbor, ip)
}
