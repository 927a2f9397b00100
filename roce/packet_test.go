package roce_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
)

// TestPacketRoundTrip builds a packet of every opcode with AppendPacket and
// decodes it again.
func TestPacketRoundTrip(t *testing.T) {
	for _, s := range samples() {
		t.Run(s.name, func(t *testing.T) {
			prefix := []byte{0xaa, 0xbb}
			b := roce.AppendPacket(append([]byte{}, prefix...), &s.fields, s.payload)
			if !bytes.Equal(b[:2], prefix) {
				t.Fatalf("AppendPacket overwrote the prefix")
			}
			b = b[2:]
			op := s.fields.BTH.Opcode
			if want := roce.TransportLen(op, len(s.payload)); len(b) != want {
				t.Fatalf("length %d, want %d", len(b), want)
			}
			var p roce.Packet
			if err := p.Decode(b); err != nil {
				t.Fatalf("Decode: %v", err)
			}
			want := s.fields
			want.BTH.PadCount = uint8(-len(s.payload) & 3)
			got := p.Fields()
			// Headers the opcode does not carry decode as zero.
			want = keepCarried(op, want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("fields (-want +got):\n%s", diff)
			}
			if !bytes.Equal(p.Payload, s.payload) {
				t.Errorf("payload %x, want %x", p.Payload, s.payload)
			}
			if len(p.Pad) != int(want.BTH.PadCount) || p.Len() != len(b) {
				t.Errorf("pad %d bytes, Len %d; want %d, %d", len(p.Pad), p.Len(), want.BTH.PadCount, len(b))
			}
		})
	}
}

func keepCarried(op roce.Opcode, f roce.PacketFields) roce.PacketFields {
	h := op.Headers()
	out := roce.PacketFields{BTH: f.BTH}
	if h.Has(roce.HdrRETH) {
		out.RETH = f.RETH
	}
	if h.Has(roce.HdrAETH) {
		out.AETH = f.AETH
	}
	if h.Has(roce.HdrAtomicETH) {
		out.AtomicETH = f.AtomicETH
	}
	if h.Has(roce.HdrAtomicAckETH) {
		out.AtomicAckETH = f.AtomicAckETH
	}
	if h.Has(roce.HdrImmDt) {
		out.ImmDt = f.ImmDt
	}
	if h.Has(roce.HdrIETH) {
		out.IETH = f.IETH
	}
	if h.Has(roce.HdrDETH) {
		out.DETH = f.DETH
	}
	if h.Has(roce.HdrRDETH) {
		out.RDETH = f.RDETH
	}
	if h.Has(roce.HdrXRCETH) {
		out.XRCETH = f.XRCETH
	}
	return out
}

// foreignSamples returns a packet for every RD and XRC opcode, the samples
// fields with an RDETH and XRCETH added.
func foreignSamples() []sample {
	var out []sample
	base := samples()[0]
	for i := range 256 {
		op := roce.Opcode(i)
		if !op.Known() || op.Valid() {
			continue
		}
		s := base
		s.name = op.String()
		s.fields.BTH.Opcode = op
		s.fields.RDETH = roce.RDETHFields{EEC: 0xee0000 + uint32(i)}
		s.fields.XRCETH = roce.XRCETHFields{SRQ: 0x5c0000 + uint32(i)}
		s.payload = nil
		if op.HasPayload() {
			s.payload = bytes.Repeat([]byte{byte(i)}, 5+i%4)
		}
		out = append(out, s)
	}
	return out
}

// TestPacketDissect round-trips every RD and XRC opcode through
// AppendPacket and Dissect, which Decode refuses, and checks that Dissect
// reads every opcode rbridge speaks as Decode does.
func TestPacketDissect(t *testing.T) {
	for _, s := range append(foreignSamples(), samples()...) {
		op := s.fields.BTH.Opcode
		// Build over bytes of 0xff, to catch bytes the encoder never writes.
		b := roce.AppendPacket(filled(512)[:0], &s.fields, s.payload)
		var p roce.Packet
		if err := p.Dissect(b); err != nil {
			t.Errorf("%s: Dissect: %v", s.name, err)
			continue
		}
		want := s.fields
		want.BTH.PadCount = uint8(-len(s.payload) & 3)
		if diff := cmp.Diff(keepCarried(op, want), p.Fields()); diff != "" {
			t.Errorf("%s: fields (-want +got):\n%s", s.name, diff)
		}
		if !bytes.Equal(p.Payload, s.payload) {
			t.Errorf("%s: payload %x, want %x", s.name, p.Payload, s.payload)
		}
		if p.RDETH != nil && p.RDETH[0] != 0 || p.XRCETH != nil && p.XRCETH[0] != 0 {
			t.Errorf("%s: reserved byte of RDETH %x or XRCETH %x not zero", s.name, []byte(p.RDETH), []byte(p.XRCETH))
		}
		var q roce.Packet
		err := q.Decode(b)
		switch {
		case op.Valid() && err != nil:
			t.Errorf("%s: Decode: %v", s.name, err)
		case !op.Valid() && !errors.Is(err, roce.ErrReservedOpcode):
			t.Errorf("%s: Decode got %v, want ErrReservedOpcode", s.name, err)
		}
		min := roce.BTHLen + op.HeaderLen() + roce.ICRCLen
		for i := range min {
			if err := p.Dissect(b[:i]); !errors.Is(err, roce.ErrTruncated) {
				t.Errorf("%s cut at %d: got %v, want ErrTruncated", s.name, i, err)
			}
		}
	}
	var p roce.Packet
	reserved := roce.AppendPacket(nil, &roce.PacketFields{BTH: roce.BTHFields{Opcode: 0x56}}, nil)
	if err := p.Dissect(reserved); !errors.Is(err, roce.ErrReservedOpcode) {
		t.Errorf("opcode 0x56: got %v, want ErrReservedOpcode", err)
	}
}

