package bridge

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/session"
)

// A leg whose link goes down (a userspace leg's interface, a verbs leg's
// port) strands its sessions: RDMA has no keepalive, so a client whose
// far side is cut off by it waits, and what it has in flight never
// completes. The gateway reads a leg's link as the leg says it changed
// (a userspace leg's interface on the kernel's netlink link and address
// updates, a verbs leg's port on its device's port events), every
// LinkBackstop besides, or every LinkPoll when the leg cannot say; when
// one goes down it ends every session through that leg at once, each
// operation in flight failed back to its requester, so that clients
// reconnect (and a storage host's multipath moves); new connections whose
// target is through it alone are refused until the link is up. /healthz
// says which leg is down meanwhile (Ready). A quic leg's state is its
// peer gateway's connection, which reconnects on its own: not watched
// here.

// linkCounts counts a leg's link-down events and the sessions they
// ended (/metrics).
type linkCounts struct {
	downs, cut atomic.Uint64
}

// LinkPoll is how often the gateway reads a leg's link that does not say
// when it changed: one whose updates (leg.LinkWatcher) could not be had,
// or were lost.
const LinkPoll = 500 * time.Millisecond

// LinkBackstop is how often it reads a link all the same that says when
// it changed (leg.LinkWatcher: a userspace leg's interface, whose
// kernel's link and address updates wake the watch at once; a verbs
// leg's port, whose device's port events do).
const LinkBackstop = 2 * time.Second

// linkWatchUpdates is a leg's Status.LinkWatch while its link's changes
// are told (leg.LinkWatcher); otherwise it is "timer: " and why.
const linkWatchUpdates = "updates"

// How a link read came about, as the link's logs say (by=).
const (
	linkByUpdate = "update" // the leg said its link changed
	linkByTimer  = "timer"  // LinkPoll, or LinkBackstop
)

// LinkResubscribe and LinkResubscribeMax bound how soon the link watch
// asks again for a leg's updates once they ended or could not be had: the
// first time after LinkResubscribe, then twice as long each time it
// fails, at most LinkResubscribeMax. Meanwhile the link is read every
// LinkPoll.
const (
	LinkResubscribe    = time.Second
	LinkResubscribeMax = 30 * time.Second
)

// linkWatcher is one leg's subscription to its link's updates, as
// routineLinks keeps it.
type linkWatcher struct {
	lw      leg.LinkWatcher
	pending atomic.Bool // told of a change not read yet
	changed func()
	lost    func(error)
	// retry is when to subscribe again (zero while subscribed), after
	// backoff; routineLinks alone uses them.
	retry   time.Time
	backoff time.Duration
}

// routineLinks watches the links until ctx ends: a leg's as it says it
// changed (leg.LinkWatcher), with a read every LinkBackstop, and every
// LinkPoll a leg's that does not say; a leg whose updates end, or could
// not be had, is asked for them again (LinkResubscribe).
func (g *Gateway) routineLinks(ctx context.Context) {
	defer g.wg.Done()
	wake := make(chan struct{}, 1)
	ended := make(chan string, len(g.legs)) // a leg whose updates ended
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	watchers := map[string]*linkWatcher{}
	for name, l := range g.legs {
		if !linkWatched(g.legStatus[name].Kind) {
			continue
		}
		lw, ok := l.(leg.LinkWatcher)
		if !ok {
			g.linkWatch.Store(name, "timer: the leg does not say when its link changed")
			continue
		}
		w := &linkWatcher{lw: lw}
		w.changed = func() {
			w.pending.Store(true)
			signal()
		}
		w.lost = func(err error) {
			g.linkWatch.Store(name, "timer: "+err.Error())
			if ctx.Err() == nil {
				g.log.Warn("a leg's link updates ended: its link is read on a timer until they are had again", "leg", name, "every", LinkPoll, "err", err)
			}
			w.changed()   // what changed since is not known
			ended <- name // one at a time: a subscription ends once, and is made again after
		}
		watchers[name] = w
		if err := g.subscribeLink(ctx, name, w, false); err != nil {
			g.log.Warn("a leg's link updates cannot be had: its link is read on a timer until they can", "leg", name, "every", LinkPoll, "err", err)
		}
	}
	// What changed before the watches began is not known: each link is
	// read once now.
	for name := range g.legs {
		g.checkLink(name, linkByTimer)
	}
	poll := LinkPoll
	if g.linkPoll > 0 {
		poll = g.linkPoll
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	// resub fires when the next leg is due to subscribe again.
	resub := time.NewTimer(time.Hour)
	defer resub.Stop()
	rearm := func() {
		var next time.Time
		for _, w := range watchers {
			if !w.retry.IsZero() && (next.IsZero() || w.retry.Before(next)) {
				next = w.retry
			}
		}
		if !next.IsZero() {
			resub.Reset(time.Until(next))
		}
	}
	rearm()
	backstop := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-wake:
			for name, w := range watchers {
				if w.pending.Swap(false) {
					g.checkLink(name, linkByUpdate)
				}
			}
		case name := <-ended:
			w := watchers[name]
			w.backoff = g.linkResubscribe()
			w.retry = time.Now().Add(w.backoff)
			rearm()
		case now := <-resub.C:
			for name, w := range watchers {
				if w.retry.IsZero() || now.Before(w.retry) {
					continue
				}
				if err := g.subscribeLink(ctx, name, w, true); err != nil {
					g.log.Debug("a leg's link updates still cannot be had", "leg", name, "again_in", w.backoff, "err", err)
				}
			}
			rearm()
		case now := <-t.C:
			all := now.Sub(backstop) >= LinkBackstop
			if all {
				backstop = now
			}
			for name := range g.legs {
				if w, _ := g.linkWatch.Load(name); w != linkWatchUpdates || all {
					g.checkLink(name, linkByTimer)
				}
			}
		}
	}
}

