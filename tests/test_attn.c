/*
 * test_attn.c - tests of the grouped attention kernels kern_attn_scores / kern_attn_values
 * (src/kern/attn_ref.c, src/kern/attn_avx2.c) and their dispatch.
 *
 * DESIGN
 * - Inputs mimic the KV cache: rows of several interleaved heads, the tested head's slice at an
 *   odd element offset inside a row (so F16 rows are only 2-byte aligned), strides larger than
 *   hd, both unaligned ones and powers of two >= 1 KiB (which make the AVX2 kernels use short
 *   position blocks); buffers are sized exactly to the last slice so AddressSanitizer sees any
 *   over-read.
 *   Score rows use ld > npos, and the gaps (and a guard after out) hold a NaN sentinel that
 *   must survive.
 * - Shapes: every combination of F32 / F16, hd in {8, 64, 80, 128, 13}, ng in {1, 2, 3, 4, 5, 8}
 *   and npos in {1, 7, 64, 300} (300: several position blocks plus leftovers; 13: the
 *   zero-padded partial chunk).
 * - Oracles: a double-precision dot product / weighted sum written here. Tolerances are
 *   relative to S = the sum of |terms| of the element: 1e-5 * S for scores (float lanes: about
 *   hd/8 + 4 roundings) and for AVX2 vs reference; max(1e-5, npos * FLT_EPSILON) * S for values
 *   against double (a float chain of npos FMAs, in both sets).
 * - Exact properties: the reference equals the old per-call path (kern_ref_dot_kv * scale,
 *   kern_ref_axpy_kv loop) bit for bit; AVX2 values equal the reference bit for bit (same FMA
 *   sequence); every set gives bit-identical elements whatever ng / npos subset a call covers
 *   (what makes results independent of how the caller splits work across threads).
 * - Fused attention (kern_attn_block + kern_attn_merge): against the unfused path of the same
 *   set (scores, softmax, values) and a double oracle, tolerances in check_fused; split
 *   invariance (parts per head or for all heads, any order: identical bits); empty parts.
 * - AVX2 parts print "skipped: no AVX2" and pass on CPUs without AVX2/FMA/F16C.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern.h"
#include "kern/kern_impl.h"
#include "kern/quant.h"
#include "test.h"

static uint64_t g_rng = 0x243f6a8885a308d3ull;

static uint32_t rng_u32(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 32);
}

/* uniform in [-1, 1) */
static float rng_f(void) { return (float)rng_u32() / 2147483648.0f - 1.0f; }

static const int64_t g_hds[] = {8, 64, 80, 128, 13};
static const int64_t g_ngs[] = {1, 2, 3, 4, 5, 8};
static const int64_t g_nposs[] = {1, 7, 64, 300};
static const enum nx_type g_kvts[] = {NX_TYPE_F32, NX_TYPE_F16};
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* A KV cache stand-in: npos rows, stride bytes apart; the tested slice (hd elements) starts
 * at base. vals holds the slice's exact float values, npos x hd. */
struct kv {
    enum nx_type kvt;
    int64_t hd, npos;
    size_t stride, elt;
    char *buf;        /* exactly sized: ends with the last row's slice */
    const char *base; /* buf + slice offset */
    float *vals;
};

/* Row strides: 0 = 3 heads' worth plus 5 elements (no power-of-two alignment); 1 = a power of
 * two >= 1 KiB, like real caches (the AVX2 kernels then use 8- or 16-row blocks). */
static int g_stride_mode;

static void kv_make(struct kv *c, enum nx_type kvt, int64_t hd, int64_t npos, float amp) {
    c->kvt = kvt;
    c->hd = hd;
    c->npos = npos;
    c->elt = kvt == NX_TYPE_F32 ? 4 : 2;
    /* our slice starts at element hd + 1 of each row */
    c->stride = (size_t)(3 * hd + 5) * c->elt;
    if (g_stride_mode == 1) {
        c->stride = 1024;
        while (c->stride < (size_t)(2 * hd + 2) * c->elt) c->stride *= 2;
    }
    size_t off = (size_t)(hd + 1) * c->elt;
    size_t bytes = (size_t)(npos - 1) * c->stride + off + (size_t)hd * c->elt;
    c->buf = malloc(bytes);
    c->vals = malloc((size_t)(npos * hd) * sizeof(float));
    for (size_t b = 0; b < bytes; b++) c->buf[b] = (char)rng_u32(); /* other heads: noise */
    c->base = c->buf + off;
    for (int64_t j = 0; j < npos; j++) {
        char *row = c->buf + off + (size_t)j * c->stride;
        for (int64_t i = 0; i < hd; i++) {
            float x = amp * rng_f();
            if (kvt == NX_TYPE_F32) {
                memcpy(row + (size_t)i * 4, &x, 4);
            } else {
                nx_half h = nx_f32_to_half(x);
                memcpy(row + (size_t)i * 2, &h, 2);
                x = nx_half_to_f32(h);
            }
            c->vals[j * hd + i] = x;
        }
    }
}

static void kv_free(struct kv *c) {
    free(c->buf);
    free(c->vals);
}

static float *rand_floats(int64_t n, float amp) {
    float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = amp * rng_f();
    return x;
}

