package ipoib_test

import (
	"errors"
	"os"
	"testing"
)

// needs skips the test, naming what is missing, when err is not nil; with
// RBRIDGE_REQUIRE_ROOT=1 (CI runs as root) it fails instead. It is the only
// place a test of this package skips.
func needs(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("RBRIDGE_REQUIRE_ROOT") == "1" {
		tb.Fatalf("needs %s (RBRIDGE_REQUIRE_ROOT=1): %v", what, err)
	}
	tb.Skipf("needs %s: %v", what, err)
}

func needRoot(tb testing.TB) {
	tb.Helper()
	var err error
	if os.Geteuid() != 0 {
		err = errors.New("not running as root")
	}
	needs(tb, "root (a network namespace and a tun device)", err)
}
