/*
 * quant_ref.c - half/bfloat16 conversions and the scalar reference quantizers/dequantizers.
 *
 * DESIGN
 * - Dequantization follows ggml's block semantics exactly (layouts in quant.h); it is the
 *   oracle every SIMD kernel is tested against, so it is written for clarity, one element at a
 *   time, with no tricks beyond the shared scale unpacker (kq_unpack_scales in kern_impl.h).
 * - Quantization produces valid, good-quality blocks but is not bit-identical to llama.cpp:
 *     Q4_0  extreme value maps to -8 (d = max / -8), like ggml's reference.
 *     Q8_0, Q8_K  symmetric, d = amax / 127, round to nearest even; quants stay in [-127, 127].
 *     Q4_K, Q5_K  per sub-block of 32 a least-squares search for (scale, min) over a few
 *           candidate step sizes (weights 1, i.e. plain RMSE), then the 8 scales and 8 mins are
 *           quantized to 6 bits against the super-block's d and dmin, and the quants are
 *           recomputed with the rounded scales.
 *     Q6_K  per sub-block of 16 a symmetric search over candidate step sizes, scales stored as
 *           int8 against the super-block's d, quants recomputed with the rounded scales.
 * - Half conversions are portable bit manipulation (no F16C here: this file gets no SIMD
 *   flags); the SIMD files use F16C, which rounds the same way (nearest even).
 * - Q8_K quantization here is the same arithmetic as kern_quantize_act's (bit-identical), which
 *   the SIMD activation quantizers also reproduce exactly.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern_impl.h"
#include "kern/quant.h"
#include "kern/types.h"

/* ---- half / bfloat16 ---------------------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float nx_half_to_f32(nx_half h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | man << 13); /* inf / nan */
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in float */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | (exp + 112) << 23 | man << 13);
}

nx_half nx_f32_to_half(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a >= 0x7f800000u) {
        if (a == 0x7f800000u) return sign | 0x7c00;
        return (nx_half)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* quiet nan, payload kept */
    }
    if (a >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {
        /* below the smallest normal half (2^-14): the result is a multiple of 2^-24. The
         * scaling is exact and rintf rounds to nearest even; 1024 is the smallest normal. */
        float v = bits_f32(a) * 0x1p24f;
        return (nx_half)(sign | (uint16_t)rintf(v));
    }
    /* normal: rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even;
     * a carry out of the mantissa correctly bumps the exponent */
    uint32_t r = a - (112u << 23);
    r += 0xfffu + ((r >> 13) & 1);
    return (nx_half)(sign | (r >> 13));
}

float nx_bf16_to_f32(nx_bf16 h) { return bits_f32((uint32_t)h << 16); }

nx_bf16 nx_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (nx_bf16)((u >> 16) | 0x40); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1);
    return (nx_bf16)(u >> 16);
}

/* ---- dequantization ----------------------------------------------------------------------- */

static void deq_q4_0(const struct block_q4_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK4_0) {
        float d = nx_half_to_f32(b->d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = d * (float)((b->qs[j] & 0xf) - 8);
            y[j + QK4_0 / 2] = d * (float)((b->qs[j] >> 4) - 8);
        }
    }
}

static void deq_q8_0(const struct block_q8_0 *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK8_0) {
        float d = nx_half_to_f32(b->d);
        for (int j = 0; j < QK8_0; j++) y[j] = d * (float)b->qs[j];
    }
}

/* The 8 scales and 8 mins of a Q4_K/Q5_K block as integers 0..63. */
static void kq_scales(const uint8_t *scales, int sc[8], int mn[8]) {
    uint32_t u[4];
    kq_unpack_scales(scales, u);
    for (int j = 0; j < 4; j++) {
        sc[j] = (u[0] >> (8 * j)) & 0xff;
        sc[j + 4] = (u[1] >> (8 * j)) & 0xff;
        mn[j] = (u[2] >> (8 * j)) & 0xff;
        mn[j + 4] = (u[3] >> (8 * j)) & 0xff;
    }
}

/* Q4_K: 4 chunks of 64; chunk c holds sub-block 2c in the low nibbles of qs[32c..32c+31] and
 * sub-block 2c+1 in the high nibbles. */
