/*
 * kern_avx512.c - the AVX-512 kernel set (F, BW, VL, DQ, VNNI; compiled with the AVX-512
 * flags, called only after dispatch.c has checked the CPU).
 *
 * DESIGN
 * - Same structure and per-element arithmetic rules as kern_avx2.c (see its DESIGN): the tile
 *   driver and K-quant scale unpacking are shared (kern_simd.h); each output element has a
 *   fixed operation sequence, so results do not depend on row splits, tiling or nc. Results
 *   differ from the AVX2 set's in float rounding only (16-lane float accumulators).
 * - K-quants: a 64-element chunk (two sub-blocks) is one zmm; vpmaddubsw (u8 x i8 -> i16 pairs)
 *   then VNNI vpdpwssd with the sub-block scales (i16 x i16 -> i32, accumulating): 2 uops per
 *   64 products, against 6 for AVX2. Scale vectors come from one vpermw per chunk. The exact
 *   integer super-block sums are folded to 8 lanes and finished with the AVX2 epilogue.
 * - Q4_0/Q8_0: the row-lane contract of q8t_avx2.c (bit-identical to the AVX2 set): prefill
 *   is a VNNI tile of 16 rows (zmm lanes) x up to 12 columns; decode runs the AVX2 code.
 * - Q4_K_IL / Q6_K (what the engine runs on AVX-512 CPUs): the AVX2 driver and kernels, with
 *   this set's small-batch kernels for 2..16 columns (two weight rows per zmm, same bits as
 *   the AVX2 ones). Raw Q4_K is routed to the AVX2 set (dispatch.c); this set's own Q4_K tiles
 *   below then only run when the table is called directly.
 * - Float weights: 16-wide FMA tiles, 6 x 4 for prefill (24 accumulators + 6 weight rows + one
 *   activation vector: 31 of the 32 registers) and 8 x 1 for decode; the accumulators of a
 *   tile are summed together by the transposing trees of tree512.h (one fixed order per sum,
 *   whichever tile), then the k % 16 tail in order.
 * - F16 / BF16 weights copied into memory are rewritten as F16_X4 / BF16_X4 (types.h: rows
 *   interleaved by fours, when the row count divides by 4 and the row length by 16), so a
 *   32-byte load is a 4 x 4 (row, column) tile and an accumulator's lanes are [row][column mod
 *   4]: 4 outputs per register instead of 1. The driver and the order of operations are
 *   kern_simd.h's (x4_drive), shared with the AVX2 set (same bits); up to 64 columns (decode,
 *   batched decode, short prompts) the 4 x 4 tiles are read in place, 4 groups x 1 column,
 *   2 x 2..4, 3 x 5..8, in column chunks of 8 per k-block beyond 8. Prefill tiles put rows in
 *   lanes instead (x4p_tile: 32 rows x 3 columns, one accumulator per k mod 4, the same
 *   arithmetic per output), over weights converted and transposed once per k-block.
 *   F16 / BF16 kept in the file layout (mmap, other shapes) run the 6 x 4 tiles below.
 * - Activation quantization, the values kernel, softmax and SwiGLU are the AVX2 ones (not the
 *   bottleneck); attention scores and fused attention are attn_avx512.c's.
 * - Testing without AVX-512 hardware: with -DNX_AVX512_EMULATE this file includes
 *   kern/avx512_emu.h, which emulates the few AVX-512 intrinsics used here in plain C, so the
 *   tests can run this code on an AVX2-only machine (see that header for the command).
 */
#include <immintrin.h>
#include <string.h>

#ifdef NX_AVX512_EMULATE
#include "kern/avx512_emu.h"
#endif

#include "core/nx_base.h"
#include "kern/kern_impl.h"
#include "kern/kern_simd.h"
#include "kern/tree512.h"

/* The 16-lane sums of n float accumulators (n <= 24, a constant) into out[0..n), each in
 * tree512.h's order: the first 16 through tree16, the rest (or all of n <= 8) through tree8,
 * unused inputs zero. */
AI void tree_sums(const __m512 *acc, const int n, float *out) {
    float o[16];
    if (n > 8) {
        __m512 a[16];
        UNROLL for (int i = 0; i < 16; i++) a[i] = i < n ? acc[i] : _mm512_setzero_ps();
        if (n >= 16) _mm512_storeu_ps(out, tree16(a));
        else _mm512_storeu_ps(o, tree16(a)), memcpy(out, o, sizeof(float) * (size_t)n);
    }
    if (n <= 8 || n > 16) {
        const int t = n > 16 ? 16 : 0;
        __m512 a[8];
        UNROLL for (int i = 0; i < 8; i++) a[i] = t + i < n ? acc[t + i] : _mm512_setzero_ps();
        _mm512_storeu_ps(o, tree8(a));
        memcpy(out + t, o, sizeof(float) * (size_t)(n - t));
    }
}

