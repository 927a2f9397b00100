package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctorExitStatus: doctor on the crafted bad tree prints its table
// and ends with status 2 (errors found); --json gives the same findings.
func TestDoctorExitStatus(t *testing.T) {
	const root = "../../doctor/testdata/bad"
	cfg := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(cfg, []byte(`legs:
  - {name: ib, kind: verbs, ip: 198.18.1.3, device: mlx5_0}
  - {name: roce, kind: userspace, interface: eth1, ip: 198.18.2.1}
routes:
  - name: r
    listen: {leg: roce, addr: "198.18.2.1:7471"}
    target: {leg: ib, addr: "198.18.1.9:7471"}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := run(t, nil, "doctor", "--root", root, "--config", cfg, "--interval", "0")
	var ee *exitError
	if !errors.As(err, &ee) || ee.code != 2 || ee.err != nil {
		t.Fatalf("doctor on the bad tree: %v, want exit status 2 and nothing more to print", err)
	}
	for _, want := range []string{"SEVERITY  CHECK", "error     gid", "198.18.1.3 has no RoCEv2 GID", "-> devlink dev param set pci/0000:5e:00.0", " errors\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the table lacks %q:\n%s", want, out)
		}
	}
	out, _, err = run(t, nil, "doctor", "--json", "--root", root, "--config", cfg, "--interval", "0")
	if !errors.As(err, &ee) || ee.code != 2 {
		t.Fatalf("doctor --json: %v, want exit status 2", err)
	}
	var rep struct {
		Findings []map[string]string `json:"findings"`
		Worst    string              `json:"worst"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Worst != "error" || len(rep.Findings) == 0 {
		t.Errorf("--json: %v, worst %q, %d findings:\n%s", err, rep.Worst, len(rep.Findings), out)
	}
}

// TestDoctorRefusesBadInput: a bad config file, a bad flag value or root
// is exit status 2 with what was wrong.
func TestDoctorRefusesBadInput(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("legs: []\nroutes: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"doctor", "--config", bad}, "no legs"},
		{[]string{"doctor", "--config", "/nonexistent.yaml"}, "config: open /nonexistent.yaml"},
		{[]string{"doctor", "--roce-priority", "9", "--interval", "0"}, "doctor: RoCE priority 9: want 0 to 7"},
		{[]string{"doctor", "--root", "/nonexistent", "--interval", "0"}, `doctor: root "/nonexistent"`},
		{[]string{"doctor", "--interval", "-1s"}, "--interval -1s: want 0 (no counter check) or more"},
	} {
		_, _, err := run(t, nil, tc.args...)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want exit status 2 with %q", tc.args, err, tc.want)
		}
	}
}

// TestDoctorExitStatusFromMain: the process's exit status is the doctor's
// (2 for errors found, with nothing on standard error; 2 with the reason
// for a file it could not use), through main.
func TestDoctorExitStatusFromMain(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{"doctor", "--root", "../../doctor/testdata/bad", "--interval", "0"}, 2, ""},
		{[]string{"doctor", "--config", "/nonexistent.yaml"}, 2, "rbridge: config: open /nonexistent.yaml: no such file or directory\n"},
		{[]string{"doctor", "--no-such-flag"}, 2, "rbridge: unknown flag: --no-such-flag\nrbridge: see 'rbridge doctor --help'\n"},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), "RBRIDGE_TEST_AS_MAIN=1")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != tc.code || stderr.String() != tc.stderr {
			t.Errorf("rbridge %v: %v, stderr %q; want exit status %d, stderr %q", tc.args, err, stderr.String(), tc.code, tc.stderr)
		}
	}
}
