//go:build linux && cgo && !noibverbs

package ibv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// pollFile makes a library-owned fd (a completion channel, the async event
// fd, an rdma_cm event channel) wait in Go's poller: the fd is set
// nonblocking and a dup of it, which shares its open file description and so
// its readiness, becomes an *os.File. Closing that file (which a blocked
// wait notices) leaves the library's fd alone.
func pollFile(fd int, name string) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("set %s nonblocking: %w", name, err)
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("dup %s: %w", name, err)
	}
	return os.NewFile(uintptr(nfd), name), nil
}

// waitRead calls try each time f is readable until try reports done, ctx
// ends or f is closed. try must not block: it reads with the library's
// nonblocking call and reports done=false on EAGAIN.
func waitRead(ctx context.Context, f *os.File, try func() (done bool)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		f.SetReadDeadline(dl)
	}
	var fired chan struct{}
	if ctx.Done() != nil {
		fired = make(chan struct{})
		stop := context.AfterFunc(ctx, func() {
			f.SetReadDeadline(time.Unix(1, 0))
			close(fired)
		})
		defer func() {
			if !stop() {
				<-fired
			}
			f.SetReadDeadline(time.Time{})
		}()
	}
	err = rc.Read(func(uintptr) bool { return try() })
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, os.ErrClosed):
		return ErrClosed
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The file's deadline, set from ctx's, can fire before ctx says
		// it is done: the wait ended because ctx's deadline passed.
		if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
			return context.DeadlineExceeded
		}
	}
	return err
}
