//go:build linux

package udpconn

import (
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/needs"
)

// TestSocketBuffersForced: with CAP_NET_ADMIN (root) the receive buffer
// is what Listen asks for, past net.core.rmem_max, so a kernel peer's
// READ responses (all their packets at once) are not dropped at the
// socket; the kernel reports twice the size it was given.
func TestSocketBuffersForced(t *testing.T) {
	needs.Root(t, "forcing socket buffers (CAP_NET_ADMIN)")
	b, err := os.ReadFile("/proc/sys/net/core/rmem_max")
	if err != nil {
		t.Fatal(err)
	}
	rmemMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Listen(Options{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), 0)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var got int
	var gerr error
	if err := c.rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if got != 2*rcvBuf {
		t.Errorf("SO_RCVBUF %d, want %d (2 x %d; net.core.rmem_max is %d)", got, 2*rcvBuf, rcvBuf, rmemMax)
	}
}
