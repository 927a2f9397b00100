package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rbridge/rbridge/internal/testlog"
)

// TestMain runs this test binary as rbridge itself when asked to
// (RBRIDGE_TEST_AS_MAIN=1): the notify test runs `rbridge run` as its own
// process, to send it signals, without building the command again.
func TestMain(m *testing.M) {
	if os.Getenv("RBRIDGE_TEST_AS_MAIN") == "1" {
		os.Args = append([]string{"rbridge"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// notifySocket is a unixgram socket standing for systemd's NOTIFY_SOCKET.
type notifySocket struct {
	path string
	msgs chan notifyMsg
	// at is when the message next last returned reached the socket (the
	// kernel's receive timestamp), whenever the test read it.
	at time.Time
}

// notifyMsg is a message and when the kernel queued it on the socket.
type notifyMsg struct {
	text string
	at   time.Time
}

func listenNotify(t *testing.T) *notifySocket {
	t.Helper()
	// A short path: sun_path holds 108 bytes, t.TempDir's can be longer.
	dir, err := os.MkdirTemp("", "rbn")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &notifySocket{path: filepath.Join(dir, "notify"), msgs: make(chan notifyMsg, 1024)}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: s.path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Each message's arrival is the kernel's timestamp, not this
	// goroutine's read: on a loaded machine it may read several at once.
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var serr error
	if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) }); err != nil || serr != nil {
		t.Fatalf("SO_TIMESTAMPNS on the notify socket: %v %v", err, serr)
	}
	go func() {
		buf, oob := make([]byte, 4096), make([]byte, 128)
		for {
			n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
			if err != nil {
				close(s.msgs)
				return
			}
			m := notifyMsg{text: string(buf[:n]), at: time.Now()}
			if cms, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, cm := range cms {
					if cm.Header.Level == unix.SOL_SOCKET && cm.Header.Type == unix.SO_TIMESTAMPNS && len(cm.Data) >= int(unsafe.Sizeof(unix.Timespec{})) {
						ts := (*unix.Timespec)(unsafe.Pointer(&cm.Data[0]))
						m.at = time.Unix(ts.Unix())
					}
				}
			}
			s.msgs <- m
		}
	}()
	return s
}

// next waits for the next message that holds want, returning those before.
func (s *notifySocket) next(t *testing.T, want string, within time.Duration) (string, []string) {
	t.Helper()
	var before []string
	deadline := time.After(within)
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				t.Fatalf("the notify socket closed before %q (got %q)", want, before)
			}
			if strings.Contains(m.text, want) {
				s.at = m.at
				return m.text, before
			}
			before = append(before, m.text)
		case <-deadline:
			t.Fatalf("no %q within %v (got %q)", want, within, before)
		}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestRunNotifiesSystemd runs `rbridge run` as systemd would with
