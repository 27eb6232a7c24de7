/*
 * test_policy_bounds.c - the bound policies (random, bottomk, oracle: src/kv/policy_bounds.c)
 * and the Nexus options of issue 15 (select_topk, per_head, match_kv: src/kv/policy_nexus.c).
 *
 * DESIGN
 * - Synthetic layers as in test_policy.c (own RNG, keys N(0,1)-ish, peaky queries, positions
 *   with gaps), n_head 4, n_head_kv 2, head_dim 8, block 8, sink 4, recent 6.
 * - Oracles written here: attention probabilities in double (own dot product and softmax);
 *   bottomk's kept middle tokens must score no higher than any evicted one under the SnapKV
 *   score (kvp_snap_scores, tested against its own oracle in test_policy.c); the oracle
 *   policy's kept past tokens must hold more future attention than any evicted one; topk keeps
 *   the K largest weights of kvp_nexus_weights; per-head equals the shared selection run on
 *   each KV head alone; match_kv holds keep tokens to within block / 2; the value-aware
 *   oracle equals a from-scratch greedy over the output error computed here.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_policy_impl.h"
#include "test.h"

static uint64_t t_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s * 0x2545f4914f6cdd1dull;
}
static float t_gauss(uint64_t *s) {
    double x = 0;
    for (int i = 0; i < 4; i++) x += (double)(t_next(s) >> 11) * 0x1p-53;
    return (float)((x - 2.0) * sqrt(3.0));
}

enum { NH = 4, NKV = 2, HD = 8 };

struct layer {
    struct kv_layer_view v;
    int32_t pos[400], win_pos[64];
    float k[NKV * 400 * HD], q[64 * NH * HD];
};

/* n tokens; n_win window rows at the positions of tokens [n - n_win - future_gap, ...): with
   future_gap = 0 the rows are the last tokens' (as the engine gives them). */
static void make_layer(struct layer *L, uint64_t seed, int64_t n, int32_t n_win) {
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 99;
    int32_t p = (int32_t)(t_next(&r) % 5);
    for (int64_t i = 0; i < n; i++) {
        L->pos[i] = p;
        p += 1 + (int32_t)(t_next(&r) % 3);
    }
    for (int64_t i = 0; i < NKV * n * HD; i++) L->k[i] = t_gauss(&r);
    for (int64_t i = 0; i < n_win * NH * HD; i++) L->q[i] = 2.0f * t_gauss(&r);
    for (int32_t j = 0; j < n_win; j++) L->win_pos[j] = L->pos[n - n_win + j];
    L->v = (struct kv_layer_view){.layer = 1, .n_layer = 2, .n_head = NH, .n_head_kv = NKV,
                                  .head_dim = HD, .n_tokens = n, .pos = L->pos, .k = L->k,
                                  .n_win = n_win, .win_q = L->q, .win_pos = L->win_pos};
}

static struct kv_policy_params params(void) {
    struct kv_policy_params p = kv_policy_default_params();
    p.block = 8;
    p.sink = 4;
    p.recent = 6;
    p.pool_kernel = 5;
    return p;
}

static nx_status sel(const char *name, const struct kv_layer_view *v, int64_t keep,
                     const struct kv_policy_params *pp, uint8_t *mask) {
    size_t sb = kv_policy_scratch_bytes(v);
    void *scratch = malloc(sb);
    memset(scratch, 0xA5, sb);
    struct kv_selection s = {mask};
    nx_status st = kv_policy_find(name)->select(v, keep, pp, scratch, &s);
    free(scratch);
    return st;
}

static int64_t count(const uint8_t *row, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; i++) c += row[i] != 0;
    return c;
}

/* Window row w of query head h: causal attention probabilities over the n keys (double). */
static void row_probs(const struct kv_layer_view *v, int32_t g, int32_t h, int32_t w, double *z) {
    const int64_t n = v->n_tokens;
    const float *q = v->win_q + ((size_t)w * NH + (size_t)h) * HD;
    double mx = -1e300, tot = 0;
    for (int64_t i = 0; i < n; i++) {
        z[i] = -INFINITY;
        if (v->pos[i] > v->win_pos[w]) continue;
        double d = 0;
        for (int e = 0; e < HD; e++) d += (double)q[e] * v->k[((size_t)g * n + i) * HD + e];
        z[i] = d / sqrt((double)HD);
        mx = fmax(mx, z[i]);
    }
    for (int64_t i = 0; i < n; i++) tot += isinf(z[i]) ? 0 : exp(z[i] - mx);
    for (int64_t i = 0; i < n; i++) z[i] = isinf(z[i]) ? 0 : exp(z[i] - mx) / tot;
}

