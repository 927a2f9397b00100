package config_test

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
)

const good = `legs:
  - name: ib                    # any name; routes refer to it
    kind: verbs
    ip: 198.18.3.1
    device: rxe2
    port: 1
  - name: roce
    kind: userspace
    interface: vgw0
    ip: 198.18.1.3
    netns: user0
    ecn: true
routes:
  - name: storage
    listen: {leg: ib, addr: "198.18.3.1:4420"}
    target: {leg: roce, addr: "198.18.1.2:4420"}
    allow: ["198.18.3.0/24", 198.18.4.7]
  - name: back
    listen: {leg: roce, addr: "198.18.1.3:7471"}
    target: {leg: ib, addr: "198.18.3.2:7471"}
`

func TestParseGood(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	type leg struct {
		Name, Kind, IP, Device, Interface, IO, Netns string
		Port                                         int
		ECN                                          bool
	}
	var legs []leg
	for _, l := range c.Legs {
		legs = append(legs, leg{l.Name, l.Kind, l.IP.String(), l.Device, l.Interface, l.IO, l.Netns, l.Port, l.ECN})
	}
	want := []leg{{"ib", "verbs", "198.18.3.1", "rxe2", "", "", "", 1, false}, {"roce", "userspace", "198.18.1.3", "", "vgw0", "afxdp", "user0", 0, true}}
	if d := cmp.Diff(want, legs); d != "" {
		t.Errorf("legs (-want +got):\n%s", d)
	}
	r := c.Routes[0]
	if r.Name != "storage" || r.Listen.Leg != "ib" || r.Listen.Addr != netip.MustParseAddrPort("198.18.3.1:4420") ||
		r.Target.Leg != "roce" || r.Target.Addr != netip.MustParseAddrPort("198.18.1.2:4420") {
		t.Errorf("route %+v", r)
	}
	for addr, ok := range map[string]bool{"198.18.3.77": true, "198.18.4.7": true, "198.18.4.8": false, "10.0.0.1": false, "::ffff:198.18.3.5": true} {
		if got := r.Allowed(netip.MustParseAddr(addr)); got != ok {
			t.Errorf("route allows %s: %v, want %v", addr, got, ok)
		}
	}
	if !c.Routes[1].Allowed(netip.MustParseAddr("10.1.2.3")) {
		t.Error("a route without allow refuses a client")
	}
	if l, ok := c.Leg("roce"); !ok || l.Interface != "vgw0" {
		t.Errorf("Leg(roce) = %+v, %v", l, ok)
	}
}

