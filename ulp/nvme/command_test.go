package nvme_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/nvme"
)

func TestCommandRoundTrip(t *testing.T) {
	for _, want := range []nvme.CommandFields{
		{Opcode: nvme.OpRead, Flags: nvme.FlagSGLBuffer, CommandID: 0xbeef, NSID: 1,
			DPTR: keyed(0x7f0000001000, 4096, 0x1234, nvme.SGLInvalidate), CDW10: [6]uint32{0x10, 0, 7}},
		{Opcode: nvme.OpWrite, Flags: nvme.FlagSGLSegment | nvme.FlagFuseFirst, CommandID: 1, NSID: 0xffffffff,
			CDW2: 2, CDW3: 3, Metadata: 0x1122334455667788,
			DPTR:  nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: 512},
			CDW10: [6]uint32{10, 11, 12, 13, 14, 15}},
		{Opcode: nvme.OpFabrics, Flags: nvme.FlagSGLBuffer, NSID: uint32(nvme.FCPropertyGet)},
	} {
		b := filled(nvme.CommandLen)
		nvme.Command(b).Encode(&want)
		c, n, err := nvme.ParseCommand(b)
		if err != nil || n != nvme.CommandLen {
			t.Fatalf("ParseCommand = _, %d, %v", n, err)
		}
		if diff := cmp.Diff(want, c.Fields()); diff != "" {
			t.Errorf("command round trip (-want +got):\n%s", diff)
		}
	}
}

func TestCommandSetters(t *testing.T) {
	c := nvme.Command(filled(nvme.CommandLen))
	c.Encode(&nvme.CommandFields{})
	c.SetOpcode(nvme.OpFabrics)
	c.SetFlags(nvme.FlagSGLBuffer)
	c.SetCommandID(0x1234)
	c.SetFCType(nvme.FCConnect)
	c.SetDWord(12, 0xdeadbeef)
	if !c.IsFabrics() || c.FCType() != nvme.FCConnect || c.PSDT() != nvme.PSDTSGLBuffer ||
		c.CommandID() != 0x1234 || c.DWord(12) != 0xdeadbeef || c.NSID() != uint32(nvme.FCConnect) {
		t.Errorf("after setters: %+v", c.Fields())
	}
	c.SetNSID(7)
	if c.NSID() != 7 || c.FCType() != 7 {
		t.Errorf("FCType and NSID must share byte 4: NSID %d FCType %d", c.NSID(), c.FCType())
	}
	if c.DataPointer().IsValid() != true || len(c.DataPointer()) != nvme.SGLLen || cap(c.DataPointer()) != nvme.SGLLen {
		t.Errorf("DataPointer len %d cap %d", len(c.DataPointer()), cap(c.DataPointer()))
	}
}

// TestDirection checks the data direction of the commands a gateway
// meets against the opcode tables of include/linux/nvme.h: bits 1:0 of
// the opcode, or of the FCType for fabrics commands.
func TestDirection(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opcode nvme.Opcode
		fctype nvme.FCType
		want   nvme.Direction
	}{
		{"flush", 0x00, 0, nvme.DirNone},
		{"write", 0x01, 0, nvme.DirHostToController},
		{"read", 0x02, 0, nvme.DirControllerToHost},
		{"compare", 0x05, 0, nvme.DirHostToController},
		{"write zeroes", 0x08, 0, nvme.DirNone},
		{"dataset management", 0x09, 0, nvme.DirHostToController},
		{"reservation report", 0x0e, 0, nvme.DirControllerToHost},
		{"zone append", 0x7d, 0, nvme.DirHostToController},
		{"admin get log page", 0x02, 0, nvme.DirControllerToHost},
		{"admin identify", 0x06, 0, nvme.DirControllerToHost},
		{"admin set features", 0x09, 0, nvme.DirHostToController},
		{"admin get features", 0x0a, 0, nvme.DirControllerToHost},
		{"admin async event", 0x0c, 0, nvme.DirNone},
		{"admin keep alive", 0x18, 0, nvme.DirNone},
		{"admin security send", 0x81, 0, nvme.DirHostToController},
		{"admin security receive", 0x82, 0, nvme.DirControllerToHost},
		{"bidirectional", 0x03, 0, nvme.DirBidirectional},
		{"property set", nvme.OpFabrics, nvme.FCPropertySet, nvme.DirNone},
		{"connect", nvme.OpFabrics, nvme.FCConnect, nvme.DirHostToController},
		{"property get", nvme.OpFabrics, nvme.FCPropertyGet, nvme.DirNone},
		{"authentication send", nvme.OpFabrics, nvme.FCAuthSend, nvme.DirHostToController},
		{"authentication receive", nvme.OpFabrics, nvme.FCAuthReceive, nvme.DirControllerToHost},
	} {
		c := nvme.Command(make([]byte, nvme.CommandLen))
		c.SetOpcode(tc.opcode)
		c.SetFCType(tc.fctype)
		if got := c.Direction(); got != tc.want {
			t.Errorf("%s: Direction() = %v, want %v", tc.name, got, tc.want)
		}
		// The kernel's nvme_is_write: bit 0 of the opcode, or of the FCType.
		isWrite := byte(tc.opcode)&1 != 0
		if tc.opcode == nvme.OpFabrics {
			isWrite = byte(tc.fctype)&1 != 0
		}
		if got := c.Direction()&nvme.DirHostToController != 0; got != isWrite {
			t.Errorf("%s: host-to-controller %v, nvme_is_write %v", tc.name, got, isWrite)
		}
	}
	if nvme.DirControllerToHost.String() != "controller-to-host" || nvme.FCAuthReceive.String() != "Authentication Receive" ||
		nvme.FCType(0x7).String() != "FCType(0x07)" {
		t.Errorf("names: %v %v %v", nvme.DirControllerToHost, nvme.FCAuthReceive, nvme.FCType(7))
	}
}
