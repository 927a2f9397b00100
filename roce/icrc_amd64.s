#include "textflag.h"

// func icrcFold(crc uint32, p []byte, mask *[64]byte) uint32
//
// The CRC is reflected: bit i of a 16-byte block loaded into a register is
// the coefficient of x^(127-i), counted from the block's end. Folding a
// block A n bits on replaces it with a value congruent to A*x^n mod P; its
// first 64 bits (the low half) are multiplied by the constant's low half,
// the second 64 bits by its high half (see icrcK).
//
// Registers: SI p, CX bytes left, DX mask; X0-X3 the four lanes (X0 alone
// once they are combined), X4-X7 and X12-X13 scratch, X8-X11 the fold
// constants for 512, 384, 256 and 128 bits. Lengths under 64 take "short",
// 256 and more "wide" where haveVPCLMUL; both finish in the SSE code.
TEXT ·icrcFold(SB), NOSPLIT, $0-44
	MOVL  crc+0(FP), AX
	MOVQ  p_base+8(FP), SI
	MOVQ  p_len+16(FP), CX
	MOVQ  mask+32(FP), DX
	NOTL  AX
	MOVQ  AX, X12                // the CRC state, XORed into the first 32 bits
	MOVOU ·icrcK+48(SB), X11
	CMPQ  CX, $64
	JB    short
	CMPQ  CX, $256
	JB    sse
	CMPB  ·haveVPCLMUL(SB), $1
	JEQ   wide

sse:
	// The first 64 bytes, masked, in four lanes.
	MOVOU (SI), X0
	MOVOU 16(SI), X1
	MOVOU 32(SI), X2
	MOVOU 48(SI), X3
	MOVOU (DX), X4
	MOVOU 16(DX), X5
	MOVOU 32(DX), X6
	MOVOU 48(DX), X7
	POR   X4, X0
	POR   X5, X1
	POR   X6, X2
	POR   X7, X3
	PXOR  X12, X0
	ADDQ  $64, SI
	SUBQ  $64, CX
	CMPQ  CX, $64
	JB    combine
	MOVOU ·icrcK+0(SB), X8

loop64:
	// Each lane moves 512 bits on and takes the next block.
	MOVOU     (SI), X9
	MOVOU     16(SI), X10
	MOVOU     32(SI), X12
	MOVOU     48(SI), X13
	MOVOA     X0, X4
	MOVOA     X1, X5
	MOVOA     X2, X6
	MOVOA     X3, X7
	PCLMULQDQ $0x00, X8, X0
	PCLMULQDQ $0x00, X8, X1
	PCLMULQDQ $0x00, X8, X2
	PCLMULQDQ $0x00, X8, X3
	PCLMULQDQ $0x11, X8, X4
	PCLMULQDQ $0x11, X8, X5
	PCLMULQDQ $0x11, X8, X6
	PCLMULQDQ $0x11, X8, X7
	PXOR      X9, X0
	PXOR      X10, X1
	PXOR      X12, X2
	PXOR      X13, X3
	PXOR      X4, X0
	PXOR      X5, X1
	PXOR      X6, X2
	PXOR      X7, X3
	ADDQ      $64, SI
	SUBQ      $64, CX
	CMPQ      CX, $64
	JAE       loop64

combine:
	// Lanes 0, 1 and 2 move 384, 256 and 128 bits on, in parallel, onto
	// lane 3.
	MOVOU     ·icrcK+16(SB), X9
	MOVOU     ·icrcK+32(SB), X10
	MOVOA     X0, X4
	MOVOA     X1, X5
	MOVOA     X2, X6
	PCLMULQDQ $0x00, X9, X0
	PCLMULQDQ $0x11, X9, X4
	PCLMULQDQ $0x00, X10, X1
	PCLMULQDQ $0x11, X10, X5
	PCLMULQDQ $0x00, X11, X2
	PCLMULQDQ $0x11, X11, X6
	PXOR      X4, X0
	PXOR      X5, X1
	PXOR      X6, X2
	PXOR      X3, X0
	PXOR      X2, X1
	PXOR      X1, X0
	JMP       tail16

short:
	// 16 to 48 bytes: one lane, every block masked.
	CMPQ      CX, $16
	JB        empty
	MOVOU     (SI), X0
	MOVOU     (DX), X4
	POR       X4, X0
	PXOR      X12, X0
	CMPQ      CX, $32
	JB        reduce
	MOVOU     16(SI), X5
	MOVOU     16(DX), X6
	POR       X6, X5
	MOVOA     X0, X4
	PCLMULQDQ $0x00, X11, X0
	PCLMULQDQ $0x11, X11, X4
	PXOR      X5, X0
	PXOR      X4, X0
	CMPQ      CX, $48
	JB        reduce
	MOVOU     32(SI), X5
	MOVOU     32(DX), X6
	POR       X6, X5
	MOVOA     X0, X4
	PCLMULQDQ $0x00, X11, X0
	PCLMULQDQ $0x11, X11, X4
	PXOR      X5, X0
	PXOR      X4, X0
	JMP       reduce