// TestParseUD: a UD route may listen where an RC route does (another port
// space) and have a rate limit, decoded as a group's; ud is false and
// rate none unless given.
func TestParseUD(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(good+`  - name: lookup
    ud: true
    listen: {leg: ib, addr: "198.18.3.1:4420"}
    target: {leg: roce, addr: "198.18.1.2:7174"}
    rate: {packets: 5000, bytes: 10MiB}
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	var rates []config.Rate
	for _, r := range c.Routes {
		got = append(got, r.UD)
		rates = append(rates, r.Rate)
	}
	if d := cmp.Diff([]bool{false, false, true}, got); d != "" {
		t.Errorf("routes' ud (-want +got):\n%s", d)
	}
	want := []config.Rate{{}, {}, {Packets: 5000, BurstPackets: 500, Bytes: 10 << 20, BurstBytes: 10 << 20 / 10}}
	if d := cmp.Diff(want, rates); d != "" {
		t.Errorf("routes' rate (-want +got):\n%s", d)
	}
}

// TestParseGroups: a group's defaults (both ways, rdma_cm's MGID form),
// groups on userspace legs of either io, and a file with groups and no
// routes.
func TestParseGroups(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`legs:
  - {name: ib, kind: verbs, ip: 198.18.3.1}
  - {name: roce, kind: userspace, interface: vgw0, ip: 198.18.1.3, io: udp}
  - {name: fast, kind: userspace, interface: vgw1, ip: 198.18.2.3}
groups:
  - {name: ticks, group: 239.1.1.1, roce: roce, ib: ib}
  - {name: news, group: 239.1.1.2, roce: roce, ib: ib, direction: ib_to_roce, mgid: ipoib, peers: [198.18.1.9, "::ffff:198.18.3.9"], loop_window: 0s}
  - {name: quotes, group: 239.1.1.3, roce: fast, ib: ib}
  - {name: both-userspace, group: 239.1.1.4, roce: fast, ib: roce}
`))
	if err != nil {
		t.Fatal(err)
	}
	type group struct{ Name, Group, RoCE, IB, Direction, MGID string }
	var got []group
	for _, g := range c.Groups {
		got = append(got, group{g.Name, g.Group.String(), g.RoCE, g.IB, g.Direction, g.MGID})
	}
	want := []group{{"ticks", "239.1.1.1", "roce", "ib", "both", "rdma_cm"}, {"news", "239.1.1.2", "roce", "ib", "ib_to_roce", "ipoib"},
		{"quotes", "239.1.1.3", "fast", "ib", "both", "rdma_cm"}, {"both-userspace", "239.1.1.4", "fast", "roce", "both", "rdma_cm"}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("groups (-want +got):\n%s", d)
	}
	for i, want := range []time.Duration{config.DefaultLoopWindow, 0} {
		if got := c.Groups[i].LoopWindow; got != want {
			t.Errorf("group %s's loop_window %v, want %v", c.Groups[i].Name, got, want)
		}
	}
	wantPeers := [][]netip.Addr{nil, {netip.MustParseAddr("198.18.1.9"), netip.MustParseAddr("198.18.3.9")}, nil, nil}
	for i, g := range c.Groups {
		if d := cmp.Diff(wantPeers[i], g.Peers, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
			t.Errorf("group %s's peers (-want +got):\n%s", g.Name, d)
		}
	}
}

// groupFile is a file of one group on legs ib and roce (line 4), with the
// group's extra keys (rate:) from line 5 on, and the legs' extra keys.
func groupFile(legKeys, groupKeys string) string {
	return `legs:
  - {name: ib, kind: verbs, ip: 198.18.3.1` + legKeys + `}
  - {name: roce, kind: userspace, interface: vgw0, ip: 198.18.1.3, io: udp}
groups:
  - name: ticks
    group: 239.1.1.1
    roce: roce
    ib: ib
` + groupKeys
}

// TestParseRate: a group's rate limit, its units and its bursts' defaults.
func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		name, rate string
		want       config.Rate
	}{
		{"none", "", config.Rate{}},
		{"packets", "{packets: 10000}", config.Rate{Packets: 10000, BurstPackets: 1000}},
		{"packets small", "{packets: 5}", config.Rate{Packets: 5, BurstPackets: 1}},
		{"packets burst", "{packets: 100, burst_packets: 3}", config.Rate{Packets: 100, BurstPackets: 3}},
		{"bytes MB", "{bytes: 50MB}", config.Rate{Bytes: 50e6, BurstBytes: 5e6}},
		{"bytes plain", "{bytes: 20000}", config.Rate{Bytes: 20000, BurstBytes: config.MaxDatagram}},
		{"bytes decimal", "{bytes: 1.5GB}", config.Rate{Bytes: 1.5e9, BurstBytes: 1.5e8}},
		{"bytes binary", "{bytes: 64KiB, burst_bytes: 8KiB}", config.Rate{Bytes: 64 << 10, BurstBytes: 8 << 10}},
		{"bytes space", `{bytes: "2 MiB"}`, config.Rate{Bytes: 2 << 20, BurstBytes: 2 << 20 / 10}},
		{"both", "{packets: 1000, bytes: 1MB, burst_packets: 10, burst_bytes: 64kB}", config.Rate{Packets: 1000, BurstPackets: 10, Bytes: 1e6, BurstBytes: 64e3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			keys := ""
			if tc.rate != "" {
				keys = "    rate: " + tc.rate + "\n"
			}
			c, err := config.Parse("gw.yaml", []byte(groupFile("", keys)))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, c.Groups[0].Rate); d != "" {
				t.Errorf("rate (-want +got):\n%s", d)
			}
			if got, want := c.Groups[0].Rate.Limited(), tc.rate != ""; got != want {
				t.Errorf("Limited() = %v, want %v", got, want)
			}
		})
	}
}

// TestParseBusyPoll: a group's busy_poll and its CPUs, on io: udp and
// AF_XDP legs; off by default.
func TestParseBusyPoll(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(groupFile("", "    busy_poll: true\n    busy_poll_cpus: [2, 3]\n")))
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Groups[0]; !g.BusyPoll || !cmp.Equal(g.BusyPollCPUs, []int{2, 3}) {
		t.Errorf("group: busy_poll %v, busy_poll_cpus %v; want true, [2 3]", g.BusyPoll, g.BusyPollCPUs)
	}
	// On an AF_XDP leg too (the default io), as on io: udp.
	afxdp := strings.Replace(groupFile("", "    busy_poll: true\n"), ", io: udp}", "}", 1)
	if c, err := config.Parse("gw.yaml", []byte(afxdp)); err != nil || !c.Groups[0].BusyPoll || c.Legs[1].IO != config.IOAFXDP {
		t.Errorf("a busy-polled group on an AF_XDP leg: %v; want it parsed (the file:\n%s)", err, numbered(afxdp))
	}
	if c, err := config.Parse("gw.yaml", []byte(groupFile("", "    busy_poll: true\n    busy_poll_idle: 10ms\n"))); err != nil || c.Groups[0].BusyPollIdle != 10*time.Millisecond {
		t.Errorf("a napping busy-polled group: %v; want busy_poll_idle 10ms", err)
	}
	c, err = config.Parse("gw.yaml", []byte(groupFile("", "")))
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Groups[0]; g.BusyPoll || g.BusyPollCPUs != nil || g.BusyPollIdle != 0 {
		t.Errorf("group without busy_poll: busy_poll %v, busy_poll_cpus %v; want off", g.BusyPoll, g.BusyPollCPUs)
	}
}

// TestParseLegBusyPoll: a leg's busy_poll and its CPU, on a verbs leg and
// a userspace leg with either io; off by default.
func TestParseLegBusyPoll(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		leg        int
		want       []int
		idle       time.Duration
	}{
		{"verbs", groupFile(", busy_poll: true, busy_poll_cpus: [3]", ""), 0, []int{3}, 0},
		{"userspace io udp", strings.Replace(groupFile("", ""), "io: udp}", "io: udp, busy_poll: true}", 1), 1, nil, 0},
		{"userspace io afxdp", strings.Replace(groupFile("", ""), "io: udp}", "busy_poll: true, busy_poll_cpus: [1]}", 1), 1, []int{1}, 0},
		{"verbs napping", groupFile(", busy_poll: true, busy_poll_idle: 10ms", ""), 0, nil, 10 * time.Millisecond},
		{"userspace napping", strings.Replace(groupFile("", ""), "io: udp}", "io: udp, busy_poll: true, busy_poll_idle: 1m}", 1), 1, nil, time.Minute},
		{"never napping said so", groupFile(", busy_poll: true, busy_poll_idle: 0s", ""), 0, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse("gw.yaml", []byte(tc.file))
			if err != nil {
				t.Fatalf("%v; the file:\n%s", err, numbered(tc.file))
			}
			l := c.Legs[tc.leg]
			if !l.BusyPoll || !cmp.Equal(l.BusyPollCPUs, tc.want) {
				t.Errorf("leg %q: busy_poll %v, busy_poll_cpus %v; want true, %v", l.Name, l.BusyPoll, l.BusyPollCPUs, tc.want)
			}
			if l.BusyPollIdle != tc.idle {
				t.Errorf("leg %q: busy_poll_idle %v, want %v", l.Name, l.BusyPollIdle, tc.idle)
			}
			if other := c.Legs[1-tc.leg]; other.BusyPoll || other.BusyPollCPUs != nil {
				t.Errorf("leg %q without busy_poll: busy_poll %v, busy_poll_cpus %v; want off", other.Name, other.BusyPoll, other.BusyPollCPUs)
			}
		})
	}
}

// TestParseLegBusyPollBad: what is wrong with a leg's busy_poll is named
// with the leg and the line: CPU numbers, a leg kind or io that cannot
// busy-poll.
func TestParseLegBusyPollBad(t *testing.T) {
	const quic = "  - {name: gw-b, kind: quic, ip: 10.0.0.1, peer: \"10.0.0.2:7471\", cert: a.crt, key: a.key, ca: ca.crt, busy_poll: true}\n"
	for _, tc := range []struct {
		name, file, want string
	}{
		{"cpus alone", groupFile(", busy_poll_cpus: [1]", ""), `gw.yaml:2: leg "ib": busy_poll_cpus without busy_poll: true`},
		{"cpu negative", groupFile(", busy_poll: true, busy_poll_cpus: [-1]", ""), `gw.yaml:2: leg "ib": busy_poll_cpus: CPU -1: want 0 to 1023`},
		{"cpu too large", groupFile(", busy_poll: true, busy_poll_cpus: [1024]", ""), `gw.yaml:2: leg "ib": busy_poll_cpus: CPU 1024: want 0 to 1023`},
		{"two cpus", groupFile(", busy_poll: true, busy_poll_cpus: [1, 2]", ""), `gw.yaml:2: leg "ib": busy_poll_cpus: 2 CPUs for 1 receive loop (a leg has one)`},
		{"cpus not numbers", groupFile(", busy_poll: true, busy_poll_cpus: [one]", ""), `gw.yaml:2: leg "ib": busy_poll_cpus "one": not a CPU number`},
		{"not a bool", groupFile(", busy_poll: fast", ""), `gw.yaml:2: leg "ib": busy_poll "fast": want true or false`},
		{"quic", strings.Replace(groupFile("", ""), "groups:\n", quic+"groups:\n", 1), `gw.yaml:4: leg "gw-b": busy_poll is for userspace and verbs legs`},
		{"idle alone", groupFile(", busy_poll_idle: 10ms", ""), `gw.yaml:2: leg "ib": busy_poll_idle without busy_poll: true`},
		{"idle negative", groupFile(", busy_poll: true, busy_poll_idle: -1ms", ""), `gw.yaml:2: leg "ib": busy_poll_idle -1ms: want 0s (never nap) or a duration from 100µs to 1m0s`},
		{"idle too short", groupFile(", busy_poll: true, busy_poll_idle: 10us", ""), `gw.yaml:2: leg "ib": busy_poll_idle 10us: want 0s (never nap) or a duration from 100µs to 1m0s`},
		{"idle too long", groupFile(", busy_poll: true, busy_poll_idle: 2h", ""), `gw.yaml:2: leg "ib": busy_poll_idle 2h: want 0s (never nap) or a duration from 100µs to 1m0s`},
		{"idle no unit", groupFile(", busy_poll: true, busy_poll_idle: 10", ""), `gw.yaml:2: leg "ib": busy_poll_idle "10": want a duration with a unit`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed:\n%s", numbered(tc.file))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n%v\nlacks %q; the file:\n%s", err, tc.want, numbered(tc.file))
			}
		})
	}
}

// TestParseQueues: a userspace leg's queues, 0 (the default, chosen when
// the leg opens) when not given; an io: afxdp leg's, busy-polled too
// (its one loop polls them all).
func TestParseQueues(t *testing.T) {
	for _, tc := range []struct {
		name, keys string
		want       int
	}{
		{"default", "", 0},
		{"one", ", queues: 1", 1},
		{"eight", ", queues: 8", 8},
		{"most", ", queues: 256", config.MaxQueues},
		{"one with busy_poll", ", queues: 1, busy_poll: true", 1},
		{"af_xdp", ", io: afxdp, queues: 4", 4},
		{"af_xdp with busy_poll", ", io: afxdp, queues: 4, busy_poll: true", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := strings.Replace(groupFile("", ""), "io: udp}", "io: udp"+tc.keys+"}", 1)
			if strings.Contains(tc.keys, "afxdp") {
				file = strings.Replace(groupFile("", ""), ", io: udp}", tc.keys+"}", 1)
			}
			c, err := config.Parse("gw.yaml", []byte(file))
			if err != nil {
				t.Fatalf("%v; the file:\n%s", err, numbered(file))
			}
			if got := c.Legs[1].Queues; got != tc.want {
				t.Errorf("queues %d, want %d", got, tc.want)
			}
		})
	}
}

// TestParseQueuesBad: a bad queues is named with the leg and its line.
func TestParseQueuesBad(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"zero", strings.Replace(groupFile("", ""), "io: udp}", "io: udp, queues: 0}", 1), `gw.yaml:3: leg "roce": queues 0: want 1 to 256 receive loops`},
		{"negative", strings.Replace(groupFile("", ""), "io: udp}", "io: udp, queues: -2}", 1), `gw.yaml:3: leg "roce": queues -2: want 1 to 256 receive loops`},
		{"too many", strings.Replace(groupFile("", ""), "io: udp}", "io: udp, queues: 257}", 1), `gw.yaml:3: leg "roce": queues 257: want 1 to 256 receive loops`},
		{"not a number", strings.Replace(groupFile("", ""), "io: udp}", "io: udp, queues: many}", 1), `gw.yaml:3: leg "roce": queues "many"`},
		{"verbs", groupFile(", queues: 2", ""), `gw.yaml:2: leg "ib": queues is for userspace legs`},
		{"busy_poll", strings.Replace(groupFile("", ""), "io: udp}", "io: udp, busy_poll: true, queues: 2}", 1), `gw.yaml:3: leg "roce": queues 2 with busy_poll: a busy-polled io: udp leg has one receive loop (queues: 1)`},
		{"on its own line", strings.Replace(groupFile("", ""), "io: udp}", "io: udp,\n     queues: 0}", 1), `gw.yaml:4: leg "roce": queues 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed:\n%s", numbered(tc.file))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n%v\nlacks %q; the file:\n%s", err, tc.want, numbered(tc.file))
			}
		})
	}
}

