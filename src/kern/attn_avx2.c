/*
 * attn_avx2.c - AVX2 + FMA + F16C grouped attention kernels (kern_attn_scores,
 * kern_attn_values and, through attn_simd.h's fused driver, kern_attn_block(s) for the "avx2"
 * set; the "avx512" set reuses the values kernel, and all of them for head dims that are not
 * multiples of 16). Compiled with -mavx2 -mfma -mf16c; only called after dispatch.c has checked
 * the CPU.
 *
 * DESIGN
 * - One call covers the ng query heads that share a KV head, so each K/V row slice is loaded
 *   and converted (F16 -> float with vcvtph2ps) once per 8 elements for up to 4 heads, instead
 *   of once per head as with per-(position, head) kern_dot_kv / kern_axpy_kv calls.
 * - Scores: register tiles of NG heads x NP positions (NG*NP <= 8: 4x2, 3x2, 2x4, 1x8), one
 *   8-lane float accumulator per (head, position). Per 8-element chunk: NG query loads, NP K
 *   loads (converted once), NG*NP FMAs. The 8 accumulators are reduced together by a tree of
 *   hadds and one 128-bit lane swap, which yields all 8 dot products in one vector (one scale
 *   multiply, then scalar stores into the per-head score rows).
 * - Values: register tiles of NG heads x NC 8-wide chunks of hd (NG*NC <= 8: 4x2, 3x2, 2x4,
 *   1x8), accumulators held across a block of positions: per position, NG broadcasts of
 *   p[g][j] and NC V chunk loads (each converted once for all heads), NG*NC FMAs. The tiles
 *   sweep the chunks of hd over one block of positions at a time, so the block's row slices
 *   are read from L1 after the first pass; scores are blocked the same way for ng > 4 (head
 *   groups sweep a block).
 * - Block size (att_block): KV rows are usually a power-of-two number of bytes apart, so the
 *   same offset of consecutive rows falls in few L1 sets (1 KiB stride: 4 of 64 sets, 32 rows
 *   of 8 ways; 4 KiB: 1 set, 8 rows). Blocks take half of what fits (the rest is for the next
 *   block, prefetched), 8 to 64 rows. Measured on Zen 3 against fixed 64-row blocks: values
 *   ~20% faster in 5 of 6 shapes tried (1-4 KiB strides, cold and L2-hot), 7% slower in one.
 * - Heads are taken in groups of 4 (the last group has ng % 4 heads); positions and chunks
 *   left over by a tile's width use narrower instances of the same tile.
 * - hd not a multiple of 8: the last chunk is zero-padded (masked / copied loads, masked
 *   store), so it goes through the same vector code; padded lanes contribute exact zeros.
 * - Fixed per-element arithmetic (results do not depend on ng, npos, ld, the tiling, the
 *   blocking or the caller's thread):
 *   - scores: lane l of the accumulator sums K[8c+l]*q[8c+l] over chunks c = 0, 1, ... in order
 *     (one FMA each, the padded chunk last), then ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), then one
 *     multiply by scale. Float accumulation: differs from the double-accumulating reference by
 *     rounding (~hd/8 + 3 float roundings relative to sum |terms|).
 *   - values: each output element starts at 0 and takes one FMA per position, in position
 *     order; this is exactly the reference's fmaf sequence, so values match attn_ref.c bit for
 *     bit (F16 -> float conversion is exact in both).
 * - Prefetch: during the first head group's pass over a block, the next block's row slices
 *   are prefetched (each line once). In decode the KV cache of a long context comes from L3 or
 *   DRAM (each layer's cache is read once per token), and interleaved heads make the slices
 *   strided, which the hardware prefetchers follow poorly (not at all across 4 KiB pages).
 *   Measured on Zen 3 (1-4 KiB strides, cold): scores 13-30% faster, values ~20% faster;
 *   when the data is already in L2 it costs ~10% (scores) and 15-20% (values).
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/attn_simd.h"
#include "kern/kern_impl.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")

enum { ATT_HEADS = 4 }; /* query heads per group */

/* ---- loads -------------------------------------------------------------------------------- */

/* Lanes < r set (r in 1..7). */
AI __m256i lane_mask(int r) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(r), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Elements i .. i+7 of a KV row as floats. */
AI __m256 kv_load8(enum nx_type kvt, const char *row, int64_t i) {
    if (kvt == NX_TYPE_F32) return _mm256_loadu_ps((const float *)row + i);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const nx_half *)row + i)));
}

