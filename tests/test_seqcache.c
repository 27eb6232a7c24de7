/*
 * test_seqcache.c - the longest-common-prefix sequence cache: the trie against a brute-force
 * oracle over thousands of random inserts, removals and lookups (small alphabets, so prefixes
 * overlap a lot); end to end on stories260K: reused prefixes give bit-identical logits to a
 * fresh prefill, the returned match is the longest and right, shared blocks are never freed
 * while a live sequence uses them, the pool's free count is back to its start at the end, and
 * the counters add up.
 */
#include <math.h>
#include <stdlib.h>

#include "core/nx_base.h"
#include "kv/kv_cache.h"
#include "kv/seqcache.h"
#include "model/context.h"
#include "nexus.h"
#include "test.h"

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

/* ---- trie vs oracle ---- */

enum { MAXLEN = 40 };
struct oracle {
    bool used[SC_MAX_SLOTS];
    int32_t len[SC_MAX_SLOTS];
    nx_token tok[SC_MAX_SLOTS][MAXLEN];
};

static int32_t lcp(const nx_token *a, int32_t na, const nx_token *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

static void trie_random(int alphabet) {
    struct sc_trie t;
    ASSERT_OK(sc_trie_init(&t, SC_MAX_SLOTS * MAXLEN + 1));
    struct oracle o;
    memset(&o, 0, sizeof o);
    nx_token q[MAXLEN];
    for (int step = 0; step < 20000; step++) {
        int s = (int)rnd(SC_MAX_SLOTS);
        uint32_t op = rnd(10);
        if (op < 3) {
            if (o.used[s]) {
                sc_trie_remove(&t, s, o.tok[s], o.len[s]);
                o.used[s] = false;
            }
            /* often start from another slot's sequence, to share prefixes */
            int32_t n = 1 + (int32_t)rnd(MAXLEN);
            int from = (int)rnd(SC_MAX_SLOTS);
            int32_t keep = o.used[from] ? (int32_t)rnd((uint32_t)o.len[from] + 1) : 0;
            for (int32_t i = 0; i < n; i++)
                o.tok[s][i] = i < keep ? o.tok[from][i] : (nx_token)rnd((uint32_t)alphabet);
            o.len[s] = n;
            o.used[s] = true;
            sc_trie_insert(&t, s, o.tok[s], n);
        } else if (op < 4) {
            if (o.used[s]) {
                sc_trie_remove(&t, s, o.tok[s], o.len[s]);
                o.used[s] = false;
            }
        } else {
            int32_t n = 1 + (int32_t)rnd(MAXLEN);
            int from = (int)rnd(SC_MAX_SLOTS);
            int32_t keep = o.used[from] ? (int32_t)rnd((uint32_t)o.len[from] + 1) : 0;
            for (int32_t i = 0; i < n; i++)
                q[i] = i < keep ? o.tok[from][i] : (nx_token)rnd((uint32_t)alphabet);
            uint32_t mask = 0;
            int32_t got = sc_trie_lookup(&t, q, n, &mask);
            int32_t best = 0;
            uint32_t best_mask = 0;
            for (int k = 0; k < SC_MAX_SLOTS; k++) {
                if (!o.used[k]) continue;
                int32_t l = lcp(q, n, o.tok[k], o.len[k]);
                if (l > best) {
                    best = l;
                    best_mask = 0;
                }
                if (l == best && l > 0) best_mask |= 1u << k;
            }
            if (got != best) FAILF("step %d: lookup %d, oracle %d", step, got, best);
            if (mask != best_mask) FAILF("step %d: mask %08x, oracle %08x", step, mask, best_mask);
        }
    }
    /* remove everything: every node back on the free list */
    for (int s = 0; s < SC_MAX_SLOTS; s++)
        if (o.used[s]) sc_trie_remove(&t, s, o.tok[s], o.len[s]);
    ASSERT_EQ(t.n_free, t.cap - 1);
    ASSERT_EQ(t.nodes[0].child, -1);
    sc_trie_free(&t);
}
TEST(trie_matches_oracle_alphabet_2) { trie_random(2); }
TEST(trie_matches_oracle_alphabet_5) { trie_random(5); }
TEST(trie_matches_oracle_alphabet_1000) { trie_random(1000); }

/* ---- end to end ---- */

static nx_model *g_m;
static nx_model *stories(void) {
    if (!g_m) {
        char p[512];
        snprintf(p, sizeof p, "%s/models/stories260K/stories260K.gguf", test_shared());
        char err[256];
        if (nx_model_load(p, NULL, &g_m, err, sizeof err)) fprintf(stderr, "  %s\n", err);
    }
    return g_m;
}

static nx_ctx *make_ctx(const nx_model *m, int n_ctx, int extra, int block) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.kv_block = block;
    cp.kv_extra_tokens = extra;
    cp.n_threads = cp.n_threads_batch = 1;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) fprintf(stderr, "  ctx: %s\n", err);
    return c;
}

