package leg

import (
	"context"
	"errors"
	"testing"

	"github.com/rbridge/rbridge/bridge/pool"
)

// fakeSendQueue is the send side of a fake HCA: what is posted waits in
// its send queue (depth deep) until the test, or a wait for a completion,
// completes it.
type fakeSendQueue struct {
	depth  int
	queued []uint64             // posted, not completed, oldest first
	done   []udSendCompletion   // completed, not reaped
	onWait func(*fakeSendQueue) // what a wait for a completion sees happen (nil: nothing, it waits for ctx)
	most   int                  // the most sends queued at once
}

var errSQFull = errors.New("send queue full")

func (q *fakeSendQueue) postSends(ds []Datagram, ids []uint64, _ UDDest) (int, error) {
	for i := range ds {
		if len(q.queued) == q.depth {
			return i, errSQFull
		}
		q.queued = append(q.queued, ids[i])
		q.most = max(q.most, len(q.queued))
	}
	return len(ds), nil
}

func (q *fakeSendQueue) reapSends(ctx context.Context, cs []udSendCompletion, wait bool) (int, error) {
	if len(q.done) == 0 && wait {
		if q.onWait != nil {
			q.onWait(q)
		}
		if len(q.done) == 0 {
			<-ctx.Done()
			return 0, ctx.Err()
		}
	}
	n := copy(cs, q.done)
	q.done = q.done[n:]
	return n, nil
}

// complete completes the n oldest sends queued, failing them with err.
func (q *fakeSendQueue) complete(n int, err error) {
	n = min(n, len(q.queued))
	for _, id := range q.queued[:n] {
		q.done = append(q.done, udSendCompletion{ID: id, Err: err})
	}
	q.queued = q.queued[n:]
}

