/*
 * attn_avx512.c - the AVX-512 set's attention kernels: kern_attn_scores, kern_attn_block and
 * kern_attn_blocks for F32 and F16 KV caches (16-lane FMA tiles). Compiled with the AVX-512
 * flags; only called after dispatch.c has checked the CPU. kern_attn_values, the softmax and
 * the merge are the AVX2 ones (values: the same FMA sequence per element either way; the
 * fused softmax step takes exp 16 lanes at a time here, exp8's bits per lane).
 *
 * DESIGN
 * - Head dims: multiples of 16 up to KERN_ATTN_MAX_HD (64 and 128 in the models served);
 *   others go to the AVX2 kernels (own_hd), so no chunk here is partial.
 * - Scores: tiles of 4 heads x 8 positions with a lane per (head, element mod 4): the four
 *   queries interleaved by 4 elements once per call (sc_prep_q: vector j holds elements
 *   4j..4j+3 of each head, one 128-bit lane per head), each K row converted to floats once
 *   (vcvtph2ps) and its elements 4j..4j+3 broadcast to the four lanes (vbroadcastf32x4), one
 *   FMA per (position, j) doing 4 heads x 4 elements: 8 accumulators, hd/4 FMAs each. Then
 *   two tree levels (tree_l1, tree_l2: 9 instructions per 4 positions) leave one vector of 4
 *   heads x 4 positions, scaled by one multiply. (Session 20: a lane per element needed a
 *   16-way transposing tree, 45 instructions per 16 dots, most of them on the shuffle port.)
 *   A group with fewer heads repeats its last one, a tile with fewer positions its last row;
 *   repeated results are not stored, so every dot goes through the same instructions
 *   wherever it sits.
 * - Fixed per-element arithmetic (results do not depend on ng, npos, ld, tiling or thread):
 *   lane i of a dot's accumulator sums K[4j+i]*q[4j+i] over j = 0, 1, .. in order (one FMA
 *   each), then ((l0+l2)+(l1+l3)), then one multiply by scale. Float accumulation: differs
 *   from the double-accumulating reference by rounding (~hd/4 + 2 float roundings relative to
 *   sum |terms|) and from the AVX2 set's scores in rounding only.
 * - Values (fused): tiles of up to 4 heads x 4 chunks of 16 (16 accumulators) over the chunk's
 *   positions: per position 4 broadcasts of p, 4 V loads (converted once for all heads), 16
 *   FMAs. Each output element starts at 0 and takes one FMA per position in order, exactly the
 *   reference's sequence.
 * - Fused attention (kern_attn_block(s)): attn_simd.h's driver, the AVX2 set's too (chunks of
 *   KERN_ATTN_CHUNK positions, the online-softmax step, head groups, block prefetch), around
 *   this file's scores and values.
 * - Wide calls (>= WIDE_MIN_HEADS query rows per KV head: a prompt's attention tiles, several
 *   tokens x the heads of a group): each chunk's K rows converted once and transposed (a lane
 *   per position), its V rows converted once, then register tiles of 6 rows x 16 positions
 *   (scores, 24 accumulators) and 5 rows x 64 elements (values) over them, with the same
 *   operations per score and per output element as the tiles above (bit-identical parts).
 *   One thread, 32 rows of hd 64 over 4096 F16 positions (dev/bench_attn.c, Zen 5, old and
 *   new alternated): 2.7-2.8 -> 2.0-2.1 ns per (position x row) hot, 3.4-3.5 -> 2.8-2.9 from
 *   DRAM, for the whole fused attention (the AVX2 set's: 3.3-3.5 hot).
 * - Testing without AVX-512 hardware: with -DNX_AVX512_EMULATE this file includes
 *   kern/avx512_emu.h (see that header; tests/test_attn.c has the command).
 */
#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#ifdef NX_AVX512_EMULATE
#include "kern/avx512_emu.h"
#endif
#define NX_KERN_AVX512 1 /* attn_simd.h's softmax step in 16 lanes (exp16) */

#include "core/nx_base.h"
#include "kern/attn_simd.h"
#include "kern/kern_impl.h"
#include "kern/tree512.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

enum {
    HG = 4,          /* heads per score / value tile */
    SC_PB = 8,       /* positions per score tile */
    CT = 4,          /* 16-element chunks per value tile */
};