/* 16 i32 lanes -> 8. */
AI __m256i fold16_epi32(__m512i v) {
    return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

AI __m512i combine256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* ---- float weights (F32, F16, BF16) x F32 activations -------------------------------------- */

AI __m512 load_w16(enum nx_type wt, const uint8_t *w, int64_t i) {
    if (wt == NX_TYPE_F32) return _mm512_loadu_ps((const float *)w + i);
    if (wt == NX_TYPE_F16) return _mm512_cvtph_ps(loadu256((const nx_half *)w + i));
    __m512i v = _mm512_cvtepu16_epi32(loadu256((const nx_bf16 *)w + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}

AI void fl_tile(enum nx_type wt, const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                const uint8_t *x, size_t xs, float *y, int64_t ys) {
    __m512 acc[MAXT];
    UNROLL for (int t = 0; t < R * C; t++) acc[t] = _mm512_setzero_ps();
    int64_t k16 = k & ~(int64_t)15;
    for (int64_t i = 0; i < k16; i += 16) {
        __m512 wv[6]; /* R <= 6: the tallest tile, FL_TILES */
        UNROLL for (int r = 0; r < R; r++) wv[r] = load_w16(wt, w + (size_t)r * ws, i);
        UNROLL for (int c = 0; c < C; c++) {
            __m512 xv = _mm512_loadu_ps((const float *)(x + (size_t)c * xs) + i);
            UNROLL for (int r = 0; r < R; r++) acc[c * R + r] = _mm512_fmadd_ps(wv[r], xv, acc[c * R + r]);
        }
    }
    /* accumulators and sums column by column (c*R + r), so a column's R results are one copy
       into y */
    float out[MAXT];
    tree_sums(acc, R * C, out);
    for (int c = 0; c < C; c++) {
        const float *xr = (const float *)(x + (size_t)c * xs);
        for (int r = 0; r < R; r++) {
            for (int64_t i = k16; i < k; i++) out[c * R + r] += load_w1(wt, w + (size_t)r * ws, i) * xr[i];
        }
        memcpy(y + c * ys, out + c * R, sizeof(float) * (size_t)R);
    }
}

/* Decode tile: R rows x 1 column, the per-element operations of fl_tile (one 16-lane FMA chain
 * per row in order, tree_sums, tail), 64 elements per step, each row prefetched PF_DIST ahead and
 * on into the same row of the next group of R rows (pf_row_ahead). */
AI void fl_dec_tile(enum nx_type wt, const int R, int64_t k, const uint8_t *w, size_t ws,
                    const uint8_t *x, float *y) {
    const float *xf = (const float *)x;
    const size_t esz = wt == NX_TYPE_F32 ? 4 : 2, rowb = (size_t)k * esz;
    __m512 acc[8];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int64_t k16 = k & ~(int64_t)15, k64 = k & ~(int64_t)63, i = 0;
    for (; i < k64; i += 64) {
        UNROLL for (int r = 0; r < R; r++) {
            const char *p = pf_row_ahead(w + (size_t)r * ws, (size_t)i * esz, rowb, (size_t)R * ws);
            kern_prefetch(KERN_PF_GROUPED, p);
            kern_prefetch(KERN_PF_GROUPED, p + 64);
            if (esz == 4) kern_prefetch(KERN_PF_GROUPED, p + 128), kern_prefetch(KERN_PF_GROUPED, p + 192);
        }
        UNROLL for (int j = 0; j < 64; j += 16) {
            __m512 xv = _mm512_loadu_ps(xf + i + j);
            UNROLL for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(load_w16(wt, w + (size_t)r * ws, i + j), xv, acc[r]);
        }
    }
    for (; i < k16; i += 16) {
        __m512 xv = _mm512_loadu_ps(xf + i);
        UNROLL for (int r = 0; r < R; r++) acc[r] = _mm512_fmadd_ps(load_w16(wt, w + (size_t)r * ws, i), xv, acc[r]);
    }
    float out[8];
    tree_sums(acc, R, out);
    UNROLL for (int r = 0; r < R; r++) {
        float s = out[r];
        for (int64_t t = k16; t < k; t++) s += load_w1(wt, w + (size_t)r * ws, t) * xf[t];
        y[r] = s;
    }
}

#define FL_TILES(tname, wt) \
    AI void tname##_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws, \
                         const uint8_t *x, size_t xs, float *y, int64_t ys) { \
        fl_tile(wt, R, C, k, w, ws, x, xs, y, ys); \
    } \
    static void tname##_8x1(int64_t k, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, \
                            float *y, int64_t ys) { \
        fl_dec_tile(wt, 8, k, w, ws, x, y); \
    } \
    static void tname##_1x1(int64_t k, const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, \
                            float *y, int64_t ys) { \
        fl_dec_tile(wt, 1, k, w, ws, x, y); \
    } \
    TILE_FN(tname, 6, 4) \
    TILE_FN(tname, 1, 4) \
    static const struct tile_set tname##_set = {tname##_6x4, tname##_1x4, tname##_8x1, \
                                                tname##_1x1, 6, 4, 8};

FL_TILES(f32, NX_TYPE_F32)
FL_TILES(f16, NX_TYPE_F16)
FL_TILES(bf16, NX_TYPE_BF16)

#define Q_TILES(tname) \
    TILE_FN(tname, 1, 8) \
    TILE_FN(tname, 1, 1) \
    static const struct tile_set tname##_set = {tname##_1x8, tname##_1x8, tname##_1x1, \
                                                tname##_1x1, 1, 8, 1};


/* ---- Q4_K / Q5_K weights x Q8_K activations ----------------------------------------------- */

/* vpermw indices: chunk j's scale vector = i16 sc[2j] in lanes 0..15, sc[2j+1] in 16..31. */
static const uint16_t g_kq_idx[4][32] __attribute__((aligned(64))) = {
#define I(a, b) {a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b}
    I(0, 1), I(2, 3), I(4, 5), I(6, 7)
#undef I
};

/* The same 64-element chunk layout as the AVX2 kq_tile; see there. */
AI void kq_tile(int bits, const int C, int64_t k, const uint8_t *w, const uint8_t *x, size_t xs,
                float *y, int64_t ys) {
    __m256 acc[MAXT];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m10 = _mm256_set1_epi8(0x10);
    const size_t bsz = bits == 4 ? sizeof(struct block_q4_K) : sizeof(struct block_q5_K);
    int64_t nb = k / QK_K;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *bw = w + (size_t)b * bsz;
        if (C == 1) prefetch_lines(bw, bsz);
        const uint8_t *scales, *qs, *qh = NULL;
        if (bits == 4) {
            scales = ((const struct block_q4_K *)bw)->scales, qs = ((const struct block_q4_K *)bw)->qs;
        } else {
            scales = ((const struct block_q5_K *)bw)->scales, qs = ((const struct block_q5_K *)bw)->qs;
            qh = ((const struct block_q5_K *)bw)->qh;
        }
        uint32_t dd32;
        memcpy(&dd32, bw, 4);
        __m128 dd = _mm_cvtph_ps(_mm_cvtsi32_si128((int)dd32));
        __m256 dwv = _mm256_broadcastss_ps(dd);
        __m256 dmv = _mm256_broadcastss_ps(_mm_movehdup_ps(dd));
        __m256i R = kq_scales_vec(scales);
        /* sc[0..7] as i16 in lanes 0..7 (then m[0..7]; lanes 16..31 are not indexed) */
        __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(R)));
        __m512i isum[MAXT];
        UNROLL for (int c = 0; c < C; c++) isum[c] = _mm512_setzero_si512();
        __m256i hb = bits == 5 ? loadu256(qh) : _mm256_setzero_si256();
        UNROLL for (int j = 0; j < 4; j++) {
            __m256i q = loadu256(qs + 32 * j);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (bits == 5) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m10));
                hb = _mm256_srli_epi16(hb, 1);
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m10));
                hb = _mm256_srli_epi16(hb, 1);
            }
            __m512i qz = combine256(lo, hi);
            __m512i sv = _mm512_permutexvar_epi16(_mm512_loadu_si512(g_kq_idx[j]), sc16);
            UNROLL for (int c = 0; c < C; c++) {
                const struct block_q8_K *bx = (const struct block_q8_K *)(x + (size_t)c * xs) + b;
                __m512i p = _mm512_maddubs_epi16(qz, _mm512_loadu_si512(bx->qs + 64 * j));
                isum[c] = _mm512_dpwssd_epi32(isum[c], p, sv);
            }
        }
        __m256i mdup = _mm256_shuffle_epi8(R, loadu256(g_kq_mdup));
        UNROLL for (int c = 0; c < C; c++) {
            const struct block_q8_K *bx = (const struct block_q8_K *)(x + (size_t)c * xs) + b;
            __m256i mp = _mm256_madd_epi16(loadu256(bx->bsums), mdup);
            __m256 t = _mm256_mul_ps(dwv, _mm256_cvtepi32_ps(fold16_epi32(isum[c])));
            t = _mm256_fnmadd_ps(dmv, _mm256_cvtepi32_ps(mp), t);
            acc[c] = _mm256_fmadd_ps(t, _mm256_broadcast_ss(&bx->d), acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) y[c * ys] = hsum8(acc[c]);
}

