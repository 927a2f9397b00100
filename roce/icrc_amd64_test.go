package roce

import (
	"encoding/binary"
	"hash/crc32"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"testing"
)

// gf2Poly is a polynomial over GF(2), bit i the coefficient of x^i.
func gf2Poly(v uint64) *big.Int { return new(big.Int).SetUint64(v) }

// gf2DivMod divides a by b, both polynomials over GF(2).
func gf2DivMod(a, b *big.Int) (q, r *big.Int) {
	q, r = new(big.Int), new(big.Int).Set(a)
	db := b.BitLen() - 1
	for d := r.BitLen() - 1; d >= db; d = r.BitLen() - 1 {
		q.SetBit(q, d-db, 1)
		r.Xor(r, new(big.Int).Lsh(b, uint(d-db)))
	}
	return q, r
}

// ieeePoly is the IEEE CRC-32 polynomial with its x^32 term.
const ieeePoly = 0x104c11db7

// xPow returns x^n.
func xPow(n int) *big.Int { return new(big.Int).Lsh(big.NewInt(1), uint(n)) }

// foldK is x^n mod P as icrcFold multiplies by it: bit-reflected over 32
// bits, shifted left by one.
func foldK(n int) uint64 {
	_, r := gf2DivMod(xPow(n), gf2Poly(ieeePoly))
	return uint64(bits.Reverse32(uint32(r.Uint64()))) << 1
}

// reflect33 bit-reflects a polynomial of degree 32.
func reflect33(v uint64) uint64 { return bits.Reverse64(v) >> 31 }

func TestICRCFoldConstants(t *testing.T) {
	mu, _ := gf2DivMod(xPow(64), gf2Poly(ieeePoly))
	want := [len(icrcK)]uint64{
		foldK(512 + 32), foldK(512 - 32),
		foldK(384 + 32), foldK(384 - 32),
		foldK(256 + 32), foldK(256 - 32),
		foldK(128 + 32), foldK(128 - 32),
		foldK(64), 0,
		reflect33(mu.Uint64()), reflect33(ieeePoly),
		0xffffffff, 0,
		foldK(2048 + 32), foldK(2048 - 32),
		foldK(1536 + 32), foldK(1536 - 32),
		foldK(1024 + 32), foldK(1024 - 32),
	}
	for i := range want {
		if icrcK[i] != want[i] {
			t.Errorf("icrcK[%d] = %#x, want %#x", i, icrcK[i], want[i])
		}
	}
}

func requireCLMUL(t *testing.T) {
	t.Helper()
	if !haveCLMUL {
		t.Skip("the CPU lacks PCLMULQDQ or SSE4.1: icrcFold is not used here")
	}
}

// maskedCRC is the reference: hash/crc32 over a copy of p whose first 64
// bytes are ORed with mask.
func maskedCRC(crc uint32, p []byte, mask *[icrcMaskLen]byte) uint32 {
	c := append([]byte(nil), p...)
	for i := range min(len(c), icrcMaskLen) {
		c[i] |= mask[i]
	}
	return crc32.Update(crc, crc32.IEEETable, c)
}

// TestICRCFold checks icrcMasked (icrcFold and its tail) against hash/crc32
// over a masked copy: every length to 600 and random lengths to 9000, the
// IPv4 and IPv6 masks, no mask and all ones, random data, random seeds and
// every alignment of the first byte.
func TestICRCFold(t *testing.T) {
	requireCLMUL(t)
	t.Run("sse", func(t *testing.T) {
		defer func(v bool) { haveVPCLMUL = v }(haveVPCLMUL)
		haveVPCLMUL = false
		testICRCFold(t)
	})
	t.Run("avx512", func(t *testing.T) {
		if !haveVPCLMUL {
			t.Skip("the CPU lacks AVX-512 VPCLMULQDQ")
		}
		testICRCFold(t)
	})
}

func testICRCFold(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000+16)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	var none, ones [icrcMaskLen]byte
	for i := range ones {
		ones[i] = 0xff
	}
	masks := []*[icrcMaskLen]byte{&none, &ones}
	for i := range icrcMasks {
		masks = append(masks, &icrcMasks[i])
	}
	check := func(n, off int, m *[icrcMaskLen]byte) {
		t.Helper()
		p := buf[off : off+n]
		seed := rng.Uint32()
		if got, want := icrcMasked(seed, p, m), maskedCRC(seed, p, m); got != want {
			t.Fatalf("len %d, offset %d, mask %x, seed %#x: %#08x, want %#08x", n, off, m[:], seed, got, want)
		}
		if n%16 == 0 {
			if got, want := icrcFold(seed, p, m), maskedCRC(seed, p, m); got != want {
				t.Fatalf("icrcFold: len %d, offset %d, mask %x, seed %#x: %#08x, want %#08x", n, off, m[:], seed, got, want)
			}
		}
	}
	for n := range 601 {
		for off := range 16 {
			for _, m := range masks {
				check(n, off, m)
			}
		}
	}
	for range 2000 {
		check(rng.IntN(9001), rng.IntN(16), masks[rng.IntN(len(masks))])
	}
}

