package bridge

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/rbridge/rbridge/bridge/config"
)

// ReloadResult says what a reload changed.
type ReloadResult struct {
	Added, Removed, Changed, Unchanged []string // route names
	// RateChanged names the multicast groups whose rate limit the reload
	// changed (in force at once); RouteRateChanged the UD routes whose rate
	// limit alone changed (in force at once for their running clients; the
	// route itself is among Unchanged).
	RateChanged, RouteRateChanged []string
}

func (r ReloadResult) String() string {
	part := func(what string, names []string) string {
		if len(names) == 0 {
			return ""
		}
		return fmt.Sprintf("%s %s", what, strings.Join(names, ", "))
	}
	var parts []string
	for _, p := range []string{part("added", r.Added), part("removed", r.Removed), part("changed", r.Changed), part("unchanged", r.Unchanged)} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		parts = append(parts, "no routes")
	}
	if len(r.RouteRateChanged) > 0 {
		parts = append(parts, "rate changed of route "+strings.Join(r.RouteRateChanged, ", "))
	}
	if len(r.RateChanged) > 0 {
		parts = append(parts, "rate changed of group "+strings.Join(r.RateChanged, ", "))
	}
	return strings.Join(parts, "; ")
}

// ErrLegsChanged matches a reload refused because its legs differ from
// the running ones: legs are opened once, a change of them needs a
// restart.
var ErrLegsChanged = errors.New("legs changed: restart rbridge to apply them")

// Reload applies cfg's routes to the running gateway: a route that is new
// starts listening; a route that is gone stops accepting, and its sessions
// go on until they end (drained, not cut); a route whose listen, target or
// allow changed is stopped and started again with the new ones (its
// sessions go on too); an unchanged route is not touched. cfg's legs must
// be the running ones (ErrLegsChanged otherwise: nothing is applied). A
// UD route whose rate limit alone changed is not touched but for the new
// limit, in force at once for all its clients, as a group's. A
// route that cannot listen is reported; the routes before it are applied.
func (g *Gateway) Reload(cfg *config.Config) (ReloadResult, error) {
	var res ReloadResult
	if cfg == nil {
		return res, errors.New("bridge: reload: no config")
	}
	g.reloadMu.Lock()
	defer g.reloadMu.Unlock()
	g.mu.Lock()
	running := g.cfg
	g.mu.Unlock()
	if d := legsDiff(running.Legs, cfg.Legs); d != "" {
		return res, fmt.Errorf("bridge: reload %s: %s: %w", cfg.File(), d, ErrLegsChanged)
	}
	if running.Pool.Size != cfg.Pool.Size {
		return res, fmt.Errorf("bridge: reload %s: pool: size differs from the running gateway's (its pool is registered on every leg as the gateway starts): %w", cfg.File(), ErrLegsChanged)
	}
	if stages(cfg) && g.pool.Largest() < StagingPoolClasses[len(StagingPoolClasses)-1] {
		return res, fmt.Errorf("bridge: reload %s: a route carries a protocol, and the running gateway's pool has no staging buffers (its largest holds %d bytes; it has them when it starts with such a route): restart rbridge to apply it", cfg.File(), g.pool.Largest())
	}
	if !slices.EqualFunc(g.cfg.Groups, cfg.Groups, sameGroup) {
		return res, fmt.Errorf("bridge: reload %s: the multicast groups differ (they are joined once, as legs are opened; only a rate may change): %w", cfg.File(), ErrLegsChanged)
	}
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return res, errors.New("bridge: reload: the gateway is closing")
	}
	g.reloading = true
	defer func() {
		g.mu.Lock()
		g.reloading = false
		g.mu.Unlock()
	}()
	old := map[string]*routeRun{}
	dead := map[string]bool{} // accept loops that ended on their own: started again
	for name, run := range g.routes {
		old[name] = run
		_, dead[name] = g.stopped[name]
	}
	g.mu.Unlock()

	next := map[string]*config.Route{}
	for i := range cfg.Routes {
		next[cfg.Routes[i].Name] = &cfg.Routes[i]
	}
	// Stop what is gone or changed first: a changed route may listen on
	// the address it held.
	var stop []*routeRun
	for name, run := range old {
		r, ok := next[name]
		switch {
		case !ok:
			res.Removed = append(res.Removed, name)
		case !run.r.Same(*r) || dead[name]:
			// Restarted: startUDRoute puts a new rate in force.
			res.Changed = append(res.Changed, name)
		default:
			res.Unchanged = append(res.Unchanged, name)
			continue
		}
		stop = append(stop, run)
	}
	for _, run := range stop {
		run.cancel()
		<-run.done
		g.mu.Lock()
		delete(g.routes, run.r.Name)
		delete(g.stopped, run.r.Name)
		g.mu.Unlock()
		g.log.Info("route stopped accepting: its sessions go on until they end", "route", run.r.Name, "listen", run.r.Listen.Addr)
	}
	var errs []error
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if _, ok := old[r.Name]; !ok {
			res.Added = append(res.Added, r.Name)
		} else if !slices.Contains(res.Changed, r.Name) {
			continue
		}
		if err := g.startRoute(cfg, r); err != nil {
			errs = append(errs, err)
		}
	}
	res.RateChanged = g.reloadRates(cfg)
	res.RouteRateChanged = g.reloadRouteRates(cfg, res.Unchanged)
	for _, l := range [][]string{res.Added, res.Removed, res.Changed, res.Unchanged, res.RouteRateChanged} {
		slices.Sort(l)
	}
	g.mu.Lock()
	g.cfg = cfg
	g.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return res, fmt.Errorf("bridge: reload %s: %w", cfg.File(), err)
	}
	return res, nil
}

