package roce_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/roce"
)

// filled returns n bytes of 0xFF, so that a byte an encoder never writes
// shows up in the round trip.
func filled(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }

func TestBTHRoundTrip(t *testing.T) {
	for _, want := range []roce.BTHFields{
		{Opcode: roce.RCSendOnly, PKey: roce.DefaultPKey, DestQP: 0x11, PSN: 0},
		{Opcode: roce.RCRDMAWriteFirst, SE: true, MigReq: true, PadCount: 3, PKey: 0x8001, FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff},
		{Opcode: roce.UDSendOnlyWithImmediate, PadCount: 1, PKey: 0x7fff, DestQP: 1, PSN: 0x800000},
		{Opcode: roce.CNP, PKey: roce.DefaultPKey, BECN: true, DestQP: 0xabcdef},
	} {
		b := filled(roce.BTHLen)
		roce.BTH(b).Encode(&want)
		h, n, err := roce.ParseBTH(b)
		if err != nil || n != roce.BTHLen {
			t.Fatalf("ParseBTH(%x) = _, %d, %v", b, n, err)
		}
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("BTH round trip (-want +got):\n%s", diff)
		}
		// Reserved bits are written as zero.
		if b[4]&0x3f != 0 || b[8]&0x7f != 0 {
			t.Errorf("reserved bits set in %x", b)
		}
	}
}

func TestBTHSetters(t *testing.T) {
	b := roce.BTH(filled(roce.BTHLen))
	b.Encode(&roce.BTHFields{Opcode: roce.RCSendFirst})
	b.SetOpcode(roce.RCSendLast)
	b.SetPadCount(2)
	b.SetFECN(true)
	b.SetBECN(true)
	b.SetDestQP(0x123456)
	b.SetAckReq(true)
	b.SetPSN(0xabcdef)
	want := roce.BTHFields{Opcode: roce.RCSendLast, PadCount: 2, FECN: true, BECN: true, DestQP: 0x123456, AckReq: true, PSN: 0xabcdef}
	if diff := cmp.Diff(want, b.Fields()); diff != "" {
		t.Errorf("after setters (-want +got):\n%s", diff)
	}
	b.SetFECN(false)
	b.SetAckReq(false)
	if b.FECN() || b.AckReq() || !b.BECN() {
		t.Errorf("clearing FECN/AckReq: got FECN=%v AckReq=%v BECN=%v", b.FECN(), b.AckReq(), b.BECN())
	}
}

func TestParseBTHRejects(t *testing.T) {
	b := make([]byte, roce.BTHLen)
	roce.BTH(b).Encode(&roce.BTHFields{Opcode: roce.RCSendOnly})
	b[1] |= 0x01 // TVer 1
	if _, _, err := roce.ParseBTH(b); !errors.Is(err, roce.ErrBadVersion) {
		t.Errorf("TVer 1: got %v, want ErrBadVersion", err)
	}
	for _, op := range []byte{0x15, 0x18, 0x1f, 0x2c, 0x40, 0x60, 0x66, 0x80, 0xa0, 0xff} {
		roce.BTH(b).Encode(&roce.BTHFields{Opcode: roce.Opcode(op)})
		if _, _, err := roce.ParseBTH(b); !errors.Is(err, roce.ErrReservedOpcode) {
			t.Errorf("opcode 0x%02x: got %v, want ErrReservedOpcode", op, err)
		}
	}
}

