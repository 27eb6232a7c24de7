/*
 * test_compact.c - nx_kv_seq_compact on stories260K: closing the gaps eviction leaves, so an
 * evicting sequence goes on past n_ctx. References: RoPE is relative, so a sequence whose
 * held positions form one run must give the same next logits after compaction as before it
 * (F32 cache; only the re-rotation's rounding differs); closing one gap must give exactly what
 * the existing range shift (nx_kv_seq_shift) gives; per-head choices (h2o, tova) must give
 * each table a consecutive run ending at n_past - 1; a stream of ten times n_ctx under an
 * evicting policy must run through with compaction, keep counting what it has seen (the
 * density budget) and survive a state file round trip.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv/kv_cache.h"
#include "model/context.h"
#include "nexus.h"
#include "support/tmpdir.h"
#include "test.h"

static nx_model *g_m;
static nx_model *stories(void) {
    if (!g_m) {
        char p[512], err[256];
        snprintf(p, sizeof p, "%s/models/stories260K/stories260K.gguf", test_shared());
        if (nx_model_load(p, NULL, &g_m, err, sizeof err)) fprintf(stderr, "  %s\n", err);
    }
    return g_m;
}

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static nx_token rnd_tok(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (nx_token)(g_rng % (uint64_t)nx_model_n_vocab(stories()));
}

static nx_ctx *mk(int n_ctx, const struct nx_kv_params *kv) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 64;
    cp.n_seq_max = 2;
    cp.kv_block = 8;
    cp.kv_type = NX_TYPE_F32;
    cp.n_threads = cp.n_threads_batch = 1;
    if (kv) cp.kv = *kv;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(stories(), &cp, &c, err, sizeof err)) fprintf(stderr, "  ctx: %s\n", err);
    return c;
}

/* Decode t[0..n) into seq from position pos, in batches of up to 64 (the contexts' n_batch). */
static nx_status decode_at(nx_ctx *c, nx_seq_id seq, const nx_token *t, int n, nx_pos pos) {
    struct nx_batch b;
    nx_status st = nx_batch_init(64, &b);
    for (int i0 = 0; !st && i0 < n; i0 += 64) {
        nx_batch_clear(&b);
        for (int i = i0; i < n && i < i0 + 64; i++) nx_batch_add(&b, t[i], pos + i, seq, i == n - 1);
        st = nx_decode_batch(c, &b);
    }
    nx_batch_free(&b);
    return st;
}

static float max_abs_diff(const float *a, const float *b, int n) {
    float d = 0;
    for (int i = 0; i < n; i++) d = fmaxf(d, fabsf(a[i] - b[i]));
    return d;
}

/* Two contexts whose sequence seq holds the same n random tokens with [r0, r1) removed; t gets
   the n tokens and one more. */
static bool twins(nx_ctx *a, nx_ctx *b, nx_seq_id seq, nx_token *t, int n, nx_pos r0, nx_pos r1) {
    for (int i = 0; i <= n; i++) t[i] = rnd_tok();
    return a && b && !decode_at(a, seq, t, n, 0) && !decode_at(b, seq, t, n, 0) &&
           !nx_kv_seq_rm(a, seq, r0, r1) && !nx_kv_seq_rm(b, seq, r0, r1);
}

