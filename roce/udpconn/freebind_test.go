//go:build linux

package udpconn_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/netns"
	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// TestFreeBind: an address no interface holds is refused, unless the conn
// asks to bind it free; such a conn receives what is sent to the address
// once the address arrives (as keepalived adds a VRRP virtual IP), and
// sends from it then, not before.
func TestFreeBind(t *testing.T) {
	// Documentation prefixes: on no host.
	for _, absent := range []netip.AddrPort{netip.MustParseAddrPort("192.0.2.77:4791"), netip.MustParseAddrPort("[2001:db8::77]:4791")} {
		if _, err := udpconn.Listen(udpconn.Options{Addr: absent}); !errors.Is(err, unix.EADDRNOTAVAIL) {
			t.Fatalf("listen on %v, an address no interface holds: %v, want EADDRNOTAVAIL", absent, err)
		}
		c, err := udpconn.Listen(udpconn.Options{Addr: absent, FreeBind: true})
		if err != nil {
			t.Fatalf("listen on %v with FreeBind: %v", absent, err)
		}
		c.Close()
	}
	if _, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("239.1.2.3:4791"), Interface: 1, FreeBind: true}); err == nil {
		t.Error("FreeBind on a multicast group: no error")
	}

	// The address arrives: in a namespace of the test's own.
	needs.Root(t, "a network namespace to add the address in")
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	ns := fmt.Sprintf("rbfb%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %v: %v: %s", ns, args, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	// A veth whose far end holds nothing: what is sent to an address of
	// its prefix that no one holds goes unanswered (lo would loop it back).
	ip("link", "set", "lo", "up")
	ip("link", "add", "d0", "type", "veth", "peer", "name", "d1")
	ip("link", "set", "d0", "up")
	ip("link", "set", "d1", "up")
	ip("addr", "add", "198.18.9.1/24", "dev", "d0")
	vip := netip.MustParseAddrPort("198.18.9.100:4791")
	var standby, peer *udpconn.Conn
	if err := netns.Do(ns, func() error {
		var err error
		if standby, err = udpconn.Listen(udpconn.Options{Addr: vip, FreeBind: true}); err != nil {
			return err
		}
		peer, err = udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("198.18.9.1:4791")})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer standby.Close()
	defer peer.Close()
	msg := func(to netip.AddrPort) []roce.Message {
		p := packet(roce.RCSendOnly, 0x11, []byte("hello"))
		return []roce.Message{{Buf: p, N: len(p), Addr: to}}
	}
	// Before the address is here, the conn cannot send from it, and
	// nothing sent to it arrives.
	if _, err := standby.WriteBatch(msg(peer.LocalAddr())); !errors.Is(err, unix.ENETUNREACH) {
		t.Errorf("a send from the address before it arrived: %v, want ENETUNREACH", err)
	}
	if n, err := peer.WriteBatch(msg(vip)); n != 1 || err != nil {
		t.Fatalf("send to the address before it arrived: %d, %v", n, err)
	}
	standby.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := standby.ReadBatch([]roce.Message{{Buf: make([]byte, roce.MaxPacket)}}); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read before the address arrived: %d, %v; want nothing until the deadline", n, err)
	}

	ip("addr", "add", vip.Addr().String()+"/32", "dev", "d0")
	if n, err := peer.WriteBatch(msg(vip)); n != 1 || err != nil {
		t.Fatalf("send to the address once it arrived: %d, %v", n, err)
	}
	standby.SetReadDeadline(time.Now().Add(5 * time.Second))
	in := []roce.Message{{Buf: make([]byte, roce.MaxPacket)}}
	n, err := standby.ReadBatch(in)
	if err != nil || n != 1 {
		t.Fatalf("read on the free-bound conn once its address arrived: %d, %v", n, err)
	}
	if in[0].Addr != peer.LocalAddr() {
		t.Errorf("from %v, want %v", in[0].Addr, peer.LocalAddr())
	}
	// And it answers from it.
	if n, err := standby.WriteBatch(msg(peer.LocalAddr())); n != 1 || err != nil {
		t.Errorf("a send from the address once it arrived: %d, %v", n, err)
	}
}
