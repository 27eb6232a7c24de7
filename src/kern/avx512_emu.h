/*
 * avx512_emu.h - test-only plain-C emulation of the AVX-512 intrinsics kern_avx512.c and
 * attn_avx512.c use, so that their kernels can be checked against the reference on a machine
 * without AVX-512. Each emulation follows the instruction's definition in Intel's SDM (lane by
 * lane); it is slow and never part of the library build. Those files include it only with
 * -DNX_AVX512_EMULATE.
 *
 * `make` builds the kernel and attention tests with the emulated AVX-512 set
 * (build/tests/test_kern_avx512emu, test_attn_avx512emu: the Makefile's emu512 rules) and
 * `make test` runs them, on any CPU with AVX2.
 *
 * Included after <immintrin.h>: the type and intrinsic names below are macros that shadow the
 * real ones for the rest of the file.
 */
#ifndef NX_AVX512_EMU_H
#define NX_AVX512_EMU_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    union {
        int8_t b[64];
        uint8_t ub[64];
        int16_t w[32];
        uint16_t uw[32];
        int32_t d[16];
        float f[16];
    };
} emu512;

#define __m512 emu512
#define __m512i emu512

#define EMU static inline __attribute__((unused))

EMU __m256i emu_lo256(emu512 v) { return _mm256_loadu_si256((const __m256i *)&v.b[0]); }
EMU __m256i emu_hi256(emu512 v) { return _mm256_loadu_si256((const __m256i *)&v.b[32]); }

EMU emu512 emu_zero(void) {
    emu512 r;
    memset(&r, 0, sizeof r);
    return r;
}

#define _mm512_setzero_ps emu_zero
#define _mm512_setzero_si512 emu_zero

EMU emu512 emu_loadu(const void *p) {
    emu512 r;
    memcpy(&r, p, 64);
    return r;
}
#define _mm512_loadu_ps(p) emu_loadu(p)
#define _mm512_loadu_si512(p) emu_loadu(p)

/* casts: reinterpretation; the undefined upper half of a widening cast is zero here */
EMU emu512 emu_cast_same(emu512 v) { return v; }
#define _mm512_castsi512_ps emu_cast_same
EMU __m256 emu_castps512_ps256(emu512 v) { return _mm256_loadu_ps(&v.f[0]); }
#define _mm512_castps512_ps256 emu_castps512_ps256
#define _mm512_castsi512_si256 emu_lo256
EMU emu512 emu_castsi256_si512(__m256i v) {
    emu512 r = emu_zero();
    _mm256_storeu_si256((__m256i *)&r.b[0], v);
    return r;
}
#define _mm512_castsi256_si512 emu_castsi256_si512

EMU __m256 emu_extractf32x8_ps(emu512 v, int i) { return _mm256_loadu_ps(&v.f[8 * (i & 1)]); }
#define _mm512_extractf32x8_ps emu_extractf32x8_ps
EMU __m256i emu_extracti64x4_epi64(emu512 v, int i) { return (i & 1) ? emu_hi256(v) : emu_lo256(v); }
#define _mm512_extracti64x4_epi64 emu_extracti64x4_epi64
EMU emu512 emu_inserti64x4(emu512 a, __m256i b, int i) {
    _mm256_storeu_si256((__m256i *)&a.b[32 * (i & 1)], b);
    return a;
}
#define _mm512_inserti64x4 emu_inserti64x4

/* vcvtph2ps: 16 halves -> floats (exact) */
EMU emu512 emu_cvtph_ps(__m256i h) {
    uint16_t in[16];
    emu512 r;
    _mm256_storeu_si256((__m256i *)in, h);
    for (int i = 0; i < 16; i++) r.f[i] = _cvtsh_ss(in[i]);
    return r;
}
#define _mm512_cvtph_ps emu_cvtph_ps

/* vpmovzxwd: 16 x u16 -> 16 x i32 */
EMU emu512 emu_cvtepu16_epi32(__m256i v) {
    uint16_t in[16];
    emu512 r;
    _mm256_storeu_si256((__m256i *)in, v);
    for (int i = 0; i < 16; i++) r.d[i] = in[i];
    return r;
}
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32

EMU emu512 emu_slli_epi32(emu512 v, unsigned n) {
    for (int i = 0; i < 16; i++) v.d[i] = n > 31 ? 0 : (int32_t)((uint32_t)v.d[i] << n);
    return v;
}
#define _mm512_slli_epi32 emu_slli_epi32

