package roce

// PSNMask keeps the 24 bits of a packet sequence number (and of an MSN or a
// QP number).
const PSNMask = 0xffffff

// PSN is a 24-bit packet sequence number. Arithmetic wraps modulo 2^24;
// comparisons are meaningful for PSNs less than 2^23 apart, as in the IBTA
// specification (9.7.1 and 9.7.5.1).
type PSN uint32

// Add returns p+n modulo 2^24; n may be negative.
func (p PSN) Add(n int) PSN { return PSN((int64(p) + int64(n)) & PSNMask) }

// Next returns p+1 modulo 2^24.
func (p PSN) Next() PSN { return (p + 1) & PSNMask }

// Sub returns the signed distance p-q, in [-2^23, 2^23).
func (p PSN) Sub(q PSN) int32 { return int32((uint32(p)-uint32(q))<<8) >> 8 }

// Before reports whether p comes before q (p-q < 0).
func (p PSN) Before(q PSN) bool { return p.Sub(q) < 0 }

// InWindow reports whether p lies in the n PSNs that start at start, that is
// in [start, start+n) across the wrap. n must be at most 2^23.
func (p PSN) InWindow(start PSN, n uint32) bool {
	return (uint32(p)-uint32(start))&PSNMask < n
}
