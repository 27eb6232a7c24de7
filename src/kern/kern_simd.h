/*
 * kern_simd.h - helpers shared by the x86 SIMD kernel files (kern_avx2.c, kern_avx512.c): the
 * tile driver, horizontal sums, K-quant scale unpacking. Include only from files compiled with
 * at least -mavx2 -mfma -mf16c.
 */
#ifndef NX_KERN_SIMD_H
#define NX_KERN_SIMD_H

#include <immintrin.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern_impl.h"

#define AI static inline __attribute__((always_inline))

/* ---- helpers ------------------------------------------------------------------------------ */

AI float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI float hmax8(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

AI float h2f(nx_half h) { return _cvtsh_ss(h); }

/* Element i of a float-type weight row (F32, F16 or BF16) as a float: the scalar tails. */
AI float load_w1(enum nx_type wt, const uint8_t *w, int64_t i) {
    if (wt == NX_TYPE_F32) return ((const float *)w)[i];
    if (wt == NX_TYPE_F16) return h2f(((const nx_half *)w)[i]);
    uint32_t u = (uint32_t)((const nx_bf16 *)w)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

AI __m256i loadu256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }
AI __m128i loadu128(const void *p) { return _mm_loadu_si128((const __m128i *)p); }

/* Byte-shuffle masks that splat i16 element s (0..7) of each 128-bit lane over that lane. */
static const uint8_t g_splat16[8][32] __attribute__((aligned(32))) = {
#define S(s) {2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
              2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
              2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
              2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1}
    S(0), S(1), S(2), S(3), S(4), S(5), S(6), S(7)
#undef S
};

AI __m256i splat16(__m256i v, int s) { return _mm256_shuffle_epi8(v, loadu256(g_splat16[s])); }

/* ---- matmul driver ------------------------------------------------------------------------ */

/*
 * A tile computes y[j * ys + i] for rows i < R (weight rows w + i * ws) and columns j < C
 * (activation rows x + j * xs), each over the whole row of k elements.
 */
typedef void (*tile_fn)(int64_t k, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs,
                        float *y, int64_t ys);

struct tile_set {
    tile_fn pre;  /* RP x CP: the prefill tile */
    tile_fn pre1; /* 1 x CP: leftover rows of a column tile */
    tile_fn dec;  /* RD x 1: leftover columns (all of decode) */
    tile_fn dec1; /* 1 x 1 */
    int rp, cp, rd;
};

static inline void mm_drive(const struct tile_set *t, int64_t k, const void *w, size_t ws, int64_t r0,
                     int64_t r1, const void *xq, size_t xs, int64_t nc, float *y, int64_t ys) {
    const uint8_t *wb = w, *xb = xq;
    /* rows per block: ~128 KiB of weights, a multiple of the tile heights */
    int64_t rb = (int64_t)((128 * 1024) / (ws ? ws : 1));
    int64_t step = (int64_t)t->rp * t->rd;
    rb = rb < step ? step : rb / step * step;
    if (nc < t->cp) rb = r1 - r0; /* decode: no reuse across column tiles, one pass */
    for (int64_t b0 = r0; b0 < r1; b0 += rb) {
        int64_t b1 = NX_MIN(r1, b0 + rb);
        int64_t c = 0;
        for (; c + t->cp <= nc; c += t->cp) {
            const uint8_t *xc = xb + (size_t)c * xs;
            int64_t r = b0;
            for (; r + t->rp <= b1; r += t->rp) t->pre(k, wb + (size_t)r * ws, ws, xc, xs, y + c * ys + r, ys);
            for (; r < b1; r++) t->pre1(k, wb + (size_t)r * ws, ws, xc, xs, y + c * ys + r, ys);
        }
        for (; c < nc; c++) {
            const uint8_t *xc = xb + (size_t)c * xs;
            int64_t r = b0;
            for (; r + t->rd <= b1; r += t->rd) t->dec(k, wb + (size_t)r * ws, ws, xc, xs, y + c * ys + r, ys);
            for (; r < b1; r++) t->dec1(k, wb + (size_t)r * ws, ws, xc, xs, y + c * ys + r, ys);
        }
    }
}

