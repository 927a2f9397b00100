// Package vethtest makes the network namespaces and veth pairs that
// rbridge's tests and benchmarks run a gateway's legs across.
package vethtest

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/internal/needs"
)

// Namespaces makes two network namespaces, <name><pid>gw and
// <name><pid>pe, joined by a veth whose ends (...g, ...p) hold gwAddr and
// peerAddr (prefixes, as "10.96.0.1/24") and have queues transmit and
// receive queues each (what one end sends on its queue k arrives on the
// other's queue k), every link up, loopback too. They are deleted when
// tb ends. It needs root and ip, for why (tb fails without them where
// they must be, else skips, saying so).
func Namespaces(tb testing.TB, why, name, gwAddr, peerAddr string, queues int) (gwNS, peerNS, gwIf, peerIf string) {
	tb.Helper()
	needs.Root(tb, why)
	_, err := exec.LookPath("ip")
	needs.Check(tb, "ip from iproute2", err)
	name += fmt.Sprint(os.Getpid() % 100000)
	gwNS, peerNS, gwIf, peerIf = name+"gw", name+"pe", name+"g", name+"p"
	ip := func(args ...string) {
		tb.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{gwNS, peerNS} {
		ip("netns", "add", ns)
		tb.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	qs := fmt.Sprint(queues)
	ip("-n", gwNS, "link", "add", gwIf, "numtxqueues", qs, "numrxqueues", qs, "type", "veth",
		"peer", "name", peerIf, "numtxqueues", qs, "numrxqueues", qs, "netns", peerNS)
	for _, s := range []struct{ ns, ifc, addr string }{{gwNS, gwIf, gwAddr}, {peerNS, peerIf, peerAddr}} {
		ip("-n", s.ns, "addr", "add", s.addr, "dev", s.ifc)
		ip("-n", s.ns, "link", "set", s.ifc, "up")
		ip("-n", s.ns, "link", "set", "lo", "up")
	}
	return gwNS, peerNS, gwIf, peerIf
}