/* Head dims this file's kernels take: whole 16-element chunks up to KERN_ATTN_MAX_HD. Others
 * (hd 8: stories260K; odd sizes) go to the AVX2 kernels, whose 8-lane chunks suit them better
 * than 16-lane ones half empty, and those send hd > KERN_ATTN_MAX_HD to the reference. */
static inline bool own_hd(int64_t hd) { return hd > 0 && hd % 16 == 0 && hd <= KERN_ATTN_MAX_HD; }

/* ---- loads -------------------------------------------------------------------------------- */

/* Elements i .. i+15 of a KV row as floats. */
AI __m512 kv16(enum nx_type kvt, const char *row, int64_t i) {
    if (kvt == NX_TYPE_F32) return _mm512_loadu_ps((const float *)row + i);
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const nx_half *)row + i)));
}

/* ---- scores ------------------------------------------------------------------------------- */

/*
 * Scores, SC_PB positions at a time for up to four heads, with a lane per (head, element mod 4)
 * rather than a lane per element: qz (sc_prep_q) holds, for j < hd/4, elements 4j..4j+3 of
 * the four queries, a 128-bit lane per head, prepared once per call of this file's entry
 * points (not per KV block); each K row is converted to floats once (kf) and
 * its elements 4j..4j+3 are broadcast to the four lanes, so one FMA does four heads x four
 * elements, and a score is its lane's four partial sums added, ((a0 + a2) + (a1 + a3))
 * (tree_l1, tree_l2), times scale. A 16-lane layout needs a 16-way horizontal sum per score
 * (tree16: ~3 shuffle-port operations per score against ~0.6 here). Fewer than four heads fill
 * the spare lanes with the last one: a head's bits do not depend on the others in its group.
 */
enum { SC_QZ_FLOATS = 8192 }; /* prepared queries per slice of heads (32 KiB, on the stack) */
enum { SC_AHEAD = 16 };        /* kern_attn_scores: how many positions ahead it prefetches */

/* The ng heads of q (rows hd apart) in the scores' layout, ceil(ng/4)*4*hd floats: group g0
 * (a multiple of 4) at qz + g0*hd, its vector j holding elements 4j..4j+3 of each of its heads;
 * a group of fewer than four repeats its last head. */
AI void sc_prep_q(int64_t hd, const float *q, int64_t ng, float *qz) {
    for (int64_t g0 = 0; g0 < ng; g0 += 4) {
        const int64_t last = NX_MIN(ng - g0, (int64_t)4) - 1;
        for (int64_t j = 0; j < hd / 4; j++) {
            UNROLL for (int g = 0; g < 4; g++) {
                const float *qg = q + (g0 + NX_MIN((int64_t)g, last)) * hd;
                _mm_storeu_ps(qz + g0 * hd + 16 * j + 4 * g, _mm_loadu_ps(qg + 4 * j));
            }
        }
    }
}

/* Heads per slice of an entry point's call: as many as SC_QZ_FLOATS holds, a multiple of 4
 * (at least 4: hd <= KERN_ATTN_MAX_HD). */
static inline int64_t sc_slice_heads(int64_t hd) { return SC_QZ_FLOATS / (4 * hd) * 4; }

/* s[g*ld + p] = scale * dot(query g, row p) for g < ngv, p < np (both from 1: ngv <= 4,
 * np <= SC_PB), rows k + p*ks. */
