package interop_test

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/integration/guest"
)

// tc runs /usr/sbin/tc (busybox's applet shadows the name) and fails the
// test on an error.
func tc(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command("/usr/sbin/tc", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

var droppedRE = regexp.MustCompile(`dropped (\d+)`)

// netemDrops reads how many packets a netem qdisc dropped.
func netemDrops(t testing.TB, dev string) int {
	m := droppedRE.FindStringSubmatch(tc(t, "-s", "qdisc", "show", "dev", dev))
	if m == nil {
		t.Fatalf("no drop counter for %s", dev)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestGuestTransportWithRXEVethLoss injects 5% loss with netem on both ends
// of the veth pair between the kernel's rxe1 and the transport's namespace:
// the kernel's own packet path loses them, both ways.
func TestGuestTransportWithRXEVethLoss(t *testing.T) {
	k, g, _ := connectToRXE(t, 0)
	ns := guest.UserNetns(t)
	if out, err := exec.Command("/usr/sbin/modprobe", "sch_netem").CombinedOutput(); err != nil {
		t.Fatalf("modprobe sch_netem: %v\n%s", err, out)
	}
	// The namespace's veth, and its peer in the initial namespace (found by
	// the ifindex the namespace side names as its link).
	// sysfs shows the initial namespace's view; ask ip inside user0 instead:
	// "5: vuser1@if4: <...>" names the peer's ifindex.
	var iflink string
	check(t, ns.Do(func() error {
		out, err := exec.Command("/usr/sbin/ip", "-o", "link", "show", "dev", ns.Netdev).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip link show %s: %v: %s", ns.Netdev, err, out)
		}
		m := regexp.MustCompile(`@if(\d+):`).FindSubmatch(out)
		if m == nil {
			return fmt.Errorf("no peer ifindex in %q", out)
		}
		iflink = string(m[1])
		return nil
	}))
	peer := ""
	ents, err := os.ReadDir("/sys/class/net")
	check(t, err)
	for _, e := range ents {
		if b, err := os.ReadFile("/sys/class/net/" + e.Name() + "/ifindex"); err == nil && strings.TrimSpace(string(b)) == iflink {
			peer = e.Name()
		}
	}
	if peer == "" {
		t.Fatalf("no netdev with ifindex %s: the peer of %s", iflink, ns.Netdev)
	}
	tc(t, "qdisc", "add", "dev", peer, "root", "netem", "loss", "5%")
	t.Cleanup(func() { exec.Command("/usr/sbin/tc", "qdisc", "del", "dev", peer, "root").Run() })
	check(t, ns.Do(func() error {
		tc(t, "qdisc", "add", "dev", ns.Netdev, "root", "netem", "loss", "5%")
		return nil
	}))
	t.Cleanup(func() {
		ns.Do(func() error { return exec.Command("/usr/sbin/tc", "qdisc", "del", "dev", ns.Netdev, "root").Run() })
	})
	for round := range 4 {
		t.Run(fmt.Sprint(round), func(t *testing.T) { exercise(t, k, g) })
	}
	toNS := netemDrops(t, peer)
	var fromNS int
	check(t, ns.Do(func() error { fromNS = netemDrops(t, ns.Netdev); return nil }))
	st := g.dev.Stats()
	t.Logf("netem dropped %d packets toward the transport (%s) and %d from it (%s); transport: retransmits %d, timeouts %d, NAKs sent %d, duplicates %d",
		toNS, peer, fromNS, ns.Netdev, st.Retransmit.Load(), st.Timeouts.Load(), st.TxNAKs.Load(), st.RxDuplicate.Load())
	if toNS+fromNS == 0 {
		t.Fatal("netem dropped nothing: the test proved nothing")
	}
}
