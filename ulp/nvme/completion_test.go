package nvme_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/nvme"
)

func TestCompletionRoundTrip(t *testing.T) {
	for _, want := range []nvme.CompletionFields{
		{},
		{DW0: 0x00010001, SQHead: 17, SQID: 3, CommandID: 0x1003, Status: nvme.StatusSuccess, Phase: true},
		{DW0: 0xffffffff, DW1: 0xfffffffe, SQHead: 0xffff, SQID: 0xffff, CommandID: 0xffff,
			Status: nvme.StatusConnectInvalidParam | nvme.StatusDNR | nvme.StatusMore | nvme.StatusCRDMask, Phase: true},
		{CommandID: 7, Status: nvme.StatusSGLInvalidType.WithDNR()},
	} {
		b := filled(nvme.CompletionLen)
		nvme.Completion(b).Encode(&want)
		c, n, err := nvme.ParseCompletion(b)
		if err != nil || n != nvme.CompletionLen {
			t.Fatalf("ParseCompletion = _, %d, %v", n, err)
		}
		if diff := cmp.Diff(want, c.Fields()); diff != "" {
			t.Errorf("completion round trip (-want +got):\n%s", diff)
		}
		if c.Result() != uint64(want.DW1)<<32|uint64(want.DW0) {
			t.Errorf("Result() = %#x", c.Result())
		}
	}
}

// TestCompletionStatusBits checks the status field against SPDK's
// struct spdk_nvme_status bit fields (p:1 sc:8 sct:3 crd:2 m:1 dnr:1) and
// the kernel's status >> 1.
func TestCompletionStatusBits(t *testing.T) {
	b := make([]byte, nvme.CompletionLen)
	// p=1, sc=0x82, sct=1, crd=2, m=1, dnr=1
	raw := uint16(1) | 0x82<<1 | 1<<9 | 2<<12 | 1<<14 | 1<<15
	b[14], b[15] = byte(raw), byte(raw>>8)
	c := nvme.Completion(b)
	s := c.Status()
	if !c.Phase() || s.Code() != 0x82 || s.Type() != nvme.SCTCommandSpecific || s.CRD() != 2 || !s.More() || !s.DNR() {
		t.Errorf("status %#x: phase %v code %#x type %d crd %d more %v dnr %v",
			raw, c.Phase(), s.Code(), s.Type(), s.CRD(), s.More(), s.DNR())
	}
	if s != nvme.Status(raw>>1) || s&0x7ff != nvme.StatusConnectInvalidParam || s.Success() {
		t.Errorf("Status() = %#x, want %#x", uint16(s), raw>>1)
	}
	c.SetStatus(nvme.StatusDataXferError)
	if c.StatusField() != 0x04<<1|1 {
		t.Errorf("SetStatus kept phase? field %#x", c.StatusField())
	}
	c.SetPhase(false)
	if c.StatusField() != 0x04<<1 || c.Status() != nvme.StatusDataXferError {
		t.Errorf("SetPhase(false): field %#x", c.StatusField())
	}
	c.SetPhase(true)
	c.SetStatus(nvme.StatusSuccess)
	if c.StatusField() != 1 || !c.Status().Success() {
		t.Errorf("success with phase: field %#x", c.StatusField())
	}
	// The Linux target sets the status as status << 1, phase clear
	// (drivers/nvme/target/rdma.c): NVME_SC_SGL_INVALID_TYPE | NVME_STATUS_DNR.
	c.SetPhase(false)
	c.SetStatus(0x11 | 0x4000)
	if b[14] != 0x22 || b[15] != 0x80 {
		t.Errorf("SGL type invalid + DNR: bytes %x, want 2280", b[14:16])
	}
}

func TestCompletionSetters(t *testing.T) {
	c := nvme.Completion(filled(nvme.CompletionLen))
	c.Encode(&nvme.CompletionFields{Phase: true})
	c.SetDW0(1)
	c.SetDW1(2)
	c.SetSQHead(3)
	c.SetSQID(4)
	c.SetCommandID(5)
	want := nvme.CompletionFields{DW0: 1, DW1: 2, SQHead: 3, SQID: 4, CommandID: 5, Phase: true}
	if diff := cmp.Diff(want, c.Fields()); diff != "" {
		t.Errorf("after setters (-want +got):\n%s", diff)
	}
}

func TestStatusString(t *testing.T) {
	for _, tc := range []struct {
		s    nvme.Status
		want string
	}{
		{nvme.StatusSuccess, "success (0x000)"},
		{nvme.StatusInvalidField.WithDNR(), "invalid field (0x002) dnr"},
		{nvme.StatusSGLInvalidData | nvme.StatusMore, "data SGL length invalid (0x00f) more"},
		{nvme.StatusConnectInvalidHost | nvme.StatusDNR, "command specific (0x184, connect: invalid host) dnr"},
		{nvme.StatusHostPathError, "host pathing error (0x370)"},
		{0x281, "sct 2 sc 0x81"},
	} {
		if got := tc.s.String(); got != tc.want {
			t.Errorf("Status(%#x).String() = %q, want %q", uint16(tc.s), got, tc.want)
		}
	}
}
