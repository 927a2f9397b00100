package nvme_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/nvme"
)

func TestSGLRoundTrip(t *testing.T) {
	for _, want := range []nvme.SGLFields{
		keyed(0x0123456789abcdef, 4096, 0x1234abcd, nvme.SGLAddress),
		keyed(0xfffffffffffff000, nvme.MaxKeyedLength, 0xffffffff, nvme.SGLInvalidate),
		keyed(0, 0, 0, nvme.SGLAddress), // the Linux host's "no data" pointer
		{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Address: 0, Length: 1024},
		{Type: nvme.SGLDataBlock, Subtype: nvme.SGLAddress, Address: 0x1000, Length: 0xffffffff},
		{Type: nvme.SGLLastSegment, Subtype: nvme.SGLOffset, Address: 0, Length: 48},
		{Type: nvme.SGLTransportDataBlock, Subtype: nvme.SGLTransportA, Length: 1},
		{Type: nvme.SGLVendorSpecific, Subtype: 0x7, Address: 1},
	} {
		b := filled(nvme.SGLLen)
		nvme.SGL(b).Encode(&want)
		s, n, err := nvme.ParseSGL(b)
		if err != nil || n != nvme.SGLLen {
			t.Fatalf("ParseSGL(%x) = _, %d, %v", b, n, err)
		}
		if diff := cmp.Diff(want, s.Fields()); diff != "" {
			t.Errorf("SGL round trip (-want +got):\n%s", diff)
		}
		if want.Type != nvme.SGLKeyedDataBlock && !bytes.Equal(b[12:15], []byte{0, 0, 0}) {
			t.Errorf("%v: reserved bytes 12-14 = %x, want zero", want.Type, b[12:15])
		}
	}
}

func TestSGLKeyedLayout(t *testing.T) {
	// struct nvme_keyed_sgl_desc: __le64 addr; __u8 length[3]; __u8 key[4]; __u8 type.
	b := make([]byte, nvme.SGLLen)
	nvme.SGL(b).Encode(&nvme.SGLFields{Type: nvme.SGLKeyedDataBlock, Subtype: nvme.SGLInvalidate,
		Address: 0x1122334455667788, Length: 0xabcdef, Key: 0x01020304})
	want := []byte{
		0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // addr
		0xef, 0xcd, 0xab, // length, put_unaligned_le24
		0x04, 0x03, 0x02, 0x01, // key, put_unaligned_le32
		0x4f, // (NVME_KEY_SGL_FMT_DATA_DESC << 4) | NVME_SGL_FMT_INVALIDATE
	}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("keyed descriptor bytes (-want +got):\n%s", diff)
	}
	if s := nvme.SGL(b); !s.Invalidate() || !s.IsKeyed() || s.Identifier() != 0x4f {
		t.Errorf("Invalidate=%v IsKeyed=%v Identifier=%#x", s.Invalidate(), s.IsKeyed(), s.Identifier())
	}
}

func TestSGLSetters(t *testing.T) {
	b := filled(nvme.SGLLen)
	s := nvme.SGL(b)
	s.Encode(&nvme.SGLFields{Type: nvme.SGLKeyedDataBlock, Subtype: nvme.SGLInvalidate, Address: 1, Length: 2, Key: 3})
	s.SetAddress(0xdeadbeef00001000)
	s.SetKey(0xcafef00d)
	s.SetLength(0x01abcdef) // 25 bits: the 24 that fit are kept, the key's first byte is not touched
	s.SetSubtype(nvme.SGLAddress)
	want := keyed(0xdeadbeef00001000, 0xabcdef, 0xcafef00d, nvme.SGLAddress)
	if diff := cmp.Diff(want, s.Fields()); diff != "" {
		t.Errorf("keyed setters (-want +got):\n%s", diff)
	}
	s.SetType(nvme.SGLDataBlock)
	s.SetSubtype(nvme.SGLOffset)
	s.SetLength(0xfffffff0)
	if s.Type() != nvme.SGLDataBlock || s.Subtype() != nvme.SGLOffset || s.Length() != 0xfffffff0 {
		t.Errorf("unkeyed setters: got %v %v %#x", s.Type(), s.Subtype(), s.Length())
	}
	if s.Address() != 0xdeadbeef00001000 {
		t.Errorf("SetType/SetLength changed the address to %#x", s.Address())
	}
}

func TestParseSGLRejectsReservedTypes(t *testing.T) {
	for typ := 0x6; typ <= 0xe; typ++ {
		b := make([]byte, nvme.SGLLen)
		b[15] = byte(typ << 4)
		if _, n, err := nvme.ParseSGL(b); !errors.Is(err, nvme.ErrSGLType) || n != 0 {
			t.Errorf("type %#x: got n=%d err=%v, want ErrSGLType", typ, n, err)
		}
	}
}

func TestSGLString(t *testing.T) {
	b := make([]byte, nvme.SGLLen)
	s := nvme.SGL(b)
	s.Encode(&nvme.SGLFields{Type: nvme.SGLKeyedDataBlock, Subtype: nvme.SGLInvalidate, Address: 0x1000, Length: 4096, Key: 0x12})
	if got, want := s.String(), "keyed addr=0x1000 len=4096 key=0x12 invalidate"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	s.Encode(&nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Length: 1024})
	if got, want := s.String(), "data block offset=0 len=1024"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got := nvme.SGL(b[:3]).String(); got != "SGL(3 bytes)" {
		t.Errorf("short String() = %q", got)
	}
}
