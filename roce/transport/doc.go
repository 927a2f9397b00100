// Package transport is rbridge's userspace RoCEv2 transport: reliable
// connected (RC) and unreliable datagram (UD) queue pairs in Go that speak
// the InfiniBand transport protocol on the wire, to the Linux kernel's rxe and
// to hardware RoCE NICs, over any roce.PacketConn (a UDP socket, AF_XDP, or
// the simulated network of roce/simnet).
//
// The API follows verbs: a Device owns a packet conn and its queue pairs; a
// PD holds memory regions; a QP moves through RESET, INIT, RTR, RTS and ERR;
// work requests are posted to its send and receive queues and complete into
// CQs.
//
// A QP is both a requester (it segments messages into packets by path MTU,
// numbers them with 24-bit PSNs, asks for acknowledgements, retransmits
// go-back-N on a timeout or a PSN-sequence-error NAK, probes for a lost tail
// after twice the measured round trip instead of waiting out the ACK
// timeout, waits out RNR NAKs, caps what it has in flight by a window that
// shrinks on loss, and limits outstanding READs and atomics; the recovery
// and its timers are one state machine, recovery.go, with its transitions
// drawn there) and a responder (it checks PSNs,
// re-acknowledges duplicates, re-executes duplicate READs, replays atomic
// results, checks rkeys, bounds and access rights, consumes receive WQEs,
// coalesces ACKs and NAKs with the IBTA syndromes).
//
// The responder hands every request, in PSN order, to the QP's Target: by
// default the QP's own receive queue and memory regions, completed at once;
// for a gateway, a session that re-issues the request on another fabric and
// completes it later (QP.Complete). Responses leave in PSN order and only
// as far as completions reached, so nothing is acknowledged before it
// completed (see responder and Target). A completion that finds its CQ full
// puts the QP in ERR and raises EventCQError, as verbs does.
//
// Concurrency: each QP has one mutex that guards all of its state; the
// Device's receive goroutine (routineReceive; on a polled device, the
// caller of Device.Poll, which pollMu lets Close wait out) takes it for
// each packet, the
// retransmission timer, the posting methods and QP.Complete take it too;
// functions named ...Locked run with it held. Lock order: Device.txMu
// before QP.mu.
// Target.Request and Target.Abandon run under it and must not block or call
// the QP. Packets are built under the lock into per-QP buffers and written
// after it is released.
//
// Devices made together by NewDevices (the queues of one address, a
// receive loop each) share no lock on the receive path: each has its own
// QP table, send lock and reader; a packet that reached the wrong queue's
// device takes its QP's mutex and its owner's Device.txMu, as a timer's
// retransmission does.
package transport
