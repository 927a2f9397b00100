package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A ControlServer serves what changes a gateway, over HTTP on a unix
// domain socket:
//
//	POST /reload  re-read the config file and apply it (ControlOptions.Reload):
//	              a ReloadReport as JSON, 200 applied, 422 refused, 500 in part
//
// The socket is the control channel a remote peer cannot reach, as
// systemd's and most daemons' are: it is a file (config's admin.control,
// /run/rbridge/control.sock for root by default) of mode 0600, in a
// directory made 0700 when missing, so that only the gateway's own user
// (root, for the unit in dist/) can connect; there is no token to leak or
// rotate. Each connection's peer credentials (SO_PEERCRED: the process,
// user and group that connected, as the kernel saw them) are checked (a
// user other than root and the gateway's own is refused, should the
// file's mode be loosened) and logged with every request that changes
// the gateway, so that the log says who asked.
type ControlServer struct {
	ln   *net.UnixListener
	path string
	file os.FileInfo // the socket file made, removed on Close if still it
	srv  *http.Server
	done chan struct{}
}

// ControlOptions configures StartControl.
type ControlOptions struct {
	// Path is the socket's path (absolute); its directory is made, 0700,
	// when missing. A stale socket there (no server answers it) is
	// replaced; a live one (another gateway's) or a file of another kind
	// is an error.
	Path   string
	Logger *slog.Logger
	// Reload, if set, serves POST /reload: it re-reads the gateway's
	// config file and applies it (rbridge run's also tells systemd and
	// logs, as on SIGHUP).
	Reload func() ReloadReport
}

// Peer is the process at the other end of a control connection, as the
// kernel gives it (SO_PEERCRED): the one that connected.
type Peer struct {
	PID, UID, GID int
}

// LogAttrs are the peer as log attributes: pid, uid, gid, and the
// process's command name when it is still there to read.
func (p Peer) LogAttrs() []any {
	attrs := []any{"pid", p.PID, "uid", p.UID, "gid", p.GID}
	if b, err := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/comm"); err == nil {
		attrs = append(attrs, "comm", strings.TrimSpace(string(b)))
	}
	return attrs
}

type peerKey struct{}

// peerOf is the peer of a control request's connection (its error when
// the kernel would not say).
type peerOf struct {
	peer Peer
	err  error
}

// StartControl makes the control socket at o.Path and serves it until
// Close.
func StartControl(o ControlOptions) (*ControlServer, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if !filepath.IsAbs(o.Path) {
		return nil, fmt.Errorf("bridge: control socket %q: want an absolute path", o.Path)
	}
	ln, fi, err := listenControl(o.Path)
	if err != nil {
		return nil, fmt.Errorf("bridge: control socket %s: %w", o.Path, err)
	}
	mux := http.NewServeMux()
	if o.Reload != nil {
		mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
			p, ok := r.Context().Value(peerKey{}).(peerOf)
			if !ok || p.err != nil {
				o.Logger.Warn("control socket: reload refused: the peer's credentials are unknown", "err", p.err)
				http.Error(w, "reload: the peer's credentials are unknown", http.StatusForbidden)
				return
			}
			if euid := os.Geteuid(); p.peer.UID != 0 && p.peer.UID != euid {
				o.Logger.Warn("control socket: reload refused: the peer is neither root nor the gateway's user", p.peer.LogAttrs()...)
				http.Error(w, fmt.Sprintf("reload: uid %d may not control this gateway (root and uid %d may)", p.peer.UID, euid), http.StatusForbidden)
				return
			}
			o.Logger.Info("reload asked on the control socket", p.peer.LogAttrs()...)
			rep := o.Reload()
			code := http.StatusOK
			switch rep.Outcome {
			case ReloadRefused:
				code = http.StatusUnprocessableEntity
			case ReloadPartial:
				code = http.StatusInternalServerError
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				o.Logger.Warn("control socket: writing /reload", "err", err)
			}
		})
	}
	c := &ControlServer{ln: ln, path: o.Path, file: fi, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
			ConnContext: func(ctx context.Context, conn net.Conn) context.Context {
				var p peerOf
				if uc, ok := conn.(*net.UnixConn); ok {
					p.peer, p.err = peerCred(uc)
				} else {
					p.err = fmt.Errorf("a %T, not a unix socket", conn)
				}
				return context.WithValue(ctx, peerKey{}, p)
			}}}
	go c.routineServe(o.Logger)
	endpoints := ""
	if o.Reload != nil {
		endpoints = "/reload"
	}
	o.Logger.Info("control socket listening", "path", o.Path, "endpoints", endpoints)
	return c, nil
}

