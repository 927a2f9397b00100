package roce_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/rbridge/rbridge/roce"
)

func TestFrameDecode(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		for _, s := range samples() {
			b := buildFrame(t, s, v6)
			var f roce.Frame
			if err := f.DecodeEthernet(b); err != nil {
				t.Fatalf("%s v6=%v: %v", s.name, v6, err)
			}
			if err := f.VerifyICRC(); err != nil {
				t.Errorf("%s v6=%v: %v", s.name, v6, err)
			}
			if f.IPv6 != v6 || f.EthLen != 14 || f.Dst.Port() != roce.Port || f.Packet.Opcode() != s.fields.BTH.Opcode || f.ECN != 2 {
				t.Errorf("%s v6=%v: frame %+v", s.name, v6, f)
			}
			wantSrc := netip.MustParseAddr("10.0.0.1")
			if v6 {
				wantSrc = netip.MustParseAddr("fd00::1")
			}
			if f.Src.Addr() != wantSrc {
				t.Errorf("src %v, want %v", f.Src, wantSrc)
			}
			// The same bytes as raw IP.
			var g roce.Frame
			if err := g.DecodeIP(b[14:]); err != nil || g.Packet.BTH.PSN() != f.Packet.BTH.PSN() {
				t.Errorf("%s v6=%v raw IP: %v", s.name, v6, err)
			}
		}
	}
}

func TestFrameVLANAndPadding(t *testing.T) {
	// An ACK is short; a switch may pad the frame to 60 bytes. Add a VLAN
	// tag and trailing padding: the decoder must use the IP length.
	s := samples()[0x11] // RC_ACKNOWLEDGE
	if s.fields.BTH.Opcode != roce.RCAcknowledge {
		t.Fatalf("sample 0x11 is %v", s.fields.BTH.Opcode)
	}
	b := buildFrame(t, s, false)
	tagged := append(append(bytes.Clone(b[:12]), 0x81, 0x00, 0x20, 0x2a), b[12:]...)
	tagged = append(tagged, make([]byte, 10)...)
	var f roce.Frame
	if err := f.DecodeEthernet(tagged); err != nil {
		t.Fatal(err)
	}
	if f.VLAN != 42 || f.EthLen != 18 {
		t.Errorf("VLAN %d EthLen %d, want 42, 18", f.VLAN, f.EthLen)
	}
	if err := f.VerifyICRC(); err != nil {
		t.Errorf("padded frame ICRC: %v", err)
	}
}

func TestFrameNotRoCE(t *testing.T) {
	b := buildFrame(t, samples()[4], false)
	other := bytes.Clone(b)
	binary.BigEndian.PutUint16(other[14+20+2:], 53) // UDP to port 53
	arp := bytes.Clone(b)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	badLen := bytes.Clone(b)
	binary.BigEndian.PutUint16(badLen[14+20+4:], 20) // UDP length shorter than the IP payload
	// IPv4 fragments: the first (more fragments), and a later one whose
	// first bytes happen to look like a UDP header to port 4791.
	firstFrag := bytes.Clone(b)
	firstFrag[14+6] |= 0x20
	laterFrag := bytes.Clone(b)
	binary.BigEndian.PutUint16(laterFrag[14+6:], 185) // offset 1480, DF clear
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"port 53", other, roce.ErrNotRoCEv2},
		{"ARP", arp, roce.ErrNotRoCEv2},
		{"UDP length", badLen, roce.ErrBadLength},
		{"first IPv4 fragment", firstFrag, roce.ErrNotRoCEv2},
		{"later IPv4 fragment", laterFrag, roce.ErrNotRoCEv2},
	} {
		var f roce.Frame
		if err := f.DecodeEthernet(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	for i := range len(b) - 1 {
		var f roce.Frame
		if err := f.DecodeEthernet(b[:i]); err == nil {
			t.Errorf("frame cut at %d decodes without error", i)
		}
	}
}

func TestFrameDecodeDoesNotAllocate(t *testing.T) {
	b := buildFrame(t, samples()[4], false)
	var f roce.Frame
	if n := testing.AllocsPerRun(100, func() { _ = f.DecodeEthernet(b) }); n != 0 {
		t.Errorf("DecodeEthernet allocates %.1f times, want 0", n)
	}
}
