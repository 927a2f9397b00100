package cm

import (
	"testing"

	"github.com/rbridge/rbridge/roce"
)

func TestTrailerMTU(t *testing.T) {
	pd := make([]byte, REPPrivateDataLen)
	copy(pd[len(pd)-4:], []byte{'r', 'b', 1, byte(roce.MTU1024)})
	for _, c := range []struct {
		pd   []byte
		want int
	}{
		{pd, 1024},
		{pd[:len(pd)-1], 0},            // the code is cut off
		{[]byte{'r', 'b', 2, 3}, 0},    // another version
		{[]byte{'r', 'b', 1, 9}, 0},    // not an MTU code
		{[]byte{'r', 'b', 1, 5}, 4096}, // the trailer alone
		{nil, 0},
	} {
		if got := trailerMTU(c.pd); got != c.want {
			t.Errorf("trailerMTU(...%x) = %d, want %d", c.pd[max(len(c.pd)-4, 0):], got, c.want)
		}
	}
}
