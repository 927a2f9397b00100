package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rbridge/rbridge/bridge/config"
	"github.com/rbridge/rbridge/doctor"
)

type doctorOptions struct {
	config   string
	json     bool
	interval time.Duration
	priority int
	dscp     int
	root     string
}

func newDoctorCommand() *cobra.Command {
	o := doctorOptions{}
	cmd := &cobra.Command{
		Use:   "doctor [--config FILE] [--json]",
		Short: "Check the host and both fabrics for what RDMA through rbridge needs",
		Long: `doctor checks what an experienced RDMA engineer checks before blaming the
gateway, and prints each finding with its severity and what to do:

  pfc, dscp     PFC on the RoCE priority and DSCP trust on the Ethernet NIC
                (dcbnl; "not exposed by this driver" where it has none, veth)
  ecn           ECN for RoCE (ecn/roce_np and roce_rp, mlx5); net.ipv4.tcp_ecn
                is TCP's and plays no part
  mtu           each leg's MTU and the RoCE MTU that follows (the largest of
                256..4096 that fits once the RoCEv2 headers are off)
  port, gid     port state, the GID type and index each leg uses (RoCEv2, not
                RoCE v1; the index tools given one by hand must use; on an
                InfiniBand port GID 0, the leg found by its IPoIB interface)
  rp_filter,    reverse-path filtering and accept_local where they drop RoCE
  accept_local  (asymmetric routes, RoCE devices looped on one host)
  hugepages,    huge pages for the pool, RLIMIT_MEMLOCK against what the
  memlock       gateway pins (pool per verbs leg, AF_XDP UMEM)
  xdp           the XDP mode the userspace leg's driver has (native, generic)
  kernel_roce   a kernel RoCE device still bound to the userspace leg's
                interface (it takes UDP 4791 before XDP sees it)
  clocksource   one the vDSO reads (tsc, kvm-clock): on another (hpet,
                acpi_pm) each of the gateway's clock reads is a system call
  ipoib         IPoIB mode (datagram, connected) and MTU
  counters      hw_counters and port counters that show trouble (CNPs,
                out-of-sequence, sequence errors, ACK timeouts) rising
                between two samples --interval apart

With --config the legs say which interfaces and devices to check; without
one every RDMA device and network interface is. Interfaces in another
network namespace get their sysctls checked there; their NIC (sysfs) is
checked by running doctor again under ip netns exec NAMESPACE.`,
		Example: `  rbridge doctor --config /etc/rbridge/rbridge.yaml
  rbridge doctor --json | jq '.findings[] | select(.severity != "ok")'
  ip netns exec user0 rbridge doctor --config gateway.yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.interval < 0 {
				return usageError(cmd, fmt.Errorf("--interval %v: want 0 (no counter check) or more", o.interval))
			}
			opts := doctor.Options{Root: o.root, Interval: o.interval, RoCEPriority: o.priority, RoCEDSCP: o.dscp}
			if o.config != "" {
				cfg, err := config.Load(o.config)
				if err != nil {
					return &exitError{code: exitUsage, err: err}
				}
				opts.Config = cfg
			}
			if o.interval == 0 {
				opts.Interval = -1
			}
			rep, err := doctor.Run(opts)
			if err != nil {
				return &exitError{code: exitUsage, err: err}
			}
			if o.json {
				err = rep.WriteJSON(cmd.OutOrStdout())
			} else {
				err = rep.WriteText(cmd.OutOrStdout())
			}
			if err != nil {
				return err
			}
			switch rep.Worst() {
			case doctor.Warn:
				return &exitError{code: exitFailed}
			case doctor.Error:
				return &exitError{code: exitUsage}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "the gateway's config file: check its legs (default: every device and interface)")
	f.BoolVar(&o.json, "json", false, "one JSON object instead of the table")
	f.DurationVar(&o.interval, "interval", time.Second, "how far apart the two counter samples are (0: no counter check)")
	f.IntVar(&o.priority, "roce-priority", doctor.DefaultRoCEPriority, "the 802.1p priority RoCE traffic uses (0-7)")
	f.IntVar(&o.dscp, "roce-dscp", doctor.DefaultRoCEDSCP, "the DSCP RoCE traffic carries, which must map to --roce-priority (0-63)")
	f.StringVar(&o.root, "root", "/", "read sysfs and procfs under this directory instead of / (a captured tree)")
	return cmd
}