// reloadRates puts in force the rate limits of cfg's groups (the running
// groups, as sameGroup checked) that differ from the running ones, and
// returns those groups' names.
func (g *Gateway) reloadRates(cfg *config.Config) []string {
	var changed []string
	for i := range cfg.Groups {
		gc := &cfg.Groups[i]
		g.mu.Lock()
		r, j := g.groups[gc.Name], g.joined[gc.Name]
		g.mu.Unlock()
		if j != nil {
			if was := *j.rate.Load(); was != gc.Rate {
				g.log.Info("multicast groups' rate limit changed", "group", gc.Name, "joined_on", gc.JoinedOn, "was", was.String(), "now", gc.Rate.String())
				j.setRate(gc.Rate)
				changed = append(changed, gc.Name)
			}
			continue
		}
		if r == nil || r.limit.rate() == gc.Rate {
			continue
		}
		g.log.Info("multicast group's rate limit changed", "group", gc.Name, "was", r.limit.rate().String(), "now", gc.Rate.String())
		r.limit.set(gc.Rate)
		changed = append(changed, gc.Name)
	}
	return changed
}

// reloadRouteRates puts in force the rate limits of cfg's UD routes among
// unchanged (running, not restarted) that differ from the running ones,
// and returns those routes' names.
func (g *Gateway) reloadRouteRates(cfg *config.Config, unchanged []string) []string {
	var changed []string
	for i := range cfg.Routes {
		r := &cfg.Routes[i]
		if !r.UD || !slices.Contains(unchanged, r.Name) {
			continue
		}
		g.mu.Lock()
		ur := g.udRoutes[r.Name]
		g.mu.Unlock()
		if ur == nil || ur.limit.rate() == r.Rate {
			continue
		}
		g.log.Info("UD route's rate limit changed", "route", r.Name, "was", ur.limit.rate().String(), "now", r.Rate.String())
		ur.limit.set(r.Rate)
		changed = append(changed, r.Name)
	}
	return changed
}

// sameGroup reports whether two multicast groups are configured alike,
// but for their rate limits (which a reload changes in place).
func sameGroup(a, b config.Group) bool {
	return a.Name == b.Name && a.Group == b.Group && a.RoCE == b.RoCE && a.IB == b.IB && a.Direction == b.Direction && a.MGID == b.MGID &&
		slices.Equal(a.Peers, b.Peers) && a.LoopWindow == b.LoopWindow && a.BusyPoll == b.BusyPoll && slices.Equal(a.BusyPollCPUs, b.BusyPollCPUs) &&
		a.JoinedOn == b.JoinedOn && a.Within == b.Within && a.MaxGroups == b.MaxGroups
}

