package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge"
)

// TestRunReloadsOnSIGHUP: rbridge run re-reads its file on SIGHUP: a route
// added starts listening, one removed stops, systemd hears RELOADING=1
// then READY=1; a file that does not parse is refused and the routes stay.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	// 127.0.16.0/24: this test's own, so parallel packages do not take
	// its RoCEv2 ports.
	const legs = `admin: {listen: "127.0.0.1:0", control: ""}
legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.16.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.16.2, io: udp}
routes:
`
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(legs + `  - {name: first, listen: {leg: a, addr: "127.0.16.1:7471"}, target: {leg: b, addr: "127.0.16.4:7471"}}
`)
	sock := listenNotify(t)
	p := startRun(t, []string{"NOTIFY_SOCKET=" + sock.path}, "run", "--config", cfg)
	cmd, logs, exited := p.cmd, p.logs, p.exited
	sock.next(t, "READY=1", 30*time.Second)
	waitLog := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.String(), what); {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in the log", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	write(legs + `  - {name: second, listen: {leg: a, addr: "127.0.16.1:7472"}, target: {leg: b, addr: "127.0.16.4:7471"}}
`)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	sock.next(t, "RELOADING=1", 10*time.Second)
	sock.next(t, "READY=1", 10*time.Second)
	waitLog(`msg=reloaded`)
	if l := logs.String(); !strings.Contains(l, `msg="reload asked by SIGHUP"`) || !strings.Contains(l, `routes="added second; removed first"`) || !strings.Contains(l, "route=second listen=127.0.16.1:7472") {
		t.Errorf("the reload did not start second and stop first")
	}

	write("legs: [ this is not yaml\n")
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog("reload refused: the running routes stay")

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("rbridge run after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rbridge run did not stop within 30 s of SIGTERM")
	}
}

// TestReloadCommand: rbridge reload asks a running gateway to re-read its
// file, on its control socket. A changed file is applied and the routes
// it changed are printed (exit 0), and the gateway logs who asked (this
// process's uid); a file that does not parse is refused with why, exit 1,
// and the running routes stay (rbridge status shows them); found through
// another file's admin.control, it says the gateway re-read its own; with
// no gateway there, exit 3 and a clear error; --admin (the TCP address,
// which takes no reload) is bad usage that says where control is.
func TestReloadCommand(t *testing.T) {
	dir := t.TempDir()
	control := filepath.Join(dir, "run", "control.sock")
	// 127.0.17.0/24: this test's own.
	legs := fmt.Sprintf(`admin: {listen: "127.0.0.1:0", control: %q}
legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.17.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.17.2, io: udp}
routes:
`, control)
	cfg := filepath.Join(dir, "gw.yaml")
	write := func(path, s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	first := `  - {name: first, listen: {leg: a, addr: "127.0.17.1:7471"}, target: {leg: b, addr: "127.0.17.4:7471"}}
`
	write(cfg, legs+first)
	p := startRun(t, nil, "run", "--config", cfg)
	admin := adminAddress(t, p)
	reload := func(args ...string) (string, string, int) {
		t.Helper()
		out, errOut, err := run(t, nil, append([]string{"reload"}, args...)...)
		code := 0
		if err != nil {
			var ee *exitError
			if !errors.As(err, &ee) {
				t.Fatalf("rbridge reload %v: %v, not an exit status", args, err)
			}
			code, errOut = ee.code, errOut+ee.Error()
		}
		return out, errOut, code
	}
	routes := func() string {
		t.Helper()
		out, _, err := run(t, nil, "status", "--admin", admin, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var st bridge.Status
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range st.Routes {
			names = append(names, r.Name)
		}
		return strings.Join(names, " ")
	}
	if fi, err := os.Stat(control); err != nil || fi.Mode() != os.ModeSocket|0o600 {
		t.Fatalf("the control socket %s: %v, %v; want a socket of mode 0600", control, fi, err)
	}

	// Applied, and who asked logged.
	write(cfg, legs+first+`  - {name: second, listen: {leg: a, addr: "127.0.17.1:7472"}, target: {leg: b, addr: "127.0.17.4:7471"}}