static float *nan_floats(int64_t n) {
    float *x = malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

typedef void (*scores_fn)(enum nx_type, int64_t, const void *, size_t, int64_t, const float *,
                          int64_t, float, float *, int64_t);
typedef void (*values_fn)(enum nx_type, int64_t, const void *, size_t, int64_t, const float *,
                          int64_t, int64_t, float *);

static bool have_avx2(void) {
    if (kern_cpu_supports("avx2")) return true;
    printf("  skipped: no AVX2\n");
    return false;
}

/*
 * Whether the AVX-512 kernels (attn_avx512.c) may run here. NX_TEST_AVX512_EMULATED: this
 * binary was linked with an attn_avx512.o built on the plain-C emulation of the intrinsics
 * (src/kern/avx512_emu.h), which runs wherever AVX2 does: build/tests/test_attn_avx512emu,
 * built by `make` (the Makefile's emu512 rules) and run by `make test`.
 */
static bool have_avx512(void) {
#ifdef NX_TEST_AVX512_EMULATED
    if (kern_cpu_supports("avx2")) return true;
#else
    if (kern_cpu_supports("avx512")) return true;
#endif
    printf("  skipped: no AVX-512\n");
    return false;
}

static bool same_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

/* ---- scores ------------------------------------------------------------------------------- */

/*
 * Every shape: the set's scores against a double dot product (and, when ref is given, against
 * the reference set's scores), tolerance 1e-5 * S; the ld gaps must keep their sentinel.
 */
static void check_scores(scores_fn fn, scores_fn ref, const char *what) {
    const float scale = 0.125f;
    for (g_stride_mode = 0; g_stride_mode < 2; g_stride_mode++)
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++)
    for (int c = 0; c < N_OF(g_ngs); c++)
    for (int d = 0; d < N_OF(g_nposs); d++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = g_ngs[c], npos = g_nposs[d], ld = npos + 3;
        struct kv k;
        kv_make(&k, kvt, hd, npos, 2.0f);
        float *q = rand_floats(ng * hd, 3.0f);
        float *s = nan_floats(ng * ld), *sr = nan_floats(ng * ld);
        fn(kvt, hd, k.base, k.stride, npos, q, ng, scale, s, ld);
        if (ref) ref(kvt, hd, k.base, k.stride, npos, q, ng, scale, sr, ld);
        int bad = 0;
        for (int64_t g = 0; g < ng && !bad; g++) {
            for (int64_t j = 0; j < ld && !bad; j++) {
                float got = s[g * ld + j];
                if (j >= npos) {
                    if (!isnan(got)) {
                        printf("  %s: ld gap written: type %d hd %lld ng %lld npos %lld\n", what,
                               (int)kvt, (long long)hd, (long long)ng, (long long)npos);
                        bad = 1;
                    }
                    continue;
                }
                double dot = 0.0, sabs = 0.0;
                for (int64_t i = 0; i < hd; i++) {
                    double t = (double)k.vals[j * hd + i] * q[g * hd + i];
                    dot += t;
                    sabs += fabs(t);
                }
                double want = dot * scale, tol = 1e-5 * sabs * scale + 1e-30;
                double err = fabs(got - want), err_ref = ref ? fabs(got - sr[g * ld + j]) : 0;
                if (!(err <= tol) || !(err_ref <= tol)) {
                    printf("  %s: stride mode %d type %d hd %lld ng %lld npos %lld g %lld j %lld: "
                           "got %.9g want %.9g ref %.9g tol %.3g\n",
                           what, g_stride_mode, (int)kvt, (long long)hd, (long long)ng,
                           (long long)npos, (long long)g, (long long)j, got, want,
                           ref ? sr[g * ld + j] : 0.0, tol);
                    bad = 1;
                }
            }
        }
        free(q);
        free(s);
        free(sr);
        kv_free(&k);
        if (bad) FAILF("%s: wrong scores (see above)", what);
    }
}

TEST(scores_ref_vs_double) { check_scores(kern_ref_attn_scores, NULL, "ref"); }

TEST(scores_avx2_vs_ref_and_double) {
    if (!have_avx2()) return;
    check_scores(kern_avx2_attn_scores, kern_ref_attn_scores, "avx2");
}

TEST(scores_avx512_vs_ref_and_double) {
    if (!have_avx512()) return;
    check_scores(kern_avx512_attn_scores, kern_ref_attn_scores, "avx512");
}

/* kern_attn_scores (whatever set this CPU picked) and the forced reference, vs double. */
TEST(scores_dispatch_vs_double) {
    check_scores(kern_attn_scores, NULL, kern_name());
    kern_force_ref(true);
    check_scores(kern_attn_scores, NULL, "forced ref");
    kern_force_ref(false);
}

/* ---- values ------------------------------------------------------------------------------- */

/*
 * Every shape: out against a double weighted sum (tolerance max(1e-5, npos*eps) * S) and,
 * when ref is given, against the reference set within 1e-5 * S; the guard after out must
 * keep its sentinel.
 */
