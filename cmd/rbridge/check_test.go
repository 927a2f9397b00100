package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/internal/testcert"
)

// TestCheckFindsHostProblems: run --check finds what run would fail on,
// every problem at once with its line: io: afxdp on an interface without
// an Ethernet address (lo), a quic leg's ip that is not on this host, and
// the admin server's port taken, and the control socket's path a file of
// another kind; run itself refuses to start with the same list, before
// anything starts.
func TestCheckFindsHostProblems(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	dir := filepath.Dir(cfg)
	text := fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.21.1, io: afxdp}
  - name: q
    kind: quic
    ip: 192.0.2.77
    peer: "192.0.2.1:7471"
    cert: %[1]s/gw.crt
    key: %[1]s/gw.key
    ca: %[1]s/ca.crt
routes:
  - {name: r, listen: {leg: a, addr: "127.0.21.1:7471"}, target: {leg: q, addr: "10.9.9.9:7471"}}
admin:
  listen: %[2]q
  control: %[1]s/gw.yaml
`, dir, busy.Addr().String())
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	want := []string{
		cfg + `:2: leg "a": io afxdp on interface lo, which has no Ethernet address`,
		cfg + `:3: leg "q": `, // its certificate files are missing: CheckLegs says so
		cfg + ":13: admin: listen " + busy.Addr().String() + ": ",
		cfg + ":14: admin: control " + cfg + ": a regular file is there, not a socket: remove it or give admin.control another path",
	}
	for _, args := range [][]string{{"run", "--config", cfg, "--check"}, {"run", "--config", cfg}} {
		_, _, err := run(t, nil, args...)
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			t.Errorf("rbridge %v: %v, want exit status 1", args, err)
			continue
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("rbridge %v: no %q in:\n%v", args, w, err)
			}
		}
	}
}

// TestCheckQUICAddress: a quic leg whose credentials load but whose ip is
// not on this host is found by --check.
func TestCheckQUICAddress(t *testing.T) {
	dir := t.TempDir()
	writeTestCerts(t, dir)
	cfg := filepath.Join(dir, "gw.yaml")
	text := fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.21.1, io: udp}
  - {name: q, kind: quic, ip: 192.0.2.77, peer: "192.0.2.1:7471", cert: %[1]s/gw.crt, key: %[1]s/gw.key, ca: %[1]s/ca.crt}
routes:
  - {name: r, listen: {leg: a, addr: "127.0.21.1:7471"}, target: {leg: q, addr: "10.9.9.9:7471"}}
admin: {listen: "127.0.0.1:0", control: ""}
`, dir)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, nil, "run", "--config", cfg, "--check")
	if want := cfg + `:3: leg "q": ip 192.0.2.77: `; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "must be one of this host's addresses") {
		t.Errorf("run --check: %v, want %q", err, want)
	}
}

// writeTestCerts writes a throwaway CA and a gateway certificate it signed
// as dir/ca.crt, dir/gw.crt and dir/gw.key.
func writeTestCerts(t *testing.T, dir string) {
	t.Helper()
	ca, err := testcert.NewCA("rbridge-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(testcert.Options{DNS: []string{"gw"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := ca.Files(dir, "gw", leaf); err != nil {
		t.Fatal(err)
	}
}

// TestCheckNotesNonLoopbackAdmin: run --check passes an admin server on
// an address that is not a loopback one, and says that what it serves is
// readable from the network.
func TestCheckNotesNonLoopbackAdmin(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	for _, tc := range []struct{ listen, note string }{
		{"0.0.0.0:0", "note: admin.listen 0.0.0.0:0 is not a loopback address: /metrics, /status, /healthz and /livez are readable from every network this host is on (control is not: it is on the unix socket admin.control)"},
		{"127.0.0.1:0", ""},
	} {
		text := fmt.Sprintf(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.23.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.23.2, io: udp}
routes:
  - {name: r, listen: {leg: a, addr: "127.0.23.1:7471"}, target: {leg: b, addr: "127.0.23.4:7471"}}
admin: {listen: %q, control: ""}
`, tc.listen)
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		out, _, err := run(t, nil, "run", "--config", cfg, "--check")
		if err != nil {
			t.Fatalf("run --check with admin.listen %s: %v", tc.listen, err)
		}
		if tc.note == "" && strings.Contains(out, "note:") || !strings.Contains(out, tc.note) {
			t.Errorf("run --check with admin.listen %s:\n%s\nwant %q", tc.listen, out, tc.note)
		}
	}
}

// TestCheckVerbsLegWithoutDevice: on a host with no RDMA device, run
// --check says so for a verbs leg, in words that fit an InfiniBand leg as
// well as a RoCE one (not "no usable RoCEv2 GID"), and where to look.
func TestCheckVerbsLegWithoutDevice(t *testing.T) {
	if ds, _ := os.ReadDir("/sys/class/infiniband"); len(ds) > 0 {
		t.Skip("this host has RDMA devices")
	}
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(`legs:
  - {name: ib, kind: verbs, ip: 198.18.3.1}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.21.2, io: udp}
routes:
  - {name: r, listen: {leg: b, addr: "127.0.21.2:7471"}, target: {leg: ib, addr: "198.18.3.2:7471"}}
admin: {listen: "", control: ""}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := run(t, nil, "run", "--config", cfg, "--check")
	if err != nil && strings.Contains(err.Error(), "without RDMA support") {
		t.Skip("a build without cgo: no verbs legs at all")
	}
	want := cfg + `:2: leg "ib": no RDMA device on this host (/sys/class/infiniband lists none): a verbs leg needs the device whose port holds 198.18.3.1`
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "RoCEv2 GID") || !strings.Contains(err.Error(), "rbridge doctor") {
		t.Errorf("run --check with a verbs leg and no RDMA device: %v\nwant it to begin %q, name rbridge doctor, and say nothing of a RoCEv2 GID", err, want)
	}
}
