package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
)

type reloadOptions struct {
	control, config, admin string
	json                   bool
	timeout                time.Duration
}

func newReloadCommand() *cobra.Command {
	o := reloadOptions{}
	cmd := &cobra.Command{
		Use:   "reload [--control PATH | --config FILE] [--json]",
		Short: "Make a running gateway re-read its config file, and say what changed",
		Long: `reload asks a running gateway (rbridge run) to re-read the config file it was
started with and apply its routes, as SIGHUP (systemctl reload) does, and
prints the outcome: the routes added (now listening), removed (they accept
no more; their sessions go on until they end), changed (restarted so) and
unchanged (not touched), or why the file was refused (it does not parse,
or its legs differ: legs need a restart), in which case the running routes
stay as they were.

The gateway is reached on its control socket (POST /reload on a unix
socket, never over the network): --control PATH, or the admin.control of
--config FILE, or ` + config.DefaultAdminControl + ` (for root; another user's
gateway makes it in $XDG_RUNTIME_DIR/rbridge/ by default). The socket is
mode 0600: run reload as the gateway's user (root: sudo rbridge reload).
The gateway logs who asked (pid, uid, gid). FILE is read from the YAML
alone, so a file that fails rbridge run's checks still leads to the
gateway, whose refusal is then the answer; a file that cannot be read, or
is not YAML, is bad usage (exit 2), named with why. The gateway always
re-reads its own file: reload says so when FILE is another one.

--json prints the gateway's answer as it sent it:
  {"config", "outcome": "applied" | "refused" | "partial",
   "added", "removed", "changed", "unchanged", "error"}`,
		Example: `  sudo rbridge reload
  rbridge reload --config /etc/rbridge/rbridge.yaml
  rbridge reload --control /run/rbridge/gw2.sock --json | jq -r .outcome`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("reload takes no arguments, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("admin") {
				return usageError(cmd, fmt.Errorf("--admin %s: reload is not served on the admin server's TCP address (anyone who reaches it could reload the gateway): it goes through the gateway's control socket, --control PATH (admin.control; %s by default), or --config FILE", o.admin, config.DefaultAdminControl))
			}
			if cmd.Flags().Changed("control") && o.config != "" {
				return usageError(cmd, errors.New("--control and --config both name the gateway: give one"))
			}
			path := o.control
			if o.config != "" {
				var err error
				if path, err = controlOf(o.config); err != nil {
					return &exitError{code: exitUsage, err: err}
				}
			}
			if !filepath.IsAbs(path) {
				return usageError(cmd, fmt.Errorf("--control %q: want the control socket's absolute path, as %q", path, config.DefaultAdminControl))
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			body, rep, err := postReload(ctx, path, o.timeout)
			if err != nil {
				return err // exitNoGateway, or exitFailed for an error answered
			}
			if o.json {
				if _, err := cmd.OutOrStdout().Write(body); err != nil {
					return err
				}
			} else {
				printReload(cmd.OutOrStdout(), rep)
			}
			if o.config != "" && !sameFile(o.config, rep.Config) {
				fmt.Fprintf(cmd.ErrOrStderr(), "rbridge: note: the gateway re-read its own file %s, not %s\n", rep.Config, o.config)
			}
			if rep.Outcome == bridge.ReloadApplied {
				return nil
			}
			// What went wrong is in the answer printed: said once.
			return &exitError{code: exitFailed}
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.control, "control", config.DefaultControl(), "the gateway's control socket (the config's admin.control)")
	f.StringVar(&o.config, "config", "", "the gateway's config file, to find its control socket in")
	f.BoolVar(&o.json, "json", false, "print the JSON the gateway answered")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the gateway's answer (a reload waits for removed routes' listeners to close)")
	// --admin was reload's way to the gateway when the admin server took
	// reloads: refused with where control is now.
	f.StringVar(&o.admin, "admin", "", "")
	_ = f.MarkHidden("admin")
	return cmd
}

// controlOf is the control socket's path a config file gives:
// admin.control, or the default when the file has none. It is read from
// the YAML alone (config.LoadAdmin), so that a file the gateway would
// refuse still leads to the gateway; a file that cannot be read, or is
// not YAML, is an error, never a reason to ask the default socket.
func controlOf(path string) (string, error) {
	a, err := config.LoadAdmin(path)
	if err != nil {
		return "", fmt.Errorf("--config: %w", err)
	}
	if a.Control == "" {
		return "", fmt.Errorf("--config %s: admin.control is \"\": that gateway has no control socket to ask (send it SIGHUP: systemctl reload rbridge)", path)
	}
	return a.Control, nil
}

// postReload sends POST /reload to the control socket at path and decodes
// its answer.
func postReload(ctx context.Context, path string, timeout time.Duration) ([]byte, *bridge.ReloadReport, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}}
	defer client.CloseIdleConnections()
	// The host is a placeholder: the socket is the address.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost/reload", nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reload: %w", err)
	}
	resp, err := client.Do(req)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return nil, nil, &exitError{code: exitNoGateway, err: fmt.Errorf("cannot open the gateway's control socket %s: permission denied: it is its gateway's user's alone (mode 0600): run rbridge reload as that user (root: sudo rbridge reload)", path)}
	case err != nil:
		return nil, nil, &exitError{code: exitNoGateway, err: fmt.Errorf("cannot reach the gateway's control socket: %w (is rbridge run running, with admin.control %s?)", err, path)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("reload: reading the answer on %s: %w", path, err)
	}
	var rep bridge.ReloadReport
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || json.Unmarshal(body, &rep) != nil || rep.Outcome == "" {
		return nil, nil, fmt.Errorf("reload: POST /reload on %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, &rep, nil
}

// printReload says what a reload did.
func printReload(w io.Writer, rep *bridge.ReloadReport) {
	switch rep.Outcome {
	case bridge.ReloadApplied:
		fmt.Fprintf(w, "reloaded %s: %s\n", rep.Config, rep.Routes())
	case bridge.ReloadRefused:
		fmt.Fprintf(w, "refused %s, the running routes stay: %s\n", rep.Config, rep.Error)
	default:
		fmt.Fprintf(w, "reloaded %s in part: %s; not applied: %s\n", rep.Config, rep.Routes(), rep.Error)
	}
}

// sameFile reports whether two paths name one file.
func sameFile(a, b string) bool {
	fa, errA := os.Stat(a)
	fb, errB := os.Stat(b)
	if errA != nil || errB != nil {
		aa, _ := filepath.Abs(a)
		bb, _ := filepath.Abs(b)
		return aa == bb
	}
	return os.SameFile(fa, fb)
}
