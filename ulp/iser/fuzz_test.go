package iser_test

import (
	"testing"

	"github.com/rbridge/rbridge/ulp/iser"
)

// FuzzParsePDU: never a panic; what ParsePDU takes lies within b, and its
// views read what the bytes hold.
func FuzzParsePDU(f *testing.F) {
	c := iser.SCSICommandFields{Final: true, Read: true, Write: true, ITT: 7, EDTL: 4096}
	for _, b := range [][]byte{readCommand(), writeCommand(), scsiResponse(),
		iser.AppendPDU(nil, &iser.HeaderFields{Opcode: iser.OpControl, WSV: true, RSV: true}, c.BHS(), iser.AppendReadLengthAHS(nil, 8192), nil), nil} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, n, err := iser.ParsePDU(b)
		if err != nil {
			if n != 0 {
				t.Fatalf("n %d with %v", n, err)
			}
			return
		}
		if n > len(b) || n != p.DataOffset() || n != iser.HeadersLen+p.BHS.TotalAHSLength() {
			t.Fatalf("n %d of %d bytes, data at %d", n, len(b), p.DataOffset())
		}
		if _ = p.CheckLen(len(b)); p.Header.Opcode() != iser.OpControl {
			t.Fatalf("a PDU under %v", p.Header.Opcode())
		}
		for len(b) > 0 {
			_, _, k, err := iser.NextKey(b)
			if err != nil {
				break
			}
			b = b[k:]
		}
	})
}
