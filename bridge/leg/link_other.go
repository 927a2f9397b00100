//go:build !linux

package leg

import "fmt"

// OperState needs Linux's netlink.
func OperState(ns, name string) (string, error) {
	return "", fmt.Errorf("interface %s: operational state: %w", name, ErrNotSupported)
}
