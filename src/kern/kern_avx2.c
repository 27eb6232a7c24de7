/*
 * kern_avx2.c - the AVX2 + FMA + F16C kernel set (compiled with -mavx2 -mfma -mf16c; only
 * called after dispatch.c has checked the CPU).
 *
 * DESIGN
 * - Matmul = a driver (mm_drive) that walks output tiles, plus per-type micro-kernels ("tiles")
 *   that compute a small block of outputs y[c][r] for R rows x C columns over the whole k.
 *   Q4_0/Q8_0 have their own row-lane kernels (q8t_avx2.c: a lane per weight row, its own
 *   per-element contract). Q5_K uses 1 x C tiles: one unpacked weight block (nibbles split, scales
 *   broadcast) is reused for C activation columns, which is what makes prefill compute-bound
 *   instead of unpack-bound. Float types use R x C register tiles of FMA accumulators.
 *   Q4_K/Q6_K have their own driver (kq_drive): weights unpacked once per call into an
 *   L2-sized buffer, activations permuted once per call, 3 x 3 (Q4_K) / 2 x 3 (Q6_K) integer
 *   register tiles.
 *   Decode (nc = 1) uses the 1 x 1 (quantized) or 4 x 1 (float) tiles; Q4_K/Q6_K decode
 *   unpacks each block in registers (q4k_dec / q6k_dec), and 2..16 columns (a decode step of
 *   several sequences) unpack each block in registers once for up to 8 columns (q4k_small /
 *   q6k_small), with the decode operations per column.
 * - F16 / BF16 weights in memory: F16_X4 / BF16_X4 (types.h), x4_drive's order (kern_simd.h),
 *   lanes [2 rows][column mod 4] per register: prefill tiles of 8 rows x 3 columns (12
 *   accumulators, 4 weight loads and 3 broadcasts per 12 FMAs, no conversions); up to 32
 *   columns tiles reading the 4 x 4 tiles in place (4 groups x 1 column, 2 x 2, 1 x 3..4, in
 *   column chunks of 4 per k-block beyond); the same bits as the AVX-512 set's X4 kernels.
 * - Weight layout: this set asks for Q4_K weights in memory as Q4_K_IL (kern_weight_layout,
 *   quant.h): the quants already in the chunk order the kernels use, so Q4_K decode gets its 8
 *   chunks from 4 loads, masks and shifts instead of two 4 x 4 transposes of broadcast halves
 *   per block (+9-14% decode tokens/s on the 1B model). Raw Q4_K (mmap) runs the same
 *   arithmetic on the same chunks: the two layouts give bit-identical outputs.
 * - Fixed per-element arithmetic: every output element has its own accumulator and sees the
 *   same sequence of operations whatever the tile it is computed in; tiles only choose which
 *   elements are computed together. So results do not depend on [r0, r1) splits, on the tiling
 *   or on nc (decode and prefill of the same token give bit-identical outputs).
 *   Per element: a float 8-lane accumulator, one FMA per block (quantized: the block's exact
 *   integer dot product, converted, times d_w * d_x; Q4_K adds one FNMA per block for the
 *   mins; float types: one FMA per 8 elements), then a fixed horizontal sum, then (float types
 *   only) the k % 8 tail in order.
 * - Integer dot products: Q4_K/Q5_K/Q6_K use unsigned weights with vpmaddubsw (u8 x i8 -> i16
 *   pairs, no saturation possible for these ranges), then vpmaddwd with the sub-block scale
 *   (i16 -> i32); Q4_K/Q6_K first sum 8 / 2 such products in int16 (see the Q4_K / Q6_K section).
 *   Q6_K's -32 offset and Q4_K/Q5_K's mins come from the activation's bsums.
 *   (Q4_0/Q8_0: see q8t_avx2.c.)
 * - Activation quantization repeats quant_ref.c's float operations in the same order, so it
 *   is bit-identical to the reference (rounding is vroundps nearest-even = rintf).
 * - Cache blocking: rows are walked in blocks of ~128 KiB of weights (L2-resident; Q4_K/Q6_K:
 *   ~256 KiB unpacked, or 256 KiB of raw rows for the small-batch kernels) and, inside a
 *   block, every column tile sweeps the rows, so activations stay in L1 and weights in L2.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/nx_base.h"
#include "kern/kern_impl.h"
#include "kern/kern_simd.h"

/* ---- activation quantization -------------------------------------------------------------- */

/* 8 floats (already multiplied by id) -> 8 int32, rounded to nearest even. */
AI __m256i round_i32(__m256 v) {
    return _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

/* 32 floats * id -> 32 int8 in order. */
AI __m256i quant32(const float *x, __m256 id) {
    __m256i a = round_i32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
    __m256i b = round_i32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
    __m256i c = round_i32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
    __m256i d = round_i32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
    /* packs work per 128-bit lane: ab = a0 b0 a1 b1 (4 x i16 each), abcd = a0 b0 c0 d0 a1 b1
     * c1 d1 (4 x i8 each); a dword permute restores a b c d order */
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i abcd = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(abcd, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AI float amax_n(const float *x, int n) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, _mm256_and_ps(_mm256_loadu_ps(x + i), absmask));
    return hmax8(m);
}

void kern_avx2_quantize_act(enum nx_type wt, const float *x, void *xq, int64_t k) {
    switch (nx_type_in_file(wt)) { /* an internal layout takes its file type's activations */
    case NX_TYPE_F32:
    case NX_TYPE_F16:
    case NX_TYPE_BF16: memcpy(xq, x, (size_t)k * sizeof(float)); return;
    case NX_TYPE_Q4_0:
    case NX_TYPE_Q8_0: {
        struct block_q8_0 *b = xq;
        for (int64_t i = 0; i < k / QK8_0; i++, b++, x += QK8_0) {
            float d = amax_n(x, QK8_0) / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            b->d = nx_f32_to_half(d);
            _mm256_storeu_si256((__m256i *)b->qs, quant32(x, _mm256_set1_ps(id)));
        }
        return;
    }
    case NX_TYPE_Q4_K:
    case NX_TYPE_Q5_K:
    case NX_TYPE_Q6_K: {
        struct block_q8_K *b = xq;
        for (int64_t i = 0; i < k / QK_K; i++, b++, x += QK_K) {
            float d = amax_n(x, QK_K) / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            b->d = d;
            const __m256 idv = _mm256_set1_ps(id);
            const __m256i ones = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
            for (int j = 0; j < QK_K / 32; j++) {
                __m256i q = quant32(x + 32 * j, idv);
                _mm256_storeu_si256((__m256i *)(b->qs + 32 * j), q);
                /* sums of 16: pairs (maddubs with ones) -> quads (madd) -> 2 x 16 per lane */
                __m256i s4 = _mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), ones16);
                __m256i s8 = _mm256_hadd_epi32(s4, s4); /* per lane: q0+q1, q2+q3 (x2) */
                __m256i s16 = _mm256_hadd_epi32(s8, s8); /* per lane: sum of the lane's 16 */
                b->bsums[2 * j] = (int16_t)_mm256_extract_epi32(s16, 0);
                b->bsums[2 * j + 1] = (int16_t)_mm256_extract_epi32(s16, 4);
            }
        }
        return;
    }
    default: NX_ASSERT(!"kern_quantize_act: unsupported weight type");
    }
}

/* ---- float weights (F32, F16, BF16) x F32 activations -------------------------------------- */

