/*
 * test_kern.c - tests of src/kern: conversions, block layouts, quantizers, and every SIMD kernel
 * set against the scalar reference.
 *
 * DESIGN
 * - Half and bfloat16 conversions are checked over all 65536 bit patterns, and their rounding at
 *   every midpoint (and one float ulp either side) against a double-based reference written
 *   here, plus random floats.
 * - Layout compatibility with ggml: hand-built blocks whose expected values are written out
 *   from ggml's block definitions (independently of quant_ref.c's code).
 * - Quantizer quality: RMSE of quantize -> dequantize relative to the data's RMS, per type, on
 *   Gaussian rows with outliers (thresholds in g_rmse_max below).
 * - SIMD sets vs the reference on random and adversarial blocks (random bytes, extreme scales,
 *   all-max quants, zero blocks, odd nc, one block, many blocks). Tolerance per output:
 *   2 * FLT_EPSILON * (terms per accumulator lane + 16) * S, where S = sum |w_i| * |x_i| over
 *   the dequantized values with K-quant scale and min parts counted separately (so the
 *   cancellation between them does not shrink the bound). This is a rounding bound for float
 *   lane accumulation; the integer block sums themselves are exact, and one wrong element is
 *   far above it for the sizes used. Activation quantization must match bit for bit.
 * - Split invariance: bit-identical y for different [r0, r1) partitions, and for nc = 1 calls
 *   vs one nc = 5 or nc = 11 call, for every set this CPU runs.
 * - AVX-512 tests print "skipped: no AVX-512" and pass on CPUs without it.
 */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern.h"
#include "kern/kern_impl.h"
#include "kern/quant.h"
#include "kern/types.h"
#include "test.h"

#define NX_ASSERT_TEST(x) \
    do { \
        if (!(x)) { \
            fprintf(stderr, "  %s:%d: setup failed: %s\n", __FILE__, __LINE__, #x); \
            abort(); \
        } \
    } while (0)

/* ---- helpers ------------------------------------------------------------------------------ */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd_u64(void) {
    uint64_t x = g_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return g_rng = x;
}

static float rnd_unif(void) { return (float)((rnd_u64() >> 40) * 0x1p-24); } /* [0, 1) */

static float rnd_gauss(void) {
    float u1 = rnd_unif() + 0x1p-25f, u2 = rnd_unif();
    return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static size_t row_bytes(enum nx_type t, int64_t k) {
    size_t n = 0;
    NX_ASSERT_TEST(nx_row_bytes(t, k, &n));
    return n;
}

static const enum nx_type g_wtypes[] = {NX_TYPE_F32,  NX_TYPE_F16,  NX_TYPE_BF16, NX_TYPE_Q4_0,
                                        NX_TYPE_Q8_0, NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K,
                                        NX_TYPE_Q4_K_IL};
#define N_WTYPES (int)(sizeof g_wtypes / sizeof g_wtypes[0])

static int64_t blck(enum nx_type t) { return nx_type_info_get(t)->blck_size; }

/*
 * Whether the tests may call a set. NX_TEST_AVX512_EMULATED: this binary was linked with a
 * kern_avx512.o built on the plain-C emulation (src/kern/avx512_emu.h), which runs anywhere
 * AVX2 does.
 */
static bool can_run(const char *set) {
#ifdef NX_TEST_AVX512_EMULATED
    if (strcmp(set, "avx512") == 0) return kern_cpu_supports("avx2");
#endif
    return kern_cpu_supports(set);
}

/* SIMD sets the tests can run (besides "ref"). */
static int simd_sets(const struct kern_table *out[2]) {
    int n = 0;
    if (can_run("avx2")) out[n++] = &kern_table_avx2;
    if (can_run("avx512")) out[n++] = &kern_table_avx512;
    return n;
}

/* ---- half / bf16 reference (double based) ------------------------------------------------- */

static double ref_half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static double ref_bf16_value(uint16_t h) {
    int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return s ? -v : v;
}

/*
 * Round |v| to a grid with p significant bits whose smallest normal exponent is emin (values
 * below 2^emin use the fixed ulp 2^(emin - p + 1)); ties to even. Returns the rounded value.
 */
static double ref_round(double a, int p, int emin) {
    if (a == 0) return 0;
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) -> a in [2^(e-1), 2^e) */
    e -= 1;
    if (e < emin) e = emin;
    double ulp = ldexp(1.0, e - p + 1);
    double q = a / ulp, n = floor(q), frac = q - n;
    if (frac > 0.5 || (frac == 0.5 && fmod(n, 2.0) != 0)) n += 1;
    return n * ulp;
}

static uint16_t ref_f32_to_half(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return 0x7e00; /* only checked for nan-ness */
    double a = fabs((double)f);
    if (a >= 65520.0) return sign | 0x7c00;
    double r = ref_round(a, 11, -14);
    if (r == 0) return sign;
    if (r < ldexp(1, -14)) return sign | (uint16_t)(r / ldexp(1, -24));
    int e;
    double fr = frexp(r, &e); /* r = fr * 2^e */
    int biased = e - 1 + 15;
    int man = (int)(fr * 2048) - 1024;
    return sign | (uint16_t)(biased << 10 | man);
}

static uint16_t ref_f32_to_bf16(float f) {
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    if (isnan(f)) return 0x7fc0;
    double a = fabs((double)f);
    double r = ref_round(a, 8, -126);
    if (r >= ldexp(1, 128)) return sign | 0x7f80;
    if (r == 0) return sign;
    if (r < ldexp(1, -126)) return sign | (uint16_t)(r / ldexp(1, -133));
    int e;
    double fr = frexp(r, &e);
    int biased = e - 1 + 127;
    int man = (int)(fr * 256) - 128;
    return sign | (uint16_t)(biased << 7 | man);
}

/* ---- conversions -------------------------------------------------------------------------- */

TEST(half_to_f32_exhaustive) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nx_half_to_f32((nx_half)h);
        double want = ref_half_value((uint16_t)h);
        if (isnan(want)) {
            if (!isnan(f)) FAILF("half %04x: expected nan, got %g", h, f);
            /* payload kept, quiet bit as in the half */
            ASSERT_EQ(fbits(f), (h & 0x8000u) << 16 | 0x7f800000u | (h & 0x3ffu) << 13);
            continue;
        }
        if ((double)f != want || !!signbit(f) != !!signbit(want)) {
            FAILF("half %04x: got %.9g want %.9g", h, f, want);
        }
        /* round trip */
        ASSERT_EQ(nx_f32_to_half(f), h);
    }
}

TEST(f32_to_half_rounding) {
    int checked = 0;
    for (uint32_t h = 0; h < 0x7c00; h++) {
        for (int s = 0; s < 2; s++) {
            /* midpoint between h and h + 1 (h + 1 may be inf: midpoint 65520), and neighbours */
            double lo = ref_half_value((uint16_t)h);
            double hi = h + 1 == 0x7c00 ? 65536.0 : ref_half_value((uint16_t)(h + 1));
            float mid = (float)((lo + hi) / 2);
            NX_ASSERT_TEST((double)mid == (lo + hi) / 2);
            float cand[5] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), (float)lo,
                             nextafterf((float)lo, INFINITY)};
            for (int c = 0; c < 5; c++) {
                float f = s ? -cand[c] : cand[c];
                uint16_t got = nx_f32_to_half(f), want = ref_f32_to_half(f);
                if (got != want) FAILF("f32 %.9g (%08x) -> half %04x, want %04x", f, fbits(f), got, want);
                checked++;
            }
        }
    }
    /* random bit patterns, including nan / inf / float subnormals */
    for (int i = 0; i < 2000000; i++) {
        float f = bitsf((uint32_t)rnd_u64());
        uint16_t got = nx_f32_to_half(f);
        if (isnan(f)) {
            if ((got & 0x7c00) != 0x7c00 || (got & 0x3ff) == 0 || !(got & 0x200)) {
                FAILF("nan %08x -> %04x is not a quiet nan", fbits(f), got);
            }
            continue;
        }
        uint16_t want = ref_f32_to_half(f);
        if (got != want) FAILF("f32 %.9g (%08x) -> half %04x, want %04x", f, fbits(f), got, want);
    }
    ASSERT_EQ(nx_f32_to_half(INFINITY), 0x7c00);
    ASSERT_EQ(nx_f32_to_half(-INFINITY), 0xfc00);
    ASSERT_EQ(nx_f32_to_half(65519.99f), 0x7bff);
    ASSERT_EQ(nx_f32_to_half(65520.0f), 0x7c00);
    ASSERT_EQ(nx_f32_to_half(-0.0f), 0x8000);
    ASSERT_TRUE(checked > 300000);
}

TEST(bf16_exhaustive) {
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nx_bf16_to_f32((nx_bf16)h);
        double want = ref_bf16_value((uint16_t)h);
        if (isnan(want)) {
            if (!isnan(f)) FAILF("bf16 %04x: expected nan", h);
            uint16_t back = nx_f32_to_bf16(f);
            if ((back & 0x7f80) != 0x7f80 || !(back & 0x40)) FAILF("nan %04x -> %04x", h, back);
            continue;
        }
        if ((double)f != want || !!signbit(f) != !!signbit(want)) FAILF("bf16 %04x: %.9g vs %.9g", h, f, want);
        ASSERT_EQ(nx_f32_to_bf16(f), h);
        if ((h & 0x7fff) < 0x7f80) {
            /* midpoint to the next value and its float neighbours */
            double lo = want, hi = ref_bf16_value((uint16_t)(h + 1));
            if ((h & 0x7fff) == 0x7f7f) hi = (h & 0x8000) ? -ldexp(1, 128) : ldexp(1, 128);
            float mid = (float)((lo + hi) / 2);
            if ((double)mid != (lo + hi) / 2) continue; /* 2^128 midpoint overflows float */
            float cand[3] = {mid, nextafterf(mid, 0), nextafterf(mid, mid > 0 ? INFINITY : -INFINITY)};
            for (int c = 0; c < 3; c++) {
                uint16_t got = nx_f32_to_bf16(cand[c]), w = ref_f32_to_bf16(cand[c]);
                if (got != w) FAILF("f32 %.9g (%08x) -> bf16 %04x want %04x", cand[c], fbits(cand[c]), got, w);
            }
        }
    }
    for (int i = 0; i < 2000000; i++) {
        float f = bitsf((uint32_t)rnd_u64());
        if (isnan(f)) continue;
        uint16_t got = nx_f32_to_bf16(f), want = ref_f32_to_bf16(f);
        if (got != want) FAILF("f32 %.9g (%08x) -> bf16 %04x want %04x", f, fbits(f), got, want);
    }
    ASSERT_EQ(nx_f32_to_bf16(FLT_MAX), 0x7f80); /* rounds up to inf */
}

