package config_test

import (
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestParseErrorsInFileTerms: what is wrong is said in the file's terms,
// the key, its line and what it wants, never in Go's (a type's name, a
// parser's function): each case's file is inline, and its error must hold
// want and none of the Go words.
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
		{"a leg a string", "legs:\n  - ib\n" + route, `gw.yaml:2: leg: want a mapping of keys (name, kind, ip,`},
		{"the file a list", "- legs\n- routes\n", `gw.yaml:1: want a mapping of keys (legs, routes, groups, admin), got a list`},
		{"ip out of range", strings.Replace(legs, "198.18.3.1", "127.0.0.300", 1) + route, `gw.yaml:4: leg: ip "127.0.0.300": not an IP address`},
		{"port a word", strings.Replace(legs, "    ip: 198.18.3.1\n", "    ip: 198.18.3.1\n    port: first\n", 1) + route, `gw.yaml:5: leg: port "first": want a whole number`},
		{"ecn a word", legs + "    ecn: sometimes\n" + route, `gw.yaml:10: leg: ecn "sometimes": want true or false`},
		{"addr without port", legs + strings.Replace(route, `"198.18.1.2:4420"`, `"198.18.1.2"`, 1), `gw.yaml:13: target: addr "198.18.1.2": want an IP address and a port, as "198.18.1.2:4420"`},
		{"addr with a bad port", legs + strings.Replace(route, `"198.18.1.2:4420"`, `"198.18.1.2:99999"`, 1), `gw.yaml:13: target: addr "198.18.1.2:99999": want an IP address and a port`},
		{"unknown endpoint key", legs + strings.Replace(route, `{leg: ib,`, `{leg: ib, port: 1,`, 1), `gw.yaml:12: listen: unknown key "port" (known: leg, addr)`},
		{"no target addr", legs + strings.Replace(route, `{leg: roce, addr: "198.18.1.2:4420"}`, `{leg: roce}`, 1), `gw.yaml:13: route "r": target has no addr: want an IP address and a port, as "198.18.1.2:4420"`},
		{"allow nonsense", legs + route + "    allow: [nonsense]\n", `gw.yaml:14: route: allow "nonsense": not an address or prefix, as "198.18.3.0/24" or "198.18.3.7"`},
		{"allow a number", legs + route + "    allow: 10\n", `gw.yaml:14: route: allow: want a list of prefixes, as ["198.18.3.0/24"], got a number (10)`},
		{"fallback after without unit", legs + route + "    fallback: {leg: gw, addr: \"198.18.3.9:1\", after: 3}\n", `gw.yaml:14: fallback: after "3": want a duration with a unit, as 500ms, 3s or 1m`},
		{"fallback without addr", legs + "  - {name: gw, kind: quic, ip: 10.0.0.1, peer: \"10.0.0.2:7471\", cert: a, key: b, ca: c}\n" + route + "    fallback: {leg: gw}\n",
			`gw.yaml:15: route "r": fallback has no addr: want an IP address and a port, as "198.18.1.2:4420"`},
		{"group not an address", legs + "groups:\n  - {name: g, group: 239.1.1, roce: roce, ib: ib}\n", `gw.yaml:11: group: group "239.1.1": not an IP address`},
		{"group missing", legs + "groups:\n  - {name: g, roce: roce, ib: ib}\n", `gw.yaml:11: group "g": no group: want an IP multicast address (or joined_on)`},
		{"within nonsense", legs + "groups:\n  - {name: g, joined_on: ib, within: nonsense, roce: roce, ib: ib}\n", `gw.yaml:11: group: within "nonsense": want a prefix, as "239.0.0.0/8"`},
		{"loop_window without unit", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, loop_window: 500}\n", `gw.yaml:11: group: loop_window "500": want a duration with a unit`},
		{"busy_poll a word", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, busy_poll: fast}\n", `gw.yaml:11: group: busy_poll "fast": want true or false`},
		{"peers a word", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, peers: [gw2]}\n", `gw.yaml:11: group: peers "gw2": not an IP address`},
		{"peers not a list", legs + "groups:\n  - {name: g, group: 239.1.1.1, roce: roce, ib: ib, peers: 198.18.1.9}\n", `gw.yaml:11: group: peers: want a list of addresses, as ["198.18.1.9"], got "198.18.1.9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed:\n%s", numbered(tc.file))
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error\n%v\nlacks %q; the file:\n%s", err, tc.want, numbered(tc.file))
			}
			for _, goWord := range []string{"*int", "*bool", "!!", "config.", "ParseAddr", "ParsePrefix", "AddrPort", "invalid IP", "strconv", "time: ", "unmarshal"} {
				if strings.Contains(err.Error(), goWord) {
					t.Errorf("error\n%v\nspeaks Go (%q)", err, goWord)
				}
			}
		})
	}
}
