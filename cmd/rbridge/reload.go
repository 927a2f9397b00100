package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
)

type reloadOptions struct {
	admin, config string
	json          bool
	timeout       time.Duration
}

func newReloadCommand() *cobra.Command {
	o := reloadOptions{}
	cmd := &cobra.Command{
		Use:   "reload [--admin ADDR | --config FILE] [--json]",
		Short: "Make a running gateway re-read its config file, and say what changed",
		Long: `reload asks a running gateway (rbridge run) to re-read the config file it was
started with and apply its routes, as SIGHUP (systemctl reload) does, and
prints the outcome: the routes added (now listening), removed (they accept
no more; their sessions go on until they end), changed (restarted so) and
unchanged (not touched), or why the file was refused (it does not parse,
or its legs differ: legs need a restart), in which case the running routes
stay as they were.

The gateway is reached on its admin server (POST /reload): --admin ADDR, or
the admin.listen of --config FILE (127.0.0.1:9479 when the file has none, as
for rbridge run). It is read from the YAML alone, so a file that fails
rbridge run's checks still leads to the gateway, whose refusal is then the
answer; a file that cannot be read, or is not YAML, is bad usage (exit 2),
named with why. The gateway always re-reads its own file: reload says so
when FILE is another one.

--json prints the gateway's answer as it sent it:
  {"config", "outcome": "applied" | "refused" | "partial",
   "added", "removed", "changed", "unchanged", "error"}`,
		Example: `  rbridge reload
  rbridge reload --config /etc/rbridge/rbridge.yaml
  rbridge reload --admin 127.0.0.1:9500 --json | jq -r .outcome`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("reload takes no arguments, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cmd.Flags().Changed("admin") && o.config != "" {
				return usageError(cmd, errors.New("--admin and --config both name the gateway: give one"))
			}
			addr := o.admin
			if o.config != "" {
				var err error
				if addr, err = adminOf(o.config); err != nil {
					return &exitError{code: exitUsage, err: err}
				}
			}
			if _, err := netip.ParseAddrPort(addr); err != nil {
				return usageError(cmd, fmt.Errorf("--admin %q: want an IP address and a port, as %q", addr, config.DefaultAdminListen))
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			body, rep, err := postReload(ctx, addr, o.timeout)
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
	f.StringVar(&o.admin, "admin", config.DefaultAdminListen, "the gateway's admin server (the config's admin.listen)")
	f.StringVar(&o.config, "config", "", "the gateway's config file, to find its admin server in")
	f.BoolVar(&o.json, "json", false, "print the JSON the gateway answered")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the gateway's answer (a reload waits for removed routes' listeners to close)")
	return cmd
}

// adminOf is the admin server's address a config file gives: admin.listen,
// or the default when the file has none. It is read from the YAML alone
// (config.LoadAdmin), so that a file the gateway would refuse still leads
// to the gateway; a file that cannot be read, or is not YAML, is an error,
// never a reason to ask the default address.
func adminOf(path string) (string, error) {
	a, err := config.LoadAdmin(path)
	if err != nil {
		return "", fmt.Errorf("--config: %w", err)
	}
	switch {
	case a.Listen == "":
		return "", fmt.Errorf("--config %s: admin.listen is \"\": that gateway has no admin server to ask (send it SIGHUP)", path)
	case a.Addr().Port() == 0:
		return "", fmt.Errorf("--config %s: admin.listen %s lets the kernel pick the port: give --admin the address rbridge run logged", path, a.Listen)
	}
	return a.Listen, nil
}

// postReload sends POST /reload to the admin server at addr and decodes
// its answer.
func postReload(ctx context.Context, addr string, timeout time.Duration) ([]byte, *bridge.ReloadReport, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/reload"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("reload: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, nil, &exitError{code: exitNoGateway, err: fmt.Errorf("cannot reach the gateway's admin server: %w (is rbridge run running, with admin.listen %s?)", err, addr)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("reload: reading POST %s: %w", url, err)
	}
	var rep bridge.ReloadReport
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || json.Unmarshal(body, &rep) != nil || rep.Outcome == "" {
		if resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed {
			return nil, nil, fmt.Errorf("the gateway at %s does not take POST /reload (an older rbridge run): send it SIGHUP", addr)
		}
		return nil, nil, fmt.Errorf("reload: POST %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
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
