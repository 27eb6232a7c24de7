/*
 * slb_avx2.c - the SLB int8 dot-product scan with AVX2 (compiled with -mavx2).
 *
 * |q| (sign_epi8(q, q)) times row * sign(q) (sign_epi8(row, q)) gives q_j * row_j as an
 * unsigned-by-signed byte product; maddubs adds adjacent pairs into int16 without saturation
 * because |q|, |row| <= 127 (2 * 127 * 127 = 32258 < 32767); madd with ones widens to int32.
 * Exact, so equal to the reference bit for bit. Two rows per pass share the query loads.
 */
#include <immintrin.h>

#include "route/slb.h"

static inline __m256i dot32(__m256i q, __m256i r, __m256i ones) {
    __m256i aq = _mm256_sign_epi8(q, q);
    __m256i rs = _mm256_sign_epi8(r, q);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aq, rs), ones);
}

static inline int32_t hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

void rt_slb_dots_avx2(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                      const int8_t *q, const int32_t *row_sums, int32_t *out) {
    (void)row_sums;
    const __m256i ones = _mm256_set1_epi16(1);
    int32_t r = 0;
    for (; r + 2 <= rows; r += 2) {
        const int8_t *a = mat + (size_t)r * stride, *b = a + stride;
        __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
        for (size_t j = 0; j < dim_pad; j += 32) {
            __m256i qv = _mm256_loadu_si256((const __m256i *)(q + j));
            acc0 = _mm256_add_epi32(acc0, dot32(qv, _mm256_loadu_si256((const __m256i *)(a + j)), ones));
            acc1 = _mm256_add_epi32(acc1, dot32(qv, _mm256_loadu_si256((const __m256i *)(b + j)), ones));
        }
        out[r] = hsum(acc0);
        out[r + 1] = hsum(acc1);
    }
    for (; r < rows; r++) {
        const int8_t *a = mat + (size_t)r * stride;
        __m256i acc = _mm256_setzero_si256();
        for (size_t j = 0; j < dim_pad; j += 32)
            acc = _mm256_add_epi32(acc, dot32(_mm256_loadu_si256((const __m256i *)(q + j)),
                                              _mm256_loadu_si256((const __m256i *)(a + j)), ones));
        out[r] = hsum(acc);
    }
}