AI void sc_tile(enum nx_type kvt, int64_t hd, const char *k, size_t ks, int np, const float *qz,
                int ngv, float scale, float *s, int64_t ld) {
    float kf[SC_PB * KERN_ATTN_MAX_HD] __attribute__((aligned(64)));
    const float *kr[SC_PB];
    if (np < 1) return;
    UNROLL for (int p = 0; p < SC_PB; p++) {
        const char *row = k + (size_t)p * ks;
        if (p >= np) {
            kr[p] = kr[p - 1]; /* a short tile repeats its last row */
        } else if (kvt == NX_TYPE_F32) {
            kr[p] = (const float *)row;
        } else {
            for (int64_t i = 0; i < hd; i += 16)
                _mm512_storeu_ps(kf + p * hd + i, kv16(kvt, row, i));
            kr[p] = kf + p * hd;
        }
    }
    __m512 a[SC_PB];
    UNROLL for (int p = 0; p < SC_PB; p++) a[p] = _mm512_setzero_ps();
    for (int64_t j = 0; j < hd / 4; j++) {
        __m512 qv = _mm512_loadu_ps(qz + 16 * j);
        UNROLL for (int p = 0; p < SC_PB; p++)
            a[p] = _mm512_fmadd_ps(qv, _mm512_broadcast_f32x4(_mm_loadu_ps(kr[p] + 4 * j)), a[p]);
    }
    const __m512 vs = _mm512_set1_ps(scale);
    UNROLL for (int p0 = 0; p0 < SC_PB; p0 += 4) {
        if (p0 >= np) break;
        /* lane 4g + i: head g, position p0 + i */
        __m512 t = tree_l2(tree_l1(a[p0], a[p0 + 1]), tree_l1(a[p0 + 2], a[p0 + 3]));
        __m512 r = _mm512_mul_ps(t, vs);
        if (np - p0 >= 4 && ngv == 4) {
            _mm_storeu_ps(s + p0, _mm512_extractf32x4_ps(r, 0));
            _mm_storeu_ps(s + ld + p0, _mm512_extractf32x4_ps(r, 1));
            _mm_storeu_ps(s + 2 * ld + p0, _mm512_extractf32x4_ps(r, 2));
            _mm_storeu_ps(s + 3 * ld + p0, _mm512_extractf32x4_ps(r, 3));
        } else {
            float o[16];
            _mm512_storeu_ps(o, r);
            for (int g = 0; g < ngv; g++)
                for (int i = 0; i < np - p0 && i < 4; i++) s[g * ld + p0 + i] = o[4 * g + i];
        }
    }
}

/*
 * Scores of n positions (rows k + j*ks) for ng heads (qz: prepared by sc_prep_q) into s (row g
 * at s + g*ld), heads four at a time. When pf is not NULL, the slices of rows pf + j*ks (j < npf)
 * are prefetched as the first head group reaches positions j, and so are the rows j of ahead
 * into L2.
 */
AI void sc_all(enum nx_type kvt, int64_t hd, const char *k, size_t ks, int64_t n, const float *qz,
               int64_t ng, float scale, float *s, int64_t ld, const char *pf, int64_t npf,
               const struct att_ahead *ahead) {
    const size_t slice = (size_t)hd * (kvt == NX_TYPE_F32 ? 4 : 2);
    for (int64_t g0 = 0; g0 < ng; g0 += HG) {
        int ngv = (int)NX_MIN(ng - g0, (int64_t)HG);
        for (int64_t j = 0; j < n; j += SC_PB) {
            if (g0 == 0 && pf) {
                for (int64_t p = j; p < j + SC_PB && p < npf; p++)
                    prefetch_span(pf + (size_t)p * ks, slice);
            }
            if (g0 == 0) prefetch_ahead(ahead, j, SC_PB, slice);
            int np = (int)NX_MIN(n - j, (int64_t)SC_PB);
            sc_tile(kvt, hd, k + (size_t)j * ks, ks, np, qz + g0 * hd, ngv, scale, s + g0 * ld + j,
                    ld);
        }
    }
}

/* sc_all per KV type, the queries prepared (also the fused driver's scores kernels: the entry
 * points below hand the driver prepared queries, whose head g, a multiple of 4, is at
 * q + g*hd as in the plain layout) */
static void sc_f32(int64_t hd, const char *k, size_t ks, int64_t n, const float *q, int64_t ng,
                   float scale, float *s, int64_t ld, const char *pf, int64_t npf,
                   const struct att_ahead *ahead) {
    sc_all(NX_TYPE_F32, hd, k, ks, n, q, ng, scale, s, ld, pf, npf, ahead);
}

static void sc_f16(int64_t hd, const char *k, size_t ks, int64_t n, const float *q, int64_t ng,
                   float scale, float *s, int64_t ld, const char *pf, int64_t npf,
                   const struct att_ahead *ahead) {
    sc_all(NX_TYPE_F16, hd, k, ks, n, q, ng, scale, s, ld, pf, npf, ahead);
}

