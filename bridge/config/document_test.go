package config_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
)

// anchoredLegs are two userspace legs, the second the first merged with
// its own name and address; lines 1 to 10.
const anchoredLegs = `legs:
  - &lo
    name: a
    kind: userspace
    interface: lo
    ip: 127.0.0.1
    io: udp
  - <<: *lo
    name: b
    ip: 127.0.0.2
`

// TestParseAliases: anchors, aliases and merge keys read as YAML has them:
// an alias is the anchored value, a merge key brings the keys a mapping
// does not give itself (its own win, wherever they stand; of several
// mappings merged, the earlier's win).
func TestParseAliases(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(anchoredLegs+`  - <<: [{name: c, ip: 127.0.0.3}, *lo]
    io: afxdp
routes:
  - name: r
    listen: &in {leg: a, addr: "127.0.0.1:7471"}
    target: &out {leg: b, addr: "127.0.0.9:7471"}
    allow: &nets ["198.18.3.0/24", 10.0.0.0/8]
  - name: s
    <<: {listen: *in, target: *out}
    listen: {leg: a, addr: "127.0.0.1:7472"}
    allow: *nets
`))
	if err != nil {
		t.Fatal(err)
	}
	type leg struct{ Name, Kind, Interface, IP, IO string }
	var legs []leg
	for _, l := range c.Legs {
		legs = append(legs, leg{l.Name, l.Kind, l.Interface, l.IP.String(), l.IO})
	}
	if d := cmp.Diff([]leg{{"a", "userspace", "lo", "127.0.0.1", "udp"}, {"b", "userspace", "lo", "127.0.0.2", "udp"}, {"c", "userspace", "lo", "127.0.0.3", "afxdp"}}, legs); d != "" {
		t.Errorf("legs (-want +got):\n%s", d)
	}
	type route struct {
		Name, Listen, Target string
		Allow                []netip.Prefix
	}
	var routes []route
	for _, r := range c.Routes {
		routes = append(routes, route{r.Name, r.Listen.Leg + " " + r.Listen.Addr.String(), r.Target.Leg + " " + r.Target.Addr.String(), r.Allow})
	}
	nets := []netip.Prefix{netip.MustParsePrefix("198.18.3.0/24"), netip.MustParsePrefix("10.0.0.0/8")}
	want := []route{{"r", "a 127.0.0.1:7471", "b 127.0.0.9:7471", nets}, {"s", "a 127.0.0.1:7472", "b 127.0.0.9:7471", nets}}
	if d := cmp.Diff(want, routes, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); d != "" {
		t.Errorf("routes (-want +got):\n%s", d)
	}
}

// TestParseAliasesBad: what is wrong in a value an alias or a merge key
// brings is reported at the line that used it (and at the anchor's own,
// where that is a key's too); a merge key that brings no mapping, and
// aliases that multiply (an alias bomb) or nest too deep, are refused.
func TestParseAliasesBad(t *testing.T) {
	bomb := "legs:\n  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
	for i := 1; i < 9; i++ {
		bomb += fmt.Sprintf("  - &a%d [%s]\n", i, strings.TrimSuffix(strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 10), ", "))
	}
	deep := "legs:\n  - &d0 [x]\n"
	for i := 1; i < 18; i++ {
		deep += fmt.Sprintf("  - &d%d [*d%d]\n", i, i-1)
	}
	for _, tc := range []struct {
		name, file string
		want       []string
	}{
		{"in a merged leg", anchoredLegs + "  - &bad {name: x, kind: userspace, interface: lo, ip: 127.0.0.x}\n  - <<: *bad\n    name: c\n",
			[]string{`gw.yaml:11: leg "x": ip "127.0.0.x"`, `gw.yaml:12: leg "c": ip "127.0.0.x"`}},
		{"in an aliased list", anchoredLegs + `routes:
  - {name: r, listen: {leg: a, addr: "127.0.0.1:1"}, target: {leg: b, addr: "127.0.0.9:1"}, allow: &nets [nonsense]}
  - name: s
    listen: {leg: a, addr: "127.0.0.1:2"}
    target: {leg: b, addr: "127.0.0.9:1"}
    allow: *nets
`, []string{`gw.yaml:12: route "r": allow "nonsense"`, `gw.yaml:16: route "s": allow "nonsense"`}},
		{"merging a list", "legs:\n  - <<: [a, b]\n", []string{`gw.yaml:2: <<: want a mapping, or a list of mappings, to merge (as <<: *name), got "a"`}},
		{"merging a number", "legs:\n  - name: a\n    <<: 5\n", []string{`gw.yaml:3: <<: want a mapping, or a list of mappings, to merge (as <<: *name), got a number (5)`}},
		{"merging twice", "legs:\n  - <<: {name: a}\n    <<: {kind: verbs}\n", []string{`gw.yaml:3: <<: given twice (first at line 2): merge several mappings as <<: [*a, *b]`}},
		{"a quoted <<", "legs:\n  - {name: a, \"<<\": {kind: verbs}}\n", []string{`gw.yaml:2: leg "a": unknown key "<<"`}},
		{"a bomb", bomb, []string{"gw.yaml:6: aliases expand to more than 100000 values: a file that multiplies itself (an alias bomb)?"}},
		{"nested deep", deep, []string{"gw.yaml:19: alias *d0: aliases nested more than 16 deep"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := config.Parse("gw.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed:\n%s", numbered(tc.file))
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\nlacks %q; the file:\n%s", err, w, numbered(tc.file))
				}
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("refused after %v", el)
			}
		})
	}
}

// TestParseOneDocument: a second YAML document would be ignored, so it is
// refused where it begins; an empty one at the end holds nothing.
func TestParseOneDocument(t *testing.T) {
	if _, err := config.Parse("gw.yaml", []byte(good+"---\n")); err != nil {
		t.Errorf("a file ending in an empty document: %v", err)
	}
	if _, err := config.Parse("gw.yaml", []byte("---\n"+good+"...\n")); err != nil {
		t.Errorf("a document with its markers: %v", err)
	}
	file := good + "---\nadmin: {listen: \"\"}\n"
	_, err := config.Parse("gw.yaml", []byte(file))
	if want := `gw.yaml:21: only one YAML document: a second begins here ("---")`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("error %v, want %q; the file:\n%s", err, want, numbered(file))
	}
}
