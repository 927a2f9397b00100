package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge"
)

// TestStatusTable: the tables of a gateway with a userspace and a verbs
// leg, two routes (one stopped) and one session.
func TestStatusTable(t *testing.T) {
	st := &bridge.Status{
		State: bridge.StateDraining,
		Legs: []leg.Status{
			{Name: "roce", Kind: "userspace", IP: "10.20.0.1", State: "up", Up: true, Interface: "eth1", IO: "afxdp", MTU: 2048, MTUWhy: "interface eth1 MTU 9000 carries RoCE MTU 4096, AF_XDP's 4 KiB frames 2048"},
			{Name: "ib", Kind: "verbs", IP: "10.10.0.1", State: "DOWN", Device: "mlx5_0", Port: 1, GIDIndex: 3, GID: "::ffff:10.10.0.1", GIDWhy: "RoCEv2 GID of 10.10.0.1"},
		},
		Routes: []bridge.RouteStatus{
			{Name: "storage", ListenLeg: "roce", Listen: "10.20.0.1:4420", TargetLeg: "ib", Target: "10.10.0.2:4420", Allow: []string{"10.20.0.0/16"}, Protocol: "nvme", Sessions: 1},
			{Name: "inference", ListenLeg: "ib", Listen: "10.10.0.1:18515", TargetLeg: "roce", Target: "10.20.0.7:18515", Stopped: "listener closed"},
		},
		Sessions: []bridge.SessionStatus{{Route: "storage", Client: "10.20.0.9:50000", Target: "10.10.0.2:4420",
			ClientSide:      "userspace QP 0x12 <-> 10.20.0.9:50000 QP 0x40, MTU 1024: the client's REQ",
			TargetSide:      "verbs QP 17 <-> 10.10.0.2:4420, MTU 4096: the port's active MTU",
			ClientSideDCQCN: &bridge.DCQCNStatus{RateBytesPerSecond: 12.5e9 / 8, Limited: true, CNPs: 5, Cuts: 3},
			AgeSeconds:      61.4, ToTarget: bridge.DirectionStatus{Ops: 2, Bytes: 38, Queued: 1}, ToClient: bridge.DirectionStatus{Ops: 1, Bytes: 4096, Failed: 1}}},
	}
	var b bytes.Buffer
	if err := writeStatusTable(&b, st); err != nil {
		t.Fatal(err)
	}
	want := `gateway draining

LEG   KIND       IP         LINK         ON                                    MTU   WHY
roce  userspace  10.20.0.1  up           eth1 (afxdp)                          2048  interface eth1 MTU 9000 carries RoCE MTU 4096, AF_XDP's 4 KiB frames 2048
ib    verbs      10.10.0.1  DOWN (down)  mlx5_0 port 1 GID 3 ::ffff:10.10.0.1  -     RoCEv2 GID of 10.10.0.1

ROUTE      LISTEN               TARGET                PROTOCOL  SESSIONS  ALLOW         STATE
storage    roce 10.20.0.1:4420  ib 10.10.0.2:4420     nvme      1         10.20.0.0/16  accepting
inference  ib 10.10.0.1:18515   roce 10.20.0.7:18515  -         0         any           stopped: listener closed

#  ROUTE    CLIENT           TARGET          AGE   OPS>T  BYTES>T  OPS<T  BYTES<T  FAILED  QUEUED
1  storage  10.20.0.9:50000  10.10.0.2:4420  1m1s  2      38       1      4096     1       1/0

#1 client side: userspace QP 0x12 <-> 10.20.0.9:50000 QP 0x40, MTU 1024: the client's REQ; DCQCN 12.5 Gb/s, cut 3 times by 5 CNPs
#1 target side: verbs QP 17 <-> 10.10.0.2:4420, MTU 4096: the port's active MTU
`
	if d := cmp.Diff(want, b.String()); d != "" {
		t.Errorf("table (-want +got):\n%s\ngot:\n%s", d, b.String())
	}
	b.Reset()
	moved := &bridge.Status{Legs: []leg.Status{{Name: "roce", Kind: "userspace", State: "absent: no such interface: v0 in network namespace gw", Interface: "v0", IO: "udp", Netns: "gw",
		NetnsMoved: "network namespace gw is gone (no such file or directory)"}}}
	if err := writeStatusTable(&b, moved); err != nil || !strings.Contains(b.String(), "absent: no such interface: v0 in network namespace gw (down)  v0 (udp) in netns gw (opened there; network namespace gw is gone (no such file or directory))") {
		t.Errorf("a leg whose namespace's name moved: %v:\n%s", err, b.String())
	}
	b.Reset()
	polled := &bridge.Status{Legs: []leg.Status{{Name: "roce", Kind: "userspace", State: "up", Up: true, Interface: "lo", IO: "udp",
		BusyPoll: "thread 1234 on CPU 1; naps after 10ms idle, napping", BusyPollThread: 1234, BusyPollNaps: 3}}}
	if err := writeStatusTable(&b, polled); err != nil || !strings.Contains(b.String(), "  lo (udp); busy-polled: thread 1234 on CPU 1; naps after 10ms idle, napping (3 naps)  ") {
		t.Errorf("a busy-polled leg: %v:\n%s", err, b.String())
	}
	b.Reset()
	if err := writeStatusTable(&b, &bridge.Status{}); err != nil || !strings.HasSuffix(b.String(), "\nno sessions\n") {
		t.Errorf("no sessions: %v:\n%s", err, b.String())
	}
}

