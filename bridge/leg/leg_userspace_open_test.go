package leg_test

import (
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/internal/testlog"
)

// TestInNetns: an interface's place reads as the file has it: a
// namespace by its name, and none as the gateway's own, never as "".
func TestInNetns(t *testing.T) {
	for _, tc := range []struct{ ifname, ns, want string }{
		{"lo", "", "lo in the gateway's own network namespace"},
		{"vgw0", "user0", "vgw0 in network namespace user0"},
	} {
		if got := leg.InNetns(tc.ifname, tc.ns); got != tc.want {
			t.Errorf("InNetns(%q, %q) = %q, want %q", tc.ifname, tc.ns, got, tc.want)
		}
	}
}

// TestOpenUserspaceNamesItsNamespace: a userspace leg without netns that
// cannot open says its interface is in the gateway's own network
// namespace, not in one named "".
func TestOpenUserspaceNamesItsNamespace(t *testing.T) {
	pl, err := pool.New(pool.Options{Size: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	l := &config.Leg{Name: "roce", Kind: config.KindUserspace, Interface: "lo", IP: netip.MustParseAddr("192.0.2.77"), IO: config.IOUDP}
	_, err = leg.OpenUserspace(l, pl, testlog.New(t))
	if err == nil {
		t.Fatal("a leg on lo with an address lo does not hold opened")
	}
	if msg := err.Error(); !strings.HasPrefix(msg, "lo in the gateway's own network namespace: ") || strings.Contains(msg, `""`) {
		t.Errorf("got %q, want it to say lo is in the gateway's own network namespace", msg)
	}
}

// TestQueuesDefault: a userspace leg's receive loops are its queues key,
// else one per CPU the process may use (at most config.DefaultMaxQueues),
// else one with busy_poll; and GOMAXPROCS bounds the default as the
// affinity does.
func TestQueuesDefault(t *testing.T) {
	want := min(runtime.NumCPU(), runtime.GOMAXPROCS(0), config.DefaultMaxQueues)
	for _, tc := range []struct {
		what string
		l    config.Leg
		want int
	}{
		{"the default", config.Leg{}, want},
		{"queues: 3", config.Leg{Queues: 3}, 3},
		{"busy_poll", config.Leg{BusyPoll: true}, 1},
	} {
		if got, why := leg.Queues(&tc.l); got != tc.want || why == "" {
			t.Errorf("%s: %d loops (%q), want %d", tc.what, got, why, tc.want)
		}
	}
	prev := runtime.GOMAXPROCS(1)
	defer runtime.GOMAXPROCS(prev)
	if got, why := leg.Queues(&config.Leg{}); got != 1 || !strings.Contains(why, "GOMAXPROCS 1") {
		t.Errorf("with GOMAXPROCS 1: %d loops (%q), want 1, saying why", got, why)
	}
}
