package ibv

import (
	"fmt"
	"time"
)

// QPCap sizes a queue pair's queues (struct ibv_qp_cap).
type QPCap struct {
	MaxSendWR     uint32
	MaxRecvWR     uint32
	MaxSendSGE    uint32
	MaxRecvSGE    uint32
	MaxInlineData uint32
}

// QPOptions configure NewQP and CMID.CreateQP.
type QPOptions struct {
	Type   QPType // QPTypeRC or QPTypeUD
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ // optional: receive from a shared queue
	Cap    QPCap
	SigAll bool // every send WR completes, whatever its SendSignaled flag
}

func (o *QPOptions) check() error {
	switch {
	case o.Type != QPTypeRC && o.Type != QPTypeUD && o.Type != QPTypeUC:
		return fmt.Errorf("qp options: type %v not supported", o.Type)
	case o.SendCQ == nil || o.RecvCQ == nil:
		return fmt.Errorf("qp options: SendCQ and RecvCQ are required")
	case o.Cap.MaxSendWR == 0 || (o.Cap.MaxRecvWR == 0 && o.SRQ == nil):
		return fmt.Errorf("qp options: Cap.MaxSendWR and Cap.MaxRecvWR must be > 0")
	}
	if o.Cap.MaxSendSGE == 0 {
		o.Cap.MaxSendSGE = 1
	}
	if o.Cap.MaxRecvSGE == 0 && o.SRQ == nil {
		o.Cap.MaxRecvSGE = 1
	}
	return nil
}

// GRH is the global route of an address vector (struct ibv_global_route).
type GRH struct {
	DGID         GID
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
}

// AHAttr is an address vector (struct ibv_ah_attr): where packets go. RoCE
// needs IsGlobal with the GRH's SGIDIndex set to the chosen RoCEv2 GID.
type AHAttr struct {
	DLID        uint16
	SL          uint8
	SrcPathBits uint8
	StaticRate  uint8
	IsGlobal    bool
	Port        uint8
	GRH         GRH
}

// QPAttr is a queue pair's attributes (struct ibv_qp_attr, the fields a
// gateway uses). Modify applies those named by a QPAttrMask.
type QPAttr struct {
	State           QPState
	CurState        QPState
	PathMTU         MTU
	QKey            uint32
	RQPSN           uint32
	SQPSN           uint32
	DestQPN         uint32
	Access          Access
	Cap             QPCap
	AH              AHAttr
	PKeyIndex       uint16
	MaxRdAtomic     uint8 // outstanding RDMA READ/atomic as initiator
	MaxDestRdAtomic uint8 // ... as responder
	MinRNRTimer     uint8 // IB encoding, see RNRTimer
	Port            uint8
	Timeout         uint8 // local ACK timeout, 4.096 us * 2^Timeout
	RetryCnt        uint8
	RNRRetry        uint8 // 7 = retry forever
}

// SGE is one scatter/gather element: a span of a registered MR.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request. Which fields count depends on Op: SGEs
// always (the data; for READ where it lands; for atomics the 8-byte buffer
// that receives the old value; none for BIND_MW and LOCAL_INV); RemoteAddr
// and RKey for RDMA and atomics; CompareAdd and Swap for atomics; Imm for
// *_WITH_IMM (host order; the wire carries it big-endian), and for
// SEND_WITH_INV and LOCAL_INV the rkey to invalidate (libibverbs' union of
// imm_data and invalidate_rkey); Bind for BIND_MW (mw.go); AH, RemoteQPN and
// RemoteQKey on UD QPs.
type SendWR struct {
	ID         uint64
	Op         Opcode
	Flags      SendFlags
	SGEs       []SGE
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
	AH         *AH
	RemoteQPN  uint32
	RemoteQKey uint32
	Bind       MWBind
}

// RecvWR is a receive work request.
type RecvWR struct {
	ID   uint64
	SGEs []SGE
}

// WorkCompletion is one completion (struct ibv_wc). Its layout is the C
// shim's struct rb_wc, so CQ.Poll writes completions straight into the
// caller's slice with one cgo call.
type WorkCompletion struct {
	ID           uint64
	Status       WCStatus
	Opcode       WCOpcode
	VendorErr    uint32
	ByteLen      uint32
	Imm          uint32 // host order; valid when Flags has WCFlagWithImm
	QPN          uint32
	SrcQP        uint32
	Flags        WCFlags
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	_            [2]byte
}