/* Instantiates the tile functions NAME_RxC of a generic always-inline tile NAME_tile. */
#define TILE_FN(name, R, C) \
    static void name##_##R##x##C(int64_t k, const uint8_t *w, size_t ws, const uint8_t *x, \
                                 size_t xs, float *y, int64_t ys) { \
        name##_tile(R, C, k, w, ws, x, xs, y, ys); \
    }

#define MAXT 24 /* most accumulators of any tile */

/* Pins a vector in a register at this point: stops the compiler from reassociating integer
 * accumulation chains into trees of live temporaries (which spill). Emits no instruction. */
#define PIN(v) __asm__("" : "+x"(v))

/* Decode (1-column) tiles are memory-bound: they prefetch the weight stream this far ahead,
 * into the cache level kern_pf_level names for this CPU and this kind of stream (dispatch.c):
 * on the Xeon and Zen 5 measured, prefetches into L1 beat the hardware prefetchers alone on
 * long rows; on a Zen 4, grouped streams ran fastest with prefetches into L2 and single rows
 * with none. */
#define PF_DIST 1024
/* The line a decode kernel prefetches for a row it reads at byte off: PF_DIST ahead in the row
 * (rowb bytes long) or, past its end, in the same row of the next group of rows (group bytes
 * on), so the rows of the next group start prefetched (a short row would otherwise have its
 * first PF_DIST bytes never prefetched). */
AI const char *pf_row_ahead(const uint8_t *row, size_t off, size_t rowb, size_t group) {
    off += PF_DIST;
    return (const char *)row + (off < rowb ? off : group + (off - rowb));
}
AI void prefetch_lines(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) kern_prefetch(KERN_PF_SINGLE, p + PF_DIST + o);
}
#define UNROLL _Pragma("GCC unroll 16")

/* ---- X4 float weights (types.h): the matmul driver of both SIMD sets ---------------------- */

/*
 * Order of operations of one output (row r, column c), in every path and both sets (so they
 * give the same bits): k in blocks of X4_KC; per block, lane (r, j) chains fma(w, x, acc) over
 * the columns i = j mod 4 of the block in order, from 0; the block's sum (l0 + l1) + (l2 + l3)
 * is added to y (to 0 for the first block). A set supplies prefill tiles (G groups of 4 rows x
 * C columns over one k-block of converted weights and packed activations, x4_tile_fn) and
 * in-place tiles (G groups x C columns over one k-block, reading the weights and activations
 * where they are, x4_dec_fn).
 */
typedef void (*x4_tile_fn)(int64_t n, const float *wp, const float *xp, float *y, int64_t ys,
                           bool first);
/* the k-blocks of [k0, k0 + n) (k0 a block start) of the groups at w (k = 0 there),
   prefetching ahead when pf */
typedef void (*x4_dec_fn)(int64_t k0, int64_t n, const uint8_t *w, size_t ws, const uint8_t *x,
                          size_t xs, float *y, int64_t ys, bool pf);
/* packs the activations of the k-block [k0, k0 + n) of nc columns in column tiles of tc for
   the prefill tiles (tile c0 at dst + c0 * n) */
typedef void (*x4_pack_fn)(const uint8_t *x, size_t xs, int64_t nc, int tc, int64_t k0, int64_t n,
                           float *dst);
/* converts the k-block [k0, k0 + n) of G groups of rows from row r to floats for the prefill
   tiles */
typedef void (*x4_convert_fn)(enum nx_type wt, const uint8_t *w, size_t ws, int64_t r, int G,
                              int64_t k0, int64_t n, float *wp);
struct x4_set {
    const x4_tile_fn *tiles; /* [G - 1][C - 1], rows of tc */
    int tg, tc;              /* prefill tiles: up to tg groups x tc columns */
    x4_pack_fn pack;         /* their activation and weight layouts */
    x4_convert_fn convert;
    const x4_dec_fn *dec;    /* [C - 1][G - 1], rows of dgmax: every G <= dgmax for C = 1,
                                every G <= dg[dc - 1] for every C */
    int dc, dgmax;           /* in-place tiles: up to dc columns */
    const int *dg;           /* groups per in-place tile for C columns: dg[C - 1] <= dgmax */
    int inplace_nc;          /* up to this many columns x4_inplace, beyond the prefill tiles */
};

/* The in-place tiles' shared steps (both sets). Running sums of G groups x C columns, [g * C +
 * c]: 0 for the first k-block, else what y holds; stored back to y at the end. */
