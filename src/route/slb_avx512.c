/*
 * slb_avx512.c - the SLB int8 dot-product scan with AVX-512 VNNI (vpdpbusd).
 *
 * vpdpbusd multiplies unsigned bytes by signed bytes. The query is shifted to the unsigned
 * side, u_j = q_j + 128 (an XOR with 0x80), so sum u_j r_j = q.r + 128 sum r_j, and the row sum
 * (stored by the SLB) is subtracted. No intermediate can overflow: |q.r| <= 127^2 * dim_pad and
 * each 4-product group is at most 4 * 255 * 127. Exact, so equal to the reference.
 *
 * With -DNX_SLB_AVX512_EMULATE the intrinsics come from slb_emu512.h (plain C), so tests can
 * run this file on a CPU without AVX-512 (tests/test_route.c includes it that way).
 */
#ifdef NX_SLB_AVX512_EMULATE
#include "route/slb_emu512.h"
#else
#include <immintrin.h>
#endif

#include "route/slb.h"

#ifndef RT_SLB_AVX512_NAME
#define RT_SLB_AVX512_NAME rt_slb_dots_avx512
#endif

void RT_SLB_AVX512_NAME(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                        const int8_t *q, const int32_t *row_sums, int32_t *out) {
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    int32_t r = 0;
    for (; r + 2 <= rows; r += 2) {
        const int8_t *a = mat + (size_t)r * stride, *b = a + stride;
        __m512i acc0 = _mm512_setzero_si512(), acc1 = _mm512_setzero_si512();
        for (size_t j = 0; j < dim_pad; j += 64) {
            __m512i u = _mm512_xor_si512(_mm512_loadu_si512((const void *)(q + j)), flip);
            acc0 = _mm512_dpbusd_epi32(acc0, u, _mm512_loadu_si512((const void *)(a + j)));
            acc1 = _mm512_dpbusd_epi32(acc1, u, _mm512_loadu_si512((const void *)(b + j)));
        }
        out[r] = _mm512_reduce_add_epi32(acc0) - 128 * row_sums[r];
        out[r + 1] = _mm512_reduce_add_epi32(acc1) - 128 * row_sums[r + 1];
    }
    for (; r < rows; r++) {
        const int8_t *a = mat + (size_t)r * stride;
        __m512i acc = _mm512_setzero_si512();
        for (size_t j = 0; j < dim_pad; j += 64) {
            __m512i u = _mm512_xor_si512(_mm512_loadu_si512((const void *)(q + j)), flip);
            acc = _mm512_dpbusd_epi32(acc, u, _mm512_loadu_si512((const void *)(a + j)));
        }
        out[r] = _mm512_reduce_add_epi32(acc) - 128 * row_sums[r];
    }
}