// Err is nil for a successful completion, else an error that names the
// status, work request and QP.
func (wc *WorkCompletion) Err() error {
	if wc.Status == WCSuccess {
		return nil
	}
	return &CompletionError{Status: wc.Status, VendorErr: wc.VendorErr, ID: wc.ID, QPN: wc.QPN}
}

// CompletionError is a work completion with an error status.
type CompletionError struct {
	Status    WCStatus
	VendorErr uint32
	ID        uint64
	QPN       uint32
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("completion of wr %d on qp %d: %v (vendor error 0x%x)", e.ID, e.QPN, e.Status, e.VendorErr)
}

// CQOptions configure NewCQ.
type CQOptions struct {
	Entries int // at least this many completions (required)
	// BusyPoll makes Wait spin on Poll instead of sleeping on a completion
	// channel: lower latency, one core busy while waiting.
	BusyPoll   bool
	CompVector int
}

// SRQOptions configure NewSRQ.
type SRQOptions struct {
	MaxWR  uint32
	MaxSGE uint32
	Limit  uint32 // SRQ_LIMIT_REACHED fires when fewer WRs remain (0: off)
}

// AsyncEvent is an asynchronous event of a device (struct ibv_async_event).
// QP, CQ or SRQ is set for events about one; Port for port events.
type AsyncEvent struct {
	Type AsyncEventType
	QP   *QP
	CQ   *CQ
	SRQ  *SRQ
	QPN  uint32
	Port int
}

// ConnParam are rdma_cm connection parameters (struct rdma_conn_param).
type ConnParam struct {
	// PrivateData: on RC over the IB transport (InfiniBand, RoCE) at most
	// MaxConnectPrivateData (52) bytes on connect and MaxAcceptPrivateData
	// (192) on accept, rbridge keeping 4 for the path MTU (cmmtu.go);
	// received, it is padded to those sizes. Fewer on iWARP.
	PrivateData        []byte
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	// NoMTUTrailer sends PrivateData as given, without rbridge's MTU
	// trailer (cmmtu.go): toward peers that are not rbridge, whose
	// applications own every byte of it (a gateway passing private data
	// through).
	NoMTUTrailer bool
}

// CMEvent is one rdma_cm event, copied out of librdmacm (which is then
// acknowledged), so it stays valid.
type CMEvent struct {
	Type CMEventType
	// Status is the event's status: 0, a negative errno, or for REJECTED
	// the IB CM reject reason (28 = consumer reject).
	Status int
	// ID is the cm_id the event is for; for CONNECT_REQUEST it is the new
	// id of the incoming connection, to Accept or Reject.
	ID       *CMID
	ListenID *CMID // for CONNECT_REQUEST: the listening id
	Param    ConnParam
	// For UD (PortSpaceUDP) events, ESTABLISHED and MULTICAST_JOIN: the
	// remote QP (MulticastQPN for a group), its Q_Key, and the address
	// vector to reach it (for a group, the MGID as the GRH's DGID).
	QPN  uint32
	QKey uint32
	AH   AHAttr
	// Err says what failed when rbridge turned a CMConnectResponse into
	// CMConnectError (moving its QP to RTR and RTS, rdma_establish).
	Err error
}

// JoinOptions describe a multicast join (CMID.JoinMulticast).
type JoinOptions struct {
	// SendOnly joins as a send-only full member
	// (RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER): the id may send to the
	// group, its QP is not attached and receives nothing from it, and on
	// RoCE no IGMP report is sent.
	SendOnly bool
}

// MulticastQPN is the destination QPN of UD sends to a multicast group.
const MulticastQPN = 0xffffff

// RDMAUDPQKey is the Q_Key rdma_cm gives UD QPs and groups in the UDP
// port space (Linux RDMA_UDP_QKEY).
const RDMAUDPQKey = 0x01234567

// ConnParam.ResponderResources and InitiatorDepth values that mean "what
// rdma_cm negotiated" (RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH).
const (
	RDMAMaxRespRes   = 0xFF
	RDMAMaxInitDepth = 0xFF
)

// Default timeouts for rdma_cm resolution.
const (
	DefaultResolveTimeout = 2 * time.Second
)

// MaxBatch is how many work requests or completions one cgo call carries at
// most; longer slices are split.
const MaxBatch = 64
