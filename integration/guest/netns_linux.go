package guest

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs f on an OS thread that has entered the namespace and returns f's
// error. Sockets that f opens stay in the namespace after Do returns, so f
// can open them and hand them out. The thread is never returned to the Go
// scheduler: it exits with the goroutine that ran f.
func (n Netns) Do(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		// No UnlockOSThread: the thread is in another namespace and must die with this goroutine.
		runtime.LockOSThread()
		fd, err := os.Open(n.Path)
		if err != nil {
			errc <- fmt.Errorf("enter netns %s: %w", n.Name, err)
			return
		}
		defer fd.Close()
		if err := unix.Setns(int(fd.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("enter netns %s: setns: %w", n.Name, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}
