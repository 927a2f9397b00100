package udpconn

import "sync/atomic"

// Stats counts what the conn did.
type Stats struct {
	RxPackets, TxPackets, RxBadICRC, RxTruncated atomic.Uint64
}

// StatsSnapshot is Stats read at one moment, as plain values.
type StatsSnapshot struct {
	RxPackets, TxPackets, RxBadICRC, RxTruncated uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{RxPackets: s.RxPackets.Load(), TxPackets: s.TxPackets.Load(), RxBadICRC: s.RxBadICRC.Load(), RxTruncated: s.RxTruncated.Load()}
}
