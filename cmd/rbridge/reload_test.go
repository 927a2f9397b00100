package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRunReloadsOnSIGHUP: rbridge run re-reads its file on SIGHUP: a route
// added starts listening, one removed stops, systemd hears RELOADING=1
// then READY=1; a file that does not parse is refused and the routes stay.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	// 127.0.16.0/24: this test's own, so parallel packages do not take
	// its RoCEv2 ports.
	const legs = `admin: {listen: "127.0.0.1:0"}
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
	if l := logs.String(); !strings.Contains(l, `routes="added second; removed first"`) || !strings.Contains(l, "route=second listen=127.0.16.1:7472") {
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
