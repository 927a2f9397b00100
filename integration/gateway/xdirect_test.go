package gateway_test

import "slices"

// directRates holds a benchmark's direct rounds, by what they measured.
// Under -count, b.Run runs one sub-benchmark's rounds one after another,
// so every direct round comes before the first through round: a through
// round is reported over the median of the direct rounds (x-direct),
// not over the last of them, which TCG's spread can make the slowest or
// the fastest of the lot.
type directRates map[string][]float64

// add records one direct round.
func (d directRates) add(name string, rate float64) { d[name] = append(d[name], rate) }

// median is the median of name's direct rounds, 0 before any.
func (d directRates) median(name string) float64 {
	r := slices.Clone(d[name])
	if len(r) == 0 {
		return 0
	}
	slices.Sort(r)
	if n := len(r); n%2 == 0 {
		return (r[n/2-1] + r[n/2]) / 2
	}
	return r[len(r)/2]
}
