package nvme_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/nvme"
)

func TestParseCapsuleForms(t *testing.T) {
	data := bytes.Repeat([]byte{0xa5}, 1024)
	list := []nvme.SGLFields{
		keyed(0x100000, 4096, 0x11, nvme.SGLAddress),
		keyed(0x208000, 512, 0x22, nvme.SGLAddress),
		keyed(0x300000, 8192, 0x33, nvme.SGLInvalidate),
	}
	for _, tc := range []struct {
		name  string
		b     []byte
		kind  nvme.DataKind
		keyed []nvme.SGLFields
		data  []byte
	}{
		{"keyed", capsule(t, nvme.OpRead, keyed(0x1000, 4096, 0xabc, nvme.SGLAddress), nil),
			nvme.DataKeyed, []nvme.SGLFields{keyed(0x1000, 4096, 0xabc, nvme.SGLAddress)}, nil},
		{"keyed invalidate", capsule(t, nvme.OpRead, keyed(0x1000, 4096, 0xabc, nvme.SGLInvalidate), nil),
			nvme.DataKeyed, []nvme.SGLFields{keyed(0x1000, 4096, 0xabc, nvme.SGLInvalidate)}, nil},
		{"keyed null", capsule(t, nvme.OpFlush, keyed(0, 0, 0, nvme.SGLAddress), nil),
			nvme.DataKeyed, []nvme.SGLFields{keyed(0, 0, 0, nvme.SGLAddress)}, nil},
		{"keyed with trailing bytes", capsule(t, nvme.OpRead, keyed(0x1000, 4096, 0xabc, nvme.SGLAddress), data),
			nvme.DataKeyed, []nvme.SGLFields{keyed(0x1000, 4096, 0xabc, nvme.SGLAddress)}, nil},
		{"in-capsule", inlineCapsule(t, nvme.OpWrite, data), nvme.DataInCapsule, nil, data},
		{"in-capsule empty", inlineCapsule(t, nvme.OpWrite, nil), nvme.DataInCapsule, nil, []byte{}},
		{"keyed list", listCapsule(t, nvme.OpRead, list...), nvme.DataKeyedList, list, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := nvme.ParseCapsule(tc.b)
			if err != nil {
				t.Fatalf("ParseCapsule: %v", err)
			}
			if c.Kind() != tc.kind {
				t.Errorf("Kind() = %v, want %v", c.Kind(), tc.kind)
			}
			var got []nvme.SGLFields
			for i, d := range c.Keyed().All() {
				if d2 := c.Keyed().At(i); &d2[0] != &d[0] {
					t.Errorf("All and At disagree at %d", i)
				}
				got = append(got, d.Fields())
			}
			if diff := cmp.Diff(tc.keyed, got); diff != "" {
				t.Errorf("keyed descriptors (-want +got):\n%s", diff)
			}
			if !bytes.Equal(c.InCapsuleData(), tc.data) || (tc.data == nil) != (c.InCapsuleData() == nil) {
				t.Errorf("InCapsuleData() = %d bytes, want %d", len(c.InCapsuleData()), len(tc.data))
			}
			if &c.Command()[0] != &tc.b[0] || &c.Bytes()[0] != &tc.b[0] {
				t.Errorf("Command() or Bytes() is not a view of the capsule")
			}
		})
	}
}

