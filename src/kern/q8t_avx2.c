/*
 * q8t_avx2.c - Q8_0 and Q4_0 weights x Q8_0 activations on AVX2: row-lane kernels, where each
 * vector lane is one weight row (one output), so a block's scale product and float
 * accumulation happen once per block for 8 rows instead of once per row.
 *
 * DESIGN
 * - Per-output arithmetic (the contract shared with the AVX-512 kernels in kern_avx512.c and
 *   checked bit for bit by test_kern's scalar model): with isum_b the exact integer dot product
 *   of block b and dw_b, dx_b the two block scales as floats,
 *       acc = 0;  for b = 0 .. nb-1:  acc = fmaf((float)isum_b, dw_b * dx_b, acc);  y = acc
 *   (|isum_b| <= 32 * 128 * 127 < 2^24, so the conversion is exact). Every path below does
 *   exactly this per lane, so results do not depend on the row split, on which lane a row
 *   lands in, on nc, or on decode vs prefill; the AVX2 and AVX-512 sets give identical bits.
 * - Prefill (nc >= Q8T_MIN_NC): the activations of all columns are widened to int16 once per
 *   call (per-thread scratch); per block of rows (~128 KiB unpacked, L2) the weights are
 *   unpacked into groups of 8 rows: per block 16 vectors, vector t holding in lane r the int16
 *   pair (w[r][2t], w[r][2t+1]), then the 8 row scales as floats. A tile of 8 rows x C columns
 *   runs one vpmaddwd + vpaddd per 16 multiply-adds per column, the activation pair broadcast
 *   from memory; no sign tricks and no saturation (int16 x int16 -> int32 is exact, so weights
 *   of -128 are fine).
 * - Decode (nc < Q8T_MIN_NC) reads the rows as they are: 8 rows at a time, each block's dot
 *   product with the |w| / sign(x, w) vpmaddubsw trick (x != -128, kern_impl.h), the 8 sums
 *   folded into one vector (lane r = row r) and accumulated as above; up to DEC_C columns
 *   share each weight load (a batched decode step costs little more than one column while
 *   the rows stream from memory). Rows past the end of a group repeat the last row and are
 *   not stored.
 * - When the scratch buffer cannot grow, prefill runs the decode path, DEC_C columns per pass
 *   (the same bits, no memory needed).
 */
#include <immintrin.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern_impl.h"
#include "kern/kern_simd.h"

#define G 8 /* rows per group = int32 lanes of a ymm */

/* ---- decode ------------------------------------------------------------------------------- */

/* Lane r of the result = sum of the 8 int32 lanes of v[r] (exact integers, so any order).
 * Unpack-and-add levels, then one cross-lane step as a blend plus an extract / insert pair:
 * on Zen 1, where vphaddd and vperm2i128 are multi-micro-op instructions, decode ran 6% faster
 * hot (dev/bench_kern.c Q8_0, one thread) than with three hadd levels and two vperm2i128. */
AI __m256i fold8(const __m256i v[8]) {
    __m256i t[4];
    UNROLL for (int i = 0; i < 4; i++) /* rows 2i, 2i+1 interleaved: [a b a b | a b a b] */
        t[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]),
                                _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]));
    /* rows 0-3 (u0) and 4-7 (u1), one partial sum per 128-bit lane */
    __m256i u0 = _mm256_add_epi32(_mm256_unpacklo_epi64(t[0], t[1]),
                                 _mm256_unpackhi_epi64(t[0], t[1]));
    __m256i u1 = _mm256_add_epi32(_mm256_unpacklo_epi64(t[2], t[3]),
                                 _mm256_unpackhi_epi64(t[2], t[3]));
    __m256i lo = _mm256_blend_epi32(u0, u1, 0xF0); /* [u0.lo | u1.hi] */
    __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_extracti128_si256(u0, 1)),
                                         _mm256_castsi256_si128(u1), 1); /* [u0.hi | u1.lo] */
    return _mm256_add_epi32(lo, hi);
}

