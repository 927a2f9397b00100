package simnet_test

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/simnet"
)

func send(t *testing.T, c *simnet.Conn, to netip.AddrPort, n int, ecn uint8) {
	t.Helper()
	for i := range n {
		b := []byte{byte(i), byte(i >> 8)}
		if _, err := c.WriteBatch([]roce.Message{{Buf: b, N: 2, Addr: to, ECN: ecn}}); err != nil {
			t.Fatal(err)
		}
	}
}

func drain(t *testing.T, c *simnet.Conn, want int) []roce.Message {
	t.Helper()
	var got []roce.Message
	done := make(chan struct{})
	go func() {
		defer close(done)
		msgs := make([]roce.Message, 64)
		for i := range msgs {
			msgs[i].Buf = make([]byte, 16)
		}
		for len(got) < want {
			n, err := c.ReadBatch(msgs)
			if err != nil {
				return
			}
			for _, m := range msgs[:n] {
				got = append(got, roce.Message{Buf: append([]byte(nil), m.Buf[:m.N]...), N: m.N, Addr: m.Addr, ECN: m.ECN})
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		c.Close()
		<-done
	}
	return got
}

func TestImpairments(t *testing.T) {
	a0, b0 := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	const n = 20000
	for _, tc := range []struct {
		name string
		o    simnet.Options
		lo   int // delivered at least
		hi   int // and at most
	}{
		{"clean", simnet.Options{}, n, n},
		{"loss 10%", simnet.Options{Loss: 0.1, Seed: 1}, n * 85 / 100, n * 95 / 100},
		{"dup 10%", simnet.Options{Duplicate: 0.1, Seed: 2}, n * 105 / 100, n * 115 / 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.QueueLen = 2 * n // room for the whole burst: this test is not about overflow
			net := simnet.New(tc.o)
			a, _ := net.Listen(a0)
			b, _ := net.Listen(b0)
			defer a.Close()
			send(t, a, b0, n, 0) // delivery is synchronous without delay
			delivered := int(net.Stats().Delivered.Load())
			got := drain(t, b, delivered)
			if len(got) != delivered {
				t.Fatalf("read %d packets, the network delivered %d", len(got), delivered)
			}
			if len(got) < tc.lo || len(got) > tc.hi {
				t.Errorf("delivered %d of %d, want [%d, %d]", len(got), n, tc.lo, tc.hi)
			}
			for _, m := range got {
				if m.Addr != a0 {
					t.Fatalf("from %v, want %v", m.Addr, a0)
				}
			}
		})
	}
	t.Run("reorder and ECN", func(t *testing.T) {
		net := simnet.New(simnet.Options{Reorder: 0.2, MarkECN: 1, Seed: 3})
		a, _ := net.Listen(a0)
		b, _ := net.Listen(b0)
		send(t, a, b0, 1000, 2)
		net.Flush()
		got := drain(t, b, 1000)
		if len(got) != 1000 {
			t.Fatalf("delivered %d of 1000", len(got))
		}
		late := 0
		for i, m := range got {
			if int(m.Buf[0])|int(m.Buf[1])<<8 != i {
				late++
			}
			if m.ECN != roce.ECNCE {
				t.Fatalf("packet %d ECN %d, want CE", i, m.ECN)
			}
		}
		if late == 0 {
			t.Errorf("nothing was reordered")
		}
	})
}

func TestClose(t *testing.T) {
	net := simnet.New(simnet.Options{})
	c, _ := net.Listen(netip.MustParseAddrPort("10.0.0.1:4791"))
	if _, err := net.Listen(c.LocalAddr()); err == nil {
		t.Errorf("a second conn on the same address: no error")
	}
	c.Close()
	if _, err := c.ReadBatch(make([]roce.Message, 1)); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("read after close: %v", err)
	}
	if _, err := c.WriteBatch(nil); !errors.Is(err, roce.ErrConnClosed) {
		t.Errorf("write after close: %v", err)
	}
}

