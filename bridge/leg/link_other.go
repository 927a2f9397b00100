//go:build !linux

package leg

import (
	"context"
	"fmt"
	"net/netip"
)

// OperState needs Linux's netlink.
func OperState(ns, name string) (string, error) {
	return "", fmt.Errorf("interface %s: operational state: %w", name, ErrNotSupported)
}

// HoldsAddr needs Linux's netlink.
func HoldsAddr(ns, name string, ip netip.Addr) (bool, error) {
	return false, fmt.Errorf("interface %s: addresses: %w", name, ErrNotSupported)
}

// WatchLink needs Linux's netlink.
func WatchLink(ctx context.Context, ns, name string, changed func(), lost func(error)) error {
	return fmt.Errorf("interface %s: link updates: %w", name, ErrNotSupported)
}
