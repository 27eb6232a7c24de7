/*
 * test_policy.c - tests of the KV eviction policies (src/kv/policy_*.c, src/kv/kv_policy.c).
 *
 * DESIGN
 * - Oracles: for the baselines, the explicit attention matrix P[h][row][i] of every query head
 *   and window row is computed here in double (own dot product, own softmax, own pooling, own
 *   sort), nothing shared with the implementation; the selection is made by sorting. Masks are
 *   compared exactly; a mismatch is accepted only on a near-tie (the two tokens' oracle scores
 *   within 1e-6 relative of the cut), counted and reported (the implementation uses float dot
 *   products, ~1e-7 relative).
 * - Synthetic layers: keys N(0,1)-ish, queries scaled by 2 (peaky rows), positions with random
 *   gaps (earlier evictions), window rows at the positions of the last n_win cached tokens (so
 *   the causal mask matters), n_tokens 40-200, head_dim 8, n_head 4, n_head_kv 2.
 * - Streams: every policy over long random token streams (random chunk sizes), evicting
 *   whenever the layer exceeds its budget, compacting the kept tokens. Per-head policies'
 *   selections are ragged; the simulated cache keeps the union over heads (the view has one
 *   position list), each head's own selection is checked against the budget.
 * - Nexus reservoir: Monte Carlo over seeds, tolerances 4 sigma of the binomial estimate.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_policy_impl.h"
#include "test.h"

/* ---- test RNG (independent of the library's) ---------------------------------------------- */

static uint64_t t_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s * 0x2545f4914f6cdd1dull;
}
static double t_unif(uint64_t *s) { return (double)(t_next(s) >> 11) * 0x1p-53; }
static float t_gauss(uint64_t *s) {
    double x = 0;
    for (int i = 0; i < 4; i++) x += t_unif(s);
    return (float)((x - 2.0) * sqrt(3.0));
}

/* ---- synthetic layers --------------------------------------------------------------------- */

struct synth {
    struct kv_layer_view v;
    int32_t *pos, *win_pos;
    float *k, *q, *acc;
};

static void synth_free(struct synth *s) {
    free(s->pos);
    free(s->win_pos);
    free(s->k);
    free(s->q);
    free(s->acc);
    memset(s, 0, sizeof(*s));
}

static void synth_make(struct synth *s, uint64_t seed, int32_t n_head, int32_t n_head_kv,
                       int32_t hd, int64_t n, int32_t n_win, int32_t layer, int32_t n_layer) {
    uint64_t r = seed * 0x9e3779b97f4a7c15ull + 12345;
    memset(s, 0, sizeof(*s));
    s->pos = malloc(sizeof(int32_t) * (size_t)(n + 1));
    s->win_pos = malloc(sizeof(int32_t) * (size_t)(n_win + 1));
    s->k = malloc(sizeof(float) * (size_t)(n_head_kv * n * hd + 1));
    s->q = malloc(sizeof(float) * (size_t)(n_win * n_head * hd + 1));
    s->acc = malloc(sizeof(float) * (size_t)(n_head_kv * n + 1));
    int32_t p = (int32_t)(t_next(&r) % 5);
    for (int64_t i = 0; i < n; i++) {
        s->pos[i] = p;
        p += 1 + (int32_t)(t_next(&r) % 3);
    }
    for (int64_t i = 0; i < n_head_kv * n * hd; i++) s->k[i] = t_gauss(&r);
    for (int64_t i = 0; i < n_win * n_head * hd; i++) s->q[i] = 2.0f * t_gauss(&r);
    for (int64_t i = 0; i < n_head_kv * n; i++) s->acc[i] = (float)(t_unif(&r) * 10.0);
    for (int32_t j = 0; j < n_win; j++) s->win_pos[j] = s->pos[n - n_win + j];
    s->v = (struct kv_layer_view){
        .layer = layer, .n_layer = n_layer, .n_head = n_head, .n_head_kv = n_head_kv,
        .head_dim = hd, .n_tokens = n, .pos = s->pos, .k = s->k, .n_win = n_win,
        .win_q = s->q, .win_pos = s->win_pos, .acc_attn = s->acc,
    };
}

static nx_status run_select(const struct kv_policy *pol, const struct kv_layer_view *v,
                            int64_t keep, const struct kv_policy_params *pp, uint8_t *keepmask) {
    size_t sb = kv_policy_scratch_bytes(v);
    void *scratch = malloc(sb ? sb : 1);
    memset(scratch, 0xA5, sb);
    struct kv_selection sel = {keepmask};
    nx_status st = pol->select(v, keep, pp, scratch, &sel);
    free(scratch);
    return st;
}

/* ---- oracle ------------------------------------------------------------------------------- */

/* P[(h * n_win + row) * n + i], explicit causal softmax in double. */
static double *oracle_probs(const struct kv_layer_view *v) {
    const int64_t n = v->n_tokens;
    double *P = calloc((size_t)(v->n_head * v->n_win * n) + 1, sizeof(double));
    const int32_t grp = v->n_head / v->n_head_kv, d = v->head_dim;
    for (int32_t h = 0; h < v->n_head; h++) {
        for (int32_t w = 0; w < v->n_win; w++) {
            double *row = P + ((size_t)h * v->n_win + w) * n;
            const float *q = v->win_q + ((size_t)w * v->n_head + h) * d;
            double best = -1e300;
            for (int64_t i = 0; i < n; i++) {
                if (v->pos[i] > v->win_pos[w]) continue;
                const float *k = v->k + (((size_t)(h / grp)) * n + i) * d;
                double dot = 0;
                for (int32_t e = 0; e < d; e++) dot += (double)q[e] * (double)k[e];
                row[i] = dot / sqrt((double)d);
                if (row[i] > best) best = row[i];
            }
            double z = 0;
            for (int64_t i = 0; i < n; i++) {
                if (v->pos[i] > v->win_pos[w]) {
                    row[i] = 0;
                    continue;
                }
                row[i] = exp(row[i] - best);
                z += row[i];
            }
            for (int64_t i = 0; i < n; i++) row[i] /= z;
        }
    }
    return P;
}

/* Indices [lo, hi) sorted by score descending, ties lower index first (insertion sort). */
static void oracle_sort(const double *score, int64_t lo, int64_t hi, int64_t *out) {
    int64_t cnt = 0;
    for (int64_t i = lo; i < hi; i++) {
        int64_t j = cnt++;
        while (j > 0 && (score[out[j - 1]] < score[i] ||
                         (score[out[j - 1]] == score[i] && out[j - 1] > i))) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = i;
    }
}

/* Mask of one head: [0,s) + [n-r,n) + top quota of the middle by score. */
static void oracle_row(const double *score, int64_t n, int64_t s, int64_t r, int64_t quota,
                       uint8_t *row) {
    int64_t *ord = malloc(sizeof(int64_t) * (size_t)(n + 1));
    memset(row, 0, (size_t)n);
    for (int64_t i = 0; i < n; i++) row[i] = i < s || i >= n - r;
    oracle_sort(score, s, n - r, ord);
    for (int64_t j = 0; j < quota && j < n - s - r; j++) row[ord[j]] = 1;
    free(ord);
}

/*
 * Compares an implementation row with the oracle's: exact, or differing only on tokens whose
 * oracle score is within 1e-6 relative of the oracle's cut score. Returns 0 exact, 1 near-tie,
 * -1 real mismatch.
 */
