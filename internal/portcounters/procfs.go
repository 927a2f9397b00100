//go:build linux

package portcounters

import "github.com/prometheus/procfs/sysfs"

// procfsCounter is a counter procfs parses, and where it keeps the value.
type procfsCounter struct {
	dir, name string
	bytes     bool
	get       func(*sysfs.InfiniBandPort) *uint64
}

// procfsCounters are every counter of sysfs.InfiniBandCounters and
// sysfs.InfiniBandHwCounters (but lifespan, which is not one), by the file
// each is read from.
var procfsCounters = []procfsCounter{
	{DirCountersExt, "port_multicast_rcv_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortMulticastRcvPackets }},
	{DirCountersExt, "port_multicast_xmit_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortMulticastXmitPackets }},
	{DirCountersExt, "port_rcv_data_64", true, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortRcvData64 }},
	{DirCountersExt, "port_rcv_packets_64", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortRcvPackets64 }},
	{DirCountersExt, "port_unicast_rcv_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortUnicastRcvPackets }},
	{DirCountersExt, "port_unicast_xmit_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortUnicastXmitPackets }},
	{DirCountersExt, "port_xmit_data_64", true, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortXmitData64 }},
	{DirCountersExt, "port_xmit_packets_64", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LegacyPortXmitPackets64 }},
	{DirCounters, "excessive_buffer_overrun_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.ExcessiveBufferOverrunErrors }},
	{DirCounters, "link_downed", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LinkDowned }},
	{DirCounters, "link_error_recovery", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LinkErrorRecovery }},
	{DirCounters, "local_link_integrity_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.LocalLinkIntegrityErrors }},
	{DirCounters, "multicast_rcv_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.MulticastRcvPackets }},
	{DirCounters, "multicast_xmit_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.MulticastXmitPackets }},
	{DirCounters, "port_rcv_constraint_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvConstraintErrors }},
	{DirCounters, "port_rcv_data", true, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvData }},
	{DirCounters, "port_rcv_discards", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvDiscards }},
	{DirCounters, "port_rcv_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvErrors }},
	{DirCounters, "port_rcv_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvPackets }},
	{DirCounters, "port_rcv_remote_physical_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvRemotePhysicalErrors }},
	{DirCounters, "port_rcv_switch_relay_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortRcvSwitchRelayErrors }},
	{DirCounters, "port_xmit_constraint_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitConstraintErrors }},
	{DirCounters, "port_xmit_data", true, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitData }},
	{DirCounters, "port_xmit_discards", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitDiscards }},
	{DirCounters, "port_xmit_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitPackets }},
	{DirCounters, "port_xmit_wait", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.PortXmitWait }},
	{DirCounters, "symbol_error", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.SymbolError }},
	{DirCounters, "unicast_rcv_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.UnicastRcvPackets }},
	{DirCounters, "unicast_xmit_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.UnicastXmitPackets }},
	{DirCounters, "VL15_dropped", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.Counters.VL15Dropped }},
	{DirHW, "duplicate_request", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.DuplicateRequest }},
	{DirHW, "implied_nak_seq_err", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ImpliedNakSeqErr }},
	{DirHW, "local_ack_timeout_err", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.LocalAckTimeoutErr }},
	{DirHW, "np_cnp_sent", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.NpCnpSent }},
	{DirHW, "np_ecn_marked_roce_packets", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.NpEcnMarkedRocePackets }},
	{DirHW, "out_of_buffer", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.OutOfBuffer }},
	{DirHW, "out_of_sequence", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.OutOfSequence }},
	{DirHW, "packet_seq_err", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.PacketSeqErr }},
	{DirHW, "req_cqe_error", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ReqCqeError }},
	{DirHW, "req_cqe_flush_error", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ReqCqeFlushError }},
	{DirHW, "req_remote_access_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ReqRemoteAccessErrors }},
	{DirHW, "req_remote_invalid_request", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.ReqRemoteInvalidRequest }},
	{DirHW, "resp_cqe_error", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RespCqeError }},
	{DirHW, "resp_cqe_flush_error", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RespCqeFlushError }},
	{DirHW, "resp_local_length_error", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RespLocalLengthError }},
	{DirHW, "resp_remote_access_errors", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RespRemoteAccessErrors }},
	{DirHW, "rnr_nak_retry_err", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RnrNakRetryErr }},
	{DirHW, "roce_adp_retrans", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RoceAdpRetrans }},
	{DirHW, "roce_adp_retrans_to", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RoceAdpRetransTo }},
	{DirHW, "roce_slow_restart", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RoceSlowRestart }},
	{DirHW, "roce_slow_restart_cnps", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RoceSlowRestartCnps }},
	{DirHW, "roce_slow_restart_trans", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RoceSlowRestartTrans }},
	{DirHW, "rp_cnp_handled", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RpCnpHandled }},
	{DirHW, "rp_cnp_ignored", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RpCnpIgnored }},
	{DirHW, "rx_atomic_requests", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RxAtomicRequests }},
	{DirHW, "rx_dct_connect", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RxDctConnect }},
	{DirHW, "rx_icrc_encapsulated", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RxIcrcEncapsulated }},
	{DirHW, "rx_read_requests", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RxReadRequests }},
	{DirHW, "rx_write_requests", false, func(p *sysfs.InfiniBandPort) *uint64 { return p.HwCounters.RxWriteRequests }},
}