TEST(one_run_moves_without_changing_the_next_logits) {
    ASSERT_TRUE(stories() != NULL);
    const int nv = nx_model_n_vocab(stories());
    nx_ctx *a = mk(256, NULL), *b = mk(256, NULL);
    nx_token t[121];
    /* the first 60 dropped: what is left is one run at 60..119 */
    ASSERT_TRUE(twins(a, b, 0, t, 120, 0, 60));
    nx_pos shift = -1;
    ASSERT_OK(nx_kv_seq_compact(a, 0, &shift));
    ASSERT_EQ(shift, 60);
    ASSERT_EQ(nx_seq_n_past(a, 0), 60);
    ASSERT_EQ(nx_seq_n_seen(a, 0), 120);
    ASSERT_EQ(nx_seq_n_past(b, 0), 120);
    ASSERT_OK(decode_at(a, 0, &t[120], 1, 60));
    ASSERT_OK(decode_at(b, 0, &t[120], 1, 120));
    const float *la = nx_get_logits(a, -1), *lb = nx_get_logits(b, -1);
    ASSERT_TRUE(la && lb);
    float d = max_abs_diff(la, lb, nv);
    ASSERT_TRUE(d < 1e-4f);
    /* nothing more to close: a second compaction is a no-op */
    ASSERT_OK(decode_at(a, 0, &t[0], 1, 61));
    ASSERT_OK(nx_kv_seq_compact(a, 0, &shift));
    ASSERT_EQ(shift, 0);
    ASSERT_EQ(nx_seq_n_past(a, 0), 62);
    nx_ctx_free(a);
    nx_ctx_free(b);
}

TEST(closing_one_gap_equals_the_range_shift) {
    const int nv = nx_model_n_vocab(stories());
    nx_ctx *a = mk(256, NULL), *b = mk(256, NULL);
    nx_token t[101];
    ASSERT_TRUE(twins(a, b, 1, t, 100, 30, 55));
    nx_pos shift = 0;
    ASSERT_OK(nx_kv_seq_compact(a, 1, &shift));
    ASSERT_EQ(shift, 25);
    ASSERT_OK(nx_kv_seq_shift(b, 1, 55, -1, -25));
    ASSERT_EQ(nx_seq_n_past(a, 1), nx_seq_n_past(b, 1));
    ASSERT_OK(decode_at(a, 1, &t[100], 1, 75));
    ASSERT_OK(decode_at(b, 1, &t[100], 1, 75));
    ASSERT_TRUE(memcmp(nx_get_logits(a, -1), nx_get_logits(b, -1), sizeof(float) * nv) == 0);
    /* sequence 0, untouched, stays empty; bad ids are refused */
    ASSERT_OK(nx_kv_seq_compact(a, 0, &shift));
    ASSERT_EQ(shift, 0);
    ASSERT_EQ(nx_kv_seq_compact(a, 2, &shift), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_kv_seq_compact(a, -1, NULL), NX_STATUS_INVALID_ARG);
    nx_ctx_free(a);
    nx_ctx_free(b);
}

/* Every (layer, KV head) table of sequence 0 holds a consecutive run of positions ending at
   n_past - 1 (what compaction leaves, right after it). */
static bool runs_end_at_n_past(nx_ctx *c) {
    struct kv_cache *kv = ctx_kv_cache(c);
    struct kv_table *tabs = kv_seq_tables(kv, 0);
    for (int64_t ti = 0; ti < kv->n_tables_seq; ti++)
        for (int64_t i = 0; i < tabs[ti].n_tokens; i++) {
            int32_t p = kv_block_pos(kv, kv_slot_block(kv, &tabs[ti], i))[i % kv->p.block];
            if (p != nx_seq_n_past(c, 0) - tabs[ti].n_tokens + i) return false;
        }
    return true;
}

/* Stream n tokens one at a time into sequence 0 of c, compacting whenever the next position
   would reach n_ctx; returns the compactions done, -1 on a failure. */
static int stream(nx_ctx *c, int n, int64_t *max_held) {
    int compactions = 0;
    const int nv = nx_model_n_vocab(stories());
    for (int i = 0; i < n; i++) {
        if (nx_seq_n_past(c, 0) >= nx_ctx_n_ctx(c)) {
            nx_pos shift = 0;
            if (nx_kv_seq_compact(c, 0, &shift) || shift <= 0 || !runs_end_at_n_past(c)) return -1;
            compactions++;
        }
        nx_token t = rnd_tok();
        if (decode_at(c, 0, &t, 1, nx_seq_n_past(c, 0))) return -1;
        const float *l = nx_get_logits(c, -1);
        for (int k = 0; k < nv; k += 37)
            if (!isfinite(l[k])) return -1;
        struct nx_kv_stats ks;
        nx_seq_kv_stats(c, 0, &ks);
        if (max_held && (int64_t)ks.tokens_cached > *max_held) *max_held = ks.tokens_cached;
    }
    return compactions;
}