static int compare_row(const double *score, int64_t n, int64_t s, int64_t r, int64_t quota,
                       const uint8_t *impl) {
    uint8_t *o = malloc((size_t)n + 1);
    oracle_row(score, n, s, r, quota, o);
    int res = 0;
    int64_t ki = 0, ko = 0;
    for (int64_t i = 0; i < n; i++) {
        ki += impl[i] != 0;
        ko += o[i];
    }
    if (ki != ko) res = -1;
    double cut = 1e300;
    for (int64_t i = s; i < n - r; i++)
        if (o[i] && score[i] < cut) cut = score[i];
    for (int64_t i = 0; i < n && res >= 0; i++) {
        if ((impl[i] != 0) == (o[i] != 0)) continue;
        if (i < s || i >= n - r) res = -1;
        else if (fabs(score[i] - cut) <= 1e-6 * fabs(cut) + 1e-15) res = 1;
        else res = -1;
    }
    free(o);
    return res;
}

static void oracle_pool(const double *in, double *out, int64_t n, int k, bool mx) {
    for (int64_t i = 0; i < n; i++) {
        double acc = mx ? -1e300 : 0;
        for (int o = 0; o < k; o++) {
            int64_t j = i + o - k / 2;
            if (j < 0 || j >= n) continue;
            if (mx) acc = fmax(acc, in[j]);
            else acc += in[j];
        }
        out[i] = mx ? acc : acc / k;
    }
}

/* SnapKV oracle scores (n_head_kv, n), zero on the recent tokens. */
static double *oracle_snap(const struct kv_layer_view *v, const double *P, int64_t r, int k,
                           bool mx) {
    const int64_t n = v->n_tokens, np = n - r;
    const int32_t grp = v->n_head / v->n_head_kv;
    double *sc = calloc((size_t)(v->n_head_kv * n) + 1, sizeof(double));
    double *m = calloc((size_t)n + 1, sizeof(double)), *pl = calloc((size_t)n + 1, sizeof(double));
    for (int32_t g = 0; g < v->n_head_kv; g++) {
        for (int32_t j = 0; j < grp; j++) {
            int32_t h = g * grp + j;
            for (int64_t i = 0; i < np; i++) {
                double t = 0;
                for (int32_t w = 0; w < v->n_win; w++) t += P[((size_t)h * v->n_win + w) * n + i];
                m[i] = t / v->n_win;
            }
            oracle_pool(m, pl, np, k, mx);
            for (int64_t i = 0; i < np; i++) sc[g * n + i] += pl[i] / grp;
        }
    }
    free(m);
    free(pl);
    return sc;
}

/* MorphKV oracle: group-summed logits, softmax over the older keys, sum/max over rows. */
static double *oracle_morph(const struct kv_layer_view *v, int64_t r, bool mx) {
    const int64_t n = v->n_tokens, old = n - r;
    const int32_t grp = v->n_head / v->n_head_kv, d = v->head_dim;
    double *sc = calloc((size_t)(v->n_head_kv * n) + 1, sizeof(double));
    double *z = calloc((size_t)n + 1, sizeof(double));
    for (int32_t g = 0; g < v->n_head_kv; g++) {
        for (int64_t i = 0; i < old; i++) sc[g * n + i] = mx ? -1.0 : 0.0;
        for (int32_t w = 0; w < v->n_win; w++) {
            double best = -1e300, tot = 0;
            for (int64_t i = 0; i < old; i++) {
                z[i] = 0;
                for (int32_t j = 0; j < grp; j++) {
                    const float *q = v->win_q + ((size_t)w * v->n_head + g * grp + j) * d;
                    const float *k = v->k + ((size_t)g * n + i) * d;
                    for (int32_t e = 0; e < d; e++) z[i] += (double)q[e] * k[e] / sqrt((double)d);
                }
                if (v->pos[i] <= v->win_pos[w] && z[i] > best) best = z[i];
            }
            for (int64_t i = 0; i < old; i++) {
                z[i] = v->pos[i] <= v->win_pos[w] ? exp(z[i] - best) : 0.0;
                tot += z[i];
            }
            for (int64_t i = 0; i < old; i++) {
                double p = tot > 0 ? z[i] / tot : 0;
                sc[g * n + i] = mx ? fmax(sc[g * n + i], p) : sc[g * n + i] + p;
            }
        }
    }
    free(z);
    return sc;
}

/* ---- basic registry / defaults ------------------------------------------------------------ */

static const char *const k_names[] = {"full", "streaming", "h2o", "snapkv", "pyramidkv",
                                      "adakv", "morphkv", "tova", "nexus"};

TEST(policy_registry) {
    for (size_t i = 0; i < NX_ARRAY_LEN(k_names); i++) {
        const struct kv_policy *p = kv_policy_find(k_names[i]);
        ASSERT_TRUE(p != NULL);
        ASSERT_STR_EQ(p->name, k_names[i]);
        ASSERT_TRUE(p->select != NULL);
    }
    ASSERT_TRUE(kv_policy_find("nope") == NULL);
    ASSERT_TRUE(kv_policy_find(NULL) == NULL);
    ASSERT_TRUE(kv_policy_find("h2o")->needs_acc_attn);
    ASSERT_TRUE(kv_policy_find("nexus")->block_granular);
    ASSERT_TRUE(kv_policy_find("adakv")->per_head);
    ASSERT_TRUE(!kv_policy_find("tova")->per_head);
    struct kv_policy_params p = kv_policy_default_params();
    ASSERT_EQ(p.block, 32);
    ASSERT_EQ(p.nexus_walk, 3);
    ASSERT_EQ(p.nexus_n, 5);
    ASSERT_NEAR(p.nexus_lambda, 0.5, 0);
    ASSERT_NEAR(p.nexus_eps, 1e-6, 1e-12);
    ASSERT_EQ(kv_policy_min_keep(kv_policy_find("snapkv"), &p), 64);
    ASSERT_EQ(kv_policy_min_keep(kv_policy_find("nexus"), &p), 96);
    ASSERT_EQ(kv_policy_min_keep(kv_policy_find("streaming"), &p), 95);
}

/* ---- oracle comparisons ------------------------------------------------------------------- */

struct cmp_stats {
    int exact, near, bad;
};

static void tally(struct cmp_stats *st, int res) {
    if (res == 0) st->exact++;
    else if (res == 1) st->near++;
    else st->bad++;
}

static struct kv_policy_params small_params(void) {
    struct kv_policy_params p = kv_policy_default_params();
    p.block = 8;
    p.sink = 4;
    p.recent = 6;
    p.pool_kernel = 5;
    return p;
}

