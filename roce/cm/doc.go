// Package cm is the InfiniBand Communication Manager (IBA chapter 12) for
// rbridge's userspace RoCEv2 transport, so that unmodified rdma_cm
// applications on kernel RoCE devices can connect to transport QPs, and
// transport QPs to rdma_cm listeners.
//
// The wire format: CM MADs are 256-byte management datagrams (a 24-byte
// MADHeader, then 232 bytes of message) carried as UD SEND_ONLY packets to
// QP 1 with Q_Key 0x80010000. The messages are REQ, REP, RTU, REJ, MRA,
// DREQ, DREP, SIDR_REQ and SIDR_REP; rdma_cm adds the RDMA IP CM header
// (IPCMHeader) at the start of a REQ's and a SIDR_REQ's private data and
// encodes its port space and port in the service ID (ServiceID). Views, Fields structs, Encode and Parse follow
// package roce's conventions; sizes and offsets are those of the IBA
// tables (Linux include/rdma/ibta_vol1_c12.h).
//
// The state machine: a Manager owns a transport.Device's QP 1
// (Device.CreateGSIQP). Passive side:
//
//	REQ ──► REQ_RCVD ──Request.Accept: QP to RTR/RTS, REP──► REP_SENT ──RTU──► ESTABLISHED
//	            │  (duplicate REQ: MRA)      (duplicate REQ or timeout: REP again;
//	            │                             no RTU after every retry: REJ)
//	            └──Request.Reject, no listener, full backlog: REJ──► CLOSED
//
// Active side:
//
//	Manager.Dial: QP to INIT, REQ ──► REQ_SENT ──REP: QP to RTR/RTS, RTU──► ESTABLISHED
//	                                     │ (timeout: REQ again; MRA: wait longer)
//	                                     └──REJ, or no REP after every retry──► CLOSED
//
// The REQ of a Dial asks for DialOptions.PathMTU (1024 unless said: what
// fits a 1500-byte Ethernet link); an unmodified rdma_cm listener takes it
// as the connection's MTU, and a REP ending with rbridge's MTU trailer
// (package ibv's rdma_cm ends) lowers it to what that end applied.
//
// Release, either side:
//
//	ESTABLISHED ──Conn.Disconnect: QP to ERR, DREQ──► DREQ_SENT ──DREP or timeout──► CLOSED
//	ESTABLISHED ──DREQ: QP to ERR, DREP──► CLOSED
//
// A DREQ for a connection the manager does not know is answered with a
// DREP all the same.
//
// Service ID resolution (SIDR, IBA 12.11), how a UD client of rdma_cm's
// UDP port space learns the QPN and Q_Key of a service (udaddy; mckey's
// unicast mode). Passive side (Manager.ListenUD):
//
//	SIDR_REQ ──► waiting (UDListener.Next) ──SIDRRequest.Accept: SIDR_REP success (QPN, Q_Key)──► answered
//	    │           │  (duplicate SIDR_REQ: counted, nothing sent)       (duplicate SIDR_REQ:
//	    │           └──Reject, backlog full, listener closed:              the same SIDR_REP)
//	    │              SIDR_REP with that status ──────────────────────────► answered
//	    └──no listener: SIDR_REP "service ID not supported" ──► answered
//
// An answered request is remembered for as long as a requester with this
// manager's timeouts keeps retrying, then forgotten. Active side
// (Manager.ResolveUD):
//
//	SIDR_REQ ──► SENT ──SIDR_REP success──► the UDService (QPN, Q_Key, private data)
//	              │ (timeout: SIDR_REQ again, MaxRetries times)
//	              ├──SIDR_REP with another status──► *SIDRError
//	              └──no SIDR_REP after every retry──► ErrTimeout
//
// Not implemented: the time-wait state (a released connection's IDs are
// forgotten at once), LAP/APR (alternate paths), ClassPortInfo, and
// redirection (a SIDR_REP with status redirect is an error).
//
// Concurrency: one goroutine (routineReceive) takes MADs off QP 1 and runs
// the state machine under Manager.mu; retransmission timers take the same
// lock. Application calls (Accept, Dial, Disconnect, ResolveUD, a
// SIDRRequest's answer) take it briefly and wait on channels outside it.
package cm