// legsDiff says how two leg lists differ ("" when they are alike).
func legsDiff(running, next []config.Leg) string {
	have := map[string]config.Leg{}
	for _, l := range running {
		have[l.Name] = l
	}
	want := map[string]bool{}
	var d []string
	for _, l := range next {
		want[l.Name] = true
		switch h, ok := have[l.Name]; {
		case !ok:
			d = append(d, fmt.Sprintf("leg %q added", l.Name))
		case !h.Same(l):
			d = append(d, fmt.Sprintf("leg %q changed", l.Name))
		}
	}
	for name := range have {
		if !want[name] {
			d = append(d, fmt.Sprintf("leg %q removed", name))
		}
	}
	slices.Sort(d)
	return strings.Join(d, ", ")
}

// Outcomes of a reload, as ReloadReport names them.
const (
	// ReloadApplied: the file's routes run now.
	ReloadApplied = "applied"
	// ReloadRefused: nothing changed (the file does not parse, its legs
	// differ, the gateway is closing): the running routes stay.
	ReloadRefused = "refused"
	// ReloadPartial: the routes were applied up to one that could not
	// listen (Error says which); the others run.
	ReloadPartial = "partial"
)

// ReloadReport is what a reload of the gateway's config file did: what the
// admin server's POST /reload answers and rbridge reload prints.
type ReloadReport struct {
	Config  string `json:"config"`  // the file re-read: the one the gateway started with
	Outcome string `json:"outcome"` // ReloadApplied, ReloadRefused or ReloadPartial
	// The routes, by what the reload did with them (none when refused).
	Added     []string `json:"added"`
	Removed   []string `json:"removed"`
	Changed   []string `json:"changed"`
	Unchanged []string `json:"unchanged"`
	// RateChanged names the multicast groups whose rate limit changed,
	// RouteRateChanged the UD routes whose rate limit alone changed.
	RateChanged      []string `json:"rate_changed,omitempty"`
	RouteRateChanged []string `json:"route_rate_changed,omitempty"`
	// Error is why the reload was refused or stopped part way.
	Error string `json:"error,omitempty"`
}

// Routes says what happened to the routes ("added a; removed b; ...") and
// to the groups' and UD routes' rate limits.
func (r *ReloadReport) Routes() string {
	return ReloadResult{Added: r.Added, Removed: r.Removed, Changed: r.Changed, Unchanged: r.Unchanged, RateChanged: r.RateChanged,
		RouteRateChanged: r.RouteRateChanged}.String()
}

// ReloadConfigFile re-reads the config file the gateway started with
// (Config.File) and applies it with Reload; a file that does not load is
// refused.
func (g *Gateway) ReloadConfigFile() ReloadReport {
	g.mu.Lock()
	path := g.cfg.File()
	g.mu.Unlock()
	rep := ReloadReport{Config: path, Outcome: ReloadRefused, Added: []string{}, Removed: []string{}, Changed: []string{}, Unchanged: []string{}}
	cfg, err := config.Load(path)
	if err != nil {
		rep.Error = err.Error()
		return rep
	}
	res, err := g.Reload(cfg)
	for _, p := range []struct{ dst, src *[]string }{{&rep.Added, &res.Added}, {&rep.Removed, &res.Removed}, {&rep.Changed, &res.Changed}, {&rep.Unchanged, &res.Unchanged}} {
		*p.dst = append(*p.dst, *p.src...)
	}
	rep.RateChanged, rep.RouteRateChanged = res.RateChanged, res.RouteRateChanged
	switch {
	case err == nil:
		rep.Outcome = ReloadApplied
	case len(res.Added)+len(res.Removed)+len(res.Changed)+len(res.Unchanged) > 0:
		rep.Outcome, rep.Error = ReloadPartial, err.Error()
	default:
		rep.Error = err.Error()
	}
	return rep
}
