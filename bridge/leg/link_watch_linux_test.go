//go:build linux

package leg_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/internal/needs"
)

// TestWatchLink: in a network namespace of the test's own, WatchLink says
// when its interface goes down, comes up and gains an address, and not
// when another interface does; it stops once its context ends; and it
// fails on a namespace that does not exist.
func TestWatchLink(t *testing.T) {
	if err := leg.WatchLink(context.Background(), "rbridge-no-such-netns", "x0", func() {}, func(error) {}); err == nil {
		t.Error("watching a link in a network namespace that does not exist: no error")
	}
	needs.Root(t, "a network namespace whose links change")
	ns, ip := linkNetns(t, "rbwl")
	ip("link", "add", "w0", "type", "veth", "peer", "name", "w1")
	ip("link", "add", "other0", "type", "veth", "peer", "name", "other1")

	changed := make(chan struct{}, 64)
	lost := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := leg.WatchLink(ctx, ns, "w0", func() { changed <- struct{}{} }, func(err error) { lost <- err }); err != nil {
		t.Fatal(err)
	}
	// expect waits for a change to be told (and takes what else came
	// with it), or makes sure none is.
	expect := func(what string, want bool) {
		t.Helper()
		wait := 5 * time.Second
		if !want {
			wait = 200 * time.Millisecond
		}
		select {
		case <-changed:
			if !want {
				t.Fatalf("%s: a change was told", what)
			}
		case err := <-lost:
			t.Fatalf("%s: the watch was lost: %v", what, err)
		case <-time.After(wait):
			if want {
				t.Fatalf("%s: no change told", what)
			}
		}
		for drained := false; !drained; {
			select {
			case <-changed:
			case <-time.After(50 * time.Millisecond):
				drained = true
			}
		}
	}
	ip("link", "set", "other0", "up")
	expect("another interface up", false)
	ip("link", "set", "w0", "up")
	expect("the interface up", true)
	ip("addr", "add", "198.18.7.1/24", "dev", "w0")
	expect("an address added to the interface", true)
	ip("addr", "add", "198.18.8.1/24", "dev", "other0")
	expect("an address added to another interface", false)
	ip("link", "set", "w0", "down")
	expect("the interface down", true)

	cancel()
	time.Sleep(100 * time.Millisecond)
	for drained := false; !drained; {
		select {
		case <-changed:
		default:
			drained = true
		}
	}
	ip("link", "set", "w0", "up")
	select {
	case <-changed:
		t.Error("a change told after the watch's context ended")
	case err := <-lost:
		t.Errorf("the watch reported lost after its context ended: %v", err)
	case <-time.After(200 * time.Millisecond):
	}
}

// linkNetns makes a network namespace named prefix and the test process's
// pid, deleted when the test ends; ip runs `ip -n <it>` with args. It
// returns the namespace's name.
func linkNetns(t *testing.T, prefix string) (string, func(args ...string)) {
	t.Helper()
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	ns := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	ipNS := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ipNS("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	return ns, func(args ...string) {
		t.Helper()
		ipNS(append([]string{"-n", ns}, args...)...)
	}
}

// TestOperStateNamespaceMadeAgain: a leg's namespace deleted and made
// again under its name is read as the new one (a handle kept from the
// old one found none of its links), and while it is gone, the error says
// the namespace is missing.
func TestOperStateNamespaceMadeAgain(t *testing.T) {
	needs.Root(t, "network namespaces made and deleted")
	ns, ip := linkNetns(t, "rbnm")
	ip("link", "add", "m0", "type", "veth", "peer", "name", "m1")
	if st, err := leg.OperState(ns, "m0"); err != nil || st != "down" {
		t.Fatalf("OperState(%s, m0) = %q, %v; want down", ns, st, err)
	}
	if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns del %s: %v: %s", ns, err, out)
	}
	if _, err := leg.OperState(ns, "m0"); err == nil || !strings.Contains(err.Error(), "network namespace "+ns) {
		t.Errorf("OperState in a namespace deleted: %v; want it named missing", err)
	}
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", ns, err, out)
	}
	ip("link", "add", "m0", "type", "veth", "peer", "name", "m1")
	ip("link", "set", "m1", "up")
	ip("link", "set", "m0", "up")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		st, err := leg.OperState(ns, "m0")
		if err == nil && st == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("OperState(%s, m0) in the namespace made again = %q, %v; want up", ns, st, err)
		}
	}
	ip("addr", "add", "198.18.9.1/24", "dev", "m0")
	if held, err := leg.HoldsAddr(ns, "m0", netip.MustParseAddr("198.18.9.1")); err != nil || !held {
		t.Errorf("HoldsAddr in the namespace made again = %v, %v; want true", held, err)
	}
}

// TestWatchLinkNamespaceMadeAgain: a watch in a namespace that is deleted
// ends (lost, naming the namespace), and so does one whose namespace is
// deleted and made again under its name at once; a watch made then tells
// the new namespace's changes.
func TestWatchLinkNamespaceMadeAgain(t *testing.T) {
	needs.Root(t, "network namespaces made and deleted")
	defer func(d time.Duration) { leg.NetnsCheck = d }(leg.NetnsCheck)
	leg.NetnsCheck = 20 * time.Millisecond
	ns, ip := linkNetns(t, "rbnw")
	ip("link", "add", "n0", "type", "veth", "peer", "name", "n1")
	watch := func() (chan struct{}, chan error) {
		t.Helper()
		changed, lost := make(chan struct{}, 64), make(chan error, 1)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		if err := leg.WatchLink(ctx, ns, "n0", func() { changed <- struct{}{} }, func(err error) { lost <- err }); err != nil {
			t.Fatal(err)
		}
		return changed, lost
	}
	lostWith := func(lost chan error, what, want string) {
		t.Helper()
		select {
		case err := <-lost:
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the watch ended with %q, want it to say %q", what, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the watch did not end in 5 s", what)
		}
	}
	netnsCmd := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"netns"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip netns %v: %v: %s", args, err, out)
		}
	}

	_, lost := watch()
	netnsCmd("del", ns)
	lostWith(lost, "the namespace deleted", "network namespace "+ns)

	netnsCmd("add", ns)
	_, lost = watch()
	// Deleted and made again at once: the watch sees the name missing, or
	// naming another namespace, as its look falls.
	netnsCmd("del", ns)
	netnsCmd("add", ns)
	lostWith(lost, "the namespace made again", "network namespace "+ns)

	ip("link", "add", "n0", "type", "veth", "peer", "name", "n1")
	changed, lost := watch()
	ip("link", "set", "n0", "up")
	select {
	case <-changed:
	case err := <-lost:
		t.Fatalf("the watch in the namespace made again ended: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the watch in the namespace made again told nothing of its interface up")
	}
}