/* Runs `cases` random layers through the policy and the oracle; token-granular policies. */
static void oracle_cases(const char *name, bool pool_max, bool morph_max, struct cmp_stats *st) {
    const struct kv_policy *pol = kv_policy_find(name);
    for (int c = 0; c < 40; c++) {
        uint64_t r = 1000 + (uint64_t)c;
        int64_t n = 40 + (int64_t)(t_next(&r) % 161);
        int32_t n_win = 4 + (int32_t)(t_next(&r) % 13);
        struct synth s;
        synth_make(&s, r, 4, 2, 8, n, n_win, c % 4, 4);
        struct kv_policy_params pp = small_params();
        pp.pool_max = pool_max;
        pp.morph_max = morph_max;
        int64_t keep = 15 + (int64_t)(t_next(&r) % (uint64_t)(n - 15));
        uint8_t *mask = malloc((size_t)(2 * n));
        if (run_select(pol, &s.v, keep, &pp, mask) != NX_STATUS_OK) {
            st->bad++;
            free(mask);
            synth_free(&s);
            continue;
        }
        int64_t sk = NX_MIN(pp.sink, n), rk = NX_MIN(pp.recent, n - sk);
        double *P = oracle_probs(&s.v), *sc = NULL;
        int64_t keep_l = keep;
        bool shared = false;
        if (!strcmp(name, "h2o")) {
            sc = calloc((size_t)(2 * n), sizeof(double));
            for (int64_t i = 0; i < 2 * n; i++) sc[i] = s.acc[i];
        } else if (!strcmp(name, "snapkv") || !strcmp(name, "pyramidkv")) {
            sc = oracle_snap(&s.v, P, rk, pp.pool_kernel, pool_max);
        } else if (!strcmp(name, "morphkv")) {
            sc = oracle_morph(&s.v, rk, morph_max);
        } else if (!strcmp(name, "tova")) {
            shared = true;
            sc = calloc((size_t)n, sizeof(double));
            for (int32_t h = 0; h < 4; h++)
                for (int64_t i = 0; i < n; i++)
                    sc[i] += P[((size_t)h * n_win + n_win - 1) * n + i] / 4;
        }
        if (!strcmp(name, "pyramidkv")) {
            /* independent restatement of the integer pyramid rule */
            int64_t seen = s.pos[n - 1] + 1, base = keep - pp.recent;
            if (base > 0 && seen > keep && seen >= 2 * base) {
                int64_t lo = (int64_t)floor(base / 20.0), hi = 2 * base - lo;
                if (hi >= seen - pp.recent) {
                    hi = seen - pp.recent;
                    lo = 2 * base - hi;
                }
                keep_l = NX_MAX(hi - s.v.layer * ((hi - lo) / 3), pp.sink) + pp.recent;
            }
            ASSERT_EQ(kv_policy_layer_keep(pol, &s.v, keep, &pp), keep_l);
        }
        for (int32_t g = 0; g < 2; g++) {
            if (n <= keep_l) {
                for (int64_t i = 0; i < n; i++) ASSERT_TRUE(mask[g * n + i]);
                st->exact++;
                continue;
            }
            const double *row = shared ? sc : sc + g * n;
            tally(st, compare_row(row, n, sk, rk, keep_l - sk - rk, mask + g * n));
        }
        free(P);
        free(sc);
        free(mask);
        synth_free(&s);
    }
}