loop16:
	MOVOU     (SI), X5
	MOVOA     X0, X4
	PCLMULQDQ $0x00, X11, X0
	PCLMULQDQ $0x11, X11, X4
	PXOR      X5, X0
	PXOR      X4, X0
	ADDQ      $16, SI
	SUBQ      $16, CX

tail16:
	CMPQ CX, $16
	JAE  loop16

reduce:
	// X0 holds A, 128 bits; the CRC state is A*x^32 mod P. First the
	// first 64 bits times x^96 mod P, plus the second 64: 96 bits.
	MOVOA     X0, X4
	PSRLDQ    $8, X4
	PCLMULQDQ $0x10, X11, X0
	PXOR      X4, X0

	// The first 32 bits times x^64 mod P, plus the other 64: 64 bits.
	MOVOU     ·icrcK+96(SB), X6
	MOVOU     ·icrcK+64(SB), X7
	MOVOA     X0, X4
	PSRLDQ    $4, X4
	PAND      X6, X0
	PCLMULQDQ $0x00, X7, X0
	PXOR      X4, X0

	// Barrett: q = first 32 bits times floor(x^64 / P), its first 32
	// bits; the remainder is the last 32 bits of the value plus q*P.
	MOVOU     ·icrcK+80(SB), X7
	MOVOA     X0, X4
	PAND      X6, X0
	PCLMULQDQ $0x00, X7, X0
	PAND      X6, X0
	PCLMULQDQ $0x10, X7, X0
	PXOR      X4, X0
	PEXTRD    $1, X0, AX
	NOTL      AX
	MOVL      AX, ret+40(FP)
	RET

wide:
	// Sixteen lanes in Z0-Z3 over 256-byte chunks; the first 64 bytes
	// masked. Z8-Z10 hold fold constants, Z4-Z7 and Z12-Z13 are scratch;
	// X11 survives for the SSE code that finishes.
	VMOVQ           AX, X12
	VMOVDQU64       (SI), Z0
	VMOVDQU64       (DX), Z4
	VPORQ           Z4, Z0, Z0
	VPXORQ          Z12, Z0, Z0
	VMOVDQU64       64(SI), Z1
	VMOVDQU64       128(SI), Z2
	VMOVDQU64       192(SI), Z3
	ADDQ            $256, SI
	SUBQ            $256, CX
	CMPQ            CX, $256
	JB              wide4
	VBROADCASTI32X4 ·icrcK+112(SB), Z8

wide256:
	VMOVDQU64  (SI), Z4
	VMOVDQU64  64(SI), Z5
	VMOVDQU64  128(SI), Z6
	VMOVDQU64  192(SI), Z7
	VPCLMULQDQ $0x00, Z8, Z0, Z9
	VPCLMULQDQ $0x00, Z8, Z1, Z10
	VPCLMULQDQ $0x00, Z8, Z2, Z12
	VPCLMULQDQ $0x00, Z8, Z3, Z13
	VPCLMULQDQ $0x11, Z8, Z0, Z0
	VPCLMULQDQ $0x11, Z8, Z1, Z1
	VPCLMULQDQ $0x11, Z8, Z2, Z2
	VPCLMULQDQ $0x11, Z8, Z3, Z3
	VPTERNLOGD $0x96, Z9, Z4, Z0
	VPTERNLOGD $0x96, Z10, Z5, Z1
	VPTERNLOGD $0x96, Z12, Z6, Z2
	VPTERNLOGD $0x96, Z13, Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	CMPQ       CX, $256
	JAE        wide256

wide4:
	// Z0, Z1 and Z2 move 1536, 1024 and 512 bits on, onto Z3.
	VBROADCASTI32X4 ·icrcK+128(SB), Z8
	VBROADCASTI32X4 ·icrcK+144(SB), Z9
	VBROADCASTI32X4 ·icrcK+0(SB), Z10
	VPCLMULQDQ      $0x00, Z8, Z0, Z4
	VPCLMULQDQ      $0x11, Z8, Z0, Z0
	VPCLMULQDQ      $0x00, Z9, Z1, Z5
	VPCLMULQDQ      $0x11, Z9, Z1, Z1
	VPCLMULQDQ      $0x00, Z10, Z2, Z6
	VPCLMULQDQ      $0x11, Z10, Z2, Z2
	VPTERNLOGD      $0x96, Z4, Z0, Z3
	VPTERNLOGD      $0x96, Z5, Z1, Z3
	VPTERNLOGD      $0x96, Z6, Z2, Z3
	CMPQ            CX, $64
	JB              wide1

wide64:
	VMOVDQU64  (SI), Z4
	VPCLMULQDQ $0x00, Z10, Z3, Z5
	VPCLMULQDQ $0x11, Z10, Z3, Z3
	VPTERNLOGD $0x96, Z5, Z4, Z3
	ADDQ       $64, SI
	SUBQ       $64, CX
	CMPQ       CX, $64
	JAE        wide64

wide1:
	// Back to four 128-bit lanes in X0-X3 for the SSE code.
	VEXTRACTI32X4 $1, Z3, X1
	VEXTRACTI32X4 $2, Z3, X2
	VMOVDQA       X3, X0
	VEXTRACTI32X4 $3, Z3, X3
	VZEROUPPER
	JMP           combine

empty:
	NOTL AX
	MOVL AX, ret+40(FP)
	RET