// TestParseRateBad: what is wrong with a group's rate or busy_poll is
// named with the group and the line.
func TestParseRateBad(t *testing.T) {
	for _, tc := range []struct {
		name, legKeys, groupKeys string
		want                     string
	}{
		{"unknown key", "", "    rate: {packets: 10, pps: 3}\n", `gw.yaml:9: group "ticks": rate: unknown key "pps" (known: packets, burst_packets, bytes, burst_bytes)`},
		{"not a mapping", "", "    rate: 100\n", `gw.yaml:9: group "ticks": rate: want a mapping of keys (packets, burst_packets, bytes, burst_bytes)`},
		{"empty", "", "    rate: {}\n", `gw.yaml:9: group "ticks": rate: no limit given: want packets, bytes or both`},
		{"negative packets", "", "    rate:\n      packets: -5\n", `gw.yaml:10: group "ticks": rate: packets "-5": negative`},
		{"zero packets", "", "    rate:\n      packets: 0\n", `gw.yaml:10: group "ticks": rate: packets 0: nothing would cross; leave the key out for no limit`},
		{"fractional packets", "", "    rate: {packets: 2.5}\n", `gw.yaml:9: group "ticks": rate: packets "2.5": want a whole number of datagrams`},
		{"packets with a unit", "", "    rate: {packets: 10k}\n", `gw.yaml:9: group "ticks": rate: packets "10k": want a whole number of datagrams`},
		{"negative bytes", "", "    rate: {bytes: -1MB}\n", `gw.yaml:9: group "ticks": rate: bytes "-1MB": negative`},
		{"zero bytes", "", "    rate: {bytes: 0MB}\n", `group "ticks": rate: bytes 0: nothing would cross`},
		{"bits", "", "    rate: {bytes: 400Mb}\n", `gw.yaml:9: group "ticks": rate: bytes "400Mb": unit "Mb": bits? the rate is in bytes`},
		{"bad unit", "", "    rate: {bytes: 4 parsecs}\n", `gw.yaml:9: group "ticks": rate: bytes "4 parsecs": unit "parsecs": want B, kB, MB, GB (1000s) or KiB, MiB, GiB (1024s)`},
		{"not a number", "", "    rate: {bytes: lots}\n", `gw.yaml:9: group "ticks": rate: bytes "lots": want a number of bytes, as 50MB`},
		{"fractional bytes", "", "    rate: {bytes: 1.5}\n", `gw.yaml:9: group "ticks": rate: bytes "1.5": not a whole number of bytes`},
		{"burst without rate", "", "    rate: {packets: 10, burst_bytes: 1MB}\n", `gw.yaml:9: group "ticks": rate: burst_bytes without bytes`},
		{"byte burst below a datagram", "", "    rate:\n      bytes: 1MB\n      burst_bytes: 1000\n", `gw.yaml:11: group "ticks": rate: burst_bytes 1000: below 4096 bytes`},
		{"zero burst", "", "    rate: {packets: 10, burst_packets: 0}\n", `gw.yaml:9: group "ticks": rate: burst_packets 0: nothing would cross`},
		{"busy_poll_cpus alone", "", "    busy_poll_cpus: [1]\n", `gw.yaml:9: group "ticks": busy_poll_cpus without busy_poll: true`},
		{"busy_poll_cpus negative", "", "    busy_poll: true\n    busy_poll_cpus: [-1]\n", `gw.yaml:10: group "ticks": busy_poll_cpus: CPU -1: want 0 to 1023`},
		{"busy_poll_cpus too large", "", "    busy_poll: true\n    busy_poll_cpus: [1024]\n", `gw.yaml:10: group "ticks": busy_poll_cpus: CPU 1024: want 0 to 1023`},
		{"busy_poll_cpus twice", "", "    busy_poll: true\n    busy_poll_cpus: [1, 1]\n", `gw.yaml:10: group "ticks": busy_poll_cpus: CPU 1 given twice`},
		{"busy_poll_cpus too many", "", "    busy_poll: true\n    direction: ib_to_roce\n    busy_poll_cpus: [1, 2]\n", `gw.yaml:11: group "ticks": busy_poll_cpus: 2 CPUs for 1 receive loops (one per direction relayed, ib_to_roce)`},
		{"busy_poll_cpus not a list", "", "    busy_poll: true\n    busy_poll_cpus: 1\n", `gw.yaml:10: group "ticks": busy_poll_cpus: want a list of CPU numbers`},
		{"busy_poll_cpus not numbers", "", "    busy_poll: true\n    busy_poll_cpus: [one]\n", `gw.yaml:10: group "ticks": busy_poll_cpus "one": not a CPU number`},
		{"busy_poll not a bool", "", "    busy_poll: fast\n", `gw.yaml:9: group "ticks": busy_poll "fast": want true or false`},
		{"busy_poll_idle alone", "", "    busy_poll_idle: 10ms\n", `gw.yaml:9: group "ticks": busy_poll_idle without busy_poll: true`},
		{"busy_poll_idle too short", "", "    busy_poll: true\n    busy_poll_idle: 99us\n", `gw.yaml:10: group "ticks": busy_poll_idle 99us: want 0s (never nap) or a duration from 100µs to 1m0s`},
		{"busy_poll_idle no unit", "", "    busy_poll: true\n    busy_poll_idle: 5\n", `gw.yaml:10: group "ticks": busy_poll_idle "5": want a duration with a unit`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := groupFile(tc.legKeys, tc.groupKeys)
			_, err := config.Parse("gw.yaml", []byte(file))
			if err == nil {
				t.Fatalf("parsed:\n%s", numbered(file))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n%v\nlacks %q; the file:\n%s", err, tc.want, numbered(file))
			}
		})
	}
}

