package roce_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rbridge/rbridge/roce"
)

// Fuzz targets, seeded from the serializer. Run one with
//   go test ./roce -run '^$' -fuzz FuzzPacketDecode -fuzztime 30s

// FuzzHeaders feeds every header parser the same bytes: none may panic, a
// success must consume exactly the header's length, and a decoded header must
// encode back to the same bytes (reserved bits aside).
func FuzzHeaders(f *testing.F) {
	for _, s := range samples() {
		f.Add(roce.AppendPacket(nil, &s.fields, s.payload))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if h, n, err := roce.ParseBTH(b); err == nil {
			if n != roce.BTHLen {
				t.Fatalf("ParseBTH consumed %d", n)
			}
			fields := h.Fields()
			out := make([]byte, roce.BTHLen)
			roce.BTH(out).Encode(&fields)
			in := bytes.Clone(b[:roce.BTHLen])
			in[4] &^= 0x3f // reserved bits are not kept
			in[8] &= 0x80
			if !bytes.Equal(in, out) {
				t.Fatalf("BTH %x re-encodes as %x", in, out)
			}
		}
		roundTrip := func(name string, want int, n int, err error, enc func() []byte) {
			if err != nil {
				return
			}
			if n != want {
				t.Fatalf("%s consumed %d, want %d", name, n, want)
			}
			if got := enc(); !bytes.Equal(got, b[:n]) {
				t.Fatalf("%s %x re-encodes as %x", name, b[:n], got)
			}
		}
		r, n, err := roce.ParseRETH(b)
		roundTrip("RETH", roce.RETHLen, n, err, func() []byte {
			f := r.Fields()
			o := make([]byte, roce.RETHLen)
			roce.RETH(o).Encode(&f)
			return o
		})
		a, n, err := roce.ParseAETH(b)
		roundTrip("AETH", roce.AETHLen, n, err, func() []byte {
			f := a.Fields()
			o := make([]byte, roce.AETHLen)
			roce.AETH(o).Encode(&f)
			return o
		})
		at, n, err := roce.ParseAtomicETH(b)
		roundTrip("AtomicETH", roce.AtomicETHLen, n, err, func() []byte {
			f := at.Fields()
			o := make([]byte, roce.AtomicETHLen)
			roce.AtomicETH(o).Encode(&f)
			return o
		})
		aa, n, err := roce.ParseAtomicAckETH(b)
		roundTrip("AtomicAckETH", roce.AtomicAckETHLen, n, err, func() []byte {
			f := aa.Fields()
			o := make([]byte, roce.AtomicAckETHLen)
			roce.AtomicAckETH(o).Encode(&f)
			return o
		})
		im, n, err := roce.ParseImmDt(b)
		roundTrip("ImmDt", roce.ImmDtLen, n, err, func() []byte {
			f := im.Fields()
			o := make([]byte, roce.ImmDtLen)
			roce.ImmDt(o).Encode(&f)
			return o
		})
		ie, n, err := roce.ParseIETH(b)
		roundTrip("IETH", roce.IETHLen, n, err, func() []byte {
			f := ie.Fields()
			o := make([]byte, roce.IETHLen)
			roce.IETH(o).Encode(&f)
			return o
		})
		rd, n, err := roce.ParseRDETH(b)
		roundTrip("RDETH", roce.RDETHLen, n, err, func() []byte {
			f := rd.Fields()
			o := make([]byte, roce.RDETHLen)
			roce.RDETH(o).Encode(&f)
			o[0] = b[0] // reserved
			return o
		})
		x, n, err := roce.ParseXRCETH(b)
		roundTrip("XRCETH", roce.XRCETHLen, n, err, func() []byte {
			f := x.Fields()
			o := make([]byte, roce.XRCETHLen)
			roce.XRCETH(o).Encode(&f)
			o[0] = b[0] // reserved
			return o
		})
		if d, n, err := roce.ParseDETH(b); err == nil {
			f := d.Fields()
			o := make([]byte, roce.DETHLen)
			roce.DETH(o).Encode(&f)
			in := bytes.Clone(b[:n])
			in[4] = 0 // reserved
			if !bytes.Equal(in, o) {
				t.Fatalf("DETH %x re-encodes as %x", in, o)
			}
		}
	})
}

// FuzzPacketDecode decodes arbitrary transport packets with Decode and with
// Dissect, which accepts a superset: no panic, and a packet that decodes
// re-encodes to the same bytes with AppendPacket (pad and reserved bits
// aside, ICRC recomputed by nobody here).
func FuzzPacketDecode(f *testing.F) {
	for _, s := range samples() {
		f.Add(roce.AppendPacket(nil, &s.fields, s.payload))
	}
	for _, s := range foreignSamples() {
		f.Add(roce.AppendPacket(nil, &s.fields, s.payload))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p roce.Packet
		derr := p.Decode(b)
		if err := p.Dissect(b); err != nil {
			if derr == nil {
				t.Fatalf("Decode accepts what Dissect refuses: %v", err)
			}
			return
		}
		if derr != nil && !errors.Is(derr, roce.ErrReservedOpcode) {
			t.Fatalf("Dissect accepts what Decode refuses with %v", derr)
		}
		if p.Len() != len(b) {
			t.Fatalf("Len %d, input %d", p.Len(), len(b))
		}
		fields := p.Fields()
		out := roce.AppendPacket(nil, &fields, p.Payload)
		if p.Opcode().HasPayload() && len(p.Pad) != -len(p.Payload)&3 {
			return // a legal but unusual pad: AppendPacket always pads minimally
		}
		if len(out) != len(b) {
			t.Fatalf("re-encoded %d bytes, decoded %d", len(out), len(b))
		}
		var q roce.Packet
		if err := q.Dissect(out); err != nil {
			t.Fatalf("re-encoded packet does not decode: %v", err)
		}
		if q.Fields() != fields || !bytes.Equal(q.Payload, p.Payload) {
			t.Fatalf("round trip changed the packet")
		}
	})
}

// FuzzFrame decodes arbitrary Ethernet frames and verifies their ICRC: no
// panic, whatever the bytes.
func FuzzFrame(f *testing.F) {
	for _, v6 := range []bool{false, true} {
		for _, s := range samples() {
			f.Add(buildFrame(f, s, v6))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var fr roce.Frame
		if err := fr.DecodeEthernet(b); err != nil {
			return
		}
		_ = fr.VerifyICRC()
		if fr.Packet.Len() != len(fr.UDPPayload()) {
			t.Fatalf("packet length %d, UDP payload %d", fr.Packet.Len(), len(fr.UDPPayload()))
		}
	})
}
