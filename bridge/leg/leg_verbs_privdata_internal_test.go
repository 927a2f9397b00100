package leg

import (
	"bytes"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// TestNoRemoteInvalidation: RPC-over-RDMA's private data (RFC 8797) leaves
// a verbs leg without the promise to take Send With Invalidate, the rest
// of it and the caller's bytes untouched; any other private data passes
// as it came.
func TestNoRemoteInvalidation(t *testing.T) {
	rpcrdma := []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0x01, 3, 3}
	for _, tc := range []struct {
		name    string
		in, out []byte
	}{
		{"rpc-over-rdma", rpcrdma, []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0x00, 3, 3}},
		{"rpc-over-rdma, other flags kept", []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0x83, 3, 3, 9}, []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0x82, 3, 3, 9}},
		{"rpc-over-rdma without the flag", []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0x00, 3, 3}, []byte{0xf6, 0xab, 0x0e, 0x18, 1, 0x00, 3, 3}},
		{"too short", rpcrdma[:7], rpcrdma[:7]},
		{"another magic", []byte{0xf6, 0xab, 0x0e, 0x19, 1, 0x01, 3, 3}, []byte{0xf6, 0xab, 0x0e, 0x19, 1, 0x01, 3, 3}},
		{"none", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := bytes.Clone(tc.in)
			got := noRemoteInvalidation(tc.in)
			if !bytes.Equal(got, tc.out) {
				t.Errorf("noRemoteInvalidation(% x) = % x, want % x", tc.in, got, tc.out)
			}
			if !bytes.Equal(tc.in, before) {
				t.Errorf("the caller's private data changed: % x, was % x", tc.in, before)
			}
		})
	}
}

// TestPeerParams: the kernel's CM hands the passive side a REQ's
// initiator depth as its responder resources (and the active side a
// REP's the same way); a verbs leg reports them in the peer's own terms,
// as the userspace leg does: an NVMe-oF host that takes READs (responder
// resources 16) and issues none (initiator depth 0).
func TestPeerParams(t *testing.T) {
	event := ibv.ConnParam{ResponderResources: 0, InitiatorDepth: 16, PrivateData: []byte{1}}
	got := peerParams(event)
	if got.RespRes != 16 || got.InitDepth != 0 || len(got.PrivateData) != 1 {
		t.Errorf("the host's own terms: responder resources %d, initiator depth %d; want 16 and 0", got.RespRes, got.InitDepth)
	}
}
