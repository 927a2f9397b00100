package guest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Artifact hands a file to the host: the guest's init sends every file a
// test binary left in RBRIDGE_ARTIFACTS to the host runner once the binary
// ended (as "@@RB FILE" lines), and the runner keeps it in its run
// directory and checks it there: a name ending in .prom is a Prometheus
// scrape, linted with the host's `promtool check metrics` (the guest image
// has no promtool), and any finding fails the run. name is a file name, no
// directory; a second Artifact of one name in a pass replaces the first.
// On the host it skips the test; in the guest a missing directory fails it.
func Artifact(t testing.TB, name string, data []byte) {
	t.Helper()
	if !InGuest() {
		t.Skip(SkipReason)
	}
	dir := os.Getenv("RBRIDGE_ARTIFACTS")
	if dir == "" {
		t.Fatal("guest: environment variable RBRIDGE_ARTIFACTS is not set")
	}
	if name == "" || strings.ContainsAny(name, "/ \t\n") {
		t.Fatalf("guest: artifact name %q: want a file name without spaces", name)
	}
	if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
		t.Fatalf("guest: artifact: %v", err)
	}
}
