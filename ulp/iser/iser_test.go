package iser_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/iser"
)

// readCommand is a SCSI READ(10) of 8 sectors from LBA 0x1234 as the
// Linux initiator sends it: iSER header with R (the read STag and its
// absolute address: iser_prepare_read_cmd), then the BHS libiscsi builds
// (iscsi_prep_scsi_cmd_pdu: F, R, simple attribute; LUN 0 in SAM
// format; EDTL 4096; CmdSN, ExpStatSN).
func readCommand() []byte {
	return []byte{
		// iSER header: ISCSI_CTRL|ISER_RSV, write STag/VA zero, read STag 0x00012a05, VA 0xffff8881_04a3c000
		0x14, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x00, 0x01, 0x2a, 0x05, 0xff, 0xff, 0x88, 0x81, 0x04, 0xa3, 0xc0, 0x00,
		// BHS
		0x01, 0xc1, 0, 0, // SCSI Command, F|R|ATTR_SIMPLE
		0, 0, 0, 0, // no AHS, no data
		0, 0, 0, 0, 0, 0, 0, 0, // LUN 0
		0x00, 0x00, 0x00, 0x2a, // ITT 42
		0x00, 0x00, 0x10, 0x00, // EDTL 4096
		0x00, 0x00, 0x00, 0x07, // CmdSN
		0x00, 0x00, 0x00, 0x05, // ExpStatSN
		0x28, 0, 0, 0, 0x12, 0x34, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0, // READ(10)
	}
}

// writeCommand is a SCSI WRITE(10) of 64 KiB with 8 KiB of immediate
// data and no unsolicited Data-Out (F set): W with the write STag and the
// buffer's address plus the 8 KiB sent (iser_prepare_write_cmd).
func writeCommand() []byte {
	h := iser.HeaderFields{Opcode: iser.OpControl, WSV: true, WriteSTag: 0x00013b06, WriteVA: 0xffff888104a40000 + 8192}
	c := iser.SCSICommandFields{Final: true, Write: true, Attr: 1, ITT: 43, EDTL: 65536, CmdSN: 8, ExpStatSN: 5, CDB: [16]byte{0x2a, 0, 0, 0, 0x20, 0, 0, 0, 0x80}}
	return iser.AppendPDU(nil, &h, c.BHS(), nil, bytes.Repeat([]byte{0xab}, 8192))
}

// scsiResponse is the Linux target's SCSI Response to ITT 42: GOOD, with
// an underflow of 1024 bytes: the iSER header ISCSI_CTRL alone
// (__isert_create_send_desc), the BHS iscsit_build_rsp_pdu makes.
func scsiResponse() []byte {
	return []byte{
		0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
		0x21, 0x82, 0x00, 0x00, // SCSI Response, F|U, completed, GOOD
		0, 0, 0, 0,
		0, 0, 0, 0, 0, 0, 0, 0,
		0x00, 0x00, 0x00, 0x2a, // ITT 42
		0, 0, 0, 0, // SNACK tag
		0x00, 0x00, 0x00, 0x05, // StatSN
		0x00, 0x00, 0x00, 0x08, // ExpCmdSN
		0x00, 0x00, 0x00, 0x47, // MaxCmdSN
		0, 0, 0, 0, // ExpDataSN
		0, 0, 0, 0, // bidirectional read residual
		0x00, 0x00, 0x04, 0x00, // residual 1024
	}
}

