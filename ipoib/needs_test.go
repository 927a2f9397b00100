package ipoib_test

import (
	"testing"

	testneeds "github.com/rbridge/rbridge/internal/needs"
)

// needs and needRoot are this package's skips, through package needs: the
// only place a test of this package skips.
func needs(tb testing.TB, what string, err error) {
	tb.Helper()
	testneeds.Check(tb, what, err)
}

func needRoot(tb testing.TB) {
	tb.Helper()
	testneeds.Root(tb, "a network namespace and a tun device")
}