EMU emu512 emu_fmadd_ps(emu512 a, emu512 b, emu512 c) {
    emu512 r;
    for (int i = 0; i < 16; i++) r.f[i] = fmaf(a.f[i], b.f[i], c.f[i]);
    return r;
}
#define _mm512_fmadd_ps emu_fmadd_ps

/* vpmaddubsw: u8 (a) x i8 (b), adjacent pairs summed with signed saturation */
EMU emu512 emu_maddubs_epi16(emu512 a, emu512 b) {
    emu512 r;
    for (int i = 0; i < 32; i++) {
        int s = a.ub[2 * i] * b.b[2 * i] + a.ub[2 * i + 1] * b.b[2 * i + 1];
        r.w[i] = (int16_t)(s > 32767 ? 32767 : s < -32768 ? -32768 : s);
    }
    return r;
}
#define _mm512_maddubs_epi16 emu_maddubs_epi16

/* vpdpwssd: acc + i16 x i16 pairs (no saturation, wraps) */
EMU emu512 emu_dpwssd_epi32(emu512 acc, emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) {
        int64_t s = (int64_t)acc.d[i] + a.w[2 * i] * b.w[2 * i] + a.w[2 * i + 1] * b.w[2 * i + 1];
        acc.d[i] = (int32_t)(uint32_t)s;
    }
    return acc;
}
#define _mm512_dpwssd_epi32 emu_dpwssd_epi32

/* vpermw: r[i] = a[idx[i] & 31] */
EMU emu512 emu_permutexvar_epi16(emu512 idx, emu512 a) {
    emu512 r;
    for (int i = 0; i < 32; i++) r.w[i] = a.w[idx.uw[i] & 31];
    return r;
}
#define _mm512_permutexvar_epi16 emu_permutexvar_epi16

/* vpermps: r[i] = a[idx[i] & 15] */
EMU emu512 emu_permutexvar_ps(emu512 idx, emu512 a) {
    emu512 r;
    for (int i = 0; i < 16; i++) r.f[i] = a.f[idx.d[i] & 15];
    return r;
}
#define _mm512_permutexvar_ps emu_permutexvar_ps
EMU emu512 emu_setr_epi32(int e0, int e1, int e2, int e3, int e4, int e5, int e6, int e7,
                          int e8, int e9, int e10, int e11, int e12, int e13, int e14, int e15) {
    emu512 r;
    int e[16] = {e0, e1, e2, e3, e4, e5, e6, e7, e8, e9, e10, e11, e12, e13, e14, e15};
    memcpy(r.d, e, sizeof e);
    return r;
}
#undef _mm512_setr_epi32 /* a macro in GCC's header */
#define _mm512_setr_epi32 emu_setr_epi32
EMU __m128 emu_castps512_ps128(emu512 v) { return _mm_loadu_ps(&v.f[0]); }
#define _mm512_castps512_ps128 emu_castps512_ps128

/* vpdpbusd (256-bit, VL): acc + sum of 4 u8 (a) x i8 (b) products per i32 lane, wrapping */
EMU __m256i emu_dpbusd256(__m256i acc, __m256i a, __m256i b) {
    uint8_t ua[32];
    int8_t sb[32];
    int32_t d[8];
    _mm256_storeu_si256((__m256i *)ua, a);
    _mm256_storeu_si256((__m256i *)sb, b);
    _mm256_storeu_si256((__m256i *)d, acc);
    for (int i = 0; i < 8; i++) {
        int64_t s = d[i];
        for (int j = 0; j < 4; j++) s += ua[4 * i + j] * sb[4 * i + j];
        d[i] = (int32_t)(uint32_t)s;
    }
    return _mm256_loadu_si256((const __m256i *)d);
}
#undef _mm256_dpbusd_epi32
#define _mm256_dpbusd_epi32 emu_dpbusd256

/* ---- used by the Q8_0 / Q4_0 row-lane tile ---- */
EMU emu512 emu_set1_epi32(int32_t v) {
    emu512 r;
    for (int i = 0; i < 16; i++) r.d[i] = v;
    return r;
}
#define _mm512_set1_epi32 emu_set1_epi32
EMU emu512 emu_set1_ps(float v) {
    emu512 r;
    for (int i = 0; i < 16; i++) r.f[i] = v;
    return r;
}
#define _mm512_set1_ps emu_set1_ps
EMU emu512 emu_mul_ps(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.f[i] *= b.f[i];
    return a;
}
#define _mm512_mul_ps emu_mul_ps
EMU emu512 emu_cvtepi32_ps(emu512 a) {
    for (int i = 0; i < 16; i++) a.f[i] = (float)a.d[i];
    return a;
}
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
/* vpdpbusd (512-bit): acc + sum of 4 u8 (a) x i8 (b) products per i32 lane, wrapping */
EMU emu512 emu_dpbusd512(emu512 acc, emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) {
        int64_t s = acc.d[i];
        for (int j = 0; j < 4; j++) s += a.ub[4 * i + j] * b.b[4 * i + j];
        acc.d[i] = (int32_t)(uint32_t)s;
    }
    return acc;
}
#define _mm512_dpbusd_epi32 emu_dpbusd512
EMU void emu_mask_storeu_ps(float *p, unsigned m, emu512 v) {
    for (int i = 0; i < 16; i++) {
        if (m >> i & 1) p[i] = v.f[i];
    }
}
#define _mm512_mask_storeu_ps(p, m, v) emu_mask_storeu_ps((p), (unsigned)(m), (v))