// TestPacketCutAtEveryPrefix decodes every prefix of a packet of every
// opcode: shorter than headers plus ICRC must fail with ErrTruncated; no
// prefix may panic.
func TestPacketCutAtEveryPrefix(t *testing.T) {
	for _, s := range samples() {
		b := roce.AppendPacket(nil, &s.fields, s.payload)
		op := s.fields.BTH.Opcode
		min := roce.BTHLen + op.HeaderLen() + roce.ICRCLen
		for i := range len(b) {
			var p roce.Packet
			err := p.Decode(b[:i])
			switch {
			case i < min && !errors.Is(err, roce.ErrTruncated):
				t.Errorf("%s cut at %d: got %v, want ErrTruncated", s.name, i, err)
			case i >= min && err == nil && op.HasPayload() && len(p.Payload)+len(p.Pad) != i-min:
				t.Errorf("%s cut at %d: payload+pad %d, want %d", s.name, i, len(p.Payload)+len(p.Pad), i-min)
			}
		}
	}
}

func TestPacketDecodeRejects(t *testing.T) {
	send := roce.AppendPacket(nil, &roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly}}, []byte{1})
	ack := roce.AppendPacket(nil, &roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCAcknowledge}}, nil)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"pad larger than payload", func() []byte {
			b := roce.AppendPacket(nil, &roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly}}, nil)
			roce.BTH(b).SetPadCount(2)
			return b
		}(), roce.ErrBadPad},
		{"pad on ACK", func() []byte { b := bytes.Clone(ack); roce.BTH(b).SetPadCount(1); return b }(), roce.ErrBadPad},
		{"payload on ACK", append(bytes.Clone(ack[:len(ack)-4]), 0, 0, 0, 0, 0, 0, 0, 0), roce.ErrBadPad},
		{"reserved opcode", func() []byte { b := bytes.Clone(send); b[0] = 0x1e; return b }(), roce.ErrReservedOpcode},
		{"version 2", func() []byte { b := bytes.Clone(send); b[1] |= 2; return b }(), roce.ErrBadVersion},
		{"empty", nil, roce.ErrTruncated},
	} {
		var p roce.Packet
		if err := p.Decode(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestPayloadAlignment checks the pad count for every payload length mod 4.
func TestPayloadAlignment(t *testing.T) {
	for n := range 9 {
		b := roce.AppendPacket(nil, &roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly}}, bytes.Repeat([]byte{7}, n))
		if (len(b)-roce.ICRCLen)%4 != 0 {
			t.Errorf("payload %d: transport length %d not 4-aligned before the ICRC", n, len(b))
		}
		if got := roce.BTH(b).PadCount(); got != -n&3 {
			t.Errorf("payload %d: pad count %d, want %d", n, got, -n&3)
		}
		if got := binary.LittleEndian.Uint32(b[len(b)-4:]); got != 0 {
			t.Errorf("payload %d: ICRC placeholder %#x, want 0", n, got)
		}
	}
}

func TestEncodeCNP(t *testing.T) {
	b := filled(roce.CNPLen)
	if err := roce.EncodeCNP(b, 0x000abc); err != nil {
		t.Fatal(err)
	}
	var p roce.Packet
	if err := p.Decode(b); err != nil {
		t.Fatal(err)
	}
	f := p.BTH.Fields()
	if f.Opcode != roce.CNP || !f.BECN || f.FECN || f.DestQP != 0xabc || f.PKey != 0xffff || f.PSN != 0 {
		t.Errorf("CNP BTH = %+v", f)
	}
	if !bytes.Equal(p.CNPReserved, make([]byte, 16)) {
		t.Errorf("CNP reserved bytes %x, want zeros", p.CNPReserved)
	}
}

// TestEncodeCNPShort: a buffer shorter than a CNP is refused untouched.
func TestEncodeCNPShort(t *testing.T) {
	for n := range roce.CNPLen {
		b := filled(n)
		if err := roce.EncodeCNP(b, 1); !errors.Is(err, roce.ErrTruncated) {
			t.Errorf("EncodeCNP into %d bytes: %v, want ErrTruncated", n, err)
		}
		if !bytes.Equal(b, filled(n)) {
			t.Errorf("EncodeCNP into %d bytes wrote % x", n, b)
		}
	}
}

func TestAppendPacketDoesNotAllocate(t *testing.T) {
	f := roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCRDMAWriteOnlyWithImmediate, DestQP: 5}}
	payload := make([]byte, 1024)
	buf := make([]byte, 0, 2048)
	allocs := testing.AllocsPerRun(100, func() { buf = roce.AppendPacket(buf[:0], &f, payload) })
	if allocs != 0 {
		t.Errorf("AppendPacket allocates %.1f times per call, want 0", allocs)
	}
}

// Bad arguments to the serializers are not panics: a nil PacketFields is
// the zero value, a negative payload length none.
func TestAppendPacketBadArguments(t *testing.T) {
	b := roce.AppendPacket(nil, nil, []byte("abcd"))
	var p roce.Packet
	if err := p.Decode(b); err != nil || p.Opcode() != roce.RCSendFirst || string(p.Payload) != "abcd" {
		t.Fatalf("AppendPacket(nil fields) = %x: %v %v %q", b, err, p.Opcode(), p.Payload)
	}
	if out, hdr := roce.AppendPacketGather(nil, &roce.PacketFields{BTH: roce.BTHFields{Opcode: roce.RCSendOnly}}, -5); hdr != roce.BTHLen || len(out) != roce.BTHLen+roce.ICRCLen {
		t.Fatalf("a negative payload length gave %d bytes, headers %d", len(out), hdr)
	}
}