#define ORACLE_TEST(tname, pname, pmax, mmax) \
    TEST(tname) { \
        struct cmp_stats st = {0, 0, 0}; \
        oracle_cases(pname, pmax, mmax, &st); \
        if (st.near) printf("  %s: %d exact, %d near-tie rows\n", #tname, st.exact, st.near); \
        ASSERT_EQ(st.bad, 0); \
        ASSERT_TRUE(st.exact >= 50); \
    }

ORACLE_TEST(oracle_h2o, "h2o", true, false)
ORACLE_TEST(oracle_snapkv_max, "snapkv", true, false)
ORACLE_TEST(oracle_snapkv_avg, "snapkv", false, false)
ORACLE_TEST(oracle_pyramidkv, "pyramidkv", true, false)
ORACLE_TEST(oracle_morphkv_sum, "morphkv", true, false)
ORACLE_TEST(oracle_morphkv_max, "morphkv", true, true)
ORACLE_TEST(oracle_tova, "tova", true, false)

TEST(oracle_tova_shared_rows) {
    struct synth s;
    synth_make(&s, 77, 4, 2, 8, 120, 8, 0, 1);
    struct kv_policy_params pp = small_params();
    uint8_t mask[240];
    ASSERT_OK(run_select(kv_policy_find("tova"), &s.v, 50, &pp, mask));
    ASSERT_TRUE(memcmp(mask, mask + 120, 120) == 0);
    synth_free(&s);
}

TEST(oracle_adakv) {
    int exact = 0;
    for (int c = 0; c < 40; c++) {
        uint64_t r = 5000 + (uint64_t)c;
        int64_t n = 40 + (int64_t)(t_next(&r) % 161);
        int32_t n_win = 4 + (int32_t)(t_next(&r) % 13), hkv = 2 + c % 3, nh = hkv * 2;
        struct synth s;
        synth_make(&s, r, nh, hkv, 8, n, n_win, 0, 1);
        struct kv_policy_params pp = small_params();
        pp.pool_max = c % 2 == 0;
        int64_t keep = 15 + (int64_t)(t_next(&r) % (uint64_t)(n - 15));
        uint8_t *mask = malloc((size_t)(hkv * n));
        ASSERT_OK(run_select(kv_policy_find("adakv"), &s.v, keep, &pp, mask));
        int64_t sk = NX_MIN(pp.sink, n), rk = NX_MIN(pp.recent, n - sk), m = n - sk - rk;
        double *P = oracle_probs(&s.v);
        double *sc = oracle_snap(&s.v, P, rk, pp.pool_kernel, pp.pool_max);
        if (n > keep) {
            int64_t B = keep - sk - rk, cnt = 0, cap[4] = {0}, tot = 0;
            /* global order of all (head, token) cells by sorting */
            int64_t *ord = malloc(sizeof(int64_t) * (size_t)(hkv * n));
            double *flat = malloc(sizeof(double) * (size_t)(hkv * n));
            for (int64_t i = 0; i < hkv * n; i++) flat[i] = -1e300;
            for (int32_t g = 0; g < hkv; g++)
                for (int64_t i = sk; i < n - rk; i++) flat[g * n + i] = sc[g * n + i];
            oracle_sort(flat, 0, hkv * n, ord);
            for (int64_t j = 0; j < hkv * B; j++) cap[ord[j] / n]++;
            double ex[4], fl = floor(0.2 * B);
            for (int32_t g = 0; g < hkv; g++) {
                ex[g] = cap[g] * 0.8 + fl;
                cap[g] = (int64_t)llround(ex[g]);
                if (cap[g] > m) cap[g] = m;
                tot += cap[g];
            }
            while (tot > hkv * B) {
                int32_t wi = 0;
                for (int32_t g = 1; g < hkv; g++)
                    if (cap[g] - ex[g] >= cap[wi] - ex[wi]) wi = g;
                cap[wi]--;
                tot--;
            }
            int64_t kept_total = 0;
            for (int32_t g = 0; g < hkv; g++) {
                int res = compare_row(sc + g * n, n, sk, rk, cap[g], mask + g * n);
                ASSERT_TRUE(res >= 0);
                cnt += res == 0;
                for (int64_t i = 0; i < n; i++) kept_total += mask[g * n + i];
                ASSERT_TRUE(cap[g] >= (int64_t)fl);
            }
            ASSERT_TRUE(kept_total <= hkv * keep);
            exact += cnt == hkv;
            free(ord);
            free(flat);
        } else {
            exact++;
        }
        free(P);
        free(sc);
        free(mask);
        synth_free(&s);
    }
    ASSERT_TRUE(exact >= 36);
}

/* Ada-KV over heads that hold different tokens (select_ragged). Part 1: equal heads split into
 * single-head views give exactly the aligned selection. Part 2: heads of different lengths
 * against a brute-force oracle of the same allocation over the union of the heads' cells. */
static void split_head_view(const struct kv_layer_view *v, int32_t h, float *wq,
                            struct kv_layer_view *out) {
    const int32_t G = v->n_head / v->n_head_kv, d = v->head_dim;
    for (int32_t w = 0; w < v->n_win; w++)
        memcpy(wq + (size_t)w * G * d, v->win_q + ((size_t)w * v->n_head + (size_t)h * G) * d,
               sizeof(float) * (size_t)(G * d));
    *out = *v;
    out->n_head = G;
    out->n_head_kv = 1;
    out->k = v->k + (size_t)h * (size_t)v->n_tokens * (size_t)d;
    out->win_q = wq;
    out->acc_attn = v->acc_attn ? v->acc_attn + (size_t)h * (size_t)v->n_tokens : NULL;
}

TEST(adakv_ragged_heads) {
    const struct kv_policy *pol = kv_policy_find("adakv");
    ASSERT_TRUE(pol->select_ragged != NULL);
    int exact = 0, cases = 0;
    for (int c = 0; c < 30; c++) {
        uint64_t r = 7100 + (uint64_t)c;
        int32_t hkv = 2 + c % 3, G = 2, n_win = 4 + (int32_t)(t_next(&r) % 9);
        struct kv_policy_params pp = small_params();
        pp.pool_max = c % 2 == 0;
        /* part 1: equal heads */
        int64_t n = 60 + (int64_t)(t_next(&r) % 120), keep = 20 + (int64_t)(t_next(&r) % 30);
        struct synth s;
        synth_make(&s, r, hkv * G, hkv, 8, n, n_win, 0, 1);
        uint8_t *mask = malloc((size_t)(hkv * n)), *rows_mem = malloc((size_t)(hkv * n));
        ASSERT_OK(run_select(pol, &s.v, keep, &pp, mask));
        struct kv_layer_view views[4];
        uint8_t *rows[4];
        float *wq = malloc(sizeof(float) * (size_t)(hkv * n_win * G * 8));
        for (int32_t h = 0; h < hkv; h++) {
            split_head_view(&s.v, h, wq + (size_t)h * n_win * G * 8, &views[h]);
            rows[h] = rows_mem + (size_t)h * (size_t)n;
        }
        struct kv_layer_view worst = s.v;
        size_t bytes = kv_policy_scratch_bytes(&worst);
        void *scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ASSERT_OK(pol->select_ragged(views, hkv, keep, &pp, scratch, bytes, rows));
        ASSERT_TRUE(memcmp(mask, rows_mem, (size_t)(hkv * n)) == 0);
        free(wq);
        free(scratch);
        free(mask);
        free(rows_mem);
        synth_free(&s);

        /* part 2: heads of different lengths, each its own single-head synthetic view */
        struct synth hs[4];
        int64_t hn[4], off[4], tot_n = 0, maxn = 0;
        keep = 25 + (int64_t)(t_next(&r) % 20);
        for (int32_t h = 0; h < hkv; h++) {
            hn[h] = keep + 5 + (int64_t)(t_next(&r) % 90);
            synth_make(&hs[h], r + 100 + (uint64_t)h, G, 1, 8, hn[h], n_win, 0, 1);
            views[h] = hs[h].v;
            off[h] = tot_n;
            tot_n += hn[h];
            maxn = NX_MAX(maxn, hn[h]);
        }
        rows_mem = malloc((size_t)tot_n);
        for (int32_t h = 0; h < hkv; h++) rows[h] = rows_mem + off[h];
        worst = hs[0].v;
        worst.n_head_kv = hkv;
        worst.n_head = hkv * G;
        worst.n_tokens = maxn;
        bytes = kv_policy_scratch_bytes(&worst);
        scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
        ASSERT_OK(pol->select_ragged(views, hkv, keep, &pp, scratch, bytes, rows));
        /* oracle */
        int64_t sk = pp.sink, rk = pp.recent, B = keep - sk - rk, cap[4] = {0}, tot = 0;
        double *flat = malloc(sizeof(double) * (size_t)tot_n), *sc[4], ex[4];
        int64_t *ord = malloc(sizeof(int64_t) * (size_t)tot_n);
        for (int32_t h = 0; h < hkv; h++) {
            double *P = oracle_probs(&views[h]);
            sc[h] = oracle_snap(&views[h], P, rk, pp.pool_kernel, pp.pool_max);
            free(P);
            for (int64_t i = 0; i < hn[h]; i++)
                flat[off[h] + i] = i >= sk && i < hn[h] - rk ? sc[h][i] : -1e300;
        }
        oracle_sort(flat, 0, tot_n, ord);
        for (int64_t j = 0; j < hkv * B; j++) {
            int32_t h = hkv - 1;
            while (h > 0 && ord[j] < off[h]) h--;
            cap[h]++;
        }
        double fl = floor(0.2 * (double)B);
        for (int32_t h = 0; h < hkv; h++) {
            ex[h] = cap[h] * 0.8 + fl;
            cap[h] = NX_MIN((int64_t)llround(ex[h]), hn[h] - sk - rk);
            tot += cap[h];
        }
        while (tot > hkv * B) {
            int32_t wi = -1;
            for (int32_t h = 0; h < hkv; h++)
                if (cap[h] > 0 && (wi < 0 || cap[h] - ex[h] >= cap[wi] - ex[wi])) wi = h;
            cap[wi]--;
            tot--;
        }
        int64_t kept = 0;
        int all_exact = 1;
        for (int32_t h = 0; h < hkv; h++) {
            int res = compare_row(sc[h], hn[h], sk, rk, cap[h], rows[h]);
            ASSERT_TRUE(res >= 0);
            all_exact &= res == 0;
            for (int64_t i = 0; i < hn[h]; i++) kept += rows[h][i];
            for (int64_t i = 0; i < sk; i++) ASSERT_TRUE(rows[h][i]);
            for (int64_t i = hn[h] - rk; i < hn[h]; i++) ASSERT_TRUE(rows[h][i]);
            free(sc[h]);
            synth_free(&hs[h]);
        }
        ASSERT_TRUE(kept <= hkv * keep);
        exact += all_exact;
        cases++;
        free(flat);
        free(ord);
        free(scratch);
        free(rows_mem);
    }
    ASSERT_TRUE(exact >= cases - 3);
}

TEST(oracle_streaming_and_full) {
    for (int c = 0; c < 60; c++) {
        uint64_t r = 9000 + (uint64_t)c;
        int64_t n = 40 + (int64_t)(t_next(&r) % 161);
        struct synth s;
        synth_make(&s, r, 4, 2, 8, n, 4, 0, 1);
        struct kv_policy_params pp = small_params();
        int64_t keep = 25 + (int64_t)(t_next(&r) % (uint64_t)(n - 20));
        uint8_t *mask = malloc((size_t)(2 * n));
        ASSERT_OK(run_select(kv_policy_find("full"), &s.v, keep, &pp, mask));
        for (int64_t i = 0; i < 2 * n; i++) ASSERT_TRUE(mask[i]);
        ASSERT_OK(run_select(kv_policy_find("streaming"), &s.v, keep, &pp, mask));
        /* oracle: sink + the longest suffix of whole cache-order blocks within keep - sink */
        int64_t tail = 0;
        if (n > keep) {
            for (int64_t start = n; start >= 0; start--) {
                bool boundary = start % pp.block == 0 || start == n;
                if (boundary && n - start <= keep - pp.sink) tail = n - start;
            }
        }
        for (int32_t g = 0; g < 2; g++)
            for (int64_t i = 0; i < n; i++) {
                bool want = n <= keep || i < pp.sink || i >= n - tail;
                ASSERT_EQ(mask[g * n + i], want);
            }
        free(mask);
        synth_free(&s);
    }
}

/* ---- streams ------------------------------------------------------------------------------ */

/* Simulated cache of one layer: union of what the heads keep. */
static void stream_policy(const char *name, int32_t layer, uint64_t seed) {
    const struct kv_policy *pol = kv_policy_find(name);
    const int32_t nh = 4, hkv = 2, hd = 8, n_win = 8, cap = 600;
    struct kv_policy_params pp = kv_policy_default_params();
    pp.block = 8;
    pp.sink = 8;
    pp.recent = 12;
    pp.pool_kernel = 3;
    pp.seed = seed;
    pp.nexus_fixed_draws = seed % 2 == 0;
    const int64_t keep = 72;
    ASSERT_TRUE(keep >= kv_policy_min_keep(pol, &pp));
    int32_t *pos = malloc(sizeof(int32_t) * cap), wpos[8];
    float *k = malloc(sizeof(float) * cap * hkv * hd), *kk = malloc(sizeof(float) * cap * hkv * hd);
    float *acc = malloc(sizeof(float) * cap * hkv), *q = malloc(sizeof(float) * n_win * nh * hd);
    uint8_t *mask = malloc((size_t)cap * hkv);
    int64_t n = 0, evictions = 0;
    int32_t next_pos = 0;
    uint64_t r = seed;
    while (next_pos < 3000) {
        int32_t chunk = 1 + (int32_t)(t_next(&r) % 24);
        for (int32_t c = 0; c < chunk && n < cap; c++) {
            pos[n] = next_pos++;
            for (int32_t g = 0; g < hkv; g++) {
                for (int32_t e = 0; e < hd; e++) kk[((size_t)g * cap + n) * hd + e] = t_gauss(&r);
                acc[(size_t)g * cap + n] = (float)t_unif(&r);
            }
            n++;
        }
        for (int32_t i = 0; i < n_win * nh * hd; i++) q[i] = 2.0f * t_gauss(&r);
        int32_t nw = (int32_t)NX_MIN(n, n_win);
        for (int32_t j = 0; j < nw; j++) wpos[j] = pos[n - nw + j];
        /* pack (hkv, n, hd) keys and (hkv, n) acc from the strided store */
        float *accp = malloc(sizeof(float) * (size_t)(hkv * n + 1));
        for (int32_t g = 0; g < hkv; g++) {
            memcpy(k + (size_t)g * n * hd, kk + (size_t)g * cap * hd, sizeof(float) * n * hd);
            memcpy(accp + (size_t)g * n, acc + (size_t)g * cap, sizeof(float) * n);
        }
        struct kv_layer_view v = {
            .layer = layer, .n_layer = 4, .n_head = nh, .n_head_kv = hkv, .head_dim = hd,
            .n_tokens = n, .pos = pos, .k = k, .n_win = nw, .win_q = q, .win_pos = wpos,
            .acc_attn = accp,
        };
        int64_t keep_l = kv_policy_layer_keep(pol, &v, keep, &pp);
        if (n > keep_l) {
            pp.eviction_index = (uint64_t)evictions++;
            nx_status st = run_select(pol, &v, keep, &pp, mask);
            free(accp);
            ASSERT_OK(st);
            int64_t sk = NX_MIN(pp.sink, n), rk = NX_MIN(pp.recent, n - sk), total = 0;
            for (int32_t g = 0; g < hkv; g++) {
                int64_t kept = 0;
                for (int64_t i = 0; i < n; i++) kept += mask[g * n + i] != 0;
                for (int64_t i = 0; i < sk; i++) ASSERT_TRUE(mask[g * n + i]);
                for (int64_t i = n - rk; i < n; i++) ASSERT_TRUE(mask[g * n + i]);
                if (strcmp(name, "adakv") != 0) ASSERT_TRUE(kept <= keep_l);
                else ASSERT_TRUE(kept >= sk + rk);
                if (!pol->block_granular && strcmp(name, "adakv") != 0) ASSERT_EQ(kept, keep_l);
                if (!pol->per_head) ASSERT_TRUE(memcmp(mask, mask + g * n, (size_t)n) == 0);
                total += kept;
            }
            ASSERT_TRUE(total <= hkv * keep_l);
            if (pol->block_granular) {
                /* whole cache-order blocks, except the partial last one */
                for (int64_t b0 = 0; b0 + pp.block <= n; b0 += pp.block)
                    for (int64_t i = b0; i < b0 + pp.block; i++) ASSERT_EQ(mask[i], mask[b0]);
            }
            /* compact the union */
            int64_t w = 0;
            for (int64_t i = 0; i < n; i++) {
                bool any = false;
                for (int32_t g = 0; g < hkv; g++) any |= mask[g * n + i] != 0;
                if (!any) continue;
                pos[w] = pos[i];
                for (int32_t g = 0; g < hkv; g++) {
                    memmove(kk + ((size_t)g * cap + w) * hd, kk + ((size_t)g * cap + i) * hd,
                            sizeof(float) * hd);
                    acc[(size_t)g * cap + w] = acc[(size_t)g * cap + i];
                }
                w++;
            }
            n = w;
            for (int64_t i = 1; i < n; i++) ASSERT_TRUE(pos[i] > pos[i - 1]);
            ASSERT_TRUE(n <= hkv * keep_l);
        } else {
            free(accp);
        }
    }
    ASSERT_TRUE(evictions > 20);
    free(pos);
    free(k);
    free(kk);
    free(acc);
    free(q);
    free(mask);
}

TEST(stream_all_policies) {
    for (size_t p = 0; p < NX_ARRAY_LEN(k_names); p++) {
        if (!strcmp(k_names[p], "full")) continue;
        for (uint64_t seed = 1; seed <= 3; seed++) {
            stream_policy(k_names[p], (int32_t)(seed % 4), seed * 7919);
            if (g_test_failed) {
                printf("  failed: %s seed %llu\n", k_names[p], (unsigned long long)seed);
                return;
            }
        }
    }
}

TEST(pyramid_budget_sum) {
    struct kv_policy_params pp = kv_policy_default_params();
    pp.sink = 0; /* the sink clamp (tested below) adds to the sum */
    int32_t pos[1] = {0};
    for (int64_t keep = 100; keep <= 2000; keep += 137) {
        for (int32_t nl = 1; nl <= 32; nl *= 2) {
            for (int64_t seen = keep + 1; seen < 12000; seen = seen * 3 / 2 + 7) {
                int64_t sum = 0, prev = INT64_MAX;
                pos[0] = (int32_t)(seen - 1);
                for (int32_t l = 0; l < nl; l++) {
                    struct kv_layer_view v = {.layer = l, .n_layer = nl, .n_tokens = 1, .pos = pos};
                    int64_t kl = kvp_pyramid_keep(&v, keep, &pp);
                    ASSERT_TRUE(kl <= prev);
                    ASSERT_TRUE(kl <= seen);
                    prev = kl;
                    sum += kl;
                }
                ASSERT_TRUE(sum >= nl * keep);
                ASSERT_TRUE(sum < nl * keep + nl * (nl - 1) / 2 + 1);
            }
        }
    }
    /* with a sink every layer keeps at least sink + recent */
    pp = kv_policy_default_params();
    pos[0] = 99999;
    for (int32_t l = 0; l < 16; l++) {
        struct kv_layer_view v = {.layer = l, .n_layer = 16, .n_tokens = 1, .pos = pos};
        ASSERT_TRUE(kvp_pyramid_keep(&v, 200, &pp) >= 64);
        if (l == 0) ASSERT_EQ(kvp_pyramid_keep(&v, 200, &pp), 2 * 168 - 8 + 32);
    }
}

/* ---- Nexus: scoring ----------------------------------------------------------------------- */

TEST(nexus_walk_hand_example) {
    const double rows[9] = {0.5, 0.3, 0.2, 0.2, 0.5, 0.3, 0.1, 0.1, 0.8};
    double a[3], c[3], ct[3];
    kvp_nexus_walk(rows, 3, 3, 3, a, c, ct);
    /* g1 = 1, C = (.5,.3,.2); g2 = 1 + .1 + .15 + .06 = 1.31, C = (.762, .955, .593);
       g3 = 1 + .0762 + .0955 + .4744 = 1.6461, C = (.92661, 1.11961, 1.90988), |C| = 3.9561 */
    ASSERT_NEAR(a[0], 0.8 / 3, 1e-12);
    ASSERT_NEAR(a[1], 0.9 / 3, 1e-12);
    ASSERT_NEAR(a[2], 1.3 / 3, 1e-12);
    ASSERT_NEAR(c[0], 0.92661, 1e-12);
    ASSERT_NEAR(c[1], 1.11961, 1e-12);
    ASSERT_NEAR(c[2], 1.90988, 1e-12);
    ASSERT_NEAR(ct[0], 0.92661 / 3.9561, 1e-12);
    ASSERT_NEAR(ct[1], 1.11961 / 3.9561, 1e-12);
    ASSERT_NEAR(ct[2], 1.90988 / 3.9561, 1e-12);
    /* 4 rows, H = 2: the walk uses the last two rows only; a uses all four */
    const double rows4[12] = {1, 0, 0, 0.5, 0.3, 0.2, 0.2, 0.5, 0.3, 0.1, 0.1, 0.8};
    kvp_nexus_walk(rows4, 4, 3, 2, a, c, ct);
    ASSERT_NEAR(a[0], 1.8 / 4, 1e-12);
    /* C = (.2,.5,.3); g = 1 + .02 + .05 + .24 = 1.31; C = (.331, .631, 1.348) */
    ASSERT_NEAR(c[0], 0.331, 1e-12);
    ASSERT_NEAR(c[1], 0.631, 1e-12);
    ASSERT_NEAR(c[2], 1.348, 1e-12);
    kvp_nexus_walk(rows4, 4, 3, 0, NULL, c, ct);
    ASSERT_NEAR(ct[0] + ct[1] + ct[2], 0, 0);
}

/* Oracle Nexus weights (reading A) from the explicit attention matrix. */
TEST(nexus_weights_oracle) {
    for (int c = 0; c < 12; c++) {
        uint64_t r = 300 + (uint64_t)c;
        int64_t n = 60 + (int64_t)(t_next(&r) % 140);
        int32_t nw = 4 + (int32_t)(t_next(&r) % 13);
        struct synth s;
        synth_make(&s, r, 4, 2, 8, n, nw, 1, 2);
        struct kv_policy_params pp = small_params();
        pp.nexus_w_scale = 3.0f;
        struct kvp_nexus_blocks bl;
        kvp_nexus_layout(n, 40, &pp, &bl);
        ASSERT_EQ(bl.n_sink, 1);
        ASSERT_TRUE(bl.m > 1);
        int64_t m = bl.m;
        size_t sb = kv_policy_scratch_bytes(&s.v);
        void *scr = malloc(sb);
        struct kvp_arena ar;
        kvp_arena_init(&ar, scr, sb);
        double *a = calloc((size_t)m, 8), *ct = calloc((size_t)m, 8), *w = calloc((size_t)m, 8);
        ASSERT_OK(kvp_nexus_weights(&s.v, &pp, &bl, a, ct, w, &ar));
        double *P = oracle_probs(&s.v);
        double *rows = calloc((size_t)(nw * m), 8), *oa = calloc((size_t)m, 8);
        double *oc = calloc((size_t)m, 8), *oct = calloc((size_t)m, 8);
        for (int32_t q = 0; q < nw; q++) {
            double tot = 0;
            for (int64_t j = 0; j < m; j++) {
                for (int32_t h = 0; h < 4; h++)
                    for (int64_t i = (1 + j) * 8; i < (2 + j) * 8; i++)
                        rows[q * m + j] += P[((size_t)h * nw + q) * n + i] / 4;
                tot += rows[q * m + j];
            }
            for (int64_t j = 0; j < m; j++) rows[q * m + j] /= tot;
        }
        for (int64_t j = 0; j < m; j++) {
            for (int32_t q = 0; q < nw; q++) oa[j] += rows[q * m + j] / nw;
        }
        /* walk written out again here */
        for (int32_t q = nw - 3; q < nw; q++) {
            double g = 1;
            for (int64_t j = 0; j < m; j++) g += rows[q * m + j] * oc[j];
            for (int64_t j = 0; j < m; j++) oc[j] += g * rows[q * m + j];
        }
        double l1 = 0;
        for (int64_t j = 0; j < m; j++) l1 += oc[j];
        for (int64_t j = 0; j < m; j++) {
            double want = 3.0 * (oa[j] + 0.5 * oc[j] / l1 + 1e-6 * (double)j / (double)(m - 1));
            ASSERT_NEAR(a[j], oa[j], 1e-6 * oa[j] + 1e-12);
            ASSERT_NEAR(ct[j], oc[j] / l1, 1e-6 * oc[j] / l1 + 1e-12);
            ASSERT_NEAR(w[j], want, 1e-6 * want + 1e-12);
        }
        free(a), free(ct), free(w), free(P), free(rows), free(oa), free(oc), free(oct), free(scr);
        synth_free(&s);
    }
}

TEST(nexus_layout) {
    struct kv_policy_params pp = kv_policy_default_params(); /* b = sink = recent = 32 */
    struct kvp_nexus_blocks bl;
    kvp_nexus_layout(1000, 200, &pp, &bl); /* 31 full blocks + 8 tokens */
    ASSERT_EQ(bl.n_blocks, 32);
    ASSERT_EQ(bl.n_sink, 1);
    ASSERT_EQ(bl.first_recent, 30); /* recent = [968, 1000) overlaps blocks 30 and 31 */
    ASSERT_EQ(bl.m, 29);
    ASSERT_EQ(bl.k, 6 - 1 - 2);
    kvp_nexus_layout(1024, 200, &pp, &bl); /* aligned: one recent block */
    ASSERT_EQ(bl.first_recent, 31);
    ASSERT_EQ(bl.k, 6 - 1 - 1);
    kvp_nexus_layout(1024, 40, &pp, &bl); /* budget below the forced blocks: K = 0 */
    ASSERT_EQ(bl.k, 0);
}

/* ---- Nexus: reservoir --------------------------------------------------------------------- */

static double pair_win_rate(double w, int32_t nn, int trials, uint64_t seed0) {
    int wins = 0;
    for (int t = 0; t < trials; t++) {
        uint64_t seed = seed0 + (uint64_t)t;
        double hi = kvp_nexus_log_priority(2 * w, nn, seed, 0, 1, 0);
        double lo = kvp_nexus_log_priority(w, nn, seed, 0, 2, 0);
        wins += hi > lo;
    }
    return (double)wins / trials;
}

TEST(nexus_reservoir_pair_two_thirds) {
    const int T = 20000;
    const double tol = 4 * sqrt((2.0 / 3) * (1.0 / 3) / T); /* 4 sigma ~ 0.0133 */
    double scales[3] = {1e-3, 0.3, 1.0};
    for (int i = 0; i < 3; i++) {
        double p = pair_win_rate(scales[i], 1, T, 17);
        if (fabs(p - 2.0 / 3) > tol) printf("  scale %g: %.4f\n", scales[i], p);
        ASSERT_NEAR(p, 2.0 / 3, tol);
    }
    /* n = 5 sharpens only at larger scales (EVICTION.md's table: 0.668 / 0.786 / 0.839) */
    ASSERT_NEAR(pair_win_rate(3e-3, 5, T, 99), 0.668, tol + 0.005);
    ASSERT_NEAR(pair_win_rate(0.3, 5, T, 99), 0.786, tol + 0.005);
    ASSERT_NEAR(pair_win_rate(1.0, 5, T, 99), 0.839, tol + 0.005);
}

TEST(nexus_reservoir_inclusion_rises) {
    enum { M = 10, K = 3, T = 4000 };
    double w[M], lp[M];
    int64_t idx[M];
    int cnt[M] = {0};
    for (int j = 0; j < M; j++) w[j] = (j + 1) / 55.0;
    for (int t = 0; t < T; t++) {
        for (int j = 0; j < M; j++) {
            lp[j] = kvp_nexus_log_priority(w[j], 5, 1000 + (uint64_t)t, 3, (uint64_t)j * 32, 0);
            idx[j] = j;
        }
        kvp_topk(lp, idx, M, K, true);
        for (int j = 0; j < K; j++) cnt[idx[j]]++;
    }
    for (int j = 0; j + 1 < M; j++) {
        double p0 = (double)cnt[j] / T, p1 = (double)cnt[j + 1] / T;
        double sd = sqrt((p0 * (1 - p0) + p1 * (1 - p1)) / T);
        ASSERT_TRUE(p1 >= p0 - 4 * sd);
    }
    ASSERT_TRUE(cnt[M - 1] > 2 * cnt[0]);
    ASSERT_TRUE(cnt[0] > 0); /* every positive weight keeps a positive inclusion probability */
}

static double topk_agreement(int32_t nn, int trials) {
    enum { M = 20, K = 6 };
    double lp[M];
    int64_t idx[M];
    long hit = 0;
    for (int t = 0; t < trials; t++) {
        for (int j = 0; j < M; j++) {
            double w = j % 3 == 0 ? 1.0 : 0.5; /* top K = the multiples of 3 below 18 + 18 */
            lp[j] = kvp_nexus_log_priority(w, nn, 555 + (uint64_t)t, 0, (uint64_t)j, 0);
            idx[j] = j;
        }
        kvp_topk(lp, idx, M, K, true);
        for (int j = 0; j < K; j++) hit += idx[j] % 3 == 0;
    }
    return (double)hit / ((double)trials * K);
}

TEST(nexus_reservoir_converges_to_topk) {
    double a1 = topk_agreement(1, 400), a5 = topk_agreement(5, 400);
    double a200 = topk_agreement(200, 400);
    printf("  top-K agreement n=1 %.3f, n=5 %.3f, n=200 %.4f\n", a1, a5, a200);
    ASSERT_TRUE(a1 < a5);
    ASSERT_TRUE(a5 < a200);
    ASSERT_TRUE(a200 >= 0.995);
}

TEST(nexus_reservoir_no_underflow) {
    const int T = 20000;
    int wins = 0;
    for (int t = 0; t < T; t++) {
        double hi = kvp_nexus_log_priority(2e-4, 5, 7 + (uint64_t)t, 1, 10, 0);
        double lo = kvp_nexus_log_priority(1e-4, 5, 7 + (uint64_t)t, 1, 11, 0);
        ASSERT_TRUE(isfinite(hi) && isfinite(lo));
        ASSERT_TRUE(hi < 0 && lo < 0);
        wins += hi > lo;
    }
    /* in float, u^(1/w) with w = 1e-4 is 0 for every u < 0.9999: all ties */
    ASSERT_TRUE(powf(0.9f, 1e4f) == 0.0f);
    ASSERT_NEAR((double)wins / T, 2.0 / 3, 4 * sqrt(2.0 / 9 / T) + 0.005);
    ASSERT_TRUE(kvp_nexus_log_priority(0.0, 5, 1, 0, 0, 0) == -INFINITY);
    ASSERT_TRUE(kvp_nexus_log_priority(NAN, 5, 1, 0, 0, 0) == -INFINITY);
}

TEST(nexus_rng_counter_based) {
    /* a draw depends only on its key; keys differing in any word give different bits */
    uint64_t b = kvp_rng_bits(1, 2, 3, 4, 0);
    ASSERT_TRUE(b == kvp_rng_bits(1, 2, 3, 4, 0));
    ASSERT_TRUE(b != kvp_rng_bits(2, 2, 3, 4, 0));
    ASSERT_TRUE(b != kvp_rng_bits(1, 3, 3, 4, 0));
    ASSERT_TRUE(b != kvp_rng_bits(1, 2, 4, 4, 0));
    ASSERT_TRUE(b != kvp_rng_bits(1, 2, 3, 5, 0));
    ASSERT_TRUE(b != kvp_rng_bits(1, 2, 3, 4, 1));
    double mean = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        double u = kvp_u01(kvp_rng_bits(9, 0, i, 0, 0));
        ASSERT_TRUE(u > 0 && u < 1);
        mean += u;
    }
    ASSERT_NEAR(mean / 100000, 0.5, 4 * sqrt(1.0 / 12 / 100000));
    ASSERT_TRUE(kvp_u01(0) > 0 && kvp_u01(UINT64_MAX) < 1);
}

