//go:build linux

package leg_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