static void check_values(values_fn fn, values_fn ref, const char *what) {
    for (g_stride_mode = 0; g_stride_mode < 2; g_stride_mode++)
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++)
    for (int c = 0; c < N_OF(g_ngs); c++)
    for (int d = 0; d < N_OF(g_nposs); d++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = g_ngs[c], npos = g_nposs[d], ld = npos + 5;
        struct kv v;
        kv_make(&v, kvt, hd, npos, 2.0f);
        float *p = rand_floats(ng * ld, 1.0f);
        const int64_t guard = 9;
        float *o = nan_floats(ng * hd + guard), *orf = nan_floats(ng * hd + guard);
        fn(kvt, hd, v.base, v.stride, npos, p, ld, ng, o);
        if (ref) ref(kvt, hd, v.base, v.stride, npos, p, ld, ng, orf);
        double rel = fmax(1e-5, (double)npos * FLT_EPSILON);
        int bad = 0;
        for (int64_t x = ng * hd; x < ng * hd + guard; x++) {
            if (!isnan(o[x])) bad = 1;
        }
        if (bad) printf("  %s: wrote past out\n", what);
        for (int64_t g = 0; g < ng && !bad; g++) {
            for (int64_t i = 0; i < hd && !bad; i++) {
                double sum = 0.0, sabs = 0.0;
                for (int64_t j = 0; j < npos; j++) {
                    double t = (double)p[g * ld + j] * v.vals[j * hd + i];
                    sum += t;
                    sabs += fabs(t);
                }
                float got = o[g * hd + i];
                double err = fabs(got - sum), err_ref = ref ? fabs(got - orf[g * hd + i]) : 0;
                if (!(err <= rel * sabs + 1e-30) || !(err_ref <= 1e-5 * sabs + 1e-30)) {
                    printf("  %s: stride mode %d type %d hd %lld ng %lld npos %lld g %lld i %lld: "
                           "got %.9g want %.9g ref %.9g S %.3g\n",
                           what, g_stride_mode, (int)kvt, (long long)hd, (long long)ng,
                           (long long)npos, (long long)g, (long long)i, got, sum,
                           ref ? orf[g * hd + i] : 0.0, sabs);
                    bad = 1;
                }
            }
        }
        free(p);
        free(o);
        free(orf);
        kv_free(&v);
        if (bad) FAILF("%s: wrong values (see above)", what);
    }
}

TEST(values_ref_vs_double) { check_values(kern_ref_attn_values, NULL, "ref"); }

TEST(values_avx2_vs_ref_and_double) {
    if (!have_avx2()) return;
    check_values(kern_avx2_attn_values, kern_ref_attn_values, "avx2");
}

TEST(values_dispatch_vs_double) {
    check_values(kern_attn_values, NULL, kern_name());
    kern_force_ref(true);
    check_values(kern_attn_values, NULL, "forced ref");
    kern_force_ref(false);
}

/* Both sets run the same FMA sequence per output element: AVX2 values == reference, bitwise
 * (including with large npos and signed weights). */
TEST(values_avx2_bit_exact) {
    if (!have_avx2()) return;
    for (g_stride_mode = 0; g_stride_mode < 2; g_stride_mode++)
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = 5, npos = 1000, ld = 1001;
        struct kv v;
        kv_make(&v, kvt, hd, npos, 4.0f);
        float *p = rand_floats(ng * ld, 1.0f);
        float *o = nan_floats(ng * hd), *orf = nan_floats(ng * hd);
        kern_avx2_attn_values(kvt, hd, v.base, v.stride, npos, p, ld, ng, o);
        kern_ref_attn_values(kvt, hd, v.base, v.stride, npos, p, ld, ng, orf);
        int64_t diff = 0;
        for (int64_t x = 0; x < ng * hd; x++) diff += !same_bits(o[x], orf[x]);
        free(p);
        free(o);
        free(orf);
        kv_free(&v);
        if (diff) FAILF("stride mode %d type %d hd %lld: %lld elements differ", g_stride_mode,
                        (int)kvt, (long long)hd, (long long)diff);
    }
}

/* ---- exact properties --------------------------------------------------------------------- */

/* The reference kernels equal the old per-(position, head) reference calls, bit for bit. */
TEST(ref_matches_per_call_path) {
    const float scale = 0.0883883476f;
    g_stride_mode = 0;
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = 3, npos = 300, ld = 301;
        struct kv k, v;
        kv_make(&k, kvt, hd, npos, 2.0f);
        kv_make(&v, kvt, hd, npos, 2.0f);
        float *q = rand_floats(ng * hd, 1.0f), *p = rand_floats(ng * ld, 1.0f);
        float *s = nan_floats(ng * ld), *o = nan_floats(ng * hd), *o1 = nan_floats(hd);
        kern_ref_attn_scores(kvt, hd, k.base, k.stride, npos, q, ng, scale, s, ld);
        kern_ref_attn_values(kvt, hd, v.base, v.stride, npos, p, ld, ng, o);
        int64_t diff = 0;
        for (int64_t g = 0; g < ng; g++) {
            for (int64_t j = 0; j < npos; j++) {
                float old = kern_ref_dot_kv(kvt, hd, k.base + (size_t)j * k.stride, q + g * hd) *
                            scale;
                diff += !same_bits(old, s[g * ld + j]);
            }
            memset(o1, 0, (size_t)hd * sizeof(float));
            for (int64_t j = 0; j < npos; j++)
                kern_ref_axpy_kv(kvt, hd, p[g * ld + j], v.base + (size_t)j * v.stride, o1);
            for (int64_t i = 0; i < hd; i++) diff += !same_bits(o1[i], o[g * hd + i]);
        }
        free(q);
        free(p);
        free(s);
        free(o);
        free(o1);
        kv_free(&k);
        kv_free(&v);
        if (diff) FAILF("type %d hd %lld: %lld elements differ", (int)kvt, (long long)hd,
                        (long long)diff);
    }
}