TEST(nexus_draws_fixed_vs_fresh) {
    struct synth s;
    synth_make(&s, 4242, 4, 2, 8, 400, 16, 2, 4);
    const struct kv_policy *nx = kv_policy_find("nexus");
    struct kv_policy_params pp = small_params();
    uint8_t a[800], b[800];
    pp.nexus_fixed_draws = true;
    pp.eviction_index = 0;
    ASSERT_OK(run_select(nx, &s.v, 120, &pp, a));
    pp.eviction_index = 7;
    ASSERT_OK(run_select(nx, &s.v, 120, &pp, b));
    ASSERT_TRUE(memcmp(a, b, 800) == 0); /* fixed: the eviction counter plays no part */
    pp.nexus_fixed_draws = false;
    int differ = 0;
    for (uint64_t e = 0; e < 8; e++) {
        pp.eviction_index = e;
        ASSERT_OK(run_select(nx, &s.v, 120, &pp, b));
        differ += memcmp(a, b, 800) != 0;
        uint8_t c2[800];
        ASSERT_OK(run_select(nx, &s.v, 120, &pp, c2)); /* same counter: same lottery */
        ASSERT_TRUE(memcmp(b, c2, 800) == 0);
    }
    ASSERT_TRUE(differ >= 4);
    /* the seed matters */
    pp.nexus_fixed_draws = true;
    differ = 0;
    for (uint64_t sd = 1; sd <= 8; sd++) {
        pp.seed = sd;
        ASSERT_OK(run_select(nx, &s.v, 120, &pp, b));
        differ += memcmp(a, b, 800) != 0;
    }
    ASSERT_TRUE(differ >= 4);
    synth_free(&s);
}

