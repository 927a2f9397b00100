package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/rbridge/rbridge/bridge"
)

// controlClient is an HTTP client whose every request goes to the unix
// socket at path.
func controlClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}}
}

// TestControlReload: the control socket is made 0600 in a directory made
// 0700; POST /reload on it answers the reload's report (a gateway whose
// file is gone refuses, 422, and says why) and the log names who asked
// (its pid, uid and gid); other methods are refused; Close removes the
// socket.
func TestControlReload(t *testing.T) {
	newCMApp(t, lo("3")) // the host's loopback (skipped in the guest)
	g := startGateway(t, gatewayConfig(t, ""))
	var logs logBuffer
	path := filepath.Join(t.TempDir(), "run", "rbridge", "control.sock")
	c, err := bridge.StartControl(bridge.ControlOptions{Path: path, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Reload: g.ReloadConfigFile})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			c.Close(context.Background())
		}
	}()
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{path, os.ModeSocket | 0o600}, {filepath.Dir(path), os.ModeDir | 0o700}} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, fi.Mode(), f.mode)
		}
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("the socket's directory holds %v, want the socket alone", ents)
	}

	hc := controlClient(path)
	resp, err := hc.Post("http://localhost/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rep bridge.ReloadReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("/reload: %s %s: %v", resp.Status, b, err)
	}
	// The gateway's config came from gw.yaml, which no file holds.
	if resp.StatusCode != http.StatusUnprocessableEntity || rep.Outcome != bridge.ReloadRefused || rep.Config != "gw.yaml" || !strings.Contains(rep.Error, "gw.yaml") {
		t.Errorf("/reload of a file that is gone: %d %+v; want 422, refused, why", resp.StatusCode, rep)
	}
	if st := g.Status(); len(st.Routes) != 1 || st.Routes[0].Name != "r" {
		t.Errorf("routes after a refused reload: %+v", st.Routes)
	}
	// This process connected: the log says so.
	asked := fmt.Sprintf(`level=INFO msg="reload asked on the control socket" pid=%d uid=%d gid=%d comm=`, os.Getpid(), os.Getuid(), os.Getgid())
	if l := logs.String(); !strings.Contains(l, asked) {
		t.Errorf("the log does not say who asked for the reload (%q):\n%s", asked, l)
	}
	resp, err = hc.Get("http://localhost/reload")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET /reload: %d, want 405", resp.StatusCode)
	}
	hc.CloseIdleConnections()

	closed = true
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(path); !os.IsNotExist(err) {
		t.Errorf("the socket after Close: %v, want it gone", err)
	}
}

// TestControlSocketPath: a stale socket (its gateway gone) is replaced; a
// live one (another gateway's) and a file of another kind are refused,
// and left as they were.
func TestControlSocketPath(t *testing.T) {
	dir := t.TempDir()
	start := func(path string) (*bridge.ControlServer, error) {
		return bridge.StartControl(bridge.ControlOptions{Path: path, Logger: slog.New(slog.DiscardHandler),
			Reload: func() bridge.ReloadReport { return bridge.ReloadReport{Outcome: bridge.ReloadApplied} }})
	}

	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	c, err := start(stale)
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}

	if _, err := start(stale); err == nil || !strings.Contains(err.Error(), "another process (another gateway?) serves it: give each gateway its own admin.control") {
		t.Errorf("over a live socket: %v, want it refused", err)
	}
	resp, err := controlClient(stale).Post("http://localhost/reload", "", nil)
	if err != nil {
		t.Fatalf("the first socket after a second was refused: %v", err)
	}
	resp.Body.Close()
	c.Close(context.Background())

	file := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(file, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := start(file); err == nil || !strings.Contains(err.Error(), "a regular file is there, not a socket: remove it or give admin.control another path") {
		t.Errorf("over a regular file: %v, want it refused", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "mine" {
		t.Errorf("the file after: %q", b)
	}
	if _, err := start("run/control.sock"); err == nil {
		t.Error("a relative path was taken")
	}
}

// TestControlRefusesOtherUsers: a peer neither root nor the gateway's
// user (the socket's mode loosened) is refused, and the log says who.
func TestControlRefusesOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("connecting as another user needs root (setuid in a child process)")
	}
	// Root's gateway: the test connects as uid 65534 (nobody).
	var logs logBuffer
	dir, err := os.MkdirTemp("", "rbridge-control")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "control.sock")
	c, err := bridge.StartControl(bridge.ControlOptions{Path: path, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Reload: func() bridge.ReloadReport {
			t.Error("a reload by another user was applied")
			return bridge.ReloadReport{}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	// Loosened, as an operator might: only the peer check stands.
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	out, err := postAs(path, 65534, 65534)
	if err != nil {
		t.Fatalf("POST /reload as nobody: %v", err)
	}
	if !strings.Contains(out, "403") || !strings.Contains(out, "uid 65534 may not control this gateway (root and uid 0 may)") {
		t.Errorf("POST /reload as nobody: %s; want 403 and why", out)
	}
	if l := logs.String(); !strings.Contains(l, `level=WARN msg="control socket: reload refused: the peer is neither root nor the gateway's user"`) || !strings.Contains(l, "uid=65534") {
		t.Errorf("the log:\n%s\nwant the refusal with uid 65534", l)
	}
}

// postAs connects to the unix socket at path as uid and gid (from a
// thread of its own whose credentials it changes, which ends with it: the
// process's other threads stay root's), sends POST /reload and returns
// the answer's status and body.
func postAs(path string, uid, gid int) (string, error) {
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, its credentials changed, ends with
		// the goroutine.
		runtime.LockOSThread()
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(gid), uintptr(gid), ^uintptr(0)); e != 0 {
			done <- result{err: fmt.Errorf("setresgid: %w", e)}
			return
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(uid), uintptr(uid), ^uintptr(0)); e != 0 {
			done <- result{err: fmt.Errorf("setresuid: %w", e)}
			return
		}
		// SO_PEERCRED holds the credentials of the thread that connected.
		conn, err := net.Dial("unix", path)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer conn.Close()
		if _, err := io.WriteString(conn, "POST /reload HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"); err != nil {
			done <- result{err: err}
			return
		}
		b, err := io.ReadAll(conn)
		done <- result{string(b), err}
	}()
	r := <-done
	return r.out, r.err
}
