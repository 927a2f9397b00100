package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rbridge/rbridge/integration/internal/harness"
)

// TestCheckArtifacts: the guest's files are kept under the run directory;
// a scrape promtool finds fault with fails the run, and so does a file
// that did not arrive whole; a clean scrape and other files pass.
func TestCheckArtifacts(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		msg := "oracle promtool unavailable (" + err.Error() + "): run `make deps` (Debian package prometheus)"
		if os.Getenv("RBRIDGE_REQUIRE_ORACLES") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	clean := []byte("# HELP rbridge_leg_up 1 while the leg's link carries traffic.\n# TYPE rbridge_leg_up gauge\nrbridge_leg_up{leg=\"ib\"} 1\n")
	// A counter without _total: promtool's finding.
	faulty := []byte("# HELP rbridge_nic_sent_pkts Packets sent.\n# TYPE rbridge_nic_sent_pkts counter\nrbridge_nic_sent_pkts{leg=\"ib\"} 3\n")
	for _, tc := range []struct {
		name string
		a    []*harness.Artifact
		ok   bool
	}{
		{"clean", []*harness.Artifact{{ID: "gw", Device: "rxe0", Name: "metrics.prom", Data: clean}, {ID: "gw", Device: "rxe0", Name: "notes.txt", Data: faulty}}, true},
		{"finding", []*harness.Artifact{{ID: "gw", Device: "rxe0", Name: "metrics.prom", Data: clean}, {ID: "gw", Device: "siw0", Name: "metrics.prom", Data: faulty}}, false},
		{"broken", []*harness.Artifact{{ID: "gw", Device: "rxe0", Name: "metrics.prom", Err: errors.New("SHA-256 differs")}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if ok := checkArtifacts(&harness.Console{Artifacts: tc.a}, dir); ok != tc.ok {
				t.Errorf("checkArtifacts = %v, want %v", ok, tc.ok)
			}
			for _, a := range tc.a {
				b, err := os.ReadFile(filepath.Join(dir, a.ID+"."+a.Device, a.Name))
				if a.Err == nil && (err != nil || string(b) != string(a.Data)) {
					t.Errorf("%s of %s on %s not kept: %v", a.Name, a.ID, a.Device, err)
				}
			}
		})
	}
}