AI void x4_sums_load(__m128 *sums, const int G, const int C, int64_t k0, const float *y,
                     int64_t ys) {
    UNROLL for (int g = 0; g < G; g++)
        UNROLL for (int c = 0; c < C; c++)
            sums[g * C + c] = k0 == 0 ? _mm_setzero_ps() : _mm_loadu_ps(y + c * ys + 4 * g);
}
AI void x4_sums_store(const __m128 *sums, const int G, const int C, float *y, int64_t ys) {
    UNROLL for (int g = 0; g < G; g++)
        UNROLL for (int c = 0; c < C; c++) _mm_storeu_ps(y + c * ys + 4 * g, sums[g * C + c]);
}
/* Prefetch for the 16 columns from i of G groups (gbytes apart): each group's stream PF_DIST
 * ahead, on into the next G groups past the end. */
AI void x4_prefetch_groups(const uint8_t *w, size_t gbytes, const int G, int64_t i) {
    UNROLL for (int g = 0; g < G; g++) {
        const uint8_t *grp = w + (size_t)g * gbytes;
        const char *p = pf_row_ahead(grp, (size_t)i * 8, gbytes, (size_t)G * gbytes);
        kern_prefetch(KERN_PF_GROUPED, p);
        kern_prefetch(KERN_PF_GROUPED, p + 64);
    }
}

/* In place: per row tile (dg groups for the first column chunk's width), all of k at once
 * for up to dc columns, else per k-block the column chunks of up to dc columns (the block's
 * weights come from memory once, in order, and from L1 for the later chunks). Any nc, no
 * scratch. */
static inline void x4_inplace(const struct x4_set *s, int64_t k, const uint8_t *w, size_t ws,
                              int64_t r0, int64_t r1, const uint8_t *x, size_t xs, int64_t nc,
                              float *y, int64_t ys) {
    int dg = s->dg[NX_MIN((int64_t)s->dc, nc) - 1];
    int64_t kstep = nc <= s->dc ? k : X4_KC;
    for (int64_t r = r0; r < r1; r += 4 * dg) {
        int G = (int)NX_MIN((int64_t)dg, (r1 - r) / 4);
        for (int64_t k0 = 0; k0 < k; k0 += kstep) {
            int64_t n = NX_MIN(kstep, k - k0);
            for (int64_t c0 = 0; c0 < nc; c0 += s->dc) {
                int C = (int)NX_MIN((int64_t)s->dc, nc - c0);
                s->dec[(C - 1) * s->dgmax + G - 1](k0, n, w + (size_t)r * ws, ws,
                                                   x + (size_t)c0 * xs, xs, y + c0 * ys + r, ys,
                                                   c0 == 0);
            }
        }
    }
}

/* x4_drive's k-blocks with tiles of up to tg groups: activations packed per k-block into xp
 * (xb NULL) or read from the prepared batch xb; weights converted into wp. */
static inline void x4_blocks(const struct x4_set *s, int tg, enum nx_type wt, int64_t k,
                             const uint8_t *w, size_t ws, int64_t r0, int64_t r1, const uint8_t *x,
                             size_t xs, int64_t nc, float *y, int64_t ys, const float *xb,
                             float *xp, float *wp) {
    for (int64_t k0 = 0; k0 < k; k0 += X4_KC) {
        int64_t n = NX_MIN((int64_t)X4_KC, k - k0);
        if (!xb) s->pack(x, xs, nc, s->tc, k0, n, xp);
        for (int64_t r = r0; r < r1; r += 4 * tg) {
            int G = (int)NX_MIN((int64_t)tg, (r1 - r) / 4);
            s->convert(wt, w, ws, r, G, k0, n, wp);
            for (int64_t c0 = 0; c0 < nc; c0 += s->tc) {
                int C = (int)NX_MIN((int64_t)s->tc, nc - c0);
                const float *xt = (xb ? xb + (size_t)k0 * (size_t)nc : xp) + (size_t)c0 * (size_t)n;
                s->tiles[(G - 1) * s->tc + C - 1](n, wp, xt, y + c0 * ys + r, ys, k0 == 0);
            }
        }
    }
}