TEST(nexus_large_scale_is_topk) {
    /* with w scaled up and many draws the selection equals top-K by weight */
    struct synth s;
    synth_make(&s, 31337, 4, 2, 8, 400, 16, 0, 1);
    struct kv_policy_params pp = small_params();
    pp.nexus_n = 4000;
    pp.nexus_w_scale = 50.0f;
    uint8_t mask[800];
    ASSERT_OK(run_select(kv_policy_find("nexus"), &s.v, 120, &pp, mask));
    struct kvp_nexus_blocks bl;
    kvp_nexus_layout(400, 120, &pp, &bl);
    size_t sb = kv_policy_scratch_bytes(&s.v);
    void *scr = malloc(sb);
    struct kvp_arena ar;
    kvp_arena_init(&ar, scr, sb);
    double a[64], ct[64], w[64];
    int64_t idx[64];
    ASSERT_OK(kvp_nexus_weights(&s.v, &pp, &bl, a, ct, w, &ar));
    for (int64_t j = 0; j < bl.m; j++) idx[j] = j;
    kvp_topk(w, idx, bl.m, bl.k, true);
    int agree = 0;
    for (int64_t t = 0; t < bl.k; t++) agree += mask[(bl.n_sink + idx[t]) * pp.block] != 0;
    ASSERT_TRUE(agree >= bl.k - 1); /* at most one swap at the margin */
    free(scr);
    synth_free(&s);
}