AI __m256 load_w8(enum nx_type wt, const uint8_t *w, int64_t i) {
    if (wt == NX_TYPE_F32) return _mm256_loadu_ps((const float *)w + i);
    if (wt == NX_TYPE_F16) return _mm256_cvtph_ps(loadu128((const nx_half *)w + i));
    /* BF16: the 16 bits are the high half of a float */
    __m256i v = _mm256_cvtepu16_epi32(loadu128((const nx_bf16 *)w + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

AI void fl_tile(enum nx_type wt, const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                const uint8_t *x, size_t xs, float *y, int64_t ys) {
    __m256 acc[MAXT];
    UNROLL for (int t = 0; t < R * C; t++) acc[t] = _mm256_setzero_ps();
    int64_t k8 = k & ~(int64_t)7;
    for (int64_t i = 0; i < k8; i += 8) {
        __m256 wv[4];
        UNROLL for (int r = 0; r < R; r++) wv[r] = load_w8(wt, w + (size_t)r * ws, i);
        UNROLL for (int c = 0; c < C; c++) {
            __m256 xv = _mm256_loadu_ps((const float *)(x + (size_t)c * xs) + i);
            UNROLL for (int r = 0; r < R; r++) acc[r * C + c] = _mm256_fmadd_ps(wv[r], xv, acc[r * C + c]);
        }
    }
    float out[MAXT];
    UNROLL for (int t = 0; t < R * C; t++) out[t] = hsum8(acc[t]);
    for (int r = 0; r < R; r++) {
        for (int c = 0; c < C; c++) {
            const float *xr = (const float *)(x + (size_t)c * xs);
            float s = out[r * C + c];
            for (int64_t i = k8; i < k; i++) s += load_w1(wt, w + (size_t)r * ws, i) * xr[i];
            y[c * ys + r] = s;
        }
    }
}

/*
 * Decode tile of the float types: R rows x 1 column with the per-element operations of fl_tile
 * (one 8-lane FMA chain per row over k in order, hsum8, then the tail), R independent chains,
 * 32 elements per step and each row's stream prefetched PF_DIST bytes ahead (the hardware
 * prefetchers alone leave bandwidth unused with 8 concurrent streams).
 */
AI void fl_dec_tile(enum nx_type wt, const int R, int64_t k, const uint8_t *w, size_t ws,
                    const uint8_t *x, float *y) {
    const float *xf = (const float *)x;
    const size_t esz = wt == NX_TYPE_F32 ? 4 : 2, rowb = (size_t)k * esz;
    __m256 acc[8];
    UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    int64_t k8 = k & ~(int64_t)7, k32 = k & ~(int64_t)31, i = 0;
    for (; i < k32; i += 32) {
        UNROLL for (int r = 0; r < R; r++) {
            const char *pf = pf_row_ahead(w + (size_t)r * ws, (size_t)i * esz, rowb, (size_t)R * ws);
            kern_prefetch(KERN_PF_GROUPED, pf);
            if (esz == 4) kern_prefetch(KERN_PF_GROUPED, pf + 64);
        }
        UNROLL for (int j = 0; j < 32; j += 8) {
            __m256 xv = _mm256_loadu_ps(xf + i + j);
            UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(load_w8(wt, w + (size_t)r * ws, i + j), xv, acc[r]);
        }
    }
    for (; i < k8; i += 8) {
        __m256 xv = _mm256_loadu_ps(xf + i);
        UNROLL for (int r = 0; r < R; r++) acc[r] = _mm256_fmadd_ps(load_w8(wt, w + (size_t)r * ws, i), xv, acc[r]);
    }
    UNROLL for (int r = 0; r < R; r++) {
        float s = hsum8(acc[r]);
        for (int64_t t = k8; t < k; t++) s += load_w1(wt, w + (size_t)r * ws, t) * xf[t];
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
    TILE_FN(tname, 3, 4) \
    TILE_FN(tname, 1, 4) \
    static const struct tile_set tname##_set = {tname##_3x4, tname##_1x4, tname##_8x1, \
                                                tname##_1x1, 3, 4, 8};

FL_TILES(f32, NX_TYPE_F32)
FL_TILES(f16, NX_TYPE_F16)
FL_TILES(bf16, NX_TYPE_BF16)

/* ---- Q4_0 / Q8_0: row-lane kernels in q8t_avx2.c ---------------------------------------- */

#define Q_TILES(tname) \
    TILE_FN(tname, 1, 4) \
    TILE_FN(tname, 1, 1) \
    static const struct tile_set tname##_set = {tname##_1x4, tname##_1x4, tname##_1x1, \
                                                tname##_1x1, 1, 4, 1};

/* ---- Q5_K weights x Q8_K activations (Q4_K has its own path below) ------------------------- */

/*
 * One row against C activation columns. Chunk j (64 elements) holds sub-block 2j in the low
 * nibbles and 2j+1 in the high nibbles of qs[32j..32j+31]; Q5_K adds bit s of qh[l] as bit 4
 * of element l of sub-block s. Per super-block and column:
 *   acc += dx * (d * isum - dmin * msum)   (8 lanes; isum, msum exact integers)
 */
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
        /* d, dmin: the first two halves of both layouts */
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
        __m256i isum[MAXT];
        UNROLL for (int c = 0; c < C; c++) isum[c] = _mm256_setzero_si256();
        __m256i hb = bits == 5 ? loadu256(qh) : _mm256_setzero_si256();
        UNROLL for (int j = 0; j < 4; j++) {
            __m256i q = loadu256(qs + 32 * j);
            __m256i lo = _mm256_and_si256(q, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if (bits == 5) {
                /* bit 0 of each byte of hb is the fifth bit of the current sub-block */
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m10));
                hb = _mm256_srli_epi16(hb, 1);
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 4), m10));
                hb = _mm256_srli_epi16(hb, 1);
            }
            __m256i sl = _mm256_shuffle_epi8(R, loadu256(g_kq_sc[2 * j]));
            __m256i sh = _mm256_shuffle_epi8(R, loadu256(g_kq_sc[2 * j + 1]));
            UNROLL for (int c = 0; c < C; c++) {
                const struct block_q8_K *bx = (const struct block_q8_K *)(x + (size_t)c * xs) + b;
                __m256i pl = _mm256_maddubs_epi16(lo, loadu256(bx->qs + 64 * j));
                __m256i ph = _mm256_maddubs_epi16(hi, loadu256(bx->qs + 64 * j + 32));
                isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(pl, sl));
                isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(ph, sh));
                PIN(isum[c]);
            }
        }
        /* mins: m[s] * (bsums[2s] + bsums[2s+1]) */
        __m256i mdup = _mm256_shuffle_epi8(R, loadu256(g_kq_mdup));
        UNROLL for (int c = 0; c < C; c++) {
            const struct block_q8_K *bx = (const struct block_q8_K *)(x + (size_t)c * xs) + b;
            __m256i mp = _mm256_madd_epi16(loadu256(bx->bsums), mdup);
            __m256 t = _mm256_mul_ps(dwv, _mm256_cvtepi32_ps(isum[c]));
            t = _mm256_fnmadd_ps(dmv, _mm256_cvtepi32_ps(mp), t);
            acc[c] = _mm256_fmadd_ps(t, _mm256_broadcast_ss(&bx->d), acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) y[c * ys] = hsum8(acc[c]);
}

AI void q5k_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                 const uint8_t *x, size_t xs, float *y, int64_t ys) {
    (void)R, (void)ws;
    kq_tile(5, C, k, w, x, xs, y, ys);
}

Q_TILES(q5k)

/* ---- Q4_K / Q6_K: permuted-activation GEMM ------------------------------------------------ */

/*
 * Q4_K and Q6_K weights x Q8_K activations (kq_drive). Per call, the activation quants of all
 * columns are permuted into a per-thread buffer; per block of rows (~256 KiB unpacked, L2), the
 * weight rows are unpacked (unsigned quants in the same permuted order, scale vectors, float
 * scales); then 3 x 3 (Q4_K) or 2 x 3 (Q6_K) register tiles (rows x columns) run over the
 * unpacked rows: each activation load feeds three (two) rows, each weight load three columns.
 * Decode and batches of up to raw_nc columns (kern_impl.h: per set and type) skip the weight
 * buffer: q4k_dec / q6k_dec and the small-batch kernels unpack in registers with the same
 * operations.
 *
 * The permutation lets several vpmaddubsw products be summed in int16 before one vpmaddwd
 * applies the sub-block scales: every i16 lane of the summed products belongs to one
 * sub-block. A dot product does not care about the order of its terms and the integer sums are
 * exact, so every output element sees the same operations whichever path computes it.
 *
 * Q4_K: chunk (t, l) (t = 0..3, l = 0..1; 32 bytes) of a super-block holds, in dword i of its
 * low 128-bit lane, elements 16l+4t .. 16l+4t+3 of sub-block 2i and, in dword i of its high
 * lane, the same elements of sub-block 2i+1 (i = 0..3). All 8 chunk products are summed in
 * int16 (|lane| <= 8 * 2 * 15 * 127 = 30480), then one vpmaddwd with the 8 scales.
 *
 * Q6_K: group G (32 quants, see q6k_w32) holds sub-block 2G in its low and 2G+1 in its high
 * 128-bit lane. Pair P = groups 2P, 2P+1: A_P / B_P = the low / high 8 bytes of each lane of
 * both groups (vpunpckl/hqdq), so both have sub-blocks 4P, 4P+2 | 4P+1, 4P+3 in i16 lanes
 * 0-3, 4-7 | 8-11, 12-15. The two products are summed in int16 (|lane| <= 2 * 2 * 63 * 127 =
 * 32004), then one vpmaddwd per pair.
 */