/* A prepared batch without the scratch (it could not grow): tiles of one group, whose k-block
 * of converted weights (16 x X4_KC floats at most, in either set's layout) fits the stack. */
static __attribute__((noinline)) void x4_batch_small(const struct x4_set *s, enum nx_type wt,
                                                     int64_t k, const uint8_t *w, size_t ws,
                                                     int64_t r0, int64_t r1, int64_t nc, float *y,
                                                     int64_t ys, const float *xb) {
    float wp[16 * X4_KC];
    x4_blocks(s, 1, wt, k, w, ws, r0, r1, NULL, 0, nc, y, ys, xb, NULL, wp);
}

/*
 * kern_matmul for X4 weights: rows r0, r1 multiples of 4, k of 16. Up to s->inplace_nc
 * columns (decode, batches): x4_inplace, one pass over the weights. More: k-block by
 * k-block, the block's activations packed (s->pack: in every call, xb NULL, x and xs the rows;
 * or once for the whole batch, xb: x4_prepare_batch's layout, x unused, the k-blocks one after
 * the other as a call's own packing lays each out, so both give the same bits) and each tile's
 * weights converted once into floats (s->convert: L1 or L2), then every column tile over it.
 * No scratch: x4_inplace, or for a prepared batch tiles of one group; same bits.
 */
static inline void x4_drive(const struct x4_set *s, enum nx_type wt, int64_t k, const void *wv,
                            size_t ws, int64_t r0, int64_t r1, const void *xv, size_t xs,
                            int64_t nc, float *y, int64_t ys, const float *xb) {
    const uint8_t *w = wv, *x = xv;
    NX_ASSERT(r0 % 4 == 0 && r1 % 4 == 0 && k % 16 == 0);
    NX_ASSERT((!xb || nc > s->inplace_nc) && "x4_drive: a prepared batch needs the prefill tiles");
    size_t sbytes = kern_x4_scratch_bytes(nc) - (xb ? (size_t)nc * X4_KC * sizeof(float) : 0);
    uint8_t *buf = nc <= s->inplace_nc ? NULL : kern_avx2_scratch(sbytes);
    if (!buf && !xb) {
        x4_inplace(s, k, w, ws, r0, r1, x, xs, nc, y, ys);
        return;
    }
    if (!buf) { /* a prepared batch, no scratch for the weights: one group at a time */
        x4_batch_small(s, wt, k, w, ws, r0, r1, nc, y, ys, xb);
        return;
    }
    float *xp = xb ? NULL : (float *)buf, *wp = (float *)buf + (xb ? 0 : (size_t)nc * X4_KC);
    x4_blocks(s, s->tg, wt, k, w, ws, r0, r1, x, xs, nc, y, ys, xb, xp, wp);
}

/* Columns [c0, c1) of a batch of nc activation rows (floats, x, ldx apart) packed for
 * x4_drive's prefill tiles, at xb (nc * k floats in all): k-block [k0, k0 + n) at xb + k0 * nc
 * as s->pack lays out one (column tile c0 at + c0 * n: each k-block contiguous, as the tiles
 * stream it, not strided by whole columns, which maps a k = 8192 batch's tiles onto a fifth
 * of a 16-way L2's sets). c0 is a multiple of s->tc, c1 too or nc. */
static inline void x4_prepare_batch(const struct x4_set *s, int64_t k, const float *x, int64_t ldx,
                                    int64_t nc, int64_t c0, int64_t c1, float *xb) {
    NX_ASSERT(c0 % s->tc == 0 && (c1 % s->tc == 0 || c1 == nc) && k % 16 == 0);
    if (c1 <= c0) return;
    for (int64_t k0 = 0; k0 < k; k0 += X4_KC) {
        int64_t n = NX_MIN((int64_t)X4_KC, k - k0);
        s->pack((const uint8_t *)(x + c0 * ldx), (size_t)ldx * sizeof(float), c1 - c0, s->tc, k0,
                n, xb + (size_t)k0 * (size_t)nc + (size_t)c0 * (size_t)n);
    }
}

/* A set's kern_table entries for prepared batches (kern.h), over its X4 sets `pair` (F16_X4,
 * BF16_X4): a batch where x4_drive would pack per call (beyond the set's in-place columns). */
