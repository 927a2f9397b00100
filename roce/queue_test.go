package roce_test

import (
	"testing"

	"github.com/rbridge/rbridge/roce"
)

func TestQueueOf(t *testing.T) {
	for _, tc := range []struct {
		qpn  uint32
		n    int
		want int
	}{
		{0x11, 1, 0}, {0x11, 0, 0}, {0x11, 2, 1}, {0x12, 2, 0}, {0x13, 3, 1},
		{0, 4, 0}, {1, 4, 0}, {0xffffff, 2, 0}, {0xfffffe, 2, 0}, {0xfffffd, 4, 1},
		{0x1000011, 2, 1}, // the BTH carries 24 bits
	} {
		if got := roce.QueueOf(tc.qpn, tc.n); got != tc.want {
			t.Errorf("QueueOf(%#x, %d) = %d, want %d", tc.qpn, tc.n, got, tc.want)
		}
	}
}
