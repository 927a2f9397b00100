package staging_test

import (
	"testing"

	"github.com/rbridge/rbridge/bridge/staging"
	"github.com/rbridge/rbridge/ulp/nvme"
)

// FuzzNVMeQueue hands a queue random messages, cut at random into
// pieces: it never panics, and it takes a message from the host exactly
// when ParseCapsule takes it whole, one from the controller exactly when
// it is a 16-byte completion, counting a refusal once.
func FuzzNVMeQueue(f *testing.F) {
	for _, b := range [][]byte{
		connect(1, 0, false), connect(1, 3, true),
		command(nvme.OpRead, 2, keyed(0x10000, 4096, 0x11, nvme.SGLInvalidate), nil),
		inline(nvme.OpWrite, 4, make([]byte, 100)),
		list(nvme.OpRead, 5, keyed(0x30000, 4096, 0x13, nvme.SGLAddress), keyed(0x40000, 512, 0x14, nvme.SGLInvalidate)),
		completion(2, 0), nil,
	} {
		f.Add(b, false, uint16(0), uint16(0))
		f.Add(b, true, uint16(len(b)/2), uint16(len(b)/3))
	}
	f.Fuzz(func(t *testing.T, b []byte, fromCtrl bool, cut1, cut2 uint16) {
		c1, c2 := int(cut1)%(len(b)+1), int(cut2)%(len(b)+1)
		st := &staging.Stats{}
		q := newQueue(t, st)
		dir := fromHost
		if fromCtrl {
			dir = fromController
		}
		_, err := message(q, dir, 1, b, min(c1, c2), max(c1, c2))
		var want bool
		if dir == fromHost {
			_, perr := nvme.ParseCapsule(b)
			want = perr == nil
		} else {
			want = len(b) == nvme.CompletionLen
		}
		if (err == nil) != want {
			t.Fatalf("% x from direction %d, cut at %d and %d: %v, want accepted %v", b, dir, c1, c2, err, want)
		}
		s := st.Snapshot()
		refused := s.Errors[staging.WhyMalformedCommand] + s.Errors[staging.WhyMalformedCompletion]
		if (err != nil) != (refused == 1) || refused > 1 {
			t.Fatalf("%v, with %d refusals counted", err, refused)
		}
	})
}
