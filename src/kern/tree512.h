/*
 * tree512.h - the fixed-order horizontal sums of the AVX-512 float kernels (kern_avx512.c;
 * attn_avx512.c's scores use the first two levels): transposing trees that reduce 16 (or 8)
 * accumulators of 16 lanes each to one vector of their 16 (8) sums, 45 (24) instructions
 * instead of ~9 per accumulator for separate horizontal sums. Include only from files compiled
 * with the AVX-512 flags (after kern/avx512_emu.h when emulating).
 *
 * Every sum, whichever tree and lane it comes out of, is added in one order:
 *   (((l0+l2)+(l1+l3)) + ((l4+l6)+(l5+l7))) + (((l8+l10)+(l9+l11)) + ((l12+l14)+(l13+l15)))
 * so a kernel may reduce any accumulator with any of these functions and get the same bits.
 */
#ifndef NX_TREE512_H
#define NX_TREE512_H

#include <immintrin.h>

#define TREE_AI static inline __attribute__((always_inline))

/* Per 128-bit lane: [A0+A2, B0+B2, A1+A3, B1+B3] (A = a, B = b). */
TREE_AI __m512 tree_l1(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
}

/* Two level-1 results -> per 128-bit lane, that lane's sums of the 4 source vectors. */
TREE_AI __m512 tree_l2(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_ps(a, b, 0x44), _mm512_shuffle_ps(a, b, 0xEE));
}

/* 128-bit lanes [a0+a1, a2+a3, b0+b1, b2+b3]. */
TREE_AI __m512 tree_l3(__m512 a, __m512 b) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

/* Lane t of the result = the sum of the lanes of a[t]. */
TREE_AI __m512 tree16(const __m512 a[16]) {
    __m512 b[8], c[4], d[2];
    _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) b[i] = tree_l1(a[2 * i], a[2 * i + 1]);
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) c[i] = tree_l2(b[2 * i], b[2 * i + 1]);
    d[0] = tree_l3(c[0], c[1]), d[1] = tree_l3(c[2], c[3]);
    return tree_l3(d[0], d[1]);
}

/* Lanes t < 8 of the result = the sum of the lanes of a[t] (lanes 8..15: the same again). */
TREE_AI __m512 tree8(const __m512 a[8]) {
    __m512 b[4], c[2];
    _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) b[i] = tree_l1(a[2 * i], a[2 * i + 1]);
    c[0] = tree_l2(b[0], b[1]), c[1] = tree_l2(b[2], b[3]);
    __m512 d = tree_l3(c[0], c[1]);
    return tree_l3(d, d);
}

#undef TREE_AI
#endif
