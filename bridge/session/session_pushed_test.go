package session_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rbridge/rbridge/bridge/session"
	"github.com/rbridge/rbridge/roce/transport"
)

// pushStager stages the regions it is given for the first message from
// A, whose bytes carry one 12-byte descriptor (address, key) per region
// that Restage rewrites; the first message from B finishes it, pushing
// what pushed says (Message.Pushed).
type pushStager struct {
	regions []session.Region
	pushed  []int

	mu  sync.Mutex
	tag uint64
}

var _ session.Stager = (*pushStager)(nil)

func (p *pushStager) Message(m *session.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.Dir == 0 {
		p.tag = m.Seq
		m.Tag, m.Stage = m.Seq, p.regions
		return nil
	}
	m.Finish, m.Finishes, m.Push, m.Pushed = p.tag, true, true, p.pushed
	return nil
}

func (p *pushStager) Sent(int, uint64, transport.Status) {}

func (p *pushStager) Restage(dir int, tag uint64, b session.Pieces, i int, addr uint64, rkey uint32) error {
	var d [12]byte
	binary.BigEndian.PutUint64(d[:], addr)
	binary.BigEndian.PutUint32(d[8:], rkey)
	_, err := b.WriteAt(d[:], int64(i*12))
	return err
}

func (p *pushStager) Unstaged(int, uint64, error) []byte { return nil }

// TestSessionPushed: a response's Message.Pushed says how many bytes of
// each region the far peer wrote: only those are pushed, from the
// region's start; nil pushes every region the far peer WRITEs whole; a
// region without an entry, or with 0, is not pushed. An entry past its
// region, below 0, or above 0 for a region the far peer READs refuses
// the response: the session ends, naming it, and the originator's memory
// is not written.
func TestSessionPushed(t *testing.T) {
	const a, b, c = 0, 64 << 10, 128 << 10 // the regions' offsets in the client's memory
	for _, tc := range []struct {
		name   string
		pushed []int
		want   [3]int // bytes written at a, b, c
		refuse string
	}{
		{"nil: whole", nil, [3]int{0, 8192, 100}, ""},
		{"less than written", []int{0, 5000, 1}, [3]int{0, 5000, 1}, ""},
		{"an entry 0, one missing", []int{0, 0}, [3]int{}, ""},
		{"past its region", []int{0, 8193, 0}, [3]int{}, "wrote 8193 bytes into region 1 of 3"},
		{"below 0", []int{0, -1}, [3]int{}, "wrote -1 bytes into region 1 of 3"},
		{"into a region the far peer READs", []int{1, 0, 0}, [3]int{}, "wrote 1 bytes into region 0 of 3"},
		{"more entries than regions", []int{0, 0, 0, 5}, [3]int{}, "wrote 5 bytes into region 3 of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &pushStager{pushed: tc.pushed}
			r := newRig(t, rigOpts{protocol: p, exposes: true, classes: stagedClasses, clientAccess: transport.AccessRemoteRead | transport.AccessRemoteWrite})
			key, base := r.cmr.RKey(), r.cmr.Addr()
			p.regions = []session.Region{{Remote: base + 2<<20 + a, RKey: key, Len: 4096}, {Remote: base + 2<<20 + b, RKey: key, Len: 8192, Write: true},
				{Remote: base + 2<<20 + c, RKey: key, Len: 100, Write: true}}
			for i := range 256 << 10 {
				r.cmem[2<<20+i] = 0xff
			}
			if err := r.client.PostRecv(transport.RecvWR{ID: 1, Local: transport.SGE{MR: r.cmr, Offset: 1 << 20, Length: 64}}); err != nil {
				t.Fatal(err)
			}
			msg := make([]byte, 3*12)
			copy(r.cmem, msg)
			if err := r.client.PostSend(transport.SendWR{ID: 1, Opcode: transport.OpSend, Signaled: true, Local: transport.SGE{MR: r.cmr, Length: len(msg)}}); err != nil {
				t.Fatal(err)
			}
			// The far peer WRITEs every region it may WRITE whole, then
			// responds.
			e := r.far.nthSend(t, 0, "the staged message at the far peer")
			for i, g := range p.regions {
				if !g.Write {
					continue
				}
				addr, k := binary.BigEndian.Uint64(e.data[i*12:]), binary.BigEndian.Uint32(e.data[i*12+8:])
				if _, st := r.exposer.access(addr, k, g.Len, bytes.Repeat([]byte{byte(0x10 + i)}, g.Len)); st != transport.StatusSuccess {
					t.Fatalf("the far peer's WRITE of region %d: %v", i, st)
				}
			}
			reply := r.far.send(r.pool, []byte("done"), 0, false)
			if tc.refuse != "" {
				if reply.Result != transport.Failed {
					t.Errorf("the refused response: %v, want failed", reply.Result)
				}
				select {
				case <-r.sess.Done():
				case <-time.After(10 * time.Second):
					t.Fatal("the session did not end after the refusal")
				}
				if err := r.sess.Err(); !errors.Is(err, session.ErrRefused) || !strings.Contains(err.Error(), tc.refuse) {
					t.Errorf("the session ended with %v: want ErrRefused naming %q", err, tc.refuse)
				}
			} else {
				if reply.Result != transport.Pending {
					t.Fatalf("the response: %v", reply.Result)
				}
				r.receives(1, "the response")
			}
			for i, off := range []int{a, b, c} {
				g := p.regions[i]
				got := r.cmem[2<<20+off : 2<<20+off+g.Len]
				n := tc.want[i]
				if !bytes.Equal(got[:n], bytes.Repeat([]byte{byte(0x10 + i)}, n)) || !bytes.Equal(got[n:], bytes.Repeat([]byte{0xff}, g.Len-n)) {
					t.Errorf("region %d: want its first %d bytes pushed and no more", i, n)
				}
			}
			waitUntil(t, "exposures revoked, staging released", func() bool {
				return r.exposer.live() == 0 && r.sess.Stats().StagingInUse.Load() == 0
			})
		})
	}
}
