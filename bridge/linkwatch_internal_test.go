package bridge

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/leg"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/internal/portcounters"
)

// toldLink is a leg whose link is as the test sets it, and which says
// when it changed (leg.LinkWatcher), or cannot (refuse).
type toldLink struct {
	leg.Leg // nil: what the link watch does not ask
	refuse  error

	mu             sync.Mutex
	up             bool
	reads          int
	watches        int // WatchLink's calls
	changed        func()
	lost           func(error)
	watchCtxEnded  <-chan struct{}
	watching       chan struct{} // closed once WatchLink was called
	watchingClosed bool
}

func newToldLink() *toldLink { return &toldLink{up: true, watching: make(chan struct{})} }

func (l *toldLink) WatchLink(ctx context.Context, changed func(), lost func(error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.watchingClosed {
		close(l.watching)
		l.watchingClosed = true
	}
	l.watches++
	if l.refuse != nil {
		return l.refuse
	}
	l.changed, l.lost, l.watchCtxEnded = changed, lost, ctx.Done()
	return nil
}

func (l *toldLink) Link(string, bool) (string, bool, *portcounters.Port) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.reads++
	if l.up {
		return "up", true, nil
	}
	return "down", false, nil
}

func (l *toldLink) Status(*leg.Status)                    {}
func (l *toldLink) Health(time.Time, time.Duration) error { return nil }

func (l *toldLink) set(up bool) {
	l.mu.Lock()
	l.up = up
	l.mu.Unlock()
}

func (l *toldLink) refuseWith(err error) {
	l.mu.Lock()
	l.refuse = err
	l.mu.Unlock()
}

func (l *toldLink) watchCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.watches
}

// subscription is the changed and lost funcs of the leg's last
// WatchLink.
func (l *toldLink) subscription() (func(), func(error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.changed, l.lost
}

func (l *toldLink) readCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reads
}

// TestLinkWatchTold: with the poll out of reach, every link is read once
// as the watch starts (a link down before it is acted on); a leg that
// says its link changed is read at once, and its link down is acted on;
// a leg whose updates end is read at once too (what changed meanwhile is
// unknown); a leg that cannot say is read on the timer alone after that
// first read. A leg whose updates ended, or could not be had, is asked for
// them again, sooner than its timer, until it gives them; then its link
// is read as it tells again.
func TestLinkWatchTold(t *testing.T) {
	cfg, err := config.Parse("gw.yaml", []byte(`legs:
  - {name: told, kind: userspace, interface: lo, ip: 127.0.10.1, io: udp}
  - {name: mute, kind: userspace, interface: lo, ip: 127.0.10.2, io: udp}
routes:
  - {name: r, listen: {leg: told, addr: "127.0.10.1:7471"}, target: {leg: mute, addr: "127.0.10.3:7471"}}
`))
	if err != nil {
		t.Fatal(err)
	}
	told, mute := newToldLink(), newToldLink()
	mute.refuse = errors.New("no link updates here")
	mute.up = false // down before the watch starts
	g := &Gateway{cfg: cfg, sessions: map[*session.Session]*sessionInfo{}, stopped: map[string]error{},
		legs: map[string]leg.Leg{"told": told, "mute": mute}, legStatus: map[string]leg.Status{},
		linkDown: map[string]error{}, linkDowns: map[string]*linkCounts{}, ipHeld: map[string]bool{},
		log: slog.New(slog.DiscardHandler), linkPoll: time.Hour, linkResub: 50 * time.Millisecond}
	for i := range cfg.Legs {
		g.legStatus[cfg.Legs[i].Name] = legStatus(&cfg.Legs[i])
	}
	ctx, cancel := context.WithCancel(context.Background())
	g.wg.Add(1)
	go g.routineLinks(ctx)
	defer func() { cancel(); g.wg.Wait() }()
	for _, l := range []*toldLink{told, mute} {
		select {
		case <-l.watching:
		case <-time.After(5 * time.Second):
			t.Fatal("the link watch never asked a leg to watch its link")
		}
	}
	down := func(name string) bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.linkDown[name] != nil
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal(what)
			}
			time.Sleep(time.Millisecond)
		}
	}

	waitFor("a link down before the watch started was not acted on", func() bool { return down("mute") })

	// /status says how each is watched.
	if w := g.legNow("told").LinkWatch; w != "updates" {
		t.Errorf("a leg that tells: link_watch %q, want \"updates\"", w)
	}
	if w := g.legNow("mute").LinkWatch; w != "timer: no link updates here" {
		t.Errorf("a leg that cannot tell: link_watch %q, want the timer and why", w)
	}
	muteReads := mute.readCount() // legNow's

	told.mu.Lock()
	changed, lost := told.changed, told.lost
	told.mu.Unlock()
	// tellDownUp has told's link go down and up again, each told by
	// changed (when: which subscription), and waits for each to be acted on.
	tellDownUp := func(changed func(), when string) {
		t.Helper()
		told.set(false)
		changed()
		waitFor("a link down the leg told of"+when+" was not acted on", func() bool { return down("told") })
		told.set(true)
		changed()
		waitFor("a link up again the leg told of"+when+" was not acted on", func() bool { return !down("told") })
	}
	tellDownUp(changed, "")

	told.set(false)
	lost(errors.New("netlink link updates ended"))
	// Said at once (the leg is asked again 50 ms after the watch learnt it).
	if w := g.legNow("told").LinkWatch; w != "timer: netlink link updates ended" {
		t.Errorf("a leg whose updates ended: link_watch %q, want the timer and why", w)
	}
	waitFor("a leg whose link updates ended was not read at once", func() bool { return down("told") })

	// Asked again (LinkResubscribe made 50 ms): the leg that lost its
	// updates gives them again, and its next word is acted on.
	told.set(true)
	waitFor("a leg whose link updates ended was not asked for them again", func() bool { return told.watchCount() >= 2 })
	waitFor("a leg whose updates were had again is not said to be watched by updates", func() bool { return g.legNow("told").LinkWatch == "updates" })
	waitFor("a leg had again was not read", func() bool { return !down("told") })
	changed, _ = told.subscription()
	tellDownUp(changed, " after its updates were had again")

	mute.set(true)
	time.Sleep(50 * time.Millisecond) // no poll comes within the hour
	if !down("mute") || mute.readCount() != muteReads {
		t.Errorf("a leg that cannot tell was read %d times by the watch after its first, down %v, with no poll due", mute.readCount()-muteReads, down("mute"))
	}
	// The leg that refused is asked again, and again (at 50 ms, doubling):
	// once it gives its updates, its link is read as it tells.
	waitFor("a leg that refused its updates was not asked again", func() bool { return mute.watchCount() >= 3 })
	if w := g.legNow("mute").LinkWatch; w != "timer: no link updates here" {
		t.Errorf("a leg that refuses: link_watch %q, want the timer and why", w)
	}
	mute.refuseWith(nil)
	waitFor("a leg that gave its updates at last is not said to be watched by updates", func() bool { return g.legNow("mute").LinkWatch == "updates" })
	changed, _ = mute.subscription()
	mute.set(false)
	changed()
	waitFor("a link down told by a leg that gave its updates at last was not acted on", func() bool { return down("mute") })
	cancel()
	g.wg.Wait()
	select {
	case <-told.watchCtxEnded:
	default:
		t.Error("the leg's watch outlived the link watch")
	}
}