// TestStatusExitStatus: bad usage is 2, a gateway that is not there 3 (as
// for reload).
func TestStatusExitStatus(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := ln.Addr().String()
	ln.Close() // nothing listens there now
	goneFile := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(goneFile, fmt.Appendf(nil, "admin: {listen: %q}\n", gone), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "--admin", gone}, 3, "cannot reach the gateway's admin server"},
		{[]string{"status", "--admin", "localhost"}, 2, `--admin "localhost": want an IP address and a port`},
		{[]string{"status", "--no-such-flag"}, 2, "unknown flag: --no-such-flag"},
		{[]string{"status", "extra"}, 2, "status takes no arguments"},
		{[]string{"status", "--config", "/nonexistent.yaml"}, 2, "/nonexistent.yaml"},
		{[]string{"status", "--config", gone}, 2, gone},
		{[]string{"status", "--config", goneFile}, 3, "cannot reach the gateway's admin server"},
		{[]string{"status", "--config", goneFile, "--admin", gone}, 2, "--admin and --config both name the gateway"},
		{[]string{"status", "--ready", "--admin", gone}, 3, "cannot reach the gateway's admin server"},
		{[]string{"status", "--ready", "--json"}, 2, "--ready and --json: give one"},
	} {
		_, _, err := run(t, nil, tc.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != tc.code || ee.err == nil || !strings.Contains(ee.err.Error(), tc.want) {
			t.Errorf("rbridge %v: %v, want exit status %d with %q", tc.args, err, tc.code, tc.want)
		}
	}
}

// TestStatusOfRun runs `rbridge run` (two userspace legs over loopback on
// 127.0.14.0/24, this test's own, and the admin server on a port the
// kernel picks) and reads it with rbridge status, as JSON and as tables.
func TestStatusOfRun(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.14.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.14.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.14.1:7471"}
    target: {leg: b, addr: "127.0.14.4:7471"}
admin: {listen: "127.0.0.1:0", control: ""}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startRun(t, nil, "run", "--config", cfg)
	cmd, logs, exited := p.cmd, p.logs, p.exited
	listening := regexp.MustCompile(`msg="admin server listening" addr=(127\.0\.0\.1:\d+)`)
	var admin string
	for deadline := time.Now().Add(30 * time.Second); admin == "" && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			admin = m[1]
		}
	}
	if admin == "" {
		t.Fatal("rbridge run did not log its admin server's address")
	}

	out, _, err := run(t, nil, "status", "--admin", admin, "--json")
	if err != nil {
		t.Fatal(err)
	}
	var st bridge.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v:\n%s", err, out)
	}
	if st.State != bridge.StateRunning || len(st.Legs) != 2 || st.Legs[0].Name != "a" || st.Legs[1].IP != "127.0.14.2" || st.Legs[1].MTU != 4096 || !st.Legs[0].Up ||
		len(st.Routes) != 1 || st.Routes[0].Listen != "127.0.14.1:7471" || len(st.Sessions) != 0 {
		t.Errorf("status of rbridge run: %+v", st)
	}
	out, _, err = run(t, nil, "status", "--admin", admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"gateway running\n", "a    userspace  127.0.14.1  unknown  lo (udp)  4096  interface lo is loopback", "r      a 127.0.14.1:7471  b 127.0.14.4:7471  -         0", "no sessions"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("rbridge run after SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rbridge run did not exit within 30 s of SIGTERM")
	}
	if _, _, err := run(t, nil, "status", "--admin", admin); err == nil {
		t.Error("status after rbridge run exited: no error, want exit status 1")
	}
}