/*
 * One call over (ng = 8, npos = 300) vs one call per head and per uneven position range (as
 * different threads could split the work): bit-identical elements, for every set this CPU runs.
 */
static void check_split(scores_fn sfn, values_fn vfn, const char *what) {
    static const int64_t cuts[] = {0, 1, 9, 64, 130, 299, 300};
    const float scale = 0.3f;
    for (g_stride_mode = 0; g_stride_mode < 2; g_stride_mode++)
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = 8, npos = 300, ld = 300;
        struct kv k;
        kv_make(&k, kvt, hd, npos, 2.0f);
        float *q = rand_floats(ng * hd, 1.0f);
        float *s = nan_floats(ng * ld), *s1 = nan_floats(ng * ld);
        float *o = nan_floats(ng * hd), *o1 = nan_floats(ng * hd);
        sfn(kvt, hd, k.base, k.stride, npos, q, ng, scale, s, ld);
        for (int64_t g = 0; g < ng; g++) {
            for (int c = 0; c + 1 < N_OF(cuts); c++) {
                int64_t j0 = cuts[c], n = cuts[c + 1] - cuts[c];
                sfn(kvt, hd, k.base + (size_t)j0 * k.stride, k.stride, n, q + g * hd, 1, scale,
                    s1 + g * ld + j0, ld);
            }
        }
        /* values: whole call vs heads taken 3, 1, 4 at a time (p = the scores) */
        vfn(kvt, hd, k.base, k.stride, npos, s, ld, ng, o);
        vfn(kvt, hd, k.base, k.stride, npos, s, ld, 3, o1);
        vfn(kvt, hd, k.base, k.stride, npos, s + 3 * ld, ld, 1, o1 + 3 * hd);
        vfn(kvt, hd, k.base, k.stride, npos, s + 4 * ld, ld, 4, o1 + 4 * hd);
        int64_t diff = 0;
        for (int64_t x = 0; x < ng * ld; x++) diff += !same_bits(s[x], s1[x]);
        for (int64_t x = 0; x < ng * hd; x++) diff += !same_bits(o[x], o1[x]);
        free(q);
        free(s);
        free(s1);
        free(o);
        free(o1);
        kv_free(&k);
        if (diff) FAILF("%s: stride mode %d type %d hd %lld: %lld elements depend on the split",
                        what, g_stride_mode, (int)kvt, (long long)hd, (long long)diff);
    }
}

TEST(split_invariance_ref) { check_split(kern_ref_attn_scores, kern_ref_attn_values, "ref"); }

TEST(split_invariance_avx2) {
    if (!have_avx2()) return;
    check_split(kern_avx2_attn_scores, kern_avx2_attn_values, "avx2");
}

TEST(split_invariance_avx512) {
    if (!have_avx512()) return;
    check_split(kern_avx512_attn_scores, kern_avx2_attn_values, "avx512");
}

/* ---- edge cases --------------------------------------------------------------------------- */

/* npos = 0: values are all zero, scores untouched; ng = 0: nothing written. */
TEST(empty_inputs) {
    float q[8] = {1, 2, 3, 4, 5, 6, 7, 8}, s[4] = {NAN, NAN, NAN, NAN}, o[24];
    float kbuf[8] = {0};
    const struct kern_table *sets[] = {&kern_table_ref, &kern_table_avx2, NULL};
    for (int t = 0; sets[t]; t++) {
        if (t > 0 && !kern_cpu_supports(sets[t]->name)) continue;
        scores_fn sfn = t == 0 ? kern_ref_attn_scores : kern_avx2_attn_scores;
        values_fn vfn = t == 0 ? kern_ref_attn_values : kern_avx2_attn_values;
        sfn(NX_TYPE_F32, 8, kbuf, 32, 0, q, 1, 1.0f, s, 4);
        ASSERT_TRUE(isnan(s[0]));
        for (int i = 0; i < 24; i++) o[i] = NAN;
        vfn(NX_TYPE_F16, 8, kbuf, 16, 0, q, 4, 3, o);
        for (int i = 0; i < 24; i++) ASSERT_TRUE(same_bits(o[i], 0.0f));
        for (int i = 0; i < 24; i++) o[i] = NAN;
        vfn(NX_TYPE_F32, 8, kbuf, 32, 1, q, 4, 0, o);
        ASSERT_TRUE(isnan(o[0]));
    }
    kern_attn_scores(NX_TYPE_F32, 8, kbuf, 32, 1, q, 0, 1.0f, s, 4);
    ASSERT_TRUE(isnan(s[0]));
    kern_attn_scores(NX_TYPE_F32, 8, kbuf, 32, 1, q, 1, 1.0f, s, 4);
    ASSERT_TRUE(same_bits(s[0], 0.0f));
}

/* ---- fused attention (kern_attn_block + kern_attn_merge) ---------------------------------- */

typedef void (*block_fn)(enum nx_type, int64_t, const void *, size_t, const void *, size_t, int64_t,
                         const float *, int64_t, float, float *);
typedef void (*softmax_fn)(float *, int64_t);
typedef void (*merge_fn)(int64_t, int64_t, int64_t, const float *, float *);

