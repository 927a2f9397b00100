package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
)

type statusOptions struct {
	admin   string
	config  string
	json    bool
	ready   bool
	timeout time.Duration
}

func newStatusCommand() *cobra.Command {
	o := statusOptions{}
	cmd := &cobra.Command{
		Use:   "status [--admin ADDR | --config FILE] [--json | --ready]",
		Short: "Show a running gateway's legs, routes and sessions",
		Long: `status asks a running gateway (rbridge run) for what it runs, on its admin
server's /status, and prints it as tables:

  gateway   what it is doing: running, reloading, draining (after SIGTERM: it
            accepts nothing more and ends its sessions) or stopped
  legs      name, kind, address, the link's state (a verbs leg's port state,
            a userspace leg's interface's operational state, a quic leg's
            tunnels to its peer; "(down)" when it carries no traffic;
            "(standby: ip not here)" for a freebind leg whose floating
            address another gateway holds), the interface (userspace) or the device,
            port and GID (verbs), and the path MTU with why
  routes    listen and target address with their legs, the protocol the route
            carries (its messages parsed; - for none), sessions running, the
            clients allowed, and why the route stopped accepting if it did
  sessions  every session: route, client, target, age, operations and bytes
            each way, what waits in each direction's queue, and both
            connections (QPNs, path MTU and how it was chosen; a userspace
            side with DCQCN, its rate)

--json prints /status's JSON as the gateway sent it. The gateway is reached
on its admin server: --admin ADDR, or the admin.listen of --config FILE
(127.0.0.1:9479 when the file has none, as for rbridge run); the same
server has Prometheus metrics on /metrics. It serves what reads alone:
rbridge reload goes through the gateway's control socket.

--ready asks the gateway's readiness (/healthz) instead: it prints "ready",
or why not (a leg a route needs is down, a stuck loop), and its exit status
says which, for a health check that wants a command rather than an HTTP
client: keepalived's track_script, which moves a floating address away
from a gateway that is not ready (docs/operations.md, deploy/keepalived).
A standby whose freebind leg's address is on the other gateway is ready.`,
		Example: `  rbridge status
  rbridge status --config /etc/rbridge/rbridge.yaml
  rbridge status --admin 127.0.0.1:9500 --json | jq '.sessions | length'
  rbridge status --ready --config /etc/rbridge/rbridge.yaml --timeout 1s`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("status takes no arguments, got %q", args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.ready && o.json {
				return usageError(cmd, errors.New("--ready and --json: give one (--ready prints a line, its exit status says the rest)"))
			}
			if cmd.Flags().Changed("admin") && o.config != "" {
				return usageError(cmd, errors.New("--admin and --config both name the gateway: give one"))
			}
			if o.config != "" {
				addr, err := adminOf(o.config)
				if err != nil {
					return &exitError{code: exitUsage, err: err}
				}
				o.admin = addr
			}
			if _, err := netip.ParseAddrPort(o.admin); err != nil {
				return usageError(cmd, fmt.Errorf("--admin %q: want an IP address and a port, as %q", o.admin, config.DefaultAdminListen))
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			if o.ready {
				return askReady(ctx, cmd.OutOrStdout(), o.admin, o.timeout)
			}
			body, err := fetchStatus(ctx, o.admin, o.timeout)
			if err != nil {
				return err // exitNoGateway, or exitFailed for an error answered
			}
			if o.json {
				_, err := cmd.OutOrStdout().Write(body)
				return err
			}
			var st bridge.Status
			if err := json.Unmarshal(body, &st); err != nil {
				return &exitError{code: 1, err: fmt.Errorf("status from %s: %w", o.admin, err)}
			}
			if err := writeStatusTable(cmd.OutOrStdout(), &st); err != nil {
				return err
			}
			return writeDatagramTables(cmd.OutOrStdout(), &st)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.admin, "admin", config.DefaultAdminListen, "the gateway's admin server (the config's admin.listen)")
	f.StringVar(&o.config, "config", "", "the gateway's config file, to find its admin server in")
	f.BoolVar(&o.json, "json", false, "print the JSON the gateway sent instead of tables")
	f.BoolVar(&o.ready, "ready", false, "ask /healthz: exit 0 when the gateway is ready, 1 (printing why) when not, 3 when no gateway answered")
	f.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for the gateway's answer")
	return cmd
}

// fetchStatus gets /status from the admin server at addr.
func fetchStatus(ctx context.Context, addr string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("status: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, &exitError{code: exitNoGateway, err: fmt.Errorf("cannot reach the gateway's admin server: %w (is rbridge run running, with admin.listen %s?)", err, addr)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("status: reading GET %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status: GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return body, nil
}

// askReady asks the admin server at addr whether the gateway is ready
// (/healthz): it prints "ready" and returns nil, or returns why not (exit
// 1), or that no gateway answered (exit 3).
func askReady(ctx context.Context, w io.Writer, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	url := "http://" + addr + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("status --ready: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return &exitError{code: exitNoGateway, err: fmt.Errorf("cannot reach the gateway's admin server: %w (is rbridge run running, with admin.listen %s?)", err, addr)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("status --ready: reading GET %s: %w", url, err)
	}
	why := strings.TrimSpace(string(body))
	switch resp.StatusCode {
	case http.StatusOK:
		_, err := fmt.Fprintln(w, "ready")
		return err
	case http.StatusServiceUnavailable:
		return fmt.Errorf("not ready: %s", why)
	default:
		return fmt.Errorf("status --ready: GET %s: %s: %s", url, resp.Status, why)
	}
}

// writeStatusTable prints a gateway's status: its state, then three
// tables.
func writeStatusTable(w io.Writer, st *bridge.Status) error {
	if st.State != "" {
		fmt.Fprintf(w, "gateway %s\n", st.State)
		var about []string
		if !st.Started.IsZero() {
			about = append(about, fmt.Sprintf("up %v", (time.Duration(st.UptimeSeconds)*time.Second).Round(time.Second)))
		}
		if st.Version != "" {
			about = append(about, "rbridge "+st.Version)
		}
		if len(about) > 0 {
			fmt.Fprintln(w, strings.Join(about, "; "))
		}
		fmt.Fprintln(w)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LEG\tKIND\tIP\tLINK\tON\tMTU\tWHY")
	for _, l := range st.Legs {
		on, mtu, why := "", "-", l.MTUWhy
		switch l.Kind {
		case config.KindUserspace:
			on = l.Interface + " (" + l.IO + ")"
			if l.Netns != "" {
				on += " in netns " + l.Netns
			}
			if l.NetnsMoved != "" {
				on += " (opened there; " + l.NetnsMoved + ")"
			}
			mtu = fmt.Sprint(l.MTU)
		case config.KindVerbs:
			on = fmt.Sprintf("%s port %d GID %d %s", l.Device, l.Port, l.GIDIndex, l.GID)
			why = l.GIDWhy
		case config.KindQUIC:
			var ends []string
			if l.Listen != "" {
				ends = append(ends, "listen "+l.Listen)
			}
			if l.Peer != "" {
				ends = append(ends, "peer "+l.Peer)
			}
			on = strings.Join(ends, ", ")
			var whys []string
			if l.PeerWhy != "" {
				whys = append(whys, l.PeerWhy)
			}
			if l.PeerRefused > 0 {
				whys = append(whys, fmt.Sprintf("%d peer certificates refused", l.PeerRefused))
			}
			why = strings.Join(whys, "; ")
		}
		if l.BusyPoll != "" {
			on += "; busy-polled: " + l.BusyPoll
			if l.BusyPollNaps > 0 {
				on += fmt.Sprintf(" (%d naps)", l.BusyPollNaps)
			}
		}
		link := l.State
		if !l.Up {
			link += " (down)"
		}
		if l.IPHeld != nil && !*l.IPHeld {
			link += " (standby: ip not here)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", l.Name, l.Kind, l.IP, link, on, mtu, why)
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "ROUTE\tLISTEN\tTARGET\tPROTOCOL\tSESSIONS\tALLOW\tSTATE")
	for _, r := range st.Routes {
		allow, state, proto := "any", "accepting", "-"
		if r.Protocol != "" {
			proto = r.Protocol
		}
		if len(r.Allow) > 0 {
			allow = strings.Join(r.Allow, ",")
		}
		if r.Stopped != "" {
			state = "stopped: " + r.Stopped
		}
		if f := r.Fallback; f != nil {
			if f.Active {
				state += fmt.Sprintf("; ON FALLBACK %s %s since %s: %s", f.Leg, f.Target, f.Since.Format(time.RFC3339), f.Why)
			} else {
				state += fmt.Sprintf("; fallback %s %s", f.Leg, f.Target)
			}
		}
		fmt.Fprintf(tw, "%s\t%s %s\t%s %s\t%s\t%d\t%s\t%s\n", r.Name, r.ListenLeg, r.Listen, r.TargetLeg, r.Target, proto, r.Sessions, allow, state)
	}
	fmt.Fprintln(tw)
	if len(st.Sessions) == 0 {
		fmt.Fprintln(tw, "no sessions")
		return tw.Flush()
	}
	// OPS>T and BYTES>T: the client's requests to the target; OPS<T and
	// BYTES<T: the target's to the client; QUEUED: waiting each way.
	fmt.Fprintln(tw, "#\tROUTE\tCLIENT\tTARGET\tAGE\tOPS>T\tBYTES>T\tOPS<T\tBYTES<T\tFAILED\tQUEUED")
	for i, s := range st.Sessions {
		age := time.Duration(s.AgeSeconds * float64(time.Second)).Round(time.Second)
		target := s.Target
		if s.Fallback {
			target += " (fallback)"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%v\t%d\t%d\t%d\t%d\t%d\t%d/%d\n", i+1, s.Route, s.Client, target, age,
			s.ToTarget.Ops, s.ToTarget.Bytes, s.ToClient.Ops, s.ToClient.Bytes, s.ToTarget.Failed+s.ToClient.Failed,
			s.ToTarget.Queued, s.ToClient.Queued)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for i, s := range st.Sessions {
		if _, err := fmt.Fprintf(w, "#%d client side: %s%s%s\n#%d target side: %s%s%s\n", i+1, s.ClientSide, dcqcnNote(s.ClientSideDCQCN), xdpNote(s.ClientSideXDP),
			i+1, s.TargetSide, dcqcnNote(s.TargetSideDCQCN), xdpNote(s.TargetSideXDP)); err != nil {
			return err
		}
	}
	return nil
}

// xdpNote says what the XDP classifier counted for a side's QP.
func xdpNote(x *bridge.XDPQPStatus) string {
	if x == nil {
		return ""
	}
	return fmt.Sprintf("; XDP %d packets, %d bytes, %d ECN-CE, %d CNPs", x.Packets, x.Bytes, x.ECNCE, x.CNPs)
}

// dcqcnNote says a userspace side's DCQCN rate, when it has DCQCN.
func dcqcnNote(d *bridge.DCQCNStatus) string {
	if d == nil {
		return ""
	}
	state := "at line rate"
	if d.Limited {
		state = fmt.Sprintf("cut %d times by %d CNPs", d.Cuts, d.CNPs)
	}
	return fmt.Sprintf("; DCQCN %.4g Gb/s, %s", d.RateBytesPerSecond*8/1e9, state)
}

// adminOf is the admin server's address a config file gives: admin.listen,
// or the default when the file has none. It is read from the YAML alone
// (config.LoadAdmin), so that a file that the gateway would refuse still
// leads to the gateway; a file that cannot be read, or is not YAML, is an
// error, never a reason to ask the default address.
func adminOf(path string) (string, error) {
	a, err := config.LoadAdmin(path)
	if err != nil {
		return "", fmt.Errorf("--config: %w", err)
	}
	switch {
	case a.Listen == "":
		return "", fmt.Errorf("--config %s: admin.listen is \"\": that gateway has no admin server to ask", path)
	case a.Addr().Port() == 0:
		return "", fmt.Errorf("--config %s: admin.listen %s lets the kernel pick the port: give --admin the address rbridge run logged", path, a.Listen)
	}
	return a.Listen, nil
}
