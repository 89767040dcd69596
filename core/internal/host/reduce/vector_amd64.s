#include "textflag.h"

// AVX2 (and F16C) reduction kernels: d = a op b over n bytes, n a
// positive multiple of 64, pointers of any alignment. d may be a or b
// exactly: every block is loaded before it is stored. a is always the
// first source of the arithmetic instruction, as in the scalar kernels,
// so that two NaN operands give a's (quieted).

// ARGS loads a kernel's arguments; AX is the offset into the buffers.
#define ARGS \
	MOVQ	d+0(FP), DI; \
	MOVQ	a+8(FP), SI; \
	MOVQ	b+16(FP), DX; \
	MOVQ	n+24(FP), CX; \
	XORQ	AX, AX

// NEXT ends a loop over 64-byte blocks: on to the next, or return.
#define NEXT \
	ADDQ	$64, AX; \
	CMPQ	AX, CX; \
	JB	loop; \
	VZEROUPPER; \
	RET

// LOOP2 is a loop whose every 64-byte block is STEP(P, 0) and STEP(P, 32).
#define LOOP2(STEP, P) \
loop: \
	STEP(P, 0); \
	STEP(P, 32); \
	NEXT

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL	leaf+0(FP), AX
	MOVL	sub+4(FP), CX
	CPUID
	MOVL	AX, eax+8(FP)
	MOVL	BX, ebx+12(FP)
	MOVL	CX, ecx+16(FP)
	MOVL	DX, edx+20(FP)
	RET

// func xcr0() uint32
TEXT ·xcr0(SB), NOSPLIT, $0-4
	MOVL	$0, CX
	XGETBV
	MOVL	AX, ret+0(FP)
	RET

// ELEMENTWISE is the body of a kernel whose instruction OP combines
// whole vectors: 64 bytes an iteration, two registers of each source.
#define ELEMENTWISE(OP) \
	ARGS; \
loop: \
	VMOVDQU	(SI)(AX*1), Y0; \
	VMOVDQU	32(SI)(AX*1), Y1; \
	OP	(DX)(AX*1), Y0, Y0; \
	OP	32(DX)(AX*1), Y1, Y1; \
	VMOVDQU	Y0, (DI)(AX*1); \
	VMOVDQU	Y1, 32(DI)(AX*1); \
	NEXT

// func addF32(d, a, b *byte, n uintptr)
TEXT ·addF32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VADDPS)

// func mulF32(d, a, b *byte, n uintptr)
TEXT ·mulF32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VMULPS)

// func addF64(d, a, b *byte, n uintptr)
TEXT ·addF64(SB), NOSPLIT, $0-32
	ELEMENTWISE(VADDPD)

// func mulF64(d, a, b *byte, n uintptr)
TEXT ·mulF64(SB), NOSPLIT, $0-32
	ELEMENTWISE(VMULPD)

// func addI8(d, a, b *byte, n uintptr)
TEXT ·addI8(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPADDB)

// func addI32(d, a, b *byte, n uintptr)
TEXT ·addI32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPADDD)

// func mulI32(d, a, b *byte, n uintptr)
TEXT ·mulI32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMULLD)

// func addI64(d, a, b *byte, n uintptr)
TEXT ·addI64(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPADDQ)

// func maxS8(d, a, b *byte, n uintptr)
TEXT ·maxS8(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMAXSB)

// func minS8(d, a, b *byte, n uintptr)
TEXT ·minS8(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMINSB)

// func maxU8(d, a, b *byte, n uintptr)
TEXT ·maxU8(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMAXUB)

// func minU8(d, a, b *byte, n uintptr)
TEXT ·minU8(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMINUB)

// func maxS32(d, a, b *byte, n uintptr)
TEXT ·maxS32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMAXSD)

// func minS32(d, a, b *byte, n uintptr)
TEXT ·minS32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMINSD)

// func maxU32(d, a, b *byte, n uintptr)
TEXT ·maxU32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMAXUD)

// func minU32(d, a, b *byte, n uintptr)
TEXT ·minU32(SB), NOSPLIT, $0-32
	ELEMENTWISE(VPMINUD)

// Float max and min by the package's rule (reduce.go): y replaces x
// where y is beyond x or x is NaN; equal operands combine their bits
// (AND for max, OR for min), so that max(-0, +0) = +0 and min = -0.
// BEYOND is the comparison predicate of y against x: 0x1e (GT_OQ) for
// max, 0x11 (LT_OQ) for min.
#define FMINMAX(CMP, BLEND, BITS, BEYOND, X, Y, T, U) \
	CMP	$BEYOND, X, Y, T; \
	CMP	$3, X, X, U; \
	VORPD	U, T, T; \
	CMP	$0, Y, X, U; \
	BLEND	T, Y, X, T; \
	BITS	Y, X, Y; \
	BLEND	U, Y, T, X

