/*
 * kern_avx2.c - the AVX2 + FMA + F16C kernel set (compiled with -mavx2 -mfma -mf16c; only
 * called after dispatch.c has checked the CPU).
 *
 * DESIGN
 * - Matmul = a driver (mm_drive) that walks output tiles, plus per-type micro-kernels ("tiles")
 *   that compute a small block of outputs y[c][r] for R rows x C columns over the whole k.
 *   Quantized types use 1 x C tiles: one unpacked weight block (nibbles split, scales
 *   broadcast) is reused for C activation columns, which is what makes prefill compute-bound
 *   instead of unpack-bound. Float types use R x C register tiles of FMA accumulators.
 *   Decode (nc = 1) uses the 1 x 1 (quantized) or 4 x 1 (float) tiles.
 * - Fixed per-element arithmetic: every output element has its own accumulator and sees the
 *   same sequence of operations whatever the tile it is computed in; tiles only choose which
 *   elements are computed together. So results do not depend on [r0, r1) splits, on the tiling
 *   or on nc (decode and prefill of the same token give bit-identical outputs).
 *   Per element: a float 8-lane accumulator, one FMA per block (quantized: the block's exact
 *   integer dot product, converted, times d_w * d_x; float types: one FMA per 8 elements), then
 *   a fixed horizontal sum, then (float types only) the k % 8 tail in order.
 * - Integer dot products: Q4_K/Q5_K/Q6_K use unsigned weights with vpmaddubsw (u8 x i8 -> i16
 *   pairs, no saturation possible for these ranges), then vpmaddwd with the sub-block scale
 *   (i16 -> i32). Q6_K's -32 offset and Q4_K/Q5_K's mins come from the activation's bsums.
 *   Q4_0/Q8_0 have signed weights: |w| with vpsignb moving w's sign onto x (needs x != -128,
 *   guaranteed by the activation format, see kern_impl.h).
 * - Activation quantization repeats quant_ref.c's float operations in the same order, so it
 *   is bit-identical to the reference (rounding is vroundps nearest-even = rintf).
 * - Cache blocking: rows are walked in blocks of ~128 KiB of weights (L2-resident) and, inside
 *   a block, every column tile sweeps the rows, so activations stay in L1 and weights in L2.
 */
#include <immintrin.h>
#include <string.h>

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
    switch (wt) {
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

AI float load_w1(enum nx_type wt, const uint8_t *w, int64_t i) {
    if (wt == NX_TYPE_F32) return ((const float *)w)[i];
    if (wt == NX_TYPE_F16) return h2f(((const nx_half *)w)[i]);
    uint32_t u = (uint32_t)((const nx_bf16 *)w)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
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

#define FL_TILES(tname, wt) \
    AI void tname##_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws, \
                         const uint8_t *x, size_t xs, float *y, int64_t ys) { \
        fl_tile(wt, R, C, k, w, ws, x, xs, y, ys); \
    } \
    TILE_FN(tname, 3, 4) \
    TILE_FN(tname, 1, 4) \
    TILE_FN(tname, 4, 1) \
    TILE_FN(tname, 1, 1) \
    static const struct tile_set tname##_set = {tname##_3x4, tname##_1x4, tname##_4x1, \
                                                tname##_1x1, 3, 4, 4};

FL_TILES(f32, NX_TYPE_F32)
FL_TILES(f16, NX_TYPE_F16)
FL_TILES(bf16, NX_TYPE_BF16)

/* ---- Q4_0 / Q8_0 weights x Q8_0 activations ------------------------------------------------ */

/* 32 signed weights of block b: Q4_0 nibbles - 8, or Q8_0 quants. */
AI __m256i q40_w32(const struct block_q4_0 *b) {
    __m128i q = loadu128(b->qs);
    __m256i v = _mm256_set_m128i(_mm_srli_epi16(q, 4), q);
    v = _mm256_and_si256(v, _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

AI void q80x_tile(bool is_q4, const int C, int64_t k, const uint8_t *w, const uint8_t *x,
                  size_t xs, float *y, int64_t ys) {
    __m256 acc[MAXT];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i ones16 = _mm256_set1_epi16(1);
    int64_t nb = k / 32;
    for (int64_t b = 0; b < nb; b++) {
        __m256i wq;
        float dw;
        if (is_q4) {
            const struct block_q4_0 *bw = (const struct block_q4_0 *)w + b;
            wq = q40_w32(bw);
            dw = h2f(bw->d);
        } else {
            const struct block_q8_0 *bw = (const struct block_q8_0 *)w + b;
            wq = loadu256(bw->qs);
            dw = h2f(bw->d);
        }
        if (C == 1) _mm_prefetch((const char *)w + (is_q4 ? 18 : 34) * b + PF_DIST, _MM_HINT_T0);
        __m256i aw = _mm256_sign_epi8(wq, wq); /* |w|; -128 gives 0x80 = 128 unsigned, right */
        UNROLL for (int c = 0; c < C; c++) {
            const struct block_q8_0 *bx = (const struct block_q8_0 *)(x + (size_t)c * xs) + b;
            __m256i sx = _mm256_sign_epi8(loadu256(bx->qs), wq);
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), ones16);
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * h2f(bx->d)), acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) y[c * ys] = hsum8(acc[c]);
}

AI void q40_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                 const uint8_t *x, size_t xs, float *y, int64_t ys) {
    (void)R, (void)ws;
    q80x_tile(true, C, k, w, x, xs, y, ys);
}