/* every block a live table holds is referenced, not on the free stack */
static bool live_blocks_held(struct kv_cache *kv) {
    int nt = kv->p.n_layer * kv->p.n_head_kv;
    for (int ti = 0; ti < nt; ti++)
        for (int32_t i = 0; i < kv->tables[ti].n_blocks; i++) {
            int32_t b = kv->tables[ti].blocks[i];
            if (kv->refs[b] < 1) return false;
            for (int64_t f = 0; f < kv->n_free; f++)
                if (kv->free_ids[f] == b) return false;
        }
    return true;
}

/* Random requests built from a few shared "system prompts" and random tails (continuations of
   earlier requests too); each is prefilled through the cache and compared with a fresh
   context's prefill; the sequence (sometimes with generated tokens) is stored. */
TEST(seqcache_random_requests_match_fresh_prefill) {
    nx_model *m = stories();
    ASSERT_TRUE(m != NULL);
    enum { NCTX = 160, NREQ = 120 };
    nx_ctx *c = make_ctx(m, NCTX, 2 * NCTX, 8);
    nx_ctx *fresh = make_ctx(m, NCTX, 0, 8);
    ASSERT_TRUE(c && fresh);
    struct kv_cache *kv = ctx_kv_cache(c);
    const int64_t free0 = kv->n_free;
    nx_seqcache *sc = NULL;
    ASSERT_EQ(nx_seqcache_init(c, 0, &sc), NX_STATUS_INVALID_ARG);
    ASSERT_OK(nx_seqcache_init(c, 4, &sc)); /* few slots: many drops */
    nx_token sys[3][40];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 40; i++) sys[k][i] = 1 + (nx_token)rnd(511);
    nx_token req[NCTX], prev[NCTX];
    int32_t prev_n = 0;
    int64_t reused_total = 0, hits = 0;
    for (int r = 0; r < NREQ; r++) {
        int32_t n = 0;
        uint32_t kind = rnd(3);
        if (kind == 0 && prev_n > 0) {
            int32_t keep = 1 + (int32_t)rnd((uint32_t)prev_n);
            memcpy(req, prev, sizeof(nx_token) * (size_t)keep);
            n = keep;
        } else {
            int k = (int)rnd(3);
            int32_t keep = 1 + (int32_t)rnd(40);
            memcpy(req, sys[k], sizeof(nx_token) * (size_t)keep);
            n = keep;
        }
        int32_t tail = 1 + (int32_t)rnd(40);
        for (int32_t i = 0; i < tail && n < NCTX - 10; i++) req[n++] = 1 + (nx_token)rnd(511);
        /* the oracle: the longest prefix any stored slot holds */
        int slot = -1;
        int32_t L = seqcache_lookup(sc, req, n, &slot);
        int32_t best = 0;
        for (int s = 0; s < 4; s++) {
            int32_t sn;
            const nx_token *st = seqcache_slot_tokens(sc, s, &sn);
            if (st) best = NX_MAX(best, lcp(req, n, st, sn));
        }
        if (L != best) FAILF("request %d: lookup %d, oracle %d", r, L, best);
        if (L > 0) {
            int32_t sn;
            const nx_token *st = seqcache_slot_tokens(sc, slot, &sn);
            ASSERT_TRUE(st != NULL && lcp(req, n, st, sn) == L);
        }
        int32_t reused = -1;
        ASSERT_OK(nx_seqcache_prefill(sc, req, n, true, &reused));
        ASSERT_EQ(reused, L < n ? L : n - 1);
        reused_total += reused;
        hits += reused > 0;
        ASSERT_TRUE(live_blocks_held(kv));
        ASSERT_EQ(nx_ctx_n_past(c), n);
        /* bit-identical to a fresh prefill of the whole request */
        nx_ctx_reset(fresh);
        ASSERT_OK(nx_decode(fresh, req, n, true));
        for (int32_t i = reused; i < n; i++)
            if (memcmp(nx_get_logits(c, i - reused), nx_get_logits(fresh, i), sizeof(float) * 512))
                FAILF("request %d: logits of token %d differ (reused %d)", r, i, reused);
        /* sometimes generate a few tokens before storing */
        int32_t g = (int32_t)rnd(3);
        for (int32_t i = 0; i < g; i++) {
            req[n] = 1 + (nx_token)rnd(511);
            ASSERT_OK(nx_decode(c, &req[n], 1, false));
            n++;
        }
        ASSERT_OK(nx_seqcache_store(sc, req, n));
        memcpy(prev, req, sizeof(nx_token) * (size_t)n);
        prev_n = n;
        ASSERT_TRUE(live_blocks_held(kv));
        /* in use + free = pool, always */
        ASSERT_EQ(kv_blocks_in_use(kv) + kv->n_free, kv->p.n_blocks);
    }
    struct nx_seqcache_stats st;
    nx_seqcache_stats(sc, &st);
    ASSERT_EQ(st.lookups, NREQ);
    ASSERT_EQ(st.hits, hits);
    ASSERT_EQ(st.tokens_reused, reused_total);
    ASSERT_TRUE(st.hits > NREQ / 3);
    ASSERT_TRUE(st.lookup_max_seconds < 0.01);
    if (getenv("NX_TEST_VERBOSE"))
        fprintf(stderr, "  %lld/%lld hits, %lld tokens reused, %lld prefilled, mean lookup %.2f us\n",
                (long long)st.hits, (long long)st.lookups, (long long)st.tokens_reused,
                (long long)st.tokens_prefilled, 1e6 * st.lookup_seconds / (double)st.lookups);
    /* dropping the cache frees nothing the live sequence holds */
    int32_t n_live = nx_ctx_n_past(c);
    nx_seqcache_free(sc);
    ASSERT_TRUE(live_blocks_held(kv));
    ASSERT_EQ(nx_ctx_n_past(c), n_live);
    ASSERT_OK(nx_decode(c, &req[0], 1, false));
    nx_ctx_reset(c);
    ASSERT_EQ(kv->n_free, free0);
    ASSERT_EQ(kv->ext_refs, 0);
    nx_ctx_free(c);
    nx_ctx_free(fresh);
}

