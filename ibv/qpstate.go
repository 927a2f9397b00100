package ibv

// The transitions of the QP state machine, as attribute values and masks
// (pure Go: which fields each transition needs is a property of the QP type,
// from the IBTA spec's table of required and optional attributes, as used by
// ibv_rc_pingpong and ibv_ud_pingpong).
//
//	        ToInit        ToRTR          ToRTS
//	RESET --------> INIT -------> RTR --------> RTS
//	  ^                                          |
//	  +------ ToReset ------ ERR <----- ToErr ---+  (ToErr and ToReset from any state)

// InitParams are the RESET->INIT attributes.
type InitParams struct {
	Port      uint8
	PKeyIndex uint16
	Access    Access // RC: what the peer may do to our MRs via this QP
	QKey      uint32 // UD
}

// RTRParams are the INIT->RTR attributes. RC needs all; UD none.
type RTRParams struct {
	PathMTU         MTU    // PathMTU(local active, remote active)
	DestQPN         uint32 // the peer's QPN
	RQPSN           uint32 // the peer's initial send PSN
	MaxDestRdAtomic uint8  // READs/atomics the peer may have outstanding here (default 1)
	MinRNRTimer     uint8  // IB encoding (default 12: 0.64 ms)
	AH              AHAttr // how to reach the peer
}

// RTSParams are the RTR->RTS attributes.
type RTSParams struct {
	SQPSN       uint32
	Timeout     uint8 // local ACK timeout, 4.096 us * 2^Timeout (default 14: ~67 ms)
	RetryCnt    uint8 // default 7
	RNRRetry    uint8 // default 7: forever
	MaxRdAtomic uint8 // READs/atomics we may have outstanding (default 1)
}

// Defaults as ibv_rc_pingpong and perftest use them.
const (
	DefaultTimeout     = 14
	DefaultRetryCnt    = 7
	DefaultRNRRetry    = 7
	DefaultMinRNRTimer = 12
)

func initAttr(t QPType, p InitParams) (QPAttr, QPAttrMask) {
	a := QPAttr{State: QPStateInit, Port: p.Port, PKeyIndex: p.PKeyIndex}
	m := QPAttrState | QPAttrPKeyIndex | QPAttrPort
	if t == QPTypeUD {
		a.QKey = p.QKey
		return a, m | QPAttrQKey
	}
	a.Access = p.Access
	return a, m | QPAttrAccessFlags
}

func rtrAttr(t QPType, p RTRParams) (QPAttr, QPAttrMask) {
	a := QPAttr{State: QPStateRTR}
	if t == QPTypeUD {
		return a, QPAttrState
	}
	a.PathMTU = p.PathMTU
	if !a.PathMTU.Valid() {
		a.PathMTU = MTU1024
	}
	a.DestQPN = p.DestQPN
	a.RQPSN = p.RQPSN & 0xFFFFFF
	a.AH = p.AH
	m := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	if t == QPTypeRC {
		a.MaxDestRdAtomic = orDefault(p.MaxDestRdAtomic, 1)
		a.MinRNRTimer = orDefault(p.MinRNRTimer, DefaultMinRNRTimer)
		m |= QPAttrMaxDestRDAtomic | QPAttrMinRNRTimer
	}
	return a, m
}

func rtsAttr(t QPType, p RTSParams) (QPAttr, QPAttrMask) {
	a := QPAttr{State: QPStateRTS, SQPSN: p.SQPSN & 0xFFFFFF}
	m := QPAttrState | QPAttrSQPSN
	if t == QPTypeRC {
		a.Timeout = orDefault(p.Timeout, DefaultTimeout)
		a.RetryCnt = orDefault(p.RetryCnt, DefaultRetryCnt)
		a.RNRRetry = orDefault(p.RNRRetry, DefaultRNRRetry)
		a.MaxRdAtomic = orDefault(p.MaxRdAtomic, 1)
		m |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRDAtomic
	}
	return a, m
}

func orDefault(v, d uint8) uint8 {
	if v == 0 {
		return d
	}
	return v
}

// ToInit moves the QP from RESET to INIT.
func (q *QP) ToInit(p InitParams) error {
	a, m := initAttr(q.Type(), p)
	return q.Modify(&a, m)
}

// ToRTR moves the QP from INIT to RTR (ready to receive).
func (q *QP) ToRTR(p RTRParams) error {
	a, m := rtrAttr(q.Type(), p)
	return q.Modify(&a, m)
}

// ToRTS moves the QP from RTR to RTS (ready to send).
func (q *QP) ToRTS(p RTSParams) error {
	a, m := rtsAttr(q.Type(), p)
	return q.Modify(&a, m)
}

// ToErr moves the QP to ERR: outstanding work requests complete with
// WCWRFlushErr.
func (q *QP) ToErr() error {
	a := QPAttr{State: QPStateErr}
	return q.Modify(&a, QPAttrState)
}

// ToReset moves the QP to RESET, discarding its queues.
func (q *QP) ToReset() error {
	a := QPAttr{State: QPStateReset}
	return q.Modify(&a, QPAttrState)
}
