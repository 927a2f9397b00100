package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/rbridge/rbridge/bridge/pool"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/bridge"
	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
)

type runOptions struct {
	config   string
	check    bool
	logLevel string
	logJSON  bool
	drain    time.Duration
	trace    bool
	cpuProf  string
}

func newRunCommand() *cobra.Command {
	o := runOptions{}
	cmd := &cobra.Command{
		Use:   "run --config FILE",
		Short: "Run the gateway: legs and routes from a config file",
		Long: `run starts the gateway the config file describes: it opens every leg (a verbs
device, or rbridge's userspace RoCEv2 transport on an Ethernet interface),
listens on every route's listen address for rdma_cm connections, and connects
each client through to the route's target on the other leg. A client is
accepted only once the target accepted; a target that rejects or does not
answer gets the client a reject. SIGUSR1 logs the gateway's state (its
sessions, goroutines, pool buffers in use, userspace and verbs QPs: after
every connection ended, what it held idle) and every session's. SIGHUP
(or rbridge reload) re-reads the file: routes added start listening, routes removed stop
accepting while their sessions go on until they end, changed routes are
restarted the same way, unchanged ones and their sessions are not touched;
a file that does not parse, or whose legs differ (legs are opened once:
restart for them), is refused and the running routes stay. The admin
server (admin.listen, 127.0.0.1:9479 by default) serves what reads, over
TCP: Prometheus metrics on /metrics, and on /status as JSON (what rbridge
status prints) the gateway's state (running, reloading, draining,
stopped), the legs with their link state, the routes and the sessions;
/livez answers 200 while the gateway is alive (the watchdog's check, below)
and /healthz 200 while it is also ready: 503 names a leg a route needs that
is down (a quic leg's peer gateway not connected, and why); an address that
is not a loopback one is logged at warning. The control
socket (admin.control, /run/rbridge/control.sock by default: a unix
socket of mode 0600 that no remote peer can reach) takes POST /reload
(what rbridge reload sends: the same as SIGHUP, answered with what it
did), and the log says who asked (pid, uid, gid). Both serve while
sessions drain, and /status says draining then. On
SIGINT or SIGTERM it stops accepting, ends every session (both connections
disconnected), releases everything and exits 0. --drain bounds how long
the sessions' connections get to close (their peers answering the
disconnect); those still closing then are cut as the legs close, logged at
warning, and the exit status is 0 still. --drain 0 does not wait: the
sessions are cut at once.

Under systemd (dist/rbridge.service, Type=notify) it sends READY=1 once
every leg is open and every route listens, STOPPING=1 when it starts to
stop, and, when the unit sets WatchdogSec, WATCHDOG=1 at half that interval
for as long as the gateway's health check passes (every route's accept loop
alive, every userspace leg's receive loop coming round at least every 5 s,
the session table not stuck): a stuck gateway is restarted.

The file (YAML), in short; every key with its type, default and the legs or
routes it applies to: rbridge help config (docs/configuration.md in
rbridge's source):

  legs:
    - name: ib
      kind: verbs                 # a libibverbs device (IB HCA, RoCE HCA, rxe)
      ip: 198.18.3.1              # the gateway's address on this fabric
      device: rxe2                # optional, checked against ip
      receives: 128               # optional: receives posted per connection
      receive_size: 4096          # (default 16 of 65536 bytes): RPC-over-RDMA (NFS)
                                  # needs at least its server's credits
    - name: roce
      kind: userspace             # rbridge's own RoCEv2 transport
      interface: vgw0
      ip: 198.18.1.3
      io: afxdp                   # afxdp (default) or udp
      netns: user0                # optional
      ecn: true                   # optional: send ECN-capable and cut the rate on
                                  # CNPs (DCQCN), as a RoCE NIC with DCQCN on does
  routes:
    - name: storage
      listen: {leg: roce, addr: "198.18.1.3:4420"}
      target: {leg: ib, addr: "198.18.3.2:4420"}
      allow: ["198.18.1.0/24"]    # optional; default any client
      liveness: 30s               # optional: probe an idle session's peers (0s: off)
  admin:
    listen: "127.0.0.1:9479"      # optional: /metrics, /status, /healthz, /livez; the default, "" for none
    control: /run/rbridge/control.sock  # optional: rbridge reload's socket; the default, "" for none
    hosts: [gw1.example.com]      # optional: names the admin server answers (besides IPs, localhost)

YAML anchors, aliases and merge keys (- <<: *roce, then the keys that
differ) share settings between legs or routes.

A bad file is refused before anything starts, with its line and what is
wrong (a file above 1 MiB unread past that bound); so is a host that lacks
what the file needs, every problem at once: a leg's interface or RDMA
device missing, an io: afxdp leg on an interface without an Ethernet
address, a quic leg's ip not on this host, the admin server's port taken,
the control socket's path another gateway's. --check does all of this and
exits (and notes an admin.listen that is not a loopback address).

What crosses: every RC operation whose requester is on a userspace leg, one-
sided ones with the target's own address and rkey; from a verbs leg, the SEND
family only (the HCA executes one-sided operations against the gateway's own
memory, which refuses them with a remote access error). See the README.`,
		Example: `  rbridge run --config /etc/rbridge/rbridge.yaml
  rbridge run --config gateway.yaml --check`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.drain < 0 {
				return usageError(cmd, fmt.Errorf("--drain %v: want 0 (end the sessions at once) or more", o.drain))
			}
			if o.config == "" {
				path, err := defaultConfig()
				if err != nil {
					return usageError(cmd, err)
				}
				o.config = path
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
				return usageError(cmd, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel))
			}
			switch format, _ := cmd.Flags().GetString("log-format"); format {
			case "text":
			case "json":
				o.logJSON = true
			default:
				return usageError(cmd, fmt.Errorf("--log-format %q: want text or json", format))
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return runGateway(ctx, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "the gateway's config file (YAML; default $"+configEnv+", else "+defaultConfigPath+")")
	f.BoolVar(&o.check, "check", false, "validate the config file and exit")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.String("log-format", "text", "text (key=value) or json (one object a line, slog's JSON handler)")
	f.DurationVar(&o.drain, "drain", 10*time.Second, "on SIGINT/SIGTERM, how long the sessions' connections get to close before they are cut (0: cut at once)")
	f.StringVar(&o.cpuProf, "cpu-profile", "", "write a CPU profile of the whole run to this file when the gateway stops (go tool pprof reads it; for a performance report)")
	f.BoolVar(&o.trace, "trace-pool", false, "record who takes and releases each pool buffer, and name the holders of any still held at exit (slower: for finding a leak)")
	return cmd
}

// reload re-reads the config file and applies its routes (SIGHUP, and the
// admin server's POST /reload that rbridge reload sends); a bad file
// leaves the running gateway as it is. systemd hears RELOADING=1, then
// READY=1.
func reload(g *bridge.Gateway, log *slog.Logger, notify func(string)) bridge.ReloadReport {
	notify("RELOADING=1")
	defer notify("READY=1")
	rep := g.ReloadConfigFile()
	switch rep.Outcome {
	case bridge.ReloadApplied:
		log.Info("reloaded", "config", rep.Config, "routes", rep.Routes())
	case bridge.ReloadRefused:
		log.Error("reload refused: the running routes stay", "config", rep.Config, "err", rep.Error)
	default:
		log.Error("reload", "config", rep.Config, "applied", rep.Routes(), "err", rep.Error)
	}
	return rep
}

func runGateway(ctx context.Context, o runOptions, out, logs io.Writer) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	cfg, err := config.Load(o.config)
	if err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	// What the host lacks, all of it, before anything starts.
	if err := checkHost(cfg); err != nil {
		return err
	}
	if o.check {
		fmt.Fprintf(out, "%s: %d legs, %d routes: ok (interfaces and RDMA devices found, the admin port free)\n", o.config, len(cfg.Legs), len(cfg.Routes))
		if a := cfg.Admin.Addr(); a.IsValid() && !a.Addr().IsLoopback() {
			fmt.Fprintf(out, "note: admin.listen %s is not a loopback address: %s\n", cfg.Admin.Listen, bridge.NonLoopbackNote(a))
		}
		for _, l := range cfg.Legs {
			if held, err := leg.HoldsAddr(l.Netns, l.Interface, l.IP); l.FreeBind && err == nil && !held {
				fmt.Fprintf(out, "note: leg %q: ip %v is not on %s now (freebind: the leg binds it all the same, and takes its traffic once it arrives: a standby)\n", l.Name, l.IP, leg.InNetns(l.Interface, l.Netns))
			}
		}
		return nil
	}
	if o.cpuProf != "" {
		stop, err := startCPUProfile(o.cpuProf)
		if err != nil {
			return &exitError{code: exitUsage, err: err}
		}
		defer stop()
	}
	var handler slog.Handler = slog.NewTextHandler(logs, &slog.HandlerOptions{Level: level})
	if o.logJSON {
		handler = slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level})
	}
	log := slog.New(handler)
	g, err := bridge.StartGateway(bridge.GatewayOptions{Config: cfg, Logger: log, Pool: pool.Options{Trace: o.trace}, Build: buildInfo()})
	if err != nil {
		return err
	}
	notify := func(state string) { sdNotify(log, state) }
	// Both serve while the gateway drains, and stop after.
	if cfg.Admin.Listen != "" {
		admin, err := bridge.StartAdmin(bridge.AdminOptions{Gateway: g, Addr: cfg.Admin.Listen, Logger: log,
			Hosts: cfg.Admin.Hosts, Control: cfg.Admin.Control})
		if err != nil {
			g.Close(context.Background())
			return adminListenError(cfg, err)
		}
		defer admin.Close(context.Background())
	}
	if cfg.Admin.Control != "" {
		control, err := bridge.StartControl(bridge.ControlOptions{Path: cfg.Admin.Control, Logger: log,
			Reload: func() bridge.ReloadReport { return reload(g, log, notify) }})
		if err != nil {
			g.Close(context.Background())
			return controlError(cfg, err)
		}
		defer control.Close(context.Background())
	}
	// Room for a burst: signal.Notify drops a signal that finds the
	// channel full, and a SIGTERM behind a SIGUSR1 being handled must
	// not be lost.
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGHUP)
	defer signal.Stop(sig)
	// Every leg is open and every route listens: ready (under systemd,
	// Type=notify), and the watchdog fed from the gateway's health.
	log.Info("gateway running", "config", o.config, "legs", len(cfg.Legs), "routes", len(cfg.Routes))
	notify(fmt.Sprintf("READY=1\nSTATUS=gateway running: %d legs, %d routes", len(cfg.Legs), len(cfg.Routes)))
	wctx, stopWatchdog := context.WithCancel(context.Background())
	defer stopWatchdog()
	if interval, err := daemon.SdWatchdogEnabled(false); err != nil {
		log.Warn("systemd watchdog", "err", err)
	} else if interval > 0 {
		log.Info("systemd watchdog on", "interval", interval)
		go routineWatchdog(wctx, interval, g.Health, notify, log)
	}