/* ---- hand-built blocks: layout compatibility ----------------------------------------------- */

TEST(dequant_known_f16_bf16) {
    const nx_half h[8] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00, 0x3555, 0x8000};
    const float hv[8] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f, INFINITY, 0.333251953125f, -0.0f};
    float y[8];
    quant_dequantize_row_ref(NX_TYPE_F16, h, y, 8);
    for (int i = 0; i < 8; i++) ASSERT_EQ(fbits(y[i]), fbits(hv[i]));
    const nx_bf16 b[4] = {0x3f80, 0xc040, 0x7f80, 0x0001};
    const float bv[4] = {1.0f, -3.0f, INFINITY, 0x1p-133f};
    quant_dequantize_row_ref(NX_TYPE_BF16, b, y, 4);
    for (int i = 0; i < 4; i++) ASSERT_EQ(fbits(y[i]), fbits(bv[i]));
}

TEST(dequant_known_q4_0_q8_0) {
    struct block_q4_0 b4 = {.d = 0x3800}; /* 0.5 */
    for (int j = 0; j < 16; j++) b4.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    quant_dequantize_row_ref(NX_TYPE_Q4_0, &b4, y, 32);
    for (int j = 0; j < 16; j++) {
        ASSERT_EQ(y[j] * 2, j - 8);          /* low nibbles: elements 0..15 */
        ASSERT_EQ(y[16 + j] * 2, 7 - j);     /* high nibbles: elements 16..31 */
    }
    struct block_q8_0 b8 = {.d = 0x3400}; /* 0.25 */
    for (int j = 0; j < 32; j++) b8.qs[j] = (int8_t)(j * 8 - 128);
    quant_dequantize_row_ref(NX_TYPE_Q8_0, &b8, y, 32);
    for (int j = 0; j < 32; j++) ASSERT_EQ(y[j] * 4, j * 8 - 128);
    ASSERT_EQ(sizeof b4, 18);
    ASSERT_EQ(sizeof b8, 34);
}

/* 6-bit scales and mins used by the Q4_K/Q5_K known-block tests and their packed bytes, worked
 * out by hand from ggml's layout: bytes 0-3 = sc[0..3] | (sc[4..7] >> 4) << 6, bytes 4-7 =
 * m[0..3] | (m[4..7] >> 4) << 6, bytes 8-11 = (sc[4..7] & 15) | (m[4..7] & 15) << 4. */
static const int g_ksc[8] = {1, 2, 3, 4, 33, 47, 62, 63};
static const int g_kmn[8] = {5, 6, 7, 8, 0, 17, 31, 63};
static const uint8_t g_kbytes[12] = {0x81, 0x82, 0xc3, 0xc4, 0x05, 0x46, 0x47, 0xc8,
                                     0x01, 0x1f, 0xfe, 0xff};

TEST(dequant_known_q4_K) {
    struct block_q4_K b = {.d = 0x3c00, .dmin = 0x3800}; /* 1.0, 0.5 */
    memcpy(b.scales, g_kbytes, 12);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) b.qs[32 * c + l] = (uint8_t)((l & 15) | ((7 * l + c) & 15) << 4);
    }
    float y[256];
    quant_dequantize_row_ref(NX_TYPE_Q4_K, &b, y, 256);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int s0 = 2 * c, s1 = 2 * c + 1;
            ASSERT_EQ(y[64 * c + l], 1.0f * g_ksc[s0] * (l & 15) - 0.5f * g_kmn[s0]);
            ASSERT_EQ(y[64 * c + 32 + l], 1.0f * g_ksc[s1] * ((7 * l + c) & 15) - 0.5f * g_kmn[s1]);
        }
    }
}

TEST(dequant_known_q5_K) {
    struct block_q5_K b = {.d = 0x3400, .dmin = 0x3c00}; /* 0.25, 1.0 */
    memcpy(b.scales, g_kbytes, 12);
    for (int l = 0; l < 32; l++) b.qh[l] = (uint8_t)(l * 37 + 11);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) b.qs[32 * c + l] = (uint8_t)(((3 * l) & 15) | ((l + c) & 15) << 4);
    }
    float y[256];
    quant_dequantize_row_ref(NX_TYPE_Q5_K, &b, y, 256);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int s0 = 2 * c, s1 = 2 * c + 1;
            int q0 = ((3 * l) & 15) + 16 * ((b.qh[l] >> s0) & 1);
            int q1 = ((l + c) & 15) + 16 * ((b.qh[l] >> s1) & 1);
            ASSERT_EQ(y[64 * c + l], 0.25f * g_ksc[s0] * q0 - 1.0f * g_kmn[s0]);
            ASSERT_EQ(y[64 * c + 32 + l], 0.25f * g_ksc[s1] * q1 - 1.0f * g_kmn[s1]);
        }
    }
}

TEST(dequant_known_q6_K) {
    static const int8_t sc[16] = {-128, 127, -1, 1, 5, -7, 64, -64, 0, 2, 3, -3, 100, -100, 10, 20};
    struct block_q6_K b = {.d = 0x3400}; /* 0.25 */
    memcpy(b.scales, sc, 16);
    for (int i = 0; i < 128; i++) b.ql[i] = (uint8_t)(i * 13 + 7);
    for (int i = 0; i < 64; i++) b.qh[i] = (uint8_t)(i * 29 + 3);
    float y[256];
    quant_dequantize_row_ref(NX_TYPE_Q6_K, &b, y, 256);
    /* ggml's decoding loop: two halves of 128; in each, 32 lanes l give four elements */
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b.ql + 64 * h, *qh = b.qh + 32 * h;
        const int8_t *s = sc + 8 * h;
        const float *yy = y + 128 * h;
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
            int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
            int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
            int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
            ASSERT_EQ(yy[l], 0.25f * s[is + 0] * q1);
            ASSERT_EQ(yy[l + 32], 0.25f * s[is + 2] * q2);
            ASSERT_EQ(yy[l + 64], 0.25f * s[is + 4] * q3);
            ASSERT_EQ(yy[l + 96], 0.25f * s[is + 6] * q4);
        }
    }
}

TEST(dequant_known_q8_K) {
    struct block_q8_K b = {.d = 0.125f};
    for (int i = 0; i < 256; i++) b.qs[i] = (int8_t)(i - 128);
    float y[256];
    quant_dequantize_row_ref(NX_TYPE_Q8_K, &b, y, 256);
    for (int i = 0; i < 256; i++) ASSERT_EQ(y[i] * 8, i - 128);
}

/* ---- quantizer quality ---------------------------------------------------------------------- */

/* Gaussian values with a per-256 scale and a few outliers. */
static void fill_data(float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float scale = 0.5f + (float)((i / 256) % 7) * 0.25f;
        x[i] = scale * rnd_gauss();
        if (rnd_u64() % 97 == 0) x[i] *= 4.0f;
    }
}

struct rmse_case {
    enum nx_type t;
    double max_rel; /* RMSE / RMS(x) must stay below */
};

/* Measured on this data (Gaussian with 1% outliers at 4x): Q4_0 0.100, Q8_0 0.0062,
 * Q4_K 0.077, Q5_K 0.039, Q6_K 0.020, Q8_K 0.0105 (one scale per 256), F16 2.1e-4,
 * BF16 1.6e-3; thresholds are 15-25% above. */
static const struct rmse_case g_rmse_max[] = {
    {NX_TYPE_F32, 0.0},     {NX_TYPE_F16, 4e-4},    {NX_TYPE_BF16, 2.5e-3},
    {NX_TYPE_Q4_0, 0.115},  {NX_TYPE_Q8_0, 0.0075}, {NX_TYPE_Q4_K, 0.097},
    {NX_TYPE_Q5_K, 0.049},  {NX_TYPE_Q6_K, 0.025},  {NX_TYPE_Q8_K, 0.012},
};

TEST(quantize_rmse) {
    const int64_t n = 256 * 64;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    void *q = malloc(n * 4 + 4096);
    fill_data(x, n);
    double rms = 0;
    for (int64_t i = 0; i < n; i++) rms += (double)x[i] * x[i];
    rms = sqrt(rms / n);
    for (size_t c = 0; c < sizeof g_rmse_max / sizeof g_rmse_max[0]; c++) {
        quant_quantize_row_ref(g_rmse_max[c].t, x, q, n);
        quant_dequantize_row_ref(g_rmse_max[c].t, q, y, n);
        double e = 0;
        for (int64_t i = 0; i < n; i++) e += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        double rel = sqrt(e / n) / rms;
        printf("  rmse %-5s %.5f (max %.5f)\n", nx_type_name(g_rmse_max[c].t), rel, g_rmse_max[c].max_rel);
        if (!(rel <= g_rmse_max[c].max_rel)) FAILF("%s rmse %.5f > %.5f", nx_type_name(g_rmse_max[c].t), rel, g_rmse_max[c].max_rel);
    }
    /* degenerate blocks: all zero and constant rows quantize without nan */
    for (int v = 0; v < 2; v++) {
        for (int64_t i = 0; i < 512; i++) x[i] = v ? -3.0f : 0.0f;
        for (size_t c = 0; c < sizeof g_rmse_max / sizeof g_rmse_max[0]; c++) {
            quant_quantize_row_ref(g_rmse_max[c].t, x, q, 512);
            quant_dequantize_row_ref(g_rmse_max[c].t, q, y, 512);
            for (int64_t i = 0; i < 512; i++) {
                if (!(fabsf(y[i] - x[i]) <= 0.02f)) FAILF("%s const %g -> %g", nx_type_name(g_rmse_max[c].t), x[i], y[i]);
            }
        }
    }
    free(x), free(y), free(q);
}

/* ---- activation quantization: every set bit-identical to the reference --------------------- */

