package main

import (
	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/ibv"
)

func newDevicesCommand() *cobra.Command {
	var jsonOut bool
	cmd := &cobra.Command{
		Use:   "devices [--json]",
		Short: "List RDMA devices, ports and GIDs, and the GID rbridge would use for each local IP",
		Long: `devices lists what an operator needs from ibv_devinfo -v and rdma link: every
RDMA device, its ports (state, link layer, MTU, LID, speed and width) and GID
table (type and network device of each entry), then, for each local IP
address, the RoCEv2 GID rbridge would choose and why.

On a machine without RDMA devices it says so and exits 0. A build without cgo
(CGO_ENABLED=0) cannot query devices: it says why and exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return ibv.WriteDevicesReport(cmd.OutOrStdout(), ibv.ReportOptions{JSON: jsonOut})
		},
	}
	cmd.Flags().BoolVar(&jsonOut, "json", false, "one JSON object instead of text")
	return cmd
}