/* Parts of blocks of bl positions (the last one shorter) over npos, each its own call, filled
 * in reverse block order (as threads finishing in any order would), then merged. */
static void fused_run(block_fn bfn, merge_fn mfn, const struct kv *k, const struct kv *v, int64_t npos, int64_t bl,
                      const float *q, int64_t ng, float scale, float *out) {
    int64_t nparts = (npos + bl - 1) / bl;
    if (nparts == 0) nparts = 1;
    int64_t rec = ng * (k->hd + 2);
    float *parts = nan_floats(nparts * rec);
    for (int64_t b = nparts - 1; b >= 0; b--) {
        int64_t j0 = b * bl, n = NX_MIN(bl, npos - j0);
        bfn(k->kvt, k->hd, k->base + (size_t)j0 * k->stride, k->stride, v->base + (size_t)j0 * v->stride,
            v->stride, n, q, ng, scale, parts + b * rec);
    }
    mfn(k->hd, ng, nparts, parts, out);
    free(parts);
}

/*
 * Fused vs the unfused path of the same set (scores, softmax, values) and vs a double oracle.
 * Tolerance per output element, with S = sum_j p_j |V_j[i]| (p from the double softmax):
 *   unfused: (3 npos + 2 parts + 32) * FLT_EPSILON * S  (float chains over npos positions in
 *            both, one rescale per 64-position chunk and per part, the l sum, exp8's ~2 ulp);
 *   double:  that plus 2 * dmax * S, dmax the largest score error bound of the scores test
 *            (1e-5 * scale * sum |q K|), which moves every p by a relative exp(dmax) - 1.
 */
static void check_fused(block_fn bfn, merge_fn mfn, scores_fn sfn, softmax_fn smx, values_fn vfn, const char *what) {
    static const int64_t ngs[] = {1, 4, 5, 9};
    static const int64_t nposs[] = {1, 7, 64, 65, 300};
    static const int64_t bls[] = {32, 7, 1000};
    const float scale = 0.3f;
    for (g_stride_mode = 0; g_stride_mode < 2; g_stride_mode++)
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++)
    for (int c = 0; c < N_OF(ngs); c++)
    for (int d = 0; d < N_OF(nposs); d++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = ngs[c], npos = nposs[d], bl = bls[(b + c + d) % 3];
        struct kv k, v;
        kv_make(&k, kvt, hd, npos, 2.0f);
        kv_make(&v, kvt, hd, npos, 1.0f);
        float *q = rand_floats(ng * hd, 1.0f);
        float *of = nan_floats(ng * hd), *ou = nan_floats(ng * hd), *s = nan_floats(ng * npos);
        fused_run(bfn, mfn, &k, &v, npos, bl, q, ng, scale, of);
        sfn(kvt, hd, k.base, k.stride, npos, q, ng, scale, s, npos);
        for (int64_t g = 0; g < ng; g++) smx(s + g * npos, npos);
        vfn(kvt, hd, v.base, v.stride, npos, s, npos, ng, ou);
        int64_t nparts = (npos + bl - 1) / bl, bad = 0;
        double *sd = malloc(sizeof(double) * (size_t)npos);
        for (int64_t g = 0; g < ng; g++) {
            double mx = -INFINITY, sum = 0, dmax = 0;
            for (int64_t j = 0; j < npos; j++) {
                double acc = 0, mag = 0;
                for (int64_t i = 0; i < hd; i++) {
                    acc += (double)q[g * hd + i] * k.vals[j * hd + i];
                    mag += fabs((double)q[g * hd + i] * k.vals[j * hd + i]);
                }
                sd[j] = acc * scale;
                dmax = fmax(dmax, 1e-5 * scale * mag);
                mx = fmax(mx, sd[j]);
            }
            for (int64_t j = 0; j < npos; j++) sum += exp(sd[j] - mx);
            for (int64_t i = 0; i < hd; i++) {
                double ref = 0, S = 0;
                for (int64_t j = 0; j < npos; j++) {
                    double p = exp(sd[j] - mx) / sum;
                    ref += p * v.vals[j * hd + i];
                    S += p * fabs(v.vals[j * hd + i]);
                }
                double tu = (3.0 * npos + 2.0 * nparts + 32) * FLT_EPSILON * S + 1e-30;
                double td = tu + 2 * dmax * S;
                float f = of[g * hd + i], u = ou[g * hd + i];
                if (!(fabs((double)f - u) <= tu) || !(fabs((double)f - ref) <= td)) {
                    if (bad++ < 3)
                        fprintf(stderr, "  %s: type %d hd %lld ng %lld npos %lld bl %lld: out[%lld][%lld] = %.9g, unfused %.9g, double %.9g (tol %.3g / %.3g)\n",
                                what, (int)kvt, (long long)hd, (long long)ng, (long long)npos, (long long)bl,
                                (long long)g, (long long)i, f, u, ref, tu, td);
                }
            }
        }
        free(sd), free(q), free(of), free(ou), free(s);
        kv_free(&k), kv_free(&v);
        if (bad) FAILF("%s: fused attention out of tolerance (%lld elements)", what, (long long)bad);
    }
}

TEST(fused_ref_vs_unfused_and_double) {
    check_fused(kern_ref_attn_block, kern_ref_attn_merge, kern_ref_attn_scores, kern_ref_softmax, kern_ref_attn_values, "ref");
}