TEST(quantize_act_exact) {
    const struct kern_table *sets[2];
    int ns = simd_sets(sets);
    if (ns == 0) printf("  skipped: no SIMD set on this CPU\n");
    const int64_t k = 1024;
    float *x = malloc(k * sizeof(float));
    uint8_t *a = malloc(k * 4), *b = malloc(k * 4);
    for (int pass = 0; pass < 6; pass++) {
        for (int64_t i = 0; i < k; i++) {
            switch (pass) {
            case 0: x[i] = rnd_gauss(); break;
            case 1: x[i] = 0; break;
            case 2: x[i] = rnd_gauss() * 1e-30f; break;         /* tiny: d underflows in half */
            case 3: x[i] = rnd_gauss() * 1e30f; break;          /* huge */
            case 4: x[i] = (float)((int)(rnd_u64() % 255) - 127) * 0.5f; break; /* ties */
            default: x[i] = (i % 32 == 5) ? -1000.0f : rnd_gauss(); break;
            }
        }
        for (int t = 0; t < N_WTYPES; t++) {
            enum nx_type wt = g_wtypes[t];
            size_t bytes = kern_act_row_bytes(wt, k);
            kern_table_ref.quantize_act(wt, x, a, k);
            for (int s = 0; s < ns; s++) {
                memset(b, 0xcd, bytes);
                sets[s]->quantize_act(wt, x, b, k);
                if (memcmp(a, b, bytes) != 0) FAILF("%s quantize_act %s pass %d differs", sets[s]->name, nx_type_name(wt), pass);
            }
            /* activation quants never hit -128 */
            if (wt == NX_TYPE_Q8_0 || wt == NX_TYPE_Q4_0) {
                const struct block_q8_0 *q = (const void *)a;
                for (int64_t i = 0; i < k / 32; i++) {
                    for (int j = 0; j < 32; j++) ASSERT_TRUE(q[i].qs[j] != -128);
                }
            } else if (wt == NX_TYPE_Q4_K) {
                const struct block_q8_K *q = (const void *)a;
                for (int64_t i = 0; i < k / 256; i++) {
                    for (int g = 0; g < 16; g++) {
                        int s = 0;
                        for (int j = 0; j < 16; j++) {
                            ASSERT_TRUE(q[i].qs[16 * g + j] != -128);
                            s += q[i].qs[16 * g + j];
                        }
                        ASSERT_EQ(q[i].bsums[g], s);
                    }
                }
            }
        }
    }
    free(x), free(a), free(b);
}

/* ---- matmul: SIMD vs reference ------------------------------------------------------------ */

/* Kinds of weight data. */
enum wkind {
    W_RANDOM,    /* quantized from Gaussian data */
    W_BYTES,     /* random bytes in every field except finite, moderate f16 scales */
    W_MAX,       /* all quant bytes 0xff, scales extreme */
    W_MIN,       /* all quant bytes 0x00 (Q4_0: -8, Q6_K: -32), scales extreme the other way */
    W_ALT,       /* 0x80 / 0x7f patterns: Q8_0 -128 and +127, Q6 scale -128 */
    W_ZERO,      /* all zero bytes */
    W_KINDS
};

static nx_half rnd_half_scale(void) {
    /* finite halves in [2^-14, 2^3): sign random */
    float v = ldexpf(1.0f + rnd_unif(), (int)(rnd_u64() % 17) - 14);
    return nx_f32_to_half((rnd_u64() & 1) ? -v : v);
}

/* Fill one row of k elements of type t. */
static void make_wrow(enum nx_type t, enum wkind kind, int64_t k, uint8_t *row) {
    size_t bytes = row_bytes(t, k);
    if (t == NX_TYPE_Q4_K_IL) { /* a Q4_K row of this kind, interleaved */
        uint8_t *raw = malloc(bytes);
        make_wrow(NX_TYPE_Q4_K, kind, k, raw);
        quant_q4k_interleave_ref(raw, row, k / QK_K);
        free(raw);
        return;
    }
    if (kind == W_RANDOM || t == NX_TYPE_F32 || t == NX_TYPE_F16 || t == NX_TYPE_BF16) {
        float *tmp = malloc(k * sizeof(float));
        for (int64_t i = 0; i < k; i++) {
            tmp[i] = rnd_gauss();
            if (kind == W_MAX) tmp[i] = 60000.0f * (i % 3 == 0 ? -1 : 1);
            if (kind == W_ZERO) tmp[i] = 0;
            if (kind == W_ALT) tmp[i] = (i & 1) ? 1e-6f : -1e4f;
        }
        quant_quantize_row_ref(t, tmp, row, k);
        free(tmp);
        return;
    }
    uint8_t fill = kind == W_MAX ? 0xff : kind == W_MIN ? 0x00 : kind == W_ALT ? 0x80 : 0;
    for (size_t i = 0; i < bytes; i++) row[i] = kind == W_BYTES ? (uint8_t)rnd_u64() : fill;
    if (kind == W_ALT) {
        for (size_t i = 0; i < bytes; i += 2) row[i] = 0x7f;
    }
    /* f16 scale fields: keep finite (random bytes could make inf / nan) */
    int64_t nb = k / blck(t);
    for (int64_t b = 0; b < nb; b++) {
        nx_half d = kind == W_BYTES ? rnd_half_scale() : kind == W_ZERO ? 0 : 0x3c00;
        nx_half dm = kind == W_BYTES ? rnd_half_scale() : kind == W_ZERO ? 0 : 0x3555;
        switch (t) {
        case NX_TYPE_Q4_0: ((struct block_q4_0 *)row)[b].d = d; break;
        case NX_TYPE_Q8_0: ((struct block_q8_0 *)row)[b].d = d; break;
        case NX_TYPE_Q4_K: ((struct block_q4_K *)row)[b].d = d, ((struct block_q4_K *)row)[b].dmin = dm; break;
        case NX_TYPE_Q5_K: ((struct block_q5_K *)row)[b].d = d, ((struct block_q5_K *)row)[b].dmin = dm; break;
        case NX_TYPE_Q6_K: ((struct block_q6_K *)row)[b].d = d; break;
        default: break;
        }
    }
}

/* Kinds of activation data. */
enum xkind { X_RANDOM, X_EXTREME, X_ZERO, X_ALLPOS, X_KINDS };

static void make_x(enum xkind kind, int64_t k, float *x) {
    for (int64_t i = 0; i < k; i++) {
        switch (kind) {
        case X_RANDOM: x[i] = rnd_gauss(); break;
        case X_EXTREME: x[i] = (rnd_u64() & 1) ? 127.0f : -127.0f; break; /* quants at +-127 */
        case X_ZERO: x[i] = 0; break;
        default: x[i] = 1.0f + rnd_unif(); break;
        }
    }
}

/* |dequantized weights| with K-quant scale and min parts separate: out_a = d-part, out_b = min
 * part (so that |w| <= |a| + |b|). */
static void wmag(enum nx_type t, const uint8_t *row, int64_t k, float *a, float *b) {
    size_t bytes = row_bytes(t, k);
    uint8_t *tmp = malloc(bytes);
    memcpy(tmp, row, bytes);
    int64_t nb = k / blck(t);
    if (t == NX_TYPE_Q4_K || t == NX_TYPE_Q4_K_IL || t == NX_TYPE_Q5_K) {
        for (int64_t i = 0; i < nb; i++) {
            if (t != NX_TYPE_Q5_K) ((struct block_q4_K *)tmp)[i].dmin = 0;
            else ((struct block_q5_K *)tmp)[i].dmin = 0;
        }
        quant_dequantize_row_ref(t, tmp, a, k);
        memcpy(tmp, row, bytes);
        for (int64_t i = 0; i < nb; i++) {
            if (t != NX_TYPE_Q5_K) ((struct block_q4_K *)tmp)[i].d = 0;
            else ((struct block_q5_K *)tmp)[i].d = 0;
        }
        quant_dequantize_row_ref(t, tmp, b, k);
    } else {
        quant_dequantize_row_ref(t, row, a, k);
        for (int64_t i = 0; i < k; i++) b[i] = 0;
    }
    free(tmp);
}

/* Dequantized activation row (what the integer kernels actually multiply). */
static void xdeq(enum nx_type wt, const uint8_t *xq, int64_t k, float *out) {
    if (wt == NX_TYPE_F32 || wt == NX_TYPE_F16 || wt == NX_TYPE_BF16) {
        memcpy(out, xq, k * sizeof(float));
    } else if (wt == NX_TYPE_Q4_0 || wt == NX_TYPE_Q8_0) {
        quant_dequantize_row_ref(NX_TYPE_Q8_0, xq, out, k);
    } else {
        quant_dequantize_row_ref(NX_TYPE_Q8_K, xq, out, k);
    }
}

/* Terms per accumulator lane of a SIMD dot product (blocks, or k / 8 for float types). */
static double lane_terms(enum nx_type wt, int64_t k) {
    return (wt == NX_TYPE_F32 || wt == NX_TYPE_F16 || wt == NX_TYPE_BF16) ? (double)k / 8 : (double)(k / blck(wt));
}

struct mm_problem {
    enum nx_type wt;
    int64_t k, rows, nc;
    size_t ws, xs;
    uint8_t *w, *xq;
    double *tol; /* [nc * rows] */
};

static void mm_setup(struct mm_problem *p, enum nx_type wt, int64_t k, int64_t rows, int64_t nc,
                     enum wkind wk, enum xkind xk) {
    p->wt = wt, p->k = k, p->rows = rows, p->nc = nc;
    p->ws = row_bytes(wt, k);
    p->xs = kern_act_row_bytes(wt, k) + 4; /* padded: strides need not be tight */
    p->w = malloc(p->ws * rows);
    p->xq = malloc(p->xs * nc);
    p->tol = malloc(sizeof(double) * nc * rows);
    for (int64_t r = 0; r < rows; r++) make_wrow(wt, (r % 3 == 0) ? wk : (enum wkind)(rnd_u64() % W_KINDS), k, p->w + r * p->ws);
    float *x = malloc(k * sizeof(float)), *xd = malloc(k * sizeof(float));
    float *a = malloc(k * sizeof(float)), *b = malloc(k * sizeof(float));
    double eps_n = 2.0 * FLT_EPSILON * (lane_terms(wt, k) + 16);
    for (int64_t c = 0; c < nc; c++) {
        make_x(c == 0 ? xk : (enum xkind)(rnd_u64() % X_KINDS), k, x);
        kern_table_ref.quantize_act(wt, x, p->xq + c * p->xs, k);
        xdeq(wt, p->xq + c * p->xs, k, xd);
        for (int64_t r = 0; r < rows; r++) {
            wmag(wt, p->w + r * p->ws, k, a, b);
            double s = 0;
            for (int64_t i = 0; i < k; i++) s += (fabs(a[i]) + fabs(b[i])) * fabs(xd[i]);
            p->tol[c * rows + r] = eps_n * s + 1e-30;
        }
    }
    free(x), free(xd), free(a), free(b);
}