/* Elements i .. i+r-1 (r in 1..7) of a KV row as floats, upper lanes zero; reads nothing past
 * element i+r-1. */
AI __m256 kv_load_part(enum nx_type kvt, const char *row, int64_t i, int r) {
    if (kvt == NX_TYPE_F32) return _mm256_maskload_ps((const float *)row + i, lane_mask(r));
    nx_half h[8] = {0};
    memcpy(h, (const nx_half *)row + i, (size_t)r * sizeof(nx_half));
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h));
}

/*
 * Positions per block for rows `stride` bytes apart. Strides that are multiples of a large
 * power of two (the usual KV rows: n_head_kv * hd * elt) map the rows' cache lines onto few
 * L1 sets: with 64-byte lines and 64 sets (32 KiB, 8-way), the same offset of consecutive rows
 * cycles through only `period` sets, i.e. 8 * period rows fit. A block takes half of that
 * (the other half for the next block being prefetched), between 8 and 64 rows.
 */
static inline int64_t att_block(size_t stride) {
    size_t lines = stride % 64 ? 1 : stride / 64 % 64; /* set step per row (unaligned: ~1) */
    int64_t period = 64;
    if (lines == 0) period = 1;
    else
        while (period > 1 && lines % 2 == 0) period /= 2, lines /= 2;
    return NX_MAX((int64_t)8, NX_MIN((int64_t)64, 4 * period));
}

/* ---- scores ------------------------------------------------------------------------------- */

/* Lane t of the result = horizontal sum of a[t], as ((x0+x1)+(x2+x3))+((x4+x5)+(x6+x7)). */
AI __m256 hsum_8x8(const __m256 a[8]) {
    __m256 h01 = _mm256_hadd_ps(a[0], a[1]), h23 = _mm256_hadd_ps(a[2], a[3]);
    __m256 h45 = _mm256_hadd_ps(a[4], a[5]), h67 = _mm256_hadd_ps(a[6], a[7]);
    /* per 128-bit lane: the four partial sums of a[0..3] (resp. a[4..7]) over that lane */
    __m256 h03 = _mm256_hadd_ps(h01, h23), h47 = _mm256_hadd_ps(h45, h67);
    return _mm256_add_ps(_mm256_permute2f128_ps(h03, h47, 0x20),
                         _mm256_permute2f128_ps(h03, h47, 0x31));
}

/*
 * NG heads x NP positions: s[g*ld + p] = scale * dot(q + g*hd, row p), rows k + p*ks.
 * Accumulator of (g, p) is a[p*NG + g]; unused ones stay zero.
 */
AI void sc_tile(enum nx_type kvt, const int NG, const int NP, int64_t hd, const char *k,
                size_t ks, const float *q, float scale, float *s, int64_t ld) {
    __m256 a[8];
    UNROLL for (int t = 0; t < 8; t++) a[t] = _mm256_setzero_ps();
    int64_t i = 0;
    /* unrolled: each load instruction then sees one constant stride from tile to tile, which
     * the hardware stride prefetcher follows (15-25% faster on a cold cache, Zen 3) */
    _Pragma("GCC unroll 16")
    for (; i + 8 <= hd; i += 8) {
        __m256 qv[ATT_HEADS];
        UNROLL for (int g = 0; g < NG; g++) qv[g] = _mm256_loadu_ps(q + g * hd + i);
        UNROLL for (int p = 0; p < NP; p++) {
            __m256 kv = kv_load8(kvt, k + (size_t)p * ks, i);
            UNROLL for (int g = 0; g < NG; g++) {
                a[p * NG + g] = _mm256_fmadd_ps(kv, qv[g], a[p * NG + g]);
            }
        }
    }
    if (i < hd) {
        int r = (int)(hd - i);
        __m256i m = lane_mask(r);
        __m256 qv[ATT_HEADS];
        UNROLL for (int g = 0; g < NG; g++) qv[g] = _mm256_maskload_ps(q + g * hd + i, m);
        UNROLL for (int p = 0; p < NP; p++) {
            __m256 kv = kv_load_part(kvt, k + (size_t)p * ks, i, r);
            UNROLL for (int g = 0; g < NG; g++) {
                a[p * NG + g] = _mm256_fmadd_ps(kv, qv[g], a[p * NG + g]);
            }
        }
    }
    float o[8];
    _mm256_storeu_ps(o, _mm256_mul_ps(hsum_8x8(a), _mm256_set1_ps(scale)));
    UNROLL for (int p = 0; p < NP; p++) {
        UNROLL for (int g = 0; g < NG; g++) s[g * ld + p] = o[p * NG + g];
    }
}