static void deq_q4_K(const struct block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = nx_half_to_f32(b->d), dmin = nx_half_to_f32(b->dmin);
        int sc[8], mn[8];
        kq_scales(b->scales, sc, mn);
        for (int s = 0; s < 8; s++) {
            float ds = d * (float)sc[s], ms = dmin * (float)mn[s];
            const uint8_t *q = b->qs + 32 * (s / 2);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) y[32 * s + l] = ds * (float)((q[l] >> shift) & 0xf) - ms;
        }
    }
}

/* Q4_K_IL (quant.h): the block with its quants back in Q4_K order, then as Q4_K. */
static void deq_q4_K_il(const struct block_q4_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        struct block_q4_K raw;
        quant_q4k_deinterleave_ref(b, &raw, 1);
        deq_q4_K(&raw, y, 1);
    }
}

/* Moves every quant of nb Q4_K blocks between the file layout and Q4_K_IL (quant.h). */
static void q4k_relayout(const void *src, void *dst, int64_t nb, bool to_il) {
    const struct block_q4_K *s = src;
    struct block_q4_K *d = dst;
    for (int64_t i = 0; i < nb; i++, s++, d++) {
        memcpy(d, s, offsetof(struct block_q4_K, qs));
        memset(d->qs, 0, sizeof d->qs);
        for (int sb = 0; sb < 8; sb++) {
            for (int e = 0; e < 32; e++) {
                /* element e of sub-block sb: byte and nibble shift in either layout */
                int raw = 32 * (sb / 2) + e, raw_sh = 4 * (sb & 1);
                int c = 2 * ((e % 16) / 4) + e / 16;
                int il = 32 * (c % 4) + 16 * (sb % 2) + 4 * (sb / 2) + e % 4, il_sh = 4 * (c / 4);
                int from = to_il ? raw : il, from_sh = to_il ? raw_sh : il_sh;
                int to = to_il ? il : raw, to_sh = to_il ? il_sh : raw_sh;
                d->qs[to] |= (uint8_t)(((s->qs[from] >> from_sh) & 0xf) << to_sh);
            }
        }
    }
}

void quant_q4k_interleave_ref(const void *src, void *dst, int64_t nb) { q4k_relayout(src, dst, nb, true); }
void quant_q4k_deinterleave_ref(const void *src, void *dst, int64_t nb) { q4k_relayout(src, dst, nb, false); }

/* Moves every 4-element run of rows [0, rows) between plain rows and X4 (quant.h). */
static void x4_relayout(const uint16_t *s, uint16_t *d, int64_t k, int64_t rows, bool to_x4) {
    NX_ASSERT(k % 4 == 0 && rows % 4 == 0);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t i = 0; i < k; i += 4) {
            size_t plain = (size_t)r * (size_t)k + (size_t)i, x4 = quant_x4_index(k, r, i);
            memcpy(d + (to_x4 ? x4 : plain), s + (to_x4 ? plain : x4), 4 * sizeof(uint16_t));
        }
    }
}

void quant_x4_interleave_ref(const void *src, void *dst, int64_t k, int64_t rows) {
    x4_relayout(src, dst, k, rows, true);
}

void quant_x4_deinterleave_ref(const void *src, void *dst, int64_t k, int64_t rows) {
    x4_relayout(src, dst, k, rows, false);
}

void quant_x4_get_ref(const void *m, int64_t k, int64_t r, int64_t i0, int64_t n, uint16_t *out) {
    const uint16_t *s = m;
    for (int64_t i = 0; i < n; i++) out[i] = s[quant_x4_index(k, r, i0 + i)];
}

/* Q5_K: as Q4_K; the fifth bit of element l of sub-block s is bit s of qh[l]. */
static void deq_q5_K(const struct block_q5_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = nx_half_to_f32(b->d), dmin = nx_half_to_f32(b->dmin);
        int sc[8], mn[8];
        kq_scales(b->scales, sc, mn);
        for (int s = 0; s < 8; s++) {
            float ds = d * (float)sc[s], ms = dmin * (float)mn[s];
            const uint8_t *q = b->qs + 32 * (s / 2);
            int shift = 4 * (s & 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> shift) & 0xf) | ((b->qh[l] >> s) & 1) << 4;
                y[32 * s + l] = ds * (float)v - ms;
            }
        }
    }
}