/* The first n <= 8 lanes of v (rows of a group, lane r = row r) to y[0 .. n). */
AI void store_rows(__m256 v, float *y, int n) {
    if (n == G) {
        _mm256_storeu_ps(y, v);
    } else {
        float t[G];
        _mm256_storeu_ps(t, v);
        memcpy(y, t, (size_t)n * sizeof(float));
    }
}

/* Rows w, w + ws, ... (n <= 8 of them) x C <= DEC_C Q8_0 activation rows x + c * xs:
 * y[c * ys + r] for r < n. Each weight block is loaded (and its sign taken) once for the C
 * columns; per column the same operations as one column alone. */
#define DEC_C 4
AI void dec_group(bool is_q4, const int C, int64_t nb, const uint8_t *w, size_t ws, int n,
                  const uint8_t *x, size_t xs, float *y, int64_t ys) {
    const size_t bs = is_q4 ? sizeof(struct block_q4_0) : sizeof(struct block_q8_0);
    const uint8_t *row[G];
    for (int r = 0; r < G; r++) row[r] = w + (size_t)(r < n ? r : n - 1) * ws;
    const __m256i ones16 = _mm256_set1_epi16(1);
    const size_t rowb = (size_t)nb * bs;
    __m256 acc[DEC_C];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i xq[DEC_C];
        UNROLL for (int c = 0; c < C; c++) xq[c] = loadu256(((const struct block_q8_0 *)(x + (size_t)c * xs) + b)->qs);
        __m256i p[DEC_C][G];
        UNROLL for (int r = 0; r < G; r++) {
            const uint8_t *blk = row[r] + (size_t)b * bs;
            /* every block, though a line holds ~2: one per 2 blocks streamed 15-30% slower
               from DRAM with 2048-element rows on a Zen 4 (dev/bench_kern.c, one thread) */
            kern_prefetch(KERN_PF_GROUPED, pf_row_ahead(row[r], (size_t)b * bs, rowb, (size_t)G * ws));
            __m256i wq = w32(is_q4, blk);
            __m256i aw = _mm256_sign_epi8(wq, wq);
            UNROLL for (int c = 0; c < C; c++)
                p[c][r] = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(xq[c], wq)), ones16);
        }
        __m128i dh = _mm_setr_epi16((short)blk_d(row[0] + b * bs), (short)blk_d(row[1] + b * bs),
                                    (short)blk_d(row[2] + b * bs), (short)blk_d(row[3] + b * bs),
                                    (short)blk_d(row[4] + b * bs), (short)blk_d(row[5] + b * bs),
                                    (short)blk_d(row[6] + b * bs), (short)blk_d(row[7] + b * bs));
        __m256 dw = _mm256_cvtph_ps(dh);
        UNROLL for (int c = 0; c < C; c++) {
            const struct block_q8_0 *bx = (const struct block_q8_0 *)(x + (size_t)c * xs) + b;
            __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(h2f(bx->d)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(fold8(p[c])), scale, acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) store_rows(acc[c], y + c * ys, n);
}

typedef void (*dec_fn)(int64_t nb, const uint8_t *w, size_t ws, int n, const uint8_t *x, size_t xs,
                       float *y, int64_t ys);
#define DEC_FNS(C) \
    __attribute__((noinline)) static void dec8_##C(int64_t nb, const uint8_t *w, size_t ws, int n, \
                                                   const uint8_t *x, size_t xs, float *y, int64_t ys) { \
        dec_group(false, C, nb, w, ws, n, x, xs, y, ys); \
    } \
    __attribute__((noinline)) static void dec4_##C(int64_t nb, const uint8_t *w, size_t ws, int n, \
                                                   const uint8_t *x, size_t xs, float *y, int64_t ys) { \
        dec_group(true, C, nb, w, ws, n, x, xs, y, ys); \
    }