AI void q4k_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                 const uint8_t *x, size_t xs, float *y, int64_t ys) {
    (void)R, (void)ws;
    kq_tile(4, C, k, w, x, xs, y, ys);
}

AI void q5k_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                 const uint8_t *x, size_t xs, float *y, int64_t ys) {
    (void)R, (void)ws;
    kq_tile(5, C, k, w, x, xs, y, ys);
}

Q_TILES(q4k)
Q_TILES(q5k)

/* ---- Q4_K / Q6_K small batches: two weight rows per zmm ----------------------------------- */

/*
 * The small-batch kernels of kern_avx2.c (q4k_small / q6k_small; kern_impl.h) for two rows at
 * once: row r in the low 256 bits, row r + 1 in the high 256 bits, each activation chunk
 * broadcast to both halves (a load, no shuffle). Each half repeats the AVX2 kernel's
 * operations lane for lane, so both rows' results are bit-identical to the AVX2 decode:
 * - Q4_K: the int16 sum of 8 vpmaddubsw products then vpmaddwd with the scale (same value in
 *   both i16 lanes of a dword) is, exactly, the dword's vpdpbusd sum over the 8 chunks times
 *   that scale: one vpdpbusd per chunk and one vpmulld per block instead of 16 + 1 ops (all
 *   integer sums exact, |dword| <= 8 * 4 * 15 * 127 * 63 < 2^31); the float steps are the same.
 * - Q6_K: the AVX2 operations at twice the width.
 */
AI __m512i cat256(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
AI __m512 cat256ps(__m256 lo, __m256 hi) {
    return _mm512_castsi512_ps(cat256(_mm256_castps_si256(lo), _mm256_castps_si256(hi)));
}
AI __m512i bcast256(const uint8_t *p) { return _mm512_broadcast_i64x4(loadu256(p)); }
AI void store_pair(__m512 acc, float *y) {
    y[0] = hsum8(_mm512_castps512_ps256(acc));
    y[1] = hsum8(_mm512_extractf32x8_ps(acc, 1));
}

AI void q4k_pair(bool il, const int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *xp,
                 size_t xps, float *y, int64_t ys) {
    __m512 acc[KQ_SMALL_C];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q4_K *b0 = (const struct block_q4_K *)w + b;
        const struct block_q4_K *b1 = (const struct block_q4_K *)(w + ws) + b;
        const uint8_t *xb = xp + (size_t)b * Q4K_XB;
        prefetch_lines((const uint8_t *)b0, sizeof *b0);
        prefetch_lines((const uint8_t *)b1, sizeof *b1);
        __m256i c0[8], c1[8], sv0, sv1;
        __m256 mw0, dw0, mw1, dw1;
        q4k_chunks(il, b0, c0);
        q4k_chunks(il, b1, c1);
        q4k_wscales(b0, &sv0, &mw0, &dw0);
        q4k_wscales(b1, &sv1, &mw1, &dw1);
        __m512i ch[8];
        UNROLL for (int i = 0; i < 8; i++) ch[i] = cat256(c0[i], c1[i]);
        __m512i sc = _mm512_srai_epi32(cat256(sv0, sv1), 16); /* the dword's scale (both i16 equal) */
        __m512 mw = cat256ps(mw0, mw1), dw = cat256ps(dw0, dw1);
        UNROLL for (int c = 0; c < C; c++) {
            const uint8_t *xc = xb + (size_t)c * xps;
            __m512i d = _mm512_setzero_si512();
            UNROLL for (int i = 0; i < 8; i++) d = _mm512_dpbusd_epi32(d, ch[i], bcast256(xc + 32 * i));
            __m512 f = _mm512_cvtepi32_ps(_mm512_mullo_epi32(d, sc));
            __m512 dx = _mm512_set1_ps(*(const float *)(xc + QK_K + 32));
            __m512 a = _mm512_fmadd_ps(f, _mm512_mul_ps(dw, dx), acc[c]);
            acc[c] = _mm512_fnmadd_ps(mw, _mm512_castsi512_ps(bcast256(xc + QK_K)), a);
        }
    }
    UNROLL for (int c = 0; c < C; c++) store_pair(acc[c], y + c * ys);
}

AI void q6k_pair(const int C, int64_t nb, const uint8_t *w, size_t ws, const uint8_t *xp, size_t xps,
                 float *y, int64_t ys) {
    __m512 acc[KQ_SMALL_C];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q6_K *b0 = (const struct block_q6_K *)w + b;
        const struct block_q6_K *b1 = (const struct block_q6_K *)(w + ws) + b;
        prefetch_lines((const uint8_t *)b0, sizeof *b0);
        prefetch_lines((const uint8_t *)b1, sizeof *b1);
        __m256i w0[8], w1[8], s0[4], s1[4], sc0, sc1;
        __m256 dw0, dw1;
        q6k_wblock(b0, w0, s0, &sc0, &dw0);
        q6k_wblock(b1, w1, s1, &sc1, &dw1);
        __m512i wv[8], scv[4];
        UNROLL for (int i = 0; i < 8; i++) wv[i] = cat256(w0[i], w1[i]);
        UNROLL for (int i = 0; i < 4; i++) scv[i] = cat256(s0[i], s1[i]);
        __m512i sc32 = cat256(sc0, sc1);
        __m512 dw = cat256ps(dw0, dw1);
        UNROLL for (int c = 0; c < C; c++) {
            const uint8_t *xb = xp + (size_t)c * xps + (size_t)b * Q6K_XB;
            __m512i isum = _mm512_madd_epi16(bcast256(xb + QK_K), sc32);
            UNROLL for (int p = 0; p < 4; p++) {
                __m512i sp = _mm512_add_epi16(_mm512_maddubs_epi16(wv[2 * p], bcast256(xb + 64 * p)),
                                              _mm512_maddubs_epi16(wv[2 * p + 1], bcast256(xb + 64 * p + 32)));
                isum = p == 0 ? _mm512_sub_epi32(_mm512_madd_epi16(sp, scv[p]), isum)
                              : _mm512_add_epi32(isum, _mm512_madd_epi16(sp, scv[p]));
            }
            __m512 dwx = _mm512_mul_ps(dw, _mm512_set1_ps(*(const float *)(xb + QK_K + 32)));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), dwx, acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) store_pair(acc[c], y + c * ys);
}

