package transport_test

import (
	"testing"

	"github.com/rbridge/rbridge/internal/sumtest"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestStatsSnapshotAdd: Add sums every counter, the NAK codes' and the
// error completions' arrays too.
func TestStatsSnapshotAdd(t *testing.T) {
	sumtest.CheckAdd(t, (*transport.StatsSnapshot).Add)
}
