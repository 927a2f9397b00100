//go:build linux

package udpconn

import "testing"

// ListenFree is listenFree, for the external tests.
func ListenFree(t testing.TB, ip string, o Options) *Conn { return listenFree(t, ip, o) }