// TestCapsuleRewrite rewrites every keyed descriptor as the staging engine
// will and checks that exactly their bytes changed.
func TestCapsuleRewrite(t *testing.T) {
	for _, tc := range []struct {
		b       []byte
		offsets []int // where the keyed descriptors are
	}{
		{capsule(t, nvme.OpWrite, keyed(0x1000, 65536, 0xabc, nvme.SGLInvalidate), nil), []int{24}},
		{listCapsule(t, nvme.OpRead, keyed(0x1000, 4096, 1, nvme.SGLAddress), keyed(0x9000, 4096, 2, nvme.SGLInvalidate)), []int{64, 80}},
	} {
		b := tc.b
		want := bytes.Clone(b)
		c, err := nvme.ParseCapsule(b)
		if err != nil {
			t.Fatal(err)
		}
		if c.Keyed().Len() != len(tc.offsets) {
			t.Fatalf("%d keyed descriptors, want %d", c.Keyed().Len(), len(tc.offsets))
		}
		for i, d := range c.Keyed().All() {
			f := keyed(0xf000_0000_0000+uint64(i)<<20, d.Length(), 0x5a9e, nvme.SGLAddress)
			d.SetAddress(f.Address)
			d.SetKey(f.Key)
			d.SetSubtype(f.Subtype)
			nvme.SGL(want[tc.offsets[i]:]).Encode(&f)
		}
		if diff := cmp.Diff(want, b); diff != "" {
			t.Errorf("rewritten capsule (-want +got):\n%s", diff)
		}
		if _, err := nvme.ParseCapsule(b); err != nil {
			t.Errorf("rewritten capsule does not parse: %v", err)
		}
	}
}

func TestParseCapsuleRejects(t *testing.T) {
	good := listCapsule(t, nvme.OpRead, keyed(0x1000, 4096, 1, nvme.SGLAddress), keyed(0x9000, 4096, 2, nvme.SGLAddress))
	for _, tc := range []struct {
		name   string
		b      []byte
		want   error
		field  string
		offset int
	}{
		{"PRP", with(good, func(b []byte) { b[1] = 0x00 }), nvme.ErrNotSGL, "flags", 1},
		{"PSDT reserved", with(good, func(b []byte) { b[1] = 0xc0 }), nvme.ErrNotSGL, "flags", 1},
		{"keyed offset subtype", capsule(t, nvme.OpRead, keyed(0, 1, 1, nvme.SGLOffset), nil), nvme.ErrSGLSubtype, "data pointer", 24},
		{"keyed transport subtype", capsule(t, nvme.OpRead, keyed(0, 1, 1, nvme.SGLTransportA), nil), nvme.ErrSGLSubtype, "data pointer", 24},
		{"data block address", capsule(t, nvme.OpWrite, nvme.SGLFields{Type: nvme.SGLDataBlock, Address: 0x1000, Length: 8}, nil),
			nvme.ErrSGLSubtype, "data pointer", 24},
		{"in-capsule past end", inlineCapsule(t, nvme.OpWrite, make([]byte, 100))[:64+99], nvme.ErrSGLBounds, "data pointer", 24},
		{"in-capsule offset past end", capsule(t, nvme.OpWrite,
			nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Address: 9, Length: 0}, make([]byte, 8)),
			nvme.ErrSGLBounds, "data pointer", 24},
		// The values that wrapped the Linux target's u64 off+len check.
		{"in-capsule offset wraps", capsule(t, nvme.OpWrite,
			nvme.SGLFields{Type: nvme.SGLDataBlock, Subtype: nvme.SGLOffset, Address: 0xfffffffffffffe00, Length: 0x1000}, make([]byte, 4096)),
			nvme.ErrSGLBounds, "data pointer", 24},
		{"list length 0", with(good, func(b []byte) { b[32] = 0 }), nvme.ErrSGLListLength, "data pointer", 24},
		{"list length 24", with(good, func(b []byte) { b[32] = 24 }), nvme.ErrSGLListLength, "data pointer", 24},
		{"list past end", good[:64+31], nvme.ErrSGLBounds, "data pointer", 24},
		{"list offset past end", with(good, func(b []byte) { b[24] = 1 }), nvme.ErrSGLBounds, "data pointer", 24},
		{"list address subtype", with(good, func(b []byte) { b[39] = 0x30 }), nvme.ErrSGLSubtype, "data pointer", 24},
		{"list holds a segment", with(good, func(b []byte) { b[64+16+15] = 0x21 }), nvme.ErrSGLNested, "list entry", 80},
		{"list holds a last segment", with(good, func(b []byte) { b[64+15] = 0x31 }), nvme.ErrSGLNested, "list entry", 64},
		{"list holds in-capsule data", with(good, func(b []byte) { b[64+16+15] = 0x01 }), nvme.ErrSGLType, "list entry", 80},
		{"list holds a bit bucket", with(good, func(b []byte) { b[64+15] = 0x10 }), nvme.ErrSGLType, "list entry", 64},
		{"list entry keyed offset", with(good, func(b []byte) { b[64+16+15] = 0x41 }), nvme.ErrSGLSubtype, "list entry", 80},
		{"bit bucket", capsule(t, nvme.OpRead, nvme.SGLFields{Type: nvme.SGLBitBucket, Length: 8}, nil), nvme.ErrSGLType, "data pointer", 24},
		{"segment", capsule(t, nvme.OpRead, nvme.SGLFields{Type: nvme.SGLSegment, Subtype: nvme.SGLOffset, Length: 16}, make([]byte, 16)),
			nvme.ErrSGLType, "data pointer", 24},
		{"transport data block", capsule(t, nvme.OpWrite, nvme.SGLFields{Type: nvme.SGLTransportDataBlock, Subtype: nvme.SGLTransportA, Length: 8}, make([]byte, 8)),
			nvme.ErrSGLType, "data pointer", 24},
		{"reserved type", with(good, func(b []byte) { b[39] = 0x71 }), nvme.ErrSGLType, "data pointer", 24},
		{"vendor type", with(good, func(b []byte) { b[39] = 0xf1 }), nvme.ErrSGLType, "data pointer", 24},
	} {
		c, err := nvme.ParseCapsule(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
			continue
		}
		if c.Kind() != 0 || c.Keyed() != nil || c.Bytes() != nil {
			t.Errorf("%s: a failed parse returned a capsule", tc.name)
		}
		var e *nvme.Error
		if !errors.As(err, &e) || e.Op != "parse capsule" || e.Field != tc.field || e.Offset != tc.offset {
			t.Errorf("%s: error %#v, want field %q at byte %d", tc.name, err, tc.field, tc.offset)
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "nvme: parse capsule: ") {
			t.Errorf("%s: message %q does not name the operation", tc.name, msg)
		}
	}
}