/*
 * Q6_K element e (0..255): half h = e / 128, within it position p = e % 128, group g = p / 32,
 * lane l = p % 32. Low 4 bits: ql[64h + l + 32*(g & 1)], low nibble for g < 2, high for g >= 2.
 * High 2 bits: qh[32h + l] >> 2g. Value (q - 32) * scales[e / 16] * d.
 */
static inline int q6_get(const struct block_q6_K *b, int e) {
    int h = e / 128, p = e % 128, g = p / 32, l = p % 32;
    int lo = (b->ql[64 * h + l + 32 * (g & 1)] >> (g >= 2 ? 4 : 0)) & 0xf;
    int hi = (b->qh[32 * h + l] >> (2 * g)) & 3;
    return (lo | hi << 4) - 32;
}

static void deq_q6_K(const struct block_q6_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        float d = nx_half_to_f32(b->d);
        for (int e = 0; e < QK_K; e++) y[e] = d * (float)b->scales[e / 16] * (float)q6_get(b, e);
    }
}

static void deq_q8_K(const struct block_q8_K *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, y += QK_K) {
        for (int j = 0; j < QK_K; j++) y[j] = b->d * (float)b->qs[j];
    }
}

void quant_dequantize_row_ref(enum nx_type t, const void *src, float *dst, int64_t n) {
    if (t == NX_TYPE_Q4_K_IL) { /* internal id, not an enumerator (types.h) */
        NX_ASSERT(n % QK_K == 0);
        deq_q4_K_il(src, dst, n / QK_K);
        return;
    }
    switch (t) {
    case NX_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case NX_TYPE_F16: {
        const nx_half *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = nx_half_to_f32(h[i]);
        return;
    }
    case NX_TYPE_BF16: {
        const nx_bf16 *h = src;
        for (int64_t i = 0; i < n; i++) dst[i] = nx_bf16_to_f32(h[i]);
        return;
    }
    case NX_TYPE_Q4_0: NX_ASSERT(n % QK4_0 == 0); deq_q4_0(src, dst, n / QK4_0); return;
    case NX_TYPE_Q8_0: NX_ASSERT(n % QK8_0 == 0); deq_q8_0(src, dst, n / QK8_0); return;
    case NX_TYPE_Q4_K: NX_ASSERT(n % QK_K == 0); deq_q4_K(src, dst, n / QK_K); return;
    case NX_TYPE_Q5_K: NX_ASSERT(n % QK_K == 0); deq_q5_K(src, dst, n / QK_K); return;
    case NX_TYPE_Q6_K: NX_ASSERT(n % QK_K == 0); deq_q6_K(src, dst, n / QK_K); return;
    case NX_TYPE_Q8_K: NX_ASSERT(n % QK_K == 0); deq_q8_K(src, dst, n / QK_K); return;
    default: NX_ASSERT(!"quant_dequantize_row_ref: unsupported type");
    }
}

/* ---- quantization ------------------------------------------------------------------------- */

/* Round to nearest, ties to even (the default rounding mode), as an int. */
static inline int round_int(float v) { return (int)rintf(v); }

static inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }
/* clamp_int(round_int(v), lo, hi) for finite v, without data-dependent branches (clamping
 * before rounding to an integer bound gives the same result). */
static inline int round_clamp(float v, int lo, int hi) {
    v = v > (float)lo ? v : (float)lo;
    v = v < (float)hi ? v : (float)hi;
    return round_int(v);
}
/* rintf(clamp(v, lo, hi)) for finite v and integer bounds |lo|, |hi| < 2^22, in plain float
 * operations (adding and subtracting 1.5 * 2^23 rounds to an integer, nearest even) so that
 * loops over it vectorize. */
static inline float round_clamp_f(float v, float lo, float hi) {
    v = v > lo ? v : lo;
    v = v < hi ? v : hi;
    return (v + 0x1.8p23f) - 0x1.8p23f;
}

