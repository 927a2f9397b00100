//go:build linux

package leg_test

import (
	"context"
	"errors"
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

// TestWatchLink: in a network namespace of the test's own, a Link's watch
// says when its interface goes down, comes up and gains an address, and
// not when another interface does; it stops once its context ends; and a
// link in a namespace that does not exist cannot be opened.
func TestWatchLink(t *testing.T) {
	if l, err := leg.OpenLink("rbridge-no-such-netns", "x0"); err == nil {
		l.Close()
		t.Error("opening a link in a network namespace that does not exist: no error")
	}
	needs.Root(t, "a network namespace whose links change")
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	ns := fmt.Sprintf("rbwl%d", os.Getpid()%100000)
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
	ip("link", "add", "w0", "type", "veth", "peer", "name", "w1")
	ip("link", "add", "other0", "type", "veth", "peer", "name", "other1")

	changed := make(chan struct{}, 64)
	lost := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := leg.OpenLink(ns, "w0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Watch(ctx, func() { changed <- struct{}{} }, func(err error) { lost <- err }); err != nil {
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
	ip("link", "set", "w0", "name", "w9")
	expect("the interface renamed", true)
	if st, _, err := l.OperState(); !errors.Is(err, leg.ErrNoInterface) {
		t.Errorf("the interface renamed away: %q, %v; want ErrNoInterface", st, err)
	}
	ip("link", "set", "w9", "name", "w0")
	expect("the interface named back", true)
	_, first, err := l.OperState()
	if err != nil {
		t.Fatal(err)
	}
	ip("link", "del", "w0")
	expect("the interface deleted", true)
	if st, _, err := l.OperState(); !errors.Is(err, leg.ErrNoInterface) || !strings.Contains(err.Error(), "w0 in network namespace "+ns) {
		t.Errorf("the interface deleted: %q, %v; want ErrNoInterface naming w0 in %s", st, err, ns)
	}
	ip("link", "add", "w0", "type", "veth", "peer", "name", "w1")
	expect("the interface made again", true)
	if st, index, err := l.OperState(); err != nil || st != "down" || index == first {
		t.Errorf("the interface made again: %q, index %d, %v; want down, another index than %d", st, index, err, first)
	}

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

// TestLinkNetnsMoved: a Link stays in the network namespace it opened in.
// Once the namespace's name is deleted and made again, NetnsMoved says so
// and the link is still read in the first namespace (the one its sockets,
// like a leg's, are in), not in the new one of the same name.
func TestLinkNetnsMoved(t *testing.T) {
	needs.Root(t, "network namespaces made again under one name")
	_, err := exec.LookPath("ip")
	needs.Check(t, "ip from iproute2", err)
	ns := fmt.Sprintf("rbnm%d", os.Getpid()%100000)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ip("-n", ns, "link", "add", "m0", "type", "veth", "peer", "name", "m1")
	ip("-n", ns, "link", "set", "m0", "up")
	ip("-n", ns, "link", "set", "m1", "up")
	l, err := leg.OpenLink(ns, "m0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if m := l.NetnsMoved(); m != "" {
		t.Fatalf("just opened: NetnsMoved %q", m)
	}
	ip("netns", "del", ns) // the Link keeps the namespace itself
	if m := l.NetnsMoved(); !strings.Contains(m, "gone") {
		t.Errorf("the name deleted: NetnsMoved %q, want it gone", m)
	}
	ip("netns", "add", ns) // another namespace, the same name, no m0
	if m := l.NetnsMoved(); !strings.Contains(m, "now another one") {
		t.Errorf("the name made again: NetnsMoved %q, want another one", m)
	}
	if st, _, err := l.OperState(); err != nil || st != "up" {
		t.Errorf("read after the name moved: %q, %v; want up, as in the namespace it opened in", st, err)
	}
	held, err := leg.HoldsAddr(ns, "m0", netip.MustParseAddr("198.18.9.1"))
	if err == nil || !errors.Is(err, leg.ErrNoInterface) || held {
		t.Errorf("HoldsAddr in the new namespace of the name: %v, %v; want ErrNoInterface (m0 is not there)", held, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.OperState(); err == nil {
		t.Error("read after Close: no error")
	}
}
