package rpcrdma_test

import (
	"testing"

	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// BenchmarkParseRewrite: a call's header parsed and its segments
// rewritten, as the gateway does for each call it stages: no
// allocation.
func BenchmarkParseRewrite(b *testing.B) {
	f := roundTrips[2]
	msg := rpcrdma.Append(nil, &f)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		m, _, err := rpcrdma.Parse(msg)
		if err != nil {
			b.Fatal(err)
		}
		for s := range m.Segments() {
			s.Segment.SetHandle(7)
			s.Segment.SetOffset(9)
		}
	}
}