func TestExtensionHeadersRoundTrip(t *testing.T) {
	t.Run("RETH", func(t *testing.T) {
		want := roce.RETHFields{VA: 0x0123456789abcdef, RKey: 0xfedcba98, DMALen: 0x80000001}
		b := filled(roce.RETHLen)
		roce.RETH(b).Encode(&want)
		h, n, err := roce.ParseRETH(b)
		check(t, n, err, roce.RETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		h.SetVA(1)
		h.SetRKey(2)
		h.SetDMALen(3)
		if diff := cmp.Diff(roce.RETHFields{VA: 1, RKey: 2, DMALen: 3}, h.Fields()); diff != "" {
			t.Errorf("setters (-want +got):\n%s", diff)
		}
	})
	t.Run("AETH", func(t *testing.T) {
		want := roce.AETHFields{Syndrome: roce.NAKSyndrome(roce.NAKRemoteAccessError), MSN: 0xfedcba}
		b := filled(roce.AETHLen)
		roce.AETH(b).Encode(&want)
		h, n, err := roce.ParseAETH(b)
		check(t, n, err, roce.AETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		h.SetSyndrome(roce.RNRSyndrome(14))
		h.SetMSN(7)
		if diff := cmp.Diff(roce.AETHFields{Syndrome: roce.RNRSyndrome(14), MSN: 7}, h.Fields()); diff != "" {
			t.Errorf("setters (-want +got):\n%s", diff)
		}
	})
	t.Run("AtomicETH", func(t *testing.T) {
		want := roce.AtomicETHFields{VA: 0x1122334455667788, RKey: 0x99aabbcc, SwapAdd: 0xddeeff0011223344, Compare: 0x5566778899aabbcc}
		b := filled(roce.AtomicETHLen)
		roce.AtomicETH(b).Encode(&want)
		h, n, err := roce.ParseAtomicETH(b)
		check(t, n, err, roce.AtomicETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("AtomicAckETH", func(t *testing.T) {
		want := roce.AtomicAckETHFields{Orig: 0x8000000000000001}
		b := filled(roce.AtomicAckETHLen)
		roce.AtomicAckETH(b).Encode(&want)
		h, n, err := roce.ParseAtomicAckETH(b)
		check(t, n, err, roce.AtomicAckETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("ImmDt", func(t *testing.T) {
		want := roce.ImmDtFields{Imm: 0x01020304}
		b := filled(roce.ImmDtLen)
		roce.ImmDt(b).Encode(&want)
		h, n, err := roce.ParseImmDt(b)
		check(t, n, err, roce.ImmDtLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if !bytes.Equal(b, []byte{1, 2, 3, 4}) {
			t.Errorf("ImmDt bytes %x, want network order 01020304", b)
		}
	})
	t.Run("IETH", func(t *testing.T) {
		want := roce.IETHFields{RKey: 0xcafef00d}
		b := filled(roce.IETHLen)
		roce.IETH(b).Encode(&want)
		h, n, err := roce.ParseIETH(b)
		check(t, n, err, roce.IETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("DETH", func(t *testing.T) {
		want := roce.DETHFields{QKey: 0x80010000, SrcQP: 0xfedcba}
		b := filled(roce.DETHLen)
		roce.DETH(b).Encode(&want)
		h, n, err := roce.ParseDETH(b)
		check(t, n, err, roce.DETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if b[4] != 0 {
			t.Errorf("DETH reserved byte = %#x, want 0", b[4])
		}
	})
	t.Run("RDETH", func(t *testing.T) {
		want := roce.RDETHFields{EEC: 0xfedcba}
		b := filled(roce.RDETHLen)
		roce.RDETH(b).Encode(&want)
		h, n, err := roce.ParseRDETH(b)
		check(t, n, err, roce.RDETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if b[0] != 0 {
			t.Errorf("RDETH reserved byte = %#x, want 0", b[0])
		}
	})
	t.Run("XRCETH", func(t *testing.T) {
		want := roce.XRCETHFields{SRQ: 0xabcdef}
		b := filled(roce.XRCETHLen)
		roce.XRCETH(b).Encode(&want)
		h, n, err := roce.ParseXRCETH(b)
		check(t, n, err, roce.XRCETHLen)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if b[0] != 0 {
			t.Errorf("XRCETH reserved byte = %#x, want 0", b[0])
		}
	})
}

func check(t *testing.T, n int, err error, want int) {
	t.Helper()
	if err != nil || n != want {
		t.Fatalf("parse = _, %d, %v; want %d, nil", n, err, want)
	}
}

// TestHeadersCutAtEveryPrefix feeds every header parser every prefix of a
// valid header: each must return ErrTruncated, never panic.
func TestHeadersCutAtEveryPrefix(t *testing.T) {
	valid := make([]byte, 64)
	roce.BTH(valid).Encode(&roce.BTHFields{Opcode: roce.RCSendOnly})
	parsers := map[string]struct {
		n     int
		parse func([]byte) (int, error)
	}{
		"BTH":          {roce.BTHLen, func(b []byte) (int, error) { _, n, err := roce.ParseBTH(b); return n, err }},
		"RETH":         {roce.RETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseRETH(b); return n, err }},
		"AETH":         {roce.AETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseAETH(b); return n, err }},
		"AtomicETH":    {roce.AtomicETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseAtomicETH(b); return n, err }},
		"AtomicAckETH": {roce.AtomicAckETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseAtomicAckETH(b); return n, err }},
		"ImmDt":        {roce.ImmDtLen, func(b []byte) (int, error) { _, n, err := roce.ParseImmDt(b); return n, err }},
		"IETH":         {roce.IETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseIETH(b); return n, err }},
		"DETH":         {roce.DETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseDETH(b); return n, err }},
		"RDETH":        {roce.RDETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseRDETH(b); return n, err }},
		"XRCETH":       {roce.XRCETHLen, func(b []byte) (int, error) { _, n, err := roce.ParseXRCETH(b); return n, err }},
	}
	for name, p := range parsers {
		for i := range p.n {
			n, err := p.parse(valid[:i])
			if !errors.Is(err, roce.ErrTruncated) || n != 0 {
				t.Errorf("%s cut at %d: got n=%d err=%v, want 0, ErrTruncated", name, i, n, err)
			}
		}
		if n, err := p.parse(valid[:p.n]); err != nil || n != p.n {
			t.Errorf("%s full length: got n=%d err=%v", name, n, err)
		}
	}
}

func TestSyndrome(t *testing.T) {
	for _, tc := range []struct {
		s     roce.Syndrome
		typ   roce.AckType
		value uint8
		str   string
	}{
		{roce.ACKSyndrome(roce.CreditsInvalid), roce.AckTypeACK, 31, "ACK credits=31"},
		{roce.RNRSyndrome(14), roce.AckTypeRNRNAK, 14, "RNR_NAK timer=14"},
		{roce.NAKSyndrome(roce.NAKPSNSequenceError), roce.AckTypeNAK, 0, "NAK PSN_SEQUENCE_ERROR"},
		{roce.NAKSyndrome(roce.NAKRemoteAccessError), roce.AckTypeNAK, 2, "NAK REMOTE_ACCESS_ERROR"},
		{roce.Syndrome(0x40), roce.AckTypeReserved, 0, "RESERVED_0x40"},
	} {
		if tc.s.Type() != tc.typ || tc.s.Value() != tc.value || tc.s.String() != tc.str {
			t.Errorf("syndrome %#x: got %v %d %q, want %v %d %q", uint8(tc.s), tc.s.Type(), tc.s.Value(), tc.s, tc.typ, tc.value, tc.str)
		}
	}
	// The kernel's constants (rxe_hdr.h): AETH_NAK_PSN_SEQ_ERROR 0x60,
	// AETH_NAK_REM_ACC_ERR 0x62, AETH_RNR_NAK 0x20.
	if roce.NAKSyndrome(0) != 0x60 || roce.NAKSyndrome(2) != 0x62 || roce.RNRSyndrome(0) != 0x20 {
		t.Errorf("syndrome encodings differ from the kernel's")
	}
}
