package nvme_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/nvme"
)

func TestConnectRoundTrip(t *testing.T) {
	for _, want := range []nvme.ConnectFields{
		{Flags: nvme.FlagSGLBuffer, CommandID: 0x1f, DPTR: keyed(0x1000, 1024, 0x77, nvme.SGLInvalidate),
			QID: 0, SQSize: 31, KATO: 5000},
		{Flags: nvme.FlagSGLBuffer, CommandID: 0x2001, QID: 3, SQSize: 127, CAttr: nvme.CAttrDisableSQFlow,
			DPTR: nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: nvme.ConnectDataLen}},
		{RecFmt: 0xffff, QID: 0xffff, SQSize: 0xffff, CAttr: 0xff, KATO: 0xffffffff, CommandID: 0xffff, Flags: 0xff},
	} {
		b := filled(nvme.CommandLen)
		nvme.Connect(b).Encode(&want)
		c, n, err := nvme.ParseConnect(b)
		if err != nil || n != nvme.CommandLen {
			t.Fatalf("ParseConnect = _, %d, %v", n, err)
		}
		if diff := cmp.Diff(want, c.Fields()); diff != "" {
			t.Errorf("connect round trip (-want +got):\n%s", diff)
		}
		// Reserved: bytes 5-23, 47, 52-63.
		for _, r := range [][2]int{{5, 24}, {47, 48}, {52, 64}} {
			if !bytes.Equal(b[r[0]:r[1]], make([]byte, r[1]-r[0])) {
				t.Errorf("reserved bytes %d-%d = %x, want zero", r[0], r[1]-1, b[r[0]:r[1]])
			}
		}
		if cmd := c.Command(); !cmd.IsFabrics() || cmd.FCType() != nvme.FCConnect || cmd.Direction() != nvme.DirHostToController {
			t.Errorf("Command(): fabrics %v fctype %v direction %v", cmd.IsFabrics(), cmd.FCType(), cmd.Direction())
		}
	}
}

func TestConnectSetters(t *testing.T) {
	c := nvme.Connect(filled(nvme.CommandLen))
	c.Encode(&nvme.ConnectFields{})
	c.SetQID(2)
	c.SetSQSize(63)
	c.SetCAttr(nvme.CAttrDisableSQFlow)
	c.SetKATO(15000)
	want := nvme.ConnectFields{QID: 2, SQSize: 63, CAttr: nvme.CAttrDisableSQFlow, KATO: 15000}
	if diff := cmp.Diff(want, c.Fields()); diff != "" {
		t.Errorf("after setters (-want +got):\n%s", diff)
	}
}

func TestParseConnectRejects(t *testing.T) {
	b := make([]byte, nvme.CommandLen)
	nvme.Connect(b).Encode(&nvme.ConnectFields{})
	for _, tc := range []struct {
		name  string
		b     []byte
		field string
	}{
		{"read", with(b, func(b []byte) { b[0] = byte(nvme.OpRead) }), "opcode"},
		{"property get", with(b, func(b []byte) { b[4] = byte(nvme.FCPropertyGet) }), "fctype"},
		{"auth send", with(b, func(b []byte) { b[4] = byte(nvme.FCAuthSend) }), "fctype"},
	} {
		_, n, err := nvme.ParseConnect(tc.b)
		var e *nvme.Error
		if !errors.Is(err, nvme.ErrNotConnect) || n != 0 || !errors.As(err, &e) || e.Field != tc.field {
			t.Errorf("%s: got n=%d err=%v, want ErrNotConnect in %s", tc.name, n, err, tc.field)
		}
	}
}

func TestConnectDataRoundTrip(t *testing.T) {
	for _, want := range []nvme.ConnectDataFields{
		{HostID: [16]byte{0xde, 0xad, 0xbe, 0xef, 15: 1}, CNTLID: nvme.CNTLIDDynamic,
			SubNQN: "nqn.2026-12.io.rbridge:test", HostNQN: "nqn.2014-08.org.nvmexpress:uuid:deadbeef-0000-0000-0000-000000000001"},
		{CNTLID: 1, SubNQN: strings.Repeat("s", 255), HostNQN: ""},
		{},
	} {
		b := filled(nvme.ConnectDataLen)
		if err := nvme.ConnectData(b).Encode(&want); err != nil {
			t.Fatal(err)
		}
		d, n, err := nvme.ParseConnectData(b)
		if err != nil || n != nvme.ConnectDataLen {
			t.Fatalf("ParseConnectData = _, %d, %v", n, err)
		}
		if diff := cmp.Diff(want, d.Fields()); diff != "" {
			t.Errorf("connect data round trip (-want +got):\n%s", diff)
		}
		// Reserved: bytes 18-255 and 768-1023.
		if !bytes.Equal(b[18:256], make([]byte, 238)) || !bytes.Equal(b[768:], make([]byte, 256)) {
			t.Errorf("reserved bytes not zero")
		}
	}
}

func TestConnectDataNQN(t *testing.T) {
	b := make([]byte, nvme.ConnectDataLen)
	d := nvme.ConnectData(b)
	// A field without a NUL reads as its first 255 bytes, as the Linux
	// target forces byte 255 to NUL.
	for i := 256; i < 512; i++ {
		b[i] = 'x'
	}
	if got := d.SubNQN(); len(got) != 255 || cap(got) != 255 {
		t.Errorf("unterminated SubNQN: len %d cap %d, want 255", len(got), cap(got))
	}
	copy(b[512:], "nqn.host\x00garbage")
	if got := string(d.HostNQN()); got != "nqn.host" {
		t.Errorf("HostNQN() = %q, want %q", got, "nqn.host")
	}
	d.SetCNTLID(0x1234)
	if d.CNTLID() != 0x1234 || b[16] != 0x34 || b[17] != 0x12 {
		t.Errorf("SetCNTLID: %x", b[16:18])
	}
	orig := bytes.Clone(b)
	err := d.Encode(&nvme.ConnectDataFields{SubNQN: "ok", HostNQN: strings.Repeat("h", 256)})
	var e *nvme.Error
	if !errors.Is(err, nvme.ErrNQNTooLong) || !errors.As(err, &e) || e.Field != "hostnqn" || e.Offset != 512 {
		t.Errorf("256-byte host NQN: got %v, want ErrNQNTooLong in hostnqn", err)
	}
	if !bytes.Equal(b, orig) {
		t.Errorf("a failed Encode changed the data")
	}
}
