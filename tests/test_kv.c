/*
 * test_kv.c - the paged KV cache and the eviction manager end to end: block pool invariants,
 * compaction, every policy held to its budget on long streams with sink and recent blocks
 * present, no leaked blocks, thread-count independence, `full` identical to no eviction, and
 * memory bounded by budget + one chunk for long prompts.
 */
#include <stdlib.h>

#include "core/nx_base.h"
#include "kv/kv_cache.h"
#include "model/context.h"
#include "nexus.h"
#include "test.h"

static const char *const POLICIES[] = {"streaming", "h2o",   "snapkv", "pyramidkv", "adakv",
                                       "morphkv",   "tova",  "nexus"};
#define N_POLICIES (int)(sizeof POLICIES / sizeof POLICIES[0])

static char g_path[512];
static nx_model *load_stories(void) {
    snprintf(g_path, sizeof g_path, "%s/models/stories260K/stories260K.gguf", test_shared());
    nx_model *m = NULL;
    char err[256];
    if (nx_model_load(g_path, NULL, &m, err, sizeof err)) fprintf(stderr, "  %s\n", err);
    return m;
}

/* ---- the block pool ---- */

static struct kv_cache *small_cache(int block, int n_blocks) {
    struct kv_cache_params p = {.n_layer = 2, .n_head_kv = 2, .head_dim = 4,
                                .type = NX_TYPE_F32, .block = block, .n_blocks = n_blocks,
                                .with_acc = true};
    struct kv_cache *c = NULL;
    kv_cache_init(&p, &c);
    return c;
}

static int64_t token_pos(struct kv_cache *c, struct kv_table *t, int64_t i) {
    return kv_block_pos(c, kv_slot_block(c, t, i))[i % c->p.block];
}

static float token_k0(struct kv_cache *c, struct kv_table *t, int64_t i) {
    const float *k = (const float *)kv_block_k(c, kv_slot_block(c, t, i));
    return k[(i % c->p.block) * c->p.head_dim];
}

TEST(pool_append_compact_truncate_no_leaks) {
    struct kv_cache *c = small_cache(4, 40);
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ(c->n_free, 40);
    float k[4], v[4];
    ASSERT_OK(kv_cache_reserve(c, 30));
    for (int i = 0; i < 30; i++) {
        for (int d = 0; d < 4; d++) k[d] = v[d] = (float)(i * 10 + d);
        for (int l = 0; l < 2; l++)
            for (int h = 0; h < 2; h++) kv_append(c, kv_table_at(c, l, h), i, k, v);
    }
    ASSERT_EQ(kv_blocks_in_use(c), 4 * 8); /* 4 tables x ceil(30/4) */
    ASSERT_EQ(kv_cache_reserve(c, 100), NX_STATUS_KV_FULL);
    ASSERT_EQ(kv_blocks_in_use(c), 32); /* unchanged */
    /* keep every third token of table (0,0): order and data preserved */
    uint8_t keep[30];
    for (int i = 0; i < 30; i++) keep[i] = i % 3 == 0;
    struct kv_table *t = kv_table_at(c, 0, 0);
    kv_compact(c, t, keep);
    ASSERT_EQ(t->n_tokens, 10);
    ASSERT_EQ(t->n_blocks, 3);
    for (int i = 0; i < 10; i++) {
        ASSERT_EQ(token_pos(c, t, i), i * 3);
        ASSERT_NEAR(token_k0(c, t, i), i * 30, 0);
    }
    /* whole-block drop (blocks 1 and 3 of table (1,1)) takes the unlink path */
    struct kv_table *u = kv_table_at(c, 1, 1);
    int32_t b2 = u->blocks[2];
    for (int i = 0; i < 30; i++) keep[i] = !((i >= 4 && i < 8) || (i >= 12 && i < 16));
    kv_compact(c, u, keep);
    ASSERT_EQ(u->n_tokens, 22);
    ASSERT_EQ(u->blocks[1], b2);
    ASSERT_EQ(token_pos(c, u, 4), 8);
    ASSERT_EQ(token_pos(c, u, 8), 16);
    kv_truncate(c, u, 5);
    ASSERT_EQ(u->n_blocks, 2);
    ASSERT_EQ(c->n_free + kv_blocks_in_use(c), 40);
    kv_cache_clear(c);
    ASSERT_EQ(c->n_free, 40);
    ASSERT_TRUE(kv_bytes_peak(c) > 0);
    kv_cache_free(c);
}

