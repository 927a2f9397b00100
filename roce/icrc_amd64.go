package roce

import "golang.org/x/sys/cpu"

// haveCLMUL says whether icrcFold, which needs PCLMULQDQ and SSE4.1, runs
// here. Tests turn it off to exercise the portable path.
var haveCLMUL = cpu.X86.HasPCLMULQDQ && cpu.X86.HasSSE41

// haveVPCLMUL says whether icrcFold may fold four 128-bit lanes per
// instruction with AVX-512 VPCLMULQDQ, for 256 bytes or more. icrc_amd64.s
// reads it.
var haveVPCLMUL = haveCLMUL && cpu.X86.HasAVX512F && cpu.X86.HasAVX512VPCLMULQDQ

// icrcFold continues crc (in hash/crc32's convention) over p, whose length
// must be a non-zero multiple of 16, with p's first 64 bytes ORed with mask
// as they are loaded: crc32.Update(crc, crc32.IEEETable, p|mask) without
// writing p. It folds 128-bit blocks with carry-less multiplication (Gopal
// et al., "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
// Instruction", Intel, 2009), four lanes over 64-byte chunks (sixteen lanes
// in four 512-bit registers over 256-byte chunks where haveVPCLMUL), and
// reduces with Barrett. It is in icrc_amd64.s.
//
//go:noescape
func icrcFold(crc uint32, p []byte, mask *[icrcMaskLen]byte) uint32

// icrcK holds icrcFold's constants for the reflected IEEE polynomial
// P = 0x104c11db7, in pairs loaded as one 128-bit register. For a fold over
// n bits the low half multiplies the first 64 bits of a block and the high
// half the second: x^(n+32) mod P and x^(n-32) mod P, bit-reflected over 32
// bits and shifted left by one (the reflected carry-less product is one bit
// short). TestICRCFoldConstants derives every value.
var icrcK = [20]uint64{
	0x154442bd4, 0x1c6e41596, // fold by 512 bits: x^544, x^480
	0x03db1ecdc, 0x174359406, // by 384: x^416, x^352
	0x0f1da05aa, 0x15a546366, // by 256: x^288, x^224
	0x1751997d0, 0x0ccaa009e, // by 128: x^160, x^96
	0x163cd6124, 0, // x^64 mod P, for 96 to 64 bits
	0x1f7011641, 0x1db710641, // Barrett: floor(x^64 / P), P; reflected over 33 bits
	0xffffffff, 0, // the low 32 bits of a register
	0x11542778a, 0x1322d1430, // by 2048: x^2080, x^2016
	0x1821d8bc0, 0x12e958ac4, // by 1536: x^1568, x^1504
	0x1e88ef372, 0x14a7fe880, // by 1024: x^1056, x^992
}