static void quant_q4_0(const float *x, struct block_q4_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += QK4_0) {
        float amax = 0, mx = 0;
        for (int j = 0; j < QK4_0; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                mx = x[j];
            }
        }
        /* the extreme value maps to -8 exactly; the other side reaches at most +7 */
        float d = mx / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        b->d = nx_f32_to_half(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = clamp_int(round_int(x[j] * id) + 8, 0, 15);
            int q1 = clamp_int(round_int(x[j + QK4_0 / 2] * id) + 8, 0, 15);
            b->qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* Symmetric 8-bit quantization of n values: returns d, writes q in [-127, 127]. Shared by
 * Q8_0 and Q8_K (and so by the activation quantizer); the SIMD versions repeat these exact
 * float operations: amax, d = amax / 127, id = 1 / d, q = rint(x * id). */
static float quant_sym8(const float *x, int8_t *q, int n) {
    float amax = 0;
    for (int j = 0; j < n; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < n; j++) q[j] = (int8_t)round_int(x[j] * id);
    return d;
}

static void quant_q8_0(const float *x, struct block_q8_0 *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += QK8_0) b->d = nx_f32_to_half(quant_sym8(x, b->qs, QK8_0));
}

static void quant_q8_K(const float *x, struct block_q8_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        b->d = quant_sym8(x, b->qs, QK_K);
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++) s += b->qs[16 * g + j];
            b->bsums[g] = (int16_t)s;
        }
    }
}

/*
 * Fit x[i] ~ scale * L[i] - mn with L[i] in [0, nmax], scale >= 0, mn >= 0 (so 0 lies in the
 * range), minimizing the squared error. Tries step sizes around (max - min) / nmax; for each
 * one's rounding L, solves the 2-parameter least-squares problem exactly. Returns scale; *mn_out
 * gets mn.
 */
static float fit_scale_min(const float *x, int n, int nmax, float *mn_out) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    if (lo > 0) lo = 0;
    if (hi <= lo) {
        *mn_out = -lo;
        return 0.0f;
    }
    /* n is a multiple of 4 (<= QK_K): sums use 4 partial accumulators (no long dependency
     * chains); sums of integers are exact */
    NX_ASSERT(n % 4 == 0 && n <= QK_K);
    float best_scale = (hi - lo) / (float)nmax, best_min = lo;
    float xs[QK_K];
    double best_err = 0, sx = 0;
    {
        double e4[4] = {0}, s4[4] = {0};
        for (int i = 0; i < n; i += 4) {
            for (int j = 0; j < 4; j++) {
                xs[i + j] = x[i + j] - lo;
                int l = round_clamp(xs[i + j] / best_scale, 0, nmax);
                double e = (double)best_scale * l + lo - x[i + j];
                e4[j] += e * e;
                s4[j] += x[i + j];
            }
        }
        best_err = (e4[0] + e4[1]) + (e4[2] + e4[3]);
        sx = (s4[0] + s4[1]) + (s4[2] + s4[3]);
    }
    for (int step = -10; step <= 10; step++) {
        float iscale = ((float)nmax + 0.1f * (float)step) / (hi - lo);
        /* the quants as floats (exact small integers; their sums are exact in float) */
        float sl4[4] = {0}, sll4[4] = {0}, lq[QK_K];
        double slx4[4] = {0};
        for (int i = 0; i < n; i += 4) {
            for (int j = 0; j < 4; j++) {
                float l = round_clamp_f(iscale * xs[i + j], 0.0f, (float)nmax);
                lq[i + j] = l;
                sl4[j] += l;
                sll4[j] += l * l;
                slx4[j] += (double)l * x[i + j];
            }
        }
        int64_t sl = (int64_t)((sl4[0] + sl4[1]) + (sl4[2] + sl4[3]));
        int64_t sll = (int64_t)((sll4[0] + sll4[1]) + (sll4[2] + sll4[3]));
        double slx = (slx4[0] + slx4[1]) + (slx4[2] + slx4[3]);
        double det = (double)n * (double)sll - (double)sl * (double)sl;
        if (det <= 0) continue;
        double a = (n * slx - (double)sl * sx) / det; /* scale */
        double b = ((double)sll * sx - (double)sl * slx) / det; /* offset (= -mn) */
        if (b > 0) {
            b = 0;
            a = sll > 0 ? slx / (double)sll : 0;
        }
        if (!(a > 0)) continue;
        double e4[4] = {0};
        for (int i = 0; i < n; i += 4) {
            for (int j = 0; j < 4; j++) {
                double e = a * lq[i + j] + b - x[i + j];
                e4[j] += e * e;
            }
        }
        double err = (e4[0] + e4[1]) + (e4[2] + e4[3]);
        if (err < best_err) {
            best_err = err;
            best_scale = (float)a;
            best_min = (float)b;
        }
    }
    *mn_out = -best_min;
    return best_scale;
}