/* Every table holds the same blocks at most once and in-use + free = pool. */
static int pool_consistent(struct kv_cache *c) {
    int64_t n = c->p.n_blocks;
    uint8_t *seen = calloc((size_t)n, 1);
    int64_t used = 0;
    for (int l = 0; l < c->p.n_layer; l++)
        for (int h = 0; h < c->p.n_head_kv; h++) {
            struct kv_table *t = kv_table_at(c, l, h);
            if ((t->n_tokens + c->p.block - 1) / c->p.block != t->n_blocks) {
                free(seen);
                return 0;
            }
            for (int32_t i = 0; i < t->n_blocks; i++) {
                if (seen[t->blocks[i]]++) {
                    free(seen);
                    return 0;
                }
                used++;
            }
        }
    for (int64_t i = 0; i < c->n_free; i++)
        if (seen[c->free_ids[i]]++) {
            free(seen);
            return 0;
        }
    free(seen);
    return used + c->n_free == n;
}

/* ---- policies end to end ---- */

static nx_ctx *policy_ctx(const nx_model *m, const char *pol, int budget, int regime, int threads,
                          int n_batch) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.kv.policy = pol;
    cp.kv.budget = budget;
    cp.kv.regime = regime;
    if (n_batch) cp.n_batch = n_batch;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) fprintf(stderr, "  %s: %s\n", pol, err);
    return c;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Checks the budget/sink/recent invariants on every table; returns an error string or NULL. */
/* Per-head budgets: each KV head within the layer's budget, except for head-adaptive policies
 * (adakv), whose heads share n_head_kv * budget. */
static const char *check_tables(nx_ctx *ctx, int64_t n_past, int64_t slack, bool shared) {
    static char msg[256];
    struct kv_cache *c = ctx_kv_cache(ctx);
    if (!pool_consistent(c)) return "pool inconsistent (leaked or shared block)";
    for (int l = 0; l < c->p.n_layer; l++) {
        int64_t budget = ctx_kv_budget(ctx, l), layer_total = 0;
        for (int h = 0; h < c->p.n_head_kv; h++) layer_total += kv_table_at(c, l, h)->n_tokens;
        if (shared && layer_total > c->p.n_head_kv * (budget + slack)) {
            snprintf(msg, sizeof msg, "layer %d holds %lld > %d x (budget %lld + %lld)", l,
                     (long long)layer_total, c->p.n_head_kv, (long long)budget, (long long)slack);
            return msg;
        }
        for (int h = 0; h < c->p.n_head_kv; h++) {
            struct kv_table *t = kv_table_at(c, l, h);
            if (!shared && t->n_tokens > budget + slack) {
                snprintf(msg, sizeof msg, "layer %d head %d holds %lld > budget %lld + %lld", l,
                         h, (long long)t->n_tokens, (long long)budget, (long long)slack);
                return msg;
            }
            int64_t sink = NX_MIN(32, n_past), recent = NX_MIN(32, n_past);
            for (int64_t i = 0; i < sink; i++)
                if (token_pos(c, t, i) != i) return "sink token missing";
            for (int64_t i = 0; i < recent; i++)
                if (token_pos(c, t, t->n_tokens - 1 - i) != n_past - 1 - i)
                    return "recent token missing";
            for (int64_t i = 1; i < t->n_tokens; i++)
                if (token_pos(c, t, i) <= token_pos(c, t, i - 1)) return "positions not increasing";
        }
    }
    return NULL;
}

/* Stream regime: a 64-token prompt then 400 generated tokens, budget 96. After every step each
 * table stays within budget + one block (eviction fires at block granularity), and right after
 * an eviction round within the budget itself. */