#define KQ_PAIR_ARGS int64_t nb, const uint8_t *w, size_t ws, const uint8_t *xp, size_t xps, float *y, int64_t ys
#define KQ_PAIR_FNS(name, call) \
    __attribute__((noinline)) static void name##_2(KQ_PAIR_ARGS) { call(2); } \
    __attribute__((noinline)) static void name##_3(KQ_PAIR_ARGS) { call(3); } \
    __attribute__((noinline)) static void name##_4(KQ_PAIR_ARGS) { call(4); } \
    __attribute__((noinline)) static void name##_5(KQ_PAIR_ARGS) { call(5); } \
    __attribute__((noinline)) static void name##_6(KQ_PAIR_ARGS) { call(6); } \
    __attribute__((noinline)) static void name##_7(KQ_PAIR_ARGS) { call(7); } \
    __attribute__((noinline)) static void name##_8(KQ_PAIR_ARGS) { call(8); }
#define Q4KIL_PAIR(C) q4k_pair(true, C, nb, w, ws, xp, xps, y, ys)
#define Q6K_PAIR(C) q6k_pair(C, nb, w, ws, xp, xps, y, ys)
KQ_PAIR_FNS(q4kil_p, Q4KIL_PAIR)
KQ_PAIR_FNS(q6k_p, Q6K_PAIR)
#define KQ_PAIR_TABLE(name) {NULL, NULL, name##_2, name##_3, name##_4, name##_5, name##_6, name##_7, name##_8}
/* raw Q4_K: none (it is routed to the AVX2 set, dispatch.c) */
static const struct kern_kq_pairs g_kq_pairs = {{NULL}, KQ_PAIR_TABLE(q4kil_p), KQ_PAIR_TABLE(q6k_p), INT64_MAX};

/* ---- Q4_0 / Q8_0 prefill: row-lane VNNI tile ----------------------------------------------- */

/*
 * The per-output contract of q8t_avx2.c (same bits as the AVX2 set; decode is that file's).
 * Groups of 16 rows, one per int32 lane: per block, vector t holds in lane r the 4 bytes
 * w[r][4t .. 4t+3] + 128 (unsigned), then the 16 row scales. vpdpbusd multiplies them by 4
 * signed activation bytes broadcast from the Q8_0 row itself: sum (w + 128) x = w.x + 128
 * sum(x), so each block's accumulator starts at -128 * sum(x) (prepared once per column with
 * dx as a float). One vpdpbusd per 64 multiply-adds per column, exact (no saturation).
 */
#ifdef NX_AVX512_EMULATE
#define PINZ(v) (void)0
#else
#define PINZ(v) __asm__("" : "+v"(v))
#endif
#define G5 16

static void q8t5_perm_x(int64_t nb, const uint8_t *x, uint8_t *xp) {
    for (int64_t b = 0; b < nb; b++, xp += Q8T5_XB) {
        const struct block_q8_0 *bx = (const struct block_q8_0 *)x + b;
        int32_t s = 0;
        for (int j = 0; j < QK8_0; j++) s += bx->qs[j];
        int32_t corr = -128 * s;
        float dx = h2f(bx->d);
        memcpy(xp, &corr, 4);
        memcpy(xp + 4, &dx, 4);
    }
}

/* Group of n <= 16 rows (missing rows zero) -> per block 8 vectors of 16 dwords, lane r of
 * vector t = the bytes w[r][4t .. 4t+3] + 128, then the 16 row scales: per half of 8 rows, the
 * biased weights (xor 0x80 = + 128 for int8) as 8 dwords per row, transposed 8 x 8 (AVX2). */
static void q8t5_unpack_w(bool is_q4, int64_t nb, const uint8_t *w, size_t ws, int n, uint8_t *wp) {
    const size_t bs = is_q4 ? sizeof(struct block_q4_0) : sizeof(struct block_q8_0);
    const __m256i bias = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++, wp += Q8T5_WB) {
        nx_half d16[G5];
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i rw[8], v[8];
            UNROLL for (int i = 0; i < 8; i++) {
                int r = 8 * h + i;
                if (r < n) {
                    const uint8_t *blk = w + (size_t)r * ws + (size_t)b * bs;
                    kern_prefetch(KERN_PF_GROUPED, pf_row_ahead(w + (size_t)r * ws, (size_t)b * bs, (size_t)nb * bs, G5 * ws));
                    rw[i] = _mm256_xor_si256(w32(is_q4, blk), bias);
                    d16[r] = blk_d(blk);
                } else {
                    rw[i] = _mm256_set1_epi8((char)0x80); /* weight 0 */
                    d16[r] = 0;                           /* +0.0 */
                }
            }
            tr8x8(rw, v);
            UNROLL for (int t = 0; t < 8; t++) _mm256_storeu_si256((__m256i *)(wp + 64 * t + 32 * h), v[t]);
        }
        _mm256_storeu_ps((float *)(wp + 512), _mm256_cvtph_ps(loadu128(d16)));
        _mm256_storeu_ps((float *)(wp + 544), _mm256_cvtph_ps(loadu128(d16 + 8)));
    }
}

