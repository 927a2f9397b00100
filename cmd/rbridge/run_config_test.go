package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunDefaultConfig: without --config, run reads $RBRIDGE_CONFIG, else
// /etc/rbridge/rbridge.yaml, and says what it looked for when neither is
// there.
func TestRunDefaultConfig(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(p, []byte("legs: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(configEnv, p)
	got, err := defaultConfig()
	if err != nil || got != p {
		t.Fatalf("with $%s set: %q, %v", configEnv, got, err)
	}
	t.Setenv(configEnv, "")
	got, err = defaultConfig()
	if _, serr := os.Stat(defaultConfigPath); serr == nil {
		if err != nil || got != defaultConfigPath {
			t.Fatalf("with %s present: %q, %v", defaultConfigPath, got, err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), configEnv) || !strings.Contains(err.Error(), defaultConfigPath) {
		t.Errorf("neither: %q, %v; want an error naming both", got, err)
	}
}