#define X4_BATCH_FNS(prefix, pair) \
    static int prefix##_batch_cols(enum nx_type wt, int64_t nc) { \
        if (!nx_type_is_x4(wt)) return 0; \
        const struct x4_set *s = &(pair)[wt == NX_TYPE_BF16_X4]; \
        return nc > s->inplace_nc ? s->tc : 0; \
    } \
    static void prefix##_prepare_batch(enum nx_type wt, int64_t k, const float *x, int64_t ldx, \
                                       int64_t nc, int64_t c0, int64_t c1, void *xb) { \
        x4_prepare_batch(&(pair)[wt == NX_TYPE_BF16_X4], k, x, ldx, nc, c0, c1, xb); \
    } \
    static void prefix##_matmul_batch(enum nx_type wt, int64_t k, const void *w, size_t ws, \
                                      int64_t r0, int64_t r1, const void *xb, int64_t nc, float *y, \
                                      int64_t ys) { \
        x4_drive(&(pair)[wt == NX_TYPE_BF16_X4], wt, k, w, ws, r0, r1, NULL, 0, nc, y, ys, xb); \
    }

/* ---- K-quant scales ----------------------------------------------------------------------- */

/*
 * Byte-shuffle masks over the unpacked scale vector R (both 128-bit lanes = bytes sc[0..7],
 * m[0..7]): g_kq_sc[s] zero-extends sc[s] into every i16; g_kq_mdup zero-extends m[0..3]
 * (low lane) and m[4..7] (high lane), each twice, to line up with the 16 bsums.
 */
static const uint8_t g_kq_sc[8][32] __attribute__((aligned(32))) = {
#define S(s) {s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, \
              s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80, s, 0x80}
    S(0), S(1), S(2), S(3), S(4), S(5), S(6), S(7)
#undef S
};
static const uint8_t g_kq_mdup[32] __attribute__((aligned(32))) = {
    8,  0x80, 8,  0x80, 9,  0x80, 9,  0x80, 10, 0x80, 10, 0x80, 11, 0x80, 11, 0x80,
    12, 0x80, 12, 0x80, 13, 0x80, 13, 0x80, 14, 0x80, 14, 0x80, 15, 0x80, 15, 0x80};

/*
 * The 12 packed scale bytes (read as 16: the 4 after them are quants, ignored) -> both lanes =
 * sc[0..7], m[0..7] as bytes. Dwords a, b, c of the input (see kq_unpack_scales):
 *   out = [a & 0x3f, (c & 0xf) | (a >> 6) << 4, b & 0x3f, (c >> 4) | (b >> 6) << 4] per byte.
 */