static struct nx_kv_params evicting(const char *policy, int budget, float density) {
    struct nx_kv_params k = nx_kv_default_params();
    k.policy = policy;
    k.budget = budget;
    k.density = density;
    k.regime = NX_KV_REGIME_STREAM;
    k.sink = 8;
    k.recent = 16;
    k.window = 8;
    return k;
}

TEST(an_evicting_stream_goes_ten_times_past_n_ctx) {
    const char *policies[] = {"streaming", "nexus", "h2o", "tova"};
    for (size_t p = 0; p < sizeof policies / sizeof *policies; p++) {
        struct nx_kv_params kv = evicting(policies[p], 48, 0);
        nx_ctx *c = mk(128, &kv);
        ASSERT_TRUE(c != NULL);
        int64_t held = 0;
        int n = stream(c, 1280, &held);
        if (n < 0) fprintf(stderr, "  %s: %s\n", policies[p], nx_ctx_last_error(c));
        ASSERT_TRUE(n >= 10);
        ASSERT_EQ(nx_seq_n_seen(c, 0), 1280);
        ASSERT_TRUE(nx_seq_n_past(c, 0) <= 128);
        ASSERT_TRUE(held <= 48 + 16 + 8);
        nx_ctx_free(c);
    }
}

TEST(a_density_budget_counts_every_token_seen) {
    struct nx_kv_params kv = evicting("streaming", 0, 0.25f);
    nx_ctx *c = mk(256, &kv);
    ASSERT_TRUE(c != NULL);
    ASSERT_TRUE(stream(c, 600, NULL) >= 1);
    struct nx_kv_stats ks;
    nx_seq_kv_stats(c, 0, &ks);
    /* a quarter of the 600 seen, not of the compacted n_past */
    ASSERT_TRUE(ks.tokens_cached >= 140);
    ASSERT_TRUE(ks.tokens_cached <= 150 + 16);
    nx_ctx_free(c);
}

TEST(a_saved_state_keeps_what_was_seen) {
    const int nv = nx_model_n_vocab(stories());
    struct nx_kv_params kv = evicting("streaming", 40, 0);
    nx_ctx *a = mk(96, &kv), *b = mk(96, &kv);
    ASSERT_TRUE(a && b);
    ASSERT_TRUE(stream(a, 300, NULL) >= 1);
    char path[512], err[256];
    test_tmp_path("compact.nxs", path, sizeof path);
    ASSERT_OK(nx_seq_state_save(a, 0, path, NULL, 0, err, sizeof err));
    size_t ulen = 0;
    ASSERT_OK(nx_seq_state_load(b, 1, path, NULL, 0, &ulen, err, sizeof err));
    ASSERT_EQ(nx_seq_n_seen(b, 1), nx_seq_n_seen(a, 0));
    ASSERT_EQ(nx_seq_n_past(b, 1), nx_seq_n_past(a, 0));
    nx_token t = rnd_tok();
    ASSERT_OK(decode_at(a, 0, &t, 1, nx_seq_n_past(a, 0)));
    ASSERT_OK(decode_at(b, 1, &t, 1, nx_seq_n_past(b, 1)));
    ASSERT_TRUE(memcmp(nx_get_logits(a, -1), nx_get_logits(b, -1), sizeof(float) * nv) == 0);
    /* ending the sequence forgets what it had seen */
    ASSERT_OK(nx_kv_seq_rm(b, 1, -1, -1));
    ASSERT_EQ(nx_seq_n_seen(b, 1), 0);
    nx_ctx_free(a);
    nx_ctx_free(b);
    remove(path);
}

TEST_MAIN
