//go:build unix

package main

import (
	"syscall"
	"time"
)

// processCPU is the CPU time the whole process has used, in user space
// and in the kernel on its behalf (getrusage); ok is false where it cannot
// be read.
func processCPU() (user, system time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0, false
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano()), true
}