#define Q4K_WB (QK_K + 96)  /* unpacked weight block: chunks, scales (16 i16), dmin * m[s], d x8 */
#define Q4K_C 3             /* columns of the prefill tiles (Q4_K and Q6_K) */
#define Q4K_R 3             /* rows of the Q4_K prefill tile (Q6_K: 2) */

/* Writes the permuted form of the nb Q8_K blocks of activation row x to xp. */
static void q4k_perm_x(const uint8_t *x, uint8_t *xp, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, xp += Q4K_XB) {
        const struct block_q8_K *bx = (const struct block_q8_K *)x + b;
        __m256i L[4], H[4];
        tr4x4(loadu256(bx->qs), loadu256(bx->qs + 64), loadu256(bx->qs + 128), loadu256(bx->qs + 192), L);
        tr4x4(loadu256(bx->qs + 32), loadu256(bx->qs + 96), loadu256(bx->qs + 160), loadu256(bx->qs + 224), H);
        UNROLL for (int t = 0; t < 4; t++) {
            _mm256_storeu_si256((__m256i *)(xp + 64 * t), _mm256_permute2x128_si256(L[t], H[t], 0x20));
            _mm256_storeu_si256((__m256i *)(xp + 64 * t + 32), _mm256_permute2x128_si256(L[t], H[t], 0x31));
        }
        __m256 dx = _mm256_set1_ps(bx->d);
        __m256i bs = _mm256_madd_epi16(loadu256(bx->bsums), _mm256_set1_epi16(1));
        _mm256_storeu_ps((float *)(xp + QK_K), _mm256_mul_ps(dx, _mm256_cvtepi32_ps(bs)));
        _mm256_storeu_ps((float *)(xp + QK_K + 32), dx);
    }
}

/* Q4_K -> Q4_K_IL: the chunks of the raw block, packed two per byte. */
void kern_avx2_q4k_interleave(const void *src, void *dst, int64_t nb) {
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q4_K *s = (const struct block_q4_K *)src + b;
        struct block_q4_K *d = (struct block_q4_K *)dst + b;
        __m256i ch[8];
        q4k_wchunks(s, ch);
        memcpy(d, s, offsetof(struct block_q4_K, qs));
        UNROLL for (int a = 0; a < 4; a++)
            _mm256_storeu_si256((__m256i *)(d->qs + 32 * a), _mm256_or_si256(ch[a], _mm256_slli_epi16(ch[a + 4], 4)));
    }
}

/* Unpacks the nb Q4_K (il: Q4_K_IL) blocks of weight row w to wp. */
AI void q4k_unpack(bool il, const uint8_t *w, uint8_t *wp, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, wp += Q4K_WB) {
        const struct block_q4_K *bw = (const struct block_q4_K *)w + b;
        __m256i ch[8], sv;
        __m256 mw, dw;
        q4k_chunks(il, bw, ch);
        UNROLL for (int i = 0; i < 8; i++) _mm256_storeu_si256((__m256i *)(wp + 32 * i), ch[i]);
        q4k_wscales(bw, &sv, &mw, &dw);
        _mm256_storeu_si256((__m256i *)(wp + QK_K), sv);
        _mm256_storeu_ps((float *)(wp + QK_K + 32), mw);
        _mm256_storeu_ps((float *)(wp + QK_K + 64), dw);
    }
}

static void q4k_unpack_w(const uint8_t *w, uint8_t *wp, int64_t nb) { q4k_unpack(false, w, wp, nb); }
static void q4kil_unpack_w(const uint8_t *w, uint8_t *wp, int64_t nb) { q4k_unpack(true, w, wp, nb); }

/* One Q4_K (il: Q4_K_IL) row x C <= KQ_SMALL_C permuted columns, unpacking each block in
 * registers once; per column the same operations as q4k_tile. C = 1 is decode. */
AI void q4k_small(bool il, const int C, int64_t nb, const uint8_t *w, const uint8_t *xp, size_t xps,
                  float *y, int64_t ys) {
    __m256 acc[KQ_SMALL_C];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q4_K *bw = (const struct block_q4_K *)w + b;
        const uint8_t *xb = xp + (size_t)b * Q4K_XB;
        prefetch_lines((const uint8_t *)bw, sizeof *bw);
        __m256i ch[8], sv;
        __m256 mw, dw;
        q4k_chunks(il, bw, ch);
        q4k_wscales(bw, &sv, &mw, &dw);
        UNROLL for (int c = 0; c < C; c++) {
            const uint8_t *xc = xb + (size_t)c * xps;
            __m256i s = _mm256_maddubs_epi16(ch[0], loadu256(xc));
            UNROLL for (int i = 1; i < 8; i++) s = _mm256_add_epi16(s, _mm256_maddubs_epi16(ch[i], loadu256(xc + 32 * i)));
            __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s, sv));
            __m256 a = _mm256_fmadd_ps(f, _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(xc + QK_K + 32))), acc[c]);
            acc[c] = _mm256_fnmadd_ps(mw, _mm256_loadu_ps((const float *)(xc + QK_K)), a);
        }
    }
    UNROLL for (int c = 0; c < C; c++) y[c * ys] = hsum8(acc[c]);
}

static void q4k_dec(int64_t nb, const uint8_t *w, const uint8_t *xp, float *y) { q4k_small(false, 1, nb, w, xp, 0, y, 0); }
static void q4kil_dec(int64_t nb, const uint8_t *w, const uint8_t *xp, float *y) { q4k_small(true, 1, nb, w, xp, 0, y, 0); }

/*
 * R unpacked rows (stride wps) x C permuted columns (stride xps). Per super-block, row and
 * column, with isum the exact integer sum_s sc[s] * dot_s (8 lanes of partial sums):
 *   acc += cvt(isum) * (d * dx);  acc -= (dmin * m[s]) * (dx * bsum[s])  (lane s = sub-block s)
 * The int16 sums (R x C), the R weight chunks and the one activation chunk live in registers
 * (3 x 3: 14 of 16); the float accumulators live in memory (one load and store per block).
 * A chunk costs R + C loads for R x C products. The earlier 2 x 3 tile with register
 * accumulators left the compiler no room for the activations, which it took as memory
 * operands of every product (R x C + R loads a chunk): on a machine with two load ports that
 * load traffic, not the arithmetic, set its speed (bench_kern nc=512: +4-17% for 3 x 3).
 */