// Type=notify and WatchdogSec: on a config that works on the host (two
// userspace legs over loopback UDP), READY=1 comes once the legs' sockets
// are bound and the route listens, WATCHDOG=1 at half of WATCHDOG_USEC,
// and STOPPING=1 on SIGTERM, after which it exits 0.
func TestRunNotifiesSystemd(t *testing.T) {
	// 127.0.13.0/24: addresses of this test's own, so packages tested in
	// parallel (bridge takes a /24 of its own per process) do not take its
	// RoCEv2 port.
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(`legs:
  - {name: a, kind: userspace, interface: lo, ip: 127.0.13.1, io: udp}
  - {name: b, kind: userspace, interface: lo, ip: 127.0.13.2, io: udp}
routes:
  - name: r
    listen: {leg: a, addr: "127.0.13.1:7471"}
    target: {leg: b, addr: "127.0.13.4:7471"}
admin: {listen: "127.0.0.1:0", control: ""}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := listenNotify(t)
	const watchdog = 200 * time.Millisecond
	p := startRun(t, []string{"NOTIFY_SOCKET=" + sock.path, "WATCHDOG_USEC=200000"}, "run", "--config", cfg, "--log-level", "debug")
	cmd, logs, exited := p.cmd, p.logs, p.exited

	ready, before := sock.next(t, "READY=1", 30*time.Second)
	if len(before) != 0 {
		t.Errorf("messages before READY=1: %q", before)
	}
	if !strings.Contains(ready, "STATUS=gateway running: 2 legs, 1 routes") {
		t.Errorf("READY message %q lacks the status", ready)
	}
	// The legs are up: their RoCEv2 ports are taken.
	for _, ip := range []string{"127.0.13.1", "127.0.13.2"} {
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip), Port: 4791})
		if err == nil {
			c.Close()
			t.Errorf("at READY=1, %s:4791 was free: the leg was not up", ip)
		} else if !errors.Is(err, syscall.EADDRINUSE) {
			t.Errorf("binding %s:4791: %v, want EADDRINUSE", ip, err)
		}
	}
	// The route listened before READY: its line is logged before. The
	// log comes through a pipe, READY through the socket: wait for it.
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "gateway running") && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	if l := logs.String(); !strings.Contains(l, "route listening") || strings.Index(l, "route listening") > strings.Index(l, "gateway running") {
		t.Errorf("the route was not listening before READY:\n%s", l)
	}

	// Five in a row, timed by when each reached the socket: the test
	// may read late, and several at once, on a loaded machine. Four
	// intervals of watchdog/2 each; a tick the process was late for
	// shortens the next one, so the bound is three of them.
	var first time.Time
	for i := range 5 {
		if m, before := sock.next(t, "WATCHDOG=1", 10*watchdog); len(before) != 0 || m != "WATCHDOG=1" {
			t.Errorf("watchdog message %q, with %q before", m, before)
		}
		if i == 0 {
			first = sock.at
		}
	}
	if el := sock.at.Sub(first); el < 3*watchdog/2 {
		t.Errorf("5 WATCHDOG=1 in %v: fed faster than every %v", el, watchdog/2)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if m, _ := sock.next(t, "STOPPING=1", 10*time.Second); !strings.Contains(m, "STATUS=stopping") {
		t.Errorf("STOPPING message %q lacks the status", m)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("rbridge run after SIGTERM: %v, want exit status 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rbridge run did not exit within 30 s of SIGTERM")
	}
	// Nothing after STOPPING: the watchdog stopped with it.
	for {
		select {
		case m := <-sock.msgs:
			if strings.Contains(m.text, "WATCHDOG=1") {
				t.Errorf("WATCHDOG=1 after STOPPING=1")
			}
			continue
		default:
		}
		break
	}
}

// TestWatchdogFedOnlyWhileHealthy: the watchdog is fed while the health
// check passes, not while it fails (STATUS says why, once), and again when
// it passes again.
func TestWatchdogFedOnlyWhileHealthy(t *testing.T) {
	var mu sync.Mutex
	var healthErr error
	var msgs []string
	health := func() error { mu.Lock(); defer mu.Unlock(); return healthErr }
	notify := func(s string) { mu.Lock(); defer mu.Unlock(); msgs = append(msgs, s) }
	set := func(err error) { mu.Lock(); defer mu.Unlock(); healthErr = err; msgs = nil }
	got := func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), msgs...) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		routineWatchdog(ctx, 20*time.Millisecond, health, notify, testlog.New(t, "gateway unhealthy"))
		close(done)
	}()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, ok func([]string) bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(got()); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: got %q", what, got())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	count := func(ms []string, s string) (n int) {
		for _, m := range ms {
			if m == s {
				n++
			}
		}
		return n
	}
	waitFor("fed while healthy", func(ms []string) bool { return count(ms, "WATCHDOG=1") >= 3 })

	set(errors.New(`route "r" stopped accepting`))
	time.Sleep(200 * time.Millisecond) // ten intervals
	ms := got()
	if n := count(ms, "WATCHDOG=1"); n > 1 { // one may have been on its way
		t.Errorf("fed %d times while unhealthy: %q", n, ms)
	}
	if count(ms, `STATUS=unhealthy: route "r" stopped accepting`) != 1 {
		t.Errorf("want the status once while unhealthy: %q", ms)
	}

	set(nil)
	waitFor("fed again once healthy", func(ms []string) bool {
		return count(ms, "STATUS=gateway running") == 1 && count(ms, "WATCHDOG=1") >= 2
	})
}