/* Summed causal attention of KV head g's query heads over the window rows onto key i. */
static void future_mass(const struct kv_layer_view *v, int32_t g, double *out) {
    const int64_t n = v->n_tokens;
    for (int64_t i = 0; i < n; i++) out[i] = 0;
    for (int32_t h = g * (NH / NKV); h < (g + 1) * (NH / NKV); h++)
        for (int32_t w = 0; w < v->n_win; w++) {
            double z[400];
            row_probs(v, g, h, w, z);
            for (int64_t i = 0; i < n; i++) out[i] += z[i];
        }
}

TEST(bounds_registered) {
    const char *names[] = {"random", "bottomk", "oracle"};
    struct kv_policy_params pp = params();
    for (int i = 0; i < 3; i++) {
        ASSERT_TRUE(kv_policy_find(names[i]) != NULL);
        ASSERT_EQ(kv_policy_min_keep(kv_policy_find(names[i]), &pp), 10);
    }
}

TEST(random_keeps_budget_and_follows_its_seed) {
    struct layer *L = malloc(sizeof *L);
    make_layer(L, 3, 150, 8);
    struct kv_policy_params pp = params();
    uint8_t a[NKV * 150], b[NKV * 150], c[NKV * 150];
    ASSERT_OK(sel("random", &L->v, 50, &pp, a));
    ASSERT_OK(sel("random", &L->v, 50, &pp, b));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0); /* same seed and event: same draw */
    pp.eviction_index = 1;
    ASSERT_OK(sel("random", &L->v, 50, &pp, c));
    ASSERT_TRUE(memcmp(a, c, 150) != 0); /* a fresh draw at the next event */
    for (int h = 0; h < NKV; h++) {
        ASSERT_EQ(count(a + h * 150, 150), 50);
        for (int i = 0; i < 4; i++) ASSERT_TRUE(a[h * 150 + i]);
        for (int i = 144; i < 150; i++) ASSERT_TRUE(a[h * 150 + i]);
    }
    ASSERT_TRUE(memcmp(a, a + 150, 150) == 0); /* shared by the heads */
    free(L);
}

TEST(bottomk_keeps_the_least_attended) {
    for (uint64_t seed = 1; seed <= 10; seed++) {
        struct layer *L = malloc(sizeof *L);
        make_layer(L, seed, 120, 6);
        struct kv_policy_params pp = params();
        uint8_t m[NKV * 120];
        ASSERT_OK(sel("bottomk", &L->v, 40, &pp, m));
        size_t sb = kv_policy_scratch_bytes(&L->v);
        void *scr = malloc(sb);
        struct kvp_arena ar;
        kvp_arena_init(&ar, scr, sb);
        double score[NKV * 120];
        ASSERT_OK(kvp_snap_scores(&L->v, &pp, 6, score, &ar));
        for (int h = 0; h < NKV; h++) {
            ASSERT_EQ(count(m + h * 120, 120), 40);
            double kept_max = -1, ev_min = 1e300;
            for (int i = 4; i < 114; i++) {
                double s = score[h * 120 + i];
                if (m[h * 120 + i]) kept_max = fmax(kept_max, s);
                else ev_min = fmin(ev_min, s);
            }
            ASSERT_TRUE(kept_max <= ev_min);
        }
        free(scr);
        free(L);
    }
}

