package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/internal/testlog"
)

// TestRunDrain: SIGTERM with no session left to drain exits 0 with the
// stopped line, whatever --drain, 0 (do not wait) and 1ns too (they exited
// 1, "sessions still ending", with none there); a negative --drain is bad
// usage (exit 2), named.
func TestRunDrain(t *testing.T) {
	// 127.0.18.0/24: this test's own, so parallel packages do not take
	// its RoCEv2 ports.
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.18.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.18.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.18.1:7471"}
    target: {leg: b, addr: "127.0.18.4:7471"}
admin: {listen: "", control: ""}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, drain := range []string{"0s", "1ns", "10s"} {
		t.Run(drain, func(t *testing.T) {
			sock := listenNotify(t)
			prof := filepath.Join(t.TempDir(), "cpu.pprof")
			p := startRun(t, []string{"NOTIFY_SOCKET=" + sock.path}, "run", "--config", cfg, "--drain", drain, "--cpu-profile", prof)
			sock.next(t, "READY=1", 30*time.Second)
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-p.exited:
				if err != nil {
					t.Errorf("rbridge run --drain %s after SIGTERM: %v, want exit status 0", drain, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("rbridge run did not exit within 30 s of SIGTERM")
			}
			if l := p.logs.String(); !strings.Contains(l, "msg=stopped") {
				t.Errorf("no stopped line:\n%s", l)
			}
			// --cpu-profile: written when the gateway stopped (a pprof
			// profile is gzip: 0x1f 0x8b).
			if b, err := os.ReadFile(prof); err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
				t.Errorf("--cpu-profile %s: %d bytes, %v: want a pprof profile", prof, len(b), err)
			}
		})
	}
	if _, _, err := run(t, nil, "run", "--config", cfg, "--cpu-profile", filepath.Join(t.TempDir(), "no", "such", "dir", "cpu.pprof")); err == nil || !strings.Contains(err.Error(), "--cpu-profile") {
		t.Errorf("rbridge run --cpu-profile in a missing directory: %v, want an error naming --cpu-profile", err)
	}
	for _, drain := range []string{"-5s", "-1ns"} {
		_, _, err := run(t, nil, "run", "--config", cfg, "--check", "--drain", drain)
		var ee *exitError
		if want := "--drain " + drain + ": want 0 (end the sessions at once) or more"; !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("rbridge run --drain %s: %v, want exit status 2 and %q", drain, err, want)
		}
	}
}

// TestStoppedKeepsFailures: the sessions Close cut when the drain ran out
// are not a failure to stop (exit 0); anything else Close met still is.
func TestStoppedKeepsFailures(t *testing.T) {
	cut := fmt.Errorf("bridge: gateway: %w: 2 sessions still closing (%v)", bridge.ErrSessionsCut, context.DeadlineExceeded)
	lg := errors.New(`leg "a": close failed`)
	log := testlog.New(t)
	for _, tc := range []struct {
		name    string
		in, out error
	}{{"clean", nil, nil}, {"cut", cut, nil}, {"cut and a leg", errors.Join(cut, lg), lg}, {"a leg", lg, lg}} {
		got := stopped(tc.in, time.Second, log)
		if (got == nil) != (tc.out == nil) || got != nil && (!errors.Is(got, tc.out) || errors.Is(got, bridge.ErrSessionsCut)) {
			t.Errorf("%s: stopped(%v) = %v, want %v", tc.name, tc.in, got, tc.out)
		}
	}
}