/* n positions (rows k + j*ks) for NG heads, NP at a time, leftovers 4, 2, 1 at a time. When
 * pf is not NULL, the slices (slice_bytes long) of rows pf + j*ks, j < npf, are prefetched as
 * positions j are reached, and so are the rows a0 + j of ahead into L2. */
AI void sc_run(enum nx_type kvt, const int NG, const int NP, int64_t hd, const char *k, size_t ks,
               int64_t n, const float *q, float scale, float *s, int64_t ld, const char *pf,
               int64_t npf, size_t slice_bytes, const struct att_ahead *ahead, int64_t a0) {
    int64_t j = 0;
    for (; j + NP <= n; j += NP) {
        if (pf) {
            UNROLL for (int p = 0; p < NP; p++)
                if (j + p < npf) prefetch_span(pf + (size_t)(j + p) * ks, slice_bytes);
        }
        prefetch_ahead(ahead, a0 + j, NP, slice_bytes);
        sc_tile(kvt, NG, NP, hd, k + (size_t)j * ks, ks, q, scale, s + j, ld);
    }
    /* leftovers: only at the end of npos (blocks are multiples of 8), nothing to prefetch */
    if (NP > 4 && j + 4 <= n) {
        sc_tile(kvt, NG, 4, hd, k + (size_t)j * ks, ks, q, scale, s + j, ld);
        j += 4;
    }
    if (NP > 2 && j + 2 <= n) {
        sc_tile(kvt, NG, 2, hd, k + (size_t)j * ks, ks, q, scale, s + j, ld);
        j += 2;
    }
    if (NP > 1 && j < n) sc_tile(kvt, NG, 1, hd, k + (size_t)j * ks, ks, q, scale, s + j, ld);
}

/* nk: when not NULL, the nn rows nk + j*ks (the next rows the caller will read) are prefetched
 * during the pass over the last block of positions; ahead (NULL: none) into L2 during the first
 * head group's passes, its row j with position j. */
AI void sc_all(enum nx_type kvt, int64_t hd, const char *k, size_t ks, int64_t npos,
               const float *q, int64_t ng, float scale, float *scores, int64_t ld, const char *nk,
               int64_t nn, const struct att_ahead *ahead) {
    const size_t slice = (size_t)hd * (kvt == NX_TYPE_F32 ? 4 : 2);
    const int64_t bl = att_block(ks);
    for (int64_t j0 = 0; j0 < npos; j0 += bl) {
        int64_t n = NX_MIN(npos - j0, bl);
        const char *kj = k + (size_t)j0 * ks;
        for (int64_t g0 = 0; g0 < ng; g0 += ATT_HEADS) {
            const float *qg = q + g0 * hd;
            float *sg = scores + g0 * ld + j0;
            /* prefetch during the first head group's pass, only rows that exist: the next
               block of this call, else (last block) the caller's next rows */
            const char *pf = NULL;
            int64_t npf = 0;
            if (g0 == 0 && j0 + 2 * bl <= npos) pf = kj + (size_t)bl * ks, npf = bl;
            else if (g0 == 0 && j0 + bl >= npos && nk) pf = nk, npf = nn;
            const struct att_ahead *ah = g0 == 0 ? ahead : NULL;
#define SC_RUN(NG, NP) sc_run(kvt, NG, NP, hd, kj, ks, n, qg, scale, sg, ld, pf, npf, slice, ah, j0)
            switch (NX_MIN(ng - g0, (int64_t)ATT_HEADS)) {
            case 4: SC_RUN(4, 2); break;
            case 3: SC_RUN(3, 2); break;
            case 2: SC_RUN(2, 4); break;
            default: SC_RUN(1, 8); break;
            }
#undef SC_RUN
        }
    }
}

