//go:build linux

package xdp_test

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/testlog"
	"github.com/rbridge/rbridge/xdp"
)

// neighEntry is the kernel's neighbour entry for addr on ifc in ns, as
// `ip neigh` prints it ("" for none).
func neighEntry(tb testing.TB, ns *netns, ifc string, addr netip.Addr) string {
	tb.Helper()
	out, err := exec.Command("ip", "-n", ns.name, "neigh", "show", "to", addr.String(), "dev", ifc).CombinedOutput()
	if err != nil {
		tb.Fatalf("ip neigh show %v dev %s: %v: %s", addr, ifc, err, out)
	}
	return strings.TrimSpace(string(out))
}

// resolverNet is a resolver's namespace (a) joined by a veth to a peer's
// (b), which holds two addresses of each family: 10.99.0.2 and .3,
// fd00:99::2 and ::3 (no duplicate address detection: usable at once).
// In a, 10.98.0.0/24 and fd00:98::/64 are routed through b's .3 and ::3,
// and 10.97.0.0/24 and fd00:97::/64 are on another interface, dum (a
// veth whose peer stays in a).
type resolverNet struct {
	a, b     *netns
	ifA, dum string
	ifindex  int
	macB     net.HardwareAddr
}

func newResolverNet(t *testing.T, tag string) *resolverNet {
	t.Helper()
	n := &resolverNet{a: newNetns(t, nsName(tag+"a")), b: newNetns(t, nsName(tag+"b"))}
	var ifB string
	n.ifA, ifB = vethPair(t, n.a, n.b, "10.99.0.1/24", "10.99.0.2/24", "02:00:00:00:99:0a", "02:00:00:00:99:0b")
	n.macB, _ = net.ParseMAC("02:00:00:00:99:0b")
	n.dum = "rbd" + n.a.name[len(n.a.name)-4:]
	for _, args := range [][]string{
		// The kernel solicits a neighbour for NTF_USE (no packet to take
		// a source address from) from a's link-local address, and from
		// none while that is tentative: the first solicitation would wait
		// for duplicate address detection, a second or two after the link
		// came up. None on a's end.
		{"netns", "exec", n.a.name, "sysctl", "-qw", "net.ipv6.conf." + n.ifA + ".accept_dad=0"},
		{"-n", n.a.name, "link", "set", n.ifA, "down"},
		{"-n", n.a.name, "link", "set", n.ifA, "up"},
		{"-n", n.a.name, "addr", "add", "fd00:99::1/64", "dev", n.ifA, "nodad"},
		{"-n", n.b.name, "addr", "add", "10.99.0.3/24", "dev", ifB},
		{"-n", n.b.name, "addr", "add", "fd00:99::2/64", "dev", ifB, "nodad"},
		{"-n", n.b.name, "addr", "add", "fd00:99::3/64", "dev", ifB, "nodad"},
		{"-n", n.a.name, "route", "add", "10.98.0.0/24", "via", "10.99.0.3"},
		{"-n", n.a.name, "route", "add", "fd00:98::/64", "via", "fd00:99::3"},
		{"-n", n.a.name, "link", "add", n.dum, "type", "veth", "peer", "name", n.dum + "p"}, // no dummy driver here
		{"-n", n.a.name, "link", "set", n.dum, "up"},
		{"-n", n.a.name, "link", "set", n.dum + "p", "up"},
		{"-n", n.a.name, "addr", "add", "10.97.0.1/24", "dev", n.dum},
		{"-n", n.a.name, "addr", "add", "fd00:97::1/64", "dev", n.dum, "nodad"},
	} {
		ipCmd(t, args...)
	}
	var err error
	n.a.do(func() {
		var ifi *net.Interface
		if ifi, err = net.InterfaceByName(n.ifA); err == nil {
			n.ifindex = ifi.Index
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// resolver makes a resolver for ifA, in a's namespace.
func (n *resolverNet) resolver(t *testing.T, o xdp.ResolverOptions) *xdp.Resolver {
	t.Helper()
	o.Ifindex, o.Logger = n.ifindex, testlog.New(t)
	var r *xdp.Resolver
	var err error
	n.a.do(func() { r, err = xdp.NewResolver(o) })
	if err != nil {
		t.Fatalf("NewResolver: %v", err)
	}
	t.Cleanup(func() {
		if err := r.Close(); err != nil {
			t.Errorf("Resolver.Close: %v", err)
		}
	})
	return r
}

// TestResolver: a peer nothing has sent to, on the link or behind a
// gateway, IPv4 and IPv6, resolves to b's Ethernet address: the peer's
// own, or its next hop's, whose entry the kernel's table lacked before
// and holds after, REACHABLE; asked once and answered, and known after
// without asking. A peer routed through another interface is an error
// naming both.
func TestResolver(t *testing.T) {
	n := newResolverNet(t, "r")
	for _, tc := range []struct {
		name, ip string
		hop      string   // the entry resolved
		errs     []string // else: what the error names
	}{
		{name: "ipv4", ip: "10.99.0.2", hop: "10.99.0.2"},
		{name: "ipv6", ip: "fd00:99::2", hop: "fd00:99::2"},
		{name: "ipv4 routed", ip: "10.98.0.7", hop: "10.99.0.3"},
		{name: "ipv6 routed", ip: "fd00:98::7", hop: "fd00:99::3"},
		{name: "ipv4 other interface", ip: "10.97.0.5", errs: []string{"10.97.0.5", n.dum, n.ifA}},
		{name: "ipv6 other interface", ip: "fd00:97::5", errs: []string{"fd00:97::5", n.dum, n.ifA}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := n.resolver(t, xdp.ResolverOptions{})
			ip := netip.MustParseAddr(tc.ip)
			if tc.errs != nil {
				mac, err := r.HardwareAddr(ip)
				for _, s := range tc.errs {
					if err == nil || !strings.Contains(err.Error(), s) {
						t.Errorf("HardwareAddr(%v) = %v, %v; want an error naming %q", ip, mac, err, s)
					}
				}
				if st := r.Stats().Snapshot(); st != (xdp.ResolverStatsSnapshot{}) {
					t.Errorf("stats %+v, want nothing asked", st)
				}
				return
			}
			hop := netip.MustParseAddr(tc.hop)
			if e := neighEntry(t, n.a, n.ifA, hop); e != "" {
				t.Fatalf("neighbour table before: %q, want no entry for %v", e, hop)
			}
			for i, want := range []xdp.ResolverStatsSnapshot{{Asked: 1, Answered: 1}, {Asked: 1, Answered: 1}} {
				mac, err := r.HardwareAddr(ip)
				if err != nil || mac.String() != n.macB.String() {
					t.Fatalf("HardwareAddr(%v) #%d = %v, %v; want %v", ip, i+1, mac, err, n.macB)
				}
				if st := r.Stats().Snapshot(); st != want {
					t.Errorf("stats after #%d %+v, want %+v", i+1, st, want)
				}
			}
			if e := neighEntry(t, n.a, n.ifA, hop); !strings.Contains(e, "lladdr "+n.macB.String()) || !strings.Contains(e, "REACHABLE") {
				t.Errorf("neighbour table after: %q, want %v REACHABLE", e, n.macB)
			}
		})
	}
}

// TestResolverNoAnswer: an address on the link nobody holds. Lookup asks
// the kernel (an INCOMPLETE entry appears) and returns at once; the
// resolution fails within the timeout, counted; an error naming the
// address and wrapping ErrNoNeighbor is then answered at once, without
// asking again, until the hold has passed, when the resolver asks again.
func TestResolverNoAnswer(t *testing.T) {
	n := newResolverNet(t, "f")
	const timeout, hold = 300 * time.Millisecond, time.Second
	for _, ip := range []netip.Addr{netip.MustParseAddr("10.99.0.99"), netip.MustParseAddr("fd00:99::99")} {
		t.Run(ip.String(), func(t *testing.T) {
			r := n.resolver(t, xdp.ResolverOptions{Timeout: timeout, Hold: hold})
			if e := neighEntry(t, n.a, n.ifA, ip); e != "" {
				t.Fatalf("neighbour table before: %q, want no entry for %v", e, ip)
			}
			ask := func(round int) time.Time {
				t.Helper()
				start := time.Now()
				mac, pending, err := r.Lookup(ip)
				if took := time.Since(start); mac != nil || pending == nil || err != nil || took > timeout/2 {
					t.Fatalf("round %d: Lookup(%v) = %v, %v, %v in %v; want a resolution at once", round, ip, mac, pending, err, took)
				}
				if e := neighEntry(t, n.a, n.ifA, ip); !strings.Contains(e, "INCOMPLETE") && !strings.Contains(e, "FAILED") {
					t.Errorf("round %d: neighbour table while resolving: %q, want an INCOMPLETE entry for %v", round, e, ip)
				}
				select {
				case <-pending:
				case <-time.After(timeout + testTimeout):
					t.Fatalf("round %d: the resolution of %v went on for %v", round, ip, time.Since(start))
				}
				if took := time.Since(start); took < timeout*9/10 {
					t.Errorf("round %d: the resolution ended after %v, before the %v timeout", round, took, timeout)
				}
				if got, want := r.Stats().Snapshot(), (xdp.ResolverStatsSnapshot{Asked: uint64(round), Failed: uint64(round)}); got != want {
					t.Errorf("round %d: stats %+v, want %+v", round, got, want)
				}
				return time.Now()
			}
			failed := ask(1)
			for i := range 2 { // held: no asking
				start := time.Now()
				mac, err := r.HardwareAddr(ip)
				if took := time.Since(start); !errors.Is(err, xdp.ErrNoNeighbor) || !strings.Contains(err.Error(), ip.String()) || took > timeout/2 {
					t.Errorf("held #%d: HardwareAddr(%v) = %v, %v in %v; want at once an error naming it that wraps ErrNoNeighbor", i+1, ip, mac, err, took)
				}
			}
			if got, want := r.Stats().Snapshot(), (xdp.ResolverStatsSnapshot{Asked: 1, Failed: 1}); got != want {
				t.Errorf("while held: stats %+v, want %+v: asked again", got, want)
			}
			if got := r.Unanswered(); len(got) != 1 || got[0] != ip {
				t.Errorf("while held: Unanswered() = %v, want [%v]", got, ip)
			}
			<-time.After(time.Until(failed.Add(hold)))
			if got := r.Unanswered(); len(got) != 0 {
				t.Errorf("after the hold: Unanswered() = %v, want none", got)
			}
			ask(2)
		})
	}
}
