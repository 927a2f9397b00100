package bridge

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/rbridge/rbridge/bridge/leg"

	"github.com/rbridge/rbridge/bridge/pool"
	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/bridge/staging"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rbridge/rbridge/internal/portcounters"
	"github.com/rbridge/rbridge/roce/cm"
	"github.com/rbridge/rbridge/roce/transport"
	"github.com/rbridge/rbridge/roce/udpconn"
	"github.com/rbridge/rbridge/xdp"
)

// The gateway's Prometheus metrics are read from its Snapshots at scrape
// time by one collector (NewCollector): nothing is counted twice. Labels
// have bounded values only: leg, route and protocol (from the config),
// direction (to_target, to_client; rx, tx; a protocol's data direction),
// why (what was wrong in a protocol), a send opcode (send, send_with_imm,
// send_with_inv, write, write_with_imm, read, compare_swap, fetch_add), a
// pool class's size, and a verbs leg's
// device and port (the one its address chose). Per-QPN and per-client
// numbers belong in Status.

// directions names a session's directions: 0 is the client's requests to
// the target (A to B), 1 the target's to the client.
var directions = [2]string{"to_target", "to_client"}

// A counter is one Prometheus metric read from a snapshot of type S.
type counter[S any] struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	val  func(*S) uint64
}

func newCounters[S any](prefix string, labels []string, rows []counterRow[S]) []counter[S] {
	out := make([]counter[S], len(rows))
	for i, r := range rows {
		out[i] = counter[S]{desc: prometheus.NewDesc(prefix+r.name, r.help, labels, nil), kind: prometheus.CounterValue, val: r.val}
	}
	return out
}

type counterRow[S any] struct {
	name, help string
	val        func(*S) uint64
}

// The route counters, from the route's GatewayStats.
var routeCounters = newCounters("rbridge_route_", []string{"route"}, []counterRow[GatewayStatsSnapshot]{
	{"sessions_total", "Sessions the route started (both connections up, relaying).", func(s *GatewayStatsSnapshot) uint64 { return s.Accepted }},
	{"sessions_ended_total", "Sessions of the route that ended.", func(s *GatewayStatsSnapshot) uint64 { return s.Ended }},
	{"sessions_rejected_total", "Clients rejected because the target rejected or did not answer, or its leg was down or had lost its floating address.", func(s *GatewayStatsSnapshot) uint64 { return s.Rejected }},
	{"sessions_refused_total", "Clients rejected because the route's allow list does not hold them.", func(s *GatewayStatsSnapshot) uint64 { return s.Refused }},
	{"sessions_failed_total", "Connections that failed after the target accepted (the client's accept, or the session's start).", func(s *GatewayStatsSnapshot) uint64 { return s.Failed }},
	{"fallbacks_total", "Times the route's target could not be reached and new sessions went through its fallback.", func(s *GatewayStatsSnapshot) uint64 { return s.Fallbacks }},
	{"fallback_sessions_total", "Connections to the target made through the route's fallback (a peer gateway).", func(s *GatewayStatsSnapshot) uint64 { return s.FellBack }},
})

// directionRow is a route counter per direction, from its sessions'
// session.Stats.
type directionRow struct {
	desc *prometheus.Desc
	val  func(*session.StatsSnapshot) *[2]uint64
}

