/*
 * attn_simd.h - what the AVX2 and AVX-512 fused attention kernels share (attn_avx2.c,
 * attn_avx512.c): row prefetching, the online-softmax step of one chunk and the fused driver
 * (chunks, blocks, head groups) around a set's own score and value kernels. Sharing the step
 * and the driver keeps the two sets' softmax arithmetic identical, so their fused results
 * differ only in how the scores are rounded. Include only from files compiled with -mavx2 -mfma.
 */
#ifndef NX_ATTN_SIMD_H
#define NX_ATTN_SIMD_H

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/exp_avx2.h"
#include "kern/kern.h"
#include "kern/kern_impl.h"

/* Prefetch the cache lines of bytes [p, p + n) of the next KV block, to this CPU's level for
 * KV streams (kern_pf_level: L1, except L2 on a Zen 4, see dispatch.c). */
static inline __attribute__((always_inline)) void prefetch_span(const char *p, size_t n) {
    uintptr_t a = (uintptr_t)p & ~(uintptr_t)63, e = (uintptr_t)p + n;
    for (; a < e; a += 64) kern_prefetch(KERN_PF_KV, (const void *)a);
}

/*
 * The L2 stage of the KV prefetch: kern_attn_blocks asks for block b+2's K and V rows into L2
 * during block b's scores pass (block b+1's rows go to L1 at the same time), n rows stride bytes
 * apart from k and v, spread over the pass: the rows of position j when the pass reaches
 * position j. A paged cache's blocks are a few KiB at scattered places, which the hardware
 * prefetchers do not follow. One prefetch per 128 bytes of a row (the L2's adjacent-line
 * prefetcher brings the pair): measured on Zen 5 with the whole block asked for at once (cold,
 * bench_attn_blocks): ~8.2 ns per position x head without this stage, ~6.9 with a prefetch per
 * line, ~5.5 with one per 128 bytes. On a Sapphire-Rapids-class Xeon that burst stalled the
 * core (95% of the driver's own samples on the instructions after its prefetches, 10% of a
 * decode step at depth 4096) and ran slower than no stage at all; spread over the pass it ran
 * ~10-20% faster than the burst there (cold, one and two processes) and decode at depth 4096
 * gained ~4.6%. (The L1 stage needs every line: one per 128 bytes there doubled the time.)
 */
struct att_ahead {
    const char *k, *v;
    size_t stride;
    int64_t n;
};

/* The L2 stage for positions [j, j + m) of a pass (a == NULL: none). */
static inline __attribute__((always_inline)) void prefetch_ahead(const struct att_ahead *a,
                                                                 int64_t j, int64_t m, size_t slice) {
    if (!a) return;
    for (int64_t p = j; p < j + m && p < a->n; p++) {
        const char *rows[2] = {a->k + (size_t)p * a->stride, a->v + (size_t)p * a->stride};
        for (int r = 0; r < 2; r++) {
            uintptr_t x = (uintptr_t)rows[r] & ~(uintptr_t)63, e = (uintptr_t)rows[r] + slice;
            for (; x < e; x += 128) _mm_prefetch((const char *)x, _MM_HINT_T1);
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
 * with m_new = max(*m, max_j s_j), s_j becomes exp(s_j - m_new) (exp8, or exp16 in the
 * AVX-512 set, the same bits; scalar exp1 for the last n % 8), *l becomes *l * alpha + sum_j
 * s_j (8 lanes in order, att_hsum8, then the tail in order) and *m becomes m_new. Returns
 * alpha = exp(m_old - m_new), 0 when *m was -inf: the factor the caller rescales its running
 * values by.
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
    j = 0;
#ifdef NX_KERN_AVX512
    /* the AVX-512 set: exp 16 lanes at a time (each lane exp8's bits), the sum still 8 lanes
       in order, so both sets keep the same softmax arithmetic (+1.0% decode at depth 4096,
       Q4_K_M, bench_depth BENCH_AB on a Sapphire-Rapids-class Xeon) */
    const __m512 vm16 = _mm512_set1_ps(mn);
    for (; j + 16 <= n; j += 16) {
        __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), vm16));
        _mm512_storeu_ps(s + j, e);
        vs8 = _mm256_add_ps(vs8, _mm512_castps512_ps256(e));
        vs8 = _mm256_add_ps(vs8, _mm512_extractf32x8_ps(e, 1));
    }