AI int32_t load_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* 16 unpacked rows x C columns (raw Q8_0 rows x, prepared xp); y[c * ys + r] for r < n. */
AI void q8t5_tile(const int C, int64_t nb, const uint8_t *wp, const uint8_t *x, size_t xs,
                  const uint8_t *xp, size_t xps, float *y, int64_t ys, int n) {
    __m512 acc[Q8T5_C];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wp + (size_t)b * Q8T5_WB;
        __m512i is[Q8T5_C];
        UNROLL for (int c = 0; c < C; c++) is[c] = _mm512_set1_epi32(load_i32(xp + (size_t)c * xps + (size_t)b * Q8T5_XB));
        UNROLL for (int t = 0; t < 8; t++) {
            __m512i wv = _mm512_loadu_si512(wb + 64 * t);
            PINZ(wv);
            UNROLL for (int c = 0; c < C; c++) {
                const uint8_t *q = x + (size_t)c * xs + (size_t)b * sizeof(struct block_q8_0) + 2 + 4 * t;
                is[c] = _mm512_dpbusd_epi32(is[c], wv, _mm512_set1_epi32(load_i32(q)));
                PINZ(is[c]);
            }
        }
        __m512 dw = _mm512_loadu_ps((const float *)(wb + 512));
        UNROLL for (int c = 0; c < C; c++) {
            float dx;
            memcpy(&dx, xp + (size_t)c * xps + (size_t)b * Q8T5_XB + 4, 4);
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[c]), _mm512_mul_ps(dw, _mm512_set1_ps(dx)), acc[c]);
        }
    }
    __mmask16 m = (__mmask16)(n >= G5 ? 0xffff : (1u << n) - 1);
    UNROLL for (int c = 0; c < C; c++) _mm512_mask_storeu_ps(y + c * ys, m, acc[c]);
}

typedef void (*q8t5_fn)(int64_t nb, const uint8_t *wp, const uint8_t *x, size_t xs,
                        const uint8_t *xp, size_t xps, float *y, int64_t ys, int n);
#define Q8T5_FN(C) \
    __attribute__((noinline)) static void q8t5_##C(int64_t nb, const uint8_t *wp, const uint8_t *x, size_t xs, \
                                                   const uint8_t *xp, size_t xps, float *y, int64_t ys, int n) { \
        q8t5_tile(C, nb, wp, x, xs, xp, xps, y, ys, n); \
    }
Q8T5_FN(1)
Q8T5_FN(2)
Q8T5_FN(3)
Q8T5_FN(4)
Q8T5_FN(5)
Q8T5_FN(6)
Q8T5_FN(7)
Q8T5_FN(8)
Q8T5_FN(9)
Q8T5_FN(10)
Q8T5_FN(11)
Q8T5_FN(12)
static const q8t5_fn g_q8t5[Q8T5_C + 1] = {NULL, q8t5_1, q8t5_2, q8t5_3, q8t5_4, q8t5_5, q8t5_6,
                                           q8t5_7, q8t5_8, q8t5_9, q8t5_10, q8t5_11, q8t5_12};

static void q8t5_matmul(bool is_q4, int64_t k, const void *w, size_t ws, int64_t r0, int64_t r1,
                        const void *xq, size_t xs, int64_t nc, float *y, int64_t ys) {
    size_t xbytes;
    int64_t gpb, nb = k / QK8_0;
    uint8_t *xp = nc < Q8T5_MIN_NC ? NULL : kern_avx2_scratch(q8t5_plan(k, nc, &xbytes, &gpb));
    if (!xp) { /* decode, or no scratch: the AVX2 decode path gives the same bits */
        kern_avx2_q8t_decode(is_q4, k, w, ws, r0, r1, xq, xs, nc, y, ys);
        return;
    }
    const uint8_t *wb = w, *xb = xq;
    size_t xps = (size_t)nb * Q8T5_XB, gbytes = (size_t)nb * Q8T5_WB;
    uint8_t *wp = xp + xbytes;
    for (int64_t c = 0; c < nc; c++) q8t5_perm_x(nb, xb + (size_t)c * xs, xp + (size_t)c * xps);
    for (int64_t b0 = r0; b0 < r1; b0 += gpb * G5) {
        int64_t b1 = NX_MIN(r1, b0 + gpb * G5), ng = (b1 - b0 + G5 - 1) / G5;
        for (int64_t g = 0; g < ng; g++) {
            int n = (int)NX_MIN((int64_t)G5, b1 - b0 - g * G5);
            q8t5_unpack_w(is_q4, nb, wb + (size_t)(b0 + g * G5) * ws, ws, n, wp + (size_t)g * gbytes);
        }
        for (int64_t c = 0; c < nc; c += Q8T5_C) {
            int C = (int)NX_MIN((int64_t)Q8T5_C, nc - c);
            for (int64_t g = 0; g < ng; g++) {
                int n = (int)NX_MIN((int64_t)G5, b1 - b0 - g * G5);
                g_q8t5[C](nb, wp + (size_t)g * gbytes, xb + (size_t)c * xs, xs, xp + (size_t)c * xps, xps,
                          y + c * ys + b0 + g * G5, ys, n);
            }
        }
    }
}

/* ---- F16_X4 / BF16_X4 weights (rows interleaved by fours, types.h) x F32 activations ------ */

/* 16 16-bit elements (a 4 x 4 tile of rows x columns) as floats. */
AI __m512 x4_cvt(enum nx_type wt, const uint8_t *p) {
    if (wt == NX_TYPE_F16_X4) return _mm512_cvtph_ps(loadu256(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(loadu256(p)), 16));
}

/* The 4 row sums of an accumulator with lanes [row a][column mod 4] (lane 4a + j), each
 * (l0 + l1) + (l2 + l3). */
AI __m128 x4_rowsums(__m512 v) {
    __m512 s = _mm512_add_ps(v, _mm512_shuffle_ps(v, v, 0xB1)); /* lane j + lane j ^ 1 */
    s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, 0x4E));       /* + the other pair */
    const __m512i lane0 = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12, 0, 4, 8, 12);
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(lane0, s));
}

/* One 16-column step of an in-place tile up to 4 columns: the step's 4C activation
 * broadcasts loaded first, then each group's 4 weight tiles (measured 2-5% faster at 1-4
 * columns than x4_step_wide's order). */
AI void x4_step_narrow(enum nx_type wt, const int G, const int C, int64_t i, const uint8_t *w,
                       size_t gbytes, const uint8_t *x, size_t xs, __m512 *acc) {
    __m512 xv[4][4];
    UNROLL for (int c = 0; c < C; c++) {
        const float *xc = (const float *)(x + (size_t)c * xs) + i;
        UNROLL for (int j = 0; j < 4; j++)
            xv[c][j] = _mm512_broadcast_f32x4(_mm_loadu_ps(xc + 4 * j));
    }
    UNROLL for (int g = 0; g < G; g++) {
        const uint8_t *p = w + (size_t)g * gbytes + (size_t)i * 8;
        UNROLL for (int j = 0; j < 4; j++) {
            __m512 wv = x4_cvt(wt, p + 32 * j);
            UNROLL for (int c = 0; c < C; c++)
                acc[g * C + c] = _mm512_fmadd_ps(wv, xv[c][j], acc[g * C + c]);
        }
    }
}

