package bridge

import (
	"context"
	"time"

	"github.com/rbridge/rbridge/bridge/leg"
)

// udRelay moves datagrams one way between two UD ports, for a UD route's
// client pair and for a group: what one port receives, in batches (all
// that has arrived, up to leg.UDSendWindow), is admitted or dropped, and
// what is admitted is posted on the other port at once, with up to the
// window's sends outstanding there. Completions are reaped as the port
// posts; before the relay waits for the next datagram it waits for the
// sends still outstanding (Flush), so that an idle relay holds no pool
// buffer and its counters are final. Every datagram received is counted
// once: sent (Datagrams, Bytes), or dropped for a cause (admit's, or
// DropSendFailed).
//
//	receive what arrived (no wait) --none--> flush, then receive (wait)
//	     |                                        |
//	     +---------------> admit ---> send <------+
type udRelay struct {
	from, to leg.UDPort
	dir      int
	stats    *UDStats
	// admit counts and releases the datagrams of ds it drops, moves the
	// rest to the front of ds, and returns how many it kept and where
	// they go.
	admit func(ds []leg.Datagram) (int, leg.UDDest)
	// sendFailed logs sends that failed (n of them, the first for err),
	// while the relay runs.
	sendFailed func(n uint64, err error)
}

// udFlushTimeout bounds the wait for the sends still outstanding once a
// relay ends (a datagram's send completes in microseconds).
const udFlushTimeout = time.Second

// run relays until a receive fails, and returns its error (ctx's once it
// ended).
func (r *udRelay) run(ctx context.Context) error {
	var ds [leg.UDSendWindow]leg.Datagram // filled by each receive
	var sent leg.UDSent
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), udFlushTimeout)
		r.to.Flush(fctx, &sent)
		cancel()
		r.account(ctx, &sent)
	}()
	for {
		n, err := r.from.Recv(ctx, ds[:], false)
		if n == 0 && err == nil {
			r.to.Flush(ctx, &sent)
			r.account(ctx, &sent)
			n, err = r.from.Recv(ctx, ds[:], true)
		}
		if n > 0 {
			k, dst := r.admit(ds[:n])
			if k > 0 {
				r.to.Send(ctx, ds[:k], dst, &sent)
				r.account(ctx, &sent)
			}
		}
		if err != nil {
			return err
		}
	}
}

// account adds sent to the counters, logs what failed while ctx runs,
// and clears it.
func (r *udRelay) account(ctx context.Context, sent *leg.UDSent) {
	if sent.Datagrams > 0 {
		r.stats.Datagrams[r.dir].Add(sent.Datagrams)
		r.stats.Bytes[r.dir].Add(sent.Bytes)
	}
	if sent.Failed > 0 {
		r.stats.DropSendFailed[r.dir].Add(sent.Failed)
		if ctx.Err() == nil {
			r.sendFailed(sent.Failed, sent.Err)
		}
	}
	*sent = leg.UDSent{}
}