/* sc_all per KV type (also the fused driver's scores kernels, struct att_chunk_fns) */
static void sc_f32(int64_t hd, const char *k, size_t ks, int64_t npos, const float *q, int64_t ng,
                   float scale, float *scores, int64_t ld, const char *nk, int64_t nn,
                   const struct att_ahead *ahead) {
    sc_all(NX_TYPE_F32, hd, k, ks, npos, q, ng, scale, scores, ld, nk, nn, ahead);
}

static void sc_f16(int64_t hd, const char *k, size_t ks, int64_t npos, const float *q, int64_t ng,
                   float scale, float *scores, int64_t ld, const char *nk, int64_t nn,
                   const struct att_ahead *ahead) {
    sc_all(NX_TYPE_F16, hd, k, ks, npos, q, ng, scale, scores, ld, nk, nn, ahead);
}

void kern_avx2_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                           int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                           int64_t ld) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (kvt == NX_TYPE_F32) sc_f32(hd, k, k_stride, npos, q, ng, scale, scores, ld, NULL, 0, NULL);
    else sc_f16(hd, k, k_stride, npos, q, ng, scale, scores, ld, NULL, 0, NULL);
}

/* ---- values ------------------------------------------------------------------------------- */

/*
 * NG heads x NC chunks of 8 elements, over n positions (rows v + j*vs, already offset to the
 * chunk): o[g*os + 8c + l] (+)= sum_j p[g*ld + j] * row_j[8c + l]. first: start from zero,
 * else from o. r > 0: a single partial chunk of r elements (NC == 1). Per position j < npf, the
 * bytes at pf + j*vs are prefetched at offsets 0, 64, .. (pfn of them) and, when pfe, at
 * offset span - 1 (the chunk's last byte).
 */
AI void va_tile(enum nx_type kvt, const int NG, const int NC, int r, const char *v, size_t vs,
                int64_t n, const float *p, int64_t ld, float *o, int64_t os, bool first, int pfn,
                bool pfe, const char *pf, int64_t npf) {
    const int span = (r ? r : 8 * NC) * (kvt == NX_TYPE_F32 ? 4 : 2);
    __m256 a[ATT_HEADS][8];
    const __m256i m = lane_mask(r);
    UNROLL for (int g = 0; g < NG; g++) {
        UNROLL for (int c = 0; c < NC; c++) {
            if (first) a[g][c] = _mm256_setzero_ps();
            else if (r) a[g][c] = _mm256_maskload_ps(o + g * os + 8 * c, m);
            else a[g][c] = _mm256_loadu_ps(o + g * os + 8 * c);
        }
    }
    for (int64_t j = 0; j < n; j++) {
        const char *row = v + (size_t)j * vs;
        if (j < npf) {
            const char *f = pf + (size_t)j * vs;
            for (int l = 0; l < pfn; l++) _mm_prefetch(f + 64 * l, _MM_HINT_T0);
            if (pfe) _mm_prefetch(f + span - 1, _MM_HINT_T0);
        }
        __m256 b[ATT_HEADS];
        UNROLL for (int g = 0; g < NG; g++) b[g] = _mm256_broadcast_ss(p + g * ld + j);
        UNROLL for (int c = 0; c < NC; c++) {
            __m256 x = r ? kv_load_part(kvt, row, 0, r) : kv_load8(kvt, row, 8 * c);
            UNROLL for (int g = 0; g < NG; g++) a[g][c] = _mm256_fmadd_ps(b[g], x, a[g][c]);
        }
    }
    UNROLL for (int g = 0; g < NG; g++) {
        UNROLL for (int c = 0; c < NC; c++) {
            if (r) _mm256_maskstore_ps(o + g * os + 8 * c, m, a[g][c]);
            else _mm256_storeu_ps(o + g * os + 8 * c, a[g][c]);
        }
    }
}

/*
 * All of hd for NG heads (rows of o os apart) over one block of n positions: NC chunks at a
 * time, leftover chunks 4, 2, 1 at a time, then the partial chunk. When pf is not NULL, the
 * slices of rows pf + j*vs (j < npf) are prefetched, each cache line once: the tiles whose
 * chunk starts at a multiple of 64 bytes into the slice prefetch every 64 bytes of their span
 * (tiles go by decreasing width, so each starts at a multiple of its own width and every
 * 64-byte offset is some tile's start or inside a tile of >= 64 bytes), and the last tile the
 * slice's last byte when rows are not 64-byte aligned (the slice then touches one more line).
 */