/* The same step for any C: per group of 4 columns the G weight tiles, then one broadcast at a
 * time (4 registers besides the accumulators, not 4C). The same FMAs in the same order per
 * accumulator as x4_step_narrow. */
AI void x4_step_wide(enum nx_type wt, const int G, const int C, int64_t i, const uint8_t *w,
                     size_t gbytes, const uint8_t *x, size_t xs, __m512 *acc) {
    UNROLL for (int j = 0; j < 4; j++) {
        __m512 wv[X4_DG];
        UNROLL for (int g = 0; g < G; g++)
            wv[g] = x4_cvt(wt, w + (size_t)g * gbytes + (size_t)i * 8 + 32 * j);
        UNROLL for (int c = 0; c < C; c++) {
            const float *xc = (const float *)(x + (size_t)c * xs) + i + 4 * j;
            __m512 xv = _mm512_broadcast_f32x4(_mm_loadu_ps(xc));
            UNROLL for (int g = 0; g < G; g++)
                acc[g * C + c] = _mm512_fmadd_ps(wv[g], xv, acc[g * C + c]);
        }
    }
}

/* In place (decode and small batches): G groups of 4 rows (group g at w + 4g * ws) . C
 * activation rows (x + c * xs bytes) over the k-blocks of [k0, k0 + n) (k0 a block start),
 * added to y[c * ys + 0 .. 4G) (to 0 when k0 = 0); one accumulator per group and column, the
 * weight tiles read in place, in order, each converted once for the C columns; when pf, each
 * group's stream prefetched PF_DIST ahead (on into the next G groups past the end). */
AI void x4_dec_tile(enum nx_type wt, const int G, const int C, int64_t k0, int64_t n,
                    const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y, int64_t ys,
                    bool pf) {
    const size_t gbytes = 4 * ws;
    __m128 sums[X4_DG * X4_DC];
    x4_sums_load(sums, G, C, k0, y, ys);
    for (int64_t kb = k0; kb < k0 + n; kb += X4_KC) {
        int64_t kend = NX_MIN(k0 + n, kb + X4_KC);
        __m512 acc[X4_DG * X4_DC];
        UNROLL for (int t = 0; t < G * C; t++) acc[t] = _mm512_setzero_ps();
        for (int64_t i = kb; i < kend; i += 16) {
            if (pf) x4_prefetch_groups(w, gbytes, G, i);
            if (C <= 4) x4_step_narrow(wt, G, C, i, w, gbytes, x, xs, acc);
            else x4_step_wide(wt, G, C, i, w, gbytes, x, xs, acc);
        }
        UNROLL for (int t = 0; t < G * C; t++) sums[t] = _mm_add_ps(sums[t], x4_rowsums(acc[t]));
    }
    x4_sums_store(sums, G, C, y, ys);
}

/* keeps v in a register: without it GCC folds each weight load into every FMA that uses it
   (C loads of each vector instead of one) */
#ifdef NX_AVX512_EMULATE
#define REG_BARRIER(v) (void)(v)
#else
#define REG_BARRIER(v) __asm__("" : "+v"(v))
#endif

/*
 * Prefill tiles, rows in lanes: a tile is R = ceil(G / 4) vectors of 16 rows (G groups of 4)
 * x C columns, with one accumulator per (vector, column, phase j = k mod 4): lane r of the
 * phase-j accumulator chains fma(w, x, acc) over the block's k = 4i + j in order, exactly what
 * lane (r, j) of an in-place tile does, and the block's sum (a0 + a1) + (a2 + a3) is a lane-wise
 * addition (no horizontal sums). Each step is R weight loads and C scalar broadcasts for
 * R x C FMAs. Against the 12-row x 8-column tile this replaced (lanes [row][k mod 4], 128-bit
 * activation broadcasts), the k-block's packed activations (1 MiB at 512 columns: Zen 5's
 * whole L2) stream past 32 rows at a time instead of 12, while the tile's 64 KiB of converted
 * weights come from L2: on Zen 5, one thread, nc = 512 (dev/bench_kern), 160-186 -> 210-224
 * GFLOP/s, where the FMA peak is ~245; with everything in L1 the two tiles differ by only
 * 5-10% (189-210 against 221-232 in one microbenchmark run).
 * The block's weights as floats, wp: [n][16 R] (rows of absent groups zero); its packed
 * activations, xp: [n][C].
 */
AI void x4p_tile(const int G, const int C, int64_t n, const float *wp, const float *xp, float *y,
                 int64_t ys, bool first) {
    const int R = (G + 3) / 4;
    __m512 acc[4][2 * X4_C];
    UNROLL for (int j = 0; j < 4; j++)
        UNROLL for (int t = 0; t < R * C; t++) acc[j][t] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 4) {
        UNROLL for (int j = 0; j < 4; j++) {
            const float *wk = wp + (size_t)(i + j) * 16 * R, *xk = xp + (i + j) * C;
            __m512 wv[2];
            UNROLL for (int v = 0; v < R; v++) {
                wv[v] = _mm512_loadu_ps(wk + 16 * v);
                REG_BARRIER(wv[v]);
            }
            UNROLL for (int c = 0; c < C; c++) {
                __m512 xv = _mm512_set1_ps(xk[c]);
                UNROLL for (int v = 0; v < R; v++)
                    acc[j][c * R + v] = _mm512_fmadd_ps(wv[v], xv, acc[j][c * R + v]);
            }
        }
    }
    UNROLL for (int c = 0; c < C; c++) {
        UNROLL for (int v = 0; v < R; v++) {
            const int t = c * R + v, lanes = NX_MIN(16, 4 * G - 16 * v);
            const __mmask16 m = (__mmask16)((1u << lanes) - 1);
            float *o = y + c * ys + 16 * v;
            __m512 sum = _mm512_add_ps(_mm512_add_ps(acc[0][t], acc[1][t]),
                                       _mm512_add_ps(acc[2][t], acc[3][t]));
            __m512 prev = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, o);
            _mm512_mask_storeu_ps(o, m, _mm512_add_ps(prev, sum));
        }
    }
}

#define X4P_TILE(G, C) \
    static void x4p_tile_##G##x##C(int64_t n, const float *wp, const float *xp, float *y, \
                                   int64_t ys, bool first) { \
        x4p_tile(G, C, n, wp, xp, y, ys, first); \
    }
