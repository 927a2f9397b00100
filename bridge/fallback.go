package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/config"
)

// A route with a fallback (a target through a peer gateway, over its quic
// leg) connects new clients there while its own target cannot be reached:
// no answer within its fallback's after (GatewayOptions.FallbackAfter
// when the config gives none), or a leg that cannot connect at all (a
// port down, no route to it). A target that answers with a reject has
// been reached: its reject goes to the client and nothing falls back.
//
// Falling back is never silent: the switch is logged at warning level
// with why, counted (rbridge_route_fallbacks_total, and each session
// through the fallback in rbridge_route_fallback_sessions_total) and
// shown in /status (on_fallback, since, why). Every retry (FallbackRetry) the
// next new client tries the target again; once it answers, the route is
// back on it (logged too) and new sessions go there.
//
// Sessions do not move between paths: an RC connection's state (PSNs,
// outstanding READs, the target's memory keys) lives in the two QPs that
// made it, so a session whose path fails ends and its ops in flight fail
// back to the client, never acknowledged and lost; the client's next
// connection takes the fallback. Only new sessions move, both ways.

// DefaultFallbackAfter and DefaultFallbackRetry are GatewayOptions'
// defaults.
const (
	DefaultFallbackAfter = 3 * time.Second
	DefaultFallbackRetry = 15 * time.Second
)

// fallbackState is a route's choice between its target and its fallback.
type fallbackState struct {
	mu      sync.Mutex // guards the fields below
	active  bool       // new sessions go to the fallback
	since   time.Time
	why     string
	retryAt time.Time // when a new session tries the target again
}

// FallbackStatus is a route's fallback as /status shows it.
type FallbackStatus struct {
	Leg    string    `json:"leg"`
	Target string    `json:"target"`
	Active bool      `json:"active"`
	Since  time.Time `json:"since,omitzero"`
	Why    string    `json:"why,omitempty"`
}

func (f *fallbackState) status(r *config.Route) *FallbackStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := &FallbackStatus{Leg: r.Fallback.Leg, Target: r.Fallback.Addr.String(), Active: f.active}
	if f.active {
		st.Since, st.Why = f.since, f.why
	}
	return st
}

// tryTarget says whether a new session tries the route's own target.
func (f *fallbackState) tryTarget(now time.Time) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.active || !now.Before(f.retryAt)
}

// unreachable records that the target did not answer; it reports whether
// the route switched to its fallback now.
func (f *fallbackState) unreachable(now time.Time, why string, retry time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retryAt = now.Add(retry)
	if f.active {
		return false
	}
	f.active, f.since, f.why = true, now, why
	return true
}

// reached records that the target answered; it reports how long the
// route had been on its fallback (0: it was not).
func (f *fallbackState) reached(now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.active {
		return 0
	}
	f.active = false
	return max(now.Sub(f.since), time.Nanosecond)
}

// dialTarget connects to the route's target, or to its fallback while the
// target cannot be reached; it says whether the connection is the
// fallback's.
func (g *Gateway) dialTarget(ctx context.Context, r *config.Route, p leg.Params, log *slog.Logger, rs *GatewayStats) (leg.Conn, bool, error) {
	target := g.legs[r.Target.Leg]
	if r.Fallback.Leg == "" {
		c, err := target.Dial(ctx, r.Target.Addr, p)
		return c, false, err
	}
	g.mu.Lock()
	fb := g.fallbacks[r.Name]
	g.mu.Unlock()
	after, retry := g.fallbackAfter, g.fallbackRetry
	if r.Fallback.After > 0 {
		after = r.Fallback.After
	}
	if r.Fallback.Retry > 0 {
		retry = r.Fallback.Retry
	}
	if fb.tryTarget(time.Now()) {
		tctx, cancel := context.WithTimeout(ctx, after)
		c, err := target.Dial(tctx, r.Target.Addr, p)
		cancel()
		var rj *leg.Rejected
		if err == nil || errors.As(err, &rj) || ctx.Err() != nil {
			if d := fb.reached(time.Now()); d > 0 {
				log.Warn("route's target answers again: new sessions connect to it, not through the fallback",
					"fallback", r.Fallback.Leg, "was_on_fallback_for", d.Round(time.Millisecond))
			}
			return c, false, err
		}
		why := fmt.Sprintf("target %v on leg %q did not answer within %v: %v", r.Target.Addr, r.Target.Leg, after, err)
		if fb.unreachable(time.Now(), why, retry) {
			g.stats.Fallbacks.Add(1)
			rs.Fallbacks.Add(1)
			log.Warn("route's target cannot be reached: new sessions go through the fallback (sessions on the target's path end as it fails)",
				"why", why, "fallback", r.Fallback.Leg, "fallback_target", r.Fallback.Addr, "retry_every", retry)
		}
	}
	c, err := g.legs[r.Fallback.Leg].Dial(ctx, r.Fallback.Addr, p)
	if err != nil {
		return nil, true, fmt.Errorf("the fallback through leg %q: %w", r.Fallback.Leg, err)
	}
	g.stats.FellBack.Add(1)
	rs.FellBack.Add(1)
	return c, true, nil
}
