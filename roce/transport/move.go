package transport

import (
	"time"
)

// A QP's loop. Each device of an address (NewDevices) has a receive loop
// of its own, and a QP is served by one of them: its packets are handled
// there and leave by that device's conn, under that device's send lock.
// At first that is the device that numbered it (its home, QP.dev). Where
// the packets of a QP's flow keep arriving at another device's conn (an
// AF_XDP socket per NIC queue, where the NIC's RSS hashes the peer's UDP
// source port, which the QPN does not decide), that device takes the QP
// over: from then on its loop serves it alone, and no lock of another
// loop is on the QP's path. Only RC QPs move (one peer, one flow); UD
// QPs, which hear from many peers, stay at home.

const (
	// moveAfter is how many packets in a row must reach a device other
	// than the QP's before it moves there: a stray (GRO joining two QPs'
	// packets, one before the steering was in place) does not move it.
	moveAfter = 4
	// moveEvery is how often a QP may move at most: a peer whose packets
	// arrive on two queues at once does not make it swing between them.
	moveEvery = 100 * time.Millisecond
)

// sender returns the device that sends qp's packets now.
func (qp *QP) sender() *Device { return qp.txDev.Load() }

// lockSender returns the device that serves qp with its send lock held:
// a move takes the old device's send lock, so qp cannot move until the
// caller unlocks, and no two devices write one QP's packets.
func (qp *QP) lockSender() *Device {
	for {
		d := qp.txDev.Load()
		d.txMu.Lock()
		if qp.txDev.Load() == d {
			return d
		}
		d.txMu.Unlock() // it moved while we waited
	}
}

// send writes what qp queued through the device that serves it; while its
// sends are held (HoldSends), the last release does.
func (qp *QP) send() {
	if qp.holds.Load() > 0 {
		qp.sendHeld.Store(true)
		if qp.holds.Load() > 0 {
			return // the last ReleaseSends sends
		}
		if !qp.sendHeld.Swap(false) {
			return // it did, as this one looked
		}
	}
	qp.sendNow()
}

// sendNow writes what qp queued, held or not: a QP's Close sends its last
// ACKs and NAKs so, since the ReleaseSends of a batch under way may come
// only after the QP has left its device.
func (qp *QP) sendNow() {
	d := qp.lockSender()
	defer d.txMu.Unlock()
	d.sendLocked(qp)
}

// stray notes that d's loop handled a packet of qp, which another device
// serves (Stats.RxForeign); after moveAfter in a row, and at most every
// moveEvery, d takes qp over.
func (d *Device) stray(qp *QP) {
	d.stats.RxForeign.Add(1)
	if qp.typ != RC || qp.strays.Add(1) < moveAfter {
		return
	}
	now := time.Now().UnixNano()
	last := qp.movedAt.Load()
	if last != 0 && now-last < int64(moveEvery) {
		return
	}
	if !qp.movedAt.CompareAndSwap(last, now) {
		return // another loop is moving it
	}
	if qp.moveTo(d) {
		d.stats.QPsMovedIn.Add(1)
	}
}

// served notes that qp's packet reached the device that serves it.
func (qp *QP) served() {
	if qp.strays.Load() != 0 {
		qp.strays.Store(0)
	}
}

// moveTo makes to serve qp, and reports whether it moved. A send under
// way on the old device finishes first; qp's later packets leave by to's
// conn. A closed device does not take a QP, a QP whose home is closing
// leaves it no more (its Close waits out its sends), and a QP that is gone
// does not move (QP.Close).
func (qp *QP) moveTo(to *Device) bool {
	qp.moveMu.Lock()
	defer qp.moveMu.Unlock()
	from := qp.txDev.Load()
	if from == to || qp.gone.Load() {
		return false
	}
	if to != qp.dev {
		select {
		case <-to.closed:
			return false
		case <-qp.dev.closed:
			return false
		default:
		}
	}
	from.txMu.Lock()
	qp.txDev.Store(to)
	from.txMu.Unlock()
	qp.strays.Store(0)
	if from != qp.dev {
		from.forgetMoved(qp)
	}
	if to != qp.dev {
		to.mu.Lock()
		if to.moved == nil {
			to.moved = make(map[uint32]*QP)
		}
		to.moved[qp.qpn] = qp
		to.mu.Unlock()
	}
	return true
}

// leave takes qp off the device serving it, if that is not its home,
// once qp is gone: a packet for its number then finds no QP there.
func (qp *QP) leave() {
	qp.gone.Store(true)
	qp.moveMu.Lock() // wait out a move under way; later ones see gone
	defer qp.moveMu.Unlock()
	if t := qp.txDev.Load(); t != qp.dev {
		t.forgetMoved(qp)
	}
}

// forgetMoved takes qp out of the QPs d took over.
func (d *Device) forgetMoved(qp *QP) {
	d.mu.Lock()
	if d.moved[qp.qpn] == qp {
		delete(d.moved, qp.qpn)
	}
	d.mu.Unlock()
}

// ServedQPs returns how many QPs d's loop serves (move.go): its own that
// no other device took over, and those it took over. NumQPs counts the
// QPs it numbered, wherever they are served.
func (d *Device) ServedQPs() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	n := 0
	for _, qp := range d.qps {
		if qp.txDev.Load() == d {
			n++
		}
	}
	for _, qp := range d.moved {
		if !qp.gone.Load() {
			n++
		}
	}
	return n
}

// sendHome gives back the QPs d took over from other devices (d is
// closing): their homes serve them again.
func (d *Device) sendHome() {
	for _, qp := range d.listQPs(true) {
		qp.moveTo(qp.dev)
	}
}

// bringHome makes d serve again the QPs it numbered that other devices
// took over (d is closing: the sends of its QPs must be its own, which
// Close waits out and stops).
func (d *Device) bringHome() {
	if d.queues == nil {
		return
	}
	for _, qp := range d.listQPs(false) {
		qp.moveTo(d) // nothing for those it serves
	}
}

// HoldSends makes qp's sends wait for ReleaseSends, for a caller about to
// complete or post several requests in a row (its completions, as they
// come one by one): their packets then leave in one write. Holds nest.
func (qp *QP) HoldSends() { qp.holds.Add(1) }

// ReleaseSends ends a HoldSends; the last sends what was held.
func (qp *QP) ReleaseSends() {
	if qp.holds.Add(-1) == 0 && qp.sendHeld.Swap(false) {
		qp.send()
	}
}
