package leg

import (
	"fmt"

	"github.com/rbridge/rbridge/bridge/config"
)

// Queues is how many receive loops a userspace leg with io: udp runs, and
// why: its queues key, or the default, one. Several loops are not the
// default yet: the CM's MADs leave on loop 0's socket and a QP's ACKs on
// its own loop's, so a DREQ can overtake the ACK of a SEND the gateway
// completed just before it, and the peer sees that SEND flushed (seen in
// the guest: an rping server, through two gateways, failing its last
// SEND after its client had received it).
func Queues(l *config.Leg) (int, string) {
	if l.Queues > 0 {
		return l.Queues, fmt.Sprintf("queues: %d", l.Queues)
	}
	return 1, "default: one loop"
}

// QueueCounters is one receive loop's share of a userspace leg with io:
// udp: its socket's packets and bytes, the QPs it serves, and the packets
// it handed to another loop's QPs (transport.Stats.RxForeign).
type QueueCounters struct {
	Queue     int    `json:"queue"`
	QPs       int    `json:"qps"`
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
	RxBytes   uint64 `json:"rx_bytes"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxForeign uint64 `json:"rx_foreign"`
}