// subscribeLink asks leg name's watcher for its link's updates (again,
// when again), and sets the leg's link_watch and when to ask next: not
// while subscribed, after a longer backoff each time it fails. Once had
// again, the link is read (what changed meanwhile is not known).
func (g *Gateway) subscribeLink(ctx context.Context, name string, w *linkWatcher, again bool) error {
	err := w.lw.WatchLink(ctx, w.changed, w.lost)
	if err != nil {
		g.linkWatch.Store(name, "timer: "+err.Error())
		w.backoff = min(max(2*w.backoff, g.linkResubscribe()), LinkResubscribeMax)
		w.retry = time.Now().Add(w.backoff)
		return err
	}
	// An update that came before this is pending, and read: the timer's
	// reads may stop now.
	g.linkWatch.Store(name, linkWatchUpdates)
	w.retry, w.backoff = time.Time{}, 0
	if again {
		g.log.Info("a leg's link updates are had again: its link is read as they come", "leg", name)
		w.changed()
	}
	return nil
}

// linkResubscribe is LinkResubscribe, or the test's (g.linkResub).
func (g *Gateway) linkResubscribe() time.Duration {
	if g.linkResub > 0 {
		return g.linkResub
	}
	return LinkResubscribe
}

// linkWatched says whether the link watch reads a leg of kind k's link.
// A quic leg's is its peer gateway's connection, which reconnects on its
// own.
func linkWatched(k string) bool { return k == config.KindUserspace || k == config.KindVerbs }

// checkLink reads a leg's link, when the watch reads its kind's, and acts
// on a change; by says what asked (linkByUpdate, linkByTimer), for the
// logs. Called by routineLinks alone (and tests).
func (g *Gateway) checkLink(name, by string) {
	if !linkWatched(g.legStatus[name].Kind) {
		return
	}
	ls := g.legNow(name)
	readable := !strings.HasPrefix(ls.State, "unreadable") // else not known to be down: no change
	if n, ok := g.legs[name].(leg.LinkNoter); ok && readable {
		// Before the sessions end, below or in noteAddr: their
		// disconnects read it.
		n.NoteLink(ls.Up && (ls.IPHeld == nil || *ls.IPHeld))
	}
	g.noteAddr(name, ls)
	if !readable {
		return
	}
	var err error
	if !ls.Up {
		err = fmt.Errorf("leg %q (%s) is down: %s", name, ls.Kind, ls.State)
	}
	g.mu.Lock()
	was := g.linkDown[name]
	switch {
	case err != nil && was == nil:
		g.linkDown[name] = err
		cut, udCut := g.throughLocked(name)
		c := g.linkDowns[name]
		if c == nil {
			c = &linkCounts{}
			g.linkDowns[name] = c
		}
		c.downs.Add(1)
		c.cut.Add(uint64(len(cut)))
		g.mu.Unlock()
		g.log.Warn("a leg's link went down: its sessions end, and connections whose target is through it are refused until it is up",
			"leg", name, "why", err, "by", by, "sessions", len(cut), "ud_clients", len(udCut))
		for _, s := range cut {
			s.End(fmt.Errorf("%w: %w", ErrLinkDown, err))
		}
		for _, p := range udCut {
			p.end(fmt.Errorf("%w: %w", ErrLinkDown, err))
		}
	case err == nil && was != nil:
		delete(g.linkDown, name)
		g.mu.Unlock()
		g.log.Info("a leg's link is up again: connections through it are accepted", "leg", name, "by", by)
	default:
		g.mu.Unlock()
	}
}

