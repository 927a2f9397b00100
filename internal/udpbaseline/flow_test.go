package udpbaseline_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/rbridge/rbridge/internal/needs"
	"github.com/rbridge/rbridge/internal/udpbaseline"
)

// TestFlow moves messages of one and of several datagrams over loopback,
// IPv4 and IPv6: every datagram arrives, and whole messages are counted.
func TestFlow(t *testing.T) {
	for _, tc := range []struct {
		ip                     string
		size, dgram, msgs, per int
	}{
		{"127.0.0.1", 64, 4096, 1000, 1},
		{"127.0.0.1", 65536, 4096, 100, 16},
		{"127.0.0.1", 5000, 1024, 50, 5},
		{"::1", 4096, 4096, 300, 1},
	} {
		f, err := udpbaseline.Open(udpbaseline.Options{From: netip.AddrPortFrom(netip.MustParseAddr(tc.ip), 0),
			To: netip.AddrPortFrom(netip.MustParseAddr(tc.ip), 0), Size: tc.size, Datagram: tc.dgram, Window: 32})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		for sent := 0; sent < tc.msgs; sent += 7 {
			if err := f.Send(ctx, min(7, tc.msgs-sent)); err != nil {
				t.Fatal(err)
			}
		}
		r, err := f.Drain(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		want := uint64(tc.msgs * tc.per)
		if r.Sent != want || r.Received != want || r.Messages != uint64(tc.msgs) || r.Lost() != 0 {
			t.Errorf("%s, %d-byte messages: %+v, want %d datagrams sent and received, %d messages", tc.ip, tc.size, r, want, tc.msgs)
		}
		if r.End.Before(start) || f.Received() != r.Received {
			t.Errorf("%s: end %v before the start %v, or Received %d", tc.ip, r.End, start, f.Received())
		}
		if err := f.Close(); err != nil {
			t.Error(err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	}
}

func TestOpenBadOptions(t *testing.T) {
	v4, v6 := netip.MustParseAddrPort("127.0.0.1:0"), netip.MustParseAddrPort("[::1]:0")
	for _, o := range []udpbaseline.Options{
		{From: v4, To: v6, Size: 64, Datagram: 4096, Window: 1},
		{From: v4, Size: 64, Datagram: 4096, Window: 1},
		{From: v4, To: v4, Size: 0, Datagram: 4096, Window: 1},
		{From: v4, To: v4, Size: 64, Datagram: 0, Window: 1},
		{From: v4, To: v4, Size: 64, Datagram: 4096, Window: 0},
		{From: v4, To: v4, Size: 64, Datagram: 4096, Window: 1, Batch: 1025},
	} {
		if f, err := udpbaseline.Open(o); err == nil {
			f.Close()
			t.Errorf("options %+v: no error", o)
		}
	}
}

// TestFlowOffload moves messages with GSO on the sender and GRO on the
// receiver, each on and off, over IPv4 and IPv6: every datagram arrives
// and is counted as one however the kernel batched it; with GSO the
// sends hold several datagrams, and with both a read does too.
func TestFlowOffload(t *testing.T) {
	for _, ip := range []string{"127.0.0.1", "::1"} {
		for _, gso := range []bool{true, false} {
			for _, gro := range []bool{true, false} {
				a := netip.AddrPortFrom(netip.MustParseAddr(ip), 0)
				f, err := udpbaseline.Open(udpbaseline.Options{From: a, To: a, Size: 65536, Datagram: 4096, Window: 8, NoGSO: !gso, NoGRO: !gro})
				if err != nil {
					t.Fatal(err)
				}
				name := fmt.Sprintf("%s gso %v gro %v", ip, gso, gro)
				if o := f.Offload(); o.GSO != gso || o.GRO != gro {
					f.Close()
					needs.Check(t, "UDP GSO and GRO (Linux 5.0)", fmt.Errorf("%s: %v", name, o))
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				for range 20 {
					if err := f.Send(ctx, 5); err != nil {
						t.Fatal(err)
					}
				}
				r, err := f.Drain(ctx)
				cancel()
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				if r.Sent != 100*16 || r.Received != r.Sent || r.Messages != 100 {
					t.Errorf("%s: %+v, want 1600 datagrams sent and received", name, r)
				}
				if gso != (r.TxBuffers < r.Sent) || r.TxCalls == 0 || r.TxCalls > r.TxBuffers {
					t.Errorf("%s: %d sends in %d calls for %d datagrams", name, r.TxBuffers, r.TxCalls, r.Sent)
				}
				if (gso && gro) != (r.RxBuffers < r.Received) || r.RxCalls == 0 || r.RxCalls > r.RxBuffers {
					t.Errorf("%s: %d reads in %d calls for %d datagrams", name, r.RxBuffers, r.RxCalls, r.Received)
				}
			}
		}
	}
}