func TestVectors(t *testing.T) {
	p, n, err := iser.ParsePDU(readCommand())
	if err != nil || n != iser.HeadersLen {
		t.Fatalf("read command: n %d, %v", n, err)
	}
	h, b := p.Header, p.BHS
	if h.Opcode() != iser.OpControl || !h.RSV() || h.WSV() || h.ReadSTag() != 0x00012a05 || h.ReadVA() != 0xffff888104a3c000 {
		t.Errorf("read command's iSER header: %+v", h.Fields())
	}
	if b.Opcode() != iser.OpSCSICommand || !b.Final() || !b.Read() || b.Write() || b.ITT() != 42 || b.EDTL() != 4096 || b.CmdSN() != 7 || b.CDB()[0] != 0x28 {
		t.Errorf("read command's BHS: %+v", b.Fields())
	}
	if err := p.CheckLen(len(readCommand())); err != nil {
		t.Error(err)
	}
	w := writeCommand()
	p, _, err = iser.ParsePDU(w)
	if err != nil || !p.Header.WSV() || p.Header.RSV() || p.Header.WriteVA() != 0xffff888104a42000 || p.DataLen() != 8192 || p.BHS.EDTL() != 65536 || !p.BHS.Write() {
		t.Errorf("write command: %+v %+v, %v", p.Header.Fields(), p.BHS.Fields(), err)
	}
	if got := w[:2]; !bytes.Equal(got, []byte{0x18, 0}) || w[iser.HeaderLen+1] != 0xa1 {
		t.Errorf("write command encodes flags % x and % x, want 18 00 (ISCSI_CTRL|ISER_WSV) and a1 (F|W|simple)", got, w[iser.HeaderLen+1])
	}
	p, _, err = iser.ParsePDU(scsiResponse())
	if err != nil || p.BHS.Opcode() != iser.OpSCSIResponse || p.BHS.Flags()&iser.RespUnderflow == 0 || p.BHS.Residual() != 1024 || p.BHS.StatSN() != 5 || p.BHS.MaxCmdSN() != 0x47 || p.BHS.ITT() != 42 {
		t.Errorf("response: %+v, %v", p.BHS.Fields(), err)
	}
	r := iser.SCSIResponseFields{Underflow: true, ITT: 42, StatSN: 5, ExpCmdSN: 8, MaxCmdSN: 0x47, Residual: 1024}
	if got := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, r.BHS(), nil, nil); !bytes.Equal(got, scsiResponse()) {
		t.Errorf("encoded response\n% x\nwant\n% x", got, scsiResponse())
	}
	// The CM private data as the Linux ends write it.
	req := []byte{0x80, 0, 0, 0} // ib_iser, always_register on (the default)
	c, n, err := iser.ParseCMHeader(req)
	if err != nil || n != 4 || !c.NoZBVA() || c.NoSendWInv() {
		t.Errorf("connect request: %+v, %v", c.Fields(), err)
	}
	rep := []byte{0xc0, 0, 0, 0, 0, 0} // isert without remote invalidation, padded by the CM
	if c, _, err := iser.ParseCMHeader(rep); err != nil || !c.NoZBVA() || !c.NoSendWInv() {
		t.Errorf("accept: %+v, %v", c.Fields(), err)
	}
}

// TestBidirectional: the read part's length rides in an AHS.
func TestBidirectional(t *testing.T) {
	c := iser.SCSICommandFields{Final: true, Read: true, Write: true, ITT: 7, EDTL: 4096}
	ahs := iser.AppendReadLengthAHS(nil, 12288)
	b := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl, WSV: true, RSV: true}, c.BHS(), ahs, nil)
	p, n, err := iser.ParsePDU(b)
	if err != nil || n != iser.HeadersLen+8 {
		t.Fatalf("n %d, %v", n, err)
	}
	if l, ok := p.ReadLength(); !ok || l != 12288 {
		t.Errorf("read length %d, %v; want 12288", l, ok)
	}
	if p.BHS.TotalAHSLength() != 8 || p.DataOffset() != iser.HeadersLen+8 {
		t.Errorf("AHS %d bytes, data at %d", p.BHS.TotalAHSLength(), p.DataOffset())
	}
	// An extended CDB AHS before it (a 32-byte CDB: 16 more bytes and
	// the reserved byte).
	ecdb := append([]byte{0, 17, iser.AHSExtendedCDB, 0}, make([]byte, 16)...)
	b = iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, c.BHS(), append(ecdb, ahs...), nil)
	if p, _, err := iser.ParsePDU(b); err != nil {
		t.Errorf("with an extended CDB: %v", err)
	} else if l, ok := p.ReadLength(); !ok || l != 12288 {
		t.Errorf("with an extended CDB: read length %d, %v", l, ok)
	}
}