// noteAddr logs a freebind leg's floating address arriving on its
// interface or leaving it (keepalived moved it): the moment this gateway
// took traffic for it over, or handed it to another.
func (g *Gateway) noteAddr(name string, ls leg.Status) {
	if ls.IPHeld == nil {
		return
	}
	held, seen := g.ipHeld[name]
	g.ipHeld[name] = *ls.IPHeld
	switch {
	case !seen:
		g.log.Info("a leg's floating address", "leg", name, "ip", ls.IP, "held", *ls.IPHeld)
	case *ls.IPHeld && !held:
		g.mu.Lock()
		delete(g.addrLeft, name)
		g.mu.Unlock()
		g.log.Info("a leg's floating address arrived: this gateway takes its traffic", "leg", name, "ip", ls.IP)
	case !*ls.IPHeld && held:
		// Its peers' packets now reach the gateway that holds it: the
		// sessions through it here end, as on a link down, so their
		// other side is not left waiting; and so do those made through
		// it until it is back (crossesDownLocked).
		why := fmt.Errorf("%w: leg %q, ip %s", ErrAddrLeft, name, ls.IP)
		g.mu.Lock()
		g.addrLeft[name] = why
		cut, udCut := g.throughLocked(name)
		g.mu.Unlock()
		g.log.Warn("a leg's floating address left: another gateway takes its traffic, and the sessions through it here end",
			"leg", name, "ip", ls.IP, "sessions", len(cut), "ud_clients", len(udCut))
		for _, s := range cut {
			s.End(why)
		}
		for _, p := range udCut {
			p.end(why)
		}
	}
}

// throughLocked is the sessions and the UD clients relaying through leg
// name. g.mu must be held.
func (g *Gateway) throughLocked(name string) ([]*session.Session, []*udPair) {
	var cut []*session.Session
	for s, info := range g.sessions {
		if info.inLeg == name || info.outLeg == name {
			cut = append(cut, s)
		}
	}
	var udCut []*udPair
	for p := range g.udPairs {
		if p.legs[0] == name || p.legs[1] == name {
			udCut = append(udCut, p)
		}
	}
	return cut, udCut
}

// crossesDownLocked is the first of legs the link watch has down, or
// whose floating address it saw leave, and why (matching ErrLinkDown or
// ErrAddrLeft); nil when none is. Something that crosses the legs and
// enters the gateway's tables (a session, a UD client) asks it under the
// same hold of g.mu: the watch ended what was in them when it marked the
// leg, and does not look again until the leg is up (or the address back)
// and lost again. g.mu must be held.
func (g *Gateway) crossesDownLocked(legs ...string) (string, error) {
	for _, l := range legs {
		if err := g.linkDown[l]; err != nil {
			return l, fmt.Errorf("%w: %w", ErrLinkDown, err)
		}
		if err := g.addrLeft[l]; err != nil {
			return l, err
		}
	}
	return "", nil
}

// ErrAddrLeft is why a session ended when a freebind leg it crossed lost
// its floating address.
var ErrAddrLeft = fmt.Errorf("a leg's floating address left this gateway")

// ErrLinkDown is why a session ended when a leg it crossed went down.
var ErrLinkDown = fmt.Errorf("a leg's link went down")

// targetDown says why route r cannot reach its target now (nil when it
// can): its target's leg is down, or is a freebind leg whose floating
// address left (its target's answers go to the gateway that holds it),
// and it has no fallback, or the fallback's leg is down or gone too.
func (g *Gateway) targetDown(r *config.Route) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	_, err := g.crossesDownLocked(r.Target.Leg)
	if err == nil {
		return nil
	}
	if r.Fallback.Leg != "" {
		if _, ferr := g.crossesDownLocked(r.Fallback.Leg); ferr == nil {
			return nil
		}
	}
	return err
}