static void mm_free(struct mm_problem *p) { free(p->w), free(p->xq), free(p->tol); }

static int mm_compare(const struct kern_table *set, struct mm_problem *p, const char *what) {
    int64_t n = p->nc * p->rows;
    float *yr = malloc(n * sizeof(float)), *ys = malloc(n * sizeof(float));
    kern_table_ref.matmul(p->wt, p->k, p->w, p->ws, 0, p->rows, p->xq, p->xs, p->nc, yr, p->rows);
    for (int64_t i = 0; i < n; i++) ys[i] = NAN;
    set->matmul(p->wt, p->k, p->w, p->ws, 0, p->rows, p->xq, p->xs, p->nc, ys, p->rows);
    int bad = 0;
    for (int64_t i = 0; i < n && bad < 5; i++) {
        if (!(fabs((double)ys[i] - yr[i]) <= p->tol[i])) {
            fprintf(stderr, "  %s %s %s k=%lld rows=%lld nc=%lld: y[c=%lld][r=%lld] = %.9g, ref %.9g (tol %.3g)\n",
                    set->name, nx_type_name(p->wt), what, (long long)p->k, (long long)p->rows,
                    (long long)p->nc, (long long)(i / p->rows), (long long)(i % p->rows), ys[i],
                    yr[i], p->tol[i]);
            bad++;
        }
    }
    free(yr), free(ys);
    return bad;
}

static void check_matmul_set(const struct kern_table *set) {
    static const char *wnames[W_KINDS] = {"random", "bytes", "max", "min", "alt", "zero"};
    for (int t = 0; t < N_WTYPES; t++) {
        enum nx_type wt = g_wtypes[t];
        bool fl = blck(wt) == 1;
        int64_t b = fl ? 8 : blck(wt);
        /* k: one block, a few, many; float types also odd k (tails) */
        int64_t ks[5] = {b, 3 * b, fl ? 1000 : 16 * b, fl ? 13 : 5 * b, fl ? 37 : 2 * b};
        for (int ki = 0; ki < 5; ki++) {
            for (int wk = 0; wk < W_KINDS; wk++) {
                struct mm_problem p;
                int64_t nc = (int64_t[]){1, 5, 4, 9, 2, 13}[wk];
                int64_t rows = (int64_t[]){7, 4, 13, 1, 9, 6}[(wk + ki) % 6];
                mm_setup(&p, wt, ks[ki], rows, nc, (enum wkind)wk, (enum xkind)((wk + ki) % X_KINDS));
                int bad = mm_compare(set, &p, wnames[wk]);
                mm_free(&p);
                if (bad) FAILF("%s matmul %s differs from the reference", set->name, nx_type_name(wt));
            }
        }
    }
}

/* y for rows [0, rows) computed in pieces [r0, r1) and column subsets must be bit-identical. */
static void check_split_set(const struct kern_table *set) {
    for (int t = 0; t < N_WTYPES; t++) {
        enum nx_type wt = g_wtypes[t];
        for (int rep = 0; rep < 3; rep++) {
            /* rep 2: long rows, so that the K-quant drivers walk several row blocks */
            int64_t k = blck(wt) == 1 ? (rep == 2 ? 1000 : 264) : (rep == 2 ? 16 : 4) * blck(wt);
            struct mm_problem p;
            int64_t nc = (int64_t[]){5, 11, 7}[rep], rows = 37;
            mm_setup(&p, wt, k, rows, nc, W_RANDOM, X_RANDOM);
            int64_t n = nc * rows;
            float *y0 = malloc(n * sizeof(float)), *y1 = malloc(n * sizeof(float));
            set->matmul(wt, k, p.w, p.ws, 0, rows, p.xq, p.xs, nc, y0, rows);
            /* random row pieces, one column at a time (decode path) */
            for (int64_t c = 0; c < nc; c++) {
                for (int64_t r0 = 0; r0 < rows;) {
                    int64_t len = 1 + (int64_t)(rnd_u64() % 9), r1 = NX_MIN(rows, r0 + len);
                    set->matmul(wt, k, p.w, p.ws, r0, r1, p.xq + c * p.xs, p.xs, 1, y1 + c * rows, rows);
                    r0 = r1;
                }
            }
            if (memcmp(y0, y1, n * sizeof(float)) != 0) FAILF("%s %s: nc=1 pieces differ from one call", set->name, nx_type_name(wt));
            /* random row pieces, columns in uneven groups */
            memset(y1, 0, n * sizeof(float));
            for (int64_t r0 = 0; r0 < rows;) {
                int64_t len = 1 + (int64_t)(rnd_u64() % 13), r1 = NX_MIN(rows, r0 + len);
                for (int64_t c0 = 0; c0 < nc;) {
                    int64_t cl = 1 + (int64_t)(rnd_u64() % 6), c1 = NX_MIN(nc, c0 + cl);
                    set->matmul(wt, k, p.w, p.ws, r0, r1, p.xq + c0 * p.xs, p.xs, c1 - c0, y1 + c0 * rows, rows);
                    c0 = c1;
                }
                r0 = r1;
            }
            if (memcmp(y0, y1, n * sizeof(float)) != 0) FAILF("%s %s: split call differs", set->name, nx_type_name(wt));
            free(y0), free(y1);
            mm_free(&p);
        }
    }
}

TEST(matmul_ref_split_invariant) { check_split_set(&kern_table_ref); }

TEST(matmul_avx2_vs_ref) {
    if (!kern_cpu_supports("avx2")) {
        printf("  skipped: no AVX2\n");
        return;
    }
    check_matmul_set(&kern_table_avx2);
}

TEST(matmul_avx2_split_invariant) {
    if (!kern_cpu_supports("avx2")) {
        printf("  skipped: no AVX2\n");
        return;
    }
    check_split_set(&kern_table_avx2);
}

TEST(matmul_avx512_vs_ref) {
    if (!can_run("avx512")) {
        printf("  skipped: no AVX-512\n");
        return;
    }
    check_matmul_set(&kern_table_avx512);
}

TEST(matmul_avx512_split_invariant) {
    if (!can_run("avx512")) {
        printf("  skipped: no AVX-512\n");
        return;
    }
    check_split_set(&kern_table_avx512);
}

/* Large shapes once per set: many blocks, the row-block cache loop, prefill tiles. */
TEST(matmul_large_vs_ref) {
    const struct kern_table *sets[2];
    int ns = simd_sets(sets);
    for (int s = 0; s < ns; s++) {
        for (int t = 0; t < N_WTYPES; t++) {
            struct mm_problem p;
            mm_setup(&p, g_wtypes[t], 2048, 150, 7, W_RANDOM, X_RANDOM);
            int bad = mm_compare(sets[s], &p, "large");
            mm_free(&p);
            if (bad) FAILF("%s large %s differs", sets[s]->name, nx_type_name(g_wtypes[t]));
        }
    }
}

/* The first nc columns of p by set's matmul over rows in odd pieces (1, 3, 5, ... rows), or in
 * one call when whole, into yn (rows apart); the first column differing from y1 (each column
 * computed alone), or -1. */
static int64_t first_column_differing(const struct kern_table *set, const struct mm_problem *p,
                                      int64_t nc, bool whole, const float *y1, float *yn) {
    int64_t rows = p->rows;
    memset(yn, 0xff, (size_t)(nc * rows) * sizeof(float));
    for (int64_t r0 = 0, len = whole ? rows : 1; r0 < rows; r0 += len, len += 2)
        set->matmul(p->wt, p->k, p->w, p->ws, r0, NX_MIN(rows, r0 + len), p->xq, p->xs, nc, yn, rows);
    for (int64_t c = 0; c < nc; c++)
        if (memcmp(y1 + c * rows, yn + c * rows, (size_t)rows * sizeof(float)) != 0) return c;
    return -1;
}

/*
 * A column's result does not depend on how many other columns share the call: for every set
 * and weight type, columns 0..nc-1 of one call with nc = 1..20 (the decode kernel, the
 * small-batch kernels of 2..16 columns in one or two passes or groups of two passes, the
 * prefill tiles) and of 33-, 49- and 70-column calls (the K-quants' small-batch limits, 16 and
 * 48 on AVX2), over odd row pieces, are bit-identical to the same column computed alone
 * (nc = 1, all rows in one call).
 */
TEST(matmul_columns_bit_identical_any_nc) {
    const struct kern_table *sets[3] = {&kern_table_ref};
    int ns = 1 + simd_sets(sets + 1);
    static const int64_t ncs[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 33, 49, 70};
    for (int s = 0; s < ns; s++) {
        for (int t = 0; t < N_WTYPES; t++) {
            enum nx_type wt = g_wtypes[t];
            int64_t k = blck(wt) == 1 ? 1003 : (blck(wt) == QK_K ? 8 : 32) * blck(wt);
            const int64_t rows = 23, ncmax = 70;
            struct mm_problem p;
            mm_setup(&p, wt, k, rows, ncmax, W_RANDOM, X_RANDOM);
            float *y1 = malloc(ncmax * rows * sizeof(float)), *yn = malloc(ncmax * rows * sizeof(float));
            for (int64_t c = 0; c < ncmax; c++) sets[s]->matmul(wt, k, p.w, p.ws, 0, rows, p.xq + c * p.xs, p.xs, 1, y1 + c * rows, rows);
            for (size_t i = 0; i < sizeof ncs / sizeof ncs[0]; i++) {
                int64_t c = first_column_differing(sets[s], &p, ncs[i], false, y1, yn);
                if (c >= 0)
                    FAILF("%s %s: column %lld of an nc=%lld call differs from nc=1", sets[s]->name,
                          nx_type_name(wt), (long long)c, (long long)ncs[i]);
            }
            free(y1), free(yn);
            mm_free(&p);
        }
    }
}

