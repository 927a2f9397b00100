package transport

import (
	"fmt"

	"github.com/rbridge/rbridge/roce"
)

// GSIQPN is the number of the general services QP, the one InfiniBand
// management datagrams (the CM's MADs among them) are addressed to.
const GSIQPN = 1

// CreateGSIQP creates the device's QP 1: a UD queue pair in the RESET
// state, like one from CreateQP, that receives the UD packets whose BTH
// names QP 1. A device has at most one; it is removed by Close. The caller
// moves it to INIT with QKey 0x80010000 (the GSI Q_Key) and on to RTS,
// and runs the management class on top (package roce/cm).
func (d *Device) CreateGSIQP(pd *PD, attr QPInitAttr) (*QP, error) {
	if attr.Type != UD {
		return nil, fmt.Errorf("transport: create QP 1: type %v, want UD", attr.Type)
	}
	d.mu.RLock()
	_, used := d.qps[GSIQPN]
	d.mu.RUnlock()
	if used {
		return nil, fmt.Errorf("transport: create QP 1: already exists")
	}
	qp, err := d.CreateQP(pd, attr)
	if err != nil {
		return nil, err
	}
	// Renumber: CreateQP handed out an ordinary QPN.
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, used := d.qps[GSIQPN]; used {
		delete(d.qps, qp.qpn)
		return nil, fmt.Errorf("transport: create QP 1: already exists")
	}
	delete(d.qps, qp.qpn)
	qp.qpn = GSIQPN
	d.qps[GSIQPN] = qp
	return qp, nil
}

// PostSendAfter posts wrs on qp, a UD QP (the CM's QP 1), and writes them
// through rc's device, after what rc has queued (the ACK it coalesced over
// its last batch, if one is pending) and in the same batch: after every
// ACK rc sent, on the same conn. The peer then takes those ACKs before
// what wrs carry, whichever queue rc's packets leave by.
//
// A DREQ needs this. It tells the peer's rdma_cm the connection is gone,
// and the peer's application then flushes the send queue. Sent alone on
// QP 1's device (queue 0's socket), a DREQ can overtake an ACK that rc's
// queue sent just before it: two sockets are two transmit paths (a NIC's
// transmit queues, a veth's per-CPU backlogs), each in its own order. The
// peer then sees its SEND, which rbridge acknowledged and relayed,
// flushed in error. One socket's packets keep their order.
//
// rc is an RC QP in any state.
func (qp *QP) PostSendAfter(rc *QP, wrs ...SendWR) error {
	if qp.typ != UD {
		return fmt.Errorf("transport: post send after an RC QP: QP %#x is %v, want UD", qp.qpn, qp.typ)
	}
	if rc == nil || rc.typ != RC {
		return fmt.Errorf("transport: post send after an RC QP: want an RC QP to follow")
	}
	rc.mu.Lock()
	rc.flushAckLocked()
	rc.mu.Unlock()
	qp.mu.Lock()
	err := qp.postSendLocked(wrs)
	qp.mu.Unlock()
	sendAfter(rc, qp)
	return err
}

// sendAfter writes what first and then queued, in that order, in as few
// batches as the conn takes, on the device that serves first (move.go).
// then's device's send lock is held as well, since then's queue belongs to
// it (QP 1, a UD QP, never moves).
func sendAfter(first, then *QP) {
	d := first.lockSender()
	defer d.txMu.Unlock()
	if o := then.sender(); o != d {
		o.txMu.Lock() // the only nesting: an RC QP's device, then QP 1's
		defer o.txMu.Unlock()
	}
	select {
	case <-d.closed:
		first.dropTx()
		then.dropTx()
		return
	default:
	}
	a := first.takeTx()
	b := then.takeTx()
	msgs := make([]roce.Message, 0, len(a)+len(b))
	d.writeAll(append(append(msgs, a...), b...), first.qpn)
	if a != nil {
		first.releaseTx()
	}
	if b != nil {
		then.releaseTx()
	}
}