// TestDelayKeepsOrder: a constant delay delays, it does not reorder.
func TestDelayKeepsOrder(t *testing.T) {
	a0, b0 := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	net := simnet.New(simnet.Options{Delay: time.Millisecond})
	a, _ := net.Listen(a0)
	b, _ := net.Listen(b0)
	start := time.Now()
	send(t, a, b0, 2000, 0)
	got := drain(t, b, 2000)
	if len(got) != 2000 {
		t.Fatalf("delivered %d of 2000", len(got))
	}
	for i, m := range got {
		if int(m.Buf[0])|int(m.Buf[1])<<8 != i {
			t.Fatalf("packet %d arrived as number %d", int(m.Buf[0])|int(m.Buf[1])<<8, i)
		}
	}
	if el := time.Since(start); el < time.Millisecond {
		t.Errorf("delivered in %v, under the 1 ms delay", el)
	}
}

// TestRecycledBytes: packets' buffers are recycled, so every packet read
// must hold its own bytes, whatever the network did to the others (lost,
// duplicated, held back, dropped for a full queue) and whatever their
// sizes (a buffer is reused for a larger packet and a smaller one).
func TestRecycledBytes(t *testing.T) {
	a0, b0 := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	net := simnet.New(simnet.Options{Loss: 0.1, Duplicate: 0.3, Reorder: 0.2, Seed: 7, QueueLen: 64})
	a, _ := net.Listen(a0)
	b, _ := net.Listen(b0)
	defer a.Close()
	defer b.Close()
	// packet i: 4 bytes of i, then i's size in bytes of (i+k)&0xff.
	size := func(i int) int { return 4 + (i*37)%5000 }
	msgs := make([]roce.Message, 8)
	for i := range msgs {
		msgs[i].Buf = make([]byte, 8192)
	}
	checked := 0
	for i := range 3000 {
		p := make([]byte, size(i))
		binary.BigEndian.PutUint32(p, uint32(i))
		for k := 4; k < len(p); k++ {
			p[k] = byte(i + k)
		}
		if _, err := a.WriteBatch([]roce.Message{{Buf: p, N: len(p), Addr: b0}}); err != nil {
			t.Fatal(err)
		}
		if i%50 != 49 { // let the queue overflow now and then
			continue
		}
		for {
			n, err := b.TryReadBatch(msgs)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			for _, m := range msgs[:n] {
				got := m.Buf[:m.N]
				j := int(binary.BigEndian.Uint32(got))
				if len(got) != size(j) {
					t.Fatalf("packet %d: %d bytes, sent %d", j, len(got), size(j))
				}
				for k := 4; k < len(got); k++ {
					if got[k] != byte(j+k) {
						t.Fatalf("packet %d: byte %d is %#x, sent %#x", j, k, got[k], byte(j+k))
					}
				}
				checked++
			}
		}
	}
	st := net.Stats().Snapshot()
	if checked == 0 || st.Lost == 0 || st.Duplicated == 0 || st.Reordered == 0 || st.Overflow == 0 {
		t.Errorf("read %d; the network lost %d, duplicated %d, reordered %d, overflowed %d: every impairment should have happened",
			checked, st.Lost, st.Duplicated, st.Reordered, st.Overflow)
	}
}

// TestNoAllocation: a packet written and read allocates nothing.
func TestNoAllocation(t *testing.T) {
	a0, b0 := netip.MustParseAddrPort("10.0.0.1:4791"), netip.MustParseAddrPort("10.0.0.2:4791")
	net := simnet.New(simnet.Options{})
	a, _ := net.Listen(a0)
	b, _ := net.Listen(b0)
	defer a.Close()
	defer b.Close()
	out := []roce.Message{{Buf: make([]byte, 4096), N: 4096, Addr: b0}}
	in := []roce.Message{{Buf: make([]byte, 4096)}}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := a.WriteBatch(out); err != nil {
			t.Fatal(err)
		}
		if n, err := b.ReadBatch(in); n != 1 || err != nil {
			t.Fatalf("read %d: %v", n, err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations a packet, want 0", allocs)
	}
}
