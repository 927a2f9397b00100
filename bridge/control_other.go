//go:build !linux

package bridge

import (
	"fmt"
	"net"
	"runtime"
)

// peerCred is the process at the other end of c: unknown off Linux (no
// SO_PEERCRED), so the control socket refuses its requests.
func peerCred(*net.UnixConn) (Peer, error) {
	return Peer{}, fmt.Errorf("peer credentials on %s: %w", runtime.GOOS, ErrNotSupported)
}

// canWriteDir reports whether the process may make files in dir: not
// known here; making the socket will say.
func canWriteDir(string) error { return nil }