// listenControl makes a unix socket at path, of mode 0600 from the start:
// it is bound under a temporary name in the same directory, given its
// mode, then renamed to path, so that no one can connect while it is
// still of the mode the umask left.
func listenControl(path string) (*net.UnixListener, os.FileInfo, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, err
	}
	stale, err := controlPathFree(path)
	if err != nil {
		return nil, nil, err
	}
	if stale {
		// The gateway that made it is gone.
		if err := os.Remove(path); err != nil {
			return nil, nil, err
		}
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.%d", filepath.Base(path), os.Getpid()))
	os.Remove(tmp) // a leftover of a gateway of this pid
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	ln.SetUnlinkOnClose(false) // Close removes path, not tmp
	fail := func(err error) (*net.UnixListener, os.FileInfo, error) {
		ln.Close()
		os.Remove(tmp)
		return nil, nil, err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	return ln, fi, nil
}

// controlPathFree reports whether a control socket may be made at path:
// nothing there, or a stale socket (stale: no one answers it), not a
// file of another kind nor a socket another process serves.
func controlPathFree(path string) (stale bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case fi.Mode().Type() != os.ModeSocket:
		return false, fmt.Errorf("%s is there, not a socket: remove it or give admin.control another path", fileKind(fi.Mode()))
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	switch {
	case err == nil:
		c.Close()
		return false, errors.New("another process (another gateway?) serves it: give each gateway its own admin.control")
	case !errors.Is(err, syscall.ECONNREFUSED):
		return false, fmt.Errorf("a socket is there that could not be tried: %w", err)
	}
	return true, nil
}

// fileKind names a file's kind, as "a directory".
func fileKind(m os.FileMode) string {
	switch m.Type() {
	case 0:
		return "a regular file"
	case os.ModeDir:
		return "a directory"
	case os.ModeSymlink:
		return "a symbolic link"
	case os.ModeNamedPipe:
		return "a named pipe"
	case os.ModeDevice, os.ModeDevice | os.ModeCharDevice:
		return "a device"
	}
	return "a file of another kind"
}

// CheckControl reports whether StartControl could make the control socket
// at path, and makes nothing (rbridge run --check): the nearest directory
// on the way that exists must let the process make the rest, and the
// path must be free (controlPathFree).
func CheckControl(path string) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%q: want an absolute path", path)
	}
	if _, err := controlPathFree(path); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	for dir != "/" {
		if _, err := os.Stat(dir); err == nil {
			break
		}
		dir = filepath.Dir(dir)
	}
	if err := canWriteDir(dir); err != nil {
		return fmt.Errorf("directory %s: %w", dir, err)
	}
	return nil
}

func (c *ControlServer) routineServe(log *slog.Logger) {
	defer close(c.done)
	if err := c.srv.Serve(c.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("control socket stopped", "path", c.path, "err", err)
	}
}

// Path is the socket's path.
func (c *ControlServer) Path() string { return c.path }

// Close stops the server (requests being served get until ctx ends) and
// removes the socket, unless another took its path meanwhile.
func (c *ControlServer) Close(ctx context.Context) error {
	err := c.srv.Shutdown(ctx)
	<-c.done
	if fi, serr := os.Lstat(c.path); serr == nil && os.SameFile(fi, c.file) {
		if rerr := os.Remove(c.path); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil {
		return fmt.Errorf("bridge: control socket %s: close: %w", c.path, err)
	}
	return nil
}