// TestParsePool: pool.size in the file's byte units, at the bounds and
// past them.
func TestParsePool(t *testing.T) {
	for _, tc := range []struct {
		extra string
		size  int64
		want  string // the error, when the file is refused
	}{
		{"", 0, ""},
		{"pool: {size: 512MiB}\n", 512 << 20, ""},
		{"pool:\n  size: 1.5GB\n", 1_500_000_000, ""},
		{"pool: {size: 16MiB}\n", config.MinPoolSize, ""},
		{"pool: {size: 64GiB}\n", config.MaxPoolSize, ""},
		{"pool: {size: 16777215}\n", 0, `pool: size "16777215": want 16MiB to 64GiB`},
		{"pool: {size: 65GiB}\n", 0, `pool: size "65GiB": want 16MiB to 64GiB`},
		{"pool: {size: 512Mb}\n", 0, `pool: size "512Mb": unit "Mb": bits? the size is in bytes: write MiB for mebibytes`},
		{"pool: {size: [1]}\n", 0, `pool: size: want a byte count, as 512MiB, got`},
		{"pool: {sise: 1GiB}\n", 0, `pool: unknown key "sise"`},
		{"pool: 1GiB\n", 0, `pool: want a mapping`},
	} {
		c, err := config.Parse("gw.yaml", []byte(good+tc.extra))
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v", tc.extra, err)
		case tc.want == "" && c.Pool.Size != tc.size:
			t.Errorf("%q: pool size %d, want %d", tc.extra, c.Pool.Size, tc.size)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: error %v, want one that says %q", tc.extra, err, tc.want)
		}
	}
}

func TestParseAdmin(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		listen      string
		addr        netip.AddrPort
		control     string
		hosts       []string
	}{
		{"absent: local by default", "", config.DefaultAdminListen, netip.MustParseAddrPort(config.DefaultAdminListen), config.DefaultControl(), nil},
		{"given", "admin:\n  listen: \"[::1]:9500\"\n", "[::1]:9500", netip.MustParseAddrPort("[::1]:9500"), config.DefaultControl(), nil},
		{"any port", "admin: {listen: \"127.0.0.1:0\"}\n", "127.0.0.1:0", netip.MustParseAddrPort("127.0.0.1:0"), config.DefaultControl(), nil},
		{"off, control on", "admin: {listen: \"\"}\n", "", netip.AddrPort{}, config.DefaultControl(), nil},
		{"control elsewhere", "admin: {control: /var/run/gw//c.sock}\n", config.DefaultAdminListen, netip.MustParseAddrPort(config.DefaultAdminListen), "/var/run/gw/c.sock", nil},
		{"control off", "admin: {control: \"\"}\n", config.DefaultAdminListen, netip.MustParseAddrPort(config.DefaultAdminListen), "", nil},
		{"hosts", "admin: {hosts: [GW1.Example.com., gw1]}\n", config.DefaultAdminListen, netip.MustParseAddrPort(config.DefaultAdminListen), config.DefaultControl(), []string{"gw1.example.com", "gw1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse("gw.yaml", []byte(good+tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			if c.Admin.Listen != tc.listen || c.Admin.Addr() != tc.addr {
				t.Errorf("admin listen %q (%v), want %q (%v)", c.Admin.Listen, c.Admin.Addr(), tc.listen, tc.addr)
			}
			if c.Admin.Control != tc.control {
				t.Errorf("admin control %q, want %q", c.Admin.Control, tc.control)
			}
			if d := cmp.Diff(tc.hosts, c.Admin.Hosts); d != "" {
				t.Errorf("admin hosts (-want +got):\n%s", d)
			}
		})
	}
}

