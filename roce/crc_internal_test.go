package roce

import (
	"hash/crc32"
	"testing"
)

func TestCRCUpdateMatchesStdlib(t *testing.T) {
	p := make([]byte, 300)
	for i := range p {
		p[i] = byte(i * 31)
	}
	for n := range len(p) {
		for _, seed := range []uint32{0, icrcSeed, 0xffffffff} {
			if got, want := crcUpdate(seed, p[:n]), crc32.Update(seed, crc32.IEEETable, p[:n]); got != want {
				t.Fatalf("crcUpdate(%#x, %d bytes) = %#x, want %#x", seed, n, got, want)
			}
		}
	}
}

func BenchmarkCRCUpdateHeader(b *testing.B) {
	var buf [40]byte
	b.SetBytes(40)
	for b.Loop() {
		crcUpdate(icrcSeed, buf[:])
	}
}
