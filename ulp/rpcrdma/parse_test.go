package rpcrdma_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/ulp/rpcrdma"
)

// roundTrips are headers of every shape, as Append writes them.
var roundTrips = []rpcrdma.MessageFields{
	{XID: 1, Vers: 1, Credits: 32, Proc: rpcrdma.ProcMsg},
	{XID: 2, Vers: 1, Credits: 1, Proc: rpcrdma.ProcNoMsg, Reads: []rpcrdma.ReadSegmentFields{{SegmentFields: rpcrdma.SegmentFields{Handle: 9, Length: 100, Offset: 1 << 40}}}},
	{XID: 3, Vers: 1, Proc: rpcrdma.ProcMsg,
		Reads:  []rpcrdma.ReadSegmentFields{{Position: 4, SegmentFields: rpcrdma.SegmentFields{Handle: 1, Length: 2, Offset: 3}}, {Position: 4, SegmentFields: rpcrdma.SegmentFields{Handle: 4, Length: 5, Offset: 6}}},
		Writes: [][]rpcrdma.SegmentFields{{{Handle: 7, Length: 8, Offset: 9}}, {}, {{Handle: 10, Length: 11, Offset: 12}, {Handle: 13, Length: 14, Offset: 15}}},
		Reply:  []rpcrdma.SegmentFields{{Handle: 16, Length: 17, Offset: 18}}},
	{XID: 4, Vers: 1, Proc: rpcrdma.ProcMsg, Reply: []rpcrdma.SegmentFields{}},
	{XID: 5, Vers: 1, Proc: rpcrdma.ProcMsgP, Align: 4096, Thresh: 1024, Writes: [][]rpcrdma.SegmentFields{{{Handle: 1, Length: 2, Offset: 3}}}},
	{XID: 6, Vers: 1, Credits: 64, Proc: rpcrdma.ProcDone},
	{XID: 7, Vers: 1, Credits: 64, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrChunk},
	{XID: 8, Vers: 1, Credits: 64, Proc: rpcrdma.ProcError, Err: rpcrdma.ErrVers, VersLow: 1, VersHigh: 1},
}

// TestRoundTrip: Append, then Parse, gives the fields back, Len is the
// header's length, and bytes after it (an RPC message) are not read.
func TestRoundTrip(t *testing.T) {
	for _, f := range roundTrips {
		b := rpcrdma.Append([]byte{}, &f)
		if len(b) != f.Len() {
			t.Errorf("%v %d: Append wrote %d bytes, Len says %d", f.Proc, f.XID, len(b), f.Len())
		}
		m, n, err := rpcrdma.Parse(append(bytes.Clone(b), 0xff, 0xff, 0xff, 0xff, 0xff))
		if err != nil || n != len(b) || m.Len() != n {
			t.Fatalf("%v %d: n=%d err=%v, want %d", f.Proc, f.XID, n, err, len(b))
		}
		if diff := cmp.Diff(f, m.Fields()); diff != "" {
			t.Errorf("%v %d (-want +got):\n%s", f.Proc, f.XID, diff)
		}
	}
}

// TestCutAtEveryPrefix: every prefix of every header is ErrTruncated,
// with n 0, never a panic.
func TestCutAtEveryPrefix(t *testing.T) {
	all := append([]rpcrdma.MessageFields(nil), roundTrips...)
	for _, v := range vectors {
		all = append(all, v.want)
	}
	for _, f := range all {
		b := rpcrdma.Append(nil, &f)
		for i := range len(b) {
			_, n, err := rpcrdma.Parse(bytes.Clone(b[:i]))
			var e *rpcrdma.Error
			if !errors.Is(err, rpcrdma.ErrTruncated) || n != 0 || !errors.As(err, &e) {
				t.Errorf("%v %#x cut at %d of %d: n=%d err=%v, want ErrTruncated", f.Proc, f.XID, i, len(b), n, err)
			}
		}
	}
	p := rpcrdma.AppendConnectPrivate(nil, &rpcrdma.ConnectPrivateFields{SendSize: 1024, RecvSize: 1024})
	for i := range len(p) {
		if _, n, err := rpcrdma.ParseConnectPrivate(p[:i]); !errors.Is(err, rpcrdma.ErrTruncated) || n != 0 {
			t.Errorf("private data cut at %d: n=%d err=%v", i, n, err)
		}
	}
	if _, _, err := rpcrdma.ParseSegment(make([]byte, rpcrdma.SegmentLen-1)); !errors.Is(err, rpcrdma.ErrTruncated) {
		t.Errorf("segment cut: %v", err)
	}
}

