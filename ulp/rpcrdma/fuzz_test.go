package rpcrdma_test

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// Fuzz targets, seeded from the encoder and the vectors. Run one with
//   go test ./ulp/rpcrdma -run '^$' -fuzz FuzzParse -fuzztime 30s

// FuzzParse parses arbitrary bytes: no panic; an accepted header's
// segments lie inside it; rewriting them changes nothing else, and it
// encodes back to itself (every header this package accepts is one
// Append writes).
func FuzzParse(f *testing.F) {
	for _, rt := range roundTrips {
		f.Add(rpcrdma.Append(nil, &rt))
	}
	for _, v := range vectors {
		f.Add(words(f, v.hex))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := rpcrdma.Parse(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("error %v with n %d", err, n)
			}
			return
		}
		if n < rpcrdma.HeaderLen || n > len(b) || m.Len() != n {
			t.Fatalf("n %d of %d bytes", n, len(b))
		}
		fields := m.Fields()
		if got := rpcrdma.Append(nil, &fields); !bytes.Equal(got, b[:n]) {
			t.Fatalf("re-encoded:\n got % x\nwant % x", got, b[:n])
		}
		orig := bytes.Clone(b)
		var offs []int
		for s := range m.Segments() {
			if s.Off < rpcrdma.HeaderLen || s.Off+rpcrdma.SegmentLen > n {
				t.Fatalf("segment at %d of a %d-byte header", s.Off, n)
			}
			s.Segment.SetHandle(^s.Segment.Handle())
			s.Segment.SetOffset(^s.Segment.Offset())
			offs = append(offs, s.Off)
		}
		m2, n2, err := rpcrdma.Parse(b)
		if err != nil || n2 != n {
			t.Fatalf("rewritten: n=%d err=%v", n2, err)
		}
		f2 := m2.Fields()
		for i := range f2.Reads {
			f2.Reads[i].Handle, f2.Reads[i].Offset = ^f2.Reads[i].Handle, ^f2.Reads[i].Offset
		}
		for _, w := range f2.Writes {
			for i := range w {
				w[i].Handle, w[i].Offset = ^w[i].Handle, ^w[i].Offset
			}
		}
		for i := range f2.Reply {
			f2.Reply[i].Handle, f2.Reply[i].Offset = ^f2.Reply[i].Handle, ^f2.Reply[i].Offset
		}
		if diff := cmp.Diff(fields, f2); diff != "" {
			t.Fatalf("rewriting handles and offsets changed more (-want +got):\n%s", diff)
		}
		for _, off := range offs {
			copy(b[off:off+rpcrdma.SegmentLen], orig[off:])
		}
		if !bytes.Equal(b, orig) {
			t.Fatal("segments put back: the bytes differ")
		}
	})
}

// FuzzConnectPrivate: no panic; accepted data encodes back to itself.
func FuzzConnectPrivate(f *testing.F) {
	f.Add(rpcrdma.AppendConnectPrivate(nil, &rpcrdma.ConnectPrivateFields{Flags: 1, SendSize: 4096, RecvSize: 4096}))
	f.Add([]byte{0xf6, 0xab, 0x0e, 0x18, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, n, err := rpcrdma.ParseConnectPrivate(b)
		if err != nil {
			return
		}
		fields := c.Fields()
		if got := rpcrdma.AppendConnectPrivate(nil, &fields); n != rpcrdma.ConnectPrivateLen || !bytes.Equal(got, b[:n]) {
			t.Fatalf("re-encoded % x, want % x", got, b[:n])
		}
	})
}