TEST(fused_avx2_vs_unfused_and_double) {
    if (!have_avx2()) return;
    check_fused(kern_avx2_attn_block, kern_avx2_attn_merge, kern_avx2_attn_scores, kern_avx2_softmax, kern_avx2_attn_values, "avx2");
}

/* The AVX-512 set: its own scores, the shared AVX2 softmax, values and merge. */
TEST(fused_avx512_vs_unfused_and_double) {
    if (!have_avx512()) return;
    check_fused(kern_avx512_attn_block, kern_avx2_attn_merge, kern_avx512_attn_scores, kern_avx2_softmax,
                kern_avx2_attn_values, "avx512");
}

/*
 * Split invariance: with fixed part boundaries, the merged output is a pure function of the
 * inputs: parts computed for all heads at once or one head at a time (ng = 9 spans two head
 * groups), in any order, give bit-identical output; and every part of a head is identical in
 * both. Through the dispatcher (kern_attn_block), whatever set this CPU runs.
 */
TEST(fused_split_invariance) {
    const float scale = 0.25f;
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = 9, npos = 300, bl = 32, nparts = (npos + bl - 1) / bl;
        int64_t rec = ng * (hd + 2);
        struct kv k, v;
        g_stride_mode = b % 2;
        kv_make(&k, kvt, hd, npos, 2.0f);
        kv_make(&v, kvt, hd, npos, 1.0f);
        float *q = rand_floats(ng * hd, 1.0f);
        float *pa = nan_floats(nparts * rec), *pb = nan_floats(nparts * rec);
        float *oa = nan_floats(ng * hd), *ob = nan_floats(ng * hd);
        for (int64_t p = 0; p < nparts; p++) {
            int64_t j0 = p * bl, n = NX_MIN(bl, npos - j0);
            kern_attn_block(kvt, hd, k.base + (size_t)j0 * k.stride, k.stride, v.base + (size_t)j0 * v.stride,
                            v.stride, n, q, ng, scale, pa + p * rec);
        }
        for (int64_t p = nparts - 1; p >= 0; p--) {
            int64_t j0 = p * bl, n = NX_MIN(bl, npos - j0);
            for (int64_t g = ng - 1; g >= 0; g--)
                kern_attn_block(kvt, hd, k.base + (size_t)j0 * k.stride, k.stride, v.base + (size_t)j0 * v.stride,
                                v.stride, n, q + g * hd, 1, scale, pb + p * rec + g * (hd + 2));
        }
        kern_attn_merge(hd, ng, nparts, pa, oa);
        kern_attn_merge(hd, ng, nparts, pb, ob);
        int64_t diff = 0;
        for (int64_t x = 0; x < nparts * rec; x++) diff += !same_bits(pa[x], pb[x]);
        for (int64_t x = 0; x < ng * hd; x++) diff += !same_bits(oa[x], ob[x]);
        free(q), free(pa), free(pb), free(oa), free(ob);
        kv_free(&k), kv_free(&v);
        if (diff) FAILF("%s type %d hd %lld: %lld elements depend on the split", kern_name(), (int)kvt, (long long)hd,
                        (long long)diff);
    }
}

/* The KV prefetch level (kern_pf_level) the blocks call runs under: a speed choice that must
 * not change a bit, so every level must match the per-block calls under L1. */
static enum kern_pf g_kv_pf = KERN_PF_L1;

/*
 * kern_attn_blocks = one kern_attn_block per block, bit for bit: blocks taken from a buffer in
 * a scrambled order (as a paged cache's are), block sizes below, at and above
 * KERN_ATTN_CHUNK, a short last block, a trailing empty one, head counts across the fused
 * head groups; for the reference and AVX2 tables and through the dispatcher.
 */
typedef void (*blocks_fn)(enum nx_type, int64_t, const void *const *, const void *const *, size_t,
                          int64_t, int64_t, int64_t, const float *, int64_t, float, float *);
static void check_blocks(blocks_fn mfn, block_fn bfn, const char *what) {
    static const int64_t ngs[] = {1, 4, 9, 17};
    static const int64_t brs[] = {32, 7, 100};
    const float scale = 0.3f;
    for (g_stride_mode = 0; g_stride_mode < 2; g_stride_mode++)
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(g_hds); b++)
    for (int c = 0; c < N_OF(ngs); c++)
    for (int d = 0; d < N_OF(brs); d++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = g_hds[b], ng = ngs[c], br = brs[d], nblk = 5;
        int64_t npos = (c % 2 ? 3 : 4) * br + (d + 1) * br / 4; /* a short last block; c odd: one empty */
        int64_t rec = ng * (hd + 2);
        struct kv k, v;
        kv_make(&k, kvt, hd, nblk * br, 2.0f);
        kv_make(&v, kvt, hd, nblk * br, 1.0f);
        float *q = rand_floats(ng * hd, 1.0f);
        float *pa = nan_floats(nblk * rec), *pb = nan_floats(nblk * rec);
        const void *kp[5], *vp[5];
        for (int64_t i = 0; i < nblk; i++) {
            int64_t slot = (3 * i + 2) % nblk; /* 2 0 3 1 4 */
            kp[i] = k.base + (size_t)(slot * br) * k.stride, vp[i] = v.base + (size_t)(slot * br) * v.stride;
        }
        const enum kern_pf saved = kern_pf_level[KERN_PF_KV];
        kern_pf_level[KERN_PF_KV] = g_kv_pf; /* the blocks call under the level tested, */
        mfn(kvt, hd, kp, vp, k.stride, nblk, br, npos, q, ng, scale, pa);
        kern_pf_level[KERN_PF_KV] = KERN_PF_L1; /* the per-block calls under L1 */
        for (int64_t i = 0; i < nblk; i++)
            bfn(kvt, hd, kp[i], k.stride, vp[i], v.stride, NX_MIN(br, npos - i * br), q, ng, scale, pb + i * rec);
        int64_t diff = 0;
        for (int64_t x = 0; x < nblk * rec; x++) diff += !same_bits(pa[x], pb[x]);
        kern_pf_level[KERN_PF_KV] = saved;
        free(q), free(pa), free(pb);
        kv_free(&k), kv_free(&v);
        if (diff) FAILF("%s: type %d hd %lld ng %lld block %lld prefetch %d: %lld part elements differ from per-block calls",
                        what, (int)kvt, (long long)hd, (long long)ng, (long long)br, (int)g_kv_pf, (long long)diff);
    }
}

