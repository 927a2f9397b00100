//go:build !linux

package leg

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
)

// Link is a leg's interface; reading it needs Linux's netlink.
type Link struct{}

// ErrNoInterface is a Link's interface no longer in its namespace.
var ErrNoInterface = errors.New("no such interface")

// OpenLink opens a link that cannot be read: its reads need Linux's
// netlink, and say so.
func OpenLink(ns, name string) (*Link, error) { return &Link{}, nil }

func (l *Link) Close() error { return nil }

func (l *Link) unsupported(what string) error {
	return fmt.Errorf("%s: %w", what, ErrNotSupported)
}

func (l *Link) OperState() (string, int, error) { return "", 0, l.unsupported("operational state") }

func (l *Link) HoldsAddr(netip.Addr) (bool, error) { return false, l.unsupported("addresses") }

func (l *Link) NetnsMoved() string { return "" }

func (l *Link) Watch(context.Context, func(), func(error)) error {
	return l.unsupported("link updates")
}

// HoldsAddr needs Linux's netlink.
func HoldsAddr(ns, name string, ip netip.Addr) (bool, error) {
	return false, fmt.Errorf("interface %s: addresses: %w", name, ErrNotSupported)
}
