/*
 * attn_simd.h - pieces the AVX2 and AVX-512 fused attention kernels share (attn_avx2.c,
 * attn_avx512.c): prefetching a row slice and the online-softmax step of one chunk. Sharing
 * the step keeps the two sets' softmax arithmetic identical, so their fused results differ only
 * in how the scores are rounded. Include only from files compiled with -mavx2 -mfma.
 */
#ifndef NX_ATTN_SIMD_H
#define NX_ATTN_SIMD_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "kern/exp_avx2.h"

/* Prefetch the cache lines of bytes [p, p + n). */
static inline __attribute__((always_inline)) void prefetch_span(const char *p, size_t n) {
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)p + n;
    for (; a < e; a += 64) _mm_prefetch((const char *)a, _MM_HINT_T0);
}

/*
 * Prefetch into L2 the slices (slice bytes) of n rows (stride bytes apart) of a K block and a V
 * block, all at once: kern_attn_blocks asks for block b+2 this way when it starts block b
 * (block b+1's rows are prefetched into L1 during block b). A paged cache's blocks are a few
 * KiB at scattered places, which the hardware prefetchers do not follow. One prefetch per
 * 128 bytes (the L2's adjacent-line prefetcher brings the pair): measured on Zen 5
 * (bench_attn_blocks, cold, interleaved): ~8.2 ns per position x head without this stage,
 * ~6.9 with a prefetch per line, ~5.5 with one per 128 bytes. (The L1 stage needs every line: one
 * per 128 bytes there doubled the time.)
 */
static inline __attribute__((always_inline)) void prefetch_rows_l2(const void *k, const void *v,
                                                                   size_t stride, int64_t n,
                                                                   size_t slice) {
    for (int64_t j = 0; j < n; j++) {
        const char *rows[2] = {(const char *)k + (size_t)j * stride, (const char *)v + (size_t)j * stride};
        for (int r = 0; r < 2; r++) {
            uintptr_t a = (uintptr_t)rows[r] & ~(uintptr_t)63, e = (uintptr_t)rows[r] + slice;
            for (; a < e; a += 128) _mm_prefetch((const char *)a, _MM_HINT_T1);
        }
    }
}

/* ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)), the fixed order of the chunk sums below. */
static inline __attribute__((always_inline)) float att_hsum8(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/*
 * One chunk of the online softmax for one head: s[0..n) (n >= 1) holds the chunk's scores;
 * with m_new = max(*m, max_j s_j), s_j becomes exp(s_j - m_new) (exp8, scalar exp1 for the
 * last n % 8), *l becomes *l * alpha + sum_j s_j (8 lanes in order, att_hsum8, then the tail in
 * order) and *m becomes m_new. Returns alpha = exp(m_old - m_new), 0 when *m was -inf: the
 * factor the caller rescales its running values by.
 */
static inline __attribute__((always_inline)) float softmax_chunk(float *s, int64_t n, float *m,
                                                                 float *l) {
    float mc = s[0];
    int64_t j = 0;
    if (n >= 8) {
        __m256 mv = _mm256_loadu_ps(s);
        for (j = 8; j + 8 <= n; j += 8) mv = _mm256_max_ps(mv, _mm256_loadu_ps(s + j));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(mv), _mm256_extractf128_ps(mv, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        mc = _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
    }
    for (; j < n; j++) mc = s[j] > mc ? s[j] : mc;
    float mn = mc > *m ? mc : *m;
    float alpha = *m == -INFINITY ? 0.0f : exp1(*m - mn);
    __m256 vm = _mm256_set1_ps(mn), vs8 = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), vm));
        _mm256_storeu_ps(s + j, e);
        vs8 = _mm256_add_ps(vs8, e);
    }
    float lsum = att_hsum8(vs8);
    for (; j < n; j++) {
        s[j] = exp1(s[j] - mn);
        lsum += s[j];
    }
    *l = *l * alpha + lsum;
    *m = mn;
    return alpha;
}

#endif