void kern_avx512_attn_scores(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                             int64_t npos, const float *q, int64_t ng, float scale, float *scores,
                             int64_t ld) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (!own_hd(hd)) {
        kern_avx2_attn_scores(kvt, hd, k, k_stride, npos, q, ng, scale, scores, ld);
        return;
    }
    if (ng <= 0 || npos <= 0) return;
    float qz[SC_QZ_FLOATS] __attribute__((aligned(64)));
    for (int64_t g0 = 0, step = sc_slice_heads(hd); g0 < ng; g0 += step) {
        int64_t n = NX_MIN(step, ng - g0);
        sc_prep_q(hd, q + g0 * hd, n, qz);
        /* rows SC_AHEAD positions on prefetched as the pass reaches each position (the
           AVX2 scores prefetch their next block the same way) */
        const char *pf = npos > SC_AHEAD ? (const char *)k + (size_t)SC_AHEAD * k_stride : NULL;
        (kvt == NX_TYPE_F32 ? sc_f32 : sc_f16)(hd, k, k_stride, npos, qz, n, scale,
                                               scores + g0 * ld, ld, pf, pf ? npos - SC_AHEAD : 0,
                                               NULL);
    }
}

/* ---- values ------------------------------------------------------------------------------- */

/*
 * NG heads x NC chunks of 16 (v, o already offset to the first chunk), over n positions (rows
 * v + j*vs): o[g*os + 16c + l] += sum_j p[g*ld + j] * row_j[16c + l]. When pf is not NULL,
 * the slice (slice bytes) of row pf + j*vs is prefetched at position j < npf.
 */
