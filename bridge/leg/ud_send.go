package leg

import (
	"context"
	"fmt"

	"github.com/rbridge/rbridge/bridge/pool"
)

// UDSendWindow is how many sends a gateway UD QP keeps outstanding
// (posted, their completion not yet reaped), and the depth of its send
// queue and send CQ: a post never finds the queue full. It is the receive
// queue's depth: the relay takes at most a receive queue's worth at once
// (all a burst can have landed between two polls), and posts it whole
// without waiting for the sends before it; a larger window could only be
// filled by a second burst while the first is still being sent. The
// buffers it holds come from the pool beside each receive queue's
// (UDRecvDepth), for as long as traffic flows: the relay flushes before
// it waits for more, so an idle port holds none.
const UDSendWindow = UDRecvDepth

// UDSent is what a UD port's sends came to, added up as their
// completions are reaped.
type UDSent struct {
	Datagrams, Bytes uint64 // sent
	// Failed counts the datagrams not sent: the post or the send failed,
	// or the wait for room or for the completion ended. Err is why the
	// first of them failed.
	Failed uint64
	Err    error
}

// fail counts n datagrams failed for err.
func (s *UDSent) fail(n int, err error) {
	if s.Failed == 0 {
		s.Err = err
	}
	s.Failed += uint64(n)
}

// udSendCompletion is a send's completion: its work request ID, and why
// it failed (nil: sent).
type udSendCompletion struct {
	ID  uint64
	Err error
}

// udSendQueue is a UD QP's send side, as udSender posts on it and reaps
// its completions: a verbs QP and its send CQ, a transport QP and its.
type udSendQueue interface {
	// postSends posts ds to dst in order, ds[i] with work request ID
	// ids[i], every one signaled; it returns how many it posted and, when
	// not all, why the next one was not.
	postSends(ds []Datagram, ids []uint64, dst UDDest) (int, error)
	// reapSends takes completed sends into cs, waiting for one when
	// wait (until ctx ends).
	reapSends(ctx context.Context, cs []udSendCompletion, wait bool) (int, error)
}

// udSender keeps a port's sends outstanding, up to UDSendWindow: each
// holds a slot, whose index is its work request ID, with its datagram's
// buffer until the send's completion is reaped. Every buffer it takes is
// released exactly once, and every datagram counted once in a UDSent:
// sent, or failed. It is used by one goroutine (the relay's sending one),
// then closed once the QP is destroyed.
type udSender struct {
	q     udSendQueue
	slots [UDSendWindow]udSlot
	free  []uint64 // indices of free slots (a stack over freeA)
	freeA [UDSendWindow]uint64

	ids [UDSendWindow]uint64           // a post's work request IDs
	cs  [UDSendWindow]udSendCompletion // a reap's completions
}

// udSlot is one outstanding send.
type udSlot struct {
	buf *pool.Buf // nil: the slot is free
	n   int
	// counted: already counted failed (a flush gave up waiting); its
	// completion, if one comes, only releases the buffer.
	counted bool
}

func newUDSender(q udSendQueue) *udSender {
	s := &udSender{q: q}
	s.free = s.freeA[:0]
	for id := UDSendWindow - 1; id >= 0; id-- {
		s.free = append(s.free, uint64(id))
	}
	return s
}

// outstanding is how many sends are posted and not yet reaped.
func (s *udSender) outstanding() int { return UDSendWindow - len(s.free) }

// send is UDPort.Send.
func (s *udSender) send(ctx context.Context, ds []Datagram, dst UDDest, sent *UDSent) {
	for len(ds) > 0 {
		if s.outstanding() > 0 {
			if err := s.reap(ctx, false, sent); err != nil {
				s.drop(ds, err, sent)
				return
			}
		}
		if len(s.free) == 0 {
			if err := s.reap(ctx, true, sent); err != nil {
				s.drop(ds, err, sent)
				return
			}
			continue
		}
		k := min(len(ds), len(s.free))
		for i := range k {
			id := s.free[len(s.free)-1]
			s.free = s.free[:len(s.free)-1]
			s.slots[id] = udSlot{buf: ds[i].Buf, n: ds[i].N}
			s.ids[i] = id
		}
		n, err := s.q.postSends(ds[:k], s.ids[:k], dst)
		n = min(max(n, 0), k)
		// Slots of what was not posted are free again; the first of it
		// failed, the rest is tried again.
		for i := k - 1; i >= n; i-- {
			s.slots[s.ids[i]] = udSlot{}
			s.free = append(s.free, s.ids[i])
		}
		if n < k {
			if err == nil {
				err = fmt.Errorf("post send: %d of %d posted", n, k)
			}
			s.drop(ds[n:n+1], err, sent)
			n++
		}
		ds = ds[n:]
	}
}

// drop releases ds's buffers and counts them failed for err.
func (s *udSender) drop(ds []Datagram, err error, sent *UDSent) {
	for i := range ds {
		ds[i].Buf.Release()
	}
	sent.fail(len(ds), err)
}

// flush is UDPort.Flush.
func (s *udSender) flush(ctx context.Context, sent *UDSent) {
	for s.outstanding() > 0 {
		if err := s.reap(ctx, true, sent); err != nil {
			for id := range s.slots {
				if sl := &s.slots[id]; sl.buf != nil && !sl.counted {
					sl.counted = true
					sent.fail(1, err)
				}
			}
			return
		}
	}
}

// reap takes what completed, waiting for one completion when wait, and
// releases each one's buffer. It fails when the queue does, or when ctx
// ends while it waits.
func (s *udSender) reap(ctx context.Context, wait bool, sent *UDSent) error {
	n, err := s.q.reapSends(ctx, s.cs[:], wait)
	for _, c := range s.cs[:min(max(n, 0), len(s.cs))] {
		if c.ID >= UDSendWindow || s.slots[c.ID].buf == nil {
			err = fmt.Errorf("send completion %#x for no outstanding send", c.ID)
			continue
		}
		sl := s.slots[c.ID]
		s.slots[c.ID] = udSlot{}
		s.free = append(s.free, c.ID)
		sl.buf.Release()
		switch {
		case sl.counted:
		case c.Err != nil:
			sent.fail(1, c.Err)
		default:
			sent.Datagrams++
			sent.Bytes += uint64(sl.n)
		}
	}
	return err
}

// close releases the buffers of sends still outstanding: the QP is
// destroyed, nothing reads them any more.
func (s *udSender) close() {
	for id := range s.slots {
		if sl := &s.slots[id]; sl.buf != nil {
			sl.buf.Release()
			s.slots[id] = udSlot{}
			s.free = append(s.free, uint64(id))
		}
	}
}