var directionRows = func() []directionRow {
	labels := []string{"route", "direction"}
	rows := []struct {
		name, help string
		val        func(*session.StatsSnapshot) *[2]uint64
	}{
		{"copied_bytes_total", "Payload bytes the gateway copied while relaying (the rest crossed in the buffers it arrived in).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.Copied }},
		{"operations_failed_total", "Operations the far side failed (each ends its session).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.Failed }},
		{"no_credit_total", "Requests refused (RNR or sequence NAK) or held until a buffer frees because the pool was empty (backpressure).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.NoCredit }},
		{"too_long_total", "SENDs refused with an invalid request NAK: longer than the far leg gathers in the pool's largest buffers.", func(s *session.StatsSnapshot) *[2]uint64 { return &s.TooLong }},
		{"read_part_pool_waits_total", "Parts of READs longer than a pool buffer that waited for a buffer before they were posted (backpressure).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.PoolWaits }},
		{"staged_messages_total", "Messages (commands) whose memory descriptors the gateway rewrote to its staging, the far peer being behind a verbs leg (a route with a protocol).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.Staged }},
		{"staged_bytes_total", "Bytes of the regions staged for those messages.", func(s *session.StatsSnapshot) *[2]uint64 { return &s.StagedBytes }},
		{"staging_pulled_bytes_total", "Bytes the gateway READ from the originator into staging before relaying a message (data the far peer READs).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.Pulled }},
		{"staging_pushed_bytes_total", "Bytes the gateway WROTE from staging to the originator before relaying a response (data the far peer wrote).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.Pushed }},
		{"staging_waits_total", "Staging regions that waited for a pool buffer (staging exhausted: messages wait, in order).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.StageWaits }},
		{"liveness_probes_total", "Liveness probes (zero-length RDMA WRITEs) sessions posted on a connection after an idle period (a route's liveness); a probe not answered ends its session.", func(s *session.StatsSnapshot) *[2]uint64 { return &s.Probes }},
		{"staging_failed_total", "Messages that could not be staged, answered by the gateway in the far peer's place with the protocol's error (nvme: a data transfer error; nfs: RDMA_ERROR ERR_CHUNK).", func(s *session.StatsSnapshot) *[2]uint64 { return &s.StageFailed }},
	}
	out := make([]directionRow, len(rows))
	for i, r := range rows {
		out[i] = directionRow{desc: prometheus.NewDesc("rbridge_route_"+r.name, r.help, labels, nil), val: r.val}
	}
	return out
}()

// The counters of a route's protocol (package staging), per route and
// protocol, from its staging.Stats.
var protocolLabels = []string{"route", "protocol"}

var protocolCounters = newCounters("rbridge_route_protocol_", protocolLabels, []counterRow[staging.StatsSnapshot]{
	{"descriptors_total", "Memory descriptors the route's commands carried that name memory (nvme: keyed SGL data blocks of a length above 0; nfs: RPC-over-RDMA chunk segments of a length above 0).", func(s *staging.StatsSnapshot) uint64 { return s.Descriptors }},
	{"described_bytes_total", "Bytes the route's commands' memory descriptors named (the data the far side READs or WRITEs).", func(s *staging.StatsSnapshot) uint64 { return s.DescribedBytes }},
	{"remote_invalidations_total", "Memory descriptors that asked the far side to invalidate their key remotely (nvme: the keyed SGL invalidate subtype).", func(s *staging.StatsSnapshot) uint64 { return s.Invalidations }},
	{"completions_total", "Completions the route's controllers (targets) sent back to their hosts.", func(s *staging.StatsSnapshot) uint64 { return s.Completions }},
	{"gateway_completions_total", "Completions the gateway made in the controller's place: a command it could not stage (a data transfer error), or one with protection information (Invalid Field); nfs: RDMA_ERROR ERR_CHUNK for a call it could not stage.", func(s *staging.StatsSnapshot) uint64 { return s.Answered }},
})

// descStagingInUse is the pool bytes a route's sessions hold as staging.
var descStagingInUse = prometheus.NewDesc("rbridge_route_staging_in_use_bytes", "Pool bytes the route's sessions hold as staging for requests outstanding.", []string{"route"}, nil)

var (
	descProtocolCommands = prometheus.NewDesc("rbridge_route_protocol_commands_total",
		"Commands the route's hosts (clients) sent (nfs: calls; their read list is host_to_controller, write list or reply chunk controller_to_host), by the way their data moves (none, host_to_controller: the target READs the host's memory, controller_to_host: it WRITEs it, bidirectional).",
		[]string{"route", "protocol", "direction"}, nil)
	descProtocolErrors = prometheus.NewDesc("rbridge_route_protocol_errors_total",
		"What was wrong in the route's protocol, by why (malformed_command, malformed_completion: not understood, the session ended; unknown_command_id: a completion for no outstanding command, reused_command_id: a command whose ID was outstanding (nfs: the XID): counted, relayed, or the session ended where the route stages; unstageable, protection_information: answered by the gateway).",
		[]string{"route", "protocol", "why"}, nil)
)

// The UD route counters (ud.go), from its UDStats.
var udRouteCounters = newCounters("rbridge_route_ud_", []string{"route"}, []counterRow[UDStatsSnapshot]{
	{"resolved_total", "UD clients the route resolved (a pair of gateway QPs made for each).", func(s *UDStatsSnapshot) uint64 { return s.Resolved }},
	{"refused_total", "UD clients answered with the target's refusal (or the allow list's).", func(s *UDStatsSnapshot) uint64 { return s.Refused }},
	{"no_qp_total", "UD clients answered \"no QP\": the target did not answer, or no room.", func(s *UDStatsSnapshot) uint64 { return s.NoQP }},
})

var (
	descUDDatagrams = prometheus.NewDesc("rbridge_route_ud_datagrams_total", "UD datagrams relayed.", []string{"route", "direction"}, nil)
	descUDBytes     = prometheus.NewDesc("rbridge_route_ud_payload_bytes_total", "Payload bytes of the UD datagrams relayed.", []string{"route", "direction"}, nil)
	descUDImm       = prometheus.NewDesc("rbridge_route_ud_imm_qpn_rewritten_total", "UD datagrams whose immediate data (their sender's QPN) became the gateway QP's.", []string{"route", "direction"}, nil)
	descUDDropped   = prometheus.NewDesc("rbridge_route_ud_dropped_total", "UD datagrams dropped, by cause (rate: over the route's rate limit, shared by its clients).", []string{"route", "direction", "cause"}, nil)

	descGroupDatagrams = prometheus.NewDesc("rbridge_group_datagrams_total", "Multicast datagrams a group relayed.", []string{"group", "direction"}, nil)
	descGroupBytes     = prometheus.NewDesc("rbridge_group_payload_bytes_total", "Payload bytes of the multicast datagrams relayed.", []string{"group", "direction"}, nil)
	descJoinedGroups   = prometheus.NewDesc("rbridge_joined_groups_relayed", "Multicast groups a joined_on entry relays now (joined on its members' side).", []string{"group"}, nil)
	descJoinedEvents   = prometheus.NewDesc("rbridge_joined_group_events_total", "Groups joined on a joined_on entry's members' side, by what became of them (joined: taken and relayed; left, expired: gone; outside: not within; over_max: over max_groups; configured: named by a group of the file; join_failed: the other side's join failed).", []string{"group", "event"}, nil)
	descJoinedIGMP     = prometheus.NewDesc("rbridge_joined_igmp_messages_total", "IGMP messages on a joined_on entry's members' link (heard: others'; malformed: not parsed; queries_sent: the gateway's as querier; send_failed).", []string{"group", "kind"}, nil)
	descGroupDropped   = prometheus.NewDesc("rbridge_group_dropped_total", "Multicast datagrams dropped, by cause (own: the gateway's own, come back; loop: a copy of what it relayed, come back through another gateway; peer: sent by a gateway the group lists in peers; rate: over the group's rate limit).", []string{"group", "direction", "cause"}, nil)
)

// udDropCauses names the UD drop counters.
var udDropCauses = []struct {
	cause string
	val   func(*UDStatsSnapshot) *[2]uint64
}{
	{"too_long", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropTooLong }},
	{"unknown_peer", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropUnknownPeer }},
	{"pool_empty", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropPoolEmpty }},
	{"no_receive", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropNoReceive }},
	{"send_failed", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropSendFailed }},
	{"own", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropOwn }},
	{"loop", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropLoop }},
	{"peer", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropPeer }},
	{"rate", func(s *UDStatsSnapshot) *[2]uint64 { return &s.DropRate }},
}

// opcodeRow is a route counter per direction and opcode.
type opcodeRow struct {
	desc *prometheus.Desc
	val  func(*session.StatsSnapshot) *[2][session.NumOpcodes]uint64
}

var opcodeRows = []opcodeRow{
	{prometheus.NewDesc("rbridge_route_operations_total",
		"Operations relayed toward the far side, by opcode: a message once, when its last packet arrived (a WRITE posted in chunks as it arrives counts once); a READ or atomic as it arrived. Failures are rbridge_route_operations_failed_total.",
		[]string{"route", "direction", "opcode"}, nil), func(s *session.StatsSnapshot) *[2][session.NumOpcodes]uint64 { return &s.Ops }},
	{prometheus.NewDesc("rbridge_route_payload_bytes_total",
		"Payload bytes of the operations relayed, by opcode: a SEND's or WRITE's payload, the length a READ reads, an atomic's 8.",
		[]string{"route", "direction", "opcode"}, nil), func(s *session.StatsSnapshot) *[2][session.NumOpcodes]uint64 { return &s.Bytes }},
}

