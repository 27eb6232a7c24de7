/*
 * slb_avx2.c - the SLB int8 dot-product scan with AVX2 (compiled with -mavx2).
 *
 * |q| (sign_epi8(q, q)) times row * sign(q) (sign_epi8(row, q)) gives q_j * row_j as an
 * unsigned-by-signed byte product; maddubs adds adjacent pairs into int16 without saturation
 * because |q|, |row| <= 127 (2 * 127 * 127 = 32258 < 32767); madd with ones widens to int32.
 * Exact, so equal to the reference bit for bit. Four rows per pass share the query loads and
 * |q|.
 */
#include <immintrin.h>

#include "route/slb.h"

static inline __m256i dot32(__m256i aq, __m256i q, __m256i r, __m256i ones) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aq, _mm256_sign_epi8(r, q)), ones);
}

static inline int32_t hsum(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

#define LD(p) _mm256_loadu_si256((const __m256i *)(p))

void rt_slb_dots_avx2(const int8_t *mat, size_t stride, int32_t rows, size_t dim_pad,
                      const int8_t *q, const int32_t *row_sums, int32_t *out) {
    (void)row_sums;
    const __m256i ones = _mm256_set1_epi16(1);
    int32_t r = 0;
    for (; r + 4 <= rows; r += 4) {
        const int8_t *a = mat + (size_t)r * stride;
        __m256i c0 = _mm256_setzero_si256(), c1 = c0, c2 = c0, c3 = c0;
        for (size_t j = 0; j < dim_pad; j += 32) {
            __m256i qv = LD(q + j), aq = _mm256_sign_epi8(qv, qv);
            c0 = _mm256_add_epi32(c0, dot32(aq, qv, LD(a + j), ones));
            c1 = _mm256_add_epi32(c1, dot32(aq, qv, LD(a + stride + j), ones));
            c2 = _mm256_add_epi32(c2, dot32(aq, qv, LD(a + 2 * stride + j), ones));
            c3 = _mm256_add_epi32(c3, dot32(aq, qv, LD(a + 3 * stride + j), ones));
        }
        out[r] = hsum(c0);
        out[r + 1] = hsum(c1);
        out[r + 2] = hsum(c2);
        out[r + 3] = hsum(c3);
    }
    for (; r < rows; r++) {
        const int8_t *a = mat + (size_t)r * stride;
        __m256i acc = _mm256_setzero_si256();
        for (size_t j = 0; j < dim_pad; j += 32) {
            __m256i qv = LD(q + j);
            acc = _mm256_add_epi32(acc, dot32(_mm256_sign_epi8(qv, qv), qv, LD(a + j), ones));
        }
        out[r] = hsum(acc);
    }
}

/* rt_slb_quantize with AVX2: the same arithmetic lane by lane (IEEE single multiply by the same
 * inv, truncation, exact fraction test), so the bytes and the scale equal the scalar version. */
float rt_slb_quantize_avx2(const float *x, int dim, size_t dim_pad, int8_t *q) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m0 = _mm256_setzero_ps(), m1 = m0;
    int i = 0;
    for (; i + 16 <= dim; i += 16) {
        /* max_ps(a, m) returns m when a is NaN: NaNs are ignored like the scalar '>' test */
        m0 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i), absmask), m0);
        m1 = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + i + 8), absmask), m1);
    }
    m0 = _mm256_max_ps(m0, m1);
    float lanes[8];
    _mm256_storeu_ps(lanes, m0);
    float amax = 0;
    for (int k = 0; k < 8; k++)
        if (lanes[k] > amax) amax = lanes[k];
    for (; i < dim; i++) {
        float a = x[i] < 0 ? -x[i] : x[i];
        if (a > amax) amax = a;
    }
    for (size_t j = 0; j < dim_pad; j += 32) _mm256_storeu_si256((__m256i *)(q + j), _mm256_setzero_si256());
    if (!(amax > 0) || amax > 3.4028234663852886e38f) return 0;
    float inv = 127.0f / amax;
    const __m256 vinv = _mm256_set1_ps(inv), c127 = _mm256_set1_ps(127.0f), half = _mm256_set1_ps(0.5f);
    i = 0;
    for (; i + 8 <= dim; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vinv);
        __m256 a = _mm256_and_ps(v, absmask);
        a = _mm256_and_ps(a, _mm256_cmp_ps(a, a, _CMP_ORD_Q)); /* NaN -> 0 */
        a = _mm256_min_ps(a, c127);
        __m256i t = _mm256_cvttps_epi32(a);
        __m256 frac = _mm256_sub_ps(a, _mm256_cvtepi32_ps(t));
        __m256i up = _mm256_castps_si256(_mm256_cmp_ps(frac, half, _CMP_GE_OQ)); /* -1 or 0 */
        t = _mm256_sub_epi32(t, up);
        __m256i neg = _mm256_castps_si256(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ));
        t = _mm256_sub_epi32(_mm256_xor_si256(t, neg), neg); /* negate where v < 0 */
        __m128i p16 = _mm_packs_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
        __m128i p8 = _mm_packs_epi16(p16, p16);
        _mm_storel_epi64((__m128i *)(q + i), p8);
    }
    for (; i < dim; i++) {
        float v = x[i] * inv, a = v < 0 ? -v : v;
        a = a == a ? a : 0.0f;
        a = a < 127.0f ? a : 127.0f;
        int32_t t = (int32_t)a;
        t += (a - (float)t) >= 0.5f;
        q[i] = (int8_t)(v < 0 ? -t : t);
    }
    return amax / 127.0f;
}
