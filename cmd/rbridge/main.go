// Command rbridge is the RDMA gateway between an InfiniBand island and a
// RoCEv2 fleet, and the tools that go with it.
package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// version and commit are set at link time (make build: -ldflags "-X
// main.version=$(git describe --always --dirty) -X main.commit=..."); builds
// without them report the module version or the VCS revision.
var version, commit = "", ""

func main() {
	if err := newRootCommand().Execute(); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			if ee.err != nil {
				fmt.Fprintln(os.Stderr, "rbridge:", ee.err)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "rbridge:", err)
		os.Exit(1)
	}
}

// exitError ends the command with an exit status of its own (doctor: 1 for
// warnings, 2 for errors) instead of 1, printing err first if there is one.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e *exitError) Unwrap() error { return e.err }

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rbridge",
		Short: "RDMA gateway between InfiniBand and RoCEv2",
		Long: `rbridge joins an InfiniBand island to a RoCEv2 fleet: applications on either
side use plain verbs and rdma_cm and reach the other side through the gateway.

Available now: the gateway (run), a running gateway's legs, routes and
sessions (status), making it re-read its config file (reload), checking the
host and both fabrics for what RDMA needs (doctor), decoding RoCEv2
captures (decode), listing RDMA devices and the GID rbridge would choose
(devices), measuring the userspace RoCEv2 transport against plain UDP
(bench), and the build's version.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.SetVersionTemplate("rbridge {{.Version}}\n")
	root.AddCommand(newVersionCommand(), newRunCommand(), newDemoCommand(), newDecodeCommand(), newDevicesCommand(), newDoctorCommand(), newBenchCommand(), newStatusCommand(), newReloadCommand())
	return root
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print rbridge's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "rbridge", buildVersion())
			return err
		},
	}
}

// buildVersion is what `rbridge version` and `rbridge --version` print
// after "rbridge": the stamped version and commit, else what the Go build
// recorded, and the Go version.
func buildVersion() string {
	if version != "" {
		v := version
		if commit != "" {
			v += " (commit " + commit + ")"
		}
		return v + " " + runtime.Version()
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "-dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		return "devel " + rev + dirty + " " + bi.GoVersion
	}
	return v + " " + bi.GoVersion
}
