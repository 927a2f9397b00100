package ibv

import (
	"fmt"
	"strings"
)

// The values below are libibverbs' and librdmacm's own; consts_linux.go
// fails to compile if any of them drifts from the C headers.

// PortState is a port's logical state (enum ibv_port_state).
type PortState uint8

// Port states.
const (
	PortNop         PortState = 0
	PortDown        PortState = 1
	PortInit        PortState = 2
	PortArmed       PortState = 3
	PortActive      PortState = 4
	PortActiveDefer PortState = 5
)

var portStateNames = [...]string{"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"}

func (s PortState) String() string { return enumName(portStateNames[:], int(s), "PortState") }

// LinkLayer says whether a port speaks InfiniBand or Ethernet (RoCE, iWARP).
type LinkLayer uint8

// Link layers.
const (
	LinkLayerUnspecified LinkLayer = 0
	LinkLayerInfiniBand  LinkLayer = 1
	LinkLayerEthernet    LinkLayer = 2
)

var linkLayerNames = [...]string{"Unspecified", "InfiniBand", "Ethernet"}

func (l LinkLayer) String() string { return enumName(linkLayerNames[:], int(l), "LinkLayer") }

// Transport is a device's transport (enum ibv_transport_type).
type Transport int8

// Transports.
const (
	TransportUnknown Transport = -1
	TransportIB      Transport = 0 // InfiniBand and RoCE
	TransportIWARP   Transport = 1
)

func (t Transport) String() string {
	switch t {
	case TransportIB:
		return "InfiniBand"
	case TransportIWARP:
		return "iWARP"
	}
	return fmt.Sprintf("Transport(%d)", int8(t))
}

// Access is a set of memory region and QP access flags (enum ibv_access_flags).
type Access uint32

// Access flags.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	AccessMWBind       Access = 1 << 4
	AccessZeroBased    Access = 1 << 5
	AccessOnDemand     Access = 1 << 6
	AccessHugeTLB      Access = 1 << 7
	// AccessAll is what a gateway buffer needs: local write and every
	// remote access.
	AccessAll = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

var accessNames = [...]string{"LOCAL_WRITE", "REMOTE_WRITE", "REMOTE_READ", "REMOTE_ATOMIC", "MW_BIND", "ZERO_BASED", "ON_DEMAND", "HUGETLB"}

func (a Access) String() string { return flagNames(accessNames[:], uint64(a)) }

// QPType is a queue pair's transport service (enum ibv_qp_type).
type QPType uint8

// QP types.
const (
	QPTypeRC QPType = 2
	QPTypeUC QPType = 3
	QPTypeUD QPType = 4
)

func (t QPType) String() string {
	switch t {
	case QPTypeRC:
		return "RC"
	case QPTypeUC:
		return "UC"
	case QPTypeUD:
		return "UD"
	}
	return fmt.Sprintf("QPType(%d)", uint8(t))
}

// QPState is a queue pair's state (enum ibv_qp_state).
//
//	RESET -> INIT -> RTR -> RTS      (each by Modify)
//	  any ---------------------> ERR (Modify, or a fatal error)
//	  any ---------------------> RESET
type QPState uint8

// QP states.
const (
	QPStateReset   QPState = 0
	QPStateInit    QPState = 1
	QPStateRTR     QPState = 2
	QPStateRTS     QPState = 3
	QPStateSQD     QPState = 4
	QPStateSQE     QPState = 5
	QPStateErr     QPState = 6
	QPStateUnknown QPState = 7
)

var qpStateNames = [...]string{"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"}

func (s QPState) String() string { return enumName(qpStateNames[:], int(s), "QPState") }

// QPAttrMask says which QPAttr fields a Modify applies (enum ibv_qp_attr_mask).
type QPAttrMask uint32

// QP attribute mask bits.
const (
	QPAttrState           QPAttrMask = 1 << 0
	QPAttrCurState        QPAttrMask = 1 << 1
	QPAttrAccessFlags     QPAttrMask = 1 << 3
	QPAttrPKeyIndex       QPAttrMask = 1 << 4
	QPAttrPort            QPAttrMask = 1 << 5
	QPAttrQKey            QPAttrMask = 1 << 6
	QPAttrAV              QPAttrMask = 1 << 7
	QPAttrPathMTU         QPAttrMask = 1 << 8
	QPAttrTimeout         QPAttrMask = 1 << 9
	QPAttrRetryCnt        QPAttrMask = 1 << 10
	QPAttrRNRRetry        QPAttrMask = 1 << 11
	QPAttrRQPSN           QPAttrMask = 1 << 12
	QPAttrMaxQPRDAtomic   QPAttrMask = 1 << 13
	QPAttrMinRNRTimer     QPAttrMask = 1 << 15
	QPAttrSQPSN           QPAttrMask = 1 << 16
	QPAttrMaxDestRDAtomic QPAttrMask = 1 << 17
	QPAttrCap             QPAttrMask = 1 << 19
	QPAttrDestQPN         QPAttrMask = 1 << 20
)

