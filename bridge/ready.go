package bridge

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rbridge/rbridge/bridge/leg"
)

// Liveness and readiness are two questions, asked by two probes:
//
//   - Health (liveness: /livez, and the systemd watchdog) asks whether the
//     process is alive and serving: its accept and receive loops come
//     round, its lock can be had, it is not closing. A failure there is
//     one a restart may cure.
//   - Ready (readiness: /healthz) asks, beyond that, whether the gateway
//     can carry what its configuration asks of it now: every leg a route
//     or a group needs is up. A quic leg whose peer gateway is not
//     connected, a verbs port that is not ACTIVE, an interface that is
//     down: the gateway is alive, a restart cures none of them, and it
//     says which leg and why (a quic leg's peer_why).
//
// A route needs its listen leg, and its target leg or, when it has one,
// its fallback's leg (while either is up, new sessions have a way); a
// group needs both its legs. A leg nothing uses is needed by nothing.

// Ready is nil when the gateway is healthy (Health) and every leg its
// routes and groups need is up; else it names what is not, each leg with
// its state and why.
func (g *Gateway) Ready() error {
	if err := g.Health(); err != nil {
		return err
	}
	g.mu.Lock()
	cfg := g.cfg // a reload replaces it
	g.mu.Unlock()
	down := map[string]error{} // a leg's, read once
	legDown := func(name string) error {
		if err, ok := down[name]; ok {
			return err
		}
		down[name] = g.legDown(name)
		return down[name]
	}
	var errs []error
	var named []string // legs already in errs
	need := func(what string, names ...string) {
		var why []error
		for _, n := range names {
			err := legDown(n)
			if err == nil {
				return // one of them is up
			}
			why = append(why, err)
		}
		for i, n := range names {
			if !slices.Contains(named, n) {
				named = append(named, n)
				errs = append(errs, fmt.Errorf("bridge: gateway: %s: %w", what, why[i]))
			}
		}
	}
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		need(fmt.Sprintf("route %q listens on", r.Name), r.Listen.Leg)
		if r.Fallback.Leg != "" {
			need(fmt.Sprintf("route %q reaches its target through neither", r.Name), r.Target.Leg, r.Fallback.Leg)
		} else {
			need(fmt.Sprintf("route %q reaches its target through", r.Name), r.Target.Leg)
		}
	}
	for i := range cfg.Groups {
		gc := &cfg.Groups[i]
		need(fmt.Sprintf("group %q relays on", gc.Name), gc.RoCE)
		need(fmt.Sprintf("group %q relays on", gc.Name), gc.IB)
	}
	return errors.Join(errs...)
}

// legDown says why leg name cannot carry traffic now (its link is not
// up: a port, an interface, a tunnel to the peer gateway), nil when it
// can.
func (g *Gateway) legDown(name string) error {
	ls := g.legNow(name)
	if ls.Up {
		return nil
	}
	err := fmt.Errorf("leg %q (%s) is down: %s", name, ls.Kind, ls.State)
	if ls.PeerWhy != "" {
		err = fmt.Errorf("%w: %s", err, ls.PeerWhy)
	}
	return err
}

// legNow is leg name's status now: its configuration, its link's state,
// and what the leg adds.
func (g *Gateway) legNow(name string) leg.Status {
	ls := g.legStatus[name]
	ls.Name = name
	ls.State, ls.Up, _ = g.linkState(name, false)
	if w, ok := g.linkWatch.Load(name); ok {
		ls.LinkWatch = w.(string)
	}
	if l := g.legs[name]; l != nil {
		l.Status(&ls)
	}
	return ls
}