TEST(blocks_match_per_block_ref) { check_blocks(kern_ref_attn_blocks, kern_ref_attn_block, "ref"); }

TEST(blocks_match_per_block_avx2) {
    if (!have_avx2()) return;
    for (g_kv_pf = KERN_PF_L1; g_kv_pf <= KERN_PF_OFF; g_kv_pf++)
        check_blocks(kern_avx2_attn_blocks, kern_avx2_attn_block, "avx2");
    g_kv_pf = KERN_PF_L1;
}

TEST(blocks_match_per_block_avx512) {
    if (!have_avx512()) return;
    for (g_kv_pf = KERN_PF_L1; g_kv_pf <= KERN_PF_OFF; g_kv_pf++)
        check_blocks(kern_avx512_attn_blocks, kern_avx512_attn_block, "avx512");
    g_kv_pf = KERN_PF_L1;
}

TEST(blocks_match_per_block_dispatch) { check_blocks(kern_attn_blocks, kern_attn_block, kern_name()); }

/*
 * The AVX-512 entry points prepare the queries of at most SC_QZ_FLOATS floats at a time and so
 * run larger head counts in slices (hd 512: 16 heads a slice): with 37 heads (3 slices, the
 * last short and not a multiple of 4), every head's scores, block part and blocks part must have
 * the bits that head gets alone (heads are independent in every set).
 */
TEST(avx512_head_slices) {
    if (!have_avx512()) return;
    const int64_t hd = 512, ng = 37, br = 40, nblk = 3, npos = nblk * br - 7, rec = ng * (hd + 2);
    const float scale = 0.05f;
    g_stride_mode = 0;
    struct kv k, v;
    kv_make(&k, NX_TYPE_F16, hd, npos, 1.0f);
    kv_make(&v, NX_TYPE_F16, hd, npos, 1.0f);
    float *q = rand_floats(ng * hd, 1.0f);
    float *s = nan_floats(ng * npos), *s1 = nan_floats(npos);
    float *pb = nan_floats(nblk * rec), *p1 = nan_floats(hd + 2), *pa = nan_floats(rec);
    const void *kp[3], *vp[3];
    for (int64_t b = 0; b < nblk; b++)
        kp[b] = k.base + (size_t)(b * br) * k.stride, vp[b] = v.base + (size_t)(b * br) * v.stride;
    kern_avx512_attn_scores(NX_TYPE_F16, hd, k.base, k.stride, npos, q, ng, scale, s, npos);
    kern_avx512_attn_block(NX_TYPE_F16, hd, k.base, k.stride, v.base, v.stride, npos, q, ng, scale, pa);
    kern_avx512_attn_blocks(NX_TYPE_F16, hd, kp, vp, k.stride, nblk, br, npos, q, ng, scale, pb);
    int64_t diff = 0;
    for (int64_t g = 0; g < ng; g++) {
        kern_avx512_attn_scores(NX_TYPE_F16, hd, k.base, k.stride, npos, q + g * hd, 1, scale, s1, npos);
        for (int64_t j = 0; j < npos; j++) diff += !same_bits(s[g * npos + j], s1[j]);
        kern_avx512_attn_block(NX_TYPE_F16, hd, k.base, k.stride, v.base, v.stride, npos, q + g * hd, 1,
                               scale, p1);
        for (int64_t i = 0; i < hd + 2; i++) diff += !same_bits(pa[g * (hd + 2) + i], p1[i]);
        for (int64_t b = 0; b < nblk; b++) {
            kern_avx512_attn_block(NX_TYPE_F16, hd, kp[b], k.stride, vp[b], v.stride,
                                   NX_MIN(br, npos - b * br), q + g * hd, 1, scale, p1);
            for (int64_t i = 0; i < hd + 2; i++) diff += !same_bits(pb[b * rec + g * (hd + 2) + i], p1[i]);
        }
    }
    free(q), free(s), free(s1), free(pb), free(p1), free(pa);
    kv_free(&k), kv_free(&v);
    if (diff) FAILF("%lld elements differ from the head alone", (long long)diff);
}