TEST(every_policy_holds_budget_on_long_streams) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    nx_token prompt[64];
    for (int i = 0; i < 64; i++) prompt[i] = (nx_token)(1 + (i * 97) % 500);
    for (int pi = 0; pi < N_POLICIES; pi++) {
        nx_ctx *c = policy_ctx(m, POLICIES[pi], 96, NX_KV_REGIME_STREAM, 2, 0);
        ASSERT_TRUE(c != NULL);
        ASSERT_OK(nx_decode(c, prompt, 64, false));
        nx_token t = argmax(nx_get_logits(c, -1), 512);
        struct nx_kv_stats st;
        int64_t rounds = 0;
        for (int step = 0; step < 400; step++) {
            ASSERT_OK(nx_decode(c, &t, 1, false));
            t = argmax(nx_get_logits(c, -1), 512);
            nx_ctx_kv_stats(c, &st);
            int64_t slack = st.evictions > rounds ? 0 : 31;
            rounds = st.evictions;
            const char *err = check_tables(c, nx_ctx_n_past(c), slack,
                                           strcmp(POLICIES[pi], "adakv") == 0);
            if (err) FAILF("%s step %d: %s", POLICIES[pi], step, err);
        }
        nx_ctx_kv_stats(c, &st);
        if (st.evictions < 5) FAILF("%s: only %lld eviction rounds", POLICIES[pi], (long long)st.evictions);
        ASSERT_TRUE(st.bytes_current <= st.bytes_peak);
        nx_ctx_reset(c);
        ASSERT_EQ(kv_blocks_in_use(ctx_kv_cache(c)), 0);
        ASSERT_TRUE(pool_consistent(ctx_kv_cache(c)));
        nx_ctx_free(c);
    }
    nx_model_free(m);
}

/* Prefill regime with a 400-token prompt in chunks of 64: the cache never holds more than
 * budget + one chunk (+ a partial block), and ends at the budget. */
TEST(long_prompt_memory_bounded_by_budget_plus_chunk) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    nx_token prompt[400];
    for (int i = 0; i < 400; i++) prompt[i] = (nx_token)(1 + (i * 31) % 500);
    for (int pi = 0; pi < N_POLICIES; pi++) {
        nx_ctx *c = policy_ctx(m, POLICIES[pi], 96, NX_KV_REGIME_PREFILL, 2, 64);
        ASSERT_TRUE(c != NULL);
        ASSERT_OK(nx_decode(c, prompt, 400, false));
        struct kv_cache *kv = ctx_kv_cache(c);
        /* tables x (largest layer budget + chunk + 2 blocks for partial ones) */
        int64_t max_layer = 0;
        for (int l = 0; l < kv->p.n_layer; l++) max_layer = NX_MAX(max_layer, ctx_kv_budget(c, l));
        int64_t tables = (int64_t)kv->p.n_layer * kv->p.n_head_kv;
        int64_t bound_blocks = tables * ((max_layer + 64) / 32 + 2);
        if (strcmp(POLICIES[pi], "adakv") == 0) bound_blocks += tables; /* ragged rounding */
        struct nx_kv_stats st;
        nx_ctx_kv_stats(c, &st);
        if ((int64_t)st.bytes_peak > bound_blocks * (int64_t)kv->block_bytes)
            FAILF("%s: peak %zu bytes > bound %lld", POLICIES[pi], st.bytes_peak,
                  (long long)(bound_blocks * (int64_t)kv->block_bytes));
        const char *err = check_tables(c, 400, 0, strcmp(POLICIES[pi], "adakv") == 0);
        if (err) FAILF("%s: %s", POLICIES[pi], err);
        /* prefill-only: decoding 40 more tokens does not evict */
        int64_t rounds = st.evictions;
        nx_token t = 5;
        for (int i = 0; i < 40; i++) ASSERT_OK(nx_decode(c, &t, 1, false));
        nx_ctx_kv_stats(c, &st);
        ASSERT_EQ(st.evictions, rounds);
        nx_ctx_free(c);
    }
    nx_model_free(m);
}

/* Same tokens with 1 and 2 threads for every policy (seeded; reproducible). */
TEST(same_tokens_with_1_and_2_threads) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    for (int pi = 0; pi < N_POLICIES; pi++) {
        int out[2][300];
        for (int th = 1; th <= 2; th++) {
            nx_ctx *c = policy_ctx(m, POLICIES[pi], 96, NX_KV_REGIME_STREAM, th, 0);
            nx_token t = 1;
            for (int i = 0; i < 300; i++) {
                ASSERT_OK(nx_decode(c, &t, 1, false));
                t = argmax(nx_get_logits(c, -1), 512);
                out[th - 1][i] = t;
            }
            nx_ctx_free(c);
        }
        if (memcmp(out[0], out[1], sizeof out[0]) != 0)
            FAILF("%s: tokens differ between 1 and 2 threads", POLICIES[pi]);
    }
    nx_model_free(m);
}

