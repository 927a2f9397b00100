package testlog_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/rbridge/rbridge/internal/testlog"
)

// recorder is a testing.TB that records Errorf calls.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Cleanup(func())                    {}

func TestErrorLevelFails(t *testing.T) {
	r := &recorder{TB: t}
	log := testlog.New(r, "expected break")
	log.Warn("a warning")
	log.Info("info")
	log.Error("expected break here")
	if len(r.errs) != 0 {
		t.Fatalf("warnings, info and expected errors failed the test: %v", r.errs)
	}
	log.With("qp", 17).Error("completion lost")
	if len(r.errs) != 1 {
		t.Fatalf("an unexpected error record made %d failures, want 1", len(r.errs))
	}
}

// keeper is a testing.TB that records what is logged, whether it failed,
// and the cleanups it was given, to run them.
type keeper struct {
	testing.TB
	failed   bool
	logs     []string
	cleanups []func()
}

func (k *keeper) Errorf(string, ...any) { k.failed = true }
func (k *keeper) Failed() bool          { return k.failed }
func (k *keeper) Log(args ...any)       { k.logs = append(k.logs, fmt.Sprint(args...)) }
func (k *keeper) Logf(format string, args ...any) {
	k.logs = append(k.logs, fmt.Sprintf(format, args...))
}
func (k *keeper) Cleanup(f func()) { k.cleanups = append(k.cleanups, f) }
func (k *keeper) cleanup() {
	for _, f := range k.cleanups {
		f()
	}
}

// TestKeptForAFailure: info and warn records are not written while the
// test passes, and the last Kept of them are once it fails, oldest first;
// debug records are not kept.
func TestKeptForAFailure(t *testing.T) {
	if os.Getenv("RBRIDGE_TEST_LOG") != "" {
		t.Skip("RBRIDGE_TEST_LOG is set: records are written as they come, not kept")
	}
	passing := &keeper{TB: t}
	log := testlog.New(passing)
	log.Info("a session began", "qp", 1)
	passing.cleanup()
	if len(passing.logs) != 0 {
		t.Errorf("a passing test's records were written: %q", passing.logs)
	}

	failing := &keeper{TB: t}
	log = testlog.New(failing)
	log.Debug("not kept")
	for i := range testlog.Kept + 5 {
		log.Warn("record", "n", i)
	}
	failing.failed = true
	failing.cleanup()
	log.Info("after the cleanup")
	if len(failing.logs) != 1 {
		t.Fatalf("a failed test wrote %d logs, want the kept records in one: %q", len(failing.logs), failing.logs)
	}
	got := failing.logs[0]
	if strings.Contains(got, "not kept") || strings.Contains(got, "n=4\n") || strings.Contains(got, "after the cleanup") {
		t.Errorf("the kept records hold a debug record, one older than the last %d, or one after the cleanup:\n%s", testlog.Kept, got)
	}
	first, last := strings.Index(got, "WARN record n=5\n"), strings.Index(got, fmt.Sprintf("WARN record n=%d", testlog.Kept+4))
	if first < 0 || last < first || strings.Count(got, "WARN record") != testlog.Kept {
		t.Errorf("the kept records are not the last %d, oldest first:\n%s", testlog.Kept, got)
	}
}
