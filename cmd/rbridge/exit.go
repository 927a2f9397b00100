package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// Exit statuses: one meaning each, whichever command ends with it.
const (
	exitOK        = 0 // the command did its job
	exitFailed    = 1 // it ran and failed (doctor: the worst finding is a warning)
	exitUsage     = 2 // bad usage, or an input file it cannot use (doctor: also an error found)
	exitNoGateway = 3 // no gateway answered (status, reload)
)

// exitError ends the command with an exit status of its own instead of 1,
// printing err first if there is one; help names the command whose
// --help says how to use it (bad usage).
type exitError struct {
	code int
	err  error
	help string
}

func (e *exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e *exitError) Unwrap() error { return e.err }

// usageError is bad usage of cmd: exit status 2, and a pointer to its
// --help.
func usageError(cmd *cobra.Command, err error) error {
	return &exitError{code: exitUsage, err: err, help: cmd.CommandPath()}
}

// exitStatuses is what each command's exit statuses mean: the table in
// every command's --help and in docs/operations.md ("" where a command
// never ends with that status).
var exitStatuses = []struct {
	command string
	meaning [4]string
}{
	{"run", [4]string{
		"stopped on SIGINT or SIGTERM (sessions still closing when --drain ran out are cut, logged); with --check: the file and the host are fine",
		"the gateway could not start (a leg, a route, the admin server) or failed while stopping; with --check: an interface or RDMA device is missing",
		"bad usage, or the config file cannot be read or is refused", ""}},
	{"demo", [4]string{"every operation crossed and was measured", "an operation or a measurement failed", "bad usage", ""}},
	{"decode", [4]string{"the capture was read to the end, whatever its packets held", "the capture cannot be read, or ends inside a packet (after the summary)", "bad usage", ""}},
	{"devices", [4]string{"listed (also when there is nothing to list)", "RDMA devices or IPoIB interfaces could not be listed (a build without cgo lists no RDMA devices)", "bad usage", ""}},
	{"doctor", [4]string{"every finding is ok", "the worst finding is a warning", "the worst finding is an error, the doctor could not run, or bad usage (a config file that cannot be read or is refused is one)", ""}},
	{"bench", [4]string{"measured", "a measurement failed", "bad usage", ""}},
	{"status", [4]string{"the gateway answered; with --ready: it is ready (/healthz)", "the gateway answered with an error; with --ready: it answered that it is not ready, and why", "bad usage", "no gateway answered (not running, no admin server, or another address)"}},
	{"reload", [4]string{"the file was applied", "the file was refused (nothing changed) or applied only in part", "bad usage, or --config FILE cannot be read or is not YAML", "no gateway answered (not running, no control socket, another path, or a socket this user may not open)"}},
	{"version", [4]string{"printed", "", "bad usage", ""}},
}

// exitStatusHelp is the exit-status section of command's --help.
func exitStatusHelp(command string) string {
	for _, e := range exitStatuses {
		if e.command != command {
			continue
		}
		var b strings.Builder
		b.WriteString("Exit status (the same codes mean the same for every rbridge command):\n")
		for code, m := range e.meaning {
			if m != "" {
				fmt.Fprintf(&b, "  %d  %s\n", code, m)
			}
		}
		return strings.TrimSuffix(b.String(), "\n")
	}
	panic("no exit statuses for command " + command)
}

// exitStatusTable is the exit statuses of every command as a Markdown
// table, as docs/operations.md has it.
func exitStatusTable() string {
	var b strings.Builder
	b.WriteString("| command | 0 | 1 | 2 | 3 |\n|---|---|---|---|---|\n")
	for _, e := range exitStatuses {
		fmt.Fprintf(&b, "| `rbridge %s` |", e.command)
		for _, m := range e.meaning {
			if m == "" {
				m = "-"
			}
			fmt.Fprintf(&b, " %s |", m)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// enforceUsage makes every way a command line can be wrong bad usage
// (exit status 2) in every command of the tree: a bad flag, a bad
// argument, and an unknown command; and appends each command's exit
// statuses to its --help.
func enforceUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError(cmd, err) })
	// Without arguments the root prints its help; with one it is an
	// unknown command (cobra's own check would exit 1).
	root.Args = cobra.ArbitraryArgs
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageError(cmd, fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath()))
		}
		return cmd.Help()
	}
	for _, c := range root.Commands() {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					var ee *exitError
					if errors.As(err, &ee) {
						return err
					}
					return usageError(cmd, err)
				}
				return nil
			}
		}
		switch {
		case c.Name() == "help", c.Name() == "completion", c.IsAdditionalHelpTopicCommand(): // no exit status of their own
			continue
		}
		c.Long = strings.TrimRight(c.Long, "\n") + "\n\n" + exitStatusHelp(c.Name())
	}
}