AI __m256i kq_scales_vec(const uint8_t *scales) {
    __m128i v = loadu128(scales);
    __m128i lo = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0)); /* a c b c */
    lo = _mm_srlv_epi32(lo, _mm_setr_epi32(0, 0, 0, 4));
    lo = _mm_and_si128(lo, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    __m128i hi = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0)); /* a a b b */
    hi = _mm_and_si128(_mm_srli_epi32(hi, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
    return _mm256_broadcastsi128_si256(_mm_or_si128(lo, hi));
}

/* ---- Q8_0 / Q4_0 blocks for the prefill tiles (q8t_avx2.c, kern_avx512.c) ------------- */

/* 8 x 8 dword transpose: out[t] lane r = in[r] lane t. */
AI void tr8x8(const __m256i in[8], __m256i out[8]) {
    __m256 t[8], u[8];
    UNROLL for (int i = 0; i < 4; i++) {
        __m256 a = _mm256_castsi256_ps(in[2 * i]), b = _mm256_castsi256_ps(in[2 * i + 1]);
        t[2 * i] = _mm256_unpacklo_ps(a, b);     /* a0 b0 a1 b1 | a4 b4 a5 b5 */
        t[2 * i + 1] = _mm256_unpackhi_ps(a, b); /* a2 b2 a3 b3 | a6 b6 a7 b7 */
    }
    UNROLL for (int h = 0; h < 2; h++) { /* rows 0-3, then rows 4-7 */
        __m256 *tt = t + 4 * h, *uu = u + 4 * h;
        uu[0] = _mm256_shuffle_ps(tt[0], tt[2], 0x44); /* column 0 | 4 of these 4 rows */
        uu[1] = _mm256_shuffle_ps(tt[0], tt[2], 0xEE); /* column 1 | 5 */
        uu[2] = _mm256_shuffle_ps(tt[1], tt[3], 0x44); /* column 2 | 6 */
        uu[3] = _mm256_shuffle_ps(tt[1], tt[3], 0xEE); /* column 3 | 7 */
    }
    UNROLL for (int c = 0; c < 4; c++) {
        out[c] = _mm256_castps_si256(_mm256_permute2f128_ps(u[c], u[4 + c], 0x20));
        out[4 + c] = _mm256_castps_si256(_mm256_permute2f128_ps(u[c], u[4 + c], 0x31));
    }
}

/* 32 signed weights of a Q4_0 (nibble - 8) or Q8_0 block. */
AI __m256i w32(bool is_q4, const uint8_t *blk) {
    if (is_q4) {
        __m128i q = loadu128(blk + 2);
        __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
        return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
    }
    return loadu256(blk + 2);
}

AI nx_half blk_d(const uint8_t *blk) {
    nx_half d;
    memcpy(&d, blk, 2);
    return d;
}

/* ---- Q4_K / Q6_K blocks unpacked in registers (kern_avx2.c, kern_avx512.c) --------------- */

/* The layouts are described in kern_avx2.c (section Q4_K / Q6_K). */
/* In-lane 4 x 4 dword transpose: out[t] dword i of lane l = in[i] dword 4l + t. */
AI void tr4x4(__m256i a0, __m256i a1, __m256i a2, __m256i a3, __m256i out[4]) {
    __m256i t0 = _mm256_unpacklo_epi32(a0, a1), t1 = _mm256_unpackhi_epi32(a0, a1);
    __m256i t2 = _mm256_unpacklo_epi32(a2, a3), t3 = _mm256_unpackhi_epi32(a2, a3);
    out[0] = _mm256_unpacklo_epi64(t0, t2), out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3), out[3] = _mm256_unpackhi_epi64(t1, t3);
}

#define Q4K_XB (QK_K + 64)  /* permuted activation block: chunks, dx * bsum[s] (8 f32), dx x8 */

/* The scale vector: sc[0, 2, 4, 6] (low lane) / sc[1, 3, 5, 7] (high lane), each over the two
 * i16 lanes of its dword, from R (kq_scales_vec). */
static const uint8_t g_q4k_sv[32] __attribute__((aligned(32))) = {
    0, 0x80, 0, 0x80, 2, 0x80, 2, 0x80, 4, 0x80, 4, 0x80, 6, 0x80, 6, 0x80,
    1, 0x80, 1, 0x80, 3, 0x80, 3, 0x80, 5, 0x80, 5, 0x80, 7, 0x80, 7, 0x80};

/* The 8 chunks of Q4_K block bw (chunk 2t + l = (t, l)), unsigned 4-bit. */
AI void q4k_wchunks(const struct block_q4_K *bw, __m256i out[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), sh = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    UNROLL for (int l = 0; l < 2; l++) {
        /* lane l of each qs row, in both lanes; transposed: T[t] = lane l of Q_t twice, whose
         * low nibbles (low lane) / high nibbles (high lane) make chunk (t, l) */
        __m256i T[4];
        tr4x4(_mm256_broadcastsi128_si256(loadu128(bw->qs + 16 * l)),
              _mm256_broadcastsi128_si256(loadu128(bw->qs + 32 + 16 * l)),
              _mm256_broadcastsi128_si256(loadu128(bw->qs + 64 + 16 * l)),
              _mm256_broadcastsi128_si256(loadu128(bw->qs + 96 + 16 * l)), T);
        UNROLL for (int t = 0; t < 4; t++) out[2 * t + l] = _mm256_and_si256(_mm256_srlv_epi32(T[t], sh), m4);
    }
}

/* Block bw's scale vector (see g_q4k_sv), dmin * m[s] (lane s) and d (8 lanes). */
AI void q4k_wscales(const struct block_q4_K *bw, __m256i *sv, __m256 *mw, __m256 *dw) {
    uint32_t dd32;
    memcpy(&dd32, bw, 4);
    __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd32));
    __m256i R = kq_scales_vec(bw->scales);
    *sv = _mm256_shuffle_epi8(R, loadu256(g_q4k_sv));
    __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(_mm256_castsi256_si128(R), 8)));
    *mw = _mm256_mul_ps(_mm256_broadcastss_ps(_mm_movehdup_ps(dd)), m);
    *dw = _mm256_broadcastss_ps(dd);
}