var (
	descSessionsOpen = prometheus.NewDesc("rbridge_route_sessions_open", "Sessions of the route running now.", []string{"route"}, nil)
	// A count rather than the lowest rate among the QPs: it adds up
	// across legs and gateways, means the same however many QPs come and
	// go, and is 0 when nothing is throttled, a threshold an alert can
	// hold; each session's QPs' rates are in /status.
	descRateLimited = prometheus.NewDesc("rbridge_transport_dcqcn_rate_limited_qps",
		"The leg's QPs DCQCN holds below their line rate now, after CNPs (each session's rate is in /status).", []string{"leg"}, nil)
	descLegUp = prometheus.NewDesc("rbridge_leg_up",
		"1 while the leg's link carries traffic (a verbs leg's port ACTIVE; a userspace leg's interface operationally up, or unknown as loopback's is), else 0; /status names the state.", []string{"leg"}, nil)
	descLegDowns = prometheus.NewDesc("rbridge_leg_link_downs_total",
		"Times the gateway saw the leg's link go down (a userspace leg's interface, a verbs leg's port), each ending every session through it.", []string{"leg"}, nil)
	descLegSessionsCut = prometheus.NewDesc("rbridge_leg_link_down_sessions_ended_total",
		"Sessions the gateway ended because a leg they crossed went down.", []string{"leg"}, nil)
	descLegMTU      = prometheus.NewDesc("rbridge_leg_path_mtu_bytes", "The largest path MTU a userspace leg carries.", []string{"leg"}, nil)
	descPoolBuffers = prometheus.NewDesc("rbridge_pool_buffers", "Buffers of a pool class.", []string{"class_bytes"}, nil)
	descPoolInUse   = prometheus.NewDesc("rbridge_pool_buffers_in_use", "Buffers of a pool class held now (payloads in flight, posted receives, AF_XDP frames).", []string{"class_bytes"}, nil)
	descPoolGets    = prometheus.NewDesc("rbridge_pool_gets_total", "Buffers asked of a pool class.", []string{"class_bytes"}, nil)
	descPoolEmpty   = prometheus.NewDesc("rbridge_pool_exhausted_total", "Times a pool class was found empty.", []string{"class_bytes"}, nil)
	descPoolOver    = prometheus.NewDesc("rbridge_pool_overreleased_total", "Releases of a buffer nobody held (bugs, counted and ignored).", []string{"class_bytes"}, nil)
)

var legLabels = []string{"leg"}

// The userspace transport device's counters.
var transportCounters = newCounters("rbridge_transport_", legLabels, []counterRow[transport.StatsSnapshot]{
	{"rx_packets_total", "Packets the userspace device received.", func(s *transport.StatsSnapshot) uint64 { return s.RxPackets }},
	{"tx_packets_total", "Packets the userspace device sent.", func(s *transport.StatsSnapshot) uint64 { return s.TxPackets }},
	{"rx_malformed_total", "Received packets dropped as malformed.", func(s *transport.StatsSnapshot) uint64 { return s.RxMalformed }},
	{"rx_unknown_qp_total", "Received packets for a QP the device does not have.", func(s *transport.StatsSnapshot) uint64 { return s.RxUnknownQP }},
	{"rx_duplicate_total", "Received duplicate requests (answered again).", func(s *transport.StatsSnapshot) uint64 { return s.RxDuplicate }},
	{"rx_out_of_sequence_total", "Received packets out of sequence.", func(s *transport.StatsSnapshot) uint64 { return s.RxOutOfSequence }},
	{"tx_naks_total", "NAKs sent (sequence errors and error NAKs).", func(s *transport.StatsSnapshot) uint64 { return s.TxNAKs }},
	{"tx_rnr_naks_total", "RNR NAKs sent.", func(s *transport.StatsSnapshot) uint64 { return s.TxRNRNAKs }},
	{"retransmits_total", "Packets retransmitted.", func(s *transport.StatsSnapshot) uint64 { return s.Retransmit }},
	{"timeouts_total", "ACK timeouts.", func(s *transport.StatsSnapshot) uint64 { return s.Timeouts }},
	{"tail_probes_total", "Tail-loss probes sent before the ACK timeout.", func(s *transport.StatsSnapshot) uint64 { return s.TailProbes }},
	{"rx_cnps_total", "Congestion notification packets received (handled by the DCQCN reaction point).", func(s *transport.StatsSnapshot) uint64 { return s.RxCNPs }},
	{"tx_cnps_total", "Congestion notification packets sent.", func(s *transport.StatsSnapshot) uint64 { return s.TxCNPs }},
	{"rx_ecn_ce_total", "Received packets marked ECN Congestion Experienced.", func(s *transport.StatsSnapshot) uint64 { return s.RxECNCE }},
	{"dcqcn_rate_cuts_total", "Rate cuts DCQCN made on the leg's QPs for the CNPs they received (at most one per QP per 4 us; only on a leg with ecn: true, whose QPs react to CNPs).", func(s *transport.StatsSnapshot) uint64 { return s.RateCuts }},
	{"ud_dropped_total", "UD datagrams dropped (no receive posted).", func(s *transport.StatsSnapshot) uint64 { return s.UDDropped }},
	{"cq_overflows_total", "Completions that found their CQ full.", func(s *transport.StatsSnapshot) uint64 { return s.CQOverflows }},
	{"events_lost_total", "Asynchronous events nobody took before the queue filled.", func(s *transport.StatsSnapshot) uint64 { return s.EventsLost }},
	{"rx_foreign_total", "Received packets that reached one receive loop's socket for a QP another loop serves, handed to that QP there (io: udp with queues: GRO joined them with another QP's; io: afxdp: before the QP moved to the loop its packets arrive at).", func(s *transport.StatsSnapshot) uint64 { return s.RxForeign }},
	{"qps_moved_in_total", "RC QPs a receive loop took over from another, their packets arriving at its socket.", func(s *transport.StatsSnapshot) uint64 { return s.QPsMovedIn }},
	{"read_yields_total", "Times a QP's stream of READ responses gave its receive loop its turn after " + strconv.Itoa(transport.ResponseBudget) + " packets, so that the loop's other QPs were not held up by it.", func(s *transport.StatsSnapshot) uint64 { return s.ReadYields }},
})