DEC_FNS(1)
DEC_FNS(2)
DEC_FNS(3)
DEC_FNS(4)
static const dec_fn g_dec[2][DEC_C + 1] = {{NULL, dec8_1, dec8_2, dec8_3, dec8_4},
                                           {NULL, dec4_1, dec4_2, dec4_3, dec4_4}};

/* Groups of 8 rows x columns in passes of up to DEC_C. */
static void dec_rows(bool is_q4, int64_t nb, const uint8_t *w, size_t ws, int64_t r0, int64_t r1,
                     const uint8_t *x, size_t xs, int64_t nc, float *y, int64_t ys) {
    for (int64_t r = r0; r < r1; r += G) {
        int n = (int)NX_MIN((int64_t)G, r1 - r);
        for (int64_t c = 0; c < nc; c += DEC_C) {
            int C = (int)NX_MIN((int64_t)DEC_C, nc - c);
            g_dec[is_q4][C](nb, w + (size_t)r * ws, ws, n, x + (size_t)c * xs, xs, y + c * ys + r, ys);
        }
    }
}

void kern_avx2_q8t_decode(bool is_q4, int64_t k, const void *w, size_t ws, int64_t r0, int64_t r1,
                          const void *xq, size_t xs, int64_t nc, float *y, int64_t ys) {
    dec_rows(is_q4, k / QK8_0, w, ws, r0, r1, xq, xs, nc, y, ys);
}

/* ---- prefill ------------------------------------------------------------------------------ */

/* Column c of the widened activations: per block 32 int16 then dx (float). */
static void perm_x(int64_t nb, const uint8_t *x, uint8_t *xp) {
    for (int64_t b = 0; b < nb; b++, xp += Q8T2_XB) {
        const struct block_q8_0 *bx = (const struct block_q8_0 *)x + b;
        __m256i q = loadu256(bx->qs);
        _mm256_storeu_si256((__m256i *)xp, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)));
        _mm256_storeu_si256((__m256i *)(xp + 32), _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)));
        float dx = h2f(bx->d);
        memcpy(xp + 64, &dx, 4);
    }
}

/* Group of n <= 8 rows (missing rows zero) -> per block 16 vectors of int16 pairs + 8 scales:
 * each row's 32 weights widened to 16 int16 pairs (two vectors of 8 dwords), then two 8 x 8
 * dword transposes put pair t of row r in lane r of vector t. */
static void unpack_w(bool is_q4, int64_t nb, const uint8_t *w, size_t ws, int n, uint8_t *wp) {
    const size_t bs = is_q4 ? sizeof(struct block_q4_0) : sizeof(struct block_q8_0);
    for (int64_t b = 0; b < nb; b++, wp += Q8T2_WB) {
        __m256i lo[G], hi[G], v[16];
        nx_half d16[G];
        UNROLL for (int r = 0; r < G; r++) {
            if (r < n) {
                const uint8_t *blk = w + (size_t)r * ws + (size_t)b * bs;
                kern_prefetch(KERN_PF_GROUPED, pf_row_ahead(w + (size_t)r * ws, (size_t)b * bs, (size_t)nb * bs, G * ws));
                __m256i q = w32(is_q4, blk);
                lo[r] = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(q));
                hi[r] = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1));
                d16[r] = blk_d(blk);
            } else {
                lo[r] = hi[r] = _mm256_setzero_si256();
                d16[r] = 0; /* +0.0 */
            }
        }
        tr8x8(lo, v);
        tr8x8(hi, v + 8);
        UNROLL for (int t = 0; t < 16; t++) _mm256_storeu_si256((__m256i *)(wp + 32 * t), v[t]);
        _mm256_storeu_ps((float *)(wp + 512), _mm256_cvtph_ps(loadu128(d16)));
    }
}