/* The same 8 chunks from a Q4_K_IL block (quant.h): qs holds chunk a | chunk a + 4 << 4. */
AI void q4kil_wchunks(const struct block_q4_K *bw, __m256i out[8]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    UNROLL for (int a = 0; a < 4; a++) {
        __m256i v = loadu256(bw->qs + 32 * a);
        out[a] = _mm256_and_si256(v, m4);
        out[a + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
}

/* Q4_K and Q4_K_IL share everything but how the chunks come out of the block. */
AI void q4k_chunks(bool il, const struct block_q4_K *bw, __m256i out[8]) {
    if (il) q4kil_wchunks(bw, out);
    else q4k_wchunks(bw, out);
}

/* Q6_K group G (0..7) as unsigned 6-bit quants: low lane sub-block 2G, high lane 2G+1. With
 * half h = G / 4 and g = G % 4: low 4 bits from ql[64h + 32*(g & 1) + l] (low nibble for
 * g < 2, high for g >= 2), high 2 bits from qh[32h + l] >> 2g. */
AI __m256i q6k_w32(const struct block_q6_K *bw, int G) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    int h = G / 4, g = G % 4;
    __m256i q = loadu256(bw->ql + 64 * h + 32 * (g & 1));
    __m256i qh = loadu256(bw->qh + 32 * h);
    __m256i lo4 = g < 2 ? q : _mm256_srli_epi16(q, 4);
    __m256i hi2 = g == 0 ? _mm256_slli_epi16(qh, 4) : g == 1 ? _mm256_slli_epi16(qh, 2)
                  : g == 2 ? qh : _mm256_srli_epi16(qh, 2);
    return _mm256_or_si256(_mm256_and_si256(lo4, m4), _mm256_and_si256(hi2, m30));
}

/* Over 8 scales as i16 in both lanes: pair 0 (of these 8) -> sc 0,2 | 1,3, pair 1 -> 4,6 | 5,7,
 * each over 4 i16 lanes. */
static const uint8_t g_q6k_sc[2][32] __attribute__((aligned(32))) = {
#define S(a, b, c, d) {2 * a, 2 * a + 1, 2 * a, 2 * a + 1, 2 * a, 2 * a + 1, 2 * a, 2 * a + 1, \
                       2 * b, 2 * b + 1, 2 * b, 2 * b + 1, 2 * b, 2 * b + 1, 2 * b, 2 * b + 1, \
                       2 * c, 2 * c + 1, 2 * c, 2 * c + 1, 2 * c, 2 * c + 1, 2 * c, 2 * c + 1, \
                       2 * d, 2 * d + 1, 2 * d, 2 * d + 1, 2 * d, 2 * d + 1, 2 * d, 2 * d + 1}
    S(0, 2, 1, 3), S(4, 6, 5, 7)
#undef S
};

/* Bytes per block of a permuted activation row (Q6_K): the unpacked quants (pair P at
 * 64P: A_P then B_P), the 16 bsums, dx 8 times. */
#define Q6K_XB (QK_K + 64)

/* The unpacked block (layout of Q6K_WB) of Q6_K block bw, in registers. */
AI void q6k_wblock(const struct block_q6_K *bw, __m256i wv[8], __m256i scv[4], __m256i *sc32, __m256 *dw) {
    __m128i s8 = loadu128(bw->scales);
    *sc32 = _mm256_slli_epi16(_mm256_cvtepi8_epi16(s8), 5); /* |.| <= 4096 */
    __m256i s03 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(s8));
    __m256i s47 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(s8, 8)));
    UNROLL for (int p = 0; p < 4; p++) {
        __m256i g0 = q6k_w32(bw, 2 * p), g1 = q6k_w32(bw, 2 * p + 1);
        wv[2 * p] = _mm256_unpacklo_epi64(g0, g1), wv[2 * p + 1] = _mm256_unpackhi_epi64(g0, g1);
        scv[p] = _mm256_shuffle_epi8(p < 2 ? s03 : s47, loadu256(g_q6k_sc[p & 1]));
    }
    *dw = _mm256_set1_ps(h2f(bw->d));
}

#endif
