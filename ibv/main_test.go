package ibv_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/rbridge/rbridge/ibv"
)

// TestMain fails the run when any verbs object (or arena) is still open
// after the tests: every test must Close what it made.
func TestMain(m *testing.M) {
	code := m.Run()
	if left := ibv.LiveObjects(); len(left) != 0 {
		fmt.Fprintf(os.Stderr, "ibv: objects left open after the tests: %v\n", left)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