#define FMINMAXBODY(CMP, BLEND, BITS, BEYOND) \
	ARGS; \
loop: \
	VMOVDQU	(SI)(AX*1), Y0; \
	VMOVDQU	(DX)(AX*1), Y1; \
	VMOVDQU	32(SI)(AX*1), Y4; \
	VMOVDQU	32(DX)(AX*1), Y5; \
	FMINMAX(CMP, BLEND, BITS, BEYOND, Y0, Y1, Y2, Y3); \
	FMINMAX(CMP, BLEND, BITS, BEYOND, Y4, Y5, Y6, Y7); \
	VMOVDQU	Y0, (DI)(AX*1); \
	VMOVDQU	Y4, 32(DI)(AX*1); \
	NEXT

// func maxF32(d, a, b *byte, n uintptr)
TEXT ·maxF32(SB), NOSPLIT, $0-32
	FMINMAXBODY(VCMPPS, VBLENDVPS, VANDPS, 0x1e)

// func minF32(d, a, b *byte, n uintptr)
TEXT ·minF32(SB), NOSPLIT, $0-32
	FMINMAXBODY(VCMPPS, VBLENDVPS, VORPS, 0x11)

// func maxF64(d, a, b *byte, n uintptr)
TEXT ·maxF64(SB), NOSPLIT, $0-32
	FMINMAXBODY(VCMPPD, VBLENDVPD, VANDPD, 0x1e)

// func minF64(d, a, b *byte, n uintptr)
TEXT ·minF64(SB), NOSPLIT, $0-32
	FMINMAXBODY(VCMPPD, VBLENDVPD, VORPD, 0x11)

// float16 through F16C: widen 8 elements to float32, combine, round
// back to nearest even (immediate 0: not MXCSR's mode).
#define HALF8(OP, OFF) \
	VCVTPH2PS	OFF(SI)(AX*1), Y0; \
	VCVTPH2PS	OFF(DX)(AX*1), Y1; \
	OP	Y1, Y0, Y0; \
	VCVTPS2PH	$0, Y0, OFF(DI)(AX*1)

#define HALF16(OP, OFF) \
	HALF8(OP, OFF); \
	HALF8(OP, OFF+16)

#define F16BODY(OP) \
	ARGS; \
	LOOP2(HALF16, OP)

// func addF16(d, a, b *byte, n uintptr)
TEXT ·addF16(SB), NOSPLIT, $0-32
	F16BODY(VADDPS)

// func mulF16(d, a, b *byte, n uintptr)
TEXT ·mulF16(SB), NOSPLIT, $0-32
	F16BODY(VMULPS)

DATA bf16Round<>+0(SB)/4, $0x7fff
GLOBL bf16Round<>(SB), RODATA|NOPTR, $4
DATA bf16One<>+0(SB)/4, $1
GLOBL bf16One<>(SB), RODATA|NOPTR, $4
DATA bf16Quiet<>+0(SB)/4, $0x40
GLOBL bf16Quiet<>(SB), RODATA|NOPTR, $4

// BF16CONSTS loads BF16ROUND's constants, and zero in Y15 for widening.
#define BF16CONSTS \
	VPXOR	Y15, Y15, Y15; \
	VPBROADCASTD	bf16Round<>(SB), Y14; \
	VPBROADCASTD	bf16One<>(SB), Y13; \
	VPBROADCASTD	bf16Quiet<>(SB), Y12

// BF16ROUND rounds the float32s of X to bfloat16 in the low half of
// each lane, as F32ToBF16 (half.go): nearest even, a NaN keeps its top
// bits and is quieted. T, U, V are scratch; Y12-Y14 hold the constants.
#define BF16ROUND(X, T, U, V) \
	VCMPPS	$3, X, X, T; \
	VPSRLD	$16, X, U; \
	VPOR	Y12, U, V; \
	VPAND	Y13, U, U; \
	VPADDD	Y14, U, U; \
	VPADDD	X, U, U; \
	VPSRLD	$16, U, U; \
	VBLENDVPS	T, V, U, X