// TestDefaultControl: root's control socket is in /run; another user's in
// its own runtime directory, or /run's when it has none.
func TestDefaultControl(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	want := "/run/user/1000/rbridge/control.sock"
	if os.Geteuid() == 0 {
		want = config.DefaultAdminControl
	}
	if got := config.DefaultControl(); got != want {
		t.Errorf("DefaultControl() as uid %d with XDG_RUNTIME_DIR=/run/user/1000: %q, want %q", os.Geteuid(), got, want)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got := config.DefaultControl(); got != config.DefaultAdminControl {
		t.Errorf("DefaultControl() without XDG_RUNTIME_DIR: %q, want %q", got, config.DefaultAdminControl)
	}
}

func TestParseBad(t *testing.T) {
	base := func(legs, routes string) string { return "legs:\n" + legs + "routes:\n" + routes }
	ib := "  - name: ib\n    kind: verbs\n    ip: 198.18.3.1\n"
	roce := "  - name: roce\n    kind: userspace\n    interface: vgw0\n    ip: 198.18.1.3\n"
	route := func(listen, target string) string {
		return "  - name: r\n    listen: " + listen + "\n    target: " + target + "\n"
	}
	ok := route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: roce, addr: "198.18.1.2:1"}`)
	for _, tc := range []struct {
		name, file string
		want       []string // each must be in the error, as "gw.yaml:LINE: text"
	}{
		{"empty", "", []string{"gw.yaml: the file is empty"}},
		{"not yaml", "legs: [", []string{"gw.yaml:1:"}},
		{"unknown top key", base(ib+roce, ok) + "colour: red\n", []string{`gw.yaml:13: unknown key "colour" (known: legs, routes, groups, admin, pool)`}},
		{"unknown leg key", base(ib+"    colour: red\n"+roce, ok), []string{`gw.yaml:5: leg "ib": unknown key "colour"`}},
		{"unknown endpoint key", base(ib+roce, route(`{leg: ib, addr: "198.18.3.1:1", port: 2}`, `{leg: roce, addr: "198.18.1.2:1"}`)), []string{`gw.yaml:11: route "r": listen: unknown key "port"`}},
		{"bad kind", base("  - name: ib\n    kind: verbz\n    ip: 198.18.3.1\n"+roce, ok), []string{`gw.yaml:3: leg "ib": kind "verbz": want verbs, userspace or quic`}},
		{"bad ip", base("  - name: ib\n    kind: verbs\n    ip: 198.18.3.x\n"+roce, ok), []string{`gw.yaml:4: leg "ib": ip "198.18.3.x"`}},
		{"no ip", base("  - name: ib\n    kind: verbs\n"+roce, ok), []string{`gw.yaml:2: leg "ib": no ip`}},
		{"userspace without interface", base(ib+"  - name: roce\n    kind: userspace\n    ip: 198.18.1.3\n", ok), []string{`gw.yaml:5: leg "roce": a userspace leg needs the interface`}},
		{"bad io", base(ib+roce+"    io: dpdk\n", ok), []string{`gw.yaml:9: leg "roce": io "dpdk": want afxdp or udp`}},
		{"verbs with interface", base(ib+"    interface: eth0\n"+roce, ok), []string{`gw.yaml:5: leg "ib": interface, io and netns are for userspace legs`}},
		{"verbs with ecn", base(ib+"    ecn: true\n"+roce, ok), []string{`gw.yaml:5: leg "ib": ecn is for userspace legs`}},
		{"ecn not a bool", base(ib+roce+"    ecn: maybe\n", ok), []string{`gw.yaml:9: leg "roce": ecn`}},
		{"duplicate leg", base(ib+ib+roce, ok), []string{`gw.yaml:5: leg "ib" is defined twice (first at line 2)`}},
		{"missing leg", base(ib+roce, route(`{leg: nope, addr: "198.18.3.1:1"}`, `{leg: roce, addr: "198.18.1.2:1"}`)), []string{`gw.yaml:11: route "r": listen leg "nope" does not exist`}},
		{"listen not the leg's", base(ib+roce, route(`{leg: ib, addr: "198.18.3.9:1"}`, `{leg: roce, addr: "198.18.1.2:1"}`)), []string{`gw.yaml:11: route "r": listen addr 198.18.3.9:1 is not leg "ib"'s address (198.18.3.1)`}},
		{"no port", base(ib+roce, route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: roce, addr: "198.18.1.2"}`)), []string{`gw.yaml:12: route "r": target: addr "198.18.1.2": want an IP address and a port`}},
		{"same leg", base(ib+roce, route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: ib, addr: "198.18.3.2:1"}`)), []string{`gw.yaml:12: route "r": listen and target are both on leg "ib"`}},
		{"two routes on one listen", base(ib+roce, ok+strings.Replace(ok, "name: r", "name: s", 1)), []string{`gw.yaml:14: route "s": listen addr 198.18.3.1:1 is route "r"'s already`}},
		{"bad allow", base(ib+roce, ok+"    allow: [198.18.3.0/33]\n"), []string{`gw.yaml:13: route "r": allow "198.18.3.0/33"`}},
		{"no routes", base(ib+roce, ""), []string{"gw.yaml: no routes"}},
		{"admin listen without port", base(ib+roce, ok) + "admin:\n  listen: 127.0.0.1\n", []string{`gw.yaml:14: admin: listen "127.0.0.1": want an IP address and a port`}},
		{"admin listen a host name", base(ib+roce, ok) + "admin: {listen: \"localhost:9479\"}\n", []string{`gw.yaml:13: admin: listen "localhost:9479"`}},
		{"unknown admin key", base(ib+roce, ok) + "admin:\n  port: 9479\n", []string{`gw.yaml:14: admin: unknown key "port" (known: listen, control, hosts)`}},
		{"admin control relative", base(ib+roce, ok) + "admin:\n  control: run/c.sock\n", []string{`gw.yaml:14: admin: control "run/c.sock": want an absolute path, as "/run/rbridge/control.sock", or "" for no control socket`}},
		{"admin control a directory", base(ib+roce, ok) + "admin:\n  control: /run/rbridge/\n", []string{`gw.yaml:14: admin: control "/run/rbridge/": want the socket's path, not a directory's`}},
		{"admin control too long", base(ib+roce, ok) + "admin:\n  control: /" + strings.Repeat("x", 107) + "\n", []string{`gw.yaml:14: admin: control "/xxx`, `": 108 bytes long, above the 107 a unix socket's path may have`}},
		{"admin control a list", base(ib+roce, ok) + "admin:\n  control: [a]\n", []string{`gw.yaml:14: admin: control: want a single value`}},
		{"admin hosts a name", base(ib+roce, ok) + "admin:\n  hosts: gw1\n", []string{`gw.yaml:14: admin: hosts: want a list of host names, as ["gw1.example.com"], got "gw1"`}},
		{"admin hosts a wildcard", base(ib+roce, ok) + "admin:\n  hosts:\n    - gw1\n    - \"*.example.com\"\n", []string{`gw.yaml:16: admin: hosts "*.example.com": want a host name, as "gw1.example.com" (letters, digits, '-' and '.')`}},
		{"target is the gateway", base(ib+roce, route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: roce, addr: "198.18.1.3:1"}`)), []string{`gw.yaml:12: route "r": target addr 198.18.1.3:1 is the gateway's own address`}},
		{"quic without listen or peer", base(ib+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    cert: a\n    key: b\n    ca: c\n", route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: gw, addr: "198.18.9.2:1"}`)),
			[]string{`gw.yaml:5: leg "gw": a quic leg needs listen (accept the peer gateway) or peer`}},
		{"quic without tls files", base(ib+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    peer: \"10.0.0.2:7471\"\n", route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: gw, addr: "198.18.9.2:1"}`)),
			[]string{`gw.yaml:5: leg "gw": a quic leg needs cert (PEM)`, `needs key`, `needs ca`}},
		{"quic bad peer", base(ib+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    peer: 10.0.0.2\n    cert: a\n    key: b\n    ca: c\n", route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: gw, addr: "198.18.9.2:1"}`)),
			[]string{`gw.yaml:8: leg "gw": peer "10.0.0.2": want an IP address and a port`}},
		{"quic listen not the leg's", base(ib+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    listen: \"10.0.0.9:7471\"\n    cert: a\n    key: b\n    ca: c\n", route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: gw, addr: "198.18.9.2:1"}`)),
			[]string{`gw.yaml:8: leg "gw": listen 10.0.0.9:7471 is not the leg's address (10.0.0.1)`}},
		{"quic with interface", base(ib+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    interface: eth0\n    peer: \"10.0.0.2:7471\"\n    cert: a\n    key: b\n    ca: c\n", route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: gw, addr: "198.18.9.2:1"}`)),
			[]string{`gw.yaml:8: leg "gw": interface, io, netns, device and port are not for quic legs`}},
		{"quic with ecn", base(ib+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    ecn: true\n    peer: \"10.0.0.2:7471\"\n    cert: a\n    key: b\n    ca: c\n", route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: gw, addr: "198.18.9.2:1"}`)),
			[]string{`gw.yaml:8: leg "gw": ecn is for userspace legs`}},
		{"fallback on a verbs leg", base(ib+roce, ok+"    fallback: {leg: ib, addr: \"198.18.3.9:1\"}\n"), []string{`gw.yaml:13: route "r": fallback leg "ib" is a verbs leg: a fallback goes through a peer gateway`}},
		{"fallback leg missing", base(ib+roce, ok+"    fallback: {leg: gw, addr: \"198.18.3.9:1\"}\n"), []string{`gw.yaml:13: route "r": fallback leg "gw" does not exist`}},
		{"fallback without leg", base(ib+roce, ok+"    fallback: {addr: \"198.18.3.9:1\"}\n"), []string{`gw.yaml:13: route "r": fallback has no leg`}},
		{"fallback without addr", base(ib+roce+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    peer: \"10.0.0.2:7471\"\n    cert: a\n    key: b\n    ca: c\n", ok+"    fallback: {leg: gw}\n"),
			[]string{`gw.yaml:20: route "r": fallback has no addr: want an IP address and a port`}},
		{"fallback after without unit", base(ib+roce, ok+"    fallback: {leg: gw, addr: \"198.18.3.9:1\", after: 3}\n"), []string{`gw.yaml:13: route "r": fallback: after "3": want a duration with a unit, as 500ms, 3s or 1m`}},
		{"fallback retry zero", base(ib+roce, ok+"    fallback: {leg: gw, addr: \"198.18.3.9:1\", retry: 0s}\n"), []string{`gw.yaml:13: route "r": fallback: retry 0s: want a duration above 0 and at most 1h0m0s`}},
		{"fallback after a day", base(ib+roce, ok+"    fallback: {leg: gw, addr: \"198.18.3.9:1\", after: 24h}\n"), []string{`gw.yaml:13: route "r": fallback: after 24h: want a duration above 0 and at most 1h0m0s`}},
		{"fallback unknown key", base(ib+roce, ok+"    fallback: {leg: gw, addr: \"198.18.3.9:1\", timeout: 3s}\n"), []string{`gw.yaml:13: route "r": fallback: unknown key "timeout"`}},
		{"quic over a userspace leg", base(ib+roce+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    peer: \"10.0.0.2:7471\"\n    over: roce\n    cert: a\n    key: b\n    ca: c\n", ok),
			[]string{`gw.yaml:13: leg "gw": over "roce": a userspace leg; over names a verbs leg`}},
		{"quic over nothing", base(ib+roce+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    peer: \"10.0.0.2:7471\"\n    over: ib9\n    cert: a\n    key: b\n    ca: c\n", ok),
			[]string{`gw.yaml:13: leg "gw": over "ib9": no such leg`}},
		{"bad mtu", base(ib+roce+"    mtu: 1500\n", ok), []string{`gw.yaml:9: leg "roce": mtu 1500: want an IB MTU`}},
		{"receives on a userspace leg", base(ib+roce+"    receives: 64\n", ok), []string{`gw.yaml:9: leg "roce": receives and receive_size are for verbs legs`}},
		{"too many receives", base(ib+"    receives: 2000\n"+roce, ok), []string{`gw.yaml:5: leg "ib": receives 2000: want 1 to 1024`}},
		{"receive_size not a power of two", base(ib+"    receive_size: 1000\n"+roce, ok), []string{`gw.yaml:5: leg "ib": receive_size 1000: want a power of two from 256 to 65536 bytes`}},
		{"receive_size above a pool buffer", base(ib+"    receive_size: 131072\n"+roce, ok), []string{`gw.yaml:5: leg "ib": receive_size 131072`}},
		{"mtu not whole", base(ib+roce+"    mtu: 1024.9\n", ok), []string{`gw.yaml:9: leg "roce": mtu "1024.9": want a whole number`}},
		{"port not whole", base(ib+"    port: 1.5\n"+roce, ok), []string{`gw.yaml:5: leg "ib": port "1.5": want a whole number`}},
		{"port a string", base(ib+"    port: one\n"+roce, ok), []string{`gw.yaml:5: leg "ib": port "one": want a whole number`}},
		{"mtu on a verbs leg", base(ib+"    mtu: 1024\n"+roce, ok), []string{`gw.yaml:5: leg "ib": mtu is for userspace legs`}},
		{"group not multicast", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 10.1.1.1, roce: roce, ib: ib}\n", []string{`gw.yaml:15: group "g": group 10.1.1.1 is not an IP multicast address`}},
		{"group roce side on a verbs leg", base(ib+roce, ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: ib, ib: roce}\n", []string{`gw.yaml:14: group "g": roce leg "ib": want a userspace leg`}},
		{"group bad direction", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, direction: up}\n", []string{`group "g": direction "up": want both, ib_to_roce or roce_to_ib`}},
		{"group ipoib mgid on userspace", base(ib+roce+"    io: udp\n  - {name: roce2, kind: userspace, interface: vgw1, ip: 198.18.2.3, io: udp}\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: roce2, mgid: ipoib}\n",
			[]string{`group "g": mgid ipoib: ib leg "roce2" is a userspace leg`}},
		{"group bad mgid", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, mgid: ib}\n", []string{`group "g": mgid "ib": want rdma_cm or ipoib`}},
		{"group peer not an address", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, peers: [gw2]}\n", []string{`gw.yaml:15: group "g": peers "gw2": not an IP address`}},
		{"group peers not a list", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, peers: 198.18.1.9}\n", []string{`gw.yaml:15: group "g": peers: want a list of addresses`}},
		{"group loop_window not a duration", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, loop_window: 500}\n", []string{`gw.yaml:15: group "g": loop_window "500": want a duration with a unit`}},
		{"group loop_window negative", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, loop_window: -1s}\n", []string{`gw.yaml:15: group "g": loop_window -1s: want 0 (off) or more`}},
		{"group peer is the gateway's own", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, peers: [198.18.3.1]}\n", []string{`gw.yaml:15: group "g": peer 198.18.3.1 is leg "ib"'s own address`}},
		{"group leg missing", base(ib+roce+"    io: udp\n", ok) + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib9}\n", []string{`group "g": ib leg "ib9" does not exist`}},
		{"ud not a bool", base(ib+roce, ok+"    ud: yes please\n"), []string{`gw.yaml:13: route "r": ud "yes please": want true or false`}},
		{"rate on an RC route", base(ib+roce, ok+"    rate: {packets: 10}\n"),
			[]string{`gw.yaml:13: route "r": rate: a rate limit is for UD routes (ud: true); an RC route's pace is its transport's flow control`}},
		{"bad rate on a UD route", base(ib+roce, ok+"    ud: true\n    rate:\n      packets: 0\n"),
			[]string{`gw.yaml:15: route "r": rate: packets 0: nothing would cross`}},
		{"UD route rate unknown key", base(ib+roce, ok+"    ud: true\n    rate: {pps: 3}\n"),
			[]string{`gw.yaml:14: route "r": rate: unknown key "pps" (known: packets, burst_packets, bytes, burst_bytes)`}},
		{"two ud routes on one listen", base(ib+roce, ok+"    ud: true\n"+strings.Replace(ok, "name: r", "name: s", 1)+"    ud: true\n"),
			[]string{`gw.yaml:15: route "s": listen addr 198.18.3.1:1 is route "r"'s already`}},
		{"ud route on a quic leg", base(ib+roce+"  - name: gw\n    kind: quic\n    ip: 10.0.0.1\n    peer: \"10.0.0.2:7471\"\n    cert: a\n    key: b\n    ca: c\n",
			route(`{leg: ib, addr: "198.18.3.1:1"}`, `{leg: gw, addr: "198.18.9.2:1"}`)+"    ud: true\n"),
			[]string{`route "r": ud: leg "gw" is a quic leg; UD routes are on userspace and verbs legs`}},
		{"tls files on a userspace leg", base(ib+roce+"    cert: x.crt\n", ok), []string{`gw.yaml:9: leg "roce": listen, peer, cert, key, ca, peer_name and over are for quic legs`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed:\n%s", tc.file)
			}
			var es config.Errors
			if !errors.As(err, &es) {
				t.Errorf("error %T is not config.Errors", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q; the file:\n%s", err, w, numbered(tc.file))
				}
			}
		})
	}
}