#define X4P_TILE_ROW(G) X4P_TILE(G, 1) X4P_TILE(G, 2) X4P_TILE(G, 3)
X4P_TILE_ROW(1)
X4P_TILE_ROW(2)
X4P_TILE_ROW(3)
X4P_TILE_ROW(4)
X4P_TILE_ROW(5)
X4P_TILE_ROW(6)
X4P_TILE_ROW(7)
X4P_TILE_ROW(8)
#define X4P_TILE_PTRS(G) {x4p_tile_##G##x1, x4p_tile_##G##x2, x4p_tile_##G##x3}
/* [G - 1][C - 1]: 8 groups (2 vectors of 16 rows) x 3 columns: 24 accumulators, 2 weight
 * vectors and a broadcast */
static const x4_tile_fn g_x4_tiles[X4_G][X4_C] = {
    X4P_TILE_PTRS(1), X4P_TILE_PTRS(2), X4P_TILE_PTRS(3), X4P_TILE_PTRS(4),
    X4P_TILE_PTRS(5), X4P_TILE_PTRS(6), X4P_TILE_PTRS(7), X4P_TILE_PTRS(8)};

/* Packs the activations of the k-block [k0, k0 + n) (n a multiple of 16) of nc columns for
 * the tiles above: column tile c0 (tc columns, fewer in the last) at dst + c0 * n, as [n][C];
 * 3-column tiles interleaved 16 elements at a time. */
static void x4p_pack_x(const uint8_t *x, size_t xs, int64_t nc, int tc, int64_t k0, int64_t n,
                       float *dst) {
    /* output vector m of 16 k from three columns: lane l holds element e = 16 m + l, column
       e % 3, k e / 3 (within the 16); ab: from columns 0 (index k) or 1 (16 + k), c: column 2 */
    static const int32_t ab[3][16] = {{0, 16, 0, 1, 17, 0, 2, 18, 0, 3, 19, 0, 4, 20, 0, 5},
                                      {21, 0, 6, 22, 0, 7, 23, 0, 8, 24, 0, 9, 25, 0, 10, 26},
                                      {0, 11, 27, 0, 12, 28, 0, 13, 29, 0, 14, 30, 0, 15, 31, 0}};
    static const int32_t cc[3][16] = {{0, 0, 0, 0, 0, 1, 0, 0, 2, 0, 0, 3, 0, 0, 4, 0},
                                      {0, 5, 0, 0, 6, 0, 0, 7, 0, 0, 8, 0, 0, 9, 0, 0},
                                      {10, 0, 0, 11, 0, 0, 12, 0, 0, 13, 0, 0, 14, 0, 0, 15}};
    static const __mmask16 cm[3] = {0x4924, 0x2492, 0x9249}; /* lanes of column 2 */
    __m512i abv[3], ccv[3];
    for (int m = 0; m < 3; m++) {
        abv[m] = _mm512_loadu_si512(ab[m]);
        ccv[m] = _mm512_loadu_si512(cc[m]);
    }
    for (int64_t c0 = 0; c0 < nc; c0 += tc) {
        int C = (int)NX_MIN((int64_t)tc, nc - c0);
        float *d = dst + (size_t)c0 * (size_t)n;
        const float *src[X4_C];
        for (int c = 0; c < C; c++) src[c] = (const float *)(x + (size_t)(c0 + c) * xs) + k0;
        if (C == 3) {
            for (int64_t i = 0; i < n; i += 16) {
                __m512 a = _mm512_loadu_ps(src[0] + i), b = _mm512_loadu_ps(src[1] + i),
                       c2 = _mm512_loadu_ps(src[2] + i);
                UNROLL for (int m = 0; m < 3; m++) {
                    __m512 v = _mm512_permutex2var_ps(a, abv[m], b);
                    v = _mm512_mask_blend_ps(cm[m], v, _mm512_permutexvar_ps(ccv[m], c2));
                    _mm512_storeu_ps(d + 3 * i + 16 * m, v);
                }
            }
        } else {
            for (int64_t i = 0; i < n; i++)
                for (int c = 0; c < C; c++) d[i * C + c] = src[c][i];
        }
    }
}

/* The k-block [k0, k0 + n) of G groups of rows from row r as floats for the tiles above, wp:
 * [n][16 R], each 4 x 4 (row, k) tile of 4 groups transposed to 4 k of 16 rows; each group's
 * stream prefetched PF_DIST ahead (on into the next tile's rows past its end). */
static void x4p_convert_w(enum nx_type wt, const uint8_t *w, size_t ws, int64_t r, int G,
                          int64_t k0, int64_t n, float *wp) {
    /* pairs: lane 8 jj + 4 q + a <- group q (of two), row a, k jj (+ 2 for the second);
       quads: lane 4 g + a <- group g (of four: 16 + for the second pair), row a */
    static const int32_t pair[2][16] = {
        {0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29},
        {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31}};
    static const int32_t quad[2][16] = {
        {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
        {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}};
    const __m512i p0 = _mm512_loadu_si512(pair[0]), p1 = _mm512_loadu_si512(pair[1]);
    const __m512i q0 = _mm512_loadu_si512(quad[0]), q1 = _mm512_loadu_si512(quad[1]);
    const size_t gbytes = 4 * ws;
    const int R = (G + 3) / 4;
    for (int v = 0; v < R; v++) {
        const int have = NX_MIN(4, G - 4 * v);
        const uint8_t *grp = w + (size_t)(r + 16 * v) * ws;
        float *dst = wp + 16 * v;
        for (int64_t i = 0; i < n; i += 4) {
            size_t off = (size_t)(k0 + i) * 8;
            __m512 t[4];
            UNROLL for (int q = 0; q < 4; q++) {
                if (q < have) {
                    const uint8_t *gq = grp + (size_t)q * gbytes;
                    if (i % 8 == 0) /* one prefetch per 64 bytes of each group */
                        kern_prefetch(KERN_PF_GROUPED,
                                      pf_row_ahead(gq, off, gbytes, (size_t)G * gbytes));
                    t[q] = x4_cvt(wt, gq + off);
                } else {
                    t[q] = _mm512_setzero_ps();
                }
            }
            __m512 a0 = _mm512_permutex2var_ps(t[0], p0, t[1]);
            __m512 a1 = _mm512_permutex2var_ps(t[0], p1, t[1]);
            __m512 b0 = _mm512_permutex2var_ps(t[2], p0, t[3]);
            __m512 b1 = _mm512_permutex2var_ps(t[2], p1, t[3]);
            float *o = dst + (size_t)i * 16 * R;
            _mm512_storeu_ps(o, _mm512_permutex2var_ps(a0, q0, b0));
            _mm512_storeu_ps(o + 16 * R, _mm512_permutex2var_ps(a0, q1, b0));
            _mm512_storeu_ps(o + 32 * R, _mm512_permutex2var_ps(a1, q0, b1));
            _mm512_storeu_ps(o + 48 * R, _mm512_permutex2var_ps(a1, q1, b1));
        }
    }
}

#define X4_DEC(wname, wt, G, C) \
    static void x4_dec_##wname##_##G##x##C(int64_t k0, int64_t n, const uint8_t *w, size_t ws, \
                                           const uint8_t *x, size_t xs, float *y, int64_t ys, \
                                           bool pf) { \
        x4_dec_tile(wt, G, C, k0, n, w, ws, x, xs, y, ys, pf); \
    }
