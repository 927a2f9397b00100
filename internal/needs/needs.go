// Package needs is the one place rbridge's tests skip for what the
// machine lacks (root, a kernel feature): a skip names what is missing,
// and with RBRIDGE_REQUIRE_ROOT=1 (CI runs as root) it fails instead.
package needs

import (
	"errors"
	"os"
	"testing"
)

// Check skips tb, naming what is missing, when err is not nil; with
// RBRIDGE_REQUIRE_ROOT=1 it fails tb instead.
func Check(tb testing.TB, what string, err error) {
	tb.Helper()
	if err == nil {
		return
	}
	if os.Getenv("RBRIDGE_REQUIRE_ROOT") == "1" {
		tb.Fatalf("needs %s (RBRIDGE_REQUIRE_ROOT=1): %v", what, err)
	}
	tb.Skipf("needs %s: %v", what, err)
}

// Root is Check for root; what says what root is needed for.
func Root(tb testing.TB, what string) {
	tb.Helper()
	var err error
	if os.Geteuid() != 0 {
		err = errors.New("not running as root")
	}
	Check(tb, "root ("+what+")", err)
}
