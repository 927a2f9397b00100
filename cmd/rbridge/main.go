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

	"github.com/rbridge/rbridge/bridge"
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
			if ee.help != "" {
				fmt.Fprintf(os.Stderr, "rbridge: see '%s --help'\n", ee.help)
			}
			os.Exit(ee.code)
		}
		fmt.Fprintln(os.Stderr, "rbridge:", err)
		os.Exit(exitFailed)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "rbridge",
		Short: "RDMA gateway between InfiniBand and RoCEv2",
		Long: `rbridge joins an InfiniBand island to a RoCEv2 fleet: applications on either
side use plain verbs and rdma_cm and reach the other side through the gateway.

The commands: the gateway (run); a client, the gateway and a target in one
process, with no RDMA hardware (demo); a running gateway's legs, routes and
sessions (status); making it re-read its config file (reload); checking the
host and both fabrics for what RDMA needs (doctor); decoding RoCEv2
captures (decode); listing RDMA devices and the GID rbridge would choose
(devices); measuring the userspace RoCEv2 transport against plain UDP
(bench); and the build's version.

The same exit status means the same for every command: 0 it did its job, 1
it ran and failed (doctor: warnings), 2 bad usage or an input file it cannot
use (doctor: also errors found), 3 no gateway answered (status, reload).
Each command's --help says what each means for it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
	}
	root.SetVersionTemplate("rbridge {{.Version}}\n")
	root.AddCommand(newVersionCommand(), newRunCommand(), newDemoCommand(), newDecodeCommand(), newDevicesCommand(), newDoctorCommand(), newBenchCommand(), newStatusCommand(), newReloadCommand(),
		newConfigHelpTopic())
	enforceUsage(root)
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
	b := buildInfo()
	if b.Version == "devel" && b.Commit != "" {
		return "devel " + b.Commit + " " + b.GoVersion
	}
	return b.String()
}

// buildInfo is the binary's version, commit and Go version: the stamped
// ones (make build), else what the Go build recorded.
func buildInfo() bridge.BuildInfo {
	if version != "" {
		return bridge.BuildInfo{Version: version, Commit: commit, GoVersion: runtime.Version()}
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return bridge.BuildInfo{Version: "unknown"}
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
		return bridge.BuildInfo{Version: "devel", Commit: rev + dirty, GoVersion: bi.GoVersion}
	}
	return bridge.BuildInfo{Version: v, GoVersion: bi.GoVersion}
}
