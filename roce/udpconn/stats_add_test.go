package udpconn_test

import (
	"testing"

	"github.com/rbridge/rbridge/internal/sumtest"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// TestStatsSnapshotAdd: Add sums every counter.
func TestStatsSnapshotAdd(t *testing.T) {
	sumtest.CheckAdd(t, (*udpconn.StatsSnapshot).Add)
}
