//go:build !linux

package portcounters

import (
	"fmt"

	"github.com/rbridge/rbridge/roce"
)

// Read needs Linux's sysfs.
func Read(sysRoot, device string, port int) (Port, error) {
	return Port{}, fmt.Errorf("read %s port %d: %w", device, port, roce.ErrNotSupported)
}
