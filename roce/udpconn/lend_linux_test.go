//go:build linux

package udpconn_test

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/udpconn"
)

// frameSource is a udpconn.FrameSource over an arena of n frames that
// counts each frame's references and every misuse (a reference to, or a
// free of, a frame that is not taken).
type frameSource struct {
	arena []byte
	mu    sync.Mutex
	refs  []int
	limit int // at most this many frames taken at once
	taken int
	bad   []string
}

func newFrameSource(n int) *frameSource {
	return &frameSource{arena: make([]byte, n*udpconn.FrameLen), refs: make([]int, n), limit: n}
}

func (f *frameSource) AllocFrame() (uint64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.taken >= f.limit {
		return 0, false
	}
	for i, r := range f.refs {
		if r == 0 {
			f.refs[i] = 1
			f.taken++
			return uint64(i * udpconn.FrameLen), true
		}
	}
	return 0, false
}

func (f *frameSource) RefFrame(off uint64) { f.add(off, 1, "ref") }

func (f *frameSource) FreeFrame(off uint64) { f.add(off, -1, "free") }

func (f *frameSource) add(off uint64, d int, what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := int(off / udpconn.FrameLen)
	if off%udpconn.FrameLen != 0 || i >= len(f.refs) || f.refs[i] == 0 {
		f.bad = append(f.bad, fmt.Sprintf("%s of frame %#x, not taken", what, off))
		return
	}
	if f.refs[i] += d; f.refs[i] == 0 {
		f.taken--
	}
}

// held returns the frames with references left, and the misuses seen.
func (f *frameSource) held() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.taken, f.bad
}

// in says whether b lies in the arena's frame at off.
func (f *frameSource) in(b []byte, off uint64) bool {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := uintptr(unsafe.Pointer(&f.arena[off]))
	return p >= lo && p+uintptr(len(b)) <= lo+udpconn.FrameLen
}

// lentPacket is a packet ReadBatchLent lent: its PSN, where it lies, and
// its frame.
type lentPacket struct {
	psn   int
	buf   []byte
	frame uint64
}

// checkPacket says what is wrong with b as packet k of the test's stream
// (PSN k, payload bytes k+j of the length payload gives), if anything.
func checkPacket(b []byte, k int, payload func(int) int) error {
	var pkt roce.Packet
	if err := pkt.Decode(b); err != nil {
		return err
	}
	if pkt.BTH.PSN() != uint32(k) || len(pkt.Payload) != payload(k) {
		return fmt.Errorf("PSN %d, %d payload bytes; want PSN %d, %d bytes", pkt.BTH.PSN(), len(pkt.Payload), k, payload(k))
	}
	for j, v := range pkt.Payload {
		if v != byte(k+j) {
			return fmt.Errorf("payload byte %d is %d, want %d", j, v, byte(k+j))
		}
	}
	return nil
}

// readLent reads packets first to end-1 with ReadBatchLent in batches of
// up to in, checking each: whole, in order, from from, and lent in its
// frame, or else in no frame. With keep, it returns the lent packets
// (their frames the caller's to return); without, it returns each
// batch's frames after the batch, as a device does. It also returns how
// many were lent.
func readLent(t *testing.T, c *udpconn.Conn, src *frameSource, from netip.AddrPort, first, end, in int, keep bool, payload func(int) int) ([]lentPacket, int) {
	t.Helper()
	msgs := make([]roce.Message, in)
	if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var kept []lentPacket
	var frames []uint64
	lent := 0
	for k := first; k < end; {
		got, err := c.ReadBatchLent(msgs[:min(in, end-k)])
		if err != nil {
			t.Fatalf("%d of packets %d to %d read: %v", k-first, first, end, err)
		}
		frames = frames[:0]
		for _, m := range msgs[:got] {
			if err := checkPacket(m.Buf[:m.N], k, payload); err != nil || m.Addr != from {
				t.Fatalf("packet %d from %v: %v", k, m.Addr, err)
			}
			if m.Lent {
				lent++
				if !src.in(m.Buf[:m.N], m.Frame) {
					t.Fatalf("packet %d: lent in frame %#x, but its bytes lie elsewhere", k, m.Frame)
				}
				frames = append(frames, m.Frame)
				if keep {
					kept = append(kept, lentPacket{k, m.Buf[:m.N], m.Frame})
				}
			} else {
				for off := uint64(0); off < uint64(len(src.arena)); off += udpconn.FrameLen {
					if src.in(m.Buf[:1], off) {
						t.Fatalf("packet %d: not lent, but it lies in frame %#x", k, off)
					}
				}
			}
			k++
		}
		if !keep {
			c.ReturnFrames(frames)
		}
	}
	return kept, lent
}

