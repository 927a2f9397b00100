package transport

import (
	"math"
	"time"
)

// DCQCNConfig holds the parameters of DCQCN's reaction point (the sender's
// rate control; Zhu et al., "Congestion Control for Large-Scale RDMA
// Deployments", SIGCOMM 2015). Zero fields take the defaults below, which
// follow the paper and NVIDIA's firmware defaults where those are
// published.
type DCQCNConfig struct {
	LineRate float64 // bits/s a QP may send at most (default 25e9)
	MinRate  float64 // bits/s a QP is never cut below (default 1e6, rpg_min_rate)
	// G is the gain of the congestion estimate alpha (default 1/256).
	G float64
	// AlphaPeriod is how often alpha decays without CNPs (default 55 us).
	AlphaPeriod time.Duration
	// ReducePeriod is the least time between two rate cuts (default 4 us,
	// rate_reduce_monitor_period).
	ReducePeriod time.Duration
	// IncreasePeriod and IncreaseBytes drive rate recovery: one step per
	// period and per that many bytes sent (defaults 300 us and 32 KiB,
	// rpg_time_reset and rpg_byte_reset).
	IncreasePeriod time.Duration
	IncreaseBytes  int
	// Threshold is the number of steps of fast recovery before additive
	// increase (default 5, F in the paper).
	Threshold int
	// AIRate and HAIRate are the additive and hyper increase steps
	// (defaults 5e6 and 50e6 bits/s, rpg_ai_rate and rpg_hai_rate).
	AIRate, HAIRate float64
	// MinDecrease is the smallest factor one cut keeps (default 0.5,
	// rpg_min_dec_fac 50%).
	MinDecrease float64
}

func (c *DCQCNConfig) withDefaults() DCQCNConfig {
	d := *c
	def := func(v *float64, x float64) {
		if *v <= 0 {
			*v = x
		}
	}
	def(&d.LineRate, 25e9)
	def(&d.MinRate, 1e6)
	def(&d.G, 1.0/256)
	def(&d.AIRate, 5e6)
	def(&d.HAIRate, 50e6)
	def(&d.MinDecrease, 0.5)
	if d.AlphaPeriod <= 0 {
		d.AlphaPeriod = 55 * time.Microsecond
	}
	if d.ReducePeriod <= 0 {
		d.ReducePeriod = 4 * time.Microsecond
	}
	if d.IncreasePeriod <= 0 {
		d.IncreasePeriod = 300 * time.Microsecond
	}
	if d.IncreaseBytes <= 0 {
		d.IncreaseBytes = 32 << 10
	}
	if d.Threshold <= 0 {
		d.Threshold = 5
	}
	return d
}

// dcqcn is one QP's reaction point and the token bucket that paces it.
// Time-driven events (alpha decay, rate increase) are applied lazily, when
// the QP next sends or gets a CNP, as many as have elapsed.
type dcqcn struct {
	cfg    DCQCNConfig
	rc, rt float64 // current and target rate, bits/s
	alpha  float64
	// time and byte counters of rate increase, in steps since the last cut
	timerSteps, byteSteps int
	bytes                 int // bytes sent since the last byte step
	lastCut               time.Time
	lastAlpha             time.Time // alpha decayed up to here
	lastIncrease          time.Time // increase steps counted up to here
	cnpSinceAlpha         bool
	// token bucket
	tokens float64 // bytes
	filled time.Time
	cuts   uint64
}

func newDCQCN(cfg DCQCNConfig, now time.Time) *dcqcn {
	c := cfg.withDefaults()
	return &dcqcn{cfg: c, rc: c.LineRate, rt: c.LineRate, alpha: 1, lastAlpha: now, lastIncrease: now,
		filled: now, tokens: burstBytes}
}

// burstBytes is the token bucket's depth: a few full-size packets.
const burstBytes = 16 * 4096

// advance applies the alpha decays and rate increases due by now.
func (d *dcqcn) advance(now time.Time) {
	if n := int(now.Sub(d.lastAlpha) / d.cfg.AlphaPeriod); n > 0 {
		// Alpha decays once for every period without a CNP.
		if d.cnpSinceAlpha {
			n--
		}
		d.alpha *= math.Pow(1-d.cfg.G, float64(n))
		if d.cnpSinceAlpha {
			n++
		}
		d.cnpSinceAlpha = false
		d.lastAlpha = d.lastAlpha.Add(time.Duration(n) * d.cfg.AlphaPeriod)
	}
	if n := int(now.Sub(d.lastIncrease) / d.cfg.IncreasePeriod); n > 0 {
		d.lastIncrease = d.lastIncrease.Add(time.Duration(n) * d.cfg.IncreasePeriod)
		for range min(n, 1000) {
			d.timerSteps++
			d.increase()
		}
	}
}

// increase is one rate-increase event (a timer or a byte-counter step).
func (d *dcqcn) increase() {
	if d.rc >= d.cfg.LineRate {
		return
	}
	f := d.cfg.Threshold
	switch {
	case max(d.timerSteps, d.byteSteps) < f:
		// fast recovery: toward the rate before the cut
	case min(d.timerSteps, d.byteSteps) < f:
		d.rt += d.cfg.AIRate
	default:
		d.rt += float64(min(d.timerSteps, d.byteSteps)-f+1) * d.cfg.HAIRate
	}
	d.rt = min(d.rt, d.cfg.LineRate)
	d.rc = (d.rt + d.rc) / 2
}

// onCNP cuts the rate for a congestion notification; it reports whether
// it did (one cut per ReducePeriod at most).
func (d *dcqcn) onCNP(now time.Time) bool {
	d.advance(now)
	d.cnpSinceAlpha = true
	d.alpha = (1-d.cfg.G)*d.alpha + d.cfg.G
	if !d.lastCut.IsZero() && now.Sub(d.lastCut) < d.cfg.ReducePeriod {
		return false
	}
	d.lastCut = now
	d.cuts++
	d.rt = d.rc
	d.rc *= max(1-d.alpha/2, d.cfg.MinDecrease)
	d.rc = max(d.rc, d.cfg.MinRate)
	d.timerSteps, d.byteSteps, d.bytes = 0, 0, 0
	d.lastIncrease = now
	return true
}

// take asks to send n bytes now. It returns 0 when the bucket allows, else
// how long to wait before asking again.
func (d *dcqcn) take(n int, now time.Time) time.Duration {
	d.advance(now)
	d.tokens = min(d.tokens+now.Sub(d.filled).Seconds()*d.rc/8, burstBytes)
	d.filled = now
	if d.tokens < float64(n) {
		return time.Duration((float64(n) - d.tokens) * 8 / d.rc * float64(time.Second))
	}
	d.tokens -= float64(n)
	d.bytes += n
	for d.bytes >= d.cfg.IncreaseBytes {
		d.bytes -= d.cfg.IncreaseBytes
		d.byteSteps++
		d.increase()
	}
	return 0
}

// Rate returns the current rate in bits/s.
func (d *dcqcn) rate() float64 { return d.rc }

// rateAt returns the rate at now, the recovery due by then counted: it is
// applied to a copy, as the QP applies it itself when it next sends.
func (d *dcqcn) rateAt(now time.Time) float64 {
	c := *d
	c.advance(now)
	return c.rc
}

// limited reports whether a rate holds the QP below its line rate: by more
// than one additive-increase step, as recovery approaches the line rate by
// halving the distance and may stop a hair short of it.
func (d *dcqcn) limited(rate float64) bool { return rate < d.cfg.LineRate-d.cfg.AIRate }
