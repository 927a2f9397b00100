//go:build !linux

package xdp

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
)

// Resolver resolves peers' IP addresses through the kernel's neighbour
// table; rtnetlink is Linux only, so NewResolver fails here with
// ErrNotSupported.
type Resolver struct {
	stats ResolverStats
}

var _ Neighbors = (*Resolver)(nil)

// NewResolver returns an error matching ErrNotSupported: rtnetlink is
// Linux only.
func NewResolver(opts ResolverOptions) (*Resolver, error) {
	return nil, fmt.Errorf("%w: the kernel's neighbour table on %s", ErrNotSupported, runtime.GOOS)
}

// Stats returns the resolver's counters.
func (r *Resolver) Stats() *ResolverStats { return &r.stats }

// Lookup implements Neighbors.
func (r *Resolver) Lookup(ip netip.Addr) (net.HardwareAddr, <-chan struct{}, error) {
	return nil, nil, fmt.Errorf("%w: resolve %v on %s", ErrNotSupported, ip, runtime.GOOS)
}

// HardwareAddr returns an error matching ErrNotSupported.
func (r *Resolver) HardwareAddr(ip netip.Addr) (net.HardwareAddr, error) {
	_, _, err := r.Lookup(ip)
	return nil, err
}

// Close releases nothing.
func (r *Resolver) Close() error { return nil }

// Unanswered returns nothing: nothing is resolved here.
func (r *Resolver) Unanswered() []netip.Addr { return nil }
