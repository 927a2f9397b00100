package xdp_test

import (
	"testing"

	"github.com/rbridge/rbridge/internal/sumtest"
	"github.com/rbridge/rbridge/xdp"
)

// TestConnStatsAdd: Add sums every counter.
func TestConnStatsAdd(t *testing.T) {
	sumtest.CheckAdd(t, (*xdp.ConnStats).Add)
}
