package ibv

import (
	"fmt"
	"syscall"
)

// CMEventError is an unexpected rdma_cm event.
type CMEventError struct {
	Want, Got CMEventType
	Status    int
}

func (e *CMEventError) Error() string {
	return fmt.Sprintf("rdma_cm: want %v, got %v (status %d)", e.Want, e.Got, e.Status)
}

// Unwrap gives the status as a syscall.Errno when it is a negative errno.
func (e *CMEventError) Unwrap() error {
	if e.Status < 0 {
		return syscall.Errno(-e.Status)
	}
	return nil
}