// BF16X16 combines 16 bfloat16 elements at OFF: the low and high words
// of each 128-bit lane widen apart (bits in the high half of a float32)
// and pack back in the same order.
#define BF16X16(OP, OFF) \
	VMOVDQU	OFF(SI)(AX*1), Y0; \
	VMOVDQU	OFF(DX)(AX*1), Y1; \
	VPUNPCKLWD	Y0, Y15, Y2; \
	VPUNPCKHWD	Y0, Y15, Y3; \
	VPUNPCKLWD	Y1, Y15, Y4; \
	VPUNPCKHWD	Y1, Y15, Y5; \
	OP	Y4, Y2, Y2; \
	OP	Y5, Y3, Y3; \
	BF16ROUND(Y2, Y6, Y7, Y8); \
	BF16ROUND(Y3, Y6, Y7, Y8); \
	VPACKUSDW	Y3, Y2, Y2; \
	VMOVDQU	Y2, OFF(DI)(AX*1)

#define BF16BODY(OP) \
	ARGS; \
	BF16CONSTS; \
	LOOP2(BF16X16, OP)

// func addBF16(d, a, b *byte, n uintptr)
TEXT ·addBF16(SB), NOSPLIT, $0-32
	BF16BODY(VADDPS)

// func mulBF16(d, a, b *byte, n uintptr)
TEXT ·mulBF16(SB), NOSPLIT, $0-32
	BF16BODY(VMULPS)

// Scale's division, in place over n bytes (a positive multiple of 64):
// a true division by m, not a product with its reciprocal, so that the
// bits are the scalar code's.

// DIVFLOATS is the body of divF32 and divF64: MOV moves and DIV divides
// vectors of the type; m is in Y15.
#define DIVFLOATS(MOV, DIV) \
	XORQ	AX, AX; \
loop: \
	MOV	(DI)(AX*1), Y0; \
	MOV	32(DI)(AX*1), Y1; \
	DIV	Y15, Y0, Y0; \
	DIV	Y15, Y1, Y1; \
	MOV	Y0, (DI)(AX*1); \
	MOV	Y1, 32(DI)(AX*1); \
	NEXT

// func divF32(d *byte, n uintptr, m float32)
TEXT ·divF32(SB), NOSPLIT, $0-20
	MOVQ	d+0(FP), DI
	MOVQ	n+8(FP), CX
	VBROADCASTSS	m+16(FP), Y15
	DIVFLOATS(VMOVUPS, VDIVPS)

// func divF64(d *byte, n uintptr, m float64)
TEXT ·divF64(SB), NOSPLIT, $0-24
	MOVQ	d+0(FP), DI
	MOVQ	n+8(FP), CX
	VBROADCASTSD	m+16(FP), Y15
	DIVFLOATS(VMOVUPD, VDIVPD)

// HALFDIV8 divides 8 float16 elements at OFF by Y15.
#define HALFDIV8(OFF) \
	VCVTPH2PS	OFF(DI)(AX*1), Y0; \
	VDIVPS	Y15, Y0, Y0; \
	VCVTPS2PH	$0, Y0, OFF(DI)(AX*1)

// func divF16(d *byte, n uintptr, m float32)
TEXT ·divF16(SB), NOSPLIT, $0-20
	MOVQ	d+0(FP), DI
	MOVQ	n+8(FP), CX
	VBROADCASTSS	m+16(FP), Y15
	XORQ	AX, AX
loop:
	HALFDIV8(0)
	HALFDIV8(16)
	HALFDIV8(32)
	HALFDIV8(48)
	NEXT

// BF16DIV16 divides 16 bfloat16 elements at OFF by Y11 (BF16X16's
// widening and rounding).
#define BF16DIV16(OFF) \
	VMOVDQU	OFF(DI)(AX*1), Y0; \
	VPUNPCKLWD	Y0, Y15, Y2; \
	VPUNPCKHWD	Y0, Y15, Y3; \
	VDIVPS	Y11, Y2, Y2; \
	VDIVPS	Y11, Y3, Y3; \
	BF16ROUND(Y2, Y6, Y7, Y8); \
	BF16ROUND(Y3, Y6, Y7, Y8); \
	VPACKUSDW	Y3, Y2, Y2; \
	VMOVDQU	Y2, OFF(DI)(AX*1)

// func divBF16(d *byte, n uintptr, m float32)
TEXT ·divBF16(SB), NOSPLIT, $0-20
	MOVQ	d+0(FP), DI
	MOVQ	n+8(FP), CX
	VBROADCASTSS	m+16(FP), Y11
	XORQ	AX, AX
	BF16CONSTS
loop:
	BF16DIV16(0)
	BF16DIV16(32)
	NEXT

// Max and min of the narrow formats, as maxNarrow and minNarrow
// (reduce.go): y replaces x where x is NaN, or y is not and orders
// beyond x. Order keys are signed here: h ^ ((h>>15) & 0x7fff) orders
// as key16 does unsigned. Y9 holds the format's Inf, Y10 0x7fff.
#define SKEY(H, K) \
	VPSRAW	$15, H, K; \
	VPAND	Y10, K, K; \
	VPXOR	H, K, K

