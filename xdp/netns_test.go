//go:build linux

package xdp_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// netns is a network namespace made with `ip netns` for one test, and a
// goroutine locked to a thread inside it that runs functions there (socket
// creation, XDP attach and interface look-ups use the calling thread's
// namespace; sockets keep theirs afterwards). The thread is never unlocked:
// it exits with the goroutine.
type netns struct {
	name string
	run  chan func()
}

func ipCmd(tb testing.TB, args ...string) {
	tb.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func newNetns(tb testing.TB, name string) *netns {
	tb.Helper()
	needRoot(tb)
	_, err := exec.LookPath("ip")
	needs(tb, "ip from iproute2", err)
	ipCmd(tb, "netns", "add", name)
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ns := &netns{name: name, run: make(chan func())}
	errc := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		f, err := os.Open("/var/run/netns/" + name)
		if err == nil {
			err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
			f.Close()
		}
		errc <- err
		if err != nil {
			return
		}
		for fn := range ns.run {
			fn()
		}
	}()
	if err := <-errc; err != nil {
		tb.Fatalf("enter netns %s: %v", name, err)
	}
	tb.Cleanup(func() { close(ns.run) })
	return ns
}

// do runs fn on the namespace's thread and waits for it.
func (ns *netns) do(fn func()) {
	done := make(chan struct{})
	ns.run <- func() { defer close(done); fn() }
	<-done
}

// vethPair joins two namespaces with a veth pair, addresses on both ends,
// and returns the interface names.
func vethPair(tb testing.TB, a, b *netns, addrA, addrB, macA, macB string) (string, string) {
	tb.Helper()
	return vethPairQueues(tb, a, b, addrA, addrB, macA, macB, 1)
}

// vethPairQueues is vethPair with n transmit and receive queues on each
// end: a packet sent on one end's queue k arrives on the other's queue k.
func vethPairQueues(tb testing.TB, a, b *netns, addrA, addrB, macA, macB string, n int) (string, string) {
	tb.Helper()
	ifA, ifB := "rbx"+a.name[len(a.name)-4:], "rbx"+b.name[len(b.name)-4:]
	qs := strconv.Itoa(n)
	ipCmd(tb, "-n", a.name, "link", "add", ifA, "address", macA, "numtxqueues", qs, "numrxqueues", qs, "type", "veth",
		"peer", "name", ifB, "address", macB, "numtxqueues", qs, "numrxqueues", qs, "netns", b.name)
	for _, s := range []struct{ ns, ifc, addr string }{{a.name, ifA, addrA}, {b.name, ifB, addrB}} {
		ipCmd(tb, "-n", s.ns, "addr", "add", s.addr, "dev", s.ifc)
		ipCmd(tb, "-n", s.ns, "link", "set", s.ifc, "up")
		ipCmd(tb, "-n", s.ns, "link", "set", "lo", "up")
	}
	return ifA, ifB
}

func nsName(tag string) string { return fmt.Sprintf("rbx%d%s", os.Getpid()%100000, tag) }