#endif
    for (; j + 8 <= n; j += 8) {
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

/* ---- steps of a fused pass over one KV range (the driver below and attn_avx512.c's wide path) - */

/* The K and V slices of rows [0, n) (rows ks / vs bytes apart) asked for at once. */
static inline __attribute__((always_inline)) void prefetch_rows(const char *k, size_t ks, const char *v,
                                                                size_t vs, int64_t n, size_t slice) {
    for (int64_t j = 0; j < n; j++) {
        prefetch_span(k + (size_t)j * ks, slice);
        prefetch_span(v + (size_t)j * vs, slice);
    }
}

/* The rows to prefetch while the chunk [j0, j0 + n) of a range of npos positions is reduced: the
 * next chunk's (at most KERN_ATTN_CHUNK), or after the last chunk the caller's next rows nk, nv
 * (nn of them; NULL: none). Sets *pk, *pv; returns how many. */
static inline __attribute__((always_inline)) int64_t att_next_rows(const char *k, size_t ks, const char *v,
                                                                   size_t vs, int64_t j0, int64_t n,
                                                                   int64_t npos, const char *nk,
                                                                   const char *nv, int64_t nn,
                                                                   const char **pk, const char **pv) {
    if (j0 + n < npos) {
        *pk = k + (size_t)(j0 + n) * ks, *pv = v + (size_t)(j0 + n) * vs;
        return NX_MIN(npos - j0 - n, (int64_t)KERN_ATTN_CHUNK);
    }
    *pk = nk, *pv = nv;
    return nk ? nn : 0;
}

/* o[0..hd) *= alpha (a head's running values, rescaled after softmax_chunk). */
static inline __attribute__((always_inline)) void att_rescale(float *o, int64_t hd, float alpha) {
    __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= hd; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), va));
    for (; i < hd; i++) o[i] *= alpha;
}

/* ---- the fused driver (kern_attn_block / kern_attn_blocks) ----------------------------------- */

enum { ATT_FUSED_HEADS = 8 }; /* heads per fused pass (the driver's buffers are on the stack) */

/*
 * A set's chunk kernels for one KV type, for the fused driver:
 *   scores: s[g*ld + j] = scale * dot(query g, K_j) for the n rows K_j = k + j*ks and
 *           ng <= ATT_FUSED_HEADS heads, running the L2 stage ahead (NULL: none) as it goes;
 *           q holds the queries as the set's entry points hand them to the driver (rows hd
 *           apart, or a set's own layout in which heads g, a multiple of 4, still start at
 *           q + g*hd: the driver only offsets q by whole groups of ATT_FUSED_HEADS);
 *   values: o[g*os + i] (+)= sum_j p[g*ld + j] * V_j[i] for the n rows V_j = v + j*vs (first:
 *           o's rows are written, else added to);
 * each also prefetches the slices of the rows pf + j*stride, j < npf (pf NULL: none) as it goes.
 * elt: bytes per KV element.
 */
struct att_chunk_fns {
    void (*scores)(int64_t hd, const char *k, size_t ks, int64_t n, const float *q, int64_t ng,
                   float scale, float *s, int64_t ld, const char *pf, int64_t npf,
                   const struct att_ahead *ahead);
    void (*values)(int64_t hd, const char *v, size_t vs, int64_t n, const float *p, int64_t ld,
                   int64_t ng, float *o, int64_t os, bool first, const char *pf, int64_t npf);
    size_t elt;
};

/*
 * One KV range for ng <= ATT_FUSED_HEADS heads, into part (see kern_attn_block): chunks of
 * KERN_ATTN_CHUNK positions, each its scores (into a stack buffer that stays in L1), per head
 * softmax_chunk and the rescale of the running values by alpha, then its values added. Each K
 * and V row slice is read once. nk / nv / nn: the caller's next rows (its next KV block),
 * prefetched during the last chunk (NULL: none); ahead: the block after those, into L2 during
 * the scores passes (NULL: none; its row j with this range's position j); pre: prefetch this
 * call's first chunk up front (false when an earlier call prefetched it as its next rows).
 */
