package ibv

import (
	"bytes"
	"testing"
)

func TestMTUTrailer(t *testing.T) {
	user := []byte("hello")
	req, err := withMTUTrailer(user, cmREQPrivateData, MTU2048)
	if err != nil {
		t.Fatal(err)
	}
	if len(req) != 56 || !bytes.HasPrefix(req, user) || !bytes.Equal(req[52:], []byte{'r', 'b', 1, byte(MTU2048)}) {
		t.Fatalf("REQ private data % x", req)
	}
	got, m := splitMTUTrailer(req)
	if m != MTU2048 || len(got) != MaxConnectPrivateData || !bytes.HasPrefix(got, user) {
		t.Fatalf("split: %d bytes, MTU %v", len(got), m)
	}
	if _, err := withMTUTrailer(make([]byte, 53), cmREQPrivateData, MTU1024); err == nil {
		t.Errorf("53 bytes on connect: no error")
	}
	if rep, err := withMTUTrailer(make([]byte, MaxAcceptPrivateData), cmREPPrivateData, MTU4096); err != nil || len(rep) != 196 {
		t.Errorf("192 bytes on accept: %d bytes, %v", len(rep), err)
	}
	// An unmodified peer: padding, or its own data in the last bytes.
	for _, d := range [][]byte{make([]byte, 56), nil, {1, 2}, append(make([]byte, 52), 'r', 'b', 1, 9), append(make([]byte, 52), 'r', 'b', 2, 3)} {
		if got, m := splitMTUTrailer(d); m != 0 || !bytes.Equal(got, d) {
			t.Errorf("split % x: MTU %v, %d bytes", d, m, len(got))
		}
	}
}

func TestCapMTU(t *testing.T) {
	for _, c := range []struct {
		in   []MTU
		want MTU
	}{
		{[]MTU{MTU4096, MTU1024, 0}, MTU1024},
		{[]MTU{0, 0}, 0},
		{[]MTU{MTU512}, MTU512},
		{[]MTU{9, MTU2048}, MTU2048},
	} {
		if got := capMTU(c.in...); got != c.want {
			t.Errorf("capMTU(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}