/*
 * K-quant batches run through the small-batch kernels in blocks of rows (KQ_RAW_BLOCK bytes,
 * kern_avx2.c: 18-28 rows at k = 16384) under groups of columns: rows cut by block, by thread
 * piece (odd pieces of 1, 3, 5, ... rows, so a pair kernel's last row is sometimes alone) and
 * columns cut into groups still give every column the bits it gets alone, for 17, 40 and 64
 * columns (one group of passes short of two, several groups, the AVX2 prefill tiles' side).
 */
TEST(matmul_kq_row_blocks_bit_identical) {
    const struct kern_table *sets[3] = {&kern_table_ref};
    int ns = 1 + simd_sets(sets + 1);
    const enum nx_type types[3] = {NX_TYPE_Q4_K, NX_TYPE_Q4_K_IL, NX_TYPE_Q6_K};
    const int64_t k = 16384, rows = 61, ncs[3] = {17, 40, 64};
    for (int s = 0; s < ns; s++) {
        for (int t = 0; t < 3; t++) {
            struct mm_problem p;
            mm_setup(&p, types[t], k, rows, 64, W_RANDOM, X_RANDOM);
            float *y1 = malloc(64 * rows * sizeof(float)), *yn = malloc(64 * rows * sizeof(float));
            for (int64_t c = 0; c < 64; c++) sets[s]->matmul(p.wt, k, p.w, p.ws, 0, rows, p.xq + c * p.xs, p.xs, 1, y1 + c * rows, rows);
            for (int i = 0; i < 3; i++) {
                if (first_column_differing(sets[s], &p, ncs[i], true, y1, yn) >= 0)
                    FAILF("%s %s nc=%lld: all rows in one call differ from nc=1", sets[s]->name, nx_type_name(p.wt), (long long)ncs[i]);
                if (first_column_differing(sets[s], &p, ncs[i], false, y1, yn) >= 0)
                    FAILF("%s %s nc=%lld: odd row pieces differ from nc=1", sets[s]->name, nx_type_name(p.wt), (long long)ncs[i]);
            }
            free(y1), free(yn);
            mm_free(&p);
        }
    }
}

/*
 * The Q8_0 / Q4_0 row-lane contract (src/kern/q8t_avx2.c), written out here in scalar C: per
 * output, acc = fmaf((float)isum_b, dw_b * dx_b, acc) over the blocks in order. Both SIMD sets
 * must match it bit for bit, in decode (1..8 columns, up to 4 per pass) and prefill (tiles of
 * 8 / 16 rows, ragged last groups, 1..12-column tiles), for every kind of weight block.
 */
static float q8_model(enum nx_type wt, const uint8_t *w, const uint8_t *x, int64_t nb) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const struct block_q8_0 *bx = (const struct block_q8_0 *)x + b;
        int32_t isum = 0;
        float dw;
        if (wt == NX_TYPE_Q4_0) {
            const struct block_q4_0 *bw = (const struct block_q4_0 *)w + b;
            for (int j = 0; j < 16; j++) {
                isum += ((bw->qs[j] & 0xf) - 8) * bx->qs[j] + ((bw->qs[j] >> 4) - 8) * bx->qs[j + 16];
            }
            dw = nx_half_to_f32(bw->d);
        } else {
            const struct block_q8_0 *bw = (const struct block_q8_0 *)w + b;
            for (int j = 0; j < 32; j++) isum += bw->qs[j] * bx->qs[j];
            dw = nx_half_to_f32(bw->d);
        }
        float scale = dw * nx_half_to_f32(bx->d);
        acc = fmaf((float)isum, scale, acc);
    }
    return acc;
}

TEST(matmul_q8_row_lane_contract) {
    const struct kern_table *sets[2];
    int ns = simd_sets(sets);
    const enum nx_type types[2] = {NX_TYPE_Q8_0, NX_TYPE_Q4_0};
    const int64_t ncs[7] = {1, 3, 4, 13, 29, 2, 6};
    for (int s = 0; s < ns; s++) {
        for (int t = 0; t < 2; t++) {
            for (int wk = 0; wk < W_KINDS; wk++) {
                int64_t k = (int64_t[]){32, 96, 2048, 320, 64, 160}[wk], rows = (int64_t[]){37, 16, 9, 8, 17, 1}[wk];
                int64_t nc = ncs[(wk + t) % 7];
                struct mm_problem p;
                mm_setup(&p, types[t], k, rows, nc, (enum wkind)wk, (enum xkind)(wk % X_KINDS));
                float *y = malloc(sizeof(float) * (size_t)(rows * nc));
                sets[s]->matmul(p.wt, k, p.w, p.ws, 0, rows, p.xq, p.xs, nc, y, rows);
                int bad = 0;
                for (int64_t c = 0; c < nc; c++) {
                    for (int64_t r = 0; r < rows; r++) {
                        float m = q8_model(p.wt, p.w + r * p.ws, p.xq + c * p.xs, k / 32);
                        if (fbits(m) != fbits(y[c * rows + r]) && bad++ < 3) {
                            fprintf(stderr, "  %s %s k=%lld nc=%lld y[%lld][%lld] = %.9g, model %.9g\n", sets[s]->name,
                                    nx_type_name(p.wt), (long long)k, (long long)nc, (long long)c, (long long)r,
                                    y[c * rows + r], m);
                        }
                    }
                }
                free(y);
                mm_free(&p);
                if (bad) FAILF("%s %s: %d outputs differ from the row-lane contract", sets[s]->name, nx_type_name(types[t]), bad);
            }
        }
    }
}

/* When a thread's K-quant scratch cannot grow, the AVX2 matmul runs the reference kernel for
 * that call (bit-identical to it) instead of aborting; the next call allocates and is SIMD
 * again. Run on a fresh thread, whose scratch is empty. */
struct scratch_case {
    enum nx_type wt;
    int fallback_exact, later_ok;
};
static void *scratch_fail_thread(void *arg) {
    struct scratch_case *sc = arg;
    struct mm_problem p;
    mm_setup(&p, sc->wt, 512, 40, 9, W_RANDOM, X_RANDOM);
    int64_t n = p.nc * p.rows;
    float *yr = malloc(n * sizeof(float)), *ys = malloc(n * sizeof(float));
    kern_table_ref.matmul(p.wt, p.k, p.w, p.ws, 0, p.rows, p.xq, p.xs, p.nc, yr, p.rows);
    kern_avx2_test_fail_scratch(true);
    kern_table_avx2.matmul(p.wt, p.k, p.w, p.ws, 0, p.rows, p.xq, p.xs, p.nc, ys, p.rows);
    sc->fallback_exact = memcmp(yr, ys, n * sizeof(float)) == 0;
    sc->later_ok = mm_compare(&kern_table_avx2, &p, "after failed scratch") == 0;
    free(yr), free(ys);
    mm_free(&p);
    return NULL;
}

TEST(matmul_avx2_scratch_failure_falls_back) {
    if (!kern_cpu_supports("avx2")) {
        printf("  skipped: no AVX2\n");
        return;
    }
    const enum nx_type types[2] = {NX_TYPE_Q4_K, NX_TYPE_Q6_K};
    for (int t = 0; t < 2; t++) {
        struct scratch_case sc = {.wt = types[t]};
        pthread_t th;
        ASSERT_TRUE(pthread_create(&th, NULL, scratch_fail_thread, &sc) == 0);
        pthread_join(th, NULL);
        ASSERT_TRUE(sc.fallback_exact);
        ASSERT_TRUE(sc.later_ok);
    }
}

/* After kern_reserve(k, nc) on a fresh thread, K-quant matmuls up to that size never grow the
 * buffer: with a growth failure armed they still give the AVX2 results, not the reference's. */
struct reserve_case {
    int reserved, same, armed_after;
};
static void *reserve_thread(void *arg) {
    struct reserve_case *rc = arg;
    const enum nx_type types[3] = {NX_TYPE_Q4_K, NX_TYPE_Q4_K_IL, NX_TYPE_Q6_K};
    const int64_t ks[3] = {256, 1280, 2048}, ncs[3] = {1, 2, 8};
    struct mm_problem p[3][3];
    float *want[3][3];
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 3; i++) {
            mm_setup(&p[t][i], types[t], ks[i], 13, ncs[i], W_RANDOM, X_RANDOM);
            want[t][i] = malloc(sizeof(float) * 13 * ncs[i]);
        }
    }
    rc->reserved = kern_reserve(2048, 8);
    rc->same = 1;
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 3; i++) { /* on this thread, after the reservation */
            struct mm_problem *q = &p[t][i];
            kern_table_avx2.matmul(q->wt, q->k, q->w, q->ws, 0, q->rows, q->xq, q->xs, q->nc, want[t][i], q->rows);
        }
    }
    kern_avx2_test_fail_scratch(true);
    for (int t = 0; t < 3; t++) {
        for (int i = 0; i < 3; i++) {
            struct mm_problem *q = &p[t][i];
            float y[13 * 8];
            kern_table_avx2.matmul(q->wt, q->k, q->w, q->ws, 0, q->rows, q->xq, q->xs, q->nc, y, q->rows);
            rc->same &= memcmp(y, want[t][i], sizeof(float) * 13 * q->nc) == 0;
            free(want[t][i]);
            mm_free(q);
        }
    }
    /* still armed: no call grew the buffer */
    rc->armed_after = !kern_avx2_reserve(4096, 64);
    kern_avx2_test_fail_scratch(false);
    return NULL;
}

TEST(kern_reserve_makes_matmuls_allocation_free) {
    if (!kern_cpu_supports("avx2")) {
        printf("  skipped: no AVX2\n");
        return;
    }
    struct reserve_case rc = {0};
    pthread_t th;
    ASSERT_TRUE(pthread_create(&th, NULL, reserve_thread, &rc) == 0);
    pthread_join(th, NULL);
    ASSERT_TRUE(rc.reserved);
    ASSERT_TRUE(rc.same);
    ASSERT_TRUE(rc.armed_after);
}