var qpAttrMaskNames = [...]string{"STATE", "CUR_STATE", "EN_SQD_ASYNC_NOTIFY", "ACCESS_FLAGS", "PKEY_INDEX", "PORT", "QKEY", "AV", "PATH_MTU", "TIMEOUT", "RETRY_CNT", "RNR_RETRY", "RQ_PSN", "MAX_QP_RD_ATOMIC", "ALT_PATH", "MIN_RNR_TIMER", "SQ_PSN", "MAX_DEST_RD_ATOMIC", "PATH_MIG_STATE", "CAP", "DEST_QPN"}

func (m QPAttrMask) String() string { return flagNames(qpAttrMaskNames[:], uint64(m)) }

// Opcode is a send work request's operation (enum ibv_wr_opcode).
type Opcode uint8

// Send opcodes.
const (
	OpWrite        Opcode = 0
	OpWriteWithImm Opcode = 1
	OpSend         Opcode = 2
	OpSendWithImm  Opcode = 3
	OpRead         Opcode = 4
	OpCompareSwap  Opcode = 5
	OpFetchAdd     Opcode = 6
	OpLocalInv     Opcode = 7
	OpBindMW       Opcode = 8
	OpSendWithInv  Opcode = 9
)

var opcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o Opcode) String() string { return enumName(opcodeNames[:], int(o), "Opcode") }

// SendFlags modify a send work request (enum ibv_send_flags).
type SendFlags uint32

// Send flags.
const (
	SendFence     SendFlags = 1 << 0
	SendSignaled  SendFlags = 1 << 1
	SendSolicited SendFlags = 1 << 2
	SendInline    SendFlags = 1 << 3
)

var sendFlagNames = [...]string{"FENCE", "SIGNALED", "SOLICITED", "INLINE"}

func (f SendFlags) String() string { return flagNames(sendFlagNames[:], uint64(f)) }

// WCStatus is a completion's status (enum ibv_wc_status).
type WCStatus uint32

// Completion statuses.
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocQPOpErr     WCStatus = 2
	WCLocEECOpErr    WCStatus = 3
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCMWBindErr      WCStatus = 6
	WCBadRespErr     WCStatus = 7
	WCLocAccessErr   WCStatus = 8
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCLocRDDViolErr  WCStatus = 14
	WCRemInvRDReqErr WCStatus = 15
	WCRemAbortErr    WCStatus = 16
	WCInvEECNErr     WCStatus = 17
	WCInvEECStateErr WCStatus = 18
	WCFatalErr       WCStatus = 19
	WCRespTimeoutErr WCStatus = 20
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = [...]string{"success", "local length error", "local QP operation error", "local EE context operation error", "local protection error", "Work Request Flushed Error", "memory management operation error", "bad response error", "local access error", "remote invalid request error", "remote access error", "remote operation error", "transport retry counter exceeded", "RNR retry counter exceeded", "local RDD violation error", "remote invalid RD request", "aborted error", "invalid EE context number", "invalid EE context state", "fatal error", "response timeout error", "general error"}

// String is the text of ibv_wc_status_str.
func (s WCStatus) String() string { return enumName(wcStatusNames[:], int(s), "WCStatus") }

// WCOpcode is what a completion completed (enum ibv_wc_opcode). Receive
// completions have the WCRecv bit set.
type WCOpcode uint32

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCWrite           WCOpcode = 1
	WCRead            WCOpcode = 2
	WCCompareSwap     WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRecv            WCOpcode = 1 << 7
	WCRecvRDMAWithImm WCOpcode = WCRecv + 1
)

