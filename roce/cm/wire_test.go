package cm_test

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/rbridge/rbridge/roce"
	"github.com/rbridge/rbridge/roce/cm"
)

// filled returns n bytes of 0xFF, so that a byte an encoder never writes
// shows up in the round trip.
func filled(n int) []byte { return bytes.Repeat([]byte{0xff}, n) }

func gid(s string) cm.GID { return cm.GIDFromAddr(netip.MustParseAddr(s)) }

func pdata(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i)
	}
	return b
}

// sampleREQ is a REQ as the kernel's rdma_cm sends it on RoCEv2, with
// every field set to something recognizable.
func sampleREQ() cm.REQFields {
	return cm.REQFields{
		LocalCommID: 0x1d2c3b4a, ServiceID: cm.ServiceID(cm.PortSpaceTCP, 7790), LocalCAGUID: 0x0200_5eff_fe12_3456,
		LocalQKey: 0x12345678, LocalQPN: 0x000011, ResponderResources: 4, LocalEECN: 0xabcdef, InitiatorDepth: 4,
		RemoteEECN: 0x123456, RemoteCMResponseTimeout: 20, TransportType: cm.TransportUC, EndToEndFlowControl: true,
		StartingPSN: 0xfedcba, LocalCMResponseTimeout: 19, RetryCount: 7, PKey: 0xffff, PathMTU: roce.MTU1024,
		RDCExists: true, RNRRetryCount: 6, MaxCMRetries: 15, SRQ: true, ExtendedTransportType: 5,
		Primary: cm.PathFields{LocalLID: 0xffff, RemoteLID: 0xfffe, LocalGID: gid("198.18.1.2"), RemoteGID: gid("198.18.1.3"),
			FlowLabel: 0xfedcb, PacketRate: 0x3f, TrafficClass: 0x88, HopLimit: 64, SL: 0xf, SubnetLocal: true, LocalACKTimeout: 18},
		Alternate: cm.PathFields{LocalLID: 1, RemoteLID: 2, LocalGID: gid("2001:db8::1"), RemoteGID: gid("2001:db8::2"),
			FlowLabel: 1, PacketRate: 1, TrafficClass: 1, HopLimit: 1, SL: 1, LocalACKTimeout: 31},
		SAPSupported: true,
		PrivateData:  ipcmPrivateData(),
	}
}

// ipcmPrivateData is a REQ's private data as rdma_cm sends it: the IP CM
// header, then the application's bytes.
func ipcmPrivateData() []byte {
	b := pdata(cm.REQPrivateDataLen, 0x10)
	cm.IPCMHeader(b).Encode(&cm.IPCMHeaderFields{IPVersion: 4, SrcPort: 54375,
		Src: netip.MustParseAddr("198.18.1.2"), Dst: netip.MustParseAddr("198.18.1.3")})
	return b
}

func TestREQRoundTrip(t *testing.T) {
	for _, want := range []cm.REQFields{sampleREQ(), {PrivateData: make([]byte, cm.REQPrivateDataLen)}} {
		b := filled(cm.REQLen)
		cm.REQ(b).Encode(&want)
		r, n, err := cm.ParseREQ(b)
		if err != nil || n != cm.REQLen {
			t.Fatalf("ParseREQ = _, %d, %v", n, err)
		}
		if diff := cmp.Diff(want, r.Fields()); diff != "" {
			t.Errorf("REQ round trip (-want +got):\n%s", diff)
		}
	}
}