/* A stored sequence that the live one keeps extending: the shared, partly filled block is
   copied before the first write, so the slot still holds the original KV. Also: store refuses
   sequences with gaps; init accepts evicting contexts; rm/shift on shared blocks copy first. */
TEST(seqcache_copy_on_write_and_refusals) {
    nx_model *m = stories();
    ASSERT_TRUE(m != NULL);
    nx_ctx *c = make_ctx(m, 128, 256, 8);
    nx_ctx *fresh = make_ctx(m, 128, 0, 8);
    nx_seqcache *sc = NULL;
    ASSERT_OK(nx_seqcache_init(c, 32, &sc));
    nx_token a[60];
    for (int i = 0; i < 60; i++) a[i] = 1 + (nx_token)rnd(511);
    ASSERT_OK(nx_seqcache_prefill(sc, a, 21, false, NULL));
    ASSERT_OK(nx_seqcache_store(sc, a, 21));
    /* keep decoding into the shared last block (21 % 8 != 0) */
    ASSERT_OK(nx_decode(c, a + 21, 10, false));
    /* a rm in the middle and a shift of shared blocks copy them first */
    ASSERT_OK(nx_seq_rm(c, 3, 6));
    ASSERT_OK(nx_seq_shift(c, 28, -1, 5));
    /* a new request with the stored prefix: bit-identical to fresh */
    nx_token b[40];
    memcpy(b, a, sizeof(nx_token) * 21);
    for (int i = 21; i < 40; i++) b[i] = 1 + (nx_token)rnd(511);
    int32_t reused = 0;
    ASSERT_OK(nx_seqcache_prefill(sc, b, 40, false, &reused));
    ASSERT_EQ(reused, 21);
    ASSERT_OK(nx_decode(fresh, b, 40, false));
    ASSERT_EQ(memcmp(nx_get_logits(c, -1), nx_get_logits(fresh, -1), sizeof(float) * 512), 0);
    /* store with a gap refused */
    ASSERT_OK(nx_seq_rm(c, 5, 6));
    ASSERT_EQ(nx_seqcache_store(sc, b, 40), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_seqcache_store(sc, b, 39), NX_STATUS_INVALID_ARG);
    nx_seqcache_free(sc);
    nx_ctx_reset(c);
    ASSERT_EQ(ctx_kv_cache(c)->n_free, ctx_kv_cache(c)->p.n_blocks);
    /* evicting contexts are accepted (cached blocks stay immutable: test_multiseq) */
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 128;
    cp.kv.policy = "streaming";
    cp.kv.budget = 64;
    nx_ctx *ev = NULL;
    char err[256];
    ASSERT_OK(nx_ctx_init(m, &cp, &ev, err, sizeof err));
    ASSERT_OK(nx_seqcache_init(ev, 8, &sc));
    nx_seqcache_free(sc);
    nx_ctx_free(ev);
    nx_ctx_free(c);
    nx_ctx_free(fresh);
}

/* Sum of the accumulated attention (H2O's statistics) over sequence seq's tables, divided by
   the query heads per KV head: the number of query rows whose attention was summed, the same
   for every table (each row's softmax sums to one). Its spread over the tables into *spread. */
