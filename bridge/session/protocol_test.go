package session_test

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/rbridge/rbridge/bridge/session"
)

// split cuts msg into pieces at the given offsets, each piece a copy with
// 0xFF past its end in its array, so that a read or write past a piece
// shows up.
func split(msg []byte, cuts ...int) session.Pieces {
	var p session.Pieces
	at := 0
	for _, c := range append(cuts, len(msg)) {
		b := bytes.Repeat([]byte{0xff}, c-at+8)
		copy(b, msg[at:c])
		p = append(p, b[:c-at])
		at = c
	}
	return p
}

func join(p session.Pieces) []byte {
	var out []byte
	for _, b := range p {
		out = append(out, b...)
	}
	return out
}

// TestPieces: ReadAt, WriteAt and Prefix see one message across its
// pieces, wherever they are cut, read every byte once, write in place
// and never past the message's end.
func TestPieces(t *testing.T) {
	msg := make([]byte, 40)
	for i := range msg {
		msg[i] = byte(i)
	}
	for _, cuts := range [][]int{nil, {0}, {1}, {16}, {39}, {40}, {3, 3, 20}, {10, 20, 30}} {
		p := split(msg, cuts...)
		if p.Len() != len(msg) {
			t.Fatalf("cuts %v: Len %d, want %d", cuts, p.Len(), len(msg))
		}
		for off := 0; off <= len(msg); off++ {
			for n := 0; off+n <= len(msg)+2; n += 7 {
				got := bytes.Repeat([]byte{0xff}, n)
				k, err := p.ReadAt(got, int64(off))
				want := msg[off:min(off+n, len(msg))]
				if k != len(want) || !bytes.Equal(got[:k], want) {
					t.Fatalf("cuts %v: ReadAt(%d bytes, %d): %d % x, want % x", cuts, n, off, k, got[:k], want)
				}
				if short := k < n; short != errors.Is(err, io.EOF) {
					t.Fatalf("cuts %v: ReadAt(%d bytes, %d): %v after %d bytes", cuts, n, off, err, k)
				}
			}
			pre := p.Prefix(off, nil)
			if d := cmp.Diff(msg[:off], pre); d != "" {
				t.Fatalf("cuts %v: Prefix(%d) (-want +got):\n%s", cuts, off, d)
			}
			if len(p) > 0 && len(p[0]) >= off && off > 0 && &pre[0] != &p[0][0] {
				t.Fatalf("cuts %v: Prefix(%d) copied what the first piece holds", cuts, off)
			}
		}
		if got := p.Prefix(len(msg)+10, make([]byte, 4)); !bytes.Equal(got, msg) {
			t.Fatalf("cuts %v: Prefix past the end: % x", cuts, got)
		}
		// A write over every byte, and one past the end.
		w := split(msg, cuts...)
		patch := []byte{0xa0, 0xa1, 0xa2, 0xa3, 0xa4}
		for off := 0; off <= len(msg); off++ {
			q := split(msg, cuts...)
			k, err := q.WriteAt(patch, int64(off))
			want := append([]byte(nil), msg...)
			n := copy(want[off:], patch)
			if k != n || !bytes.Equal(join(q), want) {
				t.Fatalf("cuts %v: WriteAt at %d: %d, message % x, want % x", cuts, off, k, join(q), want)
			}
			if (n < len(patch)) != errors.Is(err, io.ErrShortWrite) {
				t.Fatalf("cuts %v: WriteAt at %d: %v after %d bytes", cuts, off, err, k)
			}
			for i, b := range q {
				if rest := b[len(b):cap(b)]; len(rest) > 0 && rest[0] != 0xff {
					t.Fatalf("cuts %v: WriteAt at %d wrote past piece %d", cuts, off, i)
				}
			}
		}
		if _, err := w.ReadAt(make([]byte, 1), -1); err == nil {
			t.Error("ReadAt at a negative offset: no error")
		}
		if _, err := w.WriteAt(make([]byte, 1), -1); err == nil {
			t.Error("WriteAt at a negative offset: no error")
		}
	}
	var empty session.Pieces
	if n, err := empty.ReadAt(nil, 0); n != 0 || err != nil {
		t.Errorf("ReadAt of nothing from nothing: %d, %v", n, err)
	}
	if got := empty.Prefix(64, nil); len(got) != 0 {
		t.Errorf("Prefix of nothing: % x", got)
	}
}