/* 8 unpacked rows x C widened columns; y[c * ys + r] for r < n. */
AI void tile(const int C, int64_t nb, const uint8_t *wp, const uint8_t *xp, size_t xps, float *y,
             int64_t ys, int n) {
    __m256 acc[Q8T2_C];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wp + (size_t)b * Q8T2_WB, *xb = xp + (size_t)b * Q8T2_XB;
        __m256i is[Q8T2_C];
        UNROLL for (int c = 0; c < C; c++) is[c] = _mm256_setzero_si256();
        UNROLL for (int t = 0; t < 16; t++) {
            __m256i wv = loadu256(wb + 32 * t);
            PIN(wv);
            UNROLL for (int c = 0; c < C; c++) {
                int32_t xv;
                memcpy(&xv, xb + (size_t)c * xps + 4 * t, 4);
                is[c] = _mm256_add_epi32(is[c], _mm256_madd_epi16(wv, _mm256_set1_epi32(xv)));
                PIN(is[c]);
            }
        }
        __m256 dw = _mm256_loadu_ps((const float *)(wb + 512));
        UNROLL for (int c = 0; c < C; c++) {
            __m256 s = _mm256_mul_ps(dw, _mm256_broadcast_ss((const float *)(xb + (size_t)c * xps + 64)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[c]), s, acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) store_rows(acc[c], y + c * ys, n);
}

typedef void (*tile_c_fn)(int64_t nb, const uint8_t *wp, const uint8_t *xp, size_t xps, float *y,
                          int64_t ys, int n);
#define TILE_C(C) \
    __attribute__((noinline)) static void tile_##C(int64_t nb, const uint8_t *wp, const uint8_t *xp, \
                                                   size_t xps, float *y, int64_t ys, int n) { \
        tile(C, nb, wp, xp, xps, y, ys, n); \
    }
TILE_C(1)
TILE_C(2)
TILE_C(3)
TILE_C(4)
TILE_C(5)
TILE_C(6)
static const tile_c_fn g_tiles[Q8T2_C + 1] = {NULL, tile_1, tile_2, tile_3, tile_4, tile_5, tile_6};

void kern_avx2_q8t_matmul(bool is_q4, int64_t k, const void *w, size_t ws, int64_t r0, int64_t r1,
                          const void *xq, size_t xs, int64_t nc, float *y, int64_t ys) {
    int64_t nb = k / QK8_0;
    const uint8_t *wb = w, *xb = xq;
    if (nc < Q8T_MIN_NC) {
        dec_rows(is_q4, nb, wb, ws, r0, r1, xb, xs, nc, y, ys);
        return;
    }
    size_t xbytes;
    int64_t gpb;
    uint8_t *xp = kern_avx2_scratch(q8t2_plan(k, nc, &xbytes, &gpb));
    if (!xp) { /* same bits without the buffer */
        dec_rows(is_q4, nb, wb, ws, r0, r1, xb, xs, nc, y, ys);
        return;
    }
    size_t xps = (size_t)nb * Q8T2_XB, gbytes = (size_t)nb * Q8T2_WB;
    uint8_t *wp = xp + xbytes;
    for (int64_t c = 0; c < nc; c++) perm_x(nb, xb + (size_t)c * xs, xp + (size_t)c * xps);
    for (int64_t b0 = r0; b0 < r1; b0 += gpb * G) {
        int64_t b1 = NX_MIN(r1, b0 + gpb * G), ng = (b1 - b0 + G - 1) / G;
        for (int64_t g = 0; g < ng; g++) {
            int n = (int)NX_MIN((int64_t)G, b1 - b0 - g * G);
            unpack_w(is_q4, nb, wb + (size_t)(b0 + g * G) * ws, ws, n, wp + (size_t)g * gbytes);
        }
        for (int64_t c = 0; c < nc; c += Q8T2_C) {
            int C = (int)NX_MIN((int64_t)Q8T2_C, nc - c);
            for (int64_t g = 0; g < ng; g++) {
                int n = (int)NX_MIN((int64_t)G, b1 - b0 - g * G);
                g_tiles[C](nb, wp + (size_t)g * gbytes, xp + (size_t)c * xps, xps, y + c * ys + b0 + g * G, ys, n);
            }
        }
    }
}
