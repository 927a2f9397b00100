package main

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// runProc is `rbridge run` as a child process of the test binary
// (RBRIDGE_TEST_AS_MAIN=1, see TestMain), for tests that send it signals.
type runProc struct {
	cmd    *exec.Cmd
	logs   *lockedBuffer
	exited chan error // its exit, once
}

// startRun starts `rbridge args...` with env added to the test's; the
// test's end kills it if it still runs and logs what it wrote.
func startRun(t testing.TB, env []string, args ...string) *runProc {
	t.Helper()
	p := &runProc{cmd: exec.Command(os.Args[0], args...), logs: &lockedBuffer{}, exited: make(chan error, 1)}
	p.cmd.Env = append(append(os.Environ(), "RBRIDGE_TEST_AS_MAIN=1"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			<-p.exited
		}
		t.Logf("rbridge %v:\n%s", args, p.logs.String())
	})
	return p
}

// stop ends the gateway with SIGTERM, as systemd does: it must exit 0
// within 30 s.
func (p *runProc) stop(t testing.TB) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("rbridge run after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("rbridge run did not stop within 30 s of SIGTERM")
	}
}
