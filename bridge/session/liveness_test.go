package session_test

import (
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce/simnet"
)

// TestSessionLiveness: an idle session probes both its connections each
// liveness period, and stays up while both peers answer; once the
// client's side stops answering (every packet to it dropped), its probe
// fails after the transport's retries and the session ends, saying so.
func TestSessionLiveness(t *testing.T) {
	var dead atomic.Bool
	client := netip.MustParseAddr("10.0.0.2")
	r := newRig(t, rigOpts{liveness: 200 * time.Millisecond, net: simnet.Options{Filter: func(from, to netip.AddrPort, pkt []byte) bool {
		return !(dead.Load() && to.Addr() == client)
	}}})
	time.Sleep(1500 * time.Millisecond)
	st := r.sess.Stats().Snapshot()
	if st.Probes[0] < 2 || st.Probes[1] < 2 {
		t.Errorf("probes after 1.5 s idle at a 200 ms liveness: %v (to the far side, to the client), want at least 2 each", st.Probes)
	}
	if err := r.sess.Err(); err != nil {
		t.Fatalf("the session ended with both peers alive: %v", err)
	}
	if r.far.failures != 0 {
		t.Errorf("the far leg failed %d of the probes: a zero-length WRITE needs no key", r.far.failures)
	}

	dead.Store(true)
	select {
	case <-r.sess.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the session outlived a client that answered nothing for 20 s")
	}
	if err := r.sess.Err(); err == nil || !strings.Contains(err.Error(), "liveness probe") {
		t.Errorf("the session ended with %v, want the unanswered liveness probe", err)
	}
}

// TestSessionLivenessBusy: a session that keeps working is never idle,
// and sends no probe.
func TestSessionLivenessBusy(t *testing.T) {
	r := newRig(t, rigOpts{liveness: 300 * time.Millisecond})
	stop := time.Now().Add(1200 * time.Millisecond)
	for i := uint64(0); time.Now().Before(stop); i++ {
		r.far.mu.Lock()
		r.far.log = nil // each workload checks what the far side executed of it
		r.far.mu.Unlock()
		r.workload(8, 4, i)
		time.Sleep(50 * time.Millisecond)
	}
	if st := r.sess.Stats().Snapshot(); st.Probes != [2]uint64{} {
		t.Errorf("probes while the session worked: %v, want none", st.Probes)
	}
}

// TestSessionLivenessBound: the first probe follows the session's last
// work by its liveness period and little more, wherever in the period
// that work fell (sampling activity once a period let it take almost two
// periods). Three idle stretches, each begun at another point of the
// period; the bound leaves a quarter period for the sampling and the
// scheduler.
func TestSessionLivenessBound(t *testing.T) {
	const every = 2 * time.Second
	r := newRig(t, rigOpts{liveness: every})
	for i, lead := range []time.Duration{0, 700 * time.Millisecond, 1300 * time.Millisecond} {
		time.Sleep(lead)
		r.far.mu.Lock()
		r.far.log = nil
		r.far.mu.Unlock()
		before := r.sess.Stats().Snapshot().Probes
		// The session's last work falls between first and last (last is
		// taken once the workload saw its last completion, after the
		// session counted it), and the session samples its activity 8
		// times a period: a sample read late, under load, can see work
		// done after its tick, and the period is counted from the tick.
		// So the least wait is a period less the work's span and a sample.
		first := time.Now()
		r.workload(2, 1, uint64(i))
		last := time.Now()
		least := every - last.Sub(first) - every/8
		for {
			if p := r.sess.Stats().Snapshot().Probes; p[0] > before[0] {
				if d := time.Since(last); d < least || d > every*5/4 {
					t.Errorf("stretch %d: the first probe came %v after the last work, want %v to %v", i, d.Round(time.Millisecond),
						least.Round(time.Millisecond), every*5/4)
				}
				break
			}
			if time.Since(last) > 3*every {
				t.Fatalf("stretch %d: no probe %v after the last work at a liveness of %v", i, 3*every, every)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