AI void va_tile(enum nx_type kvt, const int NG, const int NC, const char *v, size_t vs,
                int64_t n, const float *p, int64_t ld, float *o, int64_t os, bool first,
                const char *pf, int64_t npf, size_t slice) {
    __m512 a[HG][CT];
    UNROLL for (int g = 0; g < NG; g++) {
        UNROLL for (int c = 0; c < NC; c++)
            a[g][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(o + g * os + 16 * c);
    }
    for (int64_t j = 0; j < n; j++) {
        const char *row = v + (size_t)j * vs;
        if (j < npf) prefetch_span(pf + (size_t)j * vs, slice);
        __m512 b[HG];
        UNROLL for (int g = 0; g < NG; g++) b[g] = _mm512_set1_ps(p[g * ld + j]);
        UNROLL for (int c = 0; c < NC; c++) {
            __m512 x = kv16(kvt, row, 16 * c);
            UNROLL for (int g = 0; g < NG; g++) a[g][c] = _mm512_fmadd_ps(b[g], x, a[g][c]);
        }
    }
    UNROLL for (int g = 0; g < NG; g++) {
        UNROLL for (int c = 0; c < NC; c++) _mm512_storeu_ps(o + g * os + 16 * c, a[g][c]);
    }
}

/* All of hd for NG heads: CT chunks at a time, then the leftover chunks. The first tile
 * carries the prefetch (pf, npf). */
AI void va_run(enum nx_type kvt, const int NG, int64_t hd, const char *v, size_t vs, int64_t n,
               const float *p, int64_t ld, float *o, int64_t os, bool first, const char *pf,
               int64_t npf) {
    const int64_t elt = kvt == NX_TYPE_F32 ? 4 : 2;
    const size_t slice = (size_t)(hd * elt);
    int64_t i = 0;
#define VA(nc_) \
    va_tile(kvt, NG, nc_, v + i * elt, vs, n, p, ld, o + i, os, first, i == 0 ? pf : NULL, \
            i == 0 ? npf : 0, slice)
    for (; i + 16 * CT <= hd; i += 16 * CT) VA(CT);
    switch ((hd - i) / 16) {
    case 3: VA(3); break;
    case 2: VA(2); break;
    case 1: VA(1); break;
    default: break;
    }
#undef VA
}

/* Values of n positions for ng heads added to o (row g at o + g*os), or written there when
 * first. */
AI void va_all(enum nx_type kvt, int64_t hd, const char *v, size_t vs, int64_t n, const float *p,
               int64_t ld, int64_t ng, float *o, int64_t os, bool first, const char *pf,
               int64_t npf) {
    for (int64_t g0 = 0; g0 < ng; g0 += HG) {
        const float *pg = p + g0 * ld;
        float *og = o + g0 * os;
        const char *f = g0 == 0 ? pf : NULL;
        int64_t nf = g0 == 0 ? npf : 0;
        switch (NX_MIN(ng - g0, (int64_t)HG)) {
        case 4: va_run(kvt, 4, hd, v, vs, n, pg, ld, og, os, first, f, nf); break;
        case 3: va_run(kvt, 3, hd, v, vs, n, pg, ld, og, os, first, f, nf); break;
        case 2: va_run(kvt, 2, hd, v, vs, n, pg, ld, og, os, first, f, nf); break;
        default: va_run(kvt, 1, hd, v, vs, n, pg, ld, og, os, first, f, nf); break;
        }
    }
}

/* ---- wide calls: many query rows per KV head (prompt tiles) -------------------------------- */

/*
 * A prompt's attention hands kern_attn_blocks the queries of several tokens at once (a tile of
 * tokens x the heads sharing a KV head: 8 x 4 = 32 rows in the forward pass for Llama-3.2-1B).
 * The per-group path above converts each K and V row once per four heads and spends about one
 * load per FMA; with that many rows each chunk of K is instead converted once and transposed
 * (wide_kt: element e of 16 positions in one vector), each chunk of V converted once (into vf,
 * wide_range), and both feed register tiles that keep the FMA units busy:
 * - scores: WR rows x 16 positions (a lane per position), one accumulator per (row, element
 *   mod 4): per 4 elements 4 K loads and 4 x WR FMAs with the query element broadcast. Lane p
 *   of accumulator i sums K_p[4j+i]*q[4j+i] over j in order, then ((a0+a2)+(a1+a3)), then
 *   times scale: exactly sc_tile's operations per score (same bits).
 * - values: WV rows x 4 chunks of 16, one FMA per position in order per element from 0 (first
 *   chunk) or from o: va_tile's operations (same bits).
 * The online softmax and the rescale are the driver's (attn_simd.h: softmax_chunk), so a wide
 * call's parts are bit-identical to the per-group path's.
 */
enum {
    /* calls with at least this many query rows take the wide path: fused attention over 4096
       F16 positions, hd 64, ns per (position x row), per-group / wide (dev/bench_attn.c,
       Zen 5): 4 rows hot 3.96-4.06 / 3.95-4.17, from DRAM 8.4-9.1 / 9.9-10.0; 8 rows 3.19 /
       2.91-3.08, 5.6-5.9 / 5.9-6.1; 12 rows 3.08-3.13 / 2.48-2.49, 4.55-4.59 / 4.30-4.37 */
    WIDE_MIN_HEADS = 12,
    WIDE_MAX_HD = 128,   /* head dims it takes (its chunk buffers are on the stack) */
    WIDE_HEADS = 32,     /* query rows per pass over a chunk (the score buffer's rows) */
    WR = 6,              /* rows per score tile */
    WV = 5,              /* rows per value tile */
};

/* Rows k + p*ks (p < n <= 16; row n-1 repeated past n) as floats, transposed: kt[e*16 + p] =
 * K_p[e] for e < hd. 16 x 16 blocks through four shuffle stages. */
AI void wide_kt(enum nx_type kvt, int64_t hd, const char *k, size_t ks, int64_t n, float *kt) {
    for (int64_t e0 = 0; e0 < hd; e0 += 16) {
        __m512 r[16], t[16], u[16];
        UNROLL for (int p = 0; p < 16; p++) r[p] = kv16(kvt, k + (size_t)(p < n ? p : n - 1) * ks, e0);
        UNROLL for (int i = 0; i < 8; i++) {
            t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);     /* per 128-bit lane: a0 b0 a1 b1 */
            t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]); /* a2 b2 a3 b3 */
        }
        UNROLL for (int i = 0; i < 4; i++) { /* u[4i + c], lane L: element 4L + c of rows 4i..4i+3 */
            u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
            u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
            u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
            u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
        }
        UNROLL for (int c = 0; c < 4; c++) { /* 128-bit lane L of u[c], u[4+c], u[8+c], u[12+c] */
            __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44), x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xEE);
            __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44), y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xEE);
            _mm512_storeu_ps(kt + (e0 + c) * 16, _mm512_shuffle_f32x4(x0, y0, 0x88));
            _mm512_storeu_ps(kt + (e0 + 4 + c) * 16, _mm512_shuffle_f32x4(x0, y0, 0xDD));
            _mm512_storeu_ps(kt + (e0 + 8 + c) * 16, _mm512_shuffle_f32x4(x1, y1, 0x88));
            _mm512_storeu_ps(kt + (e0 + 12 + c) * 16, _mm512_shuffle_f32x4(x1, y1, 0xDD));
        }
    }
}