/* the X4 prefill tiles, their activation packing and weight conversion */
EMU emu512 emu_maskz_loadu_ps(unsigned m, const float *p) { /* reads only the masked lanes */
    emu512 r = emu_zero();
    for (int i = 0; i < 16; i++) {
        if (m >> i & 1) r.f[i] = p[i];
    }
    return r;
}
#define _mm512_maskz_loadu_ps(m, p) emu_maskz_loadu_ps((unsigned)(m), (p))
/* vpermt2ps: r[i] = (idx[i] bit 4 ? b : a)[idx[i] & 15] */
EMU emu512 emu_permutex2var_ps(emu512 a, emu512 idx, emu512 b) {
    emu512 r;
    for (int i = 0; i < 16; i++) r.f[i] = (idx.d[i] & 16 ? b : a).f[idx.d[i] & 15];
    return r;
}
#define _mm512_permutex2var_ps emu_permutex2var_ps
/* vblendmps: r[i] = m bit i ? b[i] : a[i] */
EMU emu512 emu_mask_blend_ps(unsigned m, emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) {
        if (m >> i & 1) a.f[i] = b.f[i];
    }
    return a;
}
#define _mm512_mask_blend_ps(m, a, b) emu_mask_blend_ps((unsigned)(m), (a), (b))

/* the small-batch pair kernels (Q4_K / Q6_K) */
EMU emu512 emu_broadcast_i64x4(__m256i v) { return emu_inserti64x4(emu_castsi256_si512(v), v, 1); }
#define _mm512_broadcast_i64x4 emu_broadcast_i64x4
EMU emu512 emu_srai_epi32(emu512 v, unsigned n) {
    for (int i = 0; i < 16; i++) v.d[i] = v.d[i] >> (n > 31 ? 31 : n); /* arithmetic (gcc) */
    return v;
}
#define _mm512_srai_epi32 emu_srai_epi32
EMU emu512 emu_mullo_epi32(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.d[i] = (int32_t)((uint32_t)a.d[i] * (uint32_t)b.d[i]);
    return a;
}
#define _mm512_mullo_epi32 emu_mullo_epi32
EMU emu512 emu_add_epi32(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.d[i] = (int32_t)((uint32_t)a.d[i] + (uint32_t)b.d[i]);
    return a;
}
#define _mm512_add_epi32 emu_add_epi32
EMU emu512 emu_sub_epi32(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.d[i] = (int32_t)((uint32_t)a.d[i] - (uint32_t)b.d[i]);
    return a;
}
#define _mm512_sub_epi32 emu_sub_epi32
EMU emu512 emu_add_epi16(emu512 a, emu512 b) {
    for (int i = 0; i < 32; i++) a.w[i] = (int16_t)(uint16_t)((uint16_t)a.w[i] + (uint16_t)b.w[i]);
    return a;
}
#define _mm512_add_epi16 emu_add_epi16
/* vpmaddwd: i16 x i16, adjacent pairs summed into i32 (wrapping) */
EMU emu512 emu_madd_epi16(emu512 a, emu512 b) {
    emu512 r;
    for (int i = 0; i < 16; i++)
        r.d[i] = (int32_t)((uint32_t)(a.w[2 * i] * b.w[2 * i]) + (uint32_t)(a.w[2 * i + 1] * b.w[2 * i + 1]));
    return r;
}
#define _mm512_madd_epi16 emu_madd_epi16
EMU emu512 emu_fnmadd_ps(emu512 a, emu512 b, emu512 c) {
    for (int i = 0; i < 16; i++) c.f[i] = fmaf(-a.f[i], b.f[i], c.f[i]);
    return c;
}
#define _mm512_fnmadd_ps emu_fnmadd_ps

/* attn_avx512.c's softmax (exp16, exp_avx2.h): vsubps, vminps / vmaxps (the second operand
 * unless the first is less / greater), vrndscaleps to the nearest integer, vcvtps2dq under
 * the default rounding (to nearest even) */