TEST(oracle_keeps_future_attention) {
    for (uint64_t seed = 1; seed <= 10; seed++) {
        struct layer *L = malloc(sizeof *L);
        const int64_t n = 160;
        const int32_t fut = 12; /* the window rows are the last 12 tokens: the "future" */
        make_layer(L, seed, n, fut);
        struct kv_policy_params pp = params();
        uint8_t m[NKV * 160];
        ASSERT_OK(sel("oracle", &L->v, 40 + fut, &pp, m));
        for (int32_t g = 0; g < NKV; g++) {
            const uint8_t *row = m + g * n;
            double mass[160];
            future_mass(&L->v, g, mass);
            ASSERT_EQ(count(row, n), 40 + fut);
            for (int64_t i = n - fut; i < n; i++) ASSERT_TRUE(row[i]);
            for (int i = 0; i < 4; i++) ASSERT_TRUE(row[i]);
            for (int64_t i = n - fut - 6; i < n - fut; i++) ASSERT_TRUE(row[i]);
            double kept_min = 1e300, ev_max = -1;
            for (int64_t i = 4; i < n - fut - 6; i++) {
                if (row[i]) kept_min = fmin(kept_min, mass[i]);
                else ev_max = fmax(ev_max, mass[i]);
            }
            ASSERT_TRUE(kept_min >= ev_max * (1 - 1e-6));
        }
        free(L);
    }
}

/* Summed squared error of KV head g's window outputs when only `kept` keys remain. */
static double output_error(const struct kv_layer_view *v, const float *vals, int32_t g,
                           const uint8_t *kept) {
    const int64_t n = v->n_tokens;
    double err = 0;
    for (int32_t h = g * (NH / NKV); h < (g + 1) * (NH / NKV); h++)
        for (int32_t w = 0; w < v->n_win; w++) {
            double z[400], o[HD] = {0}, ok[HD] = {0}, mass = 0, e2 = 0;
            row_probs(v, g, h, w, z);
            for (int64_t i = 0; i < n; i++)
                for (int e = 0; e < HD; e++) {
                    double t = z[i] * vals[((size_t)g * n + i) * HD + e];
                    o[e] += t;
                    if (kept[i]) ok[e] += t;
                }
            for (int64_t i = 0; i < n; i++) mass += kept[i] ? z[i] : 0;
            for (int e = 0; e < HD; e++) e2 += (ok[e] / mass - o[e]) * (ok[e] / mass - o[e]);
            err += e2;
        }
    return err;
}

/* oracle/values against a from-scratch greedy: start from the always-kept tokens (sink, the
   recent past, the future region), add the middle token whose addition gives the smallest
   output_error (ties: the lower index) until the budget is met; the policy's incremental
   updates must pick exactly the same tokens. Without values it refuses. */
TEST(oracle_values_is_the_greedy_output_error_selection) {
    double err_greedy = 0, err_mass = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        struct layer *L = malloc(sizeof *L);
        const int64_t n = 70;
        const int32_t fut = 8;
        make_layer(L, seed, n, fut);
        static float vals[NKV * 70 * HD];
        uint64_t r = seed + 1234;
        for (int64_t i = 0; i < NKV * n * HD; i++) vals[i] = t_gauss(&r);
        struct kv_policy_params pp = params();
        pp.oracle_values = true;
        uint8_t m[NKV * 70];
        ASSERT_EQ(sel("oracle", &L->v, 24 + fut, &pp, m), NX_STATUS_INVALID_ARG); /* no v */
        L->v.v = vals;
        ASSERT_TRUE(kv_policy_needs_values(kv_policy_find("oracle"), &pp));
        ASSERT_TRUE(!kv_policy_needs_values(kv_policy_find("snapkv"), &pp));
        ASSERT_OK(sel("oracle", &L->v, 24 + fut, &pp, m));
        for (int32_t g = 0; g < NKV; g++) {
            uint8_t ref[70];
            const int64_t past = n - fut, lo = 4, hi = past - 6;
            for (int64_t i = 0; i < n; i++) ref[i] = i < lo || i >= hi;
            for (int64_t k = count(ref, n); k < 24 + fut; k++) {
                int64_t best = -1;
                double be = INFINITY;
                for (int64_t i = lo; i < hi; i++) {
                    if (ref[i]) continue;
                    ref[i] = 1;
                    double e = output_error(&L->v, vals, g, ref);
                    ref[i] = 0;
                    if (e < be) be = e, best = i;
                }
                ref[best] = 1;
            }
            ASSERT_TRUE(memcmp(ref, m + g * n, (size_t)n) == 0);
            /* the mass-ranked oracle's set on the same view (values present, option off) */
            uint8_t mm[NKV * 70];
            pp.oracle_values = false;
            ASSERT_OK(sel("oracle", &L->v, 24 + fut, &pp, mm));
            pp.oracle_values = true;
            ASSERT_TRUE(memcmp(mm + g * n, m + g * n, (size_t)n) != 0);
            err_greedy += output_error(&L->v, vals, g, ref);
            err_mass += output_error(&L->v, vals, g, mm + g * n);
        }
        free(L);
    }
    /* greedy is a heuristic: it moves the outputs less than the mass oracle on 7 of these 12
       heads, not on every one, and less in total (49.5 against 58.6) */
    ASSERT_TRUE(err_greedy < err_mass);
}