// TestMalformed: what is not RPC-over-RDMA version 1 fails with the
// sentinel that says why, naming the field.
func TestMalformed(t *testing.T) {
	for _, tc := range []struct {
		name, hex string
		want      error
		msg       string
	}{
		{"version 2", "1 2 20 0 0 0 0", rpcrdma.ErrVersion, "rpcrdma: parse header: rdma_vers (byte 4): not RPC-over-RDMA version 1: version 2"},
		{"an RPC message, not a transport header", "5a4b3c2d 0 2 186a3", rpcrdma.ErrVersion, ""},
		{"type 5", "1 1 20 5 0 0 0", rpcrdma.ErrProc, "rpcrdma: parse header: rdma_proc (byte 12): unknown message type: type 5"},
		{"read list discriminator 2", "1 1 20 0 2 0 0", rpcrdma.ErrDiscriminator, "rpcrdma: parse header: read list entry (byte 16): discriminator is neither 0 nor 1: 2"},
		{"write list discriminator 7", "1 1 20 0 0 7 0", rpcrdma.ErrDiscriminator, ""},
		{"reply chunk discriminator", "1 1 20 0 0 0 ffffffff", rpcrdma.ErrDiscriminator, ""},
		{"unaligned position", "1 1 20 0 1 6 1 1 0000000000000001 0 0 0", rpcrdma.ErrPosition, ""},
		{"a segment count past any message", "1 1 20 0 0 1 ffffffff 0 0", rpcrdma.ErrSegmentCount, ""},
		{"error code 3", "1 1 20 4 3", rpcrdma.ErrErrorCode, ""},
	} {
		_, n, err := rpcrdma.Parse(words(t, tc.hex))
		if !errors.Is(err, tc.want) || n != 0 {
			t.Errorf("%s: n=%d err=%v, want %v", tc.name, n, err, tc.want)
			continue
		}
		if tc.msg != "" && err.Error() != tc.msg {
			t.Errorf("%s: %q, want %q", tc.name, err, tc.msg)
		}
	}
	if _, _, err := rpcrdma.ParseConnectPrivate(words(t, "4e564d45 01010303")); !errors.Is(err, rpcrdma.ErrMagic) {
		t.Errorf("other private data: %v, want ErrMagic", err)
	}
	if _, _, err := rpcrdma.ParseConnectPrivate(words(t, "f6ab0e18 02010303")); !errors.Is(err, rpcrdma.ErrVersion) {
		t.Errorf("private data version 2: %v, want ErrVersion", err)
	}
}

// TestRewriteInPlace: a segment's setters rewrite the message's bytes
// and nothing else.
func TestRewriteInPlace(t *testing.T) {
	f := roundTrips[2]
	b := rpcrdma.Append(nil, &f)
	orig := bytes.Clone(b)
	m, _, err := rpcrdma.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	k := 0
	for s := range m.Segments() {
		s.Segment.SetHandle(0xa0000000 | uint32(k))
		s.Segment.SetOffset(0x5000_0000_0000 + uint64(k))
		k++
	}
	m2, _, err := rpcrdma.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	k = 0
	for s := range m2.Segments() {
		if s.Segment.Handle() != 0xa0000000|uint32(k) || s.Segment.Offset() != 0x5000_0000_0000+uint64(k) {
			t.Errorf("segment %d: %+v", k, s.Segment.Fields())
		}
		copy(b[s.Off:], orig[s.Off:s.Off+rpcrdma.SegmentLen])
		k++
	}
	if k != 6 || !bytes.Equal(b, orig) {
		t.Errorf("%d segments; with them put back the header differs: % x", k, b)
	}
}

func TestEncodeBufferSize(t *testing.T) {
	for size, want := range map[int]uint8{1024: 0, 4096: 3, 65536: 63, 256 << 10: 255, 1 << 20: 255, 100: 0} {
		if got := rpcrdma.EncodeBufferSize(size); got != want {
			t.Errorf("EncodeBufferSize(%d) = %d, want %d", size, got, want)
		}
	}
	if got := rpcrdma.DecodeBufferSize(3); got != 4096 {
		t.Errorf("DecodeBufferSize(3) = %d", got)
	}
}

// TestWithoutSendWithInvalidate: the flag is cleared in a copy, the rest
// (other flags, bytes past the structure) kept; what is not RFC 8797
// version 1 data, or lacks the flag, comes back as it is.
func TestWithoutSendWithInvalidate(t *testing.T) {
	for _, tc := range []struct {
		name, in, out string
	}{
		{"the Linux client's", "f6ab0e18 01010303", "f6ab0e18 01000303"},
		{"other flags and padding kept", "f6ab0e18 01830303 0", "f6ab0e18 01820303 0"},
		{"without the flag", "f6ab0e18 01000303", "f6ab0e18 01000303"},
		{"version 2", "f6ab0e18 02010303", "f6ab0e18 02010303"},
		{"another magic", "f6ab0e19 01010303", "f6ab0e19 01010303"},
	} {
		in := words(t, tc.in)
		before := bytes.Clone(in)
		if got := rpcrdma.WithoutSendWithInvalidate(in); !bytes.Equal(got, words(t, tc.out)) || !bytes.Equal(in, before) {
			t.Errorf("%s: % x, want % x (the input now % x)", tc.name, got, words(t, tc.out), in)
		}
	}
	for _, b := range [][]byte{nil, {0xf6, 0xab, 0x0e, 0x18, 1, 1, 3}} {
		if got := rpcrdma.WithoutSendWithInvalidate(b); !bytes.Equal(got, b) {
			t.Errorf("% x: % x, want it as it is", b, got)
		}
	}
}