func numbered(s string) string {
	var b strings.Builder
	for i, l := range strings.Split(s, "\n") {
		b.WriteString(strings.Repeat(" ", 3-len(itoa(i+1))) + itoa(i+1) + " " + l + "\n")
	}
	return b.String()
}

func itoa(i int) string {
	const d = "0123456789"
	if i < 10 {
		return d[i : i+1]
	}
	return itoa(i/10) + d[i%10:i%10+1]
}

// TestParseQUIC reads a quic leg and the routes that cross it: their
// addresses name the far end, not this gateway.
func TestParseQUIC(t *testing.T) {
	const file = `legs:
  - name: roce
    kind: userspace
    interface: vgw0
    ip: 198.18.1.3
  - name: roce2
    kind: userspace
    interface: vgw1
    ip: 198.18.2.3
  - name: gw-b
    kind: quic
    ip: 10.0.0.1
    listen: "10.0.0.1:7471"
    peer: "10.0.0.2:7471"
    cert: /etc/rbridge/a.crt
    key: /etc/rbridge/a.key
    ca: /etc/rbridge/ca.crt
    peer_name: gw-b
  - name: ib
    kind: verbs
    ip: 198.18.3.1
  - name: gw-c
    kind: quic
    ip: 198.18.3.1
    peer: "198.18.3.7:7471"
    over: ib
    cert: /etc/rbridge/a.crt
    key: /etc/rbridge/a.key
    ca: /etc/rbridge/ca.crt
routes:
  - name: out
    listen: {leg: roce, addr: "198.18.1.3:4420"}
    target: {leg: gw-b, addr: "198.18.9.2:4420"}
  - name: near
    listen: {leg: roce, addr: "198.18.1.3:4421"}
    target: {leg: roce2, addr: "198.18.2.2:4421"}
    fallback: {leg: gw-b, addr: "198.18.2.2:4421", after: 500ms, retry: 1m}
  - name: in
    listen: {leg: gw-b, addr: "198.18.1.2:7000"}
    target: {leg: roce, addr: "198.18.1.2:7000"}
`
	c, err := config.Parse("gw.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	l, ok := c.Leg("gw-b")
	if !ok {
		t.Fatal("no leg gw-b")
	}
	if l.Kind != config.KindQUIC || l.ListenAddr() != netip.MustParseAddrPort("10.0.0.1:7471") || l.PeerAddr() != netip.MustParseAddrPort("10.0.0.2:7471") ||
		l.Cert != "/etc/rbridge/a.crt" || l.Key != "/etc/rbridge/a.key" || l.CA != "/etc/rbridge/ca.crt" || l.PeerName != "gw-b" {
		t.Errorf("leg %+v", l)
	}
	if c.Routes[2].Listen.Addr != netip.MustParseAddrPort("198.18.1.2:7000") {
		t.Errorf("route in listens on %v", c.Routes[2].Listen.Addr)
	}
	if f := c.Routes[1].Fallback; f.Leg != "gw-b" || f.Addr != netip.MustParseAddrPort("198.18.2.2:4421") ||
		f.After != 500*time.Millisecond || f.Retry != time.Minute {
		t.Errorf("route near's fallback %+v", f)
	}
	if l, _ := c.Leg("gw-c"); l.Over != "ib" {
		t.Errorf("leg gw-c over %q", l.Over)
	}
	if f := c.Routes[0].Fallback; f.Leg != "" {
		t.Errorf("route out has a fallback %+v", f)
	}
}

// joinedFile is a file with one joined_on group (line 5 on) with keys.
func joinedFile(keys string) string {
	return `legs:
  - {name: ib, kind: verbs, ip: 198.18.3.1}
  - {name: roce, kind: userspace, interface: vgw0, ip: 198.18.1.3, io: udp}
groups:
  - name: feeds
    roce: roce
    ib: ib
` + keys
}

// joinedKeys are what a joined_on group sets.
type joinedKeys struct {
	JoinedOn, Direction, Within string
	MaxGroups                   int
	Rate                        config.Rate
}

// TestParseJoined: a group entry that names a side instead of a group: its
// direction is the side's, within and max_groups default.
func TestParseJoined(t *testing.T) {
	for _, tc := range []struct {
		name, keys string
		want       joinedKeys
	}{
		{"ib, defaults", "    joined_on: ib\n", joinedKeys{JoinedOn: "ib", Direction: "roce_to_ib", Within: "224.0.0.0/4", MaxGroups: 64}},
		{"roce, within, max", "    joined_on: roce\n    within: 239.0.0.0/8\n    max_groups: 3\n    rate: {packets: 10}\n",
			joinedKeys{JoinedOn: "roce", Direction: "ib_to_roce", Within: "239.0.0.0/8", MaxGroups: 3, Rate: config.Rate{Packets: 10, BurstPackets: 1}}},
		{"and disjoint ones", "    joined_on: ib\n    within: 239.0.0.0/8\n  - {name: more, joined_on: ib, roce: roce, ib: ib, within: 238.0.0.0/8}\n  - {name: back, joined_on: roce, roce: roce, ib: ib, within: 237.0.0.0/8}\n",
			joinedKeys{JoinedOn: "ib", Direction: "roce_to_ib", Within: "239.0.0.0/8", MaxGroups: 64}},
		{"direction given, the side's", "    joined_on: ib\n    direction: roce_to_ib\n", joinedKeys{JoinedOn: "ib", Direction: "roce_to_ib", Within: "224.0.0.0/4", MaxGroups: 64}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse("gw.yaml", []byte(joinedFile(tc.keys)))
			if err != nil {
				t.Fatal(err)
			}
			g := c.Groups[0]
			got := joinedKeys{JoinedOn: g.JoinedOn, Direction: g.Direction, Within: g.Within.String(), MaxGroups: g.MaxGroups, Rate: g.Rate}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("group (-want +got):\n%s", d)
			}
			if g.Group.IsValid() || g.Name != "feeds" || g.MGID != config.MGIDRDMACM || g.LoopWindow != config.DefaultLoopWindow {
				t.Errorf("group %q: address %v, mgid %q, loop_window %v; want none, rdma_cm, the default", g.Name, g.Group, g.MGID, g.LoopWindow)
			}
		})
	}
}