AI void q4k_tile(const int R, const int C, int64_t nb, const uint8_t *wp, size_t wps,
                 const uint8_t *xp, size_t xps, float *y, int64_t ys) {
    __m256 acc[Q4K_R][Q4K_C];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    __asm__("" : : "r"(acc) : "memory");
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wp + (size_t)b * Q4K_WB, *xb = xp + (size_t)b * Q4K_XB;
        __m256i s[Q4K_R][Q4K_C];
        UNROLL for (int ch = 0; ch < 8; ch++) {
            __m256i wv[Q4K_R];
            UNROLL for (int r = 0; r < R; r++) wv[r] = loadu256(wb + (size_t)r * wps + 32 * ch);
            UNROLL for (int c = 0; c < C; c++) {
                __m256i xv = loadu256(xb + (size_t)c * xps + 32 * ch);
                PIN(xv);
                UNROLL for (int r = 0; r < R; r++) {
                    __m256i p = _mm256_maddubs_epi16(wv[r], xv);
                    s[r][c] = ch == 0 ? p : _mm256_add_epi16(s[r][c], p);
                    PIN(s[r][c]);
                }
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            const uint8_t *wr = wb + (size_t)r * wps;
            __m256i sv = loadu256(wr + QK_K);
            __m256 mw = _mm256_loadu_ps((const float *)(wr + QK_K + 32));
            __m256 dw = _mm256_loadu_ps((const float *)(wr + QK_K + 64));
            UNROLL for (int c = 0; c < C; c++) {
                const uint8_t *xc = xb + (size_t)c * xps;
                __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(s[r][c], sv));
                __m256 a = _mm256_fmadd_ps(f, _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(xc + QK_K + 32))), acc[r][c]);
                acc[r][c] = _mm256_fnmadd_ps(mw, _mm256_loadu_ps((const float *)(xc + QK_K)), a);
            }
        }
        __asm__("" : : : "memory");
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int c = 0; c < C; c++) y[c * ys + r] = hsum8(acc[r][c]);
}

typedef void (*kq_tile_fn)(int64_t nb, const uint8_t *wp, size_t wps, const uint8_t *xp,
                           size_t xps, float *y, int64_t ys);
#define Q4K_TILE_FN(R, C) \
    __attribute__((noinline)) static void q4k_##R##x##C(int64_t nb, const uint8_t *wp, size_t wps, const uint8_t *xp, \
                              size_t xps, float *y, int64_t ys) { \
        q4k_tile(R, C, nb, wp, wps, xp, xps, y, ys); \
    }
Q4K_TILE_FN(3, 3)
Q4K_TILE_FN(2, 3)
Q4K_TILE_FN(1, 3)
Q4K_TILE_FN(3, 1)
Q4K_TILE_FN(2, 1)
Q4K_TILE_FN(1, 1)

/*
 * Per-thread scratch buffer of the K-quant drivers (grown as needed, kept for the thread's
 * life, freed at thread exit): a fresh allocation per call would page-fault its way through
 * megabytes on every prefill matmul. When growing it fails, the call falls back to the
 * reference kernel (same activation format, results within the reference's tolerance) and
 * says so once, instead of failing: matmuls cannot return an error.
 */
static pthread_key_t g_scratch_key;
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static int g_scratch_key_ok;
static _Thread_local uint8_t *t_scratch;
static _Thread_local size_t t_scratch_n;
static atomic_int g_scratch_fail_next; /* test hook */
static atomic_flag g_scratch_warned = ATOMIC_FLAG_INIT;
static void scratch_key_init(void) { g_scratch_key_ok = pthread_key_create(&g_scratch_key, free) == 0; }

void kern_avx2_test_fail_scratch(bool arm) { atomic_store(&g_scratch_fail_next, arm); }

static uint8_t *kq_scratch(size_t n) {
    if (n > t_scratch_n) {
        pthread_once(&g_scratch_once, scratch_key_init);
        free(t_scratch);
        t_scratch = NULL;
        t_scratch_n = 0;
        n = (n + n / 4 + 65535) & ~(size_t)65535;
        if (!atomic_exchange(&g_scratch_fail_next, 0)) t_scratch = aligned_alloc(64, n);
        if (g_scratch_key_ok) pthread_setspecific(g_scratch_key, t_scratch);
        if (!t_scratch) {
            if (!atomic_flag_test_and_set(&g_scratch_warned))
                nx_log(NX_LOG_WARN, "kernels: no memory for a %zu-byte matmul buffer; such calls "
                                    "run without it (K-quant ones on the reference kernel)", n);
            return NULL;
        }
        t_scratch_n = n;
    }
    return t_scratch;
}

uint8_t *kern_avx2_scratch(size_t n) { return kq_scratch(n); }

/* Unpacked Q6_K weight block: pairs A_P, B_P; the 4 pair scale vectors; 32 * sc[s] (16 i16);
 * d 8 times. */
#define Q6K_WB (QK_K + 192)

static void q6k_perm_x(const uint8_t *x, uint8_t *xp, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, xp += Q6K_XB) {
        const struct block_q8_K *bx = (const struct block_q8_K *)x + b;
        UNROLL for (int p = 0; p < 4; p++) {
            __m256i g0 = loadu256(bx->qs + 64 * p), g1 = loadu256(bx->qs + 64 * p + 32);
            _mm256_storeu_si256((__m256i *)(xp + 64 * p), _mm256_unpacklo_epi64(g0, g1));
            _mm256_storeu_si256((__m256i *)(xp + 64 * p + 32), _mm256_unpackhi_epi64(g0, g1));
        }
        _mm256_storeu_si256((__m256i *)(xp + QK_K), loadu256(bx->bsums));
        _mm256_storeu_ps((float *)(xp + QK_K + 32), _mm256_set1_ps(bx->d));
    }
}

static void q6k_unpack_w(const uint8_t *w, uint8_t *wp, int64_t nb) {
    for (int64_t b = 0; b < nb; b++, wp += Q6K_WB) {
        __m256i wv[8], scv[4], sc32;
        __m256 dw;
        q6k_wblock((const struct block_q6_K *)w + b, wv, scv, &sc32, &dw);
        UNROLL for (int i = 0; i < 8; i++) _mm256_storeu_si256((__m256i *)(wp + 32 * i), wv[i]);
        UNROLL for (int p = 0; p < 4; p++) _mm256_storeu_si256((__m256i *)(wp + QK_K + 32 * p), scv[p]);
        _mm256_storeu_si256((__m256i *)(wp + QK_K + 128), sc32);
        _mm256_storeu_ps((float *)(wp + QK_K + 160), dw);
    }
}

/* Per super-block, row and column:
 *   acc += cvt(sum_P vpmaddwd(A_P.x + B_P.x, scv_P) - vpmaddwd(bsums, 32 sc)) * (d * dx)
 * for one row x C <= KQ_SMALL_C permuted columns, each block unpacked once. C = 1 is decode. */
AI void q6k_small(const int C, int64_t nb, const uint8_t *w, const uint8_t *xp, size_t xps, float *y,
                  int64_t ys) {
    __m256 acc[KQ_SMALL_C];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q6_K *bw = (const struct block_q6_K *)w + b;
        prefetch_lines((const uint8_t *)bw, sizeof *bw);
        __m256i wv[8], scv[4], sc32;
        __m256 dw;
        q6k_wblock(bw, wv, scv, &sc32, &dw);
        UNROLL for (int c = 0; c < C; c++) {
            const uint8_t *xb = xp + (size_t)c * xps + (size_t)b * Q6K_XB;
            __m256i isum = _mm256_madd_epi16(loadu256(xb + QK_K), sc32);
            UNROLL for (int p = 0; p < 4; p++) {
                __m256i sp = _mm256_add_epi16(_mm256_maddubs_epi16(wv[2 * p], loadu256(xb + 64 * p)),
                                              _mm256_maddubs_epi16(wv[2 * p + 1], loadu256(xb + 64 * p + 32)));
                isum = p == 0 ? _mm256_sub_epi32(_mm256_madd_epi16(sp, scv[p]), isum)
                              : _mm256_add_epi32(isum, _mm256_madd_epi16(sp, scv[p]));
            }
            __m256 dwx = _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(xb + QK_K + 32)));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), dwx, acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) y[c * ys] = hsum8(acc[c]);
}

static void q6k_dec(int64_t nb, const uint8_t *w, const uint8_t *xp, float *y) { q6k_small(1, nb, w, xp, 0, y, 0); }

/* R unpacked rows x C permuted columns; the float accumulators live in memory (one load and
 * store per block), the registers hold the int32 sums. */