/* s[r*ld + p] = scale * dot(q + r*hd, K_p) for r < R, p < np (<= 16), kt from wide_kt. */
AI void wide_sc_tile(const int R, int64_t hd, const float *kt, const float *q, float scale,
                     float *s, int64_t ld, int np) {
    __m512 a[4][WR];
    UNROLL for (int i = 0; i < 4; i++) {
        UNROLL for (int r = 0; r < R; r++) a[i][r] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < hd; j += 4) {
        UNROLL for (int i = 0; i < 4; i++) {
            __m512 kv = _mm512_loadu_ps(kt + (j + i) * 16);
            UNROLL for (int r = 0; r < R; r++)
                a[i][r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * hd + j + i]), kv, a[i][r]);
        }
    }
    const __m512 vs = _mm512_set1_ps(scale);
    UNROLL for (int r = 0; r < R; r++) {
        __m512 t = _mm512_add_ps(_mm512_add_ps(a[0][r], a[2][r]), _mm512_add_ps(a[1][r], a[3][r]));
        _mm512_mask_storeu_ps(s + r * ld, (__mmask16)((1u << np) - 1), _mm512_mul_ps(t, vs));
    }
}

/* o[r*os + 16c + l] (+)= sum_j p[r*ld + j] * vf[j*hd + 16c + l] for r < R, c < NC, j < n
 * (first: from 0, else from o). */
AI void wide_va_tile(const int R, const int NC, const float *vf, int64_t hd, int64_t n,
                     const float *p, int64_t ld, float *o, int64_t os, bool first) {
    __m512 a[WV][CT];
    UNROLL for (int r = 0; r < R; r++) {
        UNROLL for (int c = 0; c < NC; c++)
            a[r][c] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(o + r * os + 16 * c);
    }
    for (int64_t j = 0; j < n; j++) {
        __m512 x[CT];
        UNROLL for (int c = 0; c < NC; c++) x[c] = _mm512_loadu_ps(vf + j * hd + 16 * c);
        UNROLL for (int r = 0; r < R; r++) {
            __m512 b = _mm512_set1_ps(p[r * ld + j]);
            UNROLL for (int c = 0; c < NC; c++) a[r][c] = _mm512_fmadd_ps(b, x[c], a[r][c]);
        }
    }
    UNROLL for (int r = 0; r < R; r++) {
        UNROLL for (int c = 0; c < NC; c++) _mm512_storeu_ps(o + r * os + 16 * c, a[r][c]);
    }
}

/* Scores of ng rows x n (<= KERN_ATTN_CHUNK) positions: posvec by posvec, WR rows a tile. */
static void wide_scores(int64_t hd, const float *kt, int64_t n, const float *q, int64_t ng,
                        float scale, float *s, int64_t ld) {
    for (int64_t p0 = 0; p0 < n; p0 += 16) {
        const float *ktp = kt + p0 * hd;
        int np = (int)NX_MIN(n - p0, (int64_t)16);
        int64_t r = 0;
        for (; r + WR <= ng; r += WR) wide_sc_tile(WR, hd, ktp, q + r * hd, scale, s + r * ld + p0, ld, np);
        switch (ng - r) {
        case 5: wide_sc_tile(5, hd, ktp, q + r * hd, scale, s + r * ld + p0, ld, np); break;
        case 4: wide_sc_tile(4, hd, ktp, q + r * hd, scale, s + r * ld + p0, ld, np); break;
        case 3: wide_sc_tile(3, hd, ktp, q + r * hd, scale, s + r * ld + p0, ld, np); break;
        case 2: wide_sc_tile(2, hd, ktp, q + r * hd, scale, s + r * ld + p0, ld, np); break;
        case 1: wide_sc_tile(1, hd, ktp, q + r * hd, scale, s + r * ld + p0, ld, np); break;
        default: break;
        }
    }
}

