package nvme_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/nvme"
)

func TestCMRequestRoundTrip(t *testing.T) {
	for _, want := range []nvme.CMRequestFields{
		{QID: 0, HRQSize: 32, HSQSize: 31},
		{QID: 4, HRQSize: 128, HSQSize: 127, CNTLID: 1},
		{QID: 0xffff, HRQSize: 0xffff, HSQSize: 0xffff, CNTLID: 0xffff},
	} {
		b := filled(nvme.CMRequestLen)
		nvme.CMRequest(b).Encode(&want)
		r, n, err := nvme.ParseCMRequest(b)
		if err != nil || n != nvme.CMRequestLen {
			t.Fatalf("ParseCMRequest = _, %d, %v", n, err)
		}
		if diff := cmp.Diff(want, r.Fields()); diff != "" {
			t.Errorf("request round trip (-want +got):\n%s", diff)
		}
		if !bytes.Equal(b[10:], make([]byte, 22)) {
			t.Errorf("reserved bytes %x, want zero", b[10:])
		}
		if got := nvme.AppendCMRequest([]byte{0xee}, &want); !bytes.Equal(got[1:], b) || got[0] != 0xee {
			t.Errorf("AppendCMRequest = %x, want ee%x", got, b)
		}
	}
}

func TestCMReplyRoundTrip(t *testing.T) {
	want := nvme.CMReplyFields{CRQSize: 128}
	b := filled(nvme.CMReplyLen)
	nvme.CMReply(b).Encode(&want)
	r, n, err := nvme.ParseCMReply(b)
	if err != nil || n != nvme.CMReplyLen {
		t.Fatalf("ParseCMReply = _, %d, %v", n, err)
	}
	if diff := cmp.Diff(want, r.Fields()); diff != "" {
		t.Errorf("reply round trip (-want +got):\n%s", diff)
	}
	if !bytes.Equal(b, append([]byte{0, 0, 128, 0}, make([]byte, 28)...)) {
		t.Errorf("reply bytes %x", b)
	}
	if got := nvme.AppendCMReply(nil, &want); !bytes.Equal(got, b) {
		t.Errorf("AppendCMReply = %x, want %x", got, b)
	}
}

func TestCMRejectRoundTrip(t *testing.T) {
	want := nvme.CMRejectFields{Status: nvme.CMInvalidHSQSize}
	b := filled(nvme.CMRejectLen)
	nvme.CMReject(b).Encode(&want)
	r, n, err := nvme.ParseCMReject(b)
	if err != nil || n != nvme.CMRejectLen {
		t.Fatalf("ParseCMReject = _, %d, %v", n, err)
	}
	if diff := cmp.Diff(want, r.Fields()); diff != "" {
		t.Errorf("reject round trip (-want +got):\n%s", diff)
	}
	if !bytes.Equal(b, []byte{0, 0, 4, 0}) {
		t.Errorf("reject bytes %x, want 00000400", b)
	}
	if got := nvme.AppendCMReject(nil, &want); !bytes.Equal(got, b) {
		t.Errorf("AppendCMReject = %x, want %x", got, b)
	}
	if r.Status().String() != "invalid host SQ size" || nvme.CMStatus(0x42).String() != "unrecognized reason 0x42" {
		t.Errorf("status names: %v, %v", r.Status(), nvme.CMStatus(0x42))
	}
}

// TestCMPrivateDataPadded parses private data as the IB CM delivers it,
// padded to the REQ's 92 bytes: the extra bytes are ignored.
func TestCMPrivateDataPadded(t *testing.T) {
	b := nvme.AppendCMRequest(nil, &nvme.CMRequestFields{QID: 1, HRQSize: 128, HSQSize: 127})
	b = append(b, make([]byte, 92-len(b))...)
	r, n, err := nvme.ParseCMRequest(b)
	if err != nil || n != nvme.CMRequestLen || len(r) != nvme.CMRequestLen || r.QID() != 1 {
		t.Errorf("padded request: n=%d len=%d err=%v", n, len(r), err)
	}
}

func TestCMPrivateDataRecFmt(t *testing.T) {
	parsers := map[string]func([]byte) (int, error){
		"request": func(b []byte) (int, error) { _, n, err := nvme.ParseCMRequest(b); return n, err },
		"reply":   func(b []byte) (int, error) { _, n, err := nvme.ParseCMReply(b); return n, err },
		"reject":  func(b []byte) (int, error) { _, n, err := nvme.ParseCMReject(b); return n, err },
	}
	for name, parse := range parsers {
		b := make([]byte, 32)
		b[0] = 1
		if n, err := parse(b); !errors.Is(err, nvme.ErrRecFmt) || n != 0 {
			t.Errorf("%s with recfmt 1: n=%d err=%v, want ErrRecFmt", name, n, err)
		}
	}
}
