//go:build linux

package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f in the network namespace name ("" is the caller's own, where f
// runs as is) and returns f's error. f runs on an OS thread that entered
// the namespace and is never returned to the Go scheduler: it exits with
// the goroutine that ran f, so no other goroutine runs in that namespace
// by accident.
func Do(name string, f func() error) error {
	if name == "" {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := os.Open(Path(name))
		if err != nil {
			errc <- fmt.Errorf("network namespace %s: %w", name, err)
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			if errors.Is(err, unix.EPERM) {
				err = fmt.Errorf("%w: entering another network namespace needs CAP_SYS_ADMIN: run as root", err)
			}
			errc <- fmt.Errorf("enter network namespace %s: %w", name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
