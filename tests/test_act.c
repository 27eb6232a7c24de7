/* test_act.c - activation kernels (softmax, SwiGLU): every kernel set against the reference on
 * random and extreme inputs. */
#include <math.h>

#include "kern/kern_impl.h"
#include "test.h"

static uint64_t g_rng = 88172645463325252ull;
static float frand(float lo, float hi) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return lo + (hi - lo) * (float)((g_rng >> 11) * 0x1.0p-53);
}

static const char *const SETS[] = {"avx2", "avx512"};

TEST(softmax_matches_reference) {
    const int64_t ns[] = {1, 7, 8, 9, 64, 100, 1000, 4097};
    float a[4097], b[4097];
    for (size_t si = 0; si < 2; si++) {
        if (!kern_cpu_supports(SETS[si])) {
            printf("  skipped %s: not supported by this CPU\n", SETS[si]);
            continue;
        }
        const struct kern_table *t = kern_table_by_name(SETS[si]);
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int64_t n = ns[ni];
            for (int rep = 0; rep < 3; rep++) {
                float span = rep == 0 ? 1.0f : rep == 1 ? 30.0f : 200.0f; /* 200: underflow */
                for (int64_t i = 0; i < n; i++) a[i] = b[i] = frand(-span, span);
                kern_table_ref.softmax(a, n);
                t->softmax(b, n);
                double sum = 0;
                for (int64_t i = 0; i < n; i++) {
                    ASSERT_NEAR(b[i], a[i], 1e-6 * (a[i] > 1e-3f ? a[i] * 1e3 : 1.0));
                    sum += b[i];
                }
                ASSERT_NEAR(sum, 1.0, 1e-5);
            }
        }
    }
}

TEST(swiglu_matches_reference) {
    float g0[1000], g1[1000], u[1000];
    for (size_t si = 0; si < 2; si++) {
        if (!kern_cpu_supports(SETS[si])) continue;
        const struct kern_table *t = kern_table_by_name(SETS[si]);
        for (int64_t n = 1; n <= 1000; n = n * 3 + 1) {
            for (int64_t i = 0; i < n; i++) {
                g0[i] = g1[i] = frand(-20.0f, 20.0f);
                u[i] = frand(-3.0f, 3.0f);
            }
            g0[0] = g1[0] = -100.0f; /* exp overflow side */
            kern_table_ref.swiglu(g0, u, n);
            t->swiglu(g1, u, n);
            for (int64_t i = 0; i < n; i++) ASSERT_NEAR(g1[i], g0[i], 2e-6 * (fabsf(g0[i]) + 1e-3f));
        }
    }
}

TEST(load_kv_exact) {
    uint16_t h[77];
    float a[77], b[77], x[77];
    for (int i = 0; i < 77; i++) x[i] = frand(-100.0f, 100.0f);
    x[3] = 65504.0f;
    x[4] = 1e-7f; /* subnormal in half */
    for (size_t si = 0; si < 2; si++) {
        if (!kern_cpu_supports(SETS[si])) continue;
        const struct kern_table *t = kern_table_by_name(SETS[si]);
        kern_table_ref.store_kv(NX_TYPE_F16, 77, x, h);
        kern_table_ref.load_kv(NX_TYPE_F16, 77, h, a);
        t->load_kv(NX_TYPE_F16, 77, h, b);
        ASSERT_EQ(memcmp(a, b, sizeof a), 0);
        for (int i = 0; i < 77; i++) ASSERT_NEAR(a[i], x[i], fabsf(x[i]) * 1e-3f + 1e-7f);
        t->load_kv(NX_TYPE_F32, 77, x, b);
        ASSERT_EQ(memcmp(x, b, sizeof x), 0);
    }
}

TEST_MAIN
