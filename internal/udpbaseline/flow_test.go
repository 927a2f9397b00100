package udpbaseline_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

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
