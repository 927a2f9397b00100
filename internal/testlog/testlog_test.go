package testlog_test

import (
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
