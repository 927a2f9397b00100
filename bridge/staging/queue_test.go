package staging_test

import (
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/ulp/nvme"
)

// TestQueueOf: an NVMe/RDMA connect request sizes its connection's
// receives (the larger of the host's receive queue and its send queue,
// which is 0's based) and bounds the controller's responses to the
// 16-byte completion; anything else leaves the leg's own receives.
func TestQueueOf(t *testing.T) {
	req := func(hrq, hsq uint16) []byte {
		b := make([]byte, nvme.CMRequestLen)
		nvme.CMRequest(b).Encode(&nvme.CMRequestFields{RecFmt: 0, QID: 1, HRQSize: hrq, HSQSize: hsq})
		return b
	}
	for _, tc := range []struct {
		name     string
		protocol string
		pd       []byte
		want     staging.Queue
		ok       bool
	}{
		{"I/O queue, the Linux host's default", config.ProtocolNVMe, req(128, 127), staging.Queue{Depth: 128, ResponseSize: 16}, true},
		{"admin queue", config.ProtocolNVMe, req(32, 31), staging.Queue{Depth: 32, ResponseSize: 16}, true},
		{"send queue deeper than the receive queue", config.ProtocolNVMe, req(64, 255), staging.Queue{Depth: 256, ResponseSize: 16}, true},
		{"a queue of one says nothing", config.ProtocolNVMe, req(1, 0), staging.Queue{}, false},
		{"no private data", config.ProtocolNVMe, nil, staging.Queue{}, false},
		{"no protocol", "", req(128, 127), staging.Queue{}, false},
	} {
		got, ok := staging.QueueOf(tc.protocol, tc.pd)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: QueueOf = %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	// Cut at every prefix: never a queue from a short request.
	full := req(128, 127)
	for n := range len(full) {
		if q, ok := staging.QueueOf(config.ProtocolNVMe, full[:n]); ok {
			t.Errorf("%d of %d bytes: QueueOf = %+v, want none", n, len(full), q)
		}
	}
}