/* Pack 6-bit scales and mins into the 12-byte K-quant layout (inverse of kq_unpack_scales). */
static void kq_pack_scales(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
    for (int j = 0; j < 4; j++) {
        out[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        out[j + 4] = (uint8_t)((mn[j] & 63) | (mn[j + 4] >> 4) << 6);
        out[j + 8] = (uint8_t)((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
}

/*
 * Shared Q4_K/Q5_K super-block quantizer: fills d, dmin, scales and the quants L[256] in
 * [0, nmax].
 */
static void quant_kq_super(const float *x, int nmax, nx_half *d_out, nx_half *dmin_out,
                           uint8_t scales[12], uint8_t L[QK_K]) {
    float scale[8], mn[8], max_scale = 0, max_min = 0;
    for (int s = 0; s < 8; s++) {
        scale[s] = fit_scale_min(x + 32 * s, 32, nmax, &mn[s]);
        max_scale = fmaxf(max_scale, scale[s]);
        max_min = fmaxf(max_min, mn[s]);
    }
    float d = max_scale / 63.0f, dmin = max_min / 63.0f;
    float id = d > 0 ? 1.0f / d : 0.0f, idmin = dmin > 0 ? 1.0f / dmin : 0.0f;
    uint8_t ls[8], lm[8];
    for (int s = 0; s < 8; s++) {
        ls[s] = (uint8_t)clamp_int(round_int(scale[s] * id), 0, 63);
        lm[s] = (uint8_t)clamp_int(round_int(mn[s] * idmin), 0, 63);
    }
    kq_pack_scales(ls, lm, scales);
    *d_out = nx_f32_to_half(d);
    *dmin_out = nx_f32_to_half(dmin);
    /* requantize with the scales as the decoder will see them */
    float dh = nx_half_to_f32(*d_out), dminh = nx_half_to_f32(*dmin_out);
    for (int s = 0; s < 8; s++) {
        float ds = dh * ls[s], ms = dminh * lm[s];
        for (int l = 0; l < 32; l++) {
            L[32 * s + l] = (uint8_t)(ds > 0 ? round_clamp((x[32 * s + l] + ms) / ds, 0, nmax) : 0);
        }
    }
}

static void quant_q4_K(const float *x, struct block_q4_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        uint8_t L[QK_K];
        quant_kq_super(x, 15, &b->d, &b->dmin, b->scales, L);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                b->qs[32 * c + l] = (uint8_t)(L[64 * c + l] | L[64 * c + 32 + l] << 4);
            }
        }
    }
}

static void quant_q5_K(const float *x, struct block_q5_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        uint8_t L[QK_K];
        quant_kq_super(x, 31, &b->d, &b->dmin, b->scales, L);
        memset(b->qh, 0, sizeof b->qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                int a = L[64 * c + l], h = L[64 * c + 32 + l];
                b->qs[32 * c + l] = (uint8_t)((a & 15) | (h & 15) << 4);
                b->qh[l] |= (uint8_t)((a >> 4) << (2 * c) | (h >> 4) << (2 * c + 1));
            }
        }
    }
}

/*
 * Fit x[i] ~ scale * L[i], L[i] in [-32, 31] (symmetric). The value of largest magnitude maps
 * near -32 (the side with one more level); a few step sizes around that are tried and the
 * least-squares scale of each rounding kept when it lowers the error. Returns the signed scale.
 */
