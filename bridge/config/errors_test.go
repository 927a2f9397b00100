package config_test

import (
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestParseErrorsInFileTerms: what is wrong is said in the file's terms,
// the key, its line and what it wants, never in Go's (a type's name, a
// parser's function): each case's file is inline, and its error must be
// want exactly, every line of it in the file's order, with none of the Go
// words. An error is at its key's own line (not its leg's or route's
// first), names the leg, route or group it is about, and a tab is
// reported at the line that holds it.
func TestParseErrorsInFileTerms(t *testing.T) {
	const legs = `legs:
  - name: ib
    kind: verbs
    ip: 198.18.3.1
  - name: roce
    kind: userspace
    interface: vgw0
    ip: 198.18.1.3
    io: udp
`
	const route = `routes:
  - name: r
    listen: {leg: ib, addr: "198.18.3.1:4420"}
    target: {leg: roce, addr: "198.18.1.2:4420"}
`
	for _, tc := range []struct{ name, file, want string }{
		{"routes a number", legs + "routes: 5\n", `gw.yaml:10: routes: want a list of routes, got a number (5)`},
		{"legs a mapping", "legs: {name: ib}\n" + route, `gw.yaml:1: legs: want a list of legs, got a mapping (keys)`},
		{"groups a string", legs + route + "groups: ticks\n", `gw.yaml:14: groups: want a list of groups, got "ticks"`},
		{"a leg a string", "legs:\n  - ib\n" + route, "gw.yaml:2: leg: want a mapping of keys (name, kind, ip, device, port, interface, io, netns, ecn, listen, peer, cert, key, ca, peer_name, over, mtu, receives, receive_size, udp_offload, freebind, busy_poll, busy_poll_cpus, busy_poll_idle, queues), got \"ib\"\ngw.yaml:5: route \"r\": listen leg \"ib\" does not exist\ngw.yaml:6: route \"r\": target leg \"roce\" does not exist"},
		{"the file a list", "- legs\n- routes\n", `gw.yaml:1: want a mapping of keys (legs, routes, groups, admin, pool), got a list`},
		{"ip out of range", strings.Replace(legs, "198.18.3.1", "127.0.0.300", 1) + route, `gw.yaml:4: leg "ib": ip "127.0.0.300": not an IP address`},
		{"port a word", strings.Replace(legs, "    ip: 198.18.3.1\n", "    ip: 198.18.3.1\n    port: first\n", 1) + route, `gw.yaml:5: leg "ib": port "first": want a whole number`},
		{"ecn a word", legs + "    ecn: sometimes\n" + route, `gw.yaml:10: leg "roce": ecn "sometimes": want true or false`},
		{"addr without port", legs + strings.Replace(route, `"198.18.1.2:4420"`, `"198.18.1.2"`, 1), `gw.yaml:13: route "r": target: addr "198.18.1.2": want an IP address and a port, as "198.18.1.2:4420"`},
		{"addr with a bad port", legs + strings.Replace(route, `"198.18.1.2:4420"`, `"198.18.1.2:99999"`, 1), `gw.yaml:13: route "r": target: addr "198.18.1.2:99999": want an IP address and a port, as "198.18.1.2:4420"`},
		{"unknown endpoint key", legs + strings.Replace(route, `{leg: ib,`, `{leg: ib, port: 1,`, 1), `gw.yaml:12: route "r": listen: unknown key "port" (known: leg, addr)`},
		{"no target addr", legs + strings.Replace(route, `{leg: roce, addr: "198.18.1.2:4420"}`, `{leg: roce}`, 1), `gw.yaml:13: route "r": target has no addr: want an IP address and a port, as "198.18.1.2:4420"`},
		{"allow nonsense", legs + route + "    allow: [nonsense]\n", `gw.yaml:14: route "r": allow "nonsense": not an address or prefix, as "198.18.3.0/24" or "198.18.3.7"`},
		{"allow a number", legs + route + "    allow: 10\n", `gw.yaml:14: route "r": allow: want a list of prefixes, as ["198.18.3.0/24"], got a number (10)`},
		{"fallback after without unit", legs + route + "    fallback: {leg: gw, addr: \"198.18.3.9:1\", after: 3}\n", `gw.yaml:14: route "r": fallback: after "3": want a duration with a unit, as 500ms, 3s or 1m`},
		{"fallback without addr", legs + "  - {name: gw, kind: quic, ip: 10.0.0.1, peer: \"10.0.0.2:7471\", cert: a, key: b, ca: c}\n" + route + "    fallback: {leg: gw}\n",
			`gw.yaml:15: route "r": fallback has no addr: want an IP address and a port, as "198.18.1.2:4420"`},
		{"group not an address", legs + "groups:\n  - {name: g, group: 239.1.1, roce: roce, ib: ib}\n", `gw.yaml:11: group "g": group "239.1.1": not an IP address`},
		{"group missing", legs + "groups:\n  - {name: g, roce: roce, ib: ib}\n", `gw.yaml:11: group "g": no group: want an IP multicast address (or joined_on)`},
		{"within nonsense", legs + "groups:\n  - {name: g, joined_on: ib, within: nonsense, roce: roce, ib: ib}\n", `gw.yaml:11: group "g": within "nonsense": want a prefix, as "239.0.0.0/8"`},
		{"loop_window without unit", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, loop_window: 500}\n", `gw.yaml:11: group "g": loop_window "500": want a duration with a unit, as 500ms, 3s or 1m`},
		{"busy_poll a word", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, busy_poll: fast}\n", `gw.yaml:11: group "g": busy_poll "fast": want true or false`},
		{"peers a word", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, peers: [gw2]}\n", `gw.yaml:11: group "g": peers "gw2": not an IP address`},
		{"peers not a list", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, peers: 198.18.1.9}\n", `gw.yaml:11: group "g": peers: want a list of addresses, as ["198.18.1.9"], got "198.18.1.9"`},
		{"mtu not whole", legs + "    mtu: 1024.9\n" + route, `gw.yaml:10: leg "roce": mtu "1024.9": want a whole number`},
		{"kind at its own line", strings.Replace(legs, "kind: verbs", "kind: verbz", 1) + route, `gw.yaml:3: leg "ib": kind "verbz": want verbs, userspace or quic`},
		{"io at its own line", strings.Replace(legs, "io: udp", "io: dpdk", 1) + route, `gw.yaml:9: leg "roce": io "dpdk": want afxdp or udp`},
		{"a tab on line 3", "legs:\n  - name: ib\n\tkind: verbs\n", `gw.yaml:3: a tab in the indentation (column 1): YAML indents with spaces alone`},
		{"a tab starting line 2", "legs:\n\t- name: ib\n", `gw.yaml:2: a tab in the indentation (column 1): YAML indents with spaces alone`},
		{"packets with a byte unit", legs + route + "    ud: true\n    rate: {packets: 64KiB}\n", `gw.yaml:15: route "r": rate: packets "64KiB": want a whole number of datagrams`},
		{"bytes in bits", legs + route + "    ud: true\n    rate: {bytes: 400Mb}\n", `gw.yaml:15: route "r": rate: bytes "400Mb": unit "Mb": bits? the rate is in bytes: write MB for megabytes (50 Mbit/s is 6.25MB)`},
		{"rate on an RC route", legs + route + "    rate: {packets: 100}\n", `gw.yaml:14: route "r": rate: a rate limit is for UD routes (ud: true); an RC route's pace is its transport's flow control, which drops nothing`},
		{"ud a word", legs + route + "    ud: yes please\n", `gw.yaml:14: route "r": ud "yes please": want true or false`},
		{"allow an address out of range", legs + route + "    allow: [\"198.18.3.0/33\"]\n", `gw.yaml:14: route "r": allow "198.18.3.0/33": not an address or prefix, as "198.18.3.0/24" or "198.18.3.7"`},
		{"listen on another leg's address", legs + strings.Replace(route, `{leg: ib, addr: "198.18.3.1:4420"}`, `{leg: ib, addr: "198.18.1.3:4420"}`, 1), `gw.yaml:12: route "r": listen addr 198.18.1.3:4420 is not leg "ib"'s address (198.18.3.1)`},
		{"listen leg missing", legs + strings.Replace(route, `{leg: ib,`, `{leg: eth,`, 1), `gw.yaml:12: route "r": listen leg "eth" does not exist`},
		{"route twice", legs + route + strings.Replace(route, "routes:\n", "", 1), "gw.yaml:14: route \"r\" is defined twice (first at line 11)\ngw.yaml:15: route \"r\": listen addr 198.18.3.1:4420 is route \"r\"'s already"},
		{"both ends on one leg", legs + strings.Replace(route, `{leg: roce, addr: "198.18.1.2:4420"}`, `{leg: ib, addr: "198.18.3.2:4420"}`, 1), `gw.yaml:13: route "r": listen and target are both on leg "ib": a route crosses from one leg to the other`},
		{"route without a name", legs + strings.Replace(route, "  - name: r\n    listen", "  - listen", 1), `gw.yaml:11: route without a name`},
		{"fallback a userspace leg", legs + route + "    fallback: {leg: roce, addr: \"198.18.1.9:1\"}\n", `gw.yaml:14: route "r": fallback leg "roce" is a userspace leg: a fallback goes through a peer gateway (a quic leg)`},
		{"route unknown key", legs + route + "    colour: red\n", `gw.yaml:14: route "r": unknown key "colour" (known: name, listen, target, allow, fallback, ud, rate, protocol, liveness)`},
		{"udp_offload on afxdp", strings.Replace(legs, "io: udp", "io: afxdp\n    udp_offload: false", 1) + route, `gw.yaml:10: leg "roce": udp_offload is for io: udp (an io: afxdp leg's packets bypass the kernel's UDP)`},
		{"udp_offload on a verbs leg", strings.Replace(legs, "ip: 198.18.3.1", "ip: 198.18.3.1\n    udp_offload: true", 1) + route, `gw.yaml:5: leg "ib": udp_offload is for userspace legs with io: udp`},
		{"freebind on afxdp", strings.Replace(legs, "io: udp", "io: afxdp\n    freebind: true", 1) + route, `gw.yaml:10: leg "roce": freebind is for io: udp for now (an io: afxdp leg on a floating address is not supported yet)`},
		{"freebind on a verbs leg", strings.Replace(legs, "ip: 198.18.3.1", "ip: 198.18.3.1\n    freebind: true", 1) + route, `gw.yaml:5: leg "ib": freebind is for userspace legs with io: udp`},
		{"freebind a word", strings.Replace(legs, "io: udp", "io: udp\n    freebind: yes please", 1) + route, `gw.yaml:10: leg "roce": freebind "yes please": want true or false`},
		{"udp_offload a word", strings.Replace(legs, "io: udp", "io: udp\n    udp_offload: maybe", 1) + route, `gw.yaml:10: leg "roce": udp_offload "maybe": want true or false`},
		{"liveness below a second", legs + route + "    liveness: 100ms\n", `gw.yaml:14: route "r": liveness 100ms: want 0s (off) or a duration from 1s to 24h0m0s`},
		{"liveness not a duration", legs + route + "    liveness: often\n", `gw.yaml:14: route "r": liveness "often": want a duration with a unit, as 500ms, 3s or 1m`},
		{"liveness on a UD route", legs + route + "    ud: true\n    liveness: 10s\n", `gw.yaml:15: route "r": liveness: a UD route has no connections to probe`},
		{"ud route with fallback", legs + "  - {name: gw, kind: quic, ip: 10.0.0.1, peer: \"10.0.0.2:7471\", cert: a, key: b, ca: c}\n" + route + "    ud: true\n    fallback: {leg: gw, addr: \"198.18.1.2:4420\"}\n", `gw.yaml:16: route "r": ud: a UD route has no fallback`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed:\n%s", numbered(tc.file))
			}
			if err.Error() != tc.want {
				t.Errorf("error\n%v\nwant\n%s\nthe file:\n%s", err, tc.want, numbered(tc.file))
			}
			for _, goWord := range []string{"*int", "*bool", "!!", "config.", "ParseAddr", "ParsePrefix", "AddrPort", "invalid IP", "strconv", "time: ", "unmarshal"} {
				if strings.Contains(err.Error(), goWord) {
					t.Errorf("error\n%v\nspeaks Go (%q)", err, goWord)
				}
			}
		})
	}
}
