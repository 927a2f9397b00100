package rpcrdma_test

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
)

// words builds bytes from XDR words written as hex ("0x1" or "1"); a
// word of 16 hex digits is a hyper (two words).
func words(t testing.TB, s string) []byte {
	t.Helper()
	var b []byte
	for _, w := range strings.Fields(s) {
		w = strings.TrimPrefix(w, "0x")
		v, err := strconv.ParseUint(w, 16, 64)
		if err != nil {
			t.Fatalf("word %q: %v", w, err)
		}
		if len(w) > 8 {
			b = binary.BigEndian.AppendUint64(b, v)
		} else {
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		}
	}
	return b
}
