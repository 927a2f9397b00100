package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestVersionFlag: --version prints what the version command prints.
func TestVersionFlag(t *testing.T) {
	want, _, err := run(t, nil, "version")
	if err != nil {
		t.Fatal(err)
	}
	if want != "rbridge "+buildVersion()+"\n" {
		t.Errorf("version = %q, want %q", want, "rbridge "+buildVersion()+"\n")
	}
	got, _, err := run(t, nil, "--version")
	if err != nil || got != want {
		t.Errorf("--version = %q, %v; want %q", got, err, want)
	}
}

func TestBuildVersionStamped(t *testing.T) {
	defer func(v, c string) { version, commit = v, c }(version, commit)
	version, commit = "v1.2.3-4-gabcdef0-dirty", "abcdef0123456789abcdef0123456789abcdef01"
	if got, want := buildVersion(), "v1.2.3-4-gabcdef0-dirty (commit abcdef0123456789abcdef0123456789abcdef01) "+runtime.Version(); got != want {
		t.Errorf("buildVersion = %q, want %q", got, want)
	}
}

// TestMakeBuildStampsVersion builds the binary as `make build` does and
// runs it: its version is git describe's, and its commit git's HEAD
// ("(devel)" before the Makefile stamped them).
func TestMakeBuildStampsVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	for _, tool := range []string{"make", "git"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s: %v", tool, err)
		}
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	gitOut := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
		if err != nil {
			t.Skipf("git %v: %v (not a git checkout?)", args, err)
		}
		return strings.TrimSpace(string(out))
	}
	describe, head := gitOut("describe", "--always", "--dirty"), gitOut("rev-parse", "HEAD")
	bin := filepath.Join(t.TempDir(), "rbridge")
	mk := exec.Command("make", "-C", root, "build", "BIN="+bin)
	for _, kv := range os.Environ() {
		// Not the variables of a make that runs this test: make test
		// VERSION=x passes VERSION down, in MAKEFLAGS and the environment.
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "VERSION", "COMMIT":
		default:
			mk.Env = append(mk.Env, kv)
		}
	}
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	want := "rbridge " + describe + " (commit " + head + ") " + runtime.Version() + "\n"
	if string(out) != want {
		t.Errorf("make build's rbridge version = %q, want %q", out, want)
	}
	if out, err := exec.Command(bin, "--version").Output(); err != nil || string(out) != want {
		t.Errorf("make build's rbridge --version = %q, %v; want %q", out, err, want)
	}
}
