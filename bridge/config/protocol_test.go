package config_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestParseProtocol: an RC route may name the protocol it carries; a
// route without the key carries none.
func TestParseProtocol(t *testing.T) {
	c, err := config.Parse("gw.yaml", []byte(good+`  - name: nvme
    listen: {leg: ib, addr: "198.18.3.1:4421"}
    target: {leg: roce, addr: "198.18.1.2:4420"}
    protocol: nvme
  - name: files
    listen: {leg: ib, addr: "198.18.3.1:20049"}
    target: {leg: roce, addr: "198.18.1.2:20049"}
    protocol: nfs
  - name: iser
    listen: {leg: ib, addr: "198.18.3.1:3261"}
    target: {leg: roce, addr: "198.18.1.2:3260"}
    protocol: iser
`))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range c.Routes {
		got = append(got, r.Protocol)
	}
	if d := cmp.Diff([]string{"", "", config.ProtocolNVMe, config.ProtocolNFS, config.ProtocolISER}, got); d != "" {
		t.Errorf("routes' protocol (-want +got):\n%s", d)
	}
}

// TestParseProtocolBad: a protocol rbridge does not understand (or not
// yet), an empty one, one on a UD route or not a single value is refused
// at its line, naming the route and what is known.
func TestParseProtocolBad(t *testing.T) {
	route := func(extra string) string {
		return good + "  - name: p\n    listen: {leg: ib, addr: \"198.18.3.1:4421\"}\n    target: {leg: roce, addr: \"198.18.1.2:4420\"}\n" + extra
	}
	for _, tc := range []struct{ name, file, want string }{
		{"unknown", route("    protocol: scsi\n"), `gw.yaml:24: route "p": protocol "scsi" is not one rbridge understands; known: nvme, nfs, iser, srp`},
		{"capitals", route("    protocol: NVMe\n"), `gw.yaml:24: route "p": protocol "NVMe" is not one rbridge understands; known: nvme, nfs, iser, srp`},
		{"smb never", route("    protocol: SMB\n"), `gw.yaml:24: route "p": protocol "SMB": SMB Direct cannot be staged: its buffer descriptors sit inside SMB2 messages that SMB 3.x signs or encrypts, so rewriting them would break the signature; carry SMB Direct only where its one-sided initiator (the server) is behind the userspace leg, on a route without a protocol; known: nvme, nfs, iser, srp`},
		{"empty", route("    protocol: \"\"\n"), `gw.yaml:24: route "p": protocol is empty: want one of nvme, nfs, iser, srp`},
		{"a list", route("    protocol: [nvme]\n"), `gw.yaml:24: route "p": protocol: want a single value`},
		{"ud", route("    ud: true\n    protocol: nvme\n"), `gw.yaml:25: route "p": protocol nvme: a protocol is for RC routes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("gw.yaml", []byte(tc.file))
			if err == nil {
				t.Fatalf("parsed:\n%s", tc.file)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error:\n%v\nwant it to hold:\n%s", err, tc.want)
			}
			if n := strings.Count(err.Error(), "\n") + 1; n != 1 {
				t.Errorf("%d errors, want the one:\n%v", n, err)
			}
		})
	}
}

// TestRouteSame: two routes are the same when every key the file gives
// them is, wherever they stand in their files; a rate (which a reload
// changes in place) is not compared, a protocol is.
func TestRouteSame(t *testing.T) {
	const base = `  - name: r
    listen: {leg: ib, addr: "198.18.3.1:4421"}
    target: {leg: roce, addr: "198.18.1.2:4420"}
`
	parse := func(t *testing.T, routes string) config.Route {
		t.Helper()
		c, err := config.Parse("gw.yaml", []byte(good+routes))
		if err != nil {
			t.Fatal(err)
		}
		return c.Routes[len(c.Routes)-1]
	}
	a := parse(t, base)
	for _, tc := range []struct {
		name, routes string
		same         bool
	}{
		{"itself", base, true},
		{"further down the file", "  - name: x\n    listen: {leg: ib, addr: \"198.18.3.1:9\"}\n    target: {leg: roce, addr: \"198.18.1.2:9\"}\n" + base, true},
		{"empty allow", base + "    allow: []\n", true},
		{"protocol", base + "    protocol: nvme\n", false},
		{"allow", base + "    allow: [198.18.3.0/24]\n", false},
		{"target", strings.Replace(base, "198.18.1.2:4420", "198.18.1.2:4421", 1), false},
		{"listen leg", strings.Replace(strings.Replace(base, "leg: ib, addr: \"198.18.3.1", "leg: roce, addr: \"198.18.1.3", 1), "leg: roce, addr: \"198.18.1.2", "leg: ib, addr: \"198.18.3.2", 1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := parse(t, tc.routes)
			if got := a.Same(b); got != tc.same {
				t.Errorf("Same: %v, want %v", got, tc.same)
			}
			if got := b.Same(a); got != tc.same {
				t.Errorf("Same, the other way: %v, want %v", got, tc.same)
			}
		})
	}
	// A UD route's rate is changed in place: not a different route.
	ud := "  - name: u\n    ud: true\n    listen: {leg: ib, addr: \"198.18.3.1:7174\"}\n    target: {leg: roce, addr: \"198.18.1.2:7174\"}\n"
	if u1, u2 := parse(t, ud), parse(t, ud+"    rate: {packets: 10}\n"); !u1.Same(u2) {
		t.Error("a UD route whose rate alone differs is not the same")
	}
}
