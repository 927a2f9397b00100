//go:build !linux

package bridge

import "fmt"

// pinThread needs Linux's sched_setaffinity.
func pinThread(cpu int) error {
	return fmt.Errorf("pin to CPU %d: %w", cpu, ErrNotSupported)
}

// allowedCPUs needs Linux's sched_getaffinity.
func allowedCPUs() (map[int]bool, error) {
	return nil, fmt.Errorf("the CPUs the process may run on: %w", ErrNotSupported)
}