AI void q6k_tile(const int R, const int C, int64_t nb, const uint8_t *wp, size_t wps,
                 const uint8_t *xp, size_t xps, float *y, int64_t ys) {
    __m256 acc[2][Q4K_C];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int c = 0; c < C; c++) acc[r][c] = _mm256_setzero_ps();
    __asm__("" : : "r"(acc) : "memory");
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *wb = wp + (size_t)b * Q6K_WB, *xb = xp + (size_t)b * Q6K_XB;
        __m256i is[2][Q4K_C];
        UNROLL for (int p = 0; p < 4; p++) {
            __m256i wa[2], wbv[2];
            UNROLL for (int r = 0; r < R; r++) {
                wa[r] = loadu256(wb + (size_t)r * wps + 64 * p);
                wbv[r] = loadu256(wb + (size_t)r * wps + 64 * p + 32);
            }
            UNROLL for (int c = 0; c < C; c++) {
                __m256i xa = loadu256(xb + (size_t)c * xps + 64 * p), xb2 = loadu256(xb + (size_t)c * xps + 64 * p + 32);
                UNROLL for (int r = 0; r < R; r++) {
                    const uint8_t *wr = wb + (size_t)r * wps;
                    __m256i sp = _mm256_add_epi16(_mm256_maddubs_epi16(wa[r], xa), _mm256_maddubs_epi16(wbv[r], xb2));
                    __m256i m = _mm256_madd_epi16(sp, loadu256(wr + QK_K + 32 * p));
                    if (p == 0) {
                        __m256i off = _mm256_madd_epi16(loadu256(xb + (size_t)c * xps + QK_K), loadu256(wr + QK_K + 128));
                        is[r][c] = _mm256_sub_epi32(m, off);
                    } else {
                        is[r][c] = _mm256_add_epi32(is[r][c], m);
                    }
                    PIN(is[r][c]);
                }
            }
        }
        UNROLL for (int r = 0; r < R; r++) {
            __m256 dw = _mm256_loadu_ps((const float *)(wb + (size_t)r * wps + QK_K + 160));
            UNROLL for (int c = 0; c < C; c++) {
                __m256 dwx = _mm256_mul_ps(dw, _mm256_loadu_ps((const float *)(xb + (size_t)c * xps + QK_K + 32)));
                acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][c]), dwx, acc[r][c]);
            }
        }
        __asm__("" : : : "memory");
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int c = 0; c < C; c++) y[c * ys + r] = hsum8(acc[r][c]);
}

#define Q6K_TILE_FN(R, C) \
    __attribute__((noinline)) static void q6k_##R##x##C(int64_t nb, const uint8_t *wp, size_t wps, \
                                                        const uint8_t *xp, size_t xps, float *y, int64_t ys) { \
        q6k_tile(R, C, nb, wp, wps, xp, xps, y, ys); \
    }
Q6K_TILE_FN(2, 3)
Q6K_TILE_FN(1, 3)
Q6K_TILE_FN(2, 1)
Q6K_TILE_FN(1, 1)

/*
 * Small batches (2 <= nc <= raw_nc, e.g. one decode step of several sequences; with the
 * AVX-512 pair kernels every width): the decode path would stream and unpack the weights once
 * per column, and the prefill path writes an unpacked copy of every row to the buffer and reads
 * it back, amortized over too few columns (and, on AVX-512, slower than these kernels at any
 * width). One weight row at a time, each block is unpacked in registers once and applied
 * to C <= KQ_SMALL_C permuted columns (q4k_small / q6k_small, whose C = 1 case is the decode
 * kernel), each column with its own float accumulator, one block after another, then hsum8:
 * a column's result is bit-identical to its nc = 1 result.
 * nc > KQ_SMALL_C runs ceil(nc / KQ_SMALL_C) passes of near-equal width per row, the row then
 * being in L1 for the later passes; beyond two passes the rows go in blocks of KQ_RAW_BLOCK
 * bytes, each block read from memory once and from L2 by the later groups of two passes (the
 * activations of one group, 2 x 8 columns, stay in L2 beside it: ~150 KiB at k = 8192).
 * The AVX-512 set runs the same driver with kernels that take two rows per zmm (kern_avx512.c,
 * same per-column operations).
 */
#define KQ_RAW_BLOCK (256 * 1024) /* bytes: 512 KiB and 1 MiB were 1-3% faster on the Xeon's 2 MiB
                                     L2 at k = 8192, 512 columns; 256 KiB leaves room in Zen 3's
                                     512 KiB for the activations */
/* One weight row w x C permuted columns (stride xps) -> y[c * ys]. */
typedef void (*kq_small_fn)(int64_t nb, const uint8_t *w, const uint8_t *xp, size_t xps, float *y,
                            int64_t ys);
#define KQ_SMALL_FNS(name, call) \
    __attribute__((noinline)) static void name##_2(KQ_SMALL_ARGS) { call(2); } \
    __attribute__((noinline)) static void name##_3(KQ_SMALL_ARGS) { call(3); } \
    __attribute__((noinline)) static void name##_4(KQ_SMALL_ARGS) { call(4); } \
    __attribute__((noinline)) static void name##_5(KQ_SMALL_ARGS) { call(5); } \
    __attribute__((noinline)) static void name##_6(KQ_SMALL_ARGS) { call(6); } \
    __attribute__((noinline)) static void name##_7(KQ_SMALL_ARGS) { call(7); } \
    __attribute__((noinline)) static void name##_8(KQ_SMALL_ARGS) { call(8); }
#define KQ_SMALL_ARGS int64_t nb, const uint8_t *w, const uint8_t *xp, size_t xps, float *y, int64_t ys
#define Q4K_SMALL(C) q4k_small(false, C, nb, w, xp, xps, y, ys)
#define Q4KIL_SMALL(C) q4k_small(true, C, nb, w, xp, xps, y, ys)
#define Q6K_SMALL(C) q6k_small(C, nb, w, xp, xps, y, ys)
KQ_SMALL_FNS(q4k_s, Q4K_SMALL)
KQ_SMALL_FNS(q4kil_s, Q4KIL_SMALL)
KQ_SMALL_FNS(q6k_s, Q6K_SMALL)
#undef KQ_SMALL_ARGS
/* [C] for C = 2..KQ_SMALL_C (C = 1 is the decode kernel) */
#define KQ_SMALL_TABLE(name) {NULL, NULL, name##_2, name##_3, name##_4, name##_5, name##_6, name##_7, name##_8}

struct kq_kern {
    size_t xb, wb; /* bytes per block: permuted activations, unpacked weights */
    void (*perm_x)(const uint8_t *x, uint8_t *xp, int64_t nb);
    enum nx_type type;
    void (*unpack_w)(const uint8_t *w, uint8_t *wp, int64_t nb);
    void (*dec)(int64_t nb, const uint8_t *w, const uint8_t *xp, float *y);
    int tr;              /* rows of the widest tile (2 or 3) */
    kq_tile_fn t3[4], t1[4]; /* [R]: R rows x 3 columns, R rows x 1 column (R = 1..tr) */
    kq_small_fn small[KQ_SMALL_C + 1]; /* [C]: one raw row x C columns (C = 2..KQ_SMALL_C) */
};
static const struct kq_kern q4k_kern = {Q4K_XB, Q4K_WB, q4k_perm_x, NX_TYPE_Q4_K, q4k_unpack_w, q4k_dec, 3,
                                        {NULL, q4k_1x3, q4k_2x3, q4k_3x3}, {NULL, q4k_1x1, q4k_2x1, q4k_3x1},
                                        KQ_SMALL_TABLE(q4k_s)};
static const struct kq_kern q4kil_kern = {Q4K_XB, Q4K_WB, q4k_perm_x, NX_TYPE_Q4_K_IL, q4kil_unpack_w, q4kil_dec, 3,
                                          {NULL, q4k_1x3, q4k_2x3, q4k_3x3}, {NULL, q4k_1x1, q4k_2x1, q4k_3x1},
                                          KQ_SMALL_TABLE(q4kil_s)};
static const struct kq_kern q6k_kern = {Q6K_XB, Q6K_WB, q6k_perm_x, NX_TYPE_Q6_K, q6k_unpack_w, q6k_dec, 2,
                                        {NULL, q6k_1x3, q6k_2x3, NULL}, {NULL, q6k_1x1, q6k_2x1, NULL},
                                        KQ_SMALL_TABLE(q6k_s)};