EMU emu512 emu_sub_ps(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.f[i] -= b.f[i];
    return a;
}
#define _mm512_sub_ps emu_sub_ps
EMU emu512 emu_min_ps(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.f[i] = a.f[i] < b.f[i] ? a.f[i] : b.f[i];
    return a;
}
#define _mm512_min_ps emu_min_ps
EMU emu512 emu_max_ps(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.f[i] = a.f[i] > b.f[i] ? a.f[i] : b.f[i];
    return a;
}
#define _mm512_max_ps emu_max_ps
EMU emu512 emu_roundscale_nearest_ps(emu512 a) {
    for (int i = 0; i < 16; i++) a.f[i] = nearbyintf(a.f[i]);
    return a;
}
#define _mm512_roundscale_ps(a, imm) emu_roundscale_nearest_ps(a) /* imm: nearest, scale 0 only */
EMU emu512 emu_cvtps_epi32(emu512 a) {
    emu512 r;
    for (int i = 0; i < 16; i++) r.d[i] = (int32_t)nearbyintf(a.f[i]); /* in range here */
    return r;
}
#define _mm512_cvtps_epi32 emu_cvtps_epi32

/* attn_avx512.c's scores: vbroadcastf32x4 (a 128-bit vector to each 128-bit lane) and
 * vextractf32x4 (128-bit lane i) */
EMU emu512 emu_broadcast_f32x4(__m128 v) {
    emu512 r;
    for (int l = 0; l < 4; l++) _mm_storeu_ps(&r.f[4 * l], v);
    return r;
}
#define _mm512_broadcast_f32x4 emu_broadcast_f32x4
EMU __m128 emu_extractf32x4_ps(emu512 v, int i) { return _mm_loadu_ps(&v.f[4 * (i & 3)]); }
#define _mm512_extractf32x4_ps emu_extractf32x4_ps

/* attn_avx512.c: stores, adds and the shuffles of the score reduction tree */
EMU void emu_storeu_ps(float *p, emu512 v) { memcpy(p, v.f, 64); }
#define _mm512_storeu_ps(p, v) emu_storeu_ps((p), (v))
EMU emu512 emu_add_ps(emu512 a, emu512 b) {
    for (int i = 0; i < 16; i++) a.f[i] += b.f[i];
    return a;
}
#define _mm512_add_ps emu_add_ps
/* vunpcklps / vunpckhps: per 128-bit lane, [a0 b0 a1 b1] / [a2 b2 a3 b3] */
EMU emu512 emu_unpack_ps(emu512 a, emu512 b, int hi) {
    emu512 r;
    for (int l = 0; l < 4; l++) {
        for (int i = 0; i < 2; i++) {
            r.f[4 * l + 2 * i] = a.f[4 * l + 2 * hi + i];
            r.f[4 * l + 2 * i + 1] = b.f[4 * l + 2 * hi + i];
        }
    }
    return r;
}
#define _mm512_unpacklo_ps(a, b) emu_unpack_ps((a), (b), 0)
#define _mm512_unpackhi_ps(a, b) emu_unpack_ps((a), (b), 1)
/* vshufps: per 128-bit lane, [a[i0] a[i1] b[i2] b[i3]], i_k = imm bits 2k+1..2k */
EMU emu512 emu_shuffle_ps(emu512 a, emu512 b, int imm) {
    emu512 r;
    for (int l = 0; l < 4; l++) {
        r.f[4 * l + 0] = a.f[4 * l + (imm & 3)];
        r.f[4 * l + 1] = a.f[4 * l + (imm >> 2 & 3)];
        r.f[4 * l + 2] = b.f[4 * l + (imm >> 4 & 3)];
        r.f[4 * l + 3] = b.f[4 * l + (imm >> 6 & 3)];
    }
    return r;
}
#define _mm512_shuffle_ps(a, b, imm) emu_shuffle_ps((a), (b), (imm))
/* vshuff32x4: 128-bit lanes [a[i0] a[i1] b[i2] b[i3]] */
EMU emu512 emu_shuffle_f32x4(emu512 a, emu512 b, int imm) {
    emu512 r;
    for (int l = 0; l < 4; l++) {
        const emu512 *src = l < 2 ? &a : &b;
        memcpy(&r.f[4 * l], &src->f[4 * (imm >> (2 * l) & 3)], 16);
    }
    return r;
}
#define _mm512_shuffle_f32x4(a, b, imm) emu_shuffle_f32x4((a), (b), (imm))

#endif
