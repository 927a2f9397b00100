package leg

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// SpinLoop is a leg's busy-poll loop (a leg's busy_poll): one goroutine,
// locked to an OS thread (pinned to its Spin's CPU when that names one),
// that calls each of its pollers in turn and goes round again at once,
// never waiting and never yielding, until Close; the thread ends with it.
// A userspace leg's pollers are its transport device (Device.Poll: the
// socket read without waiting, each packet handed to its QP, a session's
// requests relayed on from there) and each session's endpoint (its send
// CQ's completions handed to the session); a verbs leg's are its
// endpoints' CQs, made without a completion channel. What was a goroutine
// woken by Go's poller, then a hand-off through a CQ, is a call on the
// loop's thread. See bridge/busypoll.go for what it costs.
//
// Each poller says whether it found work. A loop whose Spin has an Idle
// (a leg's busy_poll_idle) naps once its rounds have found none for that
// long: it sleeps between rounds, MinNap at first, twice as long after
// each round that found nothing up to MaxNap, and spins again from the
// first round that finds work. Asleep, the loop gives its CPU and its P
// to whatever else wants them; the first packet after a quiet spell waits
// up to a nap. Without Idle the loop never naps.
//
// Pollers come and go through a list the loop takes between rounds (Add,
// and the func it returns): the loop alone calls them, one at a time, and
// a poller removed is never called again once its removal returned.
// Removing waits for the loop's round: it must not be called from a
// poller, nor with a lock held that a poller takes.
type SpinLoop struct {
	spin Spin
	log  *slog.Logger

	// changed says changes holds something for the loop; stop that the
	// loop is to end. Both are read by the loop on every round.
	changed, stop atomic.Bool
	mu            sync.Mutex // guards changes, next
	changes       []spinChange
	next          uint64

	napping atomic.Bool   // the loop naps between rounds now (Spin.Idle)
	naps    atomic.Uint64 // quiet spells: times the loop began to nap

	tid       atomic.Int64 // the loop's thread (gettid), set before NewSpinLoop returns
	done      chan struct{}
	closeOnce sync.Once
}

// spinChange adds poll under id, or (poll nil) removes id and closes ack.
type spinChange struct {
	id   uint64
	poll func() bool
	ack  chan struct{}
}

// MinNap and MaxNap bound a napping loop's sleep between rounds (see
// SpinLoop): at rest it polls about once per MaxNap, which is also the
// longest a packet after a quiet spell waits for the loop.
const (
	MinNap = 50 * time.Microsecond
	MaxNap = time.Millisecond
)

// NewSpinLoop starts a loop that spins as sp says (sp.On is implied),
// and returns once it runs on its thread.
func NewSpinLoop(sp Spin, log *slog.Logger) *SpinLoop {
	sp.On = true
	l := &SpinLoop{spin: sp, log: log, done: make(chan struct{})}
	started := make(chan struct{})
	go l.routineSpin(started)
	<-started
	return l
}

// Add has the loop call poll on each round from the next on; the func
// returned removes it (see SpinLoop). poll reports whether it found work
// (a packet read, a completion handled): a loop with an Idle naps when
// none has. Adding does not wait.
func (l *SpinLoop) Add(poll func() bool) (remove func()) {
	l.mu.Lock()
	l.next++
	id := l.next
	l.changes = append(l.changes, spinChange{id: id, poll: poll})
	l.changed.Store(true)
	l.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			ack := make(chan struct{})
			l.mu.Lock()
			l.changes = append(l.changes, spinChange{id: id, ack: ack})
			l.changed.Store(true)
			l.mu.Unlock()
			select {
			case <-ack:
			case <-l.done: // the loop ended: it calls nothing any more
			}
		})
	}
}

// Thread is the loop's OS thread ID (0 where the platform has none to
// give): what top -H and /proc/<pid>/task show.
func (l *SpinLoop) Thread() int { return int(l.tid.Load()) }

// Describe says how the loop spins, for a leg's status: "thread 1234 on
// CPU 2" or "thread 1234, not pinned", and with an Idle, when it naps and
// whether it does now ("; naps after 10ms idle, spinning").
func (l *SpinLoop) Describe() string {
	d := fmt.Sprintf("thread %d on CPU %d", l.Thread(), l.spin.CPU)
	if l.spin.CPU < 0 {
		d = fmt.Sprintf("thread %d, not pinned", l.Thread())
	}
	if l.spin.Idle <= 0 {
		return d
	}
	now := "spinning"
	if l.napping.Load() {
		now = "napping"
	}
	return fmt.Sprintf("%s; naps after %v idle, %s", d, l.spin.Idle, now)
}

// Naps is how many quiet spells the loop has napped through: times it
// found no work for its Spin's Idle and began to nap (0 without Idle).
func (l *SpinLoop) Naps() uint64 { return l.naps.Load() }

// Close ends the loop and waits until it ended (its thread with it). It
// is idempotent.
func (l *SpinLoop) Close() {
	l.closeOnce.Do(func() {
		l.stop.Store(true)
		<-l.done
	})
}

// routineSpin is the loop. It never unlocks its thread: the thread exits
// when the goroutine does, and its CPU affinity with it.
func (l *SpinLoop) routineSpin(started chan<- struct{}) {
	defer close(l.done)
	if err := l.spin.Pin(); err != nil {
		l.log.Warn("busy-poll loop not pinned: it spins where the kernel runs its thread", "err", err)
	}
	l.tid.Store(int64(threadID()))
	close(started)
	type poller struct {
		id   uint64
		poll func() bool
	}
	var (
		polls     []poller
		idleSince time.Time     // the first round of the run that found nothing; zero while work is found
		nap       time.Duration // the last nap; 0 while spinning
	)
	for !l.stop.Load() {
		if l.changed.Load() {
			l.mu.Lock()
			for _, c := range l.changes {
				if c.poll != nil {
					polls = append(polls, poller{c.id, c.poll})
					continue
				}
				for i := range polls {
					if polls[i].id == c.id {
						polls = append(polls[:i], polls[i+1:]...)
						break
					}
				}
				close(c.ack)
			}
			clear(l.changes)
			l.changes = l.changes[:0]
			l.changed.Store(false)
			l.mu.Unlock()
		}
		worked := false
		for _, p := range polls {
			if p.poll() {
				worked = true
			}
		}
		if l.spin.Idle <= 0 {
			continue
		}
		switch {
		case worked:
			if nap > 0 {
				nap = 0
				l.napping.Store(false)
			}
			idleSince = time.Time{}
		case nap > 0:
			nap = min(2*nap, MaxNap)
			time.Sleep(nap)
		case idleSince.IsZero():
			idleSince = time.Now()
		case time.Since(idleSince) >= l.spin.Idle:
			nap = MinNap
			l.napping.Store(true)
			l.naps.Add(1)
			time.Sleep(nap)
		}
	}
}
