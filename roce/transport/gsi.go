package transport

import "fmt"

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
