package main

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// sdNotify sends a state to systemd (sd_notify: READY=1, WATCHDOG=1,
// STOPPING=1, STATUS=...); without NOTIFY_SOCKET (not started by systemd)
// it does nothing. A failure to send is logged, never fatal.
func sdNotify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("systemd notify", "state", strings.ReplaceAll(state, "\n", " "), "err", err)
	}
}

// routineWatchdog feeds systemd's watchdog (WATCHDOG=1) every interval/2
// while health is nil, until ctx ends. health is the gateway's own check
// of its data path (Gateway.Health: every accept loop alive, every
// userspace leg's receive loop coming round, its lock free): a path that
// stopped or hung stops the feeding, and systemd
// restarts the service once WatchdogSec passes. While unhealthy, STATUS
// says why; when health comes back, so does the feeding.
func routineWatchdog(ctx context.Context, interval time.Duration, health func() error, notify func(string), log *slog.Logger) {
	t := time.NewTicker(max(interval/2, time.Millisecond))
	defer t.Stop()
	var sick bool
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := health()
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			if sick {
				log.Info("gateway healthy again: feeding the watchdog")
				notify("STATUS=gateway running")
				sick = false
			}
			notify("WATCHDOG=1")
		case !sick:
			log.Error("gateway unhealthy: the systemd watchdog is no longer fed", "err", err)
			notify("STATUS=unhealthy: " + strings.ReplaceAll(err.Error(), "\n", "; "))
			sick = true
		}
	}
}