// TestUDSender: a port's sends past its window, into a send queue that is
// full, failing, and given up on: every datagram is counted once (sent or
// failed), no more than the window is outstanding at once, and every
// buffer is back in the pool exactly once when the port has flushed or
// closed.
func TestUDSender(t *testing.T) {
	const W = UDSendWindow
	errSend := errors.New("send completion: retry exceeded")
	dst := UDDest{QPN: 0x42, QKey: 0x1234}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		// run sends, flushes and closes; the datagrams it sent and
		// their first failure are checked against want.
		run                  func(t *testing.T, s *udSender, q *fakeSendQueue, get func(n int) []Datagram, sent *UDSent)
		wantSent, wantFailed uint64
		wantErr              error
		wantMost             int // the most outstanding at once
		unflushed            int // outstanding when the port closed unflushed: counted neither way
	}{{
		name: "three windows and more in one send, the oldest completing as room is waited for",
		run: func(t *testing.T, s *udSender, q *fakeSendQueue, get func(int) []Datagram, sent *UDSent) {
			q.onWait = func(q *fakeSendQueue) { q.complete(5, nil) }
			s.send(context.Background(), get(3*W+7), dst, sent)
			if s.outstanding() == 0 {
				t.Error("nothing outstanding after a send past the window: the last posts were waited for")
			}
			s.flush(context.Background(), sent)
		},
		wantSent: 3*W + 7, wantMost: W,
	}, {
		name: "completing as posted, reaped by the next send",
		run: func(t *testing.T, s *udSender, q *fakeSendQueue, get func(int) []Datagram, sent *UDSent) {
			for range 10 {
				s.send(context.Background(), get(W/2), dst, sent)
				q.complete(W, nil)
			}
			s.flush(context.Background(), sent)
		},
		wantSent: 10 * W / 2, wantMost: W / 2,
	}, {
		name: "a send queue shallower than the window",
		run: func(t *testing.T, s *udSender, q *fakeSendQueue, get func(int) []Datagram, sent *UDSent) {
			q.depth = 4
			q.onWait = func(q *fakeSendQueue) { q.complete(len(q.queued), nil) }
			s.send(context.Background(), get(10), dst, sent)
			s.flush(context.Background(), sent)
		},
		wantSent: 4, wantFailed: 6, wantErr: errSQFull, wantMost: 4,
	}, {
		name: "sends that fail",
		run: func(t *testing.T, s *udSender, q *fakeSendQueue, get func(int) []Datagram, sent *UDSent) {
			s.send(context.Background(), get(6), dst, sent)
			q.complete(2, nil)
			q.complete(3, errSend)
			q.complete(1, nil)
			s.flush(context.Background(), sent)
		},
		wantSent: 3, wantFailed: 3, wantErr: errSend, wantMost: 6,
	}, {
		name: "the wait for room given up (the relay ends), then the flush, then a late completion",
		run: func(t *testing.T, s *udSender, q *fakeSendQueue, get func(int) []Datagram, sent *UDSent) {
			s.send(context.Background(), get(W), dst, sent)
			s.send(cancelled, get(3), dst, sent) // no room, and none comes
			s.flush(cancelled, sent)             // W outstanding: failed
			if s.outstanding() != W {
				t.Errorf("%d outstanding after a flush given up, want %d (their buffers are the HCA's)", s.outstanding(), W)
			}
			q.complete(1, nil) // a completion after all: released, not counted again
			s.flush(cancelled, sent)
			s.close()
		},
		wantFailed: W + 3, wantErr: context.Canceled, wantMost: W,
	}, {
		name: "the port closed with sends outstanding",
		run: func(t *testing.T, s *udSender, q *fakeSendQueue, get func(int) []Datagram, sent *UDSent) {
			s.send(context.Background(), get(W/2), dst, sent)
			q.complete(2, nil)
			s.send(context.Background(), get(1), dst, sent) // reaps the 2
			s.close()
		},
		wantSent: 2, wantMost: W / 2, unflushed: W/2 - 1,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			pl, err := pool.New(pool.Options{Size: 4 * W * 4096, Classes: []int{4096}})
			if err != nil {
				t.Fatal(err)
			}
			defer pl.Close()
			start := pl.Stats()[0]
			q := &fakeSendQueue{depth: W}
			s := newUDSender(q)
			given := 0
			get := func(n int) []Datagram {
				ds := make([]Datagram, n)
				for i := range ds {
					b, err := pl.Get(4096)
					if err != nil {
						t.Fatal(err)
					}
					ds[i] = Datagram{Buf: b, N: 100}
				}
				given += n
				return ds
			}
			var sent UDSent
			tc.run(t, s, q, get, &sent)
			if sent.Datagrams != tc.wantSent || sent.Bytes != 100*tc.wantSent || sent.Failed != tc.wantFailed || !errors.Is(sent.Err, tc.wantErr) {
				t.Errorf("sent %+v, want %d datagrams of 100 bytes sent, %d failed for %v", sent, tc.wantSent, tc.wantFailed, tc.wantErr)
			}
			// Each once. A datagram outstanding when its port closed
			// unflushed is neither: the relay flushes before its port
			// closes.
			if n := sent.Datagrams + sent.Failed + uint64(tc.unflushed); n != uint64(given) {
				t.Errorf("%d datagrams counted (and %d unflushed), %d given to send", sent.Datagrams+sent.Failed, tc.unflushed, given)
			}
			if q.most != tc.wantMost {
				t.Errorf("at most %d sends outstanding, want %d", q.most, tc.wantMost)
			}
			if s.outstanding() != 0 {
				s.close()
			}
			if end := pl.Stats()[0]; end.Free != start.Free || end.Overreleased != 0 {
				t.Errorf("pool %+v at the end, %+v at the start: want every buffer back once", end, start)
			}
		})
	}
}

// TestUDSenderStrayCompletion: a completion for no outstanding send is an
// error (a bug), and releases nothing.
func TestUDSenderStrayCompletion(t *testing.T) {
	q := &fakeSendQueue{depth: UDSendWindow}
	s := newUDSender(q)
	q.done = []udSendCompletion{{ID: 3}, {ID: UDSendWindow}}
	var sent UDSent
	if err := s.reap(context.Background(), false, &sent); err == nil || sent != (UDSent{}) {
		t.Errorf("reap of stray completions: %v, %+v; want an error and nothing counted", err, sent)
	}
}