static float fit_scale_sym6(const float *x, int n) {
    float amax = 0, mx = 0;
    for (int i = 0; i < n; i++) {
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            mx = x[i];
        }
    }
    if (amax == 0) return 0.0f;
    float best = 0;
    double best_err = -1;
    NX_ASSERT(n % 4 == 0 && n <= 16); /* 4 partial sums, as in fit_scale_min */
    for (int step = -8; step <= 8; step++) {
        float iscale = -(32.0f + 0.1f * (float)step) / mx;
        double slx4[4] = {0};
        float sll4[4] = {0}, lq[16]; /* exact small integers */
        for (int i = 0; i < n; i += 4) {
            for (int j = 0; j < 4; j++) {
                float l = round_clamp_f(iscale * x[i + j], -32.0f, 31.0f);
                lq[i + j] = l;
                slx4[j] += (double)l * x[i + j];
                sll4[j] += l * l;
            }
        }
        int64_t sll = (int64_t)((sll4[0] + sll4[1]) + (sll4[2] + sll4[3]));
        if (sll <= 0) continue;
        double slx = (slx4[0] + slx4[1]) + (slx4[2] + slx4[3]);
        double s = slx / (double)sll, e4[4] = {0};
        for (int i = 0; i < n; i += 4) {
            for (int j = 0; j < 4; j++) {
                double e = s * lq[i + j] - x[i + j];
                e4[j] += e * e;
            }
        }
        double err = (e4[0] + e4[1]) + (e4[2] + e4[3]);
        if (best_err < 0 || err < best_err) {
            best_err = err;
            best = (float)s;
        }
    }
    return best;
}

static void quant_q6_K(const float *x, struct block_q6_K *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, x += QK_K) {
        float scale[16], amax = 0, mx = 0;
        for (int s = 0; s < 16; s++) {
            scale[s] = fit_scale_sym6(x + 16 * s, 16);
            if (fabsf(scale[s]) > amax) {
                amax = fabsf(scale[s]);
                mx = scale[s];
            }
        }
        /* int8 scales: the largest maps to -128 (the wider side), others round into range */
        float iscale = mx != 0 ? -128.0f / mx : 0.0f;
        float d = iscale != 0 ? 1.0f / iscale : 0.0f;
        b->d = nx_f32_to_half(d);
        float dh = nx_half_to_f32(b->d);
        memset(b->ql, 0, sizeof b->ql);
        memset(b->qh, 0, sizeof b->qh);
        for (int s = 0; s < 16; s++) {
            int sc = clamp_int(round_int(iscale * scale[s]), -128, 127);
            b->scales[s] = (int8_t)sc;
            float ds = dh * (float)sc;
            for (int j = 0; j < 16; j++) {
                int e = 16 * s + j;
                int q = ds != 0 ? round_clamp(x[16 * s + j] / ds, -32, 31) : 0;
                int u = q + 32;
                int h = e / 128, p = e % 128, g = p / 32, l = p % 32;
                b->ql[64 * h + l + 32 * (g & 1)] |= (uint8_t)((u & 15) << (g >= 2 ? 4 : 0));
                b->qh[32 * h + l] |= (uint8_t)((u >> 4) << (2 * g));
            }
        }
    }
}

void quant_quantize_row_ref(enum nx_type t, const float *src, void *dst, int64_t n) {
    switch (t) {
    case NX_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case NX_TYPE_F16: {
        nx_half *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = nx_f32_to_half(src[i]);
        return;
    }
    case NX_TYPE_BF16: {
        nx_bf16 *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = nx_f32_to_bf16(src[i]);
        return;
    }
    case NX_TYPE_Q4_0: NX_ASSERT(n % QK4_0 == 0); quant_q4_0(src, dst, n / QK4_0); return;
    case NX_TYPE_Q8_0: NX_ASSERT(n % QK8_0 == 0); quant_q8_0(src, dst, n / QK8_0); return;
    case NX_TYPE_Q4_K: NX_ASSERT(n % QK_K == 0); quant_q4_K(src, dst, n / QK_K); return;
    case NX_TYPE_Q5_K: NX_ASSERT(n % QK_K == 0); quant_q5_K(src, dst, n / QK_K); return;
    case NX_TYPE_Q6_K: NX_ASSERT(n % QK_K == 0); quant_q6_K(src, dst, n / QK_K); return;
    case NX_TYPE_Q8_K: NX_ASSERT(n % QK_K == 0); quant_q8_K(src, dst, n / QK_K); return;
    default: NX_ASSERT(!"quant_quantize_row_ref: unsupported type");
    }
}