// A userspace leg's receive loops (queues), each by itself: io: udp's
// sockets, io: afxdp's AF_XDP sockets (one per receive queue of the NIC,
// whose bytes are of Ethernet frames).
var queueCounters = newCounters("rbridge_leg_queue_", []string{"leg", "queue"}, []counterRow[leg.QueueCounters]{
	{"rx_packets_total", "RoCEv2 packets the receive loop's socket received.", func(s *leg.QueueCounters) uint64 { return s.RxPackets }},
	{"tx_packets_total", "RoCEv2 packets the receive loop's socket sent (its QPs').", func(s *leg.QueueCounters) uint64 { return s.TxPackets }},
	{"rx_bytes_total", "Bytes the receive loop's socket received (UDP payloads; AF_XDP: Ethernet frames).", func(s *leg.QueueCounters) uint64 { return s.RxBytes }},
	{"tx_bytes_total", "Bytes the receive loop's socket sent (UDP payloads; AF_XDP: Ethernet frames).", func(s *leg.QueueCounters) uint64 { return s.TxBytes }},
	{"rx_foreign_total", "Received packets for a QP another receive loop serves, handed to it.", func(s *leg.QueueCounters) uint64 { return s.RxForeign }},
	{"qps_moved_in_total", "RC QPs the receive loop took over from another, their packets arriving at its socket (io: afxdp, where the NIC's RSS picks the queue).", func(s *leg.QueueCounters) uint64 { return s.QPsMovedIn }},
})

// The reuseport program that steers an io: udp leg's datagrams between its
// receive loops' sockets (queues above 1).
var steerCounters = newCounters("rbridge_udp_steer_", legLabels, []counterRow[udpconn.SteerCounters]{
	{"selected_total", "Datagrams the reuseport program gave the socket of their QP's receive loop.", func(s *udpconn.SteerCounters) uint64 { return s.Steered }},
	{"short_total", "Datagrams too short for a BTH, given to receive loop 0.", func(s *udpconn.SteerCounters) uint64 { return s.Short }},
	{"failed_total", "Selections the kernel refused, left to its hash of the 4-tuple.", func(s *udpconn.SteerCounters) uint64 { return s.Failed }},
})

var descQueueQPs = prometheus.NewDesc("rbridge_leg_queue_qps", "QPs a receive loop of a userspace leg serves (its queue's: the CM's QP 1 and UD QPs are queue 0's).", []string{"leg", "queue"}, nil)

// The userspace leg's IB CM counters.
var cmCounters = newCounters("rbridge_cm_", legLabels, []counterRow[cm.StatsSnapshot]{
	{"rx_mads_total", "CM MADs received.", func(s *cm.StatsSnapshot) uint64 { return s.RxMADs }},
	{"tx_mads_total", "CM MADs sent.", func(s *cm.StatsSnapshot) uint64 { return s.TxMADs }},
	{"rx_malformed_total", "CM MADs dropped as malformed.", func(s *cm.StatsSnapshot) uint64 { return s.RxMalformed }},
	{"rx_unknown_total", "CM MADs for no connection the manager knows.", func(s *cm.StatsSnapshot) uint64 { return s.RxUnknown }},
	{"retransmits_total", "CM MADs retransmitted.", func(s *cm.StatsSnapshot) uint64 { return s.Retransmits }},
	{"duplicates_total", "Duplicate CM MADs received.", func(s *cm.StatsSnapshot) uint64 { return s.Duplicates }},
	{"rejects_total", "REJs sent.", func(s *cm.StatsSnapshot) uint64 { return s.Rejects }},
	{"timeouts_total", "CM handshakes that timed out.", func(s *cm.StatsSnapshot) uint64 { return s.Timeouts }},
})

// NAKs and error completions by kind, per userspace leg: a bounded label
// each (the AETH NAK codes, the completion statuses).
var (
	descNAKsSent     = prometheus.NewDesc("rbridge_transport_naks_sent_by_code_total", "NAKs the userspace device sent, by NAK code.", []string{"leg", "code"}, nil)
	descNAKsReceived = prometheus.NewDesc("rbridge_transport_naks_received_by_code_total", "NAKs the userspace device's requesters received, by NAK code.", []string{"leg", "code"}, nil)
	descErrorWCs     = prometheus.NewDesc("rbridge_transport_error_completions_total", "Work completions the userspace device's QPs completed with an error, by status (flushed work among them).", []string{"leg", "status"}, nil)
	nakCodeNames     = [transport.NAKCodes]string{"psn_sequence_error", "invalid_request", "remote_access_error", "remote_operational_error", "invalid_rd_request"}
	statusNames      = func() [transport.NumStatuses]string {
		var out [transport.NumStatuses]string
		for i := range out {
			out[i] = strings.ReplaceAll(transport.Status(i).String(), " ", "_")
		}
		return out
	}()
)