/* Rows [b0, b1) of the unpacked block wp (row b0 first) x columns [c, c + width) through the
 * tiles ts[] (R rows each, the widest kk->tr first). */
static void kq_rows(const struct kq_kern *kk, kq_tile_fn const ts[4], int64_t nb, int64_t b0,
                    int64_t b1, const uint8_t *wp, size_t wps, const uint8_t *xp, size_t xps,
                    float *y, int64_t ys) {
    int64_t r = b0;
    for (int R = kk->tr; R >= 1; R--) {
        for (; r + R <= b1; r += R) ts[R](nb, wp + (size_t)(r - b0) * wps, wps, xp, xps, y + r, ys);
    }
}

/* The scratch layout of one kq_drive call: permuted activations (xbytes), then (prefill
 * tiles, raw = false) rb unpacked weight rows. Returns the bytes needed. */
static size_t kq_plan(const struct kq_kern *kk, int64_t k, int64_t nc, bool raw, size_t *xbytes, int64_t *rb) {
    int64_t nb = k / QK_K;
    size_t xps = (size_t)nb * kk->xb, wps = (size_t)nb * kk->wb;
    /* rows per block: ~256 KiB of unpacked weights (L2), a multiple of 6. Every row block
       streams all columns' activations past it, so small blocks at large k cost L3 bandwidth:
       at k = 8192 and 512 columns 96 KiB (6 rows) gave 176 / 131 GFLOP/s (Q4_K / Q6_K,
       dev/bench_batch, AVX2 kernels, Xeon), 256 KiB 211-213 / 155-159, 384 KiB 218 / 154;
       smaller k and batches within noise. 256 KiB leaves Zen 3's 512 KiB L2 room for the
       activations. */
    int64_t r = raw ? 0 : (int64_t)((256 * 1024) / wps);
    *rb = raw ? 0 : r < 6 ? 6 : r - r % 6;
    *xbytes = (xps * (size_t)nc + 63) & ~(size_t)63;
    return *xbytes + wps * (size_t)*rb;
}

bool kern_avx2_reserve(int64_t k_max, int64_t nc_max) {
    static const struct kq_kern *const kks[2] = {&q4k_kern, &q6k_kern};
    size_t need = 0, xb;
    int64_t rb;
    /* the weight buffer is not monotonic in k (rows per block round down): try every k */
    for (int64_t k = QK_K; k <= k_max; k += QK_K) {
        for (int i = 0; i < 2; i++) {
            need = NX_MAX(need, kq_plan(kks[i], k, nc_max, false, &xb, &rb));
        }
        if (nc_max >= Q8T5_MIN_NC) { /* Q8_0 / Q4_0 prefill, either SIMD set */
            need = NX_MAX(need, q8t2_plan(k, nc_max, &xb, &rb));
            need = NX_MAX(need, q8t5_plan(k, nc_max, &xb, &rb));
        }
    }
    if (nc_max >= Q8T5_MIN_NC && k_max >= 32) { /* the weight part is largest at k_max */
        need = NX_MAX(need, q8t2_plan(k_max, nc_max, &xb, &rb));
        need = NX_MAX(need, q8t5_plan(k_max, nc_max, &xb, &rb));
    }
    return need == 0 || kq_scratch(need) != NULL;
}

/* Rows [r0, r1) x nc permuted columns through the small-batch kernels, row by row (two at a
 * time through pair when it is not NULL), the columns in ceil(nc / KQ_SMALL_C) passes of
 * near-equal width, the row being in L1 for the later passes. */
static void kq_small_rows(const struct kq_kern *kk, const kern_kq_pair_fn *pair, int64_t nb, const uint8_t *w,
                          size_t ws, int64_t r0, int64_t r1, const uint8_t *xp, size_t xps, int64_t nc,
                          float *y, int64_t ys) {
    int64_t np = (nc + KQ_SMALL_C - 1) / KQ_SMALL_C; /* passes of width nc / np or one more */
    for (int64_t r = r0; r < r1;) {
        bool two = pair && r + 1 < r1;
        for (int64_t p = 0, c = 0; p < np; p++) {
            int64_t cw = (nc - c) / (np - p);
            if (two) pair[cw](nb, w + (size_t)r * ws, ws, xp + (size_t)c * xps, xps, y + c * ys + r, ys);
            else kk->small[cw](nb, w + (size_t)r * ws, xp + (size_t)c * xps, xps, y + c * ys + r, ys);
            c += cw;
        }
        r += two ? 2 : 1;
    }
}

/* pair: small-batch kernels over two rows ([C], C = 2..KQ_SMALL_C), or NULL; calls of up to
 * raw_nc columns run through the small-batch kernels, wider ones through the prefill tiles. */
static void kq_drive(const struct kq_kern *kk, const kern_kq_pair_fn *pair, int64_t raw_nc, int64_t k,
                     const uint8_t *w, size_t ws, int64_t r0, int64_t r1, const uint8_t *x, size_t xs,
                     int64_t nc, float *y, int64_t ys) {
    int64_t nb = k / QK_K, rb;
    bool raw = nc <= raw_nc;
    size_t xps = (size_t)nb * kk->xb, wps = (size_t)nb * kk->wb, xbytes;
    uint8_t *xp = kq_scratch(kq_plan(kk, k, nc, raw, &xbytes, &rb));
    if (!xp) {
        kern_ref_matmul(kk->type, k, w, ws, r0, r1, x, xs, nc, y, ys);
        return;
    }
    uint8_t *wp = xp + xbytes;
    for (int64_t c = 0; c < nc; c++) kk->perm_x(x + (size_t)c * xs, xp + (size_t)c * xps, nb);
    if (nc == 1) {
        for (int64_t r = r0; r < r1; r++) kk->dec(nb, w + (size_t)r * ws, xp, y + r);
        return;
    }
    if (raw) {
        /* blocks of KQ_RAW_BLOCK bytes of rows (an even count) x groups of two passes:
           ceil(nc / KQ_SMALL_C) passes of near-equal width, two at a time (the last alone when
           their count is odd); one group over all rows up to 2 x KQ_SMALL_C columns */
        int64_t bs = NX_MAX((int64_t)2, (int64_t)(KQ_RAW_BLOCK / ws)) & ~(int64_t)1;
        int64_t np = (nc + KQ_SMALL_C - 1) / KQ_SMALL_C;
        for (int64_t b0 = r0; b0 < r1; b0 += bs) {
            int64_t b1 = NX_MIN(r1, b0 + bs);
            for (int64_t p = 0, c = 0; p < np; p += 2) {
                int64_t cw = (nc - c) / (np - p);
                if (p + 1 < np) cw += (nc - c - cw) / (np - p - 1);
                kq_small_rows(kk, pair, nb, w, ws, b0, b1, xp + (size_t)c * xps, xps, cw, y + c * ys, ys);
                c += cw;
            }
        }
        return;
    }
    for (int64_t b0 = r0; b0 < r1; b0 += rb) {
        int64_t b1 = NX_MIN(r1, b0 + rb);
        for (int64_t r = b0; r < b1; r++) kk->unpack_w(w + (size_t)r * ws, wp + (size_t)(r - b0) * wps, nb);
        int64_t c = 0;
        for (; c + Q4K_C <= nc; c += Q4K_C) kq_rows(kk, kk->t3, nb, b0, b1, wp, wps, xp + (size_t)c * xps, xps, y + c * ys, ys);
        for (; c < nc; c++) kq_rows(kk, kk->t1, nb, b0, b1, wp, wps, xp + (size_t)c * xps, xps, y + c * ys, ys);
    }
}

