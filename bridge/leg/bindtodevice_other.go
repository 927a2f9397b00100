//go:build !linux

package leg

import "fmt"

// bindToDevice ties a socket to an interface: Linux only.
func bindToDevice(int, string) error {
	return fmt.Errorf("binding a socket to an interface: %w", ErrNotSupported)
}
