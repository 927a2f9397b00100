//go:build !linux

package portcounters

import (
	"fmt"

	"github.com/rbridge/rbridge/roce"
)

// ReadState needs Linux's sysfs.
func ReadState(sysRoot, device string, port int) (state, physState string, err error) {
	return "", "", fmt.Errorf("read %s port %d state: %w", device, port, roce.ErrNotSupported)
}

// Read needs Linux's sysfs.
func Read(sysRoot, device string, port int) (Port, error) {
	return Port{}, fmt.Errorf("read %s port %d: %w", device, port, roce.ErrNotSupported)
}