// TestREQLayout pins fields to the IBA table 106 offsets (byte[bit], bit 0
// the most significant) by hand-written bytes.
func TestREQLayout(t *testing.T) {
	b := make([]byte, cm.REQLen)
	cm.REQ(b).Encode(&cm.REQFields{LocalQPN: 0xabcdef, ResponderResources: 0x44, StartingPSN: 0x123456,
		LocalCMResponseTimeout: 0x13, RetryCount: 5, PathMTU: roce.MTU1024, RNRRetryCount: 7, MaxCMRetries: 15,
		RemoteCMResponseTimeout: 0x14, TransportType: cm.TransportRC,
		Primary: cm.PathFields{FlowLabel: 0xabcde, PacketRate: 0x2a, SL: 3, LocalACKTimeout: 0x12, LocalGID: gid("198.18.1.2")}})
	for _, c := range []struct {
		off  int
		want []byte
	}{
		{32, []byte{0xab, 0xcd, 0xef, 0x44}},
		{43, []byte{0x14 << 3}},
		{44, []byte{0x12, 0x34, 0x56, 0x13<<3 | 5}},
		{50, []byte{0x3<<4 | 7, 0xf0}},
		{56, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 198, 18, 1, 2}},
		{88, []byte{0xab, 0xcd, 0xe0, 0x2a}},
		{94, []byte{0x30, 0x12 << 3}},
	} {
		if got := b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("REQ bytes at %d: %x, want %x", c.off, got, c.want)
		}
	}
}

func TestREPRoundTrip(t *testing.T) {
	want := cm.REPFields{LocalCommID: 1, RemoteCommID: 0xffffffff, LocalQKey: 0x80010000, LocalQPN: 0xabcdef,
		LocalEECN: 0x123456, StartingPSN: 0xffffff, ResponderResources: 16, InitiatorDepth: 8, TargetACKDelay: 31,
		FailoverAccepted: 3, EndToEndFlowControl: true, RNRRetryCount: 7, SRQ: true, LocalCAGUID: 0x1122334455667788,
		PrivateData: pdata(cm.REPPrivateDataLen, 0x20)}
	b := filled(cm.REPLen)
	cm.REP(b).Encode(&want)
	r, _, err := cm.ParseREP(b)
	check(t, err)
	if diff := cmp.Diff(want, r.Fields()); diff != "" {
		t.Errorf("REP round trip (-want +got):\n%s", diff)
	}
	if b[15] != 0 || b[19] != 0 || b[23] != 0 || b[27]&0x0f != 0 {
		t.Errorf("reserved REP bytes written: %x", b[12:28])
	}
	if b[26] != 31<<3|3<<1|1 || b[27] != 7<<5|1<<4 {
		t.Errorf("REP bytes 26-27: %x, want f f0", b[26:28])
	}
}