static inline void att_fused_group(const struct att_chunk_fns *f, int64_t hd, const char *k,
                                   size_t ks, const char *v, size_t vs, int64_t npos,
                                   const float *q, int64_t ng, float scale, float *part,
                                   const char *nk, const char *nv, int64_t nn,
                                   const struct att_ahead *ahead, bool pre) {
    float sbuf[ATT_FUSED_HEADS * KERN_ATTN_CHUNK];
    float m[ATT_FUSED_HEADS], l[ATT_FUSED_HEADS];
    for (int64_t g = 0; g < ng; g++) m[g] = -INFINITY, l[g] = 0.0f;
    /* the running values live in the part's rows (head g's at part + g*(hd + 2) + 2), written
       by the first chunk's values pass; no rows (npos 0): zeros */
    const int64_t os = hd + 2;
    float *ob = part + 2;
    if (npos <= 0) {
        for (int64_t g = 0; g < ng; g++) memset(ob + g * os, 0, sizeof(float) * (size_t)hd);
    }
    const size_t slice = (size_t)hd * f->elt;
    for (int64_t j0 = 0; j0 < npos; j0 += KERN_ATTN_CHUNK) {
        int64_t n = NX_MIN(npos - j0, (int64_t)KERN_ATTN_CHUNK);
        /* memory-level parallelism: the first chunk's K and V slices are asked for at once
         * unless the previous call prefetched them (a paged KV block is a few KiB the hardware
         * prefetchers have no time to ramp up on); each chunk prefetches the next one's (the
         * last chunk: the caller's next rows) as its scores and values run */
        if (j0 == 0 && pre) prefetch_rows(k, ks, v, vs, n, slice);
        const char *pk, *pv;
        int64_t pn = att_next_rows(k, ks, v, vs, j0, n, npos, nk, nv, nn, &pk, &pv);
        struct att_ahead ah = {0};
        if (ahead) {
            ah = *ahead;
            ah.k += (size_t)j0 * ah.stride, ah.v += (size_t)j0 * ah.stride, ah.n -= j0;
        }
        f->scores(hd, k + (size_t)j0 * ks, ks, n, q, ng, scale, sbuf, KERN_ATTN_CHUNK, pk, pn,
                  ahead && ah.n > 0 ? &ah : NULL);
        for (int64_t g = 0; g < ng; g++) {
            float alpha = softmax_chunk(sbuf + g * KERN_ATTN_CHUNK, n, &m[g], &l[g]);
            if (j0 > 0) att_rescale(ob + g * os, hd, alpha);
        }
        f->values(hd, v + (size_t)j0 * vs, vs, n, sbuf, KERN_ATTN_CHUNK, ng, ob, os, j0 == 0, pv,
                  pn);
    }
    for (int64_t g = 0; g < ng; g++) part[g * os] = m[g], part[g * os + 1] = l[g];
}

/* One KV range, all heads in groups of ATT_FUSED_HEADS; the next rows are prefetched by the
 * last group's pass only (the earlier groups' passes bring this range's rows back from L1/L2). */
static inline void att_fused_heads(const struct att_chunk_fns *f, int64_t hd, const char *k,
                                   size_t ks, const char *v, size_t vs, int64_t npos,
                                   const float *q, int64_t ng, float scale, float *part,
                                   const char *nk, const char *nv, int64_t nn,
                                   const struct att_ahead *ahead, bool pre) {
    for (int64_t g0 = 0; g0 < ng; g0 += ATT_FUSED_HEADS) {
        int64_t n = NX_MIN(ng - g0, (int64_t)ATT_FUSED_HEADS);
        bool last = g0 + ATT_FUSED_HEADS >= ng;
        att_fused_group(f, hd, k, ks, v, vs, npos, q + g0 * hd, n, scale, part + g0 * (hd + 2),
                        last ? nk : NULL, last ? nv : NULL, nn, last ? ahead : NULL, g0 == 0 && pre);
    }
}

/* kern_attn_blocks: block b's rows k[b] / v[b], its part at parts + b*rec (rec: ng*(hd + 2),
 * or more when the caller runs its heads in slices); block b+1 is prefetched into L1 during
 * block b, block b+2 into L2 during block b's scores pass. */
static inline void att_fused_blocks(const struct att_chunk_fns *f, int64_t hd,
                                    const void *const *k, const void *const *v, size_t stride,
                                    int64_t nblk, int64_t brows, int64_t npos, const float *q,
                                    int64_t ng, float scale, float *parts, int64_t rec) {
    for (int64_t b = 0; b < nblk; b++) {
        int64_t n = NX_MIN(brows, npos - b * brows);
        struct att_ahead ahead = {0};
        if (b + 2 < nblk)
            ahead = (struct att_ahead){k[b + 2], v[b + 2], stride, NX_MIN(brows, npos - (b + 2) * brows)};
        int64_t nn = b + 1 < nblk ? NX_MIN(brows, npos - (b + 1) * brows) : 0;
        const char *nk = nn > 0 ? k[b + 1] : NULL, *nv = nn > 0 ? v[b + 1] : NULL;
        att_fused_heads(f, hd, k[b], stride, v[b], stride, n, q, ng, scale, parts + b * rec, nk, nv,
                        nn, ahead.n > 0 ? &ahead : NULL, b == 0);
    }
}

#endif