// TestCutAtEveryPrefix: every parser, every prefix of a valid structure:
// ErrTruncated and n 0, never a panic.
func TestCutAtEveryPrefix(t *testing.T) {
	c := iser.SCSICommandFields{Final: true, Read: true, Write: true, ITT: 7, EDTL: 4096}
	bidi := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, c.BHS(), iser.AppendReadLengthAHS(nil, 1), []byte{1, 2, 3})
	for name, p := range map[string]struct {
		valid []byte
		n     int
		parse func([]byte) (int, error)
	}{
		"header":    {readCommand(), iser.HeaderLen, func(b []byte) (int, error) { _, n, err := iser.ParseHeader(b); return n, err }},
		"BHS":       {readCommand()[iser.HeaderLen:], iser.BHSLen, func(b []byte) (int, error) { _, n, err := iser.ParseBHS(b); return n, err }},
		"PDU":       {readCommand(), iser.HeadersLen, func(b []byte) (int, error) { _, n, err := iser.ParsePDU(b); return n, err }},
		"PDU+AHS":   {bidi, iser.HeadersLen + 8, func(b []byte) (int, error) { _, n, err := iser.ParsePDU(b); return n, err }},
		"CM header": {[]byte{0xc0, 0, 0, 0}, iser.CMHeaderLen, func(b []byte) (int, error) { _, n, err := iser.ParseCMHeader(b); return n, err }},
	} {
		for i := range p.n {
			n, err := p.parse(p.valid[:i:i])
			var e *iser.Error
			if !errors.Is(err, iser.ErrTruncated) || n != 0 || !errors.As(err, &e) {
				t.Errorf("%s cut at %d: n=%d err=%v, want 0, ErrTruncated", name, i, n, err)
			}
		}
		if n, err := p.parse(p.valid); err != nil || n != p.n {
			t.Errorf("%s whole: n=%d err=%v, want %d", name, n, err, p.n)
		}
	}
	// A message cut anywhere in its data segment: CheckLen says so.
	for i := iser.HeadersLen + 8; i < len(bidi); i++ {
		p, _, err := iser.ParsePDU(bidi[:i])
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CheckLen(i); !errors.Is(err, iser.ErrLength) {
			t.Errorf("cut at %d of %d: %v, want ErrLength", i, len(bidi), err)
		}
	}
}