// The UDP socket's counters (a userspace leg with io: udp).
var udpCounters = newCounters("rbridge_udp_", legLabels, []counterRow[udpconn.StatsSnapshot]{
	{"rx_packets_total", "RoCEv2 datagrams received.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxPackets }},
	{"tx_packets_total", "RoCEv2 datagrams sent.", func(s *udpconn.StatsSnapshot) uint64 { return s.TxPackets }},
	{"rx_bad_icrc_total", "Received datagrams whose ICRC is wrong: dropped.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxBadICRC }},
	{"rx_truncated_total", "Received datagrams longer than the buffer: dropped.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxTruncated }},
	{"rx_calls_total", "recvmmsg calls that read datagrams.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxCalls }},
	{"tx_calls_total", "sendmmsg calls that sent datagrams.", func(s *udpconn.StatsSnapshot) uint64 { return s.TxCalls }},
	{"rx_buffers_total", "Buffers read: a datagram, or a GRO buffer of several.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxBuffers }},
	{"tx_buffers_total", "Sends made: a datagram, or a GSO send of several.", func(s *udpconn.StatsSnapshot) uint64 { return s.TxBuffers }},
	{"tx_gso_errors_total", "GSO sends the kernel refused with EIO; the first turns GSO off for the socket.", func(s *udpconn.StatsSnapshot) uint64 { return s.TxGSOErrors }},
	{"rx_bytes_total", "Bytes of RoCEv2 datagrams received.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxBytes }},
	{"tx_bytes_total", "Bytes of RoCEv2 datagrams sent.", func(s *udpconn.StatsSnapshot) uint64 { return s.TxBytes }},
	{"rx_lent_total", "Datagrams received into the pool's buffers and lent to the sessions where they landed (not copied).", func(s *udpconn.StatsSnapshot) uint64 { return s.RxLent }},
	{"rx_packed_total", "Datagrams of short reads (one the kernel did not coalesce, or a few) copied one after another into a pool buffer of the socket's and lent from there, instead of each holding a 64 KiB buffer.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxPacked }},
	{"rx_lend_short_total", "Receive buffers that found none of the pool's free for lending (half its 64 KiB class is kept for the rest) and read into the socket's own memory: their datagrams copied.", func(s *udpconn.StatsSnapshot) uint64 { return s.RxLendShort }},
})

// The AF_XDP socket's counters (a userspace leg with io: afxdp).
var xdpCounters = newCounters("rbridge_xdp_", legLabels, []counterRow[xdp.ConnStats]{
	{"rx_packets_total", "Transport packets received on the AF_XDP socket.", func(s *xdp.ConnStats) uint64 { return s.Received }},
	{"tx_packets_total", "Transport packets put on the transmit ring.", func(s *xdp.ConnStats) uint64 { return s.Sent }},
	{"rx_bytes_total", "Bytes of the Ethernet frames of the transport packets received.", func(s *xdp.ConnStats) uint64 { return s.RxBytes }},
	{"tx_bytes_total", "Bytes of the Ethernet frames of the transport packets sent.", func(s *xdp.ConnStats) uint64 { return s.TxBytes }},
	{"rx_bad_frames_total", "Received frames that are not well-formed RoCEv2: dropped.", func(s *xdp.ConnStats) uint64 { return s.BadFrames }},
	{"rx_bad_icrc_total", "Received RoCEv2 packets whose ICRC is wrong: dropped.", func(s *xdp.ConnStats) uint64 { return s.BadICRC }},
	{"rx_too_long_total", "Received packets longer than the buffer: dropped.", func(s *xdp.ConnStats) uint64 { return s.TooLong }},
	{"rx_ring_drops_total", "Frames the kernel dropped: RX ring full or no free receive frame.", func(s *xdp.ConnStats) uint64 { return s.RXRingDrops }},
	{"rx_lent_total", "Received frames lent to the relay (no copy).", func(s *xdp.ConnStats) uint64 { return s.Lent }},
	{"fill_short_total", "Times no frame was free to refill the fill ring with.", func(s *xdp.ConnStats) uint64 { return s.FillShort }},
	{"rx_waits_total", "Times a read found the RX ring empty and waited for frames.", func(s *xdp.ConnStats) uint64 { return s.RXWaits }},
	{"tx_kicks_total", "sendto calls that had the kernel send the transmit ring.", func(s *xdp.ConnStats) uint64 { return s.TXKicks }},
	{"tx_kicks_skipped_total", "Transmit batches left to the kernel without a sendto: the ring did not ask for a wakeup.", func(s *xdp.ConnStats) uint64 { return s.TXKicksSkipped }},
	{"fill_kicks_total", "recvfrom calls that woke the driver for the fill ring.", func(s *xdp.ConnStats) uint64 { return s.FillKicks }},
	{"fill_kicks_skipped_total", "Looks at the fill ring that found no wakeup asked for: no recvfrom.", func(s *xdp.ConnStats) uint64 { return s.FillKicksSkipped }},
	{"rx_group_packets_total", "Datagrams to a multicast group the leg joined, handed to the group's QPs.", func(s *xdp.ConnStats) uint64 { return s.GroupReceived }},
	{"rx_group_overflow_total", "Datagrams to a joined multicast group dropped: the group's queue was full.", func(s *xdp.ConnStats) uint64 { return s.GroupOverflow }},
	{"rx_group_unjoined_total", "Datagrams to a multicast group the leg has not joined, on the AF_XDP socket: dropped.", func(s *xdp.ConnStats) uint64 { return s.GroupUnjoined }},
	{"tx_held_for_neighbor_total", "Packets held while their neighbour's Ethernet address was resolved.", func(s *xdp.ConnStats) uint64 { return s.HeldForNeighbor }},
	{"tx_no_neighbor_total", "Packets dropped for want of their neighbour's Ethernet address (it did not answer, no route, or too many held).", func(s *xdp.ConnStats) uint64 { return s.NoNeighbor }},
})

// The AF_XDP leg's neighbour resolutions (xdp.Resolver), in its namespace.
var neighborCounters = newCounters("rbridge_xdp_neighbor_", legLabels, []counterRow[xdp.ResolverStatsSnapshot]{
	{"resolutions_total", "Neighbours the kernel was asked to resolve (ARP, IPv6 neighbour discovery): no complete entry in its table.", func(s *xdp.ResolverStatsSnapshot) uint64 { return s.Asked }},
	{"answered_total", "Resolutions the neighbour answered.", func(s *xdp.ResolverStatsSnapshot) uint64 { return s.Answered }},
	{"failed_total", "Resolutions that failed: no answer in time (the neighbour is then refused for a while without asking).", func(s *xdp.ResolverStatsSnapshot) uint64 { return s.Failed }},
})

// The verbs endpoints' counters, over every connection of a verbs leg.
// A quic leg's counters, over its sessions' streams.
var quicCounters = newCounters("rbridge_quic_", legLabels, []counterRow[leg.QUICLegSnapshot]{
	{"ops_sent_total", "RDMA operations sent to the peer gateway (Op frames).", func(s *leg.QUICLegSnapshot) uint64 { return s.OpsSent }},
	{"ops_received_total", "RDMA operations received from the peer gateway (Op frames).", func(s *leg.QUICLegSnapshot) uint64 { return s.OpsReceived }},
	{"sent_bytes_total", "Payload and READ data bytes sent to the peer gateway.", func(s *leg.QUICLegSnapshot) uint64 { return s.BytesSent }},
	{"received_bytes_total", "Payload and READ data bytes received from the peer gateway.", func(s *leg.QUICLegSnapshot) uint64 { return s.BytesReceived }},
	{"completions_sent_total", "Completions sent back for operations the peer gateway sent.", func(s *leg.QUICLegSnapshot) uint64 { return s.CompletionsSent }},
	{"completions_received_total", "Completions received for operations sent to the peer gateway.", func(s *leg.QUICLegSnapshot) uint64 { return s.Completions }},
	{"credit_waits_total", "Operations from the peer gateway that waited for pool buffers or session credit (the stream held: backpressure).", func(s *leg.QUICLegSnapshot) uint64 { return s.Waits }},
	{"peer_refused_total", "Peer gateway certificates refused (another CA, expired, the wrong name).", func(s *leg.QUICLegSnapshot) uint64 { return s.Refused }},
})

var descQUICConns = prometheus.NewDesc("rbridge_quic_peer_connections", "Connections to the peer gateway that are up.", legLabels, nil)

var verbsCounters = newCounters("rbridge_verbs_", legLabels, []counterRow[leg.VerbsStatsSnapshot]{
	{"lost_acked_total", "SENDs the HCA acknowledged to the peer that the far side then failed: each ended its session with an error on both connections (a verbs leg acknowledges on arrival, before relaying).", func(s *leg.VerbsStatsSnapshot) uint64 { return s.LostAcked }},
	{"recv_starved_total", "Times a receive could not be posted for want of a pool buffer (the peer sees RNR meanwhile: backpressure, not loss).", func(s *leg.VerbsStatsSnapshot) uint64 { return s.RecvStarved }},
	{"qp_errors_total", "QPs the HCA moved to the error state and said why in an asynchronous event (a peer's READ, WRITE or atomic the gateway's responder refused, more READs than its responder resources, a fatal error): each ended its session with that reason.", func(s *leg.VerbsStatsSnapshot) uint64 { return s.QPErrors }},
	{"staging_exposed_total", "Staging buffers opened to a peer for one request (a memory window, or an MR on a device without windows).", func(s *leg.VerbsStatsSnapshot) uint64 { return s.Exposed }},
	{"staging_revoked_total", "Staging buffers whose peer access ended: exposed less revoked is what peers may reach now.", func(s *leg.VerbsStatsSnapshot) uint64 { return s.Revoked }},
	{"staging_registrations_total", "Memory registrations made for staging: one per exposure, less those that bound their window over an idle registration of the same memory kept from an earlier request (a device with memory windows keeps up to 1024).", func(s *leg.VerbsStatsSnapshot) uint64 { return s.Registered }},
	{"staging_own_pds_total", "Connections given a protection domain of their own, with the pool registered in it, because their route stages on a device without memory windows (siw): the staging MRs exposed on one are valid on its QP alone.", func(s *leg.VerbsStatsSnapshot) uint64 { return s.OwnPDs }},
})

// The XDP classifier's counters (a userspace leg with io: afxdp): what it
// redirected to the leg's AF_XDP socket (its QPs' packets and its groups'
// datagrams), passed to the kernel and why,
// dropped and why, and the CNPs it answered ECN-CE with.
var classifierCounters = newCounters("rbridge_xdp_classifier_", legLabels, []counterRow[xdp.Counters]{
	{"redirected_total", "Packets the XDP program sent to the leg's AF_XDP socket.", func(s *xdp.Counters) uint64 { return s.Redirected }},
	{"passed_not_roce_total", "Packets passed to the kernel: not UDP to port 4791.", func(s *xdp.Counters) uint64 { return s.NotRoCE }},
	{"passed_unowned_total", "RoCEv2 packets passed to the kernel: for a QP the gateway does not own.", func(s *xdp.Counters) uint64 { return s.Unowned }},
	{"passed_no_socket_total", "RoCEv2 packets for an owned QP passed to the kernel: no AF_XDP socket on the receiving queue.", func(s *xdp.Counters) uint64 { return s.NoSocket }},
	{"dropped_truncated_total", "RoCEv2 packets dropped: shorter than their headers, or inconsistent lengths.", func(s *xdp.Counters) uint64 { return s.DropTruncated }},
	{"dropped_version_total", "RoCEv2 packets dropped: BTH transport version not 0.", func(s *xdp.Counters) uint64 { return s.DropVersion }},
	{"dropped_opcode_total", "RoCEv2 packets dropped: a reserved or unsupported opcode.", func(s *xdp.Counters) uint64 { return s.DropOpcode }},
	{"dropped_fault_total", "Packets dropped by fault injection (tests).", func(s *xdp.Counters) uint64 { return s.DropFault }},
	{"cnps_sent_total", "CNPs the XDP program sent in answer to ECN-CE.", func(s *xdp.Counters) uint64 { return s.CNPSent }},
	{"cnps_rate_limited_total", "ECN-CE packets within their QP's CNP interval: no CNP sent.", func(s *xdp.Counters) uint64 { return s.CNPLimited }},
	{"cnps_failed_total", "CNPs due that could not be built from the packet.", func(s *xdp.Counters) uint64 { return s.CNPFailed }},
	{"passed_unjoined_total", "RoCEv2 datagrams to QPN 0xFFFFFF passed to the kernel: for a multicast group the leg has not joined.", func(s *xdp.Counters) uint64 { return s.Unjoined }},
})

// metricsSnapshot is what a scrape reads of a gateway, at one moment.
type metricsSnapshot struct {
	routes    []routeMetrics
	protocols []protocolMetrics
	legs      []legMetrics
	pool      []pool.ClassStats
}

type routeMetrics struct {
	name     string
	open     int
	gw       GatewayStatsSnapshot
	sessions session.StatsSnapshot // ended sessions' and running ones'
	ud       *UDStatsSnapshot      // a UD route's
}

// protocolMetrics are a route's protocol's counters.
type protocolMetrics struct {
	routeProtocol
	stats staging.StatsSnapshot
}

type legMetrics struct {
	name  string
	state string // the link's state (LegStatus.State)
	up    bool
	// downs and cut: the link-down events the gateway saw, and the
	// sessions they ended (linkdown.go).
	downs, cut uint64
	nic        *nicPort // verbs legs whose port counters were found
	port       *portcounters.Port
	leg.Counters
}

// metrics reads the gateway's counters.
func (g *Gateway) metrics() metricsSnapshot {
	var m metricsSnapshot
	idx := map[string]int{}
	g.mu.Lock()
	// Every route that ever ran: a route a reload removed keeps its
	// totals, and its sessions may still run.
	names := make([]string, 0, len(g.ended))
	for name := range g.ended {
		names = append(names, name)
	}
	slices.Sort(names)
	stats := make([]*GatewayStats, 0, len(names))
	for _, name := range names {
		idx[name] = len(m.routes)
		m.routes = append(m.routes, routeMetrics{name: name, sessions: *g.ended[name]})
		stats = append(stats, g.routeStats[name])
	}
	for s, info := range g.sessions {
		i, ok := idx[info.route]
		if !ok {
			continue // cannot happen: a route's entries are made before it accepts
		}
		r := &m.routes[i]
		r.open++
		r.sessions.Add(s.Stats().Snapshot())
	}
	for rp, st := range g.protocols {
		m.protocols = append(m.protocols, protocolMetrics{routeProtocol: rp, stats: st.Snapshot()})
	}
	cfg := g.cfg
	downs := maps.Clone(g.linkDowns)
	g.mu.Unlock()
	slices.SortFunc(m.protocols, func(a, b protocolMetrics) int {
		return cmp.Or(strings.Compare(a.route, b.route), strings.Compare(a.protocol, b.protocol))
	})
	// The route's GatewayStats after its sessions: a session counted
	// above has been accepted.
	for i := range m.routes {
		m.routes[i].gw = stats[i].Snapshot()
		m.routes[i].ud = g.UDStats(m.routes[i].name)
	}
	for i := range cfg.Legs {
		name := cfg.Legs[i].Name
		lm := legMetrics{name: name}
		if l := g.legs[name]; l != nil {
			l.Counters(&lm.Counters)
		}
		// A verbs leg's port is read once for its state and counters; a
		// port unreadable now (the device went away) is down and has no
		// counters this scrape.
		if c := downs[name]; c != nil {
			lm.downs, lm.cut = c.downs.Load(), c.cut.Load()
		}
		var p *portcounters.Port
		lm.state, lm.up, p = g.linkState(name, true)
		if n := g.nics[name]; n != nil && p != nil {
			lm.nic, lm.port = n, p
		}
		m.legs = append(m.legs, lm)
	}
	m.pool = g.pool.Stats()
	return m
}

// collector is the gateway's prometheus.Collector.
type collector struct{ g *Gateway }

var _ prometheus.Collector = collector{}

// NewCollector returns the Prometheus collector of the gateway's metrics
// (rbridge_route_*, rbridge_pool_*, per userspace leg
// rbridge_transport_*, rbridge_cm_*, rbridge_udp_* or rbridge_xdp_*, and
// per verbs leg rbridge_verbs_* and its port's rbridge_nic_*); it reads
// the gateway's counters when scraped.
func NewCollector(g *Gateway) prometheus.Collector { return collector{g: g} }

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, n := range c.g.nics {
		for _, d := range n.descs {
			ch <- d
		}
	}
	for _, c := range routeCounters {
		ch <- c.desc
	}
	for _, r := range directionRows {
		ch <- r.desc
	}
	ch <- descStagingInUse
	for _, r := range opcodeRows {
		ch <- r.desc
	}
	describe(ch, udRouteCounters)
	describe(ch, protocolCounters)
	ch <- descProtocolCommands
	ch <- descProtocolErrors
	for _, d := range []*prometheus.Desc{descUDDatagrams, descUDBytes, descUDImm, descUDDropped, descGroupDatagrams, descGroupBytes, descGroupDropped,
		descJoinedGroups, descJoinedEvents, descJoinedIGMP} {
		ch <- d
	}
	for _, d := range []*prometheus.Desc{descSessionsOpen, descLegUp, descLegDowns, descLegSessionsCut, descLegMTU, descRateLimited, descPoolBuffers, descPoolInUse, descPoolGets, descPoolEmpty, descPoolOver} {
		ch <- d
	}
	describe(ch, transportCounters)
	describe(ch, cmCounters)
	describe(ch, udpCounters)
	describe(ch, queueCounters)
	describe(ch, steerCounters)
	ch <- descQueueQPs
	describe(ch, xdpCounters)
	describe(ch, neighborCounters)
	describe(ch, verbsCounters)
	describe(ch, quicCounters)
	describe(ch, classifierCounters)
	for _, d := range []*prometheus.Desc{descNAKsSent, descNAKsReceived, descErrorWCs} {
		ch <- d
	}
	ch <- descQUICConns
	ch <- descBuildInfo
}

// descBuildInfo is the binary the gateway runs in, as a constant 1 with
// labels, the Prometheus convention.
var descBuildInfo = prometheus.NewDesc("rbridge_build_info", "The rbridge binary running: its version, VCS commit and Go version (always 1).", []string{"version", "commit", "goversion"}, nil)

func describe[S any](ch chan<- *prometheus.Desc, cs []counter[S]) {
	for _, c := range cs {
		ch <- c.desc
	}
}

func collect[S any](ch chan<- prometheus.Metric, cs []counter[S], s *S, labels ...string) {
	for _, c := range cs {
		ch <- prometheus.MustNewConstMetric(c.desc, c.kind, float64(c.val(s)), labels...)
	}
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	b := c.g.build
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, b.Version, b.Commit, b.GoVersion)
	m := c.g.metrics()
	for i := range m.routes {
		r := &m.routes[i]
		ch <- prometheus.MustNewConstMetric(descSessionsOpen, prometheus.GaugeValue, float64(r.open), r.name)
		ch <- prometheus.MustNewConstMetric(descStagingInUse, prometheus.GaugeValue, float64(r.sessions.StagingInUse), r.name)
		collect(ch, routeCounters, &r.gw, r.name)
		for _, row := range directionRows {
			v := row.val(&r.sessions)
			for d, dir := range directions {
				ch <- prometheus.MustNewConstMetric(row.desc, prometheus.CounterValue, float64(v[d]), r.name, dir)
			}
		}
		for _, row := range opcodeRows {
			v := row.val(&r.sessions)
			for d, dir := range directions {
				for o := range session.NumOpcodes {
					ch <- prometheus.MustNewConstMetric(row.desc, prometheus.CounterValue, float64(v[d][o]), r.name, dir, leg.OpcodeName(transport.Opcode(o)))
				}
			}
		}
		if r.ud != nil {
			collectUD(ch, r.name, r.ud)
		}
	}
	for i := range m.protocols {
		p := &m.protocols[i]
		collect(ch, protocolCounters, &p.stats, p.route, p.protocol)
		for d, n := range p.stats.Commands {
			ch <- prometheus.MustNewConstMetric(descProtocolCommands, prometheus.CounterValue, float64(n), p.route, p.protocol, staging.DataDirection(d).String())
		}
		for w, n := range p.stats.Errors {
			ch <- prometheus.MustNewConstMetric(descProtocolErrors, prometheus.CounterValue, float64(n), p.route, p.protocol, staging.Why(w).String())
		}
	}
	for _, gs := range c.g.groupStatus() {
		for d, dir := range groupDirs {
			ch <- prometheus.MustNewConstMetric(descGroupDatagrams, prometheus.CounterValue, float64(gs.Stats.Datagrams[d]), gs.Name, dir)
			ch <- prometheus.MustNewConstMetric(descGroupBytes, prometheus.CounterValue, float64(gs.Stats.Bytes[d]), gs.Name, dir)
			for _, cause := range udDropCauses {
				ch <- prometheus.MustNewConstMetric(descGroupDropped, prometheus.CounterValue, float64(cause.val(&gs.Stats)[d]), gs.Name, dir, cause.cause)
			}
		}
	}
	for _, js := range c.g.joinedStatus() {
		ch <- prometheus.MustNewConstMetric(descJoinedGroups, prometheus.GaugeValue, float64(len(js.Groups)), js.Name)
		st := &js.Stats
		for _, e := range []struct {
			name string
			v    uint64
		}{{"joined", st.Joined}, {"left", st.Left}, {"expired", st.Expired}, {"outside", st.Outside}, {"over_max", st.OverMax},
			{"configured", st.Configured}, {"join_failed", st.JoinFailed}} {
			ch <- prometheus.MustNewConstMetric(descJoinedEvents, prometheus.CounterValue, float64(e.v), js.Name, e.name)
		}
		for _, k := range []struct {
			name string
			v    uint64
		}{{"heard", st.Heard}, {"malformed", st.Malformed}, {"queries_sent", st.QueriesSent}, {"send_failed", st.SendFailed}} {
			ch <- prometheus.MustNewConstMetric(descJoinedIGMP, prometheus.CounterValue, float64(k.v), js.Name, k.name)
		}
	}
	sort.Slice(m.pool, func(i, j int) bool { return m.pool[i].Size < m.pool[j].Size })
	for _, p := range m.pool {
		size := strconv.Itoa(p.Size)
		ch <- prometheus.MustNewConstMetric(descPoolBuffers, prometheus.GaugeValue, float64(p.Total), size)
		ch <- prometheus.MustNewConstMetric(descPoolInUse, prometheus.GaugeValue, float64(p.Total-p.Free), size)
		ch <- prometheus.MustNewConstMetric(descPoolGets, prometheus.CounterValue, float64(p.Gets), size)
		ch <- prometheus.MustNewConstMetric(descPoolEmpty, prometheus.CounterValue, float64(p.Exhausted), size)
		ch <- prometheus.MustNewConstMetric(descPoolOver, prometheus.CounterValue, float64(p.Overreleased), size)
	}
	for _, l := range m.legs {
		up := 0.0
		if l.up {
			up = 1
		}
		ch <- prometheus.MustNewConstMetric(descLegUp, prometheus.GaugeValue, up, l.name)
		ch <- prometheus.MustNewConstMetric(descLegDowns, prometheus.CounterValue, float64(l.downs), l.name)
		ch <- prometheus.MustNewConstMetric(descLegSessionsCut, prometheus.CounterValue, float64(l.cut), l.name)
		if l.MTU > 0 {
			ch <- prometheus.MustNewConstMetric(descLegMTU, prometheus.GaugeValue, float64(l.MTU), l.name)
		}
		if t := l.Transport; t != nil {
			collect(ch, transportCounters, t, l.name)
			for i, code := range nakCodeNames {
				ch <- prometheus.MustNewConstMetric(descNAKsSent, prometheus.CounterValue, float64(t.TxNAKCodes[i]), l.name, code)
				ch <- prometheus.MustNewConstMetric(descNAKsReceived, prometheus.CounterValue, float64(t.RxNAKCodes[i]), l.name, code)
			}
			for i, st := range statusNames[1:] {
				ch <- prometheus.MustNewConstMetric(descErrorWCs, prometheus.CounterValue, float64(t.ErrorCompletions[i+1]), l.name, st)
			}
			ch <- prometheus.MustNewConstMetric(descRateLimited, prometheus.GaugeValue, float64(l.Limited), l.name)
		}
		if l.CM != nil {
			collect(ch, cmCounters, l.CM, l.name)
		}
		if l.UDP != nil {
			collect(ch, udpCounters, l.UDP, l.name)
		}
		if l.Steer != nil {
			collect(ch, steerCounters, l.Steer, l.name)
		}
		for i := range l.Queues {
			q := &l.Queues[i]
			collect(ch, queueCounters, q, l.name, strconv.Itoa(q.Queue))
			ch <- prometheus.MustNewConstMetric(descQueueQPs, prometheus.GaugeValue, float64(q.QPs), l.name, strconv.Itoa(q.Queue))
		}
		if l.XDP != nil {
			collect(ch, xdpCounters, l.XDP, l.name)
		}
		if l.Neigh != nil {
			collect(ch, neighborCounters, l.Neigh, l.name)
		}
		if l.Verbs != nil {
			collect(ch, verbsCounters, l.Verbs, l.name)
		}
		if l.Prog != nil {
			collect(ch, classifierCounters, l.Prog, l.name)
		}
		if l.QUIC != nil {
			collect(ch, quicCounters, l.QUIC, l.name)
			ch <- prometheus.MustNewConstMetric(descQUICConns, prometheus.GaugeValue, float64(l.QUIC.Conns), l.name)
		}
		if l.nic != nil {
			l.nic.collect(ch, l.port)
		}
	}
}

func collectUD(ch chan<- prometheus.Metric, route string, s *UDStatsSnapshot) {
	collect(ch, udRouteCounters, s, route)
	for d, dir := range directions {
		ch <- prometheus.MustNewConstMetric(descUDDatagrams, prometheus.CounterValue, float64(s.Datagrams[d]), route, dir)
		ch <- prometheus.MustNewConstMetric(descUDBytes, prometheus.CounterValue, float64(s.Bytes[d]), route, dir)
		ch <- prometheus.MustNewConstMetric(descUDImm, prometheus.CounterValue, float64(s.ImmQPNRewritten[d]), route, dir)
		for _, c := range udDropCauses {
			ch <- prometheus.MustNewConstMetric(descUDDropped, prometheus.CounterValue, float64(c.val(s)[d]), route, dir, c.cause)
		}
	}
}