/* `full` never evicts and gives exactly the logits of a context without a budget. */
TEST(full_policy_identical_to_no_manager) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    /* one thread each: two pools alternating on two cores would mostly measure spinning */
    nx_ctx *a = policy_ctx(m, "full", 0, NX_KV_REGIME_STREAM, 1, 0);
    nx_ctx *b = policy_ctx(m, "full", 64, NX_KV_REGIME_STREAM, 1, 0);
    nx_token t = 1;
    for (int i = 0; i < 200; i++) {
        ASSERT_OK(nx_decode(a, &t, 1, false));
        ASSERT_OK(nx_decode(b, &t, 1, false));
        if (memcmp(nx_get_logits(a, -1), nx_get_logits(b, -1), 512 * sizeof(float)))
            FAILF("logits differ at step %d", i);
        t = argmax(nx_get_logits(a, -1), 512);
    }
    struct nx_kv_stats st;
    nx_ctx_kv_stats(b, &st);
    ASSERT_EQ(st.evictions, 0);
    ASSERT_EQ(st.tokens_cached, 200);
    nx_ctx_free(a);
    nx_ctx_free(b);
    nx_model_free(m);
}

/* A budget at least the stream length never evicts and matches full exactly. */
TEST(budget_above_stream_matches_full) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    for (int pi = 0; pi < N_POLICIES; pi++) {
        nx_ctx *a = policy_ctx(m, "full", 0, NX_KV_REGIME_STREAM, 1, 0);
        nx_ctx *b = policy_ctx(m, POLICIES[pi], 400, NX_KV_REGIME_STREAM, 1, 0);
        nx_token t = 1;
        for (int i = 0; i < 150; i++) {
            ASSERT_OK(nx_decode(a, &t, 1, false));
            ASSERT_OK(nx_decode(b, &t, 1, false));
            if (memcmp(nx_get_logits(a, -1), nx_get_logits(b, -1), 512 * sizeof(float)))
                FAILF("%s: logits differ at step %d", POLICIES[pi], i);
            t = argmax(nx_get_logits(a, -1), 512);
        }
        nx_ctx_free(a);
        nx_ctx_free(b);
    }
    nx_model_free(m);
}

/* More threads after init than the evictor was sized for: still correct, same tokens. */
TEST(threads_raised_after_init) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    int out[2][200];
    for (int pass = 0; pass < 2; pass++) {
        nx_ctx *c = policy_ctx(m, "nexus", 96, NX_KV_REGIME_STREAM, 1, 0);
        if (pass == 1) ASSERT_OK(nx_ctx_set_threads(c, 3, 3));
        nx_token t = 1;
        for (int i = 0; i < 200; i++) {
            ASSERT_OK(nx_decode(c, &t, 1, false));
            t = argmax(nx_get_logits(c, -1), 512);
            out[pass][i] = t;
        }
        nx_ctx_free(c);
    }
    ASSERT_EQ(memcmp(out[0], out[1], sizeof out[0]), 0);
    nx_model_free(m);
}

TEST(bad_kv_params_rejected) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    struct nx_ctx_params cp = nx_ctx_default_params();
    nx_ctx *c = NULL;
    char err[256];
    cp.kv.policy = "lru";
    ASSERT_EQ(nx_ctx_init(m, &cp, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "unknown KV policy") != NULL);
    cp = nx_ctx_default_params();
    cp.kv.density = 1.5f;
    ASSERT_EQ(nx_ctx_init(m, &cp, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    cp = nx_ctx_default_params();
    cp.kv_block = 0;
    ASSERT_EQ(nx_ctx_init(m, &cp, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    cp = nx_ctx_default_params();
    /* policy options: unknown names and out-of-range values are refused where they are set,
       and a forged option list where it is used */
    ASSERT_EQ(nx_kv_params_set(&cp.kv, "nexus.n", 0), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_kv_params_set(&cp.kv, "nexus.bogus", 1), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(cp.kv.n_opts, 0);
    ASSERT_OK(nx_kv_params_set(&cp.kv, "nexus.n", 3));
    ASSERT_OK(nx_kv_params_set(&cp.kv, "nexus.n", 4));
    ASSERT_EQ(cp.kv.n_opts, 1);
    cp.kv.opts[0].value = 0;
    ASSERT_EQ(nx_ctx_init(m, &cp, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    cp = nx_ctx_default_params();
    cp.n_seq_max = -1;
    ASSERT_EQ(nx_ctx_init(m, &cp, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(c == NULL);
    nx_model_free(m);
}

TEST_MAIN
