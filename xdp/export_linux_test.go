package xdp

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// RefuseNeedWakeup has binds with XDP_USE_NEED_WAKEUP fail with EINVAL, as
// a kernel before 5.4 answers a bind flag it does not know, until undo;
// refused counts the binds it failed. Tests that call it do not run in
// parallel.
func RefuseNeedWakeup() (refused *atomic.Int64, undo func()) {
	refused = new(atomic.Int64)
	bind = func(fd int, sa unix.Sockaddr) error {
		if x, ok := sa.(*unix.SockaddrXDP); ok && x.Flags&unix.XDP_USE_NEED_WAKEUP != 0 {
			refused.Add(1)
			return unix.EINVAL
		}
		return unix.Bind(fd, sa)
	}
	return refused, func() { bind = unix.Bind }
}
