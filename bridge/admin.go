package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// An AdminServer serves what reads a gateway's state, over HTTP on TCP:
//
//	GET /metrics  Prometheus metrics (NewCollector's, and the Go runtime's and process's)
//	GET /status   the gateway's Status as JSON
//	GET /healthz  readiness, the gateway's Ready: 200 "ok", or 503 and why (a leg a route needs is down, named)
//	GET /livez    liveness, the gateway's Health (what the systemd watchdog feeds on): 200 "ok", or 503 and why
//
// (HEAD too; other methods are refused). Nothing it serves changes the
// gateway: control (a reload) is the ControlServer's, on a unix socket
// that only local processes of the gateway's own user can reach, so that
// metrics may be exposed to a network (Prometheus) without exposing
// control. POST /reload here is answered 404 with where control is.
//
// It has no authentication: its address is meant to be local
// (config's admin.listen, 127.0.0.1:9479 by default); StartAdmin warns of
// another. It answers only requests addressed (their Host header) to an
// IP address, localhost or a name in AdminOptions.Hosts, others 421: a
// web page whose name an attacker rebinds to the gateway's address (DNS
// rebinding) cannot read it through a browser.
type AdminServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// AdminOptions configures StartAdmin.
type AdminOptions struct {
	Gateway *Gateway
	// Addr is the address to listen on, as "127.0.0.1:9479" (port 0: the
	// kernel picks one; AdminServer.Addr says which). An IPv4 address is
	// listened on in IPv4 alone (0.0.0.0 is every IPv4 address, not also
	// every IPv6 one).
	Addr   string
	Logger *slog.Logger
	// Hosts are the names, besides localhost, that requests may be
	// addressed to (config's admin.hosts), lower-case.
	Hosts []string
	// Control is the path of the gateway's control socket ("": none), for
	// the answer to a POST /reload sent here.
	Control string
}

// StartAdmin listens on o.Addr and serves the gateway's /metrics, /status,
// /healthz and /livez until Close. An address that is not a loopback one is
// logged at warning: what it serves is readable from the network.
func StartAdmin(o AdminOptions) (*AdminServer, error) {
	if o.Gateway == nil {
		return nil, errors.New("bridge: admin server: no gateway")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{NewCollector(o.Gateway), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("bridge: admin server: register metrics: %w", err)
		}
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogErrorLog{o.Logger}}))
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		if err := enc.Encode(o.Gateway.Status()); err != nil {
			o.Logger.Warn("admin server: writing /status", "err", err)
		}
	})
	// /livez is liveness (Gateway.Health: every route's accept loop
	// alive, every userspace leg's receive loop coming round, the session
	// table not stuck, not closing), the check the systemd watchdog feeds
	// on; /healthz is readiness (Gateway.Ready: that, and every leg a
	// route or a group needs up, a quic leg's peer gateway connected).
	// Both: 200 "ok", else 503 with why. Kubernetes probes each
	// (deploy/kubernetes): a restart cures a gateway that is not alive,
	// never one whose peer gateway is away.
	mux.HandleFunc("GET /livez", probe(o.Gateway.Health))
	mux.HandleFunc("GET /healthz", probe(o.Gateway.Ready))
	// Control is not served here: say where it is, to whoever asks.
	mux.HandleFunc("/reload", func(w http.ResponseWriter, _ *http.Request) {
		msg := "reload is not served over TCP: send the gateway SIGHUP (its control socket is off: admin.control is \"\")"
		if o.Control != "" {
			msg = fmt.Sprintf("reload is not served over TCP: it is on the gateway's control socket %s (admin.control), a unix socket for local processes alone: rbridge reload --control %s, or SIGHUP", o.Control, o.Control)
		}
		http.Error(w, msg, http.StatusNotFound)
	})
	ap, err := netip.ParseAddrPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("bridge: admin server: listen %q: want an IP address and a port", o.Addr)
	}
	ln, err := net.Listen(adminNetwork(ap), o.Addr)
	if err != nil {
		return nil, fmt.Errorf("bridge: admin server: %w", err)
	}
	a := &AdminServer{ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: hostCheck(o.Hosts, mux), ReadHeaderTimeout: 10 * time.Second}}
	go a.routineServe(o.Logger)
	o.Logger.Info("admin server listening", "addr", ln.Addr().String(), "endpoints", "/metrics /status /healthz /livez")
	if !ap.Addr().Unmap().IsLoopback() {
		o.Logger.Warn("metrics and status are readable from the network", "at", ln.Addr().String(),
			"hint", NonLoopbackNote(ap))
	}
	return a, nil
}

// probe serves a check: 200 "ok" while it is nil, else 503 with its
// error, a line each.
func probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	}
}

// adminNetwork is the network to listen on at ap: an IPv4 address in
// IPv4 alone (Go listens on 0.0.0.0 in both families otherwise).
func adminNetwork(ap netip.AddrPort) string {
	if ap.Addr().Unmap().Is4() {
		return "tcp4"
	}
	return "tcp"
}

// NonLoopbackNote says what an admin server listening on ap, not a
// loopback address, exposes (rbridge run logs it, run --check prints it).
func NonLoopbackNote(ap netip.AddrPort) string {
	where := "from the networks of " + ap.Addr().String()
	if ap.Addr().IsUnspecified() {
		where = "from every network this host is on"
	}
	return fmt.Sprintf("/metrics, /status, /healthz and /livez are readable %s (control is not: it is on the unix socket admin.control); keep the port to trusted hosts with a firewall, or listen on 127.0.0.1", where)
}

// hostCheck serves only requests addressed to an IP address (with or
// without a port), localhost, or one of hosts; others are answered 421.
// A browser tricked into sending a request to the gateway under another
// name (DNS rebinding) sends that name.
func hostCheck(hosts []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hostAllowed(r.Host, hosts) {
			http.Error(w, fmt.Sprintf("host %q is not this admin server's: it answers requests addressed to an IP address, localhost, or a name in admin.hosts (a guard against DNS rebinding)", r.Host),
				http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a request's Host header (empty in an
// HTTP/1.0 request) names this server as hostCheck takes it.
func hostAllowed(host string, hosts []string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "" {
		return true
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return host == "localhost" || slices.Contains(hosts, host)
}

func (a *AdminServer) routineServe(log *slog.Logger) {
	defer close(a.done)
	if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("admin server stopped", "addr", a.ln.Addr().String(), "err", err)
	}
}

// Addr is the address the server listens on.
func (a *AdminServer) Addr() net.Addr { return a.ln.Addr() }

// Close stops the server: requests being served get until ctx ends.
func (a *AdminServer) Close(ctx context.Context) error {
	err := a.srv.Shutdown(ctx)
	<-a.done
	if err != nil {
		return fmt.Errorf("bridge: admin server %v: close: %w", a.ln.Addr(), err)
	}
	return nil
}

// slogErrorLog gives promhttp's errors (a collector's, a write's) to a
// logger.
type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) {
	l.log.Warn("admin server: /metrics", "err", fmt.Sprint(v...))
}