func (o WCOpcode) String() string {
	switch o {
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	names := [...]string{"SEND", "RDMA_WRITE", "RDMA_READ", "COMP_SWAP", "FETCH_ADD", "BIND_MW", "LOCAL_INV"}
	return enumName(names[:], int(o), "WCOpcode")
}

// WCFlags qualify a completion (enum ibv_wc_flags).
type WCFlags uint32

// Completion flags.
const (
	WCFlagGRH     WCFlags = 1 << 0
	WCFlagWithImm WCFlags = 1 << 1
	WCFlagWithInv WCFlags = 1 << 3
)

// AsyncEventType is an asynchronous event's type (enum ibv_event_type).
type AsyncEventType uint32

// Async event types.
const (
	EventCQErr            AsyncEventType = 0
	EventQPFatal          AsyncEventType = 1
	EventQPReqErr         AsyncEventType = 2
	EventQPAccessErr      AsyncEventType = 3
	EventCommEst          AsyncEventType = 4
	EventSQDrained        AsyncEventType = 5
	EventPathMig          AsyncEventType = 6
	EventPathMigErr       AsyncEventType = 7
	EventDeviceFatal      AsyncEventType = 8
	EventPortActive       AsyncEventType = 9
	EventPortErr          AsyncEventType = 10
	EventLIDChange        AsyncEventType = 11
	EventPKeyChange       AsyncEventType = 12
	EventSMChange         AsyncEventType = 13
	EventSRQErr           AsyncEventType = 14
	EventSRQLimitReached  AsyncEventType = 15
	EventQPLastWQE        AsyncEventType = 16
	EventClientReregister AsyncEventType = 17
	EventGIDChange        AsyncEventType = 18
	EventWQFatal          AsyncEventType = 19
)

var asyncEventNames = [...]string{"CQ error", "local work queue catastrophic error", "invalid request local work queue error", "local access violation work queue error", "communication established", "send queue drained", "path migrated", "path migration request error", "local catastrophic error", "port active", "port error", "LID change", "P_Key change", "SM change", "SRQ catastrophic error", "SRQ limit reached", "last WQE reached", "client reregistration", "GID table change", "WQ fatal"}

func (t AsyncEventType) String() string {
	return enumName(asyncEventNames[:], int(t), "AsyncEventType")
}

// CMEventType is an rdma_cm event's type (enum rdma_cm_event_type).
type CMEventType uint32

// rdma_cm event types.
const (
	CMAddrResolved    CMEventType = 0
	CMAddrError       CMEventType = 1
	CMRouteResolved   CMEventType = 2
	CMRouteError      CMEventType = 3
	CMConnectRequest  CMEventType = 4
	CMConnectResponse CMEventType = 5
	CMConnectError    CMEventType = 6
	CMUnreachable     CMEventType = 7
	CMRejected        CMEventType = 8
	CMEstablished     CMEventType = 9
	CMDisconnected    CMEventType = 10
	CMDeviceRemoval   CMEventType = 11
	CMMulticastJoin   CMEventType = 12
	CMMulticastError  CMEventType = 13
	CMAddrChange      CMEventType = 14
	CMTimewaitExit    CMEventType = 15
)

var cmEventNames = [...]string{"RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ADDR_ERROR", "RDMA_CM_EVENT_ROUTE_RESOLVED", "RDMA_CM_EVENT_ROUTE_ERROR", "RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_CONNECT_RESPONSE", "RDMA_CM_EVENT_CONNECT_ERROR", "RDMA_CM_EVENT_UNREACHABLE", "RDMA_CM_EVENT_REJECTED", "RDMA_CM_EVENT_ESTABLISHED", "RDMA_CM_EVENT_DISCONNECTED", "RDMA_CM_EVENT_DEVICE_REMOVAL", "RDMA_CM_EVENT_MULTICAST_JOIN", "RDMA_CM_EVENT_MULTICAST_ERROR", "RDMA_CM_EVENT_ADDR_CHANGE", "RDMA_CM_EVENT_TIMEWAIT_EXIT"}

// String is the text of rdma_event_str.
func (t CMEventType) String() string { return enumName(cmEventNames[:], int(t), "CMEventType") }

// PortSpace is an rdma_cm port space (enum rdma_port_space).
type PortSpace uint16

// Port spaces.
const (
	PortSpaceTCP PortSpace = 0x0106 // reliable connected (RC)
	PortSpaceUDP PortSpace = 0x0111 // unreliable datagram (UD)
	// PortSpaceIPoIB is UD in IPoIB's multicast groups: a join there uses
	// the IPoIB form of the group's MGID and the Q_Key of the port's
	// IPoIB broadcast group. The kernel takes it on InfiniBand ports only.
	PortSpaceIPoIB PortSpace = 0x0002
)

// datagram says whether the port space is one of UD's.
func (ps PortSpace) datagram() bool { return ps == PortSpaceUDP || ps == PortSpaceIPoIB }

func enumName(names []string, v int, typ string) string {
	if v >= 0 && v < len(names) && names[v] != "" {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

func flagNames(names []string, v uint64) string {
	if v == 0 {
		return "0"
	}
	var parts []string
	for i := 0; i < 64 && v != 0; i++ {
		if v&(1<<i) == 0 {
			continue
		}
		v &^= 1 << i
		if i < len(names) && names[i] != "" {
			parts = append(parts, names[i])
		} else {
			parts = append(parts, fmt.Sprintf("0x%x", uint64(1)<<i))
		}
	}
	return strings.Join(parts, "|")
}