// TestReadBatchLent: a GRO conn given frames reads into them and lends
// each packet where it landed, several packets to a frame, each with a
// reference, or, from a read of 16 KiB or less, copied one after another
// into a frame of its own (packed); what it could not read into a frame
// (none free) it hands out unlent, from its own memory. Over IPv4 and IPv6 (the ICRC
// verified in place), with frames for every read, for one, and for none;
// packets held past later reads keep their bytes. Once every lent frame
// is returned and the conn closed, no frame has a reference left, and no
// reference was dropped twice.
func TestReadBatchLent(t *testing.T) {
	needOffload(t)
	for _, ip := range []string{"127.0.0.1", "::1"} {
		for _, frames := range []int{32, 1, 0} {
			t.Run(fmt.Sprintf("%s %d frames", ip, frames), func(t *testing.T) {
				src := newFrameSource(max(frames, 1))
				src.limit = frames
				a := listen(t, ip)
				b := listenWith(t, ip, udpconn.Options{Frames: src, Arena: src.arena})
				if !b.LendsFrames() {
					t.Fatal("a GRO conn with frames does not lend")
				}
				// 16 packets of 4 KiB (two GSO sends, two GRO buffers), then
				// 40 single ones of 1500 bytes, then 40 more: past the 8
				// buffers of a lent read, and past the frames the source
				// has.
				payload := func(i int) int {
					if i < 16 {
						return 4096
					}
					return 1500 // 40 fill most of a pack frame: 80 roll over twice
				}
				const n = 56
				var ss []seg
				for i := range n {
					ss = append(ss, seg{payload: payload(i)})
				}
				msgs := batchOf(ss, []*udpconn.Conn{b})
				if _, err := a.WriteBatch(msgs[:16]); err != nil {
					t.Fatal(err)
				}
				for i := 16; i < n; i++ {
					if _, err := a.WriteBatch(msgs[i : i+1]); err != nil {
						t.Fatal(err)
					}
				}
				// The first 56 are held while 40 more are read: the frames
				// they were lent in, or packed into, are not read or packed
				// into again.
				held, lent1 := readLent(t, b, src, a.LocalAddr(), 0, 16, 5, true, payload)
				held2, lent2 := readLent(t, b, src, a.LocalAddr(), 16, n, 7, true, payload)
				more := batchOf(append(ss, ss[16:]...), []*udpconn.Conn{b})[n:]
				for i := range more {
					if _, err := a.WriteBatch(more[i : i+1]); err != nil {
						t.Fatal(err)
					}
				}
				_, lent3 := readLent(t, b, src, a.LocalAddr(), n, n+40, 7, false, payload)
				lent2 += lent3
				for _, p := range append(held, held2...) {
					if err := checkPacket(p.buf, p.psn, payload); err != nil {
						t.Errorf("held packet %d, in frame %#x, after later reads: %v", p.psn, p.frame, err)
					}
					b.ReturnFrames([]uint64{p.frame})
				}
				st := b.Stats().Snapshot()
				lent := lent1 + lent2
				if int(st.RxLent) != lent {
					t.Errorf("RxLent %d, want the %d packets lent", st.RxLent, lent)
				}
				switch {
				case frames == 0 && (lent != 0 || st.RxLendShort == 0):
					t.Errorf("no frames: %d packets lent, %d reads short; want none lent, the reads short", lent, st.RxLendShort)
				case frames == 1 && (lent == 0 || lent == n+40 || st.RxLendShort == 0):
					t.Errorf("one frame: %d packets of %d lent, %d reads short; want some of each", lent, n+40, st.RxLendShort)
				case frames == 32 && (lent != n+40 || st.RxLendShort != 0):
					t.Errorf("32 frames: %d packets of %d lent, %d reads short; want all lent", lent, n+40, st.RxLendShort)
				}
				if held, _ := src.held(); st.RxFramesHeld > 9 || int(st.RxFramesHeld) != held {
					t.Errorf("the conn holds %d frames for its next read and packing (the source counts %d taken), want at most 9, and the same", st.RxFramesHeld, held)
				}
				// The 1500-byte datagrams came one to a read: packed into a
				// frame of the conn's, where there are frames to spare.
				if frames == 32 && st.RxPacked < 80 {
					t.Errorf("%d datagrams packed, want the 80 short ones at least", st.RxPacked)
				}
				b.Close()
				if held := b.Stats().Snapshot().RxFramesHeld; held != 0 {
					t.Errorf("the conn holds %d frames after Close", held)
				}
				if got, err := b.ReadBatchLent(make([]roce.Message, 4)); got != 0 || !errors.Is(err, roce.ErrConnClosed) {
					t.Errorf("ReadBatchLent after Close: %d, %v; want ErrConnClosed", got, err)
				}
				if refs, bad := src.held(); refs != 0 || len(bad) != 0 {
					t.Errorf("after every frame returned and Close: %d frames still referenced; misuses %v", refs, bad)
				}
			})
		}
	}
}

// TestReadBatchLentRefused: a conn without frames, or without GRO, lends
// nothing and says why a lent read cannot be made.
func TestReadBatchLentRefused(t *testing.T) {
	src := newFrameSource(2)
	for _, tc := range []struct {
		what string
		o    udpconn.Options
	}{
		{"no frames", udpconn.Options{}},
		{"no GRO", udpconn.Options{NoGRO: true, Frames: src, Arena: src.arena}},
	} {
		c := listenWith(t, "127.0.0.1", tc.o)
		if c.LendsFrames() {
			t.Errorf("%s: LendsFrames", tc.what)
		}
		if _, err := c.TryReadBatchLent(make([]roce.Message, 1)); err == nil {
			t.Errorf("%s: TryReadBatchLent: no error", tc.what)
		}
	}
	if _, err := udpconn.Listen(udpconn.Options{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Frames: src, Arena: src.arena[:100]}); err == nil {
		t.Error("frames over an arena shorter than a frame: no error")
	}
}