func TestShortMessagesRoundTrip(t *testing.T) {
	t.Run("RTU", func(t *testing.T) {
		want := cm.RTUFields{LocalCommID: 7, RemoteCommID: 9, PrivateData: pdata(cm.RTUPrivateDataLen, 1)}
		b := filled(cm.RTULen)
		cm.RTU(b).Encode(&want)
		r, _, err := cm.ParseRTU(b)
		check(t, err)
		if diff := cmp.Diff(want, r.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("DREQ", func(t *testing.T) {
		want := cm.DREQFields{LocalCommID: 7, RemoteCommID: 9, RemoteQPN: 0xabcdef, PrivateData: pdata(cm.DREQPrivateDataLen, 2)}
		b := filled(cm.DREQLen)
		cm.DREQ(b).Encode(&want)
		r, _, err := cm.ParseDREQ(b)
		check(t, err)
		if diff := cmp.Diff(want, r.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if b[11] != 0 {
			t.Errorf("reserved DREQ byte 11 = %#x", b[11])
		}
	})
	t.Run("DREP", func(t *testing.T) {
		want := cm.DREPFields{LocalCommID: 7, RemoteCommID: 9, PrivateData: pdata(cm.DREPPrivateDataLen, 3)}
		b := filled(cm.DREPLen)
		cm.DREP(b).Encode(&want)
		r, _, err := cm.ParseDREP(b)
		check(t, err)
		if diff := cmp.Diff(want, r.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("MRA", func(t *testing.T) {
		want := cm.MRAFields{LocalCommID: 7, RemoteCommID: 9, MessageMRAed: cm.MessageREP, ServiceTimeout: 24, PrivateData: pdata(cm.MRAPrivateDataLen, 4)}
		b := filled(cm.MRALen)
		cm.MRA(b).Encode(&want)
		r, _, err := cm.ParseMRA(b)
		check(t, err)
		if diff := cmp.Diff(want, r.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if b[8] != 0x40 || b[9] != 24<<3 {
			t.Errorf("MRA bytes 8-9: %x", b[8:10])
		}
	})
	t.Run("REJ", func(t *testing.T) {
		want := cm.REJFields{LocalCommID: 7, RemoteCommID: 9, MessageRejected: cm.MessageOther, RejectInfoLen: 72,
			Reason: cm.RejectConsumerDefined, ARI: pdata(cm.REJARILen, 5), PrivateData: pdata(cm.REJPrivateDataLen, 6)}
		b := filled(cm.REJLen)
		cm.REJ(b).Encode(&want)
		r, _, err := cm.ParseREJ(b)
		check(t, err)
		if diff := cmp.Diff(want, r.Fields()); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
		if b[8] != 0x80 || b[9] != 72<<1 || b[10] != 0 || b[11] != 28 {
			t.Errorf("REJ bytes 8-11: %x", b[8:12])
		}
	})
}

func TestIPCMHeader(t *testing.T) {
	for _, want := range []cm.IPCMHeaderFields{
		{IPVersion: 4, SrcPort: 40000, Src: netip.MustParseAddr("198.18.1.2"), Dst: netip.MustParseAddr("198.18.1.3")},
		{IPVersion: 6, SrcPort: 1, Src: netip.MustParseAddr("2001:db8::1"), Dst: netip.MustParseAddr("fe80::2")},
	} {
		b := filled(cm.IPCMHeaderLen)
		cm.IPCMHeader(b).Encode(&want)
		h, n, err := cm.ParseIPCMHeader(b)
		if err != nil || n != cm.IPCMHeaderLen {
			t.Fatalf("ParseIPCMHeader: %d, %v", n, err)
		}
		if diff := cmp.Diff(want, h.Fields(), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
			t.Errorf("IP CM header round trip (-want +got):\n%s", diff)
		}
	}
	// cma_format_hdr's IPv4 layout, by hand.
	b := make([]byte, cm.IPCMHeaderLen)
	cm.IPCMHeader(b).Encode(&cm.IPCMHeaderFields{IPVersion: 4, SrcPort: 0x1234,
		Src: netip.MustParseAddr("10.1.2.3"), Dst: netip.MustParseAddr("10.4.5.6")})
	want := append([]byte{0, 0x40, 0x12, 0x34}, make([]byte, 32)...)
	copy(want[4+12:], []byte{10, 1, 2, 3})
	copy(want[20+12:], []byte{10, 4, 5, 6})
	if !bytes.Equal(b, want) {
		t.Errorf("IPv4 IP CM header %x, want %x", b, want)
	}
	b[0] = 1
	if _, _, err := cm.ParseIPCMHeader(b); !errors.Is(err, cm.ErrBadIPCM) {
		t.Errorf("version 1: %v, want ErrBadIPCM", err)
	}
	b[0], b[1] = 0, 0x50
	if _, _, err := cm.ParseIPCMHeader(b); !errors.Is(err, cm.ErrBadIPCM) {
		t.Errorf("IP version 5: %v, want ErrBadIPCM", err)
	}
}

func TestServiceID(t *testing.T) {
	if got := cm.ServiceID(cm.PortSpaceTCP, 7471); got != 0x0000000001061d2f {
		t.Errorf("ServiceID(TCP, 7471) = %#x", got)
	}
	ps, port, ok := cm.ParseServiceID(0x0000000001060000 | 4791)
	if !ok || ps != cm.PortSpaceTCP || port != 4791 {
		t.Errorf("ParseServiceID = %v %d %v", ps, port, ok)
	}
	if _, _, ok := cm.ParseServiceID(0x1000000001060001); ok {
		t.Error("a non-IP service ID parsed as one")
	}
}

func sampleMADs() [][]byte {
	req := sampleREQ()
	var out [][]byte
	for _, m := range []struct {
		id  cm.AttrID
		enc func([]byte)
	}{
		{cm.AttrREQ, func(d []byte) { cm.REQ(d).Encode(&req) }},
		{cm.AttrREP, func(d []byte) {
			cm.REP(d).Encode(&cm.REPFields{LocalCommID: 1, LocalQPN: 0x11, PrivateData: []byte("hi")})
		}},
		{cm.AttrRTU, func(d []byte) { cm.RTU(d).Encode(&cm.RTUFields{LocalCommID: 1, RemoteCommID: 2}) }},
		{cm.AttrREJ, func(d []byte) { cm.REJ(d).Encode(&cm.REJFields{Reason: cm.RejectInvalidServiceID}) }},
		{cm.AttrMRA, func(d []byte) { cm.MRA(d).Encode(&cm.MRAFields{ServiceTimeout: 20}) }},
		{cm.AttrDREQ, func(d []byte) { cm.DREQ(d).Encode(&cm.DREQFields{RemoteQPN: 0x12}) }},
		{cm.AttrDREP, func(d []byte) { cm.DREP(d).Encode(&cm.DREPFields{LocalCommID: 3}) }},
		{cm.AttrSIDRREQ, func(d []byte) { s := sampleSIDRREQ(); cm.SIDRREQ(d).Encode(&s) }},
		{cm.AttrSIDRREP, func(d []byte) { s := sampleSIDRREP(); cm.SIDRREP(d).Encode(&s) }},
	} {
		h := cm.CMHeader(m.id, 0x0123456789abcdef)
		out = append(out, cm.AppendCM(nil, &h, m.enc))
	}
	return out
}

func TestMADRoundTrip(t *testing.T) {
	for _, mad := range sampleMADs() {
		if len(mad) != cm.MADLen {
			t.Fatalf("AppendCM made %d bytes", len(mad))
		}
		h, data, err := cm.ParseCM(mad)
		check(t, err)
		want := cm.CMHeader(h.AttrID(), 0x0123456789abcdef)
		if diff := cmp.Diff(want, h.Fields()); diff != "" {
			t.Errorf("%v header (-want +got):\n%s", h.AttrID(), diff)
		}
		if len(data) != cm.DataLen {
			t.Errorf("%v data %d bytes", h.AttrID(), len(data))
		}
		if !bytes.Equal(mad[:8], []byte{1, 7, 2, 3, 0, 0, 0, 0}) {
			t.Errorf("%v MAD header starts %x", h.AttrID(), mad[:8])
		}
	}
	// AppendCM appends after what b holds and overwrites every byte.
	h := cm.CMHeader(cm.AttrRTU, 1)
	b := cm.AppendCM(filled(10), &h, nil)
	if len(b) != 10+cm.MADLen || !bytes.Equal(b[:10], filled(10)) || bytes.ContainsRune(b[10+cm.MADHeaderLen:], 0xff) {
		t.Errorf("AppendCM after 10 bytes: %x", b)
	}
}

func TestParseCMRejects(t *testing.T) {
	good := sampleMADs()[0]
	for _, c := range []struct {
		name string
		off  int
		val  byte
	}{
		{"base version 2", 0, 2},
		{"subnet administration class", 1, 0x03},
		{"class version 1", 2, 1},
		{"method GET", 3, 0x01},
		{"a response", 3, 0x83},
	} {
		b := bytes.Clone(good)
		b[c.off] = c.val
		if _, _, err := cm.ParseCM(b); !errors.Is(err, cm.ErrBadMAD) {
			t.Errorf("%s: %v, want ErrBadMAD", c.name, err)
		}
	}
}

// TestParseCutAtEveryPrefix: every parser errors with ErrTruncated on every
// prefix of a valid input, and never panics.
func TestParseCutAtEveryPrefix(t *testing.T) {
	mads := sampleMADs()
	parsers := map[string]func([]byte) error{
		"ParseCM":         func(b []byte) error { _, _, err := cm.ParseCM(b); return err },
		"ParseMADHeader":  func(b []byte) error { _, _, err := cm.ParseMADHeader(b); return err },
		"ParseREQ":        func(b []byte) error { _, _, err := cm.ParseREQ(b[cm.MADHeaderLen:]); return err },
		"ParseREP":        func(b []byte) error { _, _, err := cm.ParseREP(b[cm.MADHeaderLen:]); return err },
		"ParseRTU":        func(b []byte) error { _, _, err := cm.ParseRTU(b[cm.MADHeaderLen:]); return err },
		"ParseREJ":        func(b []byte) error { _, _, err := cm.ParseREJ(b[cm.MADHeaderLen:]); return err },
		"ParseMRA":        func(b []byte) error { _, _, err := cm.ParseMRA(b[cm.MADHeaderLen:]); return err },
		"ParseDREQ":       func(b []byte) error { _, _, err := cm.ParseDREQ(b[cm.MADHeaderLen:]); return err },
		"ParseDREP":       func(b []byte) error { _, _, err := cm.ParseDREP(b[cm.MADHeaderLen:]); return err },
		"ParseSIDRREQ":    func(b []byte) error { _, _, err := cm.ParseSIDRREQ(b[cm.MADHeaderLen:]); return err },
		"ParseSIDRREP":    func(b []byte) error { _, _, err := cm.ParseSIDRREP(b[cm.MADHeaderLen:]); return err },
		"ParseIPCMHeader": func(b []byte) error { _, _, err := cm.ParseIPCMHeader(b[cm.MADHeaderLen+140:]); return err },
	}
	full := mads[0]
	for name, parse := range parsers {
		if err := parse(full); err != nil {
			t.Errorf("%s of the whole REQ MAD: %v", name, err)
		}
		minLen := 0
		switch name {
		case "ParseCM", "ParseMADHeader":
		case "ParseIPCMHeader":
			minLen = cm.MADHeaderLen + 140
		default:
			minLen = cm.MADHeaderLen
		}
		need := cm.MADLen
		switch name {
		case "ParseMADHeader":
			need = cm.MADHeaderLen
		case "ParseIPCMHeader":
			need = cm.MADHeaderLen + 140 + cm.IPCMHeaderLen
		}
		for n := minLen; n < need; n++ {
			err := parse(full[:n:n])
			if !errors.Is(err, roce.ErrTruncated) {
				t.Fatalf("%s of %d bytes: %v, want ErrTruncated", name, n, err)
			}
		}
	}
}

func TestGID(t *testing.T) {
	g := gid("198.18.1.3")
	if g.String() != "::ffff:198.18.1.3" || g.Addr() != netip.MustParseAddr("198.18.1.3") {
		t.Errorf("GID of 198.18.1.3: %v (%v)", g, g.Addr())
	}
	if g6 := gid("2001:db8::7"); g6.Addr() != netip.MustParseAddr("2001:db8::7") {
		t.Errorf("GID of 2001:db8::7: %v", g6.Addr())
	}
}

func TestRejectReasonString(t *testing.T) {
	if s := cm.RejectInvalidServiceID.String(); s != "invalid service ID (8)" {
		t.Errorf("reason 8: %q", s)
	}
	if s := cm.RejectReason(99).String(); s != "reason 99" {
		t.Errorf("reason 99: %q", s)
	}
	if s := cm.AttrDREQ.String(); s != "DREQ" {
		t.Errorf("AttrDREQ: %q", s)
	}
	if s := cm.AttrID(0x1234).String(); s != "Attr(0x1234)" {
		t.Errorf("Attr 0x1234: %q", s)
	}
}
