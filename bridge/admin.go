package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// An AdminServer serves a gateway's operator endpoints over HTTP:
//
//	GET  /metrics  Prometheus metrics (NewCollector's, and the Go runtime's and process's)
//	GET  /status   the gateway's Status as JSON
//	GET  /healthz  the gateway's Health: 200 "ok", or 503 and why
//	POST /reload   re-read the config file and apply it (AdminOptions.Reload):
//	               a ReloadReport as JSON, 200 applied, 422 refused, 500 in part
//
// It is meant for a local address (config's admin.listen, 127.0.0.1:9479
// by default): it has no authentication. /reload takes no input (the
// gateway re-reads its own file) and refuses requests a browser sends
// for another site's page (with an Origin header), so a web page cannot
// make it reload.
type AdminServer struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// AdminOptions configures StartAdmin.
type AdminOptions struct {
	Gateway *Gateway
	// Addr is the address to listen on, as "127.0.0.1:9479" (port 0: the
	// kernel picks one; AdminServer.Addr says which).
	Addr   string
	Logger *slog.Logger
	// Reload, if set, serves POST /reload: it re-reads the gateway's
	// config file and applies it (rbridge run's also tells systemd and
	// logs, as on SIGHUP).
	Reload func() ReloadReport
}

// StartAdmin listens on o.Addr and serves the gateway's /metrics and
// /status until Close.
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
	// /healthz is the gateway's health check (Gateway.Health: every
	// route's accept loop alive, every userspace leg's receive loop
	// coming round, the session table not stuck, not closing): 200 "ok", else 503 with why. The systemd watchdog feeds on
	// the same check; Kubernetes probes it (deploy/kubernetes).
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := o.Gateway.Health(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, err)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if o.Reload != nil {
		mux.HandleFunc("POST /reload", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Origin") != "" {
				http.Error(w, "reload: cross-origin requests are refused", http.StatusForbidden)
				return
			}
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
				o.Logger.Warn("admin server: writing /reload", "err", err)
			}
		})
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		return nil, fmt.Errorf("bridge: admin server: %w", err)
	}
	a := &AdminServer{ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go a.routineServe(o.Logger)
	endpoints := "/metrics /status /healthz"
	if o.Reload != nil {
		endpoints += " /reload"
	}
	o.Logger.Info("admin server listening", "addr", ln.Addr().String(), "endpoints", endpoints)
	return a, nil
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
