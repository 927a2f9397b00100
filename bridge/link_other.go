//go:build !linux

package bridge

import "fmt"

// operState needs Linux's netlink.
func operState(ns, name string) (string, error) {
	return "", fmt.Errorf("interface %s: operational state: %w", name, ErrNotSupported)
}