// TestStatusTableQUIC: a quic leg, a route on its fallback and a session
// through it.
func TestStatusTableQUIC(t *testing.T) {
	since := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	st := &bridge.Status{
		Legs: []leg.Status{
			{Name: "gw-b", Kind: "quic", IP: "10.0.0.1", State: "connected (1)", Up: true, Peer: "10.0.0.2:7471", PeerRefused: 2},
		},
		Routes: []bridge.RouteStatus{
			{Name: "storage", ListenLeg: "roce", Listen: "10.20.0.1:4420", TargetLeg: "ib", Target: "10.10.0.2:4420", Sessions: 1,
				Fallback: &bridge.FallbackStatus{Leg: "gw-b", Target: "10.10.0.2:4420", Active: true, Since: since, Why: "target did not answer"}},
			{Name: "other", ListenLeg: "roce", Listen: "10.20.0.1:4421", TargetLeg: "ib", Target: "10.10.0.3:4421",
				Fallback: &bridge.FallbackStatus{Leg: "gw-b", Target: "10.10.0.3:4421"}},
		},
		Sessions: []bridge.SessionStatus{{Route: "storage", Client: "10.20.0.9:50000", Target: "10.10.0.2:4420", Fallback: true,
			ClientSide: "userspace QP 0x12", TargetSide: "quic leg gw-b stream 0", AgeSeconds: 3,
			ClientSideXDP: &bridge.XDPQPStatus{Packets: 10, Bytes: 12000, ECNCE: 2, CNPs: 1}}},
	}
	var b bytes.Buffer
	if err := writeStatusTable(&b, st); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"gw-b  quic  10.0.0.1  connected (1)  peer 10.0.0.2:7471  -    2 peer certificates refused",
		"accepting; ON FALLBACK gw-b 10.10.0.2:4420 since 2026-12-01T15:00:00Z: target did not answer",
		"accepting; fallback gw-b 10.10.0.3:4421",
		"10.10.0.2:4420 (fallback)",
		"#1 client side: userspace QP 0x12; XDP 10 packets, 12000 bytes, 2 ECN-CE, 1 CNPs",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestStatusConfig: status --config asks the admin server the file names,
// as reload --config does.
func TestStatusConfig(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"state": "running"}`)
	}))
	defer srv.Close()
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "admin: {listen: %q}\n", srv.Listener.Addr().String()), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, nil, "status", "--config", cfg)
	if err != nil || !strings.Contains(out, "gateway running") {
		t.Errorf("rbridge status --config %s: %v\n%s", cfg, err, out)
	}
}

// TestStatusReady: status --ready asks /healthz, and says what it answered
// in its exit status (keepalived's track_script reads nothing else): 0
// ready, 1 not ready with why, as the gateway said it.
func TestStatusReady(t *testing.T) {
	var ready atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if !ready.Load() {
			http.Error(w, `bridge: gateway: route "r" reaches its target through: leg "b" (userspace) is down: down`, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}))
	defer srv.Close()
	admin := strings.TrimPrefix(srv.URL, "http://")

	_, _, err := run(t, nil, "status", "--ready", "--admin", admin)
	var ee *exitError
	if err == nil || errors.As(err, &ee) || !strings.Contains(err.Error(), `not ready: bridge: gateway: route "r" reaches its target through: leg "b" (userspace) is down`) {
		t.Errorf("status --ready of a gateway not ready: %v, want exit status 1 with why", err)
	}
	ready.Store(true)
	out, _, err := run(t, nil, "status", "--ready", "--admin", admin)
	if err != nil || out != "ready\n" {
		t.Errorf("status --ready of a ready gateway: %q, %v; want \"ready\" and exit status 0", out, err)
	}
}