// with returns a copy of b changed by f.
func with(b []byte, f func([]byte)) []byte {
	b = bytes.Clone(b)
	f(b)
	return b
}

// TestCapsuleCutAtEveryPrefix feeds ParseCapsule every prefix of valid
// capsules: a prefix that lacks bytes the data pointer names must fail,
// none may panic.
func TestCapsuleCutAtEveryPrefix(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		need int // the shortest prefix that parses
	}{
		{"keyed", capsule(t, nvme.OpRead, keyed(0x1000, 4096, 1, nvme.SGLInvalidate), nil), nvme.CommandLen},
		{"in-capsule", inlineCapsule(t, nvme.OpWrite, make([]byte, 1024)), nvme.CommandLen + 1024},
		{"keyed list", listCapsule(t, nvme.OpRead, keyed(1, 2, 3, 0), keyed(4, 5, 6, 0), keyed(7, 8, 9, 0xf)), nvme.CommandLen + 48},
	} {
		for i := range len(tc.b) + 1 {
			_, err := nvme.ParseCapsule(tc.b[:i:i])
			switch {
			case i < nvme.CommandLen && !errors.Is(err, nvme.ErrTruncated):
				t.Errorf("%s cut at %d: got %v, want ErrTruncated", tc.name, i, err)
			case i >= nvme.CommandLen && i < tc.need && !errors.Is(err, nvme.ErrSGLBounds):
				t.Errorf("%s cut at %d: got %v, want ErrSGLBounds", tc.name, i, err)
			case i >= tc.need && err != nil:
				t.Errorf("%s cut at %d: %v", tc.name, i, err)
			}
		}
	}
}
