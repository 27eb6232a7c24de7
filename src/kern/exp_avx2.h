/*
 * exp_avx2.h - e^x for 8 float lanes (exp8) and one float (exp1) with AVX2 + FMA, shared by
 * act_avx2.c (softmax, SwiGLU) and attn_avx2.c (fused attention), and the same steps on 16
 * lanes (exp16) for attn_avx512.c. See act_avx2.c's DESIGN for the method and its accuracy.
 * Include only from files compiled with -mavx2 -mfma.
 */
#ifndef NX_EXP_AVX2_H
#define NX_EXP_AVX2_H

#include <immintrin.h>

/* The steps of exp8 and exp16, written once for both widths (W: 256 or 512; ROUND: that
 * width's round-to-nearest intrinsic), so that exp16 is exp8 lane for lane by construction. */
#define NX_EXP_STEPS(W, ROUND) \
    x = _mm##W##_min_ps(_mm##W##_max_ps(x, _mm##W##_set1_ps(-87.3f)), _mm##W##_set1_ps(88.7f)); \
    __m##W k = ROUND(_mm##W##_mul_ps(x, _mm##W##_set1_ps(1.44269504088896341f)), \
                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); \
    __m##W r = _mm##W##_fnmadd_ps(k, _mm##W##_set1_ps(0.693359375f), x); \
    r = _mm##W##_fnmadd_ps(k, _mm##W##_set1_ps(-2.12194440e-4f), r); \
    __m##W p = _mm##W##_set1_ps(1.0f / 720.0f); \
    p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(1.0f / 120.0f)); \
    p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(1.0f / 24.0f)); \
    p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(1.0f / 6.0f)); \
    p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(0.5f)); \
    p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(1.0f)); \
    p = _mm##W##_fmadd_ps(p, r, _mm##W##_set1_ps(1.0f)); \
    __m##W##i e = _mm##W##_slli_epi32( \
        _mm##W##_add_epi32(_mm##W##_cvtps_epi32(k), _mm##W##_set1_epi32(127)), 23); \
    return _mm##W##_mul_ps(p, _mm##W##_castsi##W##_ps(e))

static inline __m256 exp8(__m256 x) { NX_EXP_STEPS(256, _mm256_round_ps); }

#ifdef NX_KERN_AVX512
/* exp8 on 16 lanes, each lane exp8's bits: for files of the AVX-512 set, which define
 * NX_KERN_AVX512 before including this header. */
static inline __m512 exp16(__m512 x) { NX_EXP_STEPS(512, _mm512_roundscale_ps); }
#endif

static inline float exp1(float x) {
    __m256 v = exp8(_mm256_set1_ps(x));
    return _mm256_cvtss_f32(v);
}

#endif
