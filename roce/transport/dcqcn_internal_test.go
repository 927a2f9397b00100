package transport

import (
	"math"
	"testing"
	"time"
)

func TestDCQCNCutAndRecover(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := DCQCNConfig{LineRate: 10e9}
	d := newDCQCN(cfg, t0)
	if d.rate() != 10e9 {
		t.Fatalf("starts at %g, want line rate", d.rate())
	}
	// The first CNP: alpha starts at 1, so the rate halves (the floor of
	// one cut is 50%).
	d.onCNP(t0)
	if d.rate() != 5e9 || d.rt != 10e9 {
		t.Fatalf("after a CNP: rc %g rt %g, want 5e9 and 10e9", d.rate(), d.rt)
	}
	// A second CNP within the reduce period does not cut again.
	d.onCNP(t0.Add(2 * time.Microsecond))
	if d.rate() != 5e9 || d.cuts != 1 {
		t.Fatalf("second CNP within 4 us: rc %g, cuts %d", d.rate(), d.cuts)
	}
	// Fast recovery: each of F timer steps halves the distance to rt.
	now := t0.Add(2 * time.Microsecond)
	for i := 1; i <= 5; i++ {
		now = now.Add(300 * time.Microsecond)
		d.advance(now)
		want := 10e9 - 5e9/math.Pow(2, float64(i))
		if math.Abs(d.rate()-want) > 1 {
			t.Fatalf("fast recovery step %d: rc %g, want %g", i, d.rate(), want)
		}
	}
	// Then additive increase raises the target by 5 Mb/s a step (capped at
	// line rate).
	rt := d.rt
	now = now.Add(300 * time.Microsecond)
	d.advance(now)
	if d.rt != min(rt+5e6, 10e9) {
		t.Fatalf("additive increase: rt %g, want %g", d.rt, min(rt+5e6, 10e9))
	}
}

func TestDCQCNAlpha(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := newDCQCN(DCQCNConfig{}, t0)
	d.onCNP(t0)
	a := d.alpha
	if a != 1 { // (1-g)*1 + g
		t.Fatalf("alpha after a CNP from 1: %g", a)
	}
	// Without CNPs alpha decays by (1-g) per 55 us.
	d.advance(t0.Add(10 * 55 * time.Microsecond))
	if want := math.Pow(1-1.0/256, 9); math.Abs(d.alpha-want) > 1e-9 {
		// the first period had the CNP in it: nine decays
		t.Fatalf("alpha after 10 periods: %g, want %g", d.alpha, want)
	}
	// With alpha below 1 a cut keeps more than half.
	d.advance(t0.Add(time.Second))
	before := d.rate()
	d.onCNP(t0.Add(time.Second))
	if r := d.rate(); r <= before/2 || r >= before {
		t.Fatalf("cut with alpha %g: %g -> %g", d.alpha, before, r)
	}
	// Many CNPs never take the rate below the minimum.
	now := t0.Add(2 * time.Second)
	for range 200 {
		now = now.Add(5 * time.Microsecond)
		d.onCNP(now)
	}
	if d.rate() != 1e6 {
		t.Fatalf("rate after 200 cuts: %g, want the 1 Mb/s floor", d.rate())
	}
}

func TestDCQCNPacing(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := newDCQCN(DCQCNConfig{LineRate: 8e6}, t0) // 1 MB/s
	// The bucket starts full: a burst goes at once.
	for range burstBytes / 4096 {
		if w := d.take(4096, t0); w != 0 {
			t.Fatalf("burst: wait %v", w)
		}
	}
	w := d.take(4096, t0)
	if w < 4*time.Millisecond || w > 4200*time.Microsecond {
		t.Fatalf("next 4096 bytes at 1 MB/s: wait %v, want ~4.1 ms", w)
	}
	if w := d.take(4096, t0.Add(w)); w != 0 {
		t.Fatalf("after waiting: wait %v", w)
	}
}

// TestDCQCNLimited: a cut holds the QP below line rate until recovery
// brings it within one additive step; the rate as of a later time is read
// without changing the QP's own state.
func TestDCQCNLimited(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := newDCQCN(DCQCNConfig{LineRate: 10e9}, t0)
	if d.limited(d.rateAt(t0)) {
		t.Fatal("limited before any CNP")
	}
	if !d.onCNP(t0) {
		t.Fatal("the first CNP did not cut")
	}
	if d.onCNP(t0.Add(time.Microsecond)) {
		t.Fatal("a CNP within the reduce period cut again")
	}
	if r := d.rateAt(t0.Add(time.Microsecond)); r != 5e9 || !d.limited(r) {
		t.Fatalf("right after the cut: rate %g, limited %v", r, d.limited(r))
	}
	// 300 us steps: fast recovery, then the rate halves its distance to
	// the line rate each step, within 5 Mb/s of it after a few ms.
	later := d.rateAt(t0.Add(10 * time.Millisecond))
	if d.limited(later) || later > 10e9 {
		t.Fatalf("10 ms after one cut: rate %g, limited %v; want recovered", later, d.limited(later))
	}
	if d.rate() != 5e9 {
		t.Fatalf("reading the rate later changed the QP's own: %g", d.rate())
	}
}
