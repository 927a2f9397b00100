package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// BootOptions describes one run of the guest.
type BootOptions struct {
	Vmlinuz string
	Initrd  string
	Memory  string        // qemu -m, e.g. "2G"
	CPUs    int           // qemu -smp
	Timeout time.Duration // the guest is killed after this long
	Log     io.Writer     // receives the raw console, when not nil
}

// ErrGuestHung is returned (wrapped, with where the guest was) when the
// guest did not end before the timeout and was killed.
var ErrGuestHung = errors.New("guest hung")

// QemuArgs is the qemu command line: TCG (KVM does not work on these hosts),
// the serial console on stdio, no network device, and no reboot, so a
// kernel panic (panic=-1) or init's poweroff ends qemu. tsc=reliable: under
// TCG the kernel does not trust the TSC and falls back to the emulated
// HPET, so every clock read in the guest (the Go runtime's, rxe's, a
// timer's) becomes an exit to qemu's device model, and in user space a
// system call where a host's vDSO reads the TSC. qemu's TCG TSC follows the
// host's, monotonic across vCPUs.
func QemuArgs(o BootOptions) []string {
	return []string{
		"-accel", "tcg,thread=multi", "-cpu", "max",
		"-m", o.Memory, "-smp", strconv.Itoa(o.CPUs),
		"-kernel", o.Vmlinuz, "-initrd", o.Initrd,
		"-append", "console=ttyS0 quiet panic=-1 tsc=reliable",
		"-nographic", "-no-reboot", "-nic", "none",
	}
}

// Boot runs the guest until it powers off, feeding every console line to c.
// A guest still running at the timeout (or when ctx ends) is killed, and the
// error says where it was. qemu's own failures come back with its stderr.
func Boot(ctx context.Context, o BootOptions, c *Console) error {
	cmd := exec.Command("qemu-system-x86_64", QemuArgs(o)...)
	// Not a terminal: qemu would put a tty into raw mode.
	cmd.Stdin = nil
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start qemu-system-x86_64: %w (run: make deps-vm)", err)
	}
	lines := make(chan string, 256)
	go func() {
		defer close(lines)
		r := bufio.NewReaderSize(stdout, 64<<10)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()

	timeout := time.NewTimer(o.Timeout)
	defer timeout.Stop()
	var grace <-chan time.Time // runs once the STATUS line came
	kill := func(why error) error {
		cmd.Process.Kill()
		for range lines {
		}
		cmd.Wait()
		return why
	}
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				if err != nil && !c.StatusSeen {
					return fmt.Errorf("qemu-system-x86_64: %v: %s", err, strings.TrimSpace(stderr.String()))
				}
				return nil
			}
			if o.Log != nil {
				io.WriteString(o.Log, line)
			}
			c.Line(line)
			if c.StatusSeen && grace == nil {
				grace = time.After(30 * time.Second)
			}
		case <-grace:
			// The guest said everything; only its power-off is missing.
			return kill(nil)
		case <-timeout.C:
			return kill(fmt.Errorf("%w: killed after %s; %s", ErrGuestHung, o.Timeout, c.Where()))
		case <-ctx.Done():
			return kill(fmt.Errorf("guest stopped: %w; %s", context.Cause(ctx), c.Where()))
		}
	}
}
