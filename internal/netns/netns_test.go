package netns_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/netns"
)

// TestMain runs the test binary again as nobody when asked: a process
// without CAP_SYS_ADMIN entering a namespace.
func TestMain(m *testing.M) {
	if name := os.Getenv("NETNS_TEST_ENTER"); name != "" {
		err := netns.Do(name, func() error { return nil })
		fmt.Print(err)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDoWithoutCapability: entering a namespace without CAP_SYS_ADMIN
// fails with an error that names the capability, not a bare "operation
// not permitted".
func TestDoWithoutCapability(t *testing.T) {
	needs.Root(t, "creating a network namespace, and running a child as nobody")
	name := fmt.Sprintf("rbt-netns-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	// The test binary, where nobody may run it.
	dir, err := os.MkdirTemp("", "netns-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	self := filepath.Join(dir, "netns.test")
	if err := os.WriteFile(self, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run", "^$")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NETNS_TEST_ENTER="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child: %v: %s", err, out)
	}
	if s := string(out); !strings.Contains(s, "operation not permitted") || !strings.Contains(s, "needs CAP_SYS_ADMIN: run as root") {
		t.Errorf("entering a namespace as nobody: %q; want the capability named", s)
	}
}