void kern_avx2_kq_matmul(enum nx_type wt, int64_t k, const void *w, size_t ws, int64_t r0, int64_t r1,
                         const void *xq, size_t xs, int64_t nc, float *y, int64_t ys,
                         const struct kern_kq_pairs *pairs) {
    bool q6 = wt == NX_TYPE_Q6_K, il = wt == NX_TYPE_Q4_K_IL;
    NX_ASSERT((q6 || il || wt == NX_TYPE_Q4_K) && "kern_avx2_kq_matmul: not a Q4_K / Q6_K type");
    const struct kq_kern *kk = q6 ? &q6k_kern : il ? &q4kil_kern : &q4k_kern;
    const kern_kq_pair_fn *pair = !pairs ? NULL : q6 ? pairs->q6k : il ? pairs->q4kil : pairs->q4k;
    if (pair && !pair[2]) pair = NULL; /* the set has none for this type */
    int64_t raw_nc = pair ? pairs->raw_nc : q6 ? KQ_RAW_NC_AVX2_Q6K : KQ_RAW_NC_AVX2_Q4K;
    kq_drive(kk, pair, raw_nc, k, w, ws, r0, r1, xq, xs, nc, y, ys);
}

/* ---- F16_X4 / BF16_X4 weights (rows interleaved by fours, types.h) x F32 activations ------ */

/* 8 16-bit elements (rows 2a, 2a + 1 of a 4 x 4 tile) as floats. */
AI __m256 x4_cvt8(enum nx_type wt, const uint8_t *p) {
    if (wt == NX_TYPE_F16_X4) return _mm256_cvtph_ps(loadu128(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p)), 16));
}

/* The 4 row sums of a group's two accumulators (rows 0-1 and 2-3, lanes [row][column mod 4]),
 * each (l0 + l1) + (l2 + l3), x4_drive's order (kern_simd.h). */
AI __m128 x4_rowsums8(__m256 a01, __m256 a23) {
    a01 = _mm256_add_ps(a01, _mm256_permute_ps(a01, 0xB1)); /* lane j + lane j ^ 1 */
    a01 = _mm256_add_ps(a01, _mm256_permute_ps(a01, 0x4E)); /* + the other pair */
    a23 = _mm256_add_ps(a23, _mm256_permute_ps(a23, 0xB1));
    a23 = _mm256_add_ps(a23, _mm256_permute_ps(a23, 0x4E));
    __m256 t = _mm256_shuffle_ps(a01, a23, 0x00); /* [r0 r0 r2 r2 | r1 r1 r3 r3] */
    __m128 lo = _mm256_castps256_ps128(t), hi = _mm256_extractf128_ps(t, 1);
    return _mm_movelh_ps(_mm_unpacklo_ps(lo, hi), _mm_unpackhi_ps(lo, hi));
}

/* In place (decode and small batches): G groups of 4 rows (group g at w + 4g * ws) . C
 * activation rows (x + c * xs bytes) over the k-blocks of [k0, k0 + n) (k0 a block start),
 * added to y[c * ys + 0 .. 4G) (to 0 when k0 = 0); two accumulators per group and column, the
 * weight tiles read in place, in order, each converted once for the C columns; when pf, each
 * group's stream prefetched PF_DIST ahead (on into the next G groups). */
AI void x4_dec_tile8(enum nx_type wt, const int G, const int C, int64_t k0, int64_t n,
                     const uint8_t *w, size_t ws, const uint8_t *x, size_t xs, float *y,
                     int64_t ys, bool pf) {
    const size_t gbytes = 4 * ws;
    __m128 sums[4];
    x4_sums_load(sums, G, C, k0, y, ys);
    for (int64_t kb = k0; kb < k0 + n; kb += X4_KC) {
        int64_t kend = NX_MIN(k0 + n, kb + X4_KC);
        __m256 acc[8];
        UNROLL for (int t = 0; t < 2 * G * C; t++) acc[t] = _mm256_setzero_ps();
        for (int64_t i = kb; i < kend; i += 16) {
            if (pf) x4_prefetch_groups(w, gbytes, G, i);
            UNROLL for (int j = 0; j < 4; j++) {
                __m256 xv[4];
                UNROLL for (int c = 0; c < C; c++) {
                    const float *xc = (const float *)(x + (size_t)c * xs) + i + 4 * j;
                    xv[c] = _mm256_broadcast_ps((const __m128 *)xc);
                }
                UNROLL for (int g = 0; g < G; g++) {
                    const uint8_t *p = w + (size_t)g * gbytes + (size_t)i * 8 + 32 * j;
                    __m256 w01 = x4_cvt8(wt, p), w23 = x4_cvt8(wt, p + 16);
                    UNROLL for (int c = 0; c < C; c++) {
                        __m256 *a = acc + 2 * (g * C + c);
                        a[0] = _mm256_fmadd_ps(w01, xv[c], a[0]);
                        a[1] = _mm256_fmadd_ps(w23, xv[c], a[1]);
                    }
                }
            }
        }
        UNROLL for (int t = 0; t < G * C; t++)
            sums[t] = _mm_add_ps(sums[t], x4_rowsums8(acc[2 * t], acc[2 * t + 1]));
    }
    x4_sums_store(sums, G, C, y, ys);
}

/* Prefill tile: G groups x C columns over one k-block of n elements (x4_drive's wp, xp). */
AI void x4_tile8(const int G, const int C, int64_t n, const float *wp, const float *xp, float *y,
                 int64_t ys, bool first) {
    __m256 acc[12];
    UNROLL for (int t = 0; t < 2 * G * C; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; i += 4) {
        __m256 wv[4];
        UNROLL for (int g = 0; g < G; g++) {
            wv[2 * g] = _mm256_loadu_ps(wp + ((size_t)g * (size_t)n + (size_t)i) * 4);
            wv[2 * g + 1] = _mm256_loadu_ps(wp + ((size_t)g * (size_t)n + (size_t)i) * 4 + 8);
        }
        UNROLL for (int c = 0; c < C; c++) {
            __m256 xv = _mm256_broadcast_ps((const __m128 *)(xp + i * C + 4 * c));
            UNROLL for (int g = 0; g < G; g++) {
                __m256 *a = acc + 2 * (g * C + c);
                a[0] = _mm256_fmadd_ps(wv[2 * g], xv, a[0]);
                a[1] = _mm256_fmadd_ps(wv[2 * g + 1], xv, a[1]);
            }
        }
    }
    UNROLL for (int g = 0; g < G; g++) {
        UNROLL for (int c = 0; c < C; c++) {
            float *o = y + c * ys + 4 * g;
            __m128 prev = first ? _mm_setzero_ps() : _mm_loadu_ps(o);
            const __m256 *a = acc + 2 * (g * C + c);
            _mm_storeu_ps(o, _mm_add_ps(prev, x4_rowsums8(a[0], a[1])));
        }
    }
}

#define X4_TILE8(G, C) \
    static void x4_tile8_##G##x##C(int64_t n, const float *wp, const float *xp, float *y, \
                                   int64_t ys, bool first) { \
        x4_tile8(G, C, n, wp, xp, y, ys, first); \
    }
X4_TILE8(1, 1) X4_TILE8(1, 2) X4_TILE8(1, 3) X4_TILE8(2, 1) X4_TILE8(2, 2) X4_TILE8(2, 3)
/* [G - 1][C - 1]: 2 groups x 3 columns (12 accumulators, the weights of 2 groups, one
 * broadcast: 17 values, one from memory) ran 96-100 GFLOP/s on the Xeon against 77-87 for
 * 1 x 6, 2 x 2 or 3 x 2 (the file layout's 3 x 4 tile: 83-86) */
static const x4_tile_fn g_x4_tiles8[2][3] = {{x4_tile8_1x1, x4_tile8_1x2, x4_tile8_1x3},
                                             {x4_tile8_2x1, x4_tile8_2x2, x4_tile8_2x3}};

/* Packs the activations of the k-block [k0, k0 + n) of nc columns for the tiles above:
 * column tile c0 (tc columns, fewer in the last) at dst + c0 * n, as [n / 4][C][4]. */
static void x4_pack_x8(const uint8_t *x, size_t xs, int64_t nc, int tc, int64_t k0, int64_t n,
                       float *dst) {
    for (int64_t c0 = 0; c0 < nc; c0 += tc) {
        int C = (int)NX_MIN((int64_t)tc, nc - c0);
        float *d = dst + (size_t)c0 * (size_t)n;
        for (int c = 0; c < C; c++) {
            const float *src = (const float *)(x + (size_t)(c0 + c) * xs) + k0;
            for (int64_t i = 0; i < n; i += 4)
                _mm_storeu_ps(d + i * C + 4 * c, _mm_loadu_ps(src + i));
        }
    }
}

