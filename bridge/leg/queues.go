package leg

import (
	"fmt"
	"runtime"

	"github.com/rbridge/rbridge/bridge/config"
)

// Queues is how many receive loops a userspace leg with io: udp runs, and
// why: its queues key, or the default, the CPUs the process may use (its
// affinity mask, as runtime.NumCPU reads it, and GOMAXPROCS), at most
// config.DefaultMaxQueues; 1 when the leg busy-polls (one spinning loop).
func Queues(l *config.Leg) (int, string) {
	switch {
	case l.Queues > 0:
		return l.Queues, fmt.Sprintf("queues: %d", l.Queues)
	case l.BusyPoll:
		return 1, "busy_poll: one loop"
	}
	cpus, procs := runtime.NumCPU(), runtime.GOMAXPROCS(0)
	n := min(cpus, procs, config.DefaultMaxQueues)
	return max(n, 1), fmt.Sprintf("default: %d CPUs the process may use, GOMAXPROCS %d, at most %d", cpus, procs, config.DefaultMaxQueues)
}

// QueueCounters is one receive loop's share of a userspace leg: its
// socket's packets and bytes, the QPs it serves (transport.Device.
// ServedQPs: QP 1 on queue 0 among them), the packets it
// handed to QPs another loop serves (transport.Stats.RxForeign), and the
// QPs it took over from other loops, their packets arriving at its socket
// (transport.Stats.QPsMovedIn: an io: afxdp leg's, where the NIC's RSS
// picks the queue).
type QueueCounters struct {
	Queue      int    `json:"queue"`
	QPs        int    `json:"qps"`
	RxPackets  uint64 `json:"rx_packets"`
	TxPackets  uint64 `json:"tx_packets"`
	RxBytes    uint64 `json:"rx_bytes"`
	TxBytes    uint64 `json:"tx_bytes"`
	RxForeign  uint64 `json:"rx_foreign"`
	QPsMovedIn uint64 `json:"qps_moved_in"`
}
