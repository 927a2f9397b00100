package leg

import (
	"strings"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// TestAsyncFailure: the events that move a QP to the error state end its
// session with a reason an operator can act on; the others do not.
func TestAsyncFailure(t *testing.T) {
	for _, tc := range []struct {
		ev   ibv.AsyncEventType
		want string // "" for no failure
	}{
		{ibv.EventQPAccessErr, "a staging key revoked"},
		{ibv.EventQPReqErr, "responder resources"},
		{ibv.EventQPFatal, "catastrophic"},
		{ibv.EventCommEst, ""},
		{ibv.EventQPLastWQE, ""},
		{ibv.EventSQDrained, ""},
		{ibv.EventPortErr, ""},
	} {
		err := asyncFailure(tc.ev)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v, want no failure", tc.ev, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: %v, want a failure saying %q", tc.ev, err, tc.want)
		}
		if qpFailed(tc.ev) != (tc.want != "") {
			t.Errorf("qpFailed(%v) = %v", tc.ev, qpFailed(tc.ev))
		}
	}
}