AI void q80_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                 const uint8_t *x, size_t xs, float *y, int64_t ys) {
    (void)R, (void)ws;
    q80x_tile(false, C, k, w, x, xs, y, ys);
}

#define Q_TILES(tname) \
    TILE_FN(tname, 1, 4) \
    TILE_FN(tname, 1, 1) \
    static const struct tile_set tname##_set = {tname##_1x4, tname##_1x4, tname##_1x1, \
                                                tname##_1x1, 1, 4, 1};

Q_TILES(q40)
Q_TILES(q80)

/* ---- Q4_K / Q5_K weights x Q8_K activations ----------------------------------------------- */

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

/* ---- Q6_K weights x Q8_K activations ------------------------------------------------------ */

/*
 * Group G (0..7) = elements 32G..32G+31, i.e. sub-blocks 2G (low 128-bit lane) and 2G+1
 * (high lane). With half h = G / 4 and g = G % 4: low 4 bits from ql[64h + 32*(g & 1) + l]
 * (low nibble for g < 2, high for g >= 2), high 2 bits from qh[32h + l] >> 2g.
 * The unsigned quants (0..63) are dotted, and 32 * scale * bsum is subtracted.
 */
AI void q6k_tile(const int R, const int C, int64_t k, const uint8_t *w, size_t ws,
                 const uint8_t *x, size_t xs, float *y, int64_t ys) {
    (void)R, (void)ws;
    __m256 acc[MAXT];
    UNROLL for (int c = 0; c < C; c++) acc[c] = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
    int64_t nb = k / QK_K;
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q6_K *bw = (const struct block_q6_K *)w + b;
        if (C == 1) prefetch_lines((const uint8_t *)bw, sizeof *bw);
        float dw = h2f(bw->d);
        __m128i s8 = loadu128(bw->scales);
        __m256i sc_nat = _mm256_cvtepi8_epi16(s8);
        /* low lane: scales 0, 2, .., 14; high lane: 1, 3, .., 15 */
        __m256i sc_eo = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(s8, even_odd));
        __m256i isum[MAXT];
        UNROLL for (int c = 0; c < C; c++) isum[c] = _mm256_setzero_si256();
        UNROLL for (int h = 0; h < 2; h++) {
            __m256i qa = loadu256(bw->ql + 64 * h), qb = loadu256(bw->ql + 64 * h + 32);
            __m256i qh = loadu256(bw->qh + 32 * h);
            UNROLL for (int g = 0; g < 4; g++) {
                __m256i lo4 = g == 0 ? qa : g == 1 ? qb : g == 2 ? _mm256_srli_epi16(qa, 4)
                                                                 : _mm256_srli_epi16(qb, 4);
                __m256i hi2 = g == 0   ? _mm256_slli_epi16(qh, 4)
                              : g == 1 ? _mm256_slli_epi16(qh, 2)
                              : g == 2 ? qh
                                       : _mm256_srli_epi16(qh, 2);
                __m256i q = _mm256_or_si256(_mm256_and_si256(lo4, m4), _mm256_and_si256(hi2, m30));
                int G = 4 * h + g;
                __m256i scv = splat16(sc_eo, G);
                UNROLL for (int c = 0; c < C; c++) {
                    const struct block_q8_K *bx = (const struct block_q8_K *)(x + (size_t)c * xs) + b;
                    __m256i p = _mm256_maddubs_epi16(q, loadu256(bx->qs + 32 * G));
                    isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, scv));
                    PIN(isum[c]);
                }
            }
        }
        UNROLL for (int c = 0; c < C; c++) {
            const struct block_q8_K *bx = (const struct block_q8_K *)(x + (size_t)c * xs) + b;
            __m256i off = _mm256_madd_epi16(loadu256(bx->bsums), sc_nat);
            __m256i tot = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(off, 5));
            acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_set1_ps(dw * bx->d), acc[c]);
        }
    }
    UNROLL for (int c = 0; c < C; c++) y[c * ys] = hsum8(acc[c]);
}

Q_TILES(q6k)

void kern_avx2_matmul(enum nx_type wt, int64_t k, const void *w, size_t w_stride, int64_t r0,
                      int64_t r1, const void *xq, size_t xq_stride, int64_t nc, float *y,
                      int64_t y_stride) {
    const struct tile_set *t;
    switch (wt) {
    case NX_TYPE_F32: t = &f32_set; break;
    case NX_TYPE_F16: t = &f16_set; break;
    case NX_TYPE_BF16: t = &bf16_set; break;
    case NX_TYPE_Q4_0: t = &q40_set; break;
    case NX_TYPE_Q8_0: t = &q80_set; break;
    case NX_TYPE_Q4_K: t = &q4k_set; break;
    case NX_TYPE_Q5_K: t = &q5k_set; break;
    case NX_TYPE_Q6_K: t = &q6k_set; break;
    default: NX_ASSERT(!"kern_matmul: unsupported weight type"); return;
    }
    mm_drive(t, k, w, w_stride, r0, r1, xq, xq_stride, nc, y, y_stride);
}

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

const struct kern_table kern_table_avx2 = {
    .name = "avx2",
    .quantize_act = kern_avx2_quantize_act,
    .matmul = kern_avx2_matmul,
    .dot_kv = kern_avx2_dot_kv,
    .axpy_kv = kern_avx2_axpy_kv,
    .store_kv = kern_avx2_store_kv,
};
