//go:build !linux

package leg

import "fmt"

// PinThread needs Linux's sched_setaffinity.
func PinThread(cpu int) error {
	return fmt.Errorf("pin to CPU %d: %w", cpu, ErrNotSupported)
}

// AllowedCPUs needs Linux's sched_getaffinity.
func AllowedCPUs() (map[int]bool, error) {
	return nil, fmt.Errorf("the CPUs the process may run on: %w", ErrNotSupported)
}

// threadID has no meaning outside Linux here: 0.
func threadID() int { return 0 }