/* Values of ng rows over n positions (vf: n rows of hd floats) into o (rows os apart). */
static void wide_values(int64_t hd, const float *vf, int64_t n, const float *p, int64_t ld,
                        int64_t ng, float *o, int64_t os, bool first) {
    for (int64_t i = 0; i < hd; i += 16 * CT) {
        int nc = (int)NX_MIN((hd - i) / 16, (int64_t)CT);
#define WVA(R_, NC_) wide_va_tile(R_, NC_, vf + i, hd, n, p + r * ld, ld, o + r * os + i, os, first)
#define WVA_NC(R_) \
    switch (nc) { \
    case 4: WVA(R_, 4); break; \
    case 3: WVA(R_, 3); break; \
    case 2: WVA(R_, 2); break; \
    default: WVA(R_, 1); break; \
    }
        int64_t r = 0;
        for (; r + WV <= ng; r += WV) WVA_NC(WV)
        switch (ng - r) {
        case 4: WVA_NC(4) break;
        case 3: WVA_NC(3) break;
        case 2: WVA_NC(2) break;
        case 1: WVA_NC(1) break;
        default: break;
        }
#undef WVA_NC
#undef WVA
    }
}

/*
 * One KV range (rows k + j*ks, v + j*vs, j < npos) for ng query rows (q, hd apart) into part
 * (kern_attn_block's layout), att_fused_group's steps per chunk of KERN_ATTN_CHUNK positions
 * with the chunk's K transposed and V converted once for every pass of up to WIDE_HEADS rows.
 * Prefetch as the driver's: the first chunk up front when pre, each next chunk as one starts,
 * the caller's next rows nk, nv (nn of them; NULL: none) as the last one starts.
 */
static void wide_range(enum nx_type kvt, int64_t hd, const char *k, size_t ks, const char *v,
                       size_t vs, int64_t npos, const float *q, int64_t ng, float scale,
                       float *part, const char *nk, const char *nv, int64_t nn, bool pre) {
    float kt[KERN_ATTN_CHUNK * WIDE_MAX_HD] __attribute__((aligned(64)));
    float vf[KERN_ATTN_CHUNK * WIDE_MAX_HD] __attribute__((aligned(64)));
    float sbuf[WIDE_HEADS * KERN_ATTN_CHUNK] __attribute__((aligned(64)));
    const int64_t os = hd + 2; /* row g's running m, l and values: part + g*os, +1, +2 */
    const size_t slice = (size_t)hd * (kvt == NX_TYPE_F32 ? 4 : 2);
    if (npos <= 0) {
        for (int64_t g = 0; g < ng; g++) {
            part[g * os] = -INFINITY, part[g * os + 1] = 0.0f;
            memset(part + g * os + 2, 0, sizeof(float) * (size_t)hd);
        }
        return;
    }
    for (int64_t j0 = 0; j0 < npos; j0 += KERN_ATTN_CHUNK) {
        int64_t n = NX_MIN(npos - j0, (int64_t)KERN_ATTN_CHUNK);
        /* this chunk's rows at once when no earlier call asked for them, then the next
           chunk's (the last chunk: the caller's next rows) while this one is reduced */
        if (j0 == 0 && pre) prefetch_rows(k, ks, v, vs, n, slice);
        const char *pk, *pv;
        int64_t pn = att_next_rows(k, ks, v, vs, j0, n, npos, nk, nv, nn, &pk, &pv);
        prefetch_rows(pk, ks, pv, vs, pn, slice);
        for (int64_t p0 = 0; p0 < n; p0 += 16)
            wide_kt(kvt, hd, k + (size_t)(j0 + p0) * ks, ks, NX_MIN(n - p0, (int64_t)16), kt + p0 * hd);
        for (int64_t j = 0; j < n; j++) {
            const char *row = v + (size_t)(j0 + j) * vs;
            for (int64_t i = 0; i < hd; i += 16) _mm512_storeu_ps(vf + j * hd + i, kv16(kvt, row, i));
        }
        for (int64_t g0 = 0; g0 < ng; g0 += WIDE_HEADS) {
            int64_t gn = NX_MIN(ng - g0, (int64_t)WIDE_HEADS);
            float *pg = part + g0 * os;
            wide_scores(hd, kt, n, q + g0 * hd, gn, scale, sbuf, KERN_ATTN_CHUNK);
            for (int64_t g = 0; g < gn; g++) {
                float *r = pg + g * os;
                if (j0 == 0) r[0] = -INFINITY, r[1] = 0.0f;
                float alpha = softmax_chunk(sbuf + g * KERN_ATTN_CHUNK, n, &r[0], &r[1]);
                if (j0 > 0) att_rescale(r + 2, hd, alpha);
            }
            wide_values(hd, vf, n, sbuf, KERN_ATTN_CHUNK, gn, pg + 2, os, j0 == 0);
        }
    }
}