wait:
	for {
		select {
		case s := <-sig:
			switch s {
			case syscall.SIGUSR1:
				g.LogState()
				continue
			case syscall.SIGHUP:
				log.Info("reload asked by SIGHUP")
				reload(g, log, notify)
				continue
			}
			log.Info("stopping", "signal", s.String(), "sessions", g.Sessions())
			break wait
		case <-ctx.Done():
			log.Info("stopping", "why", ctx.Err())
			break wait
		}
	}
	stopWatchdog()
	notify(fmt.Sprintf("STOPPING=1\nSTATUS=stopping: %d sessions draining", g.Sessions()))
	dctx, cancel := context.WithTimeout(context.Background(), o.drain)
	defer cancel()
	if err := stopped(g.Close(dctx), o.drain, log); err != nil {
		return err
	}
	st := g.Stats().Snapshot()
	log.Info("stopped", "sessions", st.Accepted, "rejected", st.Rejected, "refused", st.Refused, "failed", st.Failed)
	return nil
}

// stopped is what the gateway's Close returned (its errors joined), less
// the sessions it cut when the drain ran out: that is what --drain asked
// for (logged at warning), not a failure to stop.
func stopped(err error, drain time.Duration, log *slog.Logger) error {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var rest []error
	for _, e := range errs {
		if errors.Is(e, bridge.ErrSessionsCut) {
			log.Warn("sessions cut: their connections were still closing when the drain ran out", "drain", drain, "err", e)
			continue
		}
		rest = append(rest, e)
	}
	return errors.Join(rest...)
}

// The config file run reads when --config is not given.
const (
	configEnv         = "RBRIDGE_CONFIG"
	defaultConfigPath = "/etc/rbridge/rbridge.yaml"
)

// defaultConfig is $RBRIDGE_CONFIG, else /etc/rbridge/rbridge.yaml when it
// exists; the error says what was looked for.
func defaultConfig() (string, error) {
	if p := os.Getenv(configEnv); p != "" {
		return p, nil
	}
	if _, err := os.Stat(defaultConfigPath); err != nil {
		return "", fmt.Errorf("no --config FILE, $%s unset, and %s: %w (rbridge demo runs the gateway without one)", configEnv, defaultConfigPath, err)
	}
	return defaultConfigPath, nil
}

// startCPUProfile profiles the process's CPU into path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpu-profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpu-profile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
