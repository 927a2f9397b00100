package xdp_test

import (
	"bytes"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/xdp"
)

// testFrames is a FrameAllocator over a UMEM that catches frames given
// back twice or never taken.
type testFrames struct {
	mu     sync.Mutex
	umem   []byte
	size   int
	free   []uint64
	out    map[uint64]bool
	errors []string
	limit  int // frames it hands out at most (0: all)
}

func (f *testFrames) init(umem []byte, size int) {
	f.umem, f.size, f.out = umem, size, map[uint64]bool{}
	n := len(umem) / size
	if f.limit > 0 {
		n = f.limit
	}
	for i := n - 1; i >= 0; i-- {
		f.free = append(f.free, uint64(i*size))
	}
}

func (f *testFrames) AllocFrame() (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.free) == 0 {
		return 0, false
	}
	off := f.free[len(f.free)-1]
	f.free = f.free[:len(f.free)-1]
	f.out[off] = true
	return off, true
}

func (f *testFrames) FreeFrame(off uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.out[off] {
		f.errors = append(f.errors, "frame given back that is not out")
		return
	}
	delete(f.out, off)
	f.free = append(f.free, off)
}

func (f *testFrames) outstanding() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.out)
}

// readLent reads n packets with ReadBatchLent, keeping every frame.
func readLent(tb testing.TB, c *xdp.Conn, n int) []roce.Message {
	tb.Helper()
	var got []roce.Message
	deadline := time.Now().Add(testTimeout)
	errc := make(chan error, 1)
	batch := make([]roce.Message, 64)
	for len(got) < n {
		if time.Now().After(deadline) {
			tb.Fatalf("read %d of %d packets in %v", len(got), n, testTimeout)
		}
		go func() {
			k, err := c.ReadBatchLent(batch[:min(len(batch), n-len(got))])
			got = append(got, batch[:k]...)
			errc <- err
		}()
		select {
		case err := <-errc:
			if err != nil {
				tb.Fatalf("ReadBatchLent after %d of %d: %v", len(got), n, err)
			}
		case <-time.After(testTimeout):
			c.Close()
			<-errc
			tb.Fatalf("read %d of %d packets in %v", len(got), n, testTimeout)
		}
	}
	return got
}

// TestConnLendsFrames: a Conn made with Frames lends each received packet
// in its frame, keeps receiving while the caller holds far more frames
// than its rings have, and gives every frame back: those returned, and on
// Close those it held.
func TestConnLendsFrames(t *testing.T) {
	needRoot(t)
	a, b := &side{}, &side{frames: &testFrames{}}
	setupSides(t, "l", a, b, xdp.BindCopy, xdp.Options{})
	if !b.conn.LendsFrames() || a.conn.LendsFrames() {
		t.Fatalf("LendsFrames: %v with Frames, %v without", b.conn.LendsFrames(), a.conn.LendsFrames())
	}
	if _, err := a.conn.ReadBatchLent(make([]roce.Message, 1)); !errors.Is(err, xdp.ErrNotSupported) {
		t.Errorf("ReadBatchLent without Frames: %v, want ErrNotSupported", err)
	}
	held := b.frames.outstanding() // the rings' frames
	const rounds, per = 4, 300     // 1200 frames kept: more than the 512-entry fill ring
	var lent []roce.Message
	for r := range rounds {
		pkts := make([][]byte, per)
		for i := range pkts {
			pkts[i] = sendOnly(b.qpn, uint32(r*per+i), bytes.Repeat([]byte{byte(r*per + i)}, 512))
		}
		for i := 0; i < per; i += 50 {
			sendPackets(t, a.conn, b.addr, 0, pkts[i:i+50]...)
			lent = append(lent, readLent(t, b.conn, 50)...)
		}
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b.frames.umem)))
	seen := map[uint64]bool{}
	for i, m := range lent {
		at := uintptr(unsafe.Pointer(unsafe.SliceData(m.Buf))) - base
		switch {
		case !m.Lent || m.Frame%4096 != 0 || seen[m.Frame]:
			t.Fatalf("message %d: Lent %v, frame %#x (seen before %v)", i, m.Lent, m.Frame, seen[m.Frame])
		case at < uintptr(m.Frame) || at+uintptr(m.N) > uintptr(m.Frame)+4096:
			t.Fatalf("message %d: its %d bytes at UMEM offset %#x lie outside its frame %#x", i, m.N, at, m.Frame)
		}
		seen[m.Frame] = true
		var p roce.Packet
		if err := p.Decode(m.Buf[:m.N]); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		if psn := p.BTH.PSN(); len(p.Payload) != 512 || p.Payload[0] != byte(psn) || p.Payload[511] != byte(psn) {
			t.Fatalf("message %d (PSN %d): payload of %d bytes starting %#x", i, psn, len(p.Payload), p.Payload[0])
		}
	}
	if got, want := b.frames.outstanding(), held+len(lent); got != want {
		t.Errorf("frames out while %d are lent: %d, want %d (the rings' %d and the lent)", len(lent), got, want, held)
	}
	st, err := b.conn.Stats()
	if err != nil || st.Lent != uint64(len(lent)) || st.FillShort != 0 {
		t.Errorf("stats %+v (%v): want Lent %d, FillShort 0", st, err, len(lent))
	}
	frames := make([]uint64, 0, len(lent))
	for _, m := range lent[:len(lent)/2] {
		frames = append(frames, m.Frame)
	}
	b.conn.ReturnFrames(frames)
	if got, want := b.frames.outstanding(), held+len(lent)-len(frames); got != want {
		t.Errorf("frames out after %d came back: %d, want %d", len(frames), got, want)
	}
	if err := b.conn.Close(); err != nil {
		t.Fatal(err)
	}
	frames = frames[:0]
	for _, m := range lent[len(lent)/2:] {
		frames = append(frames, m.Frame)
	}
	b.conn.ReturnFrames(frames) // after Close: still the caller's to give back
	if n := b.frames.outstanding(); n != 0 || len(b.frames.errors) > 0 {
		t.Errorf("after Close and every frame returned: %d frames out, errors %v", n, b.frames.errors)
	}
}

// TestConnFramesTooFew: a Conn whose allocator cannot fill its rings is
// refused, and gives back what it took.
func TestConnFramesTooFew(t *testing.T) {
	needRoot(t)
	f := &testFrames{limit: 100}
	b := &side{frames: f}
	nsB := newNetns(t, nsName("fb"))
	nsA := newNetns(t, nsName("fa"))
	_, ifB := vethPair(t, nsA, nsB, "10.99.0.1/24", "10.99.0.2/24", "02:00:00:00:99:0a", "02:00:00:00:99:0b")
	b.ns, b.ifc, b.addr = nsB, ifB, netip.MustParseAddrPort("10.99.0.2:4791")
	err := b.tryStart(t, 0, xdp.BindCopy, xdp.Options{})
	if err == nil {
		b.conn.Close()
		t.Fatal("NewConn with 100 frames for 512-entry rings succeeded")
	}
	t.Logf("refused as expected: %v", err)
	if n := f.outstanding(); n != 0 || len(f.errors) > 0 {
		t.Errorf("after the refusal %d frames are out, errors %v", n, f.errors)
	}
}
