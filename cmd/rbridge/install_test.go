package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
)

// makeCmd is `make -C <repo> args...` without the variables of a make that
// runs this test (make test passes its own down).
func makeCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skipf("needs make: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	mk := exec.Command("make", append([]string{"-C", root}, args...)...)
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PREFIX", "DESTDIR", "BINDIR", "UNITDIR", "SYSCONFDIR", "BIN":
		default:
			mk.Env = append(mk.Env, kv)
		}
	}
	return mk
}

// TestMakeInstall: make install puts the binary, the unit with its paths
// filled in and the example config (as rbridge.yaml.example only: its
// placeholders would fail the unit) under DESTDIR and PREFIX, says what to
// do next, and leaves an rbridge.yaml that is there alone; systemd-analyze
// verify passes on the installed unit.
func TestMakeInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "build", "rbridge")
	dest := filepath.Join(tmp, "dest")
	out, err := makeCmd(t, "install", "BIN="+bin, "DESTDIR="+dest, "PREFIX=/usr").CombinedOutput()
	if err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "next: cp /etc/rbridge/rbridge.yaml.example /etc/rbridge/rbridge.yaml") {
		t.Errorf("make install does not say what to do next:\n%s", out)
	}
	unit := readFile(t, filepath.Join(dest, "usr/lib/systemd/system/rbridge.service"))
	for _, want := range []string{
		"ExecStart=/usr/bin/rbridge run --config /etc/rbridge/rbridge.yaml\n",
		"ExecStartPre=/usr/bin/rbridge run --config /etc/rbridge/rbridge.yaml --check\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("the installed unit lacks %q", want)
		}
	}
	if strings.Contains(unit, "@") {
		t.Errorf("the installed unit still has a placeholder:\n%s", unit)
	}
	if fi, err := os.Stat(filepath.Join(dest, "usr/bin/rbridge")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("the installed binary: %v, %v", fi, err)
	}
	// Shell completion, where each shell looks for a package's.
	for f, want := range map[string]string{
		"usr/share/bash-completion/completions/rbridge":    "__start_rbridge",
		"usr/share/zsh/vendor-completions/_rbridge":        "#compdef rbridge",
		"usr/share/fish/vendor_completions.d/rbridge.fish": "complete -c rbridge",
	} {
		if got := readFile(t, filepath.Join(dest, f)); !strings.Contains(got, want) {
			t.Errorf("%s lacks %q", f, want)
		}
	}
	example := readFile(t, filepath.Join(dest, "etc/rbridge/rbridge.yaml.example"))
	if _, err := os.Stat(filepath.Join(dest, "etc/rbridge/rbridge.yaml")); !os.IsNotExist(err) {
		t.Errorf("a first install made rbridge.yaml (%v): the unit would start on the example's placeholders", err)
	}
	// A second install keeps the operator's rbridge.yaml.
	mine := "# mine\n" + example
	if err := os.WriteFile(filepath.Join(dest, "etc/rbridge/rbridge.yaml"), []byte(mine), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := makeCmd(t, "install", "BIN="+bin, "DESTDIR="+dest, "PREFIX=/usr").CombinedOutput(); err != nil {
		t.Fatalf("make install again: %v\n%s", err, out)
	}
	if readFile(t, filepath.Join(dest, "etc/rbridge/rbridge.yaml")) != mine {
		t.Error("a second make install overwrote rbridge.yaml")
	}

	// systemd-analyze verify checks that ExecStart's binary exists: install
	// with PREFIX in the temporary directory, no DESTDIR.
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("RBRIDGE_REQUIRE_ROOT") == "1" {
			t.Fatalf("needs systemd-analyze (make deps installs systemd; RBRIDGE_REQUIRE_ROOT=1): %v", err)
		}
		t.Skipf("needs systemd-analyze (make deps installs systemd): %v", err)
	}
	prefix := filepath.Join(tmp, "prefix")
	if out, err := makeCmd(t, "install", "BIN="+bin, "PREFIX="+prefix, "SYSCONFDIR="+filepath.Join(prefix, "etc")).CombinedOutput(); err != nil {
		t.Fatalf("make install PREFIX=%s: %v\n%s", prefix, err, out)
	}
	out, err = exec.Command(analyze, "verify", filepath.Join(prefix, "lib/systemd/system/rbridge.service")).CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Errorf("systemd-analyze verify: %v; it must pass without a word:\n%s", err, out)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// unitSettings reads a unit file's key=value lines (the last of a key wins,
// as for these single-valued keys).
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, l := range strings.Split(readFile(t, path), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			m[k] = v
		}
	}
	return m
}

// TestUnitFile: the unit is what the gateway needs: notify with a
// watchdog, no memlock limit, and exactly the capabilities XDP, AF_XDP and
// memory pinning need.
func TestUnitFile(t *testing.T) {
	u := unitSettings(t, "../../dist/rbridge.service")
	for k, want := range map[string]string{
		"Type": "notify", "NotifyAccess": "main", "WatchdogSec": "10s", "Restart": "on-failure", "LimitMEMLOCK": "infinity",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "RestrictNamespaces": "net",
	} {
		if u[k] != want {
			t.Errorf("%s=%q, want %q", k, u[k], want)
		}
	}
	want := []string{"CAP_BPF", "CAP_IPC_LOCK", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_PERFMON"}
	for _, k := range []string{"CapabilityBoundingSet", "AmbientCapabilities"} {
		got := strings.Fields(u[k])
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s = %v, want %v", k, got, want)
		}
	}
	if _, ok := u["PrivateDevices"]; ok {
		t.Error("PrivateDevices hides /dev/infiniband from the verbs legs")
	}
	// The control socket's directory is made for it (ProtectSystem=strict
	// leaves /run read-only), the service's own.
	if dir := "/run/" + u["RuntimeDirectory"]; dir != filepath.Dir(config.DefaultAdminControl) || u["RuntimeDirectoryMode"] != "0700" {
		t.Errorf("RuntimeDirectory=%s RuntimeDirectoryMode=%s: want %s made 0700, the control socket's directory", u["RuntimeDirectory"], u["RuntimeDirectoryMode"], filepath.Dir(config.DefaultAdminControl))
	}
}

// TestExampleConfig: the example make install ships is a valid config.
func TestExampleConfig(t *testing.T) {
	c, err := config.Load("../../dist/rbridge.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Legs) != 2 || len(c.Routes) != 3 {
		t.Errorf("%d legs, %d routes; want 2 and 3", len(c.Legs), len(c.Routes))
	}
	// Storage both ways: a staged route toward the IB side's target first.
	if r := c.Routes[0]; r.Protocol != config.ProtocolNVMe || r.Listen.Leg != "roce" || r.Target.Leg != "ib" {
		t.Errorf("the first route %+v: want the RoCE fleet reaching an NVMe-oF target on the IB side", r)
	}
	if c.Admin.Control != config.DefaultAdminControl {
		t.Errorf("admin.control %q, want %q, in the directory the unit makes", c.Admin.Control, config.DefaultAdminControl)
	}
	if text := readFile(t, "../../dist/rbridge.yaml"); !strings.Contains(text, "docs/configuration.md") {
		t.Error("the example does not point at docs/configuration.md, the reference of its keys")
	}
}