/* ---- Q4_K_IL: the AVX2 set's in-memory Q4_K layout ------------------------------------------ */

TEST(q4k_interleave_roundtrip) {
    const int64_t nb = 37;
    uint8_t *raw = malloc(nb * 144), *il = malloc(nb * 144), *il2 = malloc(nb * 144), *back = malloc(nb * 144);
    for (int rep = 0; rep < 4; rep++) {
        for (int64_t i = 0; i < nb * 144; i++) raw[i] = (uint8_t)rnd_u64();
        quant_q4k_interleave_ref(raw, il, nb);
        quant_q4k_deinterleave_ref(il, back, nb);
        ASSERT_TRUE(memcmp(raw, back, nb * 144) == 0);
        for (int64_t b = 0; b < nb; b++) {
            const struct block_q4_K *r = (const struct block_q4_K *)raw + b, *l = (const struct block_q4_K *)il + b;
            ASSERT_TRUE(memcmp(r, l, offsetof(struct block_q4_K, qs)) == 0); /* d, dmin, scales stay */
            for (int s = 0; s < 8; s++)
                for (int e = 0; e < 32; e++)
                    ASSERT_EQ(quant_q4k_il_get(l->qs, s, e), (r->qs[32 * (s / 2) + e] >> (4 * (s & 1))) & 0xf);
        }
        /* the layout is a permutation: dequantized values are the same */
        float *a = malloc(nb * 256 * sizeof(float)), *b2 = malloc(nb * 256 * sizeof(float));
        quant_dequantize_row_ref(NX_TYPE_Q4_K, raw, a, nb * 256);
        quant_dequantize_row_ref(NX_TYPE_Q4_K_IL, il, b2, nb * 256);
        ASSERT_TRUE(memcmp(a, b2, nb * 256 * sizeof(float)) == 0);
        free(a), free(b2);
        if (kern_cpu_supports("avx2")) {
            memset(il2, 0xcd, nb * 144);
            kern_avx2_q4k_interleave(raw, il2, nb);
            ASSERT_TRUE(memcmp(il, il2, nb * 144) == 0);
        }
        memset(il2, 0xcd, nb * 144);
        kern_repack(NX_TYPE_Q4_K, NX_TYPE_Q4_K_IL, raw, il2, nb);
        ASSERT_TRUE(memcmp(il, il2, nb * 144) == 0);
        kern_repack(NX_TYPE_Q4_K_IL, NX_TYPE_Q4_K, il, il2, nb);
        ASSERT_TRUE(memcmp(raw, il2, nb * 144) == 0);
    }
    free(raw), free(il), free(il2), free(back);
}

/* The reference and AVX2 sets give bit-identical outputs for a Q4_K matrix and its interleaved
 * copy, for decode (nc = 1) and prefill (nc = 8) shapes. (The AVX-512 set runs Q4_K_IL with the
 * AVX2 kernels: within tolerance of its own Q4_K, checked by matmul_avx512_vs_ref.) */
TEST(q4k_interleaved_matches_q4k) {
    const struct kern_table *sets[2] = {&kern_table_ref, &kern_table_avx2};
    int ns = kern_cpu_supports("avx2") ? 2 : 1;
    const int64_t k = 1024, rows = 20;
    for (int s = 0; s < ns; s++) {
        for (int ci = 0; ci < 2; ci++) {
            int64_t nc = ci ? 8 : 1;
            struct mm_problem p;
            mm_setup(&p, NX_TYPE_Q4_K, k, rows, nc, W_RANDOM, X_RANDOM);
            uint8_t *il = malloc(p.ws * rows);
            quant_q4k_interleave_ref(p.w, il, rows * (k / QK_K));
            float *y0 = malloc(sizeof(float) * rows * nc), *y1 = malloc(sizeof(float) * rows * nc);
            sets[s]->matmul(NX_TYPE_Q4_K, k, p.w, p.ws, 0, rows, p.xq, p.xs, nc, y0, rows);
            sets[s]->matmul(NX_TYPE_Q4_K_IL, k, il, p.ws, 0, rows, p.xq, p.xs, nc, y1, rows);
            if (memcmp(y0, y1, sizeof(float) * rows * nc) != 0) FAILF("%s nc=%lld: Q4_K_IL differs from Q4_K", sets[s]->name, (long long)nc);
            free(il), free(y0), free(y1);
            mm_free(&p);
        }
    }
    /* the layout each set asks for */
    kern_force_ref(true);
    ASSERT_EQ(kern_weight_layout(NX_TYPE_Q4_K, QK_K, 4), NX_TYPE_Q4_K);
    kern_force_ref(false);
    /* the layout of the set that runs Q4_K matmuls (AVX-512 CPUs route them to AVX2) */
    enum nx_type want = strcmp(kern_matmul_name(NX_TYPE_Q4_K), "avx2") == 0 ? NX_TYPE_Q4_K_IL : NX_TYPE_Q4_K;
    ASSERT_EQ(kern_weight_layout(NX_TYPE_Q4_K, QK_K, 4), want);
    ASSERT_EQ(kern_weight_layout(NX_TYPE_Q6_K, QK_K, 4), NX_TYPE_Q6_K);
    /* never read from or written to files */
    ASSERT_TRUE(nx_type_info_get(NX_TYPE_Q4_K_IL)->internal);
    ASSERT_TRUE(!nx_type_supported(NX_TYPE_Q4_K_IL));
}

/* ---- attention helpers -------------------------------------------------------------------- */

static void check_kv_set(const struct kern_table *set) {
    const enum nx_type kvts[2] = {NX_TYPE_F32, NX_TYPE_F16};
    const int64_t ns[6] = {1, 7, 8, 64, 129, 1000};
    for (int t = 0; t < 2; t++) {
        for (int ni = 0; ni < 6; ni++) {
            int64_t n = ns[ni];
            float *x = malloc(n * 4), *q = malloc(n * 4), *y0 = malloc(n * 4), *y1 = malloc(n * 4);
            uint8_t *kv0 = malloc(n * 4), *kv1 = malloc(n * 4);
            for (int64_t i = 0; i < n; i++) x[i] = rnd_gauss() * 10, q[i] = rnd_gauss(), y0[i] = y1[i] = rnd_gauss();
            if (n == 7) x[3] = 1e6f, x[4] = -1e-7f, x[5] = 65519.0f; /* half overflow, subnormal */
            kern_table_ref.store_kv(kvts[t], n, x, kv0);
            set->store_kv(kvts[t], n, x, kv1);
            size_t esz = kvts[t] == NX_TYPE_F32 ? 4 : 2;
            if (memcmp(kv0, kv1, n * esz) != 0) FAILF("%s store_kv %s n=%lld differs", set->name, nx_type_name(kvts[t]), (long long)n);
            if (n == 7) {
                for (int64_t i = 0; i < n; i++) x[i] = 0; /* keep dot finite below */
                kern_table_ref.store_kv(kvts[t], n, x, kv0);
                set->store_kv(kvts[t], n, x, kv1);
            }
            float d0 = kern_table_ref.dot_kv(kvts[t], n, kv0, q), d1 = set->dot_kv(kvts[t], n, kv1, q);
            float *kd = malloc(n * 4);
            quant_dequantize_row_ref(kvts[t], kv0, kd, n);
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += fabs((double)kd[i] * q[i]);
            free(kd);
            ASSERT_NEAR(d1, d0, 2.0 * FLT_EPSILON * ((double)n / 8 + 16) * s + 1e-30);
            /* axpy is an exact fma per element */
            kern_table_ref.axpy_kv(kvts[t], n, 0.37f, kv0, y0);
            set->axpy_kv(kvts[t], n, 0.37f, kv1, y1);
            if (memcmp(y0, y1, n * 4) != 0) FAILF("%s axpy_kv %s n=%lld differs", set->name, nx_type_name(kvts[t]), (long long)n);
            free(x), free(q), free(y0), free(y1), free(kv0), free(kv1);
        }
    }
}

/*
 * X4 layouts (types.h, rows interleaved by fours): the relayout puts every element where
 * quant_x4_index says and back; kern_weight_row reads a row; the reference matmul of an X4
 * matrix equals that of its plain rows bit for bit; each SIMD set (both ask for X4) is within
 * the reference tolerance, and bit-identical whatever the columns of a call, the row ranges
 * (multiples of 4) and whether its scratch buffer could be had (decode path); the two sets,
 * which share the order of operations (kern_simd.h), give the same bits.
 */
TEST(x4_layout_round_trip) {
    const int64_t k = 48, rows = 12;
    uint16_t *a = malloc(k * rows * 2), *x4 = malloc(k * rows * 2), *b = malloc(k * rows * 2);
    for (int64_t i = 0; i < k * rows; i++) a[i] = (uint16_t)(rnd_u64() & 0x3fff); /* finite halves */
    kern_relayout(NX_TYPE_F16, NX_TYPE_F16_X4, a, x4, k, rows);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < k; i++)
            if (x4[quant_x4_index(k, r, i)] != a[r * k + i]) FAILF("element (%lld, %lld) misplaced", (long long)r, (long long)i);
    /* spelled out: row 1's first 4 elements follow row 0's, then row 0's next 4 after row 3's */
    ASSERT_EQ(x4[4], a[k]);
    ASSERT_EQ(x4[12], a[3 * k]);
    ASSERT_EQ(x4[16], a[4]);
    ASSERT_EQ(x4[4 * k], a[4 * k]); /* the second group of rows */
    kern_relayout(NX_TYPE_F16_X4, NX_TYPE_F16, x4, b, k, rows);
    ASSERT_EQ(memcmp(a, b, k * rows * 2), 0);
    float *got = malloc(k * sizeof(float)), *want = malloc(k * sizeof(float));
    for (int64_t r = 0; r < rows; r += 5) {
        kern_weight_row(NX_TYPE_F16_X4, x4, k * 2, k, r, got);
        quant_dequantize_row_ref(NX_TYPE_F16, a + r * k, want, k);
        ASSERT_EQ(memcmp(got, want, k * sizeof(float)), 0);
        kern_weight_row(NX_TYPE_BF16_X4, x4, k * 2, k, r, got);
        quant_dequantize_row_ref(NX_TYPE_BF16, a + r * k, want, k);
        ASSERT_EQ(memcmp(got, want, k * sizeof(float)), 0);
    }
    free(a), free(x4), free(b), free(got), free(want);
}

