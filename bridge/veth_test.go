package bridge_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	testneeds "github.com/rbridge/rbridge/internal/needs"
)

// vethNamespaces makes two network namespaces, <name><pid>gw and
// <name><pid>pe, joined by a veth whose ends (...g, ...p) hold gwAddr and
// peerAddr (prefixes, as "10.96.0.1/24"), every link up, loopback too.
// They are deleted when the test ends. It needs root and ip, for why (the
// test fails without them where they must be, else skips, saying so).
func vethNamespaces(t *testing.T, why, name, gwAddr, peerAddr string) (gwNS, peerNS, gwIf, peerIf string) {
	t.Helper()
	return vethNamespacesQueues(t, why, name, gwAddr, peerAddr, 1)
}

// vethNamespacesQueues is vethNamespaces with n transmit and receive
// queues on each end: what one end sends on its queue k arrives on the
// other's queue k.
func vethNamespacesQueues(t *testing.T, why, name, gwAddr, peerAddr string, n int) (gwNS, peerNS, gwIf, peerIf string) {
	t.Helper()
	testneeds.Root(t, why)
	_, err := exec.LookPath("ip")
	testneeds.Check(t, "ip from iproute2", err)
	name += fmt.Sprint(os.Getpid() % 100000)
	gwNS, peerNS, gwIf, peerIf = name+"gw", name+"pe", name+"g", name+"p"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	for _, ns := range []string{gwNS, peerNS} {
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	qs := fmt.Sprint(n)
	ip("-n", gwNS, "link", "add", gwIf, "numtxqueues", qs, "numrxqueues", qs, "type", "veth",
		"peer", "name", peerIf, "numtxqueues", qs, "numrxqueues", qs, "netns", peerNS)
	for _, s := range []struct{ ns, ifc, addr string }{{gwNS, gwIf, gwAddr}, {peerNS, peerIf, peerAddr}} {
		ip("-n", s.ns, "addr", "add", s.addr, "dev", s.ifc)
		ip("-n", s.ns, "link", "set", s.ifc, "up")
		ip("-n", s.ns, "link", "set", "lo", "up")
	}
	return gwNS, peerNS, gwIf, peerIf
}
