package bridge

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// peerCred is the process at the other end of c (SO_PEERCRED).
func peerCred(c *net.UnixConn) (Peer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var serr error
	if err := rc.Control(func(fd uintptr) {
		cred, serr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if serr != nil {
		return Peer{}, fmt.Errorf("SO_PEERCRED: %w", serr)
	}
	return Peer{PID: int(cred.Pid), UID: int(cred.Uid), GID: int(cred.Gid)}, nil
}

// canWriteDir reports whether the process may make files in dir.
func canWriteDir(dir string) error {
	return unix.Access(dir, unix.W_OK|unix.X_OK)
}