/* ---- determinism and hostile inputs ------------------------------------------------------- */

TEST(determinism_all_policies) {
    struct synth s;
    synth_make(&s, 2024, 4, 2, 8, 150, 8, 1, 3);
    struct kv_policy_params pp = small_params();
    for (size_t p = 0; p < NX_ARRAY_LEN(k_names); p++) {
        const struct kv_policy *pol = kv_policy_find(k_names[p]);
        uint8_t a[300], b[300];
        memset(a, 7, sizeof(a));
        memset(b, 9, sizeof(b));
        size_t sb = kv_policy_scratch_bytes(&s.v);
        unsigned char *s1 = malloc(sb), *s2 = malloc(sb);
        memset(s1, 0, sb);
        memset(s2, 0xff, sb); /* scratch contents must not matter */
        struct kv_selection x = {a}, y = {b};
        ASSERT_OK(pol->select(&s.v, 60, &pp, s1, &x));
        ASSERT_OK(pol->select(&s.v, 60, &pp, s2, &y));
        ASSERT_TRUE(memcmp(a, b, 300) == 0);
        for (int i = 0; i < 300; i++) ASSERT_TRUE(a[i] <= 1);
        free(s1);
        free(s2);
    }
    synth_free(&s);
}

TEST(hostile_inputs) {
    struct synth s;
    synth_make(&s, 11, 4, 2, 8, 100, 8, 0, 1);
    struct kv_policy_params pp = small_params();
    size_t sb = kv_policy_scratch_bytes(&s.v);
    void *scr = malloc(sb);
    uint8_t mask[400];
    struct kv_selection sel = {mask};
    for (size_t p = 0; p < NX_ARRAY_LEN(k_names); p++) {
        const struct kv_policy *pol = kv_policy_find(k_names[p]);
        struct kv_layer_view v = s.v;
        ASSERT_EQ(pol->select(&v, 0, &pp, scr, &sel), NX_STATUS_INVALID_ARG);
        ASSERT_EQ(pol->select(&v, -5, &pp, scr, &sel), NX_STATUS_INVALID_ARG);
        ASSERT_EQ(pol->select(NULL, 50, &pp, scr, &sel), NX_STATUS_INVALID_ARG);
        ASSERT_EQ(pol->select(&v, 50, NULL, scr, &sel), NX_STATUS_INVALID_ARG);
        ASSERT_EQ(pol->select(&v, 50, &pp, scr, NULL), NX_STATUS_INVALID_ARG);
        v.n_head = 3; /* not a multiple of n_head_kv */
        ASSERT_EQ(pol->select(&v, 50, &pp, scr, &sel), NX_STATUS_INVALID_ARG);
        v = s.v;
        v.n_head_kv = 0;
        ASSERT_EQ(pol->select(&v, 50, &pp, scr, &sel), NX_STATUS_INVALID_ARG);
        v = s.v;
        v.layer = 1; /* n_layer = 1 */
        ASSERT_EQ(pol->select(&v, 50, &pp, scr, &sel), NX_STATUS_INVALID_ARG);
        v = s.v;
        v.win_q = NULL;
        ASSERT_EQ(pol->select(&v, 50, &pp, scr, &sel), NX_STATUS_INVALID_ARG);
        v = s.v;
        struct kv_policy_params bad = pp;
        bad.block = 0;
        ASSERT_EQ(pol->select(&v, 50, &bad, scr, &sel), NX_STATUS_INVALID_ARG);
        bad = pp;
        bad.nexus_w_scale = 0;
        ASSERT_EQ(pol->select(&v, 50, &bad, scr, &sel), NX_STATUS_INVALID_ARG);
        /* empty cache */
        v.n_tokens = 0;
        ASSERT_OK(pol->select(&v, 50, &pp, scr, &sel));
        /* no window: recency fallback, the newest tokens (whole blocks for block policies) */
        v = s.v;
        v.n_win = 0;
        v.acc_attn = NULL;
        memset(mask, 0xee, sizeof(mask));
        ASSERT_OK(pol->select(&v, 50, &pp, scr, &sel));
        int64_t kept = 0;
        for (int64_t i = 0; i < 100; i++) kept += mask[i];
        ASSERT_TRUE(kept <= 50 || !strcmp(k_names[p], "full"));
        for (int64_t i = 0; i < 4; i++) ASSERT_EQ(mask[i], 1);
        if (strcmp(k_names[p], "full") != 0) {
            /* kept tokens form a prefix (sink, or nexus' sink block) + one newest suffix */
            int64_t first = 0;
            while (first < 100 && mask[first]) first++;
            while (first < 100 && !mask[first]) first++;
            for (int64_t i = first; i < 100; i++) ASSERT_EQ(mask[i], 1);
            if (!kv_policy_find(k_names[p])->block_granular) ASSERT_EQ(kept, 50);
        }
        /* keep below the protected tokens: protection wins, no crash */
        v = s.v;
        ASSERT_OK(pol->select(&v, 3, &pp, scr, &sel));
        for (int64_t i = 0; i < 4; i++) ASSERT_EQ(mask[i], 1);
        for (int64_t i = 94; i < 100; i++) ASSERT_EQ(mask[i], 1);
        /* NULL scratch: error for scoring policies (full and streaming need none) */
        nx_status st = pol->select(&v, 50, &pp, NULL, &sel);
        ASSERT_TRUE(st == NX_STATUS_OK || st == NX_STATUS_INVALID_ARG);
        /* NaN keys: no crash, still a valid selection */
        float saved = s.k[8 * 3];
        s.k[8 * 3] = NAN;
        ASSERT_OK(pol->select(&v, 50, &pp, scr, &sel));
        for (int64_t i = 0; i < 4; i++) ASSERT_EQ(mask[i], 1);
        s.k[8 * 3] = saved;
    }
    /* window rows older than every key: all rows masked, no crash */
    for (size_t p = 0; p < NX_ARRAY_LEN(k_names); p++) {
        struct kv_layer_view v = s.v;
        int32_t wp[8] = {-9, -9, -9, -9, -9, -9, -9, -9};
        v.win_pos = wp;
        ASSERT_OK(kv_policy_find(k_names[p])->select(&v, 50, &pp, scr, &sel));
    }
    free(scr);
    synth_free(&s);
}