struct x4_call {
    const struct kern_table *set;
    enum nx_type wt;
    int64_t k;
    const uint8_t *w;
    const struct mm_problem *p;
    float *y;
    const float *xb; /* a prepared batch of nc columns, or NULL: the rows */
    int64_t nc;
};
static void *x4_call_without_scratch(void *arg) {
    const struct x4_call *a = arg;
    kern_avx2_test_fail_scratch(true);
    if (a->xb)
        a->set->matmul_batch(a->wt, a->k, a->w, a->p->ws, 0, a->p->rows, a->xb, a->nc, a->y, a->p->rows);
    else
        a->set->matmul(a->wt, a->k, a->w, a->p->ws, 0, a->p->rows, a->p->xq, a->p->xs, a->nc, a->y, a->p->rows);
    kern_avx2_test_fail_scratch(false);
    return NULL;
}

/* The prepared-batch path (kern_batch_cols > 0: X4 weights beyond the in-place columns): the
 * batch prepared from the float rows in growing column pieces (as threads share it), then the
 * product in row pieces, over all rows, and without scratch: each the bits of the row calls
 * (y1, the nc = 1 results). */
static void check_x4_batch(const struct kern_table *set, enum nx_type wt, const struct mm_problem *p,
                           const uint8_t *wx, const float *y1, float *yn, int64_t nc) {
    int q = set->batch_cols(wt, nc);
    if (q == 0) return;
    int64_t k = p->k, rows = p->rows;
    ASSERT_TRUE(KERN_BATCH_ALIGN % q == 0);
    size_t bytes = (size_t)nc * (size_t)k * sizeof(float);
    ASSERT_TRUE(bytes <= (size_t)nc * kern_act_row_bytes(wt, k));
    float *xb = malloc(bytes);
    memset(xb, 0xff, bytes); /* NaN: a hole the preparation leaves shows in the results */
    for (int64_t c0 = 0, len = q; c0 < nc; c0 += len, len += q)
        set->prepare_batch(wt, k, (const float *)p->xq, (int64_t)(p->xs / sizeof(float)), nc, c0,
                           NX_MIN(nc, c0 + len), xb);
    memset(yn, 0xff, (size_t)(nc * rows) * sizeof(float));
    for (int64_t r0 = 0, len = 4; r0 < rows; r0 += len, len += 4)
        set->matmul_batch(wt, k, wx, p->ws, r0, NX_MIN(rows, r0 + len), xb, nc, yn, rows);
    if (memcmp(y1, yn, (size_t)(nc * rows) * sizeof(float)) != 0)
        FAILF("%s %s k=%lld nc=%lld: the prepared batch in row pieces differs from nc=1", set->name,
              nx_type_name(wt), (long long)k, (long long)nc);
    memset(yn, 0xff, (size_t)(nc * rows) * sizeof(float));
    set->matmul_batch(wt, k, wx, p->ws, 0, rows, xb, nc, yn, rows);
    if (memcmp(y1, yn, (size_t)(nc * rows) * sizeof(float)) != 0)
        FAILF("%s %s k=%lld nc=%lld: the prepared batch over all rows differs from nc=1", set->name,
              nx_type_name(wt), (long long)k, (long long)nc);
    memset(yn, 0xff, (size_t)(nc * rows) * sizeof(float));
    struct x4_call call = {set, wt, k, wx, p, yn, xb, nc};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, x4_call_without_scratch, &call), 0);
    pthread_join(th, NULL);
    if (memcmp(y1, yn, (size_t)(nc * rows) * sizeof(float)) != 0)
        FAILF("%s %s k=%lld nc=%lld: the prepared batch without scratch differs", set->name,
              nx_type_name(wt), (long long)k, (long long)nc);
    free(xb);
}

/* One SIMD set on an X4 matrix: within tolerance of the reference; columns, row ranges and
 * the no-scratch path bit-identical. y1 gets the nc = 1 results. */
static void check_x4_set(const struct kern_table *set, enum nx_type wt, const struct mm_problem *p,
                         const uint8_t *wx, const float *yr, float *y1, float *yn) {
    /* the in-place tiles' widths and their column chunks, each set's last in-place width and
       the prefill tiles beyond (AVX2 32, AVX-512 64) */
    static const int64_t ncs[] = {2, 3, 4, 5, 8, 9, 12, 16, 17, 32, 33, 64, 70};
    int64_t k = p->k, rows = p->rows, n = p->nc * rows;
    for (int64_t c = 0; c < p->nc; c++) /* every column alone (the decode tiles), all rows */
        set->matmul(wt, k, wx, p->ws, 0, rows, p->xq + c * p->xs, p->xs, 1, y1 + c * rows, rows);
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)y1[i] - yr[i]) <= p->tol[i]))
            FAILF("%s %s k=%lld: y[%lld] = %.9g, ref %.9g (tol %.3g)", set->name, nx_type_name(wt),
                  (long long)k, (long long)i, y1[i], yr[i], p->tol[i]);
    for (size_t ni = 0; ni < sizeof ncs / sizeof ncs[0] && ncs[ni] <= p->nc; ni++) {
        /* rows in pieces of 4, 8, ... */
        int64_t nc = ncs[ni];
        memset(yn, 0xff, n * sizeof(float));
        for (int64_t r0 = 0, len = 4; r0 < rows; r0 += len, len += 4)
            set->matmul(wt, k, wx, p->ws, r0, NX_MIN(rows, r0 + len), p->xq, p->xs, nc, yn, rows);
        if (memcmp(y1, yn, nc * rows * sizeof(float)) != 0)
            FAILF("%s %s k=%lld: an nc=%lld call differs from nc=1", set->name, nx_type_name(wt),
                  (long long)k, (long long)nc);
        /* all rows in one call (the widest prefill tiles, then a narrower one) */
        memset(yn, 0xff, n * sizeof(float));
        set->matmul(wt, k, wx, p->ws, 0, rows, p->xq, p->xs, nc, yn, rows);
        if (memcmp(y1, yn, nc * rows * sizeof(float)) != 0)
            FAILF("%s %s k=%lld: an nc=%lld call over all rows differs from nc=1", set->name,
                  nx_type_name(wt), (long long)k, (long long)nc);
        check_x4_batch(set, wt, p, wx, y1, yn, nc);
    }
    ASSERT_TRUE(set->batch_cols(wt, p->nc) > 0); /* every set prepares a batch of 70 columns */
    /* no scratch (a fresh thread, whose first buffer fails): the decode tiles, same bits */
    memset(yn, 0xff, n * sizeof(float));
    struct x4_call call = {set, wt, k, wx, p, yn, NULL, p->nc};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, x4_call_without_scratch, &call), 0);
    pthread_join(th, NULL);
    if (memcmp(y1, yn, n * sizeof(float)) != 0)
        FAILF("%s %s k=%lld: the no-scratch path differs", set->name, nx_type_name(wt), (long long)k);
}

TEST(x4_matmul_vs_ref_and_invariance) {
    const struct kern_table *sets[2];
    int ns = simd_sets(sets);
    if (ns == 0) printf("  SIMD sets not run: no AVX2 (the reference part runs)\n");
    for (int s = 0; s < ns; s++) {
        ASSERT_EQ((int)sets[s]->weight_layout(NX_TYPE_F16, 64, 8), (int)NX_TYPE_F16_X4);
        ASSERT_EQ((int)sets[s]->weight_layout(NX_TYPE_BF16, 64, 8), (int)NX_TYPE_BF16_X4);
        ASSERT_EQ((int)sets[s]->weight_layout(NX_TYPE_F16, 64, 6), (int)NX_TYPE_F16);
        ASSERT_EQ((int)sets[s]->weight_layout(NX_TYPE_BF16, 40, 8), (int)NX_TYPE_BF16);
    }
    static const enum nx_type plain[2] = {NX_TYPE_F16, NX_TYPE_BF16}, il[2] = {NX_TYPE_F16_X4, NX_TYPE_BF16_X4};
    /* k: below one k-block, a block and a 16-element tail block, several blocks; rows: up to
       2 x 32 + 12 (the AVX-512 prefill tiles' 32 rows, then 12) */
    static const int64_t ks[4] = {16, X4_KC + 16, 2 * X4_KC + 96, X4_KC + 16},
                         rowss[4] = {4, 28, 12, 76};
    for (int t = 0; t < 2; t++) {
        for (int ki = 0; ki < 4; ki++) {
            int64_t k = ks[ki], rows = rowss[ki], nc = 70, n = nc * rows;
            struct mm_problem p;
            mm_setup(&p, plain[t], k, rows, nc, W_RANDOM, X_RANDOM);
            uint8_t *wx = malloc(p.ws * rows);
            kern_relayout(plain[t], il[t], p.w, wx, k, rows);
            float *yr = malloc(n * sizeof(float)), *yx = malloc(n * sizeof(float));
            float *y1[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))}, *yn = malloc(n * sizeof(float));
            kern_table_ref.matmul(plain[t], k, p.w, p.ws, 0, rows, p.xq, p.xs, nc, yr, rows);
            kern_table_ref.matmul(il[t], k, wx, p.ws, 0, rows, p.xq, p.xs, nc, yx, rows);
            ASSERT_EQ(memcmp(yr, yx, n * sizeof(float)), 0);
            for (int s = 0; s < ns; s++) check_x4_set(sets[s], il[t], &p, wx, yr, y1[s], yn);
            /* one order of operations for both sets (kern_simd.h): the same bits */
            if (ns == 2 && memcmp(y1[0], y1[1], n * sizeof(float)) != 0)
                FAILF("%s k=%lld: the AVX2 and AVX-512 sets differ", nx_type_name(il[t]), (long long)k);
            free(wx), free(yr), free(yx), free(y1[0]), free(y1[1]), free(yn);
            mm_free(&p);
        }
    }
}

TEST(kv_helpers_vs_ref) {
    const struct kern_table *sets[2];
    int ns = simd_sets(sets);
    if (!can_run("avx512")) printf("  skipped avx512 part: no AVX-512\n");
    for (int s = 0; s < ns; s++) check_kv_set(sets[s]);
}