TEST(nexus_topk_keeps_the_largest_weights) {
    for (uint64_t seed = 1; seed <= 10; seed++) {
        struct layer *L = malloc(sizeof *L);
        const int64_t n = 200;
        make_layer(L, seed, n, 10);
        struct kv_policy_params pp = params();
        pp.nexus_select_topk = true;
        uint8_t m[NKV * 200];
        ASSERT_OK(sel("nexus", &L->v, 80, &pp, m));
        struct kvp_nexus_blocks bl;
        kvp_nexus_layout(n, 80, &pp, &bl);
        size_t sb = kv_policy_scratch_bytes(&L->v);
        void *scr = malloc(sb);
        struct kvp_arena ar;
        kvp_arena_init(&ar, scr, sb);
        double a[64], ct[64], w[64];
        ASSERT_OK(kvp_nexus_weights(&L->v, &pp, &bl, a, ct, w, &ar));
        double kept_min = 1e300, ev_max = -1;
        int kept = 0;
        for (int64_t j = 0; j < bl.m; j++) {
            bool k = m[(bl.n_sink + j) * 8];
            kept += k;
            if (k) kept_min = fmin(kept_min, w[j]);
            else ev_max = fmax(ev_max, w[j]);
        }
        ASSERT_EQ(kept, bl.k);
        ASSERT_TRUE(kept_min >= ev_max);
        free(scr);
        free(L);
    }
}

TEST(nexus_per_head_is_each_head_alone) {
    for (uint64_t seed = 1; seed <= 8; seed++) {
        struct layer *L = malloc(sizeof *L), *one = malloc(sizeof *one);
        const int64_t n = 180;
        const int32_t nw = 9, G = NH / NKV;
        make_layer(L, seed, n, nw);
        struct kv_policy_params pp = params();
        pp.nexus_per_head = true;
        uint8_t m[NKV * 180], m1[180];
        ASSERT_OK(sel("nexus", &L->v, 72, &pp, m));
        pp.nexus_per_head = false;
        for (int32_t g = 0; g < NKV; g++) {
            *one = *L;
            memcpy(one->k, L->k + (size_t)g * n * HD, sizeof(float) * n * HD);
            for (int32_t w = 0; w < nw; w++)
                memcpy(one->q + (size_t)w * G * HD, L->q + ((size_t)w * NH + g * G) * HD,
                       sizeof(float) * G * HD);
            one->v.pos = one->pos, one->v.k = one->k, one->v.win_q = one->q;
            one->v.win_pos = one->win_pos;
            one->v.n_head = G, one->v.n_head_kv = 1;
            ASSERT_OK(sel("nexus", &one->v, 72, &pp, m1));
            ASSERT_TRUE(memcmp(m + g * n, m1, (size_t)n) == 0);
        }
        free(L);
        free(one);
    }
}

TEST(nexus_match_kv_holds_the_budget) {
    struct kv_policy_params pp = kv_policy_default_params(); /* b = sink = recent = 32 */
    struct kvp_nexus_blocks bl;
    kvp_nexus_layout(1000, 200, &pp, &bl); /* forced: block 0 + [960, 1000) = 72 tokens */
    ASSERT_EQ(bl.k, 3);                     /* default: floor(200 / 32) - 3 blocks: holds 168 */
    pp.nexus_match_kv = true;
    for (int64_t keep = 100; keep <= 600; keep++) {
        kvp_nexus_layout(1000, keep, &pp, &bl);
        int64_t held = 72 + 32 * bl.k;
        ASSERT_TRUE(llabs(held - keep) <= 16);
    }
    kvp_nexus_layout(1000, 200, &pp, &bl);
    ASSERT_EQ(bl.k, 4); /* (200 - 72 + 16) / 32: holds 200 */
}

TEST_MAIN