AI void va_run(enum nx_type kvt, const int NG, const int NC, int64_t hd, const char *v, size_t vs,
               int64_t n, const float *p, int64_t ld, float *o, int64_t os, bool first,
               const char *pf, int64_t npf) {
    const int64_t elt = kvt == NX_TYPE_F32 ? 4 : 2;
    const bool unaligned = ((uintptr_t)(pf ? pf : v) | vs) & 63;
    int64_t i = 0;
#define VA(nc_, r_) \
    do { \
        int64_t span_ = (r_ ? r_ : 8 * nc_) * elt, off_ = i * elt; \
        int pfn_ = pf && off_ % 64 == 0 ? (int)((span_ + 63) / 64) : 0; \
        bool pfe_ = pf && unaligned && off_ + span_ == hd * elt; \
        va_tile(kvt, NG, nc_, r_, v + off_, vs, n, p, ld, o + i, os, first, pfn_, pfe_, \
                pf ? pf + off_ : NULL, pf ? npf : 0); \
    } while (0)
    for (; i + 8 * NC <= hd; i += 8 * NC) VA(NC, 0);
    if (NC > 4 && i + 32 <= hd) {
        VA(4, 0);
        i += 32;
    }
    if (NC > 2 && i + 16 <= hd) {
        VA(2, 0);
        i += 16;
    }
    if (NC > 1 && i + 8 <= hd) {
        VA(1, 0);
        i += 8;
    }
    if (i < hd) VA(1, (int)(hd - i));
#undef VA
}

/* Rows of out os apart; acc: add to out (else overwrite it). nv: as sc_all's nk (the caller's
 * next nn rows). */
AI void va_all(enum nx_type kvt, int64_t hd, const char *v, size_t vs, int64_t npos,
               const float *p, int64_t ld, int64_t ng, float *out, int64_t os, bool acc,
               const char *nv, int64_t nn) {
    const int64_t bl = att_block(vs);
    for (int64_t j0 = 0; j0 < npos; j0 += bl) {
        int64_t n = NX_MIN(npos - j0, bl);
        const char *vj = v + (size_t)j0 * vs;
        bool first = !acc && j0 == 0;
        for (int64_t g0 = 0; g0 < ng; g0 += ATT_HEADS) {
            const float *pg = p + g0 * ld + j0;
            float *og = out + g0 * os;
            /* prefetch the next block during the first head group's pass, if it is whole; in
               the last block, the caller's next rows */
            const char *pf = NULL;
            int64_t npf = 0;
            if (g0 == 0 && j0 + 2 * bl <= npos) pf = vj + (size_t)bl * vs, npf = bl;
            else if (g0 == 0 && j0 + bl >= npos && nv) pf = nv, npf = nn;
            switch (NX_MIN(ng - g0, (int64_t)ATT_HEADS)) {
            case 4: va_run(kvt, 4, 2, hd, vj, vs, n, pg, ld, og, os, first, pf, npf); break;
            case 3: va_run(kvt, 3, 2, hd, vj, vs, n, pg, ld, og, os, first, pf, npf); break;
            case 2: va_run(kvt, 2, 4, hd, vj, vs, n, pg, ld, og, os, first, pf, npf); break;
            default: va_run(kvt, 1, 8, hd, vj, vs, n, pg, ld, og, os, first, pf, npf); break;
            }
        }
    }
}

static void va_f32(int64_t hd, const char *v, size_t vs, int64_t npos, const float *p, int64_t ld,
                   int64_t ng, float *out) {
    va_all(NX_TYPE_F32, hd, v, vs, npos, p, ld, ng, out, hd, false, NULL, 0);
}

static void va_f16(int64_t hd, const char *v, size_t vs, int64_t npos, const float *p, int64_t ld,
                   int64_t ng, float *out) {
    va_all(NX_TYPE_F16, hd, v, vs, npos, p, ld, ng, out, hd, false, NULL, 0);
}

