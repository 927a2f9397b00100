package roce_test

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/rbridge/rbridge/roce"
)

// TestAppendPacketGather: headers, payload and trailer put together are
// AppendPacket's packet, pad included, for every payload length mod 4 and
// for opcodes with and without extension headers and payload.
func TestAppendPacketGather(t *testing.T) {
	for _, op := range []roce.Opcode{roce.RCSendOnly, roce.RCRDMAWriteFirst, roce.RCRDMAWriteOnlyWithImmediate, roce.RCAcknowledge, roce.UDSendOnly} {
		for _, n := range []int{0, 1, 2, 3, 4, 255, 1024} {
			f := roce.PacketFields{BTH: roce.BTHFields{Opcode: op, PKey: roce.DefaultPKey, DestQP: 0x12, PSN: 9}}
			f.RETH = roce.RETHFields{VA: 0x1000, RKey: 7, DMALen: uint32(n)}
			f.ImmDt.Imm = 0xabcd
			f.DETH = roce.DETHFields{QKey: 0x11, SrcQP: 0x22}
			f.AETH = roce.AETHFields{MSN: 3}
			payload := bytes.Repeat([]byte{0x5a}, n)
			want := roce.AppendPacket(nil, &f, payload)
			prefix := []byte("kept")
			g, hdr := roce.AppendPacketGather(append([]byte(nil), prefix...), &f, n)
			if !bytes.Equal(g[:len(prefix)], prefix) {
				t.Fatalf("%v: the buffer's prefix changed", op)
			}
			got := g[len(prefix):hdr:hdr]
			if op.HasPayload() {
				got = append(got, payload...)
			}
			got = append(got, g[hdr:]...)
			if !bytes.Equal(got, want) {
				t.Errorf("%v, %d payload bytes: gathered % x, want % x", op, n, got, want)
			}
		}
	}
}

// TestICRCWithHeadersGather: the ICRC of a packet in three pieces is the
// ICRC of the packet whole.
func TestICRCWithHeadersGather(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var g []byte
	var hdr int
	var payload []byte
	// Payloads short of the folding path's first 64 bytes, on either side
	// of its 16-byte blocks, and past 4 KiB; with and without a pad.
	for _, n := range []int{0, 1, 15, 16, 17, 63, 64, 65, 255, 256, 257, 1027, 4096, 4099} {
		payload = make([]byte, n)
		for i := range payload {
			payload[i] = byte(rng.Uint32())
		}
		f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteOnly, PKey: roce.DefaultPKey, DestQP: 0x12, PSN: 9},
			RETH: roce.RETHFields{VA: 0x1000, RKey: 7, DMALen: uint32(n)}}
		whole := roce.AppendPacket(nil, &f, payload)
		g, hdr = roce.AppendPacketGather(nil, &f, len(payload))
		for _, addrs := range [][2]string{{"10.0.0.1:49152", "10.0.0.2:4791"}, {"[2001:db8::1]:49152", "[2001:db8::2]:4791"}} {
			ip := make([]byte, 48)
			hl, err := roce.PutIPUDPHeaders(ip, netip.MustParseAddrPort(addrs[0]), netip.MustParseAddrPort(addrs[1]), len(whole), 0)
			if err != nil {
				t.Fatal(err)
			}
			want, err := roce.ICRCWithHeaders(ip[:hl], whole)
			if err != nil {
				t.Fatal(err)
			}
			// The packet in one piece, summed by the masked fold.
			if one, err := roce.ICRC(append(ip[:hl:hl], whole...)); err != nil || one != want {
				t.Errorf("%v, payload %d: ICRCWithHeaders %#x, ICRC of the packet in one piece %#x (%v)", addrs, n, want, one, err)
			}
			got, err := roce.ICRCWithHeadersGather(ip[:hl], g[:hdr], payload, g[hdr:])
			if err != nil || got != want {
				t.Errorf("%v, payload %d: gathered ICRC %#x (%v), whole %#x", addrs, n, got, err, want)
			}
		}
	}
	if _, err := roce.ICRCWithHeadersGather(make([]byte, 28), g[:4], payload, g[hdr:]); err == nil {
		t.Error("a head shorter than the BTH: no error")
	}
}