// randomPacket returns a RoCEv2-shaped packet of random bytes: an IP header
// of ipLen bytes (IPv6 if ipLen is 40 and v6) with consistent version,
// length and protocol, n covered bytes in all, and a trailer.
func randomPacket(rng *rand.Rand, v6 bool, ipLen, n int) []byte {
	pkt := make([]byte, n+ICRCLen)
	for i := range pkt {
		pkt[i] = byte(rng.Uint32())
	}
	if v6 {
		pkt[0] = 0x60 | pkt[0]&0x0f
		binary.BigEndian.PutUint16(pkt[4:], uint16(n+ICRCLen-ipv6Hdr))
		pkt[6] = 17
	} else {
		pkt[0] = 0x40 | byte(ipLen/4)
		binary.BigEndian.PutUint16(pkt[2:], uint16(n+ICRCLen))
		pkt[9] = 17
	}
	return pkt
}

// TestICRCFoldPackets compares the folding path with the portable one on
// random RoCEv2-shaped packets: IPv6, and IPv4 with every header length
// (those past IHL 12 take the portable path either way).
func TestICRCFoldPackets(t *testing.T) {
	requireCLMUL(t)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		ipLen := ipv6Hdr
		v6 := rng.IntN(3) == 0
		if !v6 {
			ipLen = 4 * (5 + rng.IntN(11))
		}
		n := ipLen + udpHdr + BTHLen + rng.IntN(4200)
		pkt := randomPacket(rng, v6, ipLen, n)
		got, err := ICRC(pkt)
		if err != nil {
			t.Fatal(err)
		}
		if want := icrcSplit(pkt[:ipLen+udpHdr], pkt[ipLen+udpHdr:n]); got != want {
			t.Fatalf("v6=%v, IP header %d, %d bytes: ICRC %#08x, portable path %#08x", v6, ipLen, n, got, want)
		}
	}
}

// FuzzICRC compares the folding path, and icrcSplit's (masked headers,
// then the rest folded), with the masked headers and hash/crc32 on every
// packet ICRC accepts.
func FuzzICRC(f *testing.F) {
	if !haveCLMUL {
		f.Skip("the CPU lacks PCLMULQDQ or SSE4.1: icrcFold is not used here")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 15, 16, 100, 300, 1100} {
		f.Add(randomPacket(rng, false, ipv4MinHdr, ipv4MinHdr+udpHdr+BTHLen+n))
		f.Add(randomPacket(rng, true, ipv6Hdr, ipv6Hdr+udpHdr+BTHLen+n))
	}
	f.Add(randomPacket(rng, false, 48, 48+udpHdr+BTHLen+40))
	f.Fuzz(func(t *testing.T, pkt []byte) {
		got, err := ICRC(pkt)
		if err != nil {
			return
		}
		covered, ipLen, _ := icrcCovered(pkt)
		l4 := covered[ipLen+udpHdr:]
		want := crc32.Update(icrcHeaders(covered[:ipLen+udpHdr], l4), crc32.IEEETable, l4[BTHLen:])
		if got != want {
			t.Errorf("ICRC %#08x, the masked headers and hash/crc32 %#08x", got, want)
		}
		if split := icrcSplit(covered[:ipLen+udpHdr], l4); split != want {
			t.Errorf("icrcSplit %#08x, the masked headers and hash/crc32 %#08x", split, want)
		}
	})
}

// TestICRCPortablePath runs the samples' ICRC with icrcFold turned off.
func TestICRCPortablePath(t *testing.T) {
	requireCLMUL(t)
	rng := rand.New(rand.NewPCG(5, 6))
	pkt := make([]byte, 1500)
	for i := range pkt {
		pkt[i] = byte(rng.Uint32())
	}
	pkt[0], pkt[9] = 0x45, 17
	binary.BigEndian.PutUint16(pkt[2:], uint16(len(pkt)))
	want, err := ICRC(pkt)
	if err != nil {
		t.Fatal(err)
	}
	haveCLMUL = false
	defer func() { haveCLMUL = true }()
	if got, _ := ICRC(pkt); got != want {
		t.Errorf("portable ICRC %#08x, folding %#08x", got, want)
	}
}