`)
	out, errOut, code := reload("--control", control)
	if want := "reloaded " + cfg + ": added second; unchanged first\n"; code != 0 || out != want {
		t.Errorf("reload of a good file: exit %d, %q (stderr %q); want 0, %q", code, out, errOut, want)
	}
	if got := routes(); got != "first second" {
		t.Errorf("routes after the reload: %q", got)
	}
	asked := fmt.Sprintf(`level=INFO msg="reload asked on the control socket" pid=%d uid=%d gid=%d`, os.Getpid(), os.Getuid(), os.Getgid())
	if l := p.logs.String(); !strings.Contains(l, asked) {
		t.Errorf("the gateway's log does not say who asked (%q):\n%s", asked, l)
	}
	out, _, code = reload("--config", cfg, "--json")
	var rep bridge.ReloadReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 0 {
		t.Fatalf("reload --json: exit %d, %v:\n%s", code, err, out)
	}
	if d := cmp.Diff(bridge.ReloadReport{Config: cfg, Outcome: "applied", Added: []string{}, Removed: []string{}, Changed: []string{},
		Unchanged: []string{"first", "second"}}, rep); d != "" {
		t.Errorf("reload --json of the same file (-want +got):\n%s", d)
	}

	// Not over TCP: the admin server answers 404 with where control is.
	resp, err := http.Post("http://"+admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(b), "rbridge reload --control "+control) {
		t.Errorf("POST /reload on the admin server: %s %q; want 404 and where control is", resp.Status, b)
	}

	// Refused: the running routes stay.
	write(cfg, "legs: [ this is not yaml\n")
	out, errOut, code = reload("--control", control)
	if code != 1 || !strings.HasPrefix(out, "refused "+cfg+", the running routes stay: "+cfg+":1: ") || strings.Count(out, "\n") != 1 || errOut != "exit status 1" {
		t.Errorf("reload of a bad file: exit %d, %q, stderr %q; want 1 and why, said once", code, out, errOut)
	}
	if got := routes(); got != "first second" {
		t.Errorf("routes after a refused reload: %q, want the running ones", got)
	}
	if !strings.Contains(p.logs.String(), "reload refused: the running routes stay") {
		t.Error("the gateway did not log the refusal")
	}

	// Through another file's admin.control (a file rbridge run would
	// refuse: no routes): the gateway re-reads its own.
	other := filepath.Join(dir, "other.yaml")
	write(other, fmt.Sprintf("admin: {control: %q}\nlegs: []\n", control))
	_, errOut, code = reload("--config", other)
	if code != 1 || !strings.Contains(errOut, "the gateway re-read its own file "+cfg+", not "+other) {
		t.Errorf("reload --config %s: exit %d, stderr %q", other, code, errOut)
	}

	// Bad usage, and no gateway there.
	write(other, "admin: {control: \"\"}\n")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", other}, 2, `admin.control is "": that gateway has no control socket to ask (send it SIGHUP: systemctl reload rbridge)`},
		{[]string{"--control", control, "--config", cfg}, 2, "--control and --config both name the gateway"},
		{[]string{"--control", "control.sock"}, 2, `--control "control.sock": want the control socket's absolute path, as "/run/rbridge/control.sock"`},
		{[]string{"--control", filepath.Join(dir, "none.sock")}, 3, "cannot reach the gateway's control socket"},
		{[]string{"--admin", admin}, 2, "--admin " + admin + ": reload is not served on the admin server's TCP address"},
	} {
		if _, errOut, code := reload(tc.args...); code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("rbridge reload %v: exit %d, %q; want %d, %q", tc.args, code, errOut, tc.code, tc.want)
		}
	}
}

// adminAddress is the admin server's address, from rbridge run's log.
func adminAddress(t *testing.T, p *runProc) string {
	t.Helper()
	listening := regexp.MustCompile(`msg="admin server listening" addr=(127\.0\.0\.1:\d+)`)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// Once the gateway runs: the control socket, made after the admin
		// server, is there too.
		logs := p.logs.String()
		if m := listening.FindStringSubmatch(logs); m != nil && strings.Contains(logs, `msg="gateway running"`) {
			return m[1]
		}
	}
	t.Fatal("rbridge run did not log its admin server's address")
	return ""
}

// freeAddr is a loopback address nothing listens on (the kernel picked its
// port, and it was let go).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestReloadConfigUnreadable: a --config that cannot be read as YAML is
// bad usage (exit 2) named with its path and why, never a reason to try
// the default admin address, where another gateway may listen.
func TestReloadConfigUnreadable(t *testing.T) {
	dir := t.TempDir()
	file := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "none.yaml"), "none.yaml: no such file or directory"},
		{"a directory", dir, dir + ": is a directory"},
		{"not YAML", file("broken.yaml", "admin: {listen: \"127.0.0.1:9479\"\nlegs: [\n"), "broken.yaml:1: did not find expected"},
		{"admin not a mapping", file("flat.yaml", "legs: []\nadmin: 9479\n"), "flat.yaml:2: admin: want a mapping of keys (listen, control, hosts), got a number (9479)"},
		{"too large", file("huge.yaml", "#"+strings.Repeat("x", 1<<20)+"\n"), "huge.yaml: the file is larger than 1 MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, errOut, err := run(t, nil, "reload", "--config", tc.path, "--timeout", "2s")
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(ee.Error(), tc.want) {
				t.Errorf("rbridge reload --config %s: %v (stderr %q); want exit 2, %q", tc.path, err, errOut, tc.want)
			}
		})
	}
}
