package session_test

import (
	"context"
	"testing"

	"github.com/rbridge/rbridge/roce/transport"
)

// pollWCs waits for n completions on cq.
func pollWCs(t *testing.T, ctx context.Context, cq *transport.CQ, n int, what string) []transport.WC {
	t.Helper()
	var got []transport.WC
	wcs := make([]transport.WC, n)
	for len(got) < n {
		k, err := cq.PollWait(ctx, wcs[:n-len(got)])
		if err != nil {
			t.Fatalf("%s: %d of %d completions: %v", what, len(got), n, err)
		}
		got = append(got, wcs[:k]...)
	}
	return got
}