// TestParseJoinedIPv6: between IPv6 legs a joined_on entry's default
// within is every IPv6 group; a prefix may narrow it.
func TestParseJoinedIPv6(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(`legs:
  - {name: a, kind: userspace, interface: v0, ip: "fd01::1", io: udp}
  - {name: b, kind: userspace, interface: v1, ip: "fd02::1", io: udp}
  - {name: c, kind: userspace, interface: v2, ip: "fd03::1", io: udp}
groups:
  - {name: all, joined_on: ib, roce: a, ib: b}
  - {name: site, joined_on: roce, roce: a, ib: c, within: "ff0e::/16"}
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"ff00::/8", "ff0e::/16"} {
		if got := c.Groups[i].Within.String(); got != want {
			t.Errorf("group %s: within %s, want %s", c.Groups[i].Name, got, want)
		}
	}
}

// TestParseJoinedBad: what does not go with joined_on is refused, named
// with the group and its line.
func TestParseJoinedBad(t *testing.T) {
	for _, tc := range []struct{ name, keys, want string }{
		{"bad side", "    joined_on: both\n", `gw.yaml:8: group "feeds": joined_on "both": want roce or ib`},
		{"and a group", "    joined_on: ib\n    group: 239.1.1.1\n", `gw.yaml:9: group "feeds": joined_on ib and group 239.1.1.1: a joined_on entry names no group`},
		{"another direction", "    joined_on: ib\n    direction: both\n", `gw.yaml:9: group "feeds": direction both: joined_on ib relays roce_to_ib`},
		{"busy_poll", "    joined_on: roce\n    busy_poll: true\n", `gw.yaml:9: group "feeds": busy_poll with joined_on`},
		{"busy_poll_idle", "    joined_on: roce\n    busy_poll_idle: 1ms\n", `gw.yaml:9: group "feeds": busy_poll with joined_on`},
		{"ipoib on the members' ib", "    joined_on: ib\n    mgid: ipoib\n", `gw.yaml:9: group "feeds": mgid ipoib with joined_on ib`},
		{"within IPv6, legs IPv4", "    joined_on: ib\n    within: ff05::/16\n", `gw.yaml:7: group "feeds": ib leg "ib" is not of within ff05::/16's address family`},
		{"within unicast", "    joined_on: ib\n    within: 10.0.0.0/8\n", `gw.yaml:9: group "feeds": within 10.0.0.0/8: not within the multicast block 224.0.0.0/4`},
		{"within too wide", "    joined_on: ib\n    within: 192.0.0.0/2\n", `gw.yaml:9: group "feeds": within 192.0.0.0/2: not within the multicast block`},
		{"within IPv6 unicast", "    joined_on: ib\n    within: fd00::/8\n", `gw.yaml:9: group "feeds": within fd00::/8: not within the multicast block ff00::/8`},
		{"within host bits", "    joined_on: ib\n    within: 239.1.2.3/8\n", `gw.yaml:9: group "feeds": within 239.1.2.3/8: host bits set (the prefix is 239.0.0.0/8)`},
		{"within not a prefix", "    joined_on: ib\n    within: 239.1.2.3\n", `gw.yaml:9: group "feeds": within "239.1.2.3": want a prefix, as "239.0.0.0/8"`},
		{"max_groups zero", "    joined_on: ib\n    max_groups: 0\n", `gw.yaml:9: group "feeds": max_groups 0: want 1 to 1024`},
		{"max_groups not whole", "    joined_on: ib\n    max_groups: 2.5\n", `gw.yaml:9: group "feeds": max_groups "2.5": want a whole number`},
		{"max_groups too many", "    joined_on: ib\n    max_groups: 5000\n", `gw.yaml:9: group "feeds": max_groups 5000: want 1 to 1024`},
		{"within without joined_on", "    group: 239.1.1.1\n    within: 239.0.0.0/8\n", `gw.yaml:9: group "feeds": within and max_groups go with joined_on`},
		{"neither group nor side", "", `gw.yaml:5: group "feeds": no group: want an IP multicast address (or joined_on)`},
		{"overlapping on one leg", "    joined_on: ib\n    within: 239.0.0.0/8\n  - {name: more, joined_on: ib, roce: roce, ib: ib, within: 239.1.0.0/16}\n",
			`gw.yaml:10: group "more": within 239.1.0.0/16 overlaps group "feeds"'s 239.0.0.0/8 between the same legs: a group joined there would be relayed twice`},
		{"overlapping, the other side", "    joined_on: ib\n  - {name: back, joined_on: roce, roce: roce, ib: ib, within: 239.1.0.0/16}\n",
			`gw.yaml:9: group "back": within 239.1.0.0/16 overlaps group "feeds"'s 224.0.0.0/4 between the same legs`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := joinedFile(tc.keys)
			_, err := config.Parse("gw.yaml", []byte(file))
			if err == nil {
				t.Fatalf("parsed:\n%s", numbered(file))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n%v\nlacks %q; the file:\n%s", err, tc.want, numbered(file))
			}
		})
	}
}

