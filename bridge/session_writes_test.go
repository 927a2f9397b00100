package bridge_test

import (
	"context"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce/simnet"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestSessionManyLongWritesWithLoss keeps 128 64 KiB WRITEs in flight through a
// session at 5% loss, as perftest's ib_write_bw does.
func TestSessionManyLongWritesWithLoss(t *testing.T) {
	r := newRig(t, rigOpts{net: simnet.Options{Loss: 0.05, Seed: 11}, delay: 100 * time.Microsecond, poolSize: 64 << 20})
	const n, window, size = 300, 128, 65536
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	wcs := make([]transport.WC, 64)
	posted, done := 0, 0
	for done < n {
		for posted < n && posted-done < window {
			if err := r.client.PostSend(transport.SendWR{ID: uint64(posted), Opcode: transport.OpWrite, Signaled: true,
				Local: transport.SGE{MR: r.cmr, Offset: (posted % 16) * size, Length: size}, Remote: r.far.base + uint64(posted%8)*size, RKey: r.far.rkey}); err != nil {
				t.Fatal(err)
			}
			posted++
		}
		k, err := r.scq.PollWait(ctx, wcs)
		if err != nil {
			t.Fatalf("%d of %d WRITEs completed: %v", done, n, err)
		}
		for _, wc := range wcs[:k] {
			if wc.Status != transport.StatusSuccess {
				t.Fatalf("WRITE %d: %v", wc.ID, wc.Status)
			}
		}
		done += k
	}
}
