package transport_test

import (
	"errors"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/transport"
)

// TestTargetReadInParts: a READ completed a part at a time
// (Completion.More) answers each part as it arrives once it is at the
// frontier, holds parts behind a pending request before it, releases each
// part's lease once its packets are sent, and serves a repeat in parts.
func TestTargetReadInParts(t *testing.T) {
	w := newWire(t, 0)
	data := make([]byte, 1100) // five responses at MTU 256: parts of 512, 512, 76
	for i := range data {
		data[i] = byte(i * 7)
	}
	w.sendOnly(0, "before")
	w.read(1, 0x1000, uint32(len(data))) // PSNs 1-5
	w.waitOffered(2)
	l1, l2, l3 := new(lease), new(lease), new(lease)
	w.complete(1, transport.Completion{Data: data[:512], Lease: l1, More: true})
	w.quiet("a READ's first part behind a pending SEND")
	w.complete(0, transport.Completion{})
	// The READ's responses acknowledge the SEND before it; the coalesced
	// ACK follows (a requester takes it as old news).
	got := w.expect(response{op: roce.RCRDMAReadResponseFirst, psn: at(1), n: 256},
		response{op: roce.RCRDMAReadResponseMiddle, psn: at(2), n: 256}, ack(0))
	got = got[:2]
	waitFor(t, "the first part's lease released", func() bool { return l1.released.Load() == 1 })
	w.complete(1, transport.Completion{Data: data[512:1024], Lease: l2, More: true})
	got = append(got, w.expect(response{op: roce.RCRDMAReadResponseMiddle, psn: at(3), n: 256},
		response{op: roce.RCRDMAReadResponseMiddle, psn: at(4), n: 256})...)
	w.quiet("a READ whose last part has not come")
	w.complete(1, transport.Completion{Data: data[1024:], Lease: l3})
	got = append(got, w.expect(response{op: roce.RCRDMAReadResponseLast, psn: at(5), n: 76})...)
	var back []byte
	for _, p := range got {
		back = append(back, p.Payload...)
	}
	equal(t, "READ data", back, data)
	waitFor(t, "every part's lease released", func() bool { return l2.released.Load() == 1 && l3.released.Load() == 1 })

	// Asked again: served again, in parts too.
	w.read(1, 0x1000, uint32(len(data)))
	w.waitOffered(3)
	r := w.target.requests()[2]
	if !r.Dup {
		t.Fatalf("the repeated READ is not marked Dup: %v", &r)
	}
	for i, c := range []transport.Completion{{Data: data[:1024], More: true}, {Data: data[1024:]}} {
		if err := w.qp.Complete(r.Token, c); err != nil {
			t.Fatalf("part %d of the repeat: %v", i, err)
		}
	}
	w.expect(response{op: roce.RCRDMAReadResponseFirst, psn: at(1), n: 256},
		response{op: roce.RCRDMAReadResponseMiddle, psn: at(2), n: 256},
		response{op: roce.RCRDMAReadResponseMiddle, psn: at(3), n: 256},
		response{op: roce.RCRDMAReadResponseMiddle, psn: at(4), n: 256},
		response{op: roce.RCRDMAReadResponseLast, psn: at(5), n: 76})
}

// TestTargetReadPartsThatDoNotFit: parts are checked. A part that is not a
// whole number of path MTUs, or parts longer than the READ, fail the READ
// (a remote operational error NAK), releasing what it held; More on
// another kind of request is refused with ErrBadPart.
func TestTargetReadPartsThatDoNotFit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parts [][2]int // offset, length
		more  []bool
	}{
		{"not whole MTUs", [][2]int{{0, 300}}, []bool{true}},
		{"longer than the READ", [][2]int{{0, 512}, {0, 768}}, []bool{true, false}},
		{"more after the end", [][2]int{{0, 1024}}, []bool{true}},
		{"the last too short", [][2]int{{0, 512}, {0, 256}}, []bool{true, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWire(t, 0, "completed READ has the wrong length")
			data := make([]byte, 1024)
			w.read(0, 0x1000, 1024)
			w.waitOffered(1)
			var leases []*lease
			for i, p := range tc.parts {
				l := new(lease)
				leases = append(leases, l)
				w.complete(0, transport.Completion{Data: data[p[0] : p[0]+p[1]], Lease: l, More: tc.more[i]})
			}
			// What was sent of it stands; then the NAK.
			for {
				select {
				case p := <-w.got:
					if p.Opcode() == roce.RCAcknowledge {
						if syn := p.AETH.Syndrome(); syn != roce.NAKSyndrome(roce.NAKRemoteOperationalError) || p.BTH.PSN() != at(0) {
							t.Fatalf("got %v psn %d, want a remote operational error NAK for the READ", syn, p.BTH.PSN())
						}
						for _, l := range leases {
							waitFor(t, "a part's lease released", func() bool { return l.released.Load() == 1 })
						}
						return
					}
				case <-time.After(2 * time.Second):
					t.Fatalf("no NAK for the READ")
				}
			}
		})
	}
	t.Run("more on a SEND", func(t *testing.T) {
		w := newWire(t, 0)
		w.sendOnly(0, "x")
		w.waitOffered(1)
		err := w.qp.Complete(w.target.token(t, at(0)), transport.Completion{More: true})
		if !errors.Is(err, transport.ErrBadPart) {
			t.Fatalf("Complete with More on a SEND: %v, want ErrBadPart", err)
		}
	})
}