static inline bool wide_call(int64_t hd, int64_t ng) {
    return ng >= WIDE_MIN_HEADS && hd <= WIDE_MAX_HD;
}

/* ---- fused attention (kern_attn_block, kern_attn_blocks) ----------------------------------- */

/* va_all per KV type, state rows os apart (the fused driver's values kernels) */
static void va_add_f32(int64_t hd, const char *v, size_t vs, int64_t n, const float *p, int64_t ld,
                       int64_t ng, float *o, int64_t os, bool first, const char *pf, int64_t npf) {
    va_all(NX_TYPE_F32, hd, v, vs, n, p, ld, ng, o, os, first, pf, npf);
}

static void va_add_f16(int64_t hd, const char *v, size_t vs, int64_t n, const float *p, int64_t ld,
                       int64_t ng, float *o, int64_t os, bool first, const char *pf, int64_t npf) {
    va_all(NX_TYPE_F16, hd, v, vs, n, p, ld, ng, o, os, first, pf, npf);
}

/* attn_simd.h's driver (the AVX2 set's) around this file's scores and values */
static const struct att_chunk_fns g_fused_f32 = {sc_f32, va_add_f32, 4};
static const struct att_chunk_fns g_fused_f16 = {sc_f16, va_add_f16, 2};

void kern_avx512_attn_block(enum nx_type kvt, int64_t hd, const void *k, size_t k_stride,
                            const void *v, size_t v_stride, int64_t npos, const float *q, int64_t ng,
                            float scale, float *part) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (!own_hd(hd)) {
        kern_avx2_attn_block(kvt, hd, k, k_stride, v, v_stride, npos, q, ng, scale, part);
        return;
    }
    if (wide_call(hd, ng)) {
        wide_range(kvt, hd, k, k_stride, v, v_stride, npos, q, ng, scale, part, NULL, NULL, 0, true);
        return;
    }
    float qz[SC_QZ_FLOATS] __attribute__((aligned(64)));
    for (int64_t g0 = 0, step = sc_slice_heads(hd); g0 < ng; g0 += step) {
        int64_t n = NX_MIN(step, ng - g0);
        sc_prep_q(hd, q + g0 * hd, n, qz);
        att_fused_heads(kvt == NX_TYPE_F32 ? &g_fused_f32 : &g_fused_f16, hd, k, k_stride, v,
                        v_stride, npos, qz, n, scale, part + g0 * (hd + 2), NULL, NULL, 0, NULL,
                        true);
    }
}

void kern_avx512_attn_blocks(enum nx_type kvt, int64_t hd, const void *const *k,
                             const void *const *v, size_t stride, int64_t nblk, int64_t brows,
                             int64_t npos, const float *q, int64_t ng, float scale, float *parts) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (!own_hd(hd)) {
        kern_avx2_attn_blocks(kvt, hd, k, v, stride, nblk, brows, npos, q, ng, scale, parts);
        return;
    }
    if (wide_call(hd, ng)) {
        for (int64_t b = 0; b < nblk; b++) {
            int64_t nn = b + 1 < nblk ? NX_MIN(brows, npos - (b + 1) * brows) : 0;
            wide_range(kvt, hd, k[b], stride, v[b], stride, NX_MIN(brows, npos - b * brows), q, ng,
                       scale, parts + b * ng * (hd + 2), nn > 0 ? k[b + 1] : NULL,
                       nn > 0 ? v[b + 1] : NULL, nn, b == 0);
        }
        return;
    }
    float qz[SC_QZ_FLOATS] __attribute__((aligned(64)));
    for (int64_t g0 = 0, step = sc_slice_heads(hd); g0 < ng; g0 += step) {
        int64_t n = NX_MIN(step, ng - g0);
        sc_prep_q(hd, q + g0 * hd, n, qz);
        att_fused_blocks(kvt == NX_TYPE_F32 ? &g_fused_f32 : &g_fused_f16, hd, k, v, stride, nblk,
                         brows, npos, qz, n, scale, parts + g0 * (hd + 2), ng * (hd + 2));
    }
}
