package leg

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/rbridge/rbridge/ibv"
)

// A device's asynchronous events (ibv_get_async_event) say what no work
// completion says: a QP the HCA moved to the error state because a
// request from its peer failed at the gateway's responder (a READ or
// WRITE with a key or range it may not use, more READs than the
// responder resources), a port that went down or came back. rdma_cm
// shares one device context per device in the process, so one reader per
// device serves every verbs leg, and hands QP events to the endpoint
// whose QP it is.

// deviceEvents reads one device's events while a QP on it is watched.
type deviceEvents struct {
	dev    *ibv.Device
	log    *slog.Logger
	cancel context.CancelFunc
	qps    map[uint32]func(ibv.AsyncEvent) // guarded by eventsMu
}

var (
	eventsMu sync.Mutex
	events   = map[*ibv.Device]*deviceEvents{}
)

// watchQP hands dev's events for QP qpn to f (on the reader's goroutine)
// until the returned function is called. The device's reader runs while
// it has a QP to serve.
func watchQP(dev *ibv.Device, qpn uint32, log *slog.Logger, f func(ibv.AsyncEvent)) (stop func()) {
	eventsMu.Lock()
	defer eventsMu.Unlock()
	d := events[dev]
	if d == nil {
		ctx, cancel := context.WithCancel(context.Background())
		d = &deviceEvents{dev: dev, log: log.With("device", dev.Name()), cancel: cancel, qps: map[uint32]func(ibv.AsyncEvent){}}
		events[dev] = d
		go d.read(ctx)
	}
	d.qps[qpn] = f
	return func() {
		eventsMu.Lock()
		defer eventsMu.Unlock()
		delete(d.qps, qpn)
		if len(d.qps) == 0 && events[dev] == d {
			d.cancel()
			delete(events, dev)
		}
	}
}

func (d *deviceEvents) read(ctx context.Context) {
	for {
		ev, err := d.dev.AsyncEvent(ctx)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Warn("verbs device events end", "err", err)
			}
			return
		}
		switch ev.Type {
		case ibv.EventPortErr:
			d.log.Warn("verbs device port down", "port", ev.Port)
		case ibv.EventPortActive, ibv.EventLIDChange, ibv.EventPKeyChange, ibv.EventSMChange,
			ibv.EventClientReregister, ibv.EventGIDChange:
			d.log.Info("verbs device event", "event", ev.Type.String(), "port", ev.Port)
		case ibv.EventDeviceFatal:
			d.log.Error("verbs device failed", "event", ev.Type.String())
		}
		if ev.QPN == 0 {
			continue
		}
		eventsMu.Lock()
		f := d.qps[ev.QPN]
		eventsMu.Unlock()
		if f != nil {
			f(ev)
		} else if qpFailed(ev.Type) {
			d.log.Warn("verbs QP event for no endpoint", "qpn", ev.QPN, "event", ev.Type.String())
		}
	}
}

// qpFailed says t moved a QP to the error state.
func qpFailed(t ibv.AsyncEventType) bool {
	return t == ibv.EventQPFatal || t == ibv.EventQPReqErr || t == ibv.EventQPAccessErr
}

// asyncFailure says, in an operator's words, why the HCA moved a QP to
// the error state (nil for an event that did not).
func asyncFailure(t ibv.AsyncEventType) error {
	switch t {
	case ibv.EventQPAccessErr:
		return fmt.Errorf("the HCA reports %v: the peer's READ, WRITE or atomic addressed gateway memory it may not (a staging key revoked, another session's, out of its bounds, or memory never exposed)", t)
	case ibv.EventQPReqErr:
		return fmt.Errorf("the HCA reports %v: the peer sent a request the QP does not take (an opcode it does not allow, or more READs and atomics at once than the responder resources it was given)", t)
	case ibv.EventQPFatal:
		return fmt.Errorf("the HCA reports %v", t)
	}
	return nil
}