/*
 * Wide calls (many query rows per KV head, as a prompt's attention tiles make: attn_avx512.c's
 * wide path) give every row the bits it gets alone, through kern_attn_block and
 * kern_attn_blocks: row counts around the wide threshold and the tiles' widths (6-row score
 * tiles, 5-row value tiles, 32-row passes), head dims with 1..4 value chunks per pass and two
 * passes (144 > the wide path's 128 stays on the per-group path), ranges below, across and
 * above a 16-position vector and a 64-position chunk, scrambled blocks with a short last one.
 */
TEST(avx512_wide_rows_match_row_alone) {
    if (!have_avx512()) return;
    static const int64_t ngs[] = {11, 12, 17, 32, 33, 70};
    static const int64_t hds[] = {16, 48, 64, 80, 128, 144};
    static const int64_t nposs[] = {1, 7, 16, 17, 64, 65, 150};
    const float scale = 0.2f;
    for (g_stride_mode = 0; g_stride_mode < 2; g_stride_mode++)
    for (int a = 0; a < N_OF(g_kvts); a++)
    for (int b = 0; b < N_OF(hds); b++)
    for (int c = 0; c < N_OF(ngs); c++) {
        enum nx_type kvt = g_kvts[a];
        int64_t hd = hds[b], ng = ngs[c], npos = nposs[(b + c + g_stride_mode) % N_OF(nposs)];
        int64_t rec = ng * (hd + 2), br = 32, nblk = (npos + br - 1) / br;
        struct kv k, v;
        kv_make(&k, kvt, hd, nblk * br, 2.0f);
        kv_make(&v, kvt, hd, nblk * br, 1.0f);
        float *q = rand_floats(ng * hd, 1.0f);
        float *pa = nan_floats(rec), *pb = nan_floats(nblk * rec), *p1 = nan_floats(hd + 2);
        const void *kp[8], *vp[8];
        for (int64_t i = 0; i < nblk; i++) {
            int64_t slot = nblk - 1 - i; /* reversed, as a paged cache may hand them */
            kp[i] = k.base + (size_t)(slot * br) * k.stride, vp[i] = v.base + (size_t)(slot * br) * v.stride;
        }
        kern_avx512_attn_block(kvt, hd, k.base, k.stride, v.base, v.stride, npos, q, ng, scale, pa);
        kern_avx512_attn_blocks(kvt, hd, kp, vp, k.stride, nblk, br, npos, q, ng, scale, pb);
        int64_t diff = 0;
        for (int64_t g = 0; g < ng; g++) {
            kern_avx512_attn_block(kvt, hd, k.base, k.stride, v.base, v.stride, npos, q + g * hd, 1, scale, p1);
            for (int64_t i = 0; i < hd + 2; i++) diff += !same_bits(pa[g * (hd + 2) + i], p1[i]);
            for (int64_t i = 0; i < nblk; i++) {
                kern_avx512_attn_block(kvt, hd, kp[i], k.stride, vp[i], v.stride, NX_MIN(br, npos - i * br),
                                       q + g * hd, 1, scale, p1);
                for (int64_t x = 0; x < hd + 2; x++) diff += !same_bits(pb[i * rec + g * (hd + 2) + x], p1[x]);
            }
        }
        free(q), free(pa), free(pb), free(p1);
        kv_free(&k), kv_free(&v);
        if (diff) FAILF("stride mode %d type %d hd %lld ng %lld npos %lld: %lld part elements differ from the row alone",
                        g_stride_mode, (int)kvt, (long long)hd, (long long)ng, (long long)npos, (long long)diff);
    }
}

/* Empty parts: m = -inf, l = 0, o = 0; the merge skips them; all empty gives zeros. */
TEST(fused_empty_parts) {
    float q[16], kbuf[64], part[3 * 10], out[16];
    for (int i = 0; i < 16; i++) q[i] = (float)i / 16.0f;
    for (int i = 0; i < 64; i++) kbuf[i] = (float)(i % 5) - 2.0f;
    block_fn fns[2] = {kern_ref_attn_block, kern_avx2_attn_block};
    merge_fn mfns[2] = {kern_ref_attn_merge, kern_avx2_attn_merge};
    for (int f = 0; f < 2; f++) {
        if (f == 1 && !kern_cpu_supports("avx2")) continue;
        for (int i = 0; i < 30; i++) part[i] = NAN;
        fns[f](NX_TYPE_F32, 8, kbuf, 32, kbuf, 32, 0, q, 1, 1.0f, part);
        ASSERT_TRUE(isinf(part[0]) && part[0] < 0);
        ASSERT_TRUE(same_bits(part[1], 0.0f));
        for (int i = 0; i < 8; i++) ASSERT_TRUE(same_bits(part[2 + i], 0.0f));
        mfns[f](8, 1, 1, part, out);
        for (int i = 0; i < 8; i++) ASSERT_TRUE(same_bits(out[i], 0.0f));
        /* one real part between two empty ones = that part alone */
        fns[f](NX_TYPE_F32, 8, kbuf, 32, kbuf, 32, 2, q, 1, 1.0f, part + 10);
        memcpy(part + 20, part, 10 * sizeof(float));
        float alone[8];
        mfns[f](8, 1, 1, part + 10, alone);
        mfns[f](8, 1, 3, part, out);
        for (int i = 0; i < 8; i++) ASSERT_TRUE(same_bits(out[i], alone[i]));
    }
}

TEST_MAIN
