package leg

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/bridge/config"
)

// pinThread pins the calling OS thread to cpu.
func PinThread(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		return fmt.Errorf("sched_setaffinity to CPU %d: %w", cpu, err)
	}
	return nil
}

// allowedCPUs is the CPUs the process may run on.
func AllowedCPUs() (map[int]bool, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("sched_getaffinity: %w", err)
	}
	out := map[int]bool{}
	for c := range config.MaxCPU {
		if set.IsSet(c) {
			out[c] = true
		}
	}
	return out, nil
}

// threadID is the calling thread's ID (gettid).
func threadID() int { return unix.Gettid() }