void kern_avx2_attn_values(enum nx_type kvt, int64_t hd, const void *v, size_t v_stride,
                           int64_t npos, const float *p, int64_t ld, int64_t ng, float *out) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (ng <= 0 || hd <= 0) return;
    if (npos <= 0) {
        memset(out, 0, (size_t)(ng * hd) * sizeof(float));
        return;
    }
    if (kvt == NX_TYPE_F32) va_f32(hd, v, v_stride, npos, p, ld, ng, out);
    else va_f16(hd, v, v_stride, npos, p, ld, ng, out);
}

/* ---- fused attention (kern_attn_block, kern_attn_blocks) ----------------------------------- */

/* The values added to the running state, or written to it for the first chunk (the fused
 * driver's values kernels). */
static void va_add_f32(int64_t hd, const char *v, size_t vs, int64_t n, const float *p, int64_t ld,
                       int64_t ng, float *o, int64_t os, bool first, const char *nv, int64_t nn) {
    va_all(NX_TYPE_F32, hd, v, vs, n, p, ld, ng, o, os, !first, nv, nn);
}

static void va_add_f16(int64_t hd, const char *v, size_t vs, int64_t n, const float *p, int64_t ld,
                       int64_t ng, float *o, int64_t os, bool first, const char *nv, int64_t nn) {
    va_all(NX_TYPE_F16, hd, v, vs, n, p, ld, ng, o, os, !first, nv, nn);
}

/* attn_simd.h's driver (chunks, online softmax, head groups, block prefetch) around sc_all and
 * va_all; hd > KERN_ATTN_MAX_HD runs the reference. */
static const struct att_chunk_fns g_fused_f32 = {sc_f32, va_add_f32, 4};
static const struct att_chunk_fns g_fused_f16 = {sc_f16, va_add_f16, 2};

void kern_avx2_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                          const void *v, size_t v_stride, int64_t npos, const float *q, int64_t ng,
                          float scale, float *part) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (hd > KERN_ATTN_MAX_HD) {
        kern_ref_attn_block(kvt, hd, k, k_stride, v, v_stride, npos, q, ng, scale, part);
        return;
    }
    att_fused_heads(kvt == NX_TYPE_F32 ? &g_fused_f32 : &g_fused_f16, hd, k, k_stride, v, v_stride,
                    npos, q, ng, scale, part, NULL, NULL, 0, NULL, true);
}

void kern_avx2_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k, const void *const *v,
                           size_t stride, int64_t nblk, int64_t brows, int64_t npos, const float *q,
                           int64_t ng, float scale, float *parts) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (hd > KERN_ATTN_MAX_HD) {
        kern_ref_attn_blocks(kvt, hd, k, v, stride, nblk, brows, npos, q, ng, scale, parts);
        return;
    }
    att_fused_blocks(kvt == NX_TYPE_F32 ? &g_fused_f32 : &g_fused_f16, hd, k, v, stride, nblk, brows,
                     npos, q, ng, scale, parts, ng * (hd + 2));
}

/* kern_attn_merge for the SIMD sets: exp1 for the part weights, FMA for the sums. */
void kern_avx2_attn_merge(int64_t hd, int64_t ng, int64_t nparts, const float *parts, float *out) {
    const int64_t rec = ng * (hd + 2);
    for (int64_t g = 0; g < ng; g++) {
        float *o = out + g * hd;
        float mx = -INFINITY;
        for (int64_t b = 0; b < nparts; b++) {
            float mb = parts[b * rec + g * (hd + 2)];
            mx = mb > mx ? mb : mx;
        }
        memset(o, 0, sizeof(float) * (size_t)hd);
        float lsum = 0.0f;
        for (int64_t b = 0; b < nparts; b++) {
            const float *pb = parts + b * rec + g * (hd + 2);
            if (pb[0] == -INFINITY) continue; /* empty part */
            float w = exp1(pb[0] - mx);
            lsum = fmaf(w, pb[1], lsum);
            __m256 wv = _mm256_set1_ps(w);
            int64_t i = 0;
            for (; i + 8 <= hd; i += 8)
                _mm256_storeu_ps(o + i, _mm256_fmadd_ps(wv, _mm256_loadu_ps(pb + 2 + i), _mm256_loadu_ps(o + i)));
            for (; i < hd; i++) o[i] = fmaf(w, pb[2 + i], o[i]);
        }
        float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
        __m256 iv = _mm256_set1_ps(inv);
        int64_t i = 0;
        for (; i + 8 <= hd; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), iv));
        for (; i < hd; i++) o[i] *= inv;
    }
}
