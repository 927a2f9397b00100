package transport

import "github.com/rbridge/rbridge/roce"

// UD ---------------------------------------------------------------------

// sendUDLocked sends every queued UD work request; UD sends complete as
// they leave, and their WQEs are recycled at once (a datagram sent
// allocates none).
func (qp *QP) sendUDLocked() {
	r := &qp.req
	for _, w := range r.sq {
		var f roce.PacketFields
		f.BTH = roce.BTHFields{Opcode: roce.UDSendOnly, PKey: roce.DefaultPKey, DestQP: w.wr.UD.QPN, PSN: uint32(r.fresh)}
		if w.wr.Opcode == OpSendWithImm {
			f.BTH.Opcode = roce.UDSendOnlyWithImmediate
			f.ImmDt.Imm = w.wr.Imm
		}
		f.BTH.SE = w.wr.Signaled
		f.DETH = roce.DETHFields{QKey: w.wr.UD.QKey, SrcQP: qp.qpn}
		qp.queueLocked(w.wr.UD.Addr, &f, w.data)
		r.fresh = r.fresh.Next()
		qp.completeSendLocked(w)
		r.free = append(r.free, w)
	}
	clear(r.sq)
	r.sq = r.sq[:0]
}

// receiveUDLocked delivers a datagram to the next receive WQE.
func (qp *QP) receiveUDLocked(p *roce.Packet, m *roce.Message) {
	op := p.Opcode()
	if (qp.state != StateRTR && qp.state != StateRTS) || (op != roce.UDSendOnly && op != roce.UDSendOnlyWithImmediate) ||
		p.DETH.QKey() != qp.attr.QKey || len(qp.rq) == 0 {
		qp.dev.stats.UDDropped.Add(1)
		if len(qp.rq) == 0 {
			qp.udNoReceive.Add(1)
		}
		return
	}
	wr := qp.rq[0]
	qp.rq = qp.rq[1:]
	buf, _ := wr.Local.bytes()
	wc := WC{ID: wr.ID, Opcode: OpRecv, QPN: qp.qpn, SrcQPN: p.DETH.SrcQP(), Src: m.Addr, ByteLen: len(p.Payload)}
	if len(p.Payload) > len(buf) {
		wc.Status = StatusLocLenErr
	} else {
		copy(buf, p.Payload)
	}
	if p.ImmDt != nil {
		wc.Imm, wc.HasImm = p.ImmDt.Imm(), true
	}
	qp.pushRecvLocked(wc)
}

// UDNoReceive counts the datagrams this UD QP dropped because no receive
// was posted (the device's UDDropped counts them too, with every other
// cause).
func (qp *QP) UDNoReceive() uint64 { return qp.udNoReceive.Load() }