/* The k-block [k0, k0 + n) of G groups of rows from row r as floats for the tiles above,
 * wp: [g][n / 4][16]; each group's stream prefetched PF_DIST ahead (on into the next tile's
 * rows past its end). */
static void x4_convert_w8(enum nx_type wt, const uint8_t *w, size_t ws, int64_t r, int G,
                          int64_t k0, int64_t n, float *wp) {
    const size_t gbytes = 4 * ws;
    for (int g = 0; g < G; g++) {
        const uint8_t *grp = w + (size_t)(r + 4 * g) * ws;
        float *dst = wp + (size_t)g * (size_t)n * 4;
        for (int64_t i = 0; i < 4 * n; i += 32) {
            size_t off = (size_t)(4 * k0 + i) * 2;
            kern_prefetch(KERN_PF_GROUPED, pf_row_ahead(grp, off, gbytes, (size_t)G * gbytes));
            UNROLL for (int h = 0; h < 4; h++)
                _mm256_storeu_ps(dst + i + 8 * h, x4_cvt8(wt, grp + off + 16 * h));
        }
    }
}

#define X4_DEC8(wname, wt, G, C) \
    static void x4_dec8_##wname##_##G##x##C(int64_t k0, int64_t n, const uint8_t *w, \
                                            size_t ws, const uint8_t *x, size_t xs, float *y, \
                                            int64_t ys, bool pf) { \
        x4_dec_tile8(wt, G, C, k0, n, w, ws, x, xs, y, ys, pf); \
    }
#define X4_DEC8_TYPE(wname, wt) \
    X4_DEC8(wname, wt, 1, 1) X4_DEC8(wname, wt, 2, 1) X4_DEC8(wname, wt, 3, 1) \
    X4_DEC8(wname, wt, 4, 1) X4_DEC8(wname, wt, 1, 2) X4_DEC8(wname, wt, 2, 2) \
    X4_DEC8(wname, wt, 1, 3) X4_DEC8(wname, wt, 1, 4)
X4_DEC8_TYPE(f16, NX_TYPE_F16_X4)
X4_DEC8_TYPE(bf16, NX_TYPE_BF16_X4)
/* [type][C - 1][G - 1]: 16 registers hold 4 groups x 1 column, 2 x 2, 1 x 3, 1 x 4 */
#define X4_DEC8_PTRS(n) \
    {{x4_dec8_##n##_1x1, x4_dec8_##n##_2x1, x4_dec8_##n##_3x1, x4_dec8_##n##_4x1}, \
     {x4_dec8_##n##_1x2, x4_dec8_##n##_2x2}, {x4_dec8_##n##_1x3}, {x4_dec8_##n##_1x4}}
static const x4_dec_fn g_x4_dec8[2][4][4] = {X4_DEC8_PTRS(f16), X4_DEC8_PTRS(bf16)};
static const int g_x4_dec8_groups[4] = {4, 2, 1, 1};
/* In place up to 32 columns. dev/bench_batch on the Xeon (weights from DRAM, one thread), ms
   per call in place / prefill tiles, 8192 x 2048 then 2048 x 8192: nc 16 7.1-8.5 / 9.6-10.2,
   7.6-7.9 / 9.1-9.4; nc 32 13.6 / 15.9-16.0, 13.7 / 15.2-15.5; nc 48 20.1 / 21.4-22.0, 20.9 /
   19.8-20.7. */
static const struct x4_set g_x4_sets8[2] = {
    {&g_x4_tiles8[0][0], 2, 3, x4_pack_x8, x4_convert_w8, &g_x4_dec8[0][0][0], 4, 4,
     g_x4_dec8_groups, X4_INPLACE_NC_AVX2},
    {&g_x4_tiles8[0][0], 2, 3, x4_pack_x8, x4_convert_w8, &g_x4_dec8[1][0][0], 4, 4,
     g_x4_dec8_groups, X4_INPLACE_NC_AVX2}};

void kern_avx2_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                      int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                      int64_t y_stride) {

    if (wt == NX_TYPE_Q4_K_IL || wt == NX_TYPE_Q4_K || wt == NX_TYPE_Q6_K) { /* Q4_K_IL: internal id (types.h) */
        kern_avx2_kq_matmul(wt, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride, NULL);
        return;
    }
    if (nx_type_is_x4(wt)) { /* internal ids (types.h) */
        x4_drive(&g_x4_sets8[wt == NX_TYPE_BF16_X4], wt, k, w, w_stride, r0, r1, xq, xq_stride,
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
        kern_avx2_q8t_matmul(wt == NX_TYPE_Q4_0, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride);
        return;
    case NX_TYPE_Q5_K: t = &q5k_set; break;
    default: NX_ASSERT(!"kern_matmul: unsupported weight type"); return;
    }
    mm_drive(t, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride);
}

/* Prepared batches (kern.h): X4 weights beyond the in-place columns. */
X4_BATCH_FNS(avx2, g_x4_sets8)

/* ---- attention helpers -------------------------------------------------------------------- */

float kern_avx2_dot_kv(enum nx_type kvt, int64_t n, const void *k, const float *q) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    const uint8_t *kb = k;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(load_w8(kvt, kb, i), _mm256_loadu_ps(q + i), a0);
        a1 = _mm256_fmadd_ps(load_w8(kvt, kb, i + 8), _mm256_loadu_ps(q + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(load_w8(kvt, kb, i), _mm256_loadu_ps(q + i), a0);
    float s = hsum8(_mm256_add_ps(a0, a1));
    for (; i < n; i++) s += load_w1(kvt, kb, i) * q[i];
    return s;
}

void kern_avx2_axpy_kv(enum nx_type kvt, int64_t n, float a, const void *v, float *y) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    const uint8_t *vb = v;
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, load_w8(kvt, vb, i), _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(load_w1(kvt, vb, i)),
                                                         _mm_set_ss(y[i])));
}

void kern_avx2_store_kv(enum nx_type kvt, int64_t n, const float *x, void *dst) {
    NX_ASSERT(kvt == NX_TYPE_F32 || kvt == NX_TYPE_F16);
    if (kvt == NX_TYPE_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
        return;
    }
    nx_half *h = dst;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i v = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm_storeu_si128((__m128i *)(h + i), v);
    }
    for (; i < n; i++) h[i] = nx_f32_to_half(x[i]);
}

/* Q4_K weights kept interleaved: the decode kernel then gets its chunks with masks and shifts
 * instead of two 4 x 4 transposes per block (bit-identical results: same chunks, same sums). */
static enum nx_type avx2_weight_layout(enum nx_type t, int64_t ne0, int64_t ne1) {
    if ((t == NX_TYPE_F16 || t == NX_TYPE_BF16) && ne0 % 16 == 0 && ne1 % 4 == 0)
        return t == NX_TYPE_F16 ? NX_TYPE_F16_X4 : NX_TYPE_BF16_X4;
    return t == NX_TYPE_Q4_K ? NX_TYPE_Q4_K_IL : t;
}

const struct kern_table kern_table_avx2 = {
    .name = "avx2",
    .quantize_act = kern_avx2_quantize_act,
    .matmul = kern_avx2_matmul,
    .dot_kv = kern_avx2_dot_kv,
    .axpy_kv = kern_avx2_axpy_kv,
    .store_kv = kern_avx2_store_kv,
    .attn_scores = kern_avx2_attn_scores,
    .attn_values = kern_avx2_attn_values,
    .attn_block = kern_avx2_attn_block,
    .attn_blocks = kern_avx2_attn_blocks,
    .attn_merge = kern_avx2_attn_merge,
    .softmax = kern_avx2_softmax,
    .load_kv = kern_avx2_load_kv,
    .swiglu = kern_avx2_swiglu,
    .weight_layout = avx2_weight_layout,
    .batch_cols = avx2_batch_cols,
    .prepare_batch = avx2_prepare_batch,
    .matmul_batch = avx2_matmul_batch,
};