// NARROW16 combines 16 elements at OFF; BEYOND(KX, KY, G) sets G where
// y's key is beyond x's.
#define NARROW16(BEYOND, OFF) \
	VMOVDQU	OFF(SI)(AX*1), Y0; \
	VMOVDQU	OFF(DX)(AX*1), Y1; \
	VPAND	Y10, Y0, Y2; \
	VPCMPGTW	Y9, Y2, Y2; \
	VPAND	Y10, Y1, Y3; \
	VPCMPGTW	Y9, Y3, Y3; \
	SKEY(Y0, Y4); \
	SKEY(Y1, Y5); \
	BEYOND(Y4, Y5, Y6); \
	VPANDN	Y6, Y3, Y6; \
	VPOR	Y2, Y6, Y6; \
	VPBLENDVB	Y6, Y1, Y0, Y0; \
	VMOVDQU	Y0, OFF(DI)(AX*1)

#define ABOVE(KX, KY, G) VPCMPGTW KX, KY, G
#define BELOW(KX, KY, G) VPCMPGTW KY, KX, G

#define NARROWBODY(BEYOND, INF) \
	ARGS; \
	VPBROADCASTW	INF(SB), Y9; \
	VPBROADCASTW	narrowMag<>(SB), Y10; \
	LOOP2(NARROW16, BEYOND)

DATA narrowMag<>+0(SB)/2, $0x7fff
GLOBL narrowMag<>(SB), RODATA|NOPTR, $2
DATA f16Inf<>+0(SB)/2, $0x7c00
GLOBL f16Inf<>(SB), RODATA|NOPTR, $2
DATA bf16Inf<>+0(SB)/2, $0x7f80
GLOBL bf16Inf<>(SB), RODATA|NOPTR, $2

// func maxF16(d, a, b *byte, n uintptr)
TEXT ·maxF16(SB), NOSPLIT, $0-32
	NARROWBODY(ABOVE, f16Inf<>)

// func minF16(d, a, b *byte, n uintptr)
TEXT ·minF16(SB), NOSPLIT, $0-32
	NARROWBODY(BELOW, f16Inf<>)

// func maxBF16(d, a, b *byte, n uintptr)
TEXT ·maxBF16(SB), NOSPLIT, $0-32
	NARROWBODY(ABOVE, bf16Inf<>)

// func minBF16(d, a, b *byte, n uintptr)
TEXT ·minBF16(SB), NOSPLIT, $0-32
	NARROWBODY(BELOW, bf16Inf<>)

// 64-bit integer max and min (AVX2 compares them signed only: unsigned
// keys flip the sign bit, Y15). QMAX and QMIN set M where b replaces a.
#define QSIGNED(X, K) VMOVDQU X, K
#define QUNSIGNED(X, K) VPXOR Y15, X, K
#define QMAX(KA, KB, M) VPCMPGTQ KA, KB, M
#define QMIN(KA, KB, M) VPCMPGTQ KB, KA, M

#define Q4(SEL, KEY, OFF) \
	VMOVDQU	OFF(SI)(AX*1), Y0; \
	VMOVDQU	OFF(DX)(AX*1), Y1; \
	KEY(Y0, Y2); \
	KEY(Y1, Y3); \
	SEL(Y2, Y3, Y4); \
	VPBLENDVB	Y4, Y1, Y0, Y0; \
	VMOVDQU	Y0, OFF(DI)(AX*1)

#define QBODY(SEL, KEY) \
	ARGS; \
	VPBROADCASTQ	qSign<>(SB), Y15; \
loop: \
	Q4(SEL, KEY, 0); \
	Q4(SEL, KEY, 32); \
	NEXT

DATA qSign<>+0(SB)/8, $0x8000000000000000
GLOBL qSign<>(SB), RODATA|NOPTR, $8

// func maxS64(d, a, b *byte, n uintptr)
TEXT ·maxS64(SB), NOSPLIT, $0-32
	QBODY(QMAX, QSIGNED)

// func minS64(d, a, b *byte, n uintptr)
TEXT ·minS64(SB), NOSPLIT, $0-32
	QBODY(QMIN, QSIGNED)

// func maxU64(d, a, b *byte, n uintptr)
TEXT ·maxU64(SB), NOSPLIT, $0-32
	QBODY(QMAX, QUNSIGNED)

// func minU64(d, a, b *byte, n uintptr)
TEXT ·minU64(SB), NOSPLIT, $0-32
	QBODY(QMIN, QUNSIGNED)