TEST(topk_ties_and_worst_case) {
    double sc[500];
    int64_t idx[500];
    for (int i = 0; i < 500; i++) sc[i] = (double)(i % 5);
    for (int i = 0; i < 500; i++) idx[i] = 499 - i;
    kvp_topk(sc, idx, 500, 150, false); /* the 100 4s and the 50 lowest-index 3s */
    int64_t got3 = 0, max3 = -1;
    for (int i = 0; i < 150; i++) {
        ASSERT_TRUE(sc[idx[i]] >= 3);
        if (sc[idx[i]] == 3) {
            got3++;
            max3 = NX_MAX(max3, idx[i]);
        }
    }
    ASSERT_EQ(got3, 50);
    ASSERT_EQ(max3, 3 + 5 * 49);
    for (int i = 0; i < 500; i++) idx[i] = i;
    kvp_topk(sc, idx, 500, 150, true); /* newer first: the 50 highest-index 3s */
    int64_t min3 = 1000;
    for (int i = 0; i < 150; i++)
        if (sc[idx[i]] == 3) min3 = NX_MIN(min3, idx[i]);
    ASSERT_EQ(min3, 498 - 5 * 49);
    /* all equal + NaN */
    for (int i = 0; i < 500; i++) sc[i] = i == 7 ? NAN : 1.0;
    for (int i = 0; i < 500; i++) idx[i] = i;
    kvp_topk(sc, idx, 500, 499, false);
    for (int i = 0; i < 499; i++) ASSERT_TRUE(idx[i] != 7);
}

TEST(scratch_bytes) {
    struct kv_layer_view v = {.n_head_kv = 8, .n_tokens = 4096, .head_dim = 64};
    ASSERT_EQ(kv_policy_scratch_bytes(&v), 8 * (2 * 8 * 4096 + 8 * 4096 + 16 + 64 + 64) + 1024);
    v.n_tokens = INT64_MAX / 2;
    ASSERT_TRUE(kv_policy_scratch_bytes(&v) == SIZE_MAX);
    ASSERT_EQ(kv_policy_scratch_bytes(NULL), 0);
}

TEST_MAIN