/* The in-place tiles [C - 1][G - 1]: G = 1..3 for every C (3 x 8 = 24 accumulators at most),
   and 4 groups for one column */
#define X4_DEC_C(n, wt, C) X4_DEC(n, wt, 1, C) X4_DEC(n, wt, 2, C) X4_DEC(n, wt, 3, C)
#define X4_DEC_TYPE(n, wt) \
    X4_DEC_C(n, wt, 1) X4_DEC(n, wt, 4, 1) X4_DEC_C(n, wt, 2) X4_DEC_C(n, wt, 3) \
    X4_DEC_C(n, wt, 4) X4_DEC_C(n, wt, 5) X4_DEC_C(n, wt, 6) X4_DEC_C(n, wt, 7) X4_DEC_C(n, wt, 8)
X4_DEC_TYPE(f16, NX_TYPE_F16_X4)
X4_DEC_TYPE(bf16, NX_TYPE_BF16_X4)
#define X4_P(n, C) {x4_dec_##n##_1x##C, x4_dec_##n##_2x##C, x4_dec_##n##_3x##C}
#define X4_DEC_PTRS(n) \
    {{x4_dec_##n##_1x1, x4_dec_##n##_2x1, x4_dec_##n##_3x1, x4_dec_##n##_4x1}, X4_P(n, 2), \
     X4_P(n, 3), X4_P(n, 4), X4_P(n, 5), X4_P(n, 6), X4_P(n, 7), X4_P(n, 8)}
static const x4_dec_fn g_x4_dec[2][X4_DC][X4_DG] = {X4_DEC_PTRS(f16), X4_DEC_PTRS(bf16)};
static const int g_x4_dec_groups[X4_DC] = {4, 2, 2, 2, 3, 3, 3, 3};
/* In place up to 64 columns. dev/bench_batch on the Xeon (weights from DRAM, one thread),
   GFLOP/s in place / prefill tiles, 8192 x 2048 then 2048 x 8192: nc 32 124-136 / 97-99,
   130-132 / 102-103; nc 64 139-142 / 119-122, 130-131 / 131; nc 96 137 / 123, 117 / 134;
   nc 512 118-119 / 133-139, 106-108 / 147-148 (the 12 x 8 prefill tiles). On Zen 5 with the
   32 x 3 tiles, 2 alternated rounds: nc 32 147-170 / 141-149, nc 48 154-169 / 162-174, nc 64
   153-165 / 164-182: the crossover there is 48-64. */
static const struct x4_set g_x4_sets[2] = {
    {&g_x4_tiles[0][0], X4_G, X4_C, x4p_pack_x, x4p_convert_w, &g_x4_dec[0][0][0], X4_DC, X4_DG,
     g_x4_dec_groups, X4_INPLACE_NC_AVX512},
    {&g_x4_tiles[0][0], X4_G, X4_C, x4p_pack_x, x4p_convert_w, &g_x4_dec[1][0][0], X4_DC, X4_DG,
     g_x4_dec_groups, X4_INPLACE_NC_AVX512}};

static enum nx_type avx512_weight_layout(enum nx_type t, int64_t ne0, int64_t ne1) {
    if ((t == NX_TYPE_F16 || t == NX_TYPE_BF16) && ne0 % 16 == 0 && ne1 % 4 == 0)
        return t == NX_TYPE_F16 ? NX_TYPE_F16_X4 : NX_TYPE_BF16_X4;
    return t;
}

static void avx512_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                          int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                          int64_t y_stride) {
    /* Q4_K_IL (internal id, types.h: the AVX2 kernels' layout) and Q6_K: the AVX2 driver and
       kernels, with this set's small-batch pair kernels */
    if (wt == NX_TYPE_Q4_K_IL || wt == NX_TYPE_Q6_K) {
        kern_avx2_kq_matmul(wt, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride, &g_kq_pairs);
        return;
    }
    if (nx_type_is_x4(wt)) { /* internal ids (types.h) */
        x4_drive(&g_x4_sets[wt == NX_TYPE_BF16_X4], wt, k, w, w_stride, r0, r1, xq, xq_stride,
                 nc, y, y_stride, NULL);
        return;
    }
    const struct tile_set *t;
    switch (wt) {
    case NX_TYPE_F32: t = &f32_set; break;
    case NX_TYPE_F16: t = &f16_set; break;
    case NX_TYPE_BF16: t = &bf16_set; break;
    case NX_TYPE_Q4_0:
    case NX_TYPE_Q8_0:
        q8t5_matmul(wt == NX_TYPE_Q4_0, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride);
        return;
    case NX_TYPE_Q4_K: t = &q4k_set; break;
    case NX_TYPE_Q5_K: t = &q5k_set; break;
    default: NX_ASSERT(!"kern_matmul: unsupported weight type"); return;
    }
    mm_drive(t, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride);
}

/* Prepared batches (kern.h): X4 weights beyond the in-place columns. */
X4_BATCH_FNS(avx512, g_x4_sets)

const struct kern_table kern_table_avx512 = {
    .name = "avx512",
    .quantize_act = kern_avx2_quantize_act,
    .matmul = avx512_matmul,
    .dot_kv = kern_avx2_dot_kv,
    .axpy_kv = kern_avx2_axpy_kv,
    .store_kv = kern_avx2_store_kv,
    .attn_scores = kern_avx512_attn_scores,
    .attn_values = kern_avx2_attn_values,
    .attn_block = kern_avx512_attn_block,
    .attn_blocks = kern_avx512_attn_blocks,
    .attn_merge = kern_avx2_attn_merge,
    .softmax = kern_avx2_softmax,
    .load_kv = kern_avx2_load_kv,
    .swiglu = kern_avx2_swiglu,
    .weight_layout = avx512_weight_layout,
    .batch_cols = avx512_batch_cols,
    .prepare_batch = avx512_prepare_batch,
    .matmul_batch = avx512_matmul_batch,
};