// TestParseReceives: a verbs leg's receives and their size, and that a
// change of either is a change of the leg (Leg.Same), as any other key.
func TestParseReceives(t *testing.T) {
	text := strings.Replace(good, "    port: 1\n", "    port: 1\n    receives: 128\n    receive_size: 4096\n", 1)
	c, err := config.Parse("gw.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Legs[0]; l.Receives != 128 || l.ReceiveSize != 4096 {
		t.Errorf("leg ib: receives %d of %d bytes, want 128 of 4096", l.Receives, l.ReceiveSize)
	}
	plain, err := config.Parse("gw.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if c.Legs[0].Same(plain.Legs[0]) {
		t.Error("a leg whose receives changed reads as the same leg")
	}
	// The same keys on other lines are the same leg.
	moved, err := config.Parse("gw.yaml", []byte("# a comment moves every line\n"+text))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Legs[0].Same(moved.Legs[0]) || !c.Legs[1].Same(moved.Legs[1]) {
		t.Error("legs read from other lines read as changed")
	}
}

// TestRouteLiveness: a route's liveness is the default unless given, 0s
// turns it off, and a duration within the bounds is taken as it is.
func TestRouteLiveness(t *testing.T) {
	base := `legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.0.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.0.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.0.1:7471"}
    target: {leg: b, addr: "127.0.0.3:7471"}
`
	for _, tc := range []struct {
		extra string
		want  time.Duration
	}{
		{"", config.DefaultLiveness},
		{"    liveness: 0s\n", config.LivenessOff},
		{"    liveness: 5s\n", 5 * time.Second},
		{"    liveness: 2m\n", 2 * time.Minute},
	} {
		c, err := config.Parse("gw.yaml", []byte(base+tc.extra))
		if err != nil {
			t.Fatalf("%q: %v", tc.extra, err)
		}
		if got := c.Routes[0].Liveness; got != tc.want {
			t.Errorf("%q: liveness %v, want %v", tc.extra, got, tc.want)
		}
	}
}