static double acc_rows(nx_ctx *c, int seq, double *spread) {
    struct kv_cache *kv = ctx_kv_cache(c);
    const nx_model *m = stories();
    double g = (double)nx_model_n_head(m) / nx_model_n_head_kv(m), lo = INFINITY, hi = -INFINITY;
    for (int l = 0; l < kv->p.n_layer; l++)
        for (int h = 0; h < kv->p.n_head_kv; h++) {
            const struct kv_table *t = kv_seq_table(kv, seq, l, h);
            double sum = 0;
            for (int64_t i = 0; i < t->n_tokens; i++)
                sum += kv_block_acc(kv, kv_slot_block(kv, t, i))[i % kv->p.block];
            lo = fmin(lo, sum / g);
            hi = fmax(hi, sum / g);
        }
    *spread = hi - lo;
    return hi;
}

/* H2O's accumulated attention is each request's own: blocks reused through the sequence cache
   (on the same sequence id after a reset, and on another sequence) bring no attention that an
   earlier request paid. */
TEST(seqcache_h2o_statistics_are_per_request) {
    nx_model *m = stories();
    ASSERT_TRUE(m != NULL);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 128;
    cp.n_seq_max = 2;
    cp.kv_block = 8;
    cp.kv_extra_tokens = 256;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.kv.policy = "h2o";
    cp.kv.budget = 120; /* accumulates, never evicts here */
    nx_ctx *c = NULL;
    char err[256];
    ASSERT_OK(nx_ctx_init(m, &cp, &c, err, sizeof err));
    nx_seqcache *sc = NULL;
    ASSERT_OK(nx_seqcache_init(c, 8, &sc));
    nx_token a[64];
    for (int i = 0; i < 64; i++) a[i] = 1 + (nx_token)rnd(511);
    double spread;
    /* request 1: 40 prompt rows, then 8 more decoded one at a time */
    ASSERT_OK(nx_seqcache_prefill(sc, a, 40, false, NULL));
    ASSERT_NEAR(acc_rows(c, 0, &spread), 40, 1e-3);
    ASSERT_NEAR(spread, 0, 1e-3);
    for (int i = 40; i < 48; i++) ASSERT_OK(nx_decode(c, a + i, 1, false));
    ASSERT_NEAR(acc_rows(c, 0, &spread), 48, 1e-3);
    ASSERT_OK(nx_seqcache_store(sc, a, 48));
    /* request 2 on the same sequence: 48 tokens reused, one row decoded: its statistics are
       that one row's attention, not 49 rows' */
    int32_t reused = 0;
    ASSERT_OK(nx_seqcache_prefill(sc, a, 49, false, &reused));
    ASSERT_EQ(reused, 48);
    ASSERT_NEAR(acc_rows(c, 0, &spread), 1, 1e-3);
    ASSERT_NEAR(spread, 0, 1e-3);
    /* request 3 on sequence 1 while sequence 0 lives on: its own again */
    ASSERT_OK(nx_seqcache_prefill_seq(sc, 1, a, 50, false, &reused));
    ASSERT_EQ(reused, 48);
    ASSERT_NEAR(acc_rows(c, 1, &spread), 50 - reused, 1e-3);
    /* sequence 0 kept counting its own rows meanwhile */
    ASSERT_OK(nx_decode(c, a + 49, 1, false));
    ASSERT_NEAR(acc_rows(c, 0, &spread), 2, 1e-3);
    nx_seqcache_free(sc);
    nx_ctx_free(c);
}

/* Without spare room the slots give way: the live sequence can always reach n_ctx. */
TEST(seqcache_slots_yield_to_live_sequence) {
    nx_model *m = stories();
    ASSERT_TRUE(m != NULL);
    nx_ctx *c = make_ctx(m, 64, 0, 8);
    nx_seqcache *sc = NULL;
    ASSERT_OK(nx_seqcache_init(c, 32, &sc));
    nx_token a[64];
    for (int k = 0; k < 5; k++) {
        for (int i = 0; i < 64; i++) a[i] = 1 + (nx_token)rnd(511);
        ASSERT_OK(nx_seqcache_prefill(sc, a, 30, false, NULL));
        ASSERT_OK(nx_seqcache_store(sc, a, 30));
        ASSERT_OK(nx_decode(c, a + 30, 34, false)); /* up to n_ctx: must fit */
        ASSERT_EQ(nx_ctx_n_past(c), 64);
    }
    nx_seqcache_free(sc);
    nx_ctx_reset(c);
    ASSERT_EQ(ctx_kv_cache(c)->n_free, ctx_kv_cache(c)->p.n_blocks);
    nx_ctx_free(c);
}

static void free_model(void) { nx_model_free(g_m); }
__attribute__((constructor)) static void reg_cleanup(void) { atexit(free_model); }

TEST_MAIN