/* ---- dispatch ----------------------------------------------------------------------------- */

TEST(dispatch) {
    kern_init();
    const char *name = kern_name();
    ASSERT_TRUE(strcmp(name, "avx512") == 0 || strcmp(name, "avx2") == 0 || strcmp(name, "ref") == 0);
    ASSERT_TRUE(kern_cpu_supports(name));
    ASSERT_STR_EQ(nx_kernels_name(), name);
    printf("  kernels: %s (avx2 %s, avx512 %s)\n", name, kern_cpu_supports("avx2") ? "yes" : "no",
           kern_cpu_supports("avx512") ? "yes" : "no");
    const char *env = getenv("NX_KERNELS");
    if (env && strcmp(env, "ref") == 0) ASSERT_STR_EQ(name, "ref");
    if (!env && kern_cpu_supports("avx2")) ASSERT_TRUE(strcmp(name, "ref") != 0);
    nx_kernels_force_ref(true);
    ASSERT_STR_EQ(kern_name(), "ref");
    ASSERT_TRUE(kern_table_current() == &kern_table_ref);
    kern_force_ref(false);
    ASSERT_STR_EQ(kern_name(), name);
    ASSERT_TRUE(kern_table_by_name("avx2") == &kern_table_avx2);
    ASSERT_TRUE(kern_table_by_name("nope") == NULL);
    /* per-type routes: on AVX-512 CPUs raw Q4_K matmuls run the AVX2 set, Q4_K weights take
       the AVX2 layout, and the AVX-512 set runs Q4_K_IL / Q6_K with the AVX2 driver and its own
       small-batch kernels: bit for bit the AVX2 set's results (nc = 5 takes the small path) */
    if (strcmp(name, "avx512") == 0) {
        ASSERT_STR_EQ(kern_matmul_name(NX_TYPE_Q4_K), "avx2");
        ASSERT_STR_EQ(kern_matmul_name(NX_TYPE_Q6_K), "avx512");
        ASSERT_STR_EQ(kern_matmul_name(NX_TYPE_Q4_K_IL), "avx512");
        ASSERT_STR_EQ(kern_matmul_name(NX_TYPE_Q8_0), "avx512");
        ASSERT_STR_EQ(kern_matmul_name(NX_TYPE_F16), "avx512");
        ASSERT_EQ((int)kern_weight_layout(NX_TYPE_Q4_K, QK_K, 4), (int)NX_TYPE_Q4_K_IL);
        const enum nx_type rt[3] = {NX_TYPE_Q6_K, NX_TYPE_Q4_K_IL, NX_TYPE_Q8_0};
        for (int t = 0; t < 3; t++) {
            struct mm_problem p;
            mm_setup(&p, rt[t], 512, 20, 5, W_RANDOM, X_RANDOM);
            float ya[100], yb[100];
            kern_matmul(p.wt, p.k, p.w, p.ws, 0, p.rows, p.xq, p.xs, p.nc, ya, p.rows);
            kern_table_by_name(kern_matmul_name(rt[t]))->matmul(p.wt, p.k, p.w, p.ws, 0, p.rows, p.xq, p.xs, p.nc, yb, p.rows);
            ASSERT_TRUE(memcmp(ya, yb, sizeof ya) == 0);
            if (rt[t] != NX_TYPE_Q8_0) {
                kern_table_avx2.matmul(p.wt, p.k, p.w, p.ws, 0, p.rows, p.xq, p.xs, p.nc, yb, p.rows);
                ASSERT_TRUE(memcmp(ya, yb, sizeof ya) == 0);
            }
            mm_free(&p);
        }
    } else {
        ASSERT_STR_EQ(kern_matmul_name(NX_TYPE_Q4_K), name);
    }
    kern_force_ref(true);
    ASSERT_STR_EQ(kern_matmul_name(NX_TYPE_Q4_K), "ref");
    kern_force_ref(false);
    /* the public entry points work end to end */
    const int64_t k = 256;
    float x[256], w[2 * 256], y[2];
    for (int i = 0; i < 256; i++) x[i] = (float)(i % 7) - 3, w[i] = 1, w[256 + i] = (i & 1) ? 1 : -1;
    uint8_t *wq = malloc(2 * row_bytes(NX_TYPE_Q8_0, k)), *xq = malloc(kern_act_row_bytes(NX_TYPE_Q8_0, k));
    quant_quantize_row_ref(NX_TYPE_Q8_0, w, wq, 2 * k);
    kern_quantize_act(NX_TYPE_Q8_0, x, xq, k);
    kern_matmul(NX_TYPE_Q8_0, k, wq, row_bytes(NX_TYPE_Q8_0, k), 0, 2, xq, 0, 1, y, 2);
    double s0 = 0, s1 = 0;
    for (int i = 0; i < 256; i++) s0 += x[i], s1 += x[i] * w[256 + i];
    ASSERT_NEAR(y[0], s0, 0.05);
    ASSERT_NEAR(y[1], s1, 0.05);
    free(wq), free(xq);
}

/* The decode prefetch levels (dispatch.c's per-CPU table, NX_PREFETCH) only move data earlier:
 * every SIMD set's decode and prefill give the same bits under each level of each kind of
 * stream; kern_pf_name names the levels in force. */
TEST(prefetch_levels_same_bits) {
    const struct kern_table *sets[2];
    int ns = simd_sets(sets);
    kern_init();
    const enum kern_pf saved[2] = {kern_pf_level[0], kern_pf_level[1]};
    char name[16];
    snprintf(name, sizeof name, "%s", kern_pf_name());
    ASSERT_TRUE(strchr(name, ',') != NULL && strchr(strchr(name, ',') + 1, ',') != NULL);
    for (int s = 0; s < ns; s++) {
        for (int t = 0; t < N_WTYPES; t++) {
            enum nx_type wt = g_wtypes[t];
            int64_t k = blck(wt) == 1 ? 2051 : (blck(wt) == QK_K ? 12 : 72) * blck(wt);
            const int64_t rows = 37, nc = 6;
            struct mm_problem p;
            mm_setup(&p, wt, k, rows, nc, W_RANDOM, X_RANDOM);
            float *y0 = malloc(nc * rows * sizeof(float)), *y1 = malloc(nc * rows * sizeof(float));
            for (int l = 0; l < 9; l++) { /* grouped x single levels */
                kern_pf_level[KERN_PF_GROUPED] = (enum kern_pf)(l % 3);
                kern_pf_level[KERN_PF_SINGLE] = (enum kern_pf)(l / 3);
                float *y = l == 0 ? y0 : y1;
                for (int64_t c = 0; c < nc; c++) /* decode, one column at a time */
                    sets[s]->matmul(wt, k, p.w, p.ws, 0, rows, p.xq + c * p.xs, p.xs, 1, y + c * rows, rows);
                if (l > 0 && memcmp(y0, y1, nc * rows * sizeof(float)) != 0)
                    FAILF("%s %s: decode bits change with prefetch levels %d,%d", sets[s]->name,
                          nx_type_name(wt), l % 3, l / 3);
                sets[s]->matmul(wt, k, p.w, p.ws, 0, rows, p.xq, p.xs, nc, y1, rows);
                if (memcmp(y0, y1, nc * rows * sizeof(float)) != 0)
                    FAILF("%s %s: prefill bits differ from decode under prefetch levels %d,%d",
                          sets[s]->name, nx_type_name(wt), l % 3, l / 3);
            }
            free(y0), free(y1);
            mm_free(&p);
        }
    }
    kern_pf_level[KERN_PF_GROUPED] = KERN_PF_OFF, kern_pf_level[KERN_PF_SINGLE] = KERN_PF_L2;
    ASSERT_TRUE(strncmp(kern_pf_name(), "off,l2,", 7) == 0);
    kern_pf_level[0] = saved[0], kern_pf_level[1] = saved[1];
    ASSERT_STR_EQ(kern_pf_name(), name);
}

/* Minimum work per thread: tiny operations (stories260K's, ~0.2-1.5 us) get one thread, the 1B
 * model's decode matmuls (0.1-1.5 ms) every thread; monotonic in the cost, within [1, nth]. */
TEST(threads_for_minimum_work) {
    ASSERT_EQ(kern_threads_for(0, 8), 1);
    ASSERT_EQ(kern_threads_for(NAN, 8), 1);
    ASSERT_EQ(kern_threads_for(1e12, 1), 1);
    ASSERT_EQ(kern_threads_for(1e12, 8), 8);
    ASSERT_EQ(kern_threads_for(KERN_MIN_NS_PER_THREAD * 2.5, 8), 2);
    int prev = 1;
    for (double c = 100; c < 1e9; c *= 1.3) {
        int t = kern_threads_for(c, 6);
        ASSERT_TRUE(t >= prev && t >= 1 && t <= 6);
        prev = t;
    }
    ASSERT_EQ(kern_threads_for(kern_matmul_cost_ns(NX_TYPE_F32, 64, 64, 1), 2), 1);
    ASSERT_EQ(kern_threads_for(kern_matmul_cost_ns(NX_TYPE_F32, 64, 512, 1), 2), 1);
    ASSERT_EQ(kern_threads_for(kern_matmul_cost_ns(NX_TYPE_F32, 64, 172, 8), 2), 1);
    ASSERT_EQ(kern_threads_for(kern_matmul_cost_ns(NX_TYPE_Q4_K, 2048, 2048, 1), 4), 4);
    ASSERT_EQ(kern_threads_for(kern_matmul_cost_ns(NX_TYPE_F16, 2048, 8192, 1), 8), 8);
    ASSERT_EQ(kern_threads_for(kern_matmul_cost_ns(NX_TYPE_Q8_0, 2048, 2048, 512), 8), 8);
    ASSERT_EQ(kern_threads_for(kern_attn_cost_ns(NX_TYPE_F16, 8, 16, 8), 2), 1);
    ASSERT_EQ(kern_threads_for(kern_attn_cost_ns(NX_TYPE_F16, 64, 4096, 4), 2), 2);
    ASSERT_TRUE(kern_matmul_cost_ns(NX_TYPE_Q8_0, 2048, 2048, 0) == 0);
}

TEST_MAIN
