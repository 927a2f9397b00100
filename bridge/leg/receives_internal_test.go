package leg

import (
	"testing"

	"github.com/rbridge/rbridge/bridge/config"
)

// TestReceivesFor: a connection keeps the leg's receives, raised to what
// its protocol's queue says the peer sends at once (at most
// maxProtocolReceives), in receives no larger than the protocol's
// messages toward it.
func TestReceivesFor(t *testing.T) {
	for _, tc := range []struct {
		name                string
		leg                 config.Leg
		p                   Params
		wantDepth, wantSize int
	}{
		{"no protocol: the leg's", config.Leg{Receives: 32, ReceiveSize: 4096}, Params{}, 32, 4096},
		{"no protocol, leg defaults", config.Leg{}, Params{}, 0, 0},
		{"a queue above the default", config.Leg{}, Params{Receives: 128}, 128, 0},
		{"a queue above the leg's", config.Leg{Receives: 16}, Params{Receives: 128}, 128, 0},
		{"a leg above the queue", config.Leg{Receives: 256}, Params{Receives: 32}, 256, 0},
		{"a queue past the bound", config.Leg{}, Params{Receives: 65535}, maxProtocolReceives, 0},
		{"a queue below the default", config.Leg{}, Params{Receives: 4}, defaultEndpointReceives, 0},
		{"responses smaller than the leg's size", config.Leg{ReceiveSize: 16384}, Params{Receives: 128, ReceiveSize: 16}, 128, 16},
		{"responses smaller than the default size", config.Leg{}, Params{ReceiveSize: 16}, 0, 16},
		{"responses larger than the leg's size", config.Leg{ReceiveSize: 4096}, Params{ReceiveSize: 65536}, 0, 4096},
	} {
		d, s := receivesFor(&tc.leg, tc.p)
		if d != tc.wantDepth || s != tc.wantSize {
			t.Errorf("%s: receivesFor = %d receives of %d bytes, want %d of %d", tc.name, d, s, tc.wantDepth, tc.wantSize)
		}
	}
}
