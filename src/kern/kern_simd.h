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

#define MAXT 16 /* most accumulators of any tile */

/* Pins a vector in a register at this point: stops the compiler from reassociating integer
 * accumulation chains into trees of live temporaries (which spill). Emits no instruction. */
#define PIN(v) __asm__("" : "+x"(v))

/* Decode (1-column) tiles are memory-bound: they prefetch the weight stream this far ahead,
 * which measurably beats the hardware prefetcher alone on long rows. */
#define PF_DIST 1024
AI void prefetch_lines(const uint8_t *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch((const char *)p + PF_DIST + o, _MM_HINT_T0);
}
#define UNROLL _Pragma("GCC unroll 16")

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

#endif
