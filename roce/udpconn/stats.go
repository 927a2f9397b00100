package udpconn

import "sync/atomic"

// Stats counts what the conn did.
type Stats struct {
	// RxPackets and TxPackets count transport packets (RoCEv2 datagrams
	// on the wire).
	RxPackets, TxPackets, RxBadICRC, RxTruncated atomic.Uint64
	// RxCalls and TxCalls count the recvmmsg and sendmmsg calls that moved
	// packets; RxBuffers and TxBuffers the buffers those calls moved: a
	// datagram each, or a GRO buffer or GSO send of several (Offload).
	// Packets per buffer is what the offload coalesced; buffers per call
	// what the batching did.
	RxCalls, TxCalls, RxBuffers, TxBuffers atomic.Uint64
	// TxGSOErrors counts GSO sends the kernel refused with EIO (a route
	// through IPsec, or on older kernels a device without checksum
	// offload): the first turns GSO off for the conn, and the packets go
	// again one datagram each.
	TxGSOErrors atomic.Uint64
	// RxBytes and TxBytes count the UDP payload bytes the system calls
	// moved (RoCEv2 packets, their headers and ICRC included).
	RxBytes, TxBytes atomic.Uint64
	// RxLent counts packets a lending conn handed out in frames of
	// Options.Frames (ReadBatchLent); RxLendShort its read buffers that
	// found no frame free and read into the conn's own memory instead
	// (their packets copied by whoever keeps them).
	RxLent, RxLendShort atomic.Uint64
	// RxPacked counts the lent datagrams of short reads (one datagram the
	// kernel did not coalesce, or a few) that the conn copied into a
	// frame of its own, packed, rather than lent in a 64 KiB frame each.
	RxPacked atomic.Uint64
	// RxFramesHeld is how many frames of Options.Frames the conn holds now
	// for its reads (a gauge): one or two while idle, up to 8 under load.
	RxFramesHeld atomic.Int64
}

// StatsSnapshot is Stats read at one moment, as plain values.
type StatsSnapshot struct {
	RxPackets, TxPackets, RxBadICRC, RxTruncated uint64
	RxCalls, TxCalls, RxBuffers, TxBuffers       uint64
	TxGSOErrors                                  uint64
	RxBytes, TxBytes                             uint64
	RxLent, RxLendShort, RxPacked                uint64
	RxFramesHeld                                 uint64
}

// Snapshot reads every counter.
func (s *Stats) Snapshot() StatsSnapshot {
	return StatsSnapshot{RxPackets: s.RxPackets.Load(), TxPackets: s.TxPackets.Load(), RxBadICRC: s.RxBadICRC.Load(), RxTruncated: s.RxTruncated.Load(),
		RxCalls: s.RxCalls.Load(), TxCalls: s.TxCalls.Load(), RxBuffers: s.RxBuffers.Load(), TxBuffers: s.TxBuffers.Load(),
		TxGSOErrors: s.TxGSOErrors.Load(), RxBytes: s.RxBytes.Load(), TxBytes: s.TxBytes.Load(),
		RxLent: s.RxLent.Load(), RxLendShort: s.RxLendShort.Load(), RxPacked: s.RxPacked.Load(), RxFramesHeld: uint64(max(s.RxFramesHeld.Load(), 0))}
}

// Add adds o's counts to s's (the conns of one address, summed).
func (s *StatsSnapshot) Add(o StatsSnapshot) {
	s.RxPackets += o.RxPackets
	s.TxPackets += o.TxPackets
	s.RxBadICRC += o.RxBadICRC
	s.RxTruncated += o.RxTruncated
	s.RxCalls += o.RxCalls
	s.TxCalls += o.TxCalls
	s.RxBuffers += o.RxBuffers
	s.TxBuffers += o.TxBuffers
	s.TxGSOErrors += o.TxGSOErrors
	s.RxBytes += o.RxBytes
	s.TxBytes += o.TxBytes
	s.RxLent += o.RxLent
	s.RxLendShort += o.RxLendShort
	s.RxPacked += o.RxPacked
	s.RxFramesHeld += o.RxFramesHeld
}

// SteerCounters is what the reuseport program counted, over every CPU.
type SteerCounters struct {
	// Steered counts datagrams it gave the socket of their queue; Short
	// those too short for a BTH (steered to queue 0); Failed the
	// selections the kernel refused (a queue without its socket), left to
	// the kernel's hash.
	Steered, Short, Failed uint64
}