// TestRoundTrip: Fields after Encode gives the fields back, and encoding
// them again gives the same bytes, on buffers pre-filled with 0xFF.
func TestRoundTrip(t *testing.T) {
	for _, f := range []iser.HeaderFields{
		{Opcode: iser.OpControl},
		{Opcode: iser.OpControl, WSV: true, RSV: true, WriteSTag: 1, WriteVA: 2, ReadSTag: 3, ReadVA: 1<<64 - 1},
		{Opcode: iser.OpHello, LowFlags: 3, Reserved: [3]byte{1, 2, 3}},
	} {
		b := bytes.Repeat([]byte{0xff}, iser.HeaderLen)
		iser.Header(b).Encode(&f)
		if d := cmp.Diff(f, iser.Header(b).Fields()); d != "" {
			t.Errorf("header (-want +got):\n%s", d)
		}
	}
	cmd := iser.SCSICommandFields{Immediate: true, Final: true, Read: true, Write: true, Attr: 2, TotalAHSLength: 8, DataSegmentLength: 0x123456,
		LUN: 0x0001000000000000, ITT: 9, EDTL: 10, CmdSN: 11, ExpStatSN: 12, CDB: [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}
	rsp := iser.SCSIResponseFields{BidiOverflow: true, BidiUnderflow: true, Overflow: true, Underflow: true, Response: 1, Status: 2,
		DataSegmentLength: 20, ITT: 3, StatSN: 4, ExpCmdSN: 5, MaxCmdSN: 6, ExpDataSN: 7, BidiResidual: 8, Residual: 9}
	for _, f := range []iser.BHSFields{cmd.BHS(), rsp.BHS(), {Opcode: iser.OpLogin, Immediate: true, Flags: 0x87, LUN: 0x023d000000000000, ITT: 1}} {
		b := bytes.Repeat([]byte{0xff}, iser.BHSLen)
		iser.BHS(b).Encode(&f)
		if d := cmp.Diff(f, iser.BHS(b).Fields()); d != "" {
			t.Errorf("BHS (-want +got):\n%s", d)
		}
	}
	b := bytes.Repeat([]byte{0xff}, iser.BHSLen)
	f := cmd.BHS()
	iser.BHS(b).Encode(&f)
	v := iser.BHS(b)
	if !v.Immediate() || !v.Final() || !v.Read() || !v.Write() || v.TotalAHSLength() != 8 || v.DataSegmentLength() != 0x123456 || v.ITT() != 9 || v.EDTL() != 10 || v.CmdSN() != 11 || v.ExpStatSN() != 12 || v.CDB()[15] != 16 {
		t.Errorf("command getters: %+v", v.Fields())
	}
	for _, f := range []iser.CMHeaderFields{{}, {NoZBVA: true}, {NoSendWInv: true}, {NoZBVA: true, NoSendWInv: true, Other: 0x21}} {
		b := bytes.Repeat([]byte{0xff}, iser.CMHeaderLen)
		iser.CMHeader(b).Encode(&f)
		if d := cmp.Diff(f, iser.CMHeader(b).Fields()); d != "" {
			t.Errorf("CM header (-want +got):\n%s", d)
		}
	}
}

func TestRefuses(t *testing.T) {
	hello := append([]byte{0x20}, make([]byte, 100)...)
	unknown := append([]byte{0x40}, make([]byte, 100)...)
	badAHS := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, iser.BHSFields{Opcode: iser.OpSCSICommand}, []byte{0, 9, 2, 0, 0, 0, 0, 0}, nil)
	twoRLen := iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl}, iser.BHSFields{Opcode: iser.OpSCSICommand}, iser.AppendReadLengthAHS(iser.AppendReadLengthAHS(nil, 1), 2), nil)
	for _, tc := range []struct {
		name string
		b    []byte
		want error
		text string
	}{
		{"Hello", hello, iser.ErrNotPDU, "iSER Hello"},
		{"opcode 4", unknown, iser.ErrOpcode, "flags 0x40"},
		{"an AHS past the total", badAHS, iser.ErrAHS, "length 9"},
		{"two read lengths", twoRLen, iser.ErrAHS, "a second one"},
	} {
		_, n, err := iser.ParsePDU(tc.b)
		if !errors.Is(err, tc.want) || n != 0 || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: n %d, %v; want %v naming %q", tc.name, n, err, tc.want, tc.text)
		}
	}
	p, _, _ := iser.ParsePDU(writeCommand())
	if err := p.CheckLen(len(writeCommand()) + 4); !errors.Is(err, iser.ErrLength) || !strings.Contains(err.Error(), "SCSI Command of 0 AHS and 8192 data bytes (8268 in all) in a message of 8272 bytes") {
		t.Errorf("4 bytes too many: %v", err)
	}
	if err := p.CheckLen(len(writeCommand()) + 3); err != nil {
		t.Errorf("padded to 4 bytes: %v", err)
	}
}

func TestText(t *testing.T) {
	b := iser.AppendKey(iser.AppendKey(nil, "InitialR2T", "No"), "FirstBurstLength", "262144")
	var got []string
	for len(b) > 0 {
		k, v, n, err := iser.NextKey(b)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(k)+"="+string(v))
		b = b[n:]
	}
	if d := cmp.Diff([]string{"InitialR2T=No", "FirstBurstLength=262144"}, got); d != "" {
		t.Errorf("keys (-want +got):\n%s", d)
	}
	for _, bad := range []string{"InitialR2T=No", "=No\x00", "NoEquals\x00"} {
		if _, _, n, err := iser.NextKey([]byte(bad)); !errors.Is(err, iser.ErrText) || n != 0 {
			t.Errorf("%q: n %d, %v; want ErrText", bad, n, err)
		}
	}
}
