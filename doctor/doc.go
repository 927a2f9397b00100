// Package doctor checks a gateway host the way an experienced RDMA engineer
// would before blaming rbridge: the Ethernet NIC's lossless and congestion
// settings (PFC on the RoCE priority, DSCP trust, ECN for RoCE), the MTU of
// each leg and the RoCE MTU that follows, the GID type and index each leg
// uses, the sysctls that silently drop RoCE (rp_filter, accept_local), the
// memory the pool needs (hugepages, RLIMIT_MEMLOCK), the XDP mode the
// userspace leg's driver has, a kernel RoCE device still bound to that
// interface (it takes UDP 4791 before XDP sees it), IPoIB mode and MTU, and
// the NIC counters that show trouble rising between two samples.
//
// Every check reads the host through Options.Root (a directory standing for
// "/": sysfs under sys/, procfs under proc/), so it runs on fixture trees in
// tests; the few things a file does not show (the dcbnl netlink answer, the
// ethtool driver name, entering a network namespace, the interfaces' IP
// addresses, by which a verbs leg on an InfiniBand port is found through
// its IPoIB interface) go through the small System interface, which tests
// fake.
//
// Each check yields Findings: what was seen, a severity (ok, warn, error)
// and what to do. A check that cannot read what it needs says so as a
// finding; Run itself fails only when its options are unusable.
//
// The checks, one file per group:
//
//	qos.go       PFC and DSCP trust (dcbnl), ECN for RoCE (ecn/roce_np, roce_rp)
//	mtu.go       each leg's MTU and RoCE MTU, IPoIB mode and MTU
//	gid.go       port state, GID type and index per leg
//	sysctl.go    rp_filter and accept_local
//	memory.go    hugepages, RLIMIT_MEMLOCK against the pool
//	xdp.go       the driver's XDP mode, a kernel RoCE device on the userspace leg's interface
//	counters.go  hw_counters and port counters rising
//
// and beside them: doctor.go (Run, the targets, sysfs reading), report.go
// (the table and JSON), dcb.go (the dcbnl request and its reply's parser),
// system_linux.go (the host's System: netlink, ethtool, setns, addresses).
package doctor
