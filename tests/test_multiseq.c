/*
 * test_multiseq.c - many sequences in one context (one shared KV pool, batched decode,
 * per-sequence policies), on stories260K, against independent references: every sequence
 * is mirrored by its own single-sequence context (another thread count, no batching, the
 * plain nx_decode / nx_seq_* calls), and its logits must be bit-identical to its mirror's
 * after every step. Pool invariants are checked against a recount from the tables after every
 * operation: no block on the free stack is held, every held block's reference count equals
 * the tables holding it plus the outside holders, and the blocks and contents of sequences an
 * operation does not involve do not change (so one sequence's eviction never touches
 * another's blocks, shared ones included). At the end the free count is back at its start.
 */
#include <stdlib.h>
#include <string.h>

#include "core/nx_base.h"
#include "kern/kern.h"
#include "kv/kv_cache.h"
#include "model/context.h"
#include "model/mkmodel.h"
#include "nexus.h"
#include "support/tmpdir.h"
#include "test.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng % n);
}

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

static int g_nv = 512; /* the vocabulary of the model in use (stories260K's) */
#define NV g_nv
static nx_model *g_use; /* the model mk() uses; NULL: stories260K */

static struct nx_kv_params kvp(const char *policy, int budget, int regime) {
    struct nx_kv_params k = nx_kv_default_params();
    k.policy = policy;
    k.budget = budget;
    k.regime = regime;
    k.sink = 8;
    k.recent = 8;
    k.window = 8;
    return k;
}

static nx_ctx *mk(int n_seq, int n_ctx, int extra, int threads, const struct nx_kv_params *kv) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 256;
    cp.n_seq_max = n_seq;
    cp.kv_block = 8;
    cp.kv_extra_tokens = extra;
    cp.n_threads = cp.n_threads_batch = threads;
    if (kv) cp.kv = *kv;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(g_use ? g_use : stories(), &cp, &c, err, sizeof err)) fprintf(stderr, "  ctx: %s\n", err);
    return c;
}

static bool same_logits(const float *a, const float *b) {
    return a && b && memcmp(a, b, sizeof(float) * NV) == 0;
}

/* ---- pool invariants ---- */

/* Recount references from every table of every sequence: a block is free exactly when no table
   and no outside holder has it; a held block's count = its table holders + outside holders
   (summed: ext_refs). No block id appears twice in one table. */
static bool pool_consistent(struct kv_cache *kv) {
    int32_t *cnt = calloc((size_t)kv->p.n_blocks, sizeof *cnt);
    uint8_t *is_free = calloc((size_t)kv->p.n_blocks, 1);
    bool ok = cnt && is_free;
    for (int64_t f = 0; ok && f < kv->n_free; f++) {
        int32_t b = kv->free_ids[f];
        if (is_free[b] || kv->refs[b] != 0) ok = false;
        is_free[b] = 1;
    }
    int64_t nt = (int64_t)kv->p.n_seq * kv->n_tables_seq;
    for (int64_t ti = 0; ok && ti < nt; ti++) {
        const struct kv_table *t = &kv->tables[ti];
        if (t->n_blocks != (t->n_tokens + kv->p.block - 1) / kv->p.block) ok = false;
        for (int32_t i = 0; ok && i < t->n_blocks; i++) {
            int32_t b = t->blocks[i];
            if (is_free[b]) ok = false;
            for (int32_t j = 0; j < i; j++)
                if (t->blocks[j] == b) ok = false;
            cnt[b]++;
        }
    }
    int64_t ext = 0;
    for (int64_t b = 0; ok && b < kv->p.n_blocks; b++) {
        if (is_free[b]) continue;
        if (kv->refs[b] < cnt[b] || kv->refs[b] < 1) ok = false;
        ext += kv->refs[b] - cnt[b];
    }
    if (ok && ext != kv->ext_refs) ok = false;
    if (ok && kv->n_free + 0 > kv->p.n_blocks) ok = false;
    free(cnt);
    free(is_free);
    return ok;
}

/* A fingerprint of one sequence: its block ids, token counts and the K/V/position contents of
   every slot it uses. */
static uint64_t seq_hash(struct kv_cache *kv, int seq) {
    uint64_t h = 1469598103934665603ull;
#define MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
    struct kv_table *tabs = kv_seq_tables(kv, seq);
    for (int64_t ti = 0; ti < kv->n_tables_seq; ti++) {
        const struct kv_table *t = &tabs[ti];
        MIX(t->n_tokens);
        for (int64_t i = 0; i < t->n_tokens; i++) {
            int32_t b = kv_slot_block(kv, t, i);
            size_t s = (size_t)(i % kv->p.block);
            MIX(b);
            MIX(kv_block_pos(kv, b)[s]);
            const unsigned char *k = kv_block_k(kv, b) + s * kv->row_bytes;
            const unsigned char *v = kv_block_v(kv, b) + s * kv->row_bytes;
            for (size_t j = 0; j < kv->row_bytes; j++) {
                MIX(k[j]);
                MIX(v[j]);
            }
        }
    }
#undef MIX
    return h;
}

/* ---- N batched sequences = each alone ---- */

static void batched_vs_alone(int N) {
    enum { STEPS = 6, NCTX = 256 };
    nx_ctx *c = mk(N, NCTX, 0, 2, NULL);
    ASSERT_TRUE(c != NULL);
    ASSERT_EQ(nx_ctx_n_seq_max(c), N);
    nx_ctx *ref[8];
    nx_token prompt[8][40];
    int len[8];
    for (int s = 0; s < N; s++) {
        ref[s] = mk(1, NCTX, 0, 1, NULL);
        ASSERT_TRUE(ref[s] != NULL);
        len[s] = 5 + (int)rnd(25); /* 8 prompts fit n_batch */
        for (int i = 0; i < len[s]; i++) prompt[s][i] = (nx_token)rnd(NV);
    }
    struct nx_batch b;
    ASSERT_OK(nx_batch_init(256, &b));
    /* the prompts interleaved entry by entry, logits for each sequence's last token */
    int done[8] = {0}, left = 0;
    for (int s = 0; s < N; s++) left += len[s];
    int last_entry[8];
    while (left > 0) {
        int s = (int)rnd((uint32_t)N);
        if (done[s] == len[s]) continue;
        int i = done[s]++;
        if (done[s] == len[s]) last_entry[s] = b.n_tokens;
        ASSERT_OK(nx_batch_add(&b, prompt[s][i], i, s, done[s] == len[s]));
        left--;
    }
    ASSERT_OK(nx_decode_batch(c, &b));
    for (int s = 0; s < N; s++) {
        ASSERT_OK(nx_decode(ref[s], prompt[s], len[s], false));
        ASSERT_TRUE(same_logits(nx_get_logits_ith(c, last_entry[s]), nx_get_logits(ref[s], -1)));
        ASSERT_EQ(nx_seq_n_past(c, s), len[s]);
    }
    /* generation: one token per sequence per step, each its own greedy choice */
    for (int step = 0; step < STEPS; step++) {
        nx_token next[8];
        for (int s = 0; s < N; s++) {
            const float *l = nx_get_logits(ref[s], -1);
            int best = 0;
            for (int v = 1; v < NV; v++)
                if (l[v] > l[best]) best = v;
            next[s] = best;
        }
        nx_batch_clear(&b);
        for (int s = N - 1; s >= 0; s--) ASSERT_OK(nx_batch_add(&b, next[s], len[s] + step, s, true));
        ASSERT_OK(nx_decode_batch(c, &b));
        for (int s = 0; s < N; s++) {
            ASSERT_OK(nx_decode(ref[s], &next[s], 1, false));
            ASSERT_TRUE(same_logits(nx_get_logits_ith(c, N - 1 - s), nx_get_logits(ref[s], -1)));
        }
    }
    /* per-sequence accounting: each holds its own blocks; the pool returns to full */
    struct kv_stats_check {
        struct nx_kv_stats a, r;
    } k;
    for (int s = 0; s < N; s++) {
        nx_seq_kv_stats(c, s, &k.a);
        nx_ctx_kv_stats(ref[s], &k.r);
        ASSERT_EQ(k.a.bytes_current, k.r.bytes_current);
        ASSERT_EQ(k.a.tokens_cached, len[s] + STEPS);
    }
    ASSERT_TRUE(pool_consistent(ctx_kv_cache(c)));
    for (int s = 0; s < N; s++) ASSERT_OK(nx_kv_seq_rm(c, s, -1, -1));
    ASSERT_EQ(ctx_kv_cache(c)->n_free, ctx_kv_cache(c)->p.n_blocks);
    nx_batch_free(&b);
    for (int s = 0; s < N; s++) nx_ctx_free(ref[s]);
    nx_ctx_free(c);
}

/* every operation split over both threads of the batched context (minimum work 0), so the
   decode steps of 1-2 sequences take the block-split attention and the references (one
   thread) the per-pair one */
static void batched_vs_alone_split(int N) {
    kern_set_min_ns_per_thread(0);
    batched_vs_alone(N);
    kern_set_min_ns_per_thread(-1);
}
TEST(batched_1_matches_alone) { batched_vs_alone_split(1); }
TEST(batched_2_matches_alone) { batched_vs_alone_split(2); }
TEST(batched_4_matches_alone) { batched_vs_alone_split(4); }
TEST(batched_8_matches_alone) { batched_vs_alone(8); }

/* The same on a random model of llama.cpp's Q4_K_M mix (Q4_K, one layer's attn_v / ffn_down
   and the output in Q6_K), loaded into memory (Q4_K in the AVX2 layout): batched steps of 2..8
   tokens take the small-batch K-quant kernels, the interleaved prompts the prefill tiles, the
   references the decode kernel; every sequence's logits still match its own, bit for bit. */
static void q4km_batched_vs_alone(int N) {
    struct mkmodel_params p;
    mkmodel_default_params(&p);
    p.wtype = "q4_k_m";
    p.n_vocab = 512;
    char path[512], err[256];
    struct nx_err e;
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("multiseq_q4km.gguf", path, sizeof path), &e));
    nx_model *m = NULL;
    ASSERT_OK(nx_model_load(path, NULL, &m, err, sizeof err));
    g_use = m;
    g_nv = nx_model_n_vocab(m);
    batched_vs_alone(N);
    g_use = NULL;
    g_nv = 512;
    nx_model_free(m);
}
TEST(batched_q4_k_m_3_matches_alone) { q4km_batched_vs_alone(3); }
TEST(batched_q4_k_m_8_matches_alone) { q4km_batched_vs_alone(8); }

/* ---- two policies in one context ---- */

static void two_policies(const char *pa, int ba, const char *pb, int bb, int regime) {
    enum { NCTX = 256, NPROMPT = 90, NGEN = 40 };
    struct nx_kv_params ka = kvp(pa, ba, regime), kb = kvp(pb, bb, regime);
    nx_ctx *c = mk(2, NCTX, 0, 2, NULL);
    nx_ctx *ra = mk(1, NCTX, 0, 1, &ka), *rb = mk(1, NCTX, 0, 1, &kb);
    ASSERT_TRUE(c && ra && rb);
    ASSERT_OK(nx_seq_set_kv(c, 0, &ka));
    ASSERT_OK(nx_seq_set_kv(c, 1, &kb));
    nx_token pr[2][NPROMPT];
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < NPROMPT; i++) pr[s][i] = (nx_token)rnd(NV);
    struct nx_batch b;
    ASSERT_OK(nx_batch_init(256, &b));
    for (int i = 0; i < NPROMPT; i++)
        for (int s = 0; s < 2; s++) ASSERT_OK(nx_batch_add(&b, pr[s][i], i, s, i == NPROMPT - 1));
    ASSERT_OK(nx_decode_batch(c, &b));
    ASSERT_OK(nx_decode(ra, pr[0], NPROMPT, false));
    ASSERT_OK(nx_decode(rb, pr[1], NPROMPT, false));
    ASSERT_TRUE(same_logits(nx_get_logits_ith(c, b.n_tokens - 2), nx_get_logits(ra, -1)));
    ASSERT_TRUE(same_logits(nx_get_logits_ith(c, b.n_tokens - 1), nx_get_logits(rb, -1)));
    for (int g = 0; g < NGEN; g++) {
        nx_token t[2] = {(nx_token)rnd(NV), (nx_token)rnd(NV)};
        nx_batch_clear(&b);
        ASSERT_OK(nx_batch_add(&b, t[0], NPROMPT + g, 0, true));
        ASSERT_OK(nx_batch_add(&b, t[1], NPROMPT + g, 1, true));
        ASSERT_OK(nx_decode_batch(c, &b));
        ASSERT_OK(nx_decode(ra, &t[0], 1, false));
        ASSERT_OK(nx_decode(rb, &t[1], 1, false));
        ASSERT_TRUE(same_logits(nx_get_logits_ith(c, 0), nx_get_logits(ra, -1)));
        ASSERT_TRUE(same_logits(nx_get_logits_ith(c, 1), nx_get_logits(rb, -1)));
    }
    struct nx_kv_stats s0, s1, r0, r1;
    nx_seq_kv_stats(c, 0, &s0);
    nx_seq_kv_stats(c, 1, &s1);
    nx_ctx_kv_stats(ra, &r0);
    nx_ctx_kv_stats(rb, &r1);
    ASSERT_EQ(s0.tokens_evicted, r0.tokens_evicted);
    ASSERT_EQ(s1.tokens_evicted, r1.tokens_evicted);
    ASSERT_EQ(s0.evictions, r0.evictions);
    /* the same blocks (a block's accounted bytes follow each context's default policy:
       accumulators count for an h2o context) */
    size_t bc = ctx_kv_cache(c)->block_bytes, bra = ctx_kv_cache(ra)->block_bytes,
           bbb = ctx_kv_cache(rb)->block_bytes;
    ASSERT_EQ(s0.bytes_current / bc, r0.bytes_current / bra);
    ASSERT_EQ(s1.bytes_current / bc, r1.bytes_current / bbb);
    ASSERT_EQ(s0.bytes_peak / bc, r0.bytes_peak / bra);
    ASSERT_TRUE(s0.tokens_evicted > 0 || s1.tokens_evicted > 0);
    ASSERT_TRUE(pool_consistent(ctx_kv_cache(c)));
    nx_batch_free(&b);
    nx_ctx_free(ra);
    nx_ctx_free(rb);
    nx_ctx_free(c);
}

TEST(two_policies_nexus_and_full) { two_policies("nexus", 40, "full", 0, NX_KV_REGIME_STREAM); }
TEST(two_policies_h2o_and_snapkv) { two_policies("h2o", 32, "snapkv", 48, NX_KV_REGIME_STREAM); }
TEST(two_policies_adakv_and_streaming_prefill) {
    two_policies("adakv", 40, "streaming", 32, NX_KV_REGIME_PREFILL);
}

/* ---- bad input ---- */

TEST(batch_errors_change_nothing) {
    nx_ctx *c = mk(2, 64, 0, 1, NULL);
    ASSERT_TRUE(c != NULL);
    struct nx_batch b;
    ASSERT_OK(nx_batch_init(4, &b));
    ASSERT_EQ(nx_decode_batch(c, &b), NX_STATUS_INVALID_ARG); /* empty */
    ASSERT_OK(nx_batch_add(&b, 1, 0, 0, true));
    ASSERT_OK(nx_batch_add(&b, 2, 0, 2, true)); /* sequence out of range */
    ASSERT_EQ(nx_decode_batch(c, &b), NX_STATUS_INVALID_ARG);
    ASSERT_CONTAINS(nx_ctx_last_error(c), "sequence 2");
    b.seq_id[1] = 0; /* position not after the sequence's previous entry */
    ASSERT_EQ(nx_decode_batch(c, &b), NX_STATUS_INVALID_ARG);
    b.pos[1] = 64; /* position past n_ctx */
    ASSERT_EQ(nx_decode_batch(c, &b), NX_STATUS_INVALID_ARG);
    b.pos[1] = 1;
    b.token[1] = NV; /* token out of range */
    ASSERT_EQ(nx_decode_batch(c, &b), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_seq_n_past(c, 0), 0);
    ASSERT_EQ(kv_blocks_in_use(ctx_kv_cache(c)), 0);
    b.token[1] = 2;
    ASSERT_OK(nx_decode_batch(c, &b));
    ASSERT_EQ(nx_seq_n_past(c, 0), 2);
    ASSERT_OK(nx_batch_add(&b, 3, 5, 1, false));
    ASSERT_OK(nx_batch_add(&b, 3, 6, 1, false));
    ASSERT_EQ(nx_batch_add(&b, 3, 7, 1, false), NX_STATUS_INVALID_ARG); /* full */
    ASSERT_EQ(nx_seq_n_past(c, 5), -1);
    ASSERT_EQ(nx_kv_seq_cp(c, 0, 0, -1, -1), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_kv_seq_rm(c, -1, -1, -1), NX_STATUS_INVALID_ARG);
    struct nx_kv_params bad = nx_kv_default_params();
    bad.policy = "lru";
    ASSERT_EQ(nx_seq_set_kv(c, 1, &bad), NX_STATUS_INVALID_ARG);
    nx_batch_free(&b);
    nx_ctx_free(c);
}

/* ---- randomized: many sequences, every operation, a mirror per sequence ---- */

enum { NSEQ = 5, RCTX = 160, RWIN = 8 };

struct mirror {
    nx_ctx *ref;               /* the sequence alone */
    struct nx_kv_params kv;
    nx_token toks[RCTX];       /* tokens at positions 0 .. n-1 while nothing was removed */
    int n;
    bool exact;                /* toks is the whole sequence (no rm) */
};

static const struct nx_kv_params *policy_of(int s, struct nx_kv_params *buf) {
    static const char *names[NSEQ] = {"full", "streaming", "h2o", "nexus", "snapkv"};
    static const int budgets[NSEQ] = {0, 24, 24, 32, 24};
    *buf = kvp(names[s], budgets[s], s % 2 ? NX_KV_REGIME_STREAM : NX_KV_REGIME_PREFILL);
    return buf;
}

static int64_t g_evicted; /* tokens evicted by sequences since ended */

/* End sequence s in both (fresh policy state too). */
static void end_seq(nx_ctx *c, struct mirror *mr, int s) {
    struct nx_kv_stats st;
    nx_seq_kv_stats(c, s, &st);
    g_evicted += st.tokens_evicted;
    ASSERT_OK(nx_kv_seq_rm(c, s, -1, -1));
    ASSERT_OK(nx_seq_set_kv(c, s, &mr[s].kv));
    nx_ctx_reset(mr[s].ref);
    ASSERT_OK(nx_seq_set_kv(mr[s].ref, 0, &mr[s].kv));
    mr[s].n = 0;
    mr[s].exact = true;
}

TEST(random_sequences_match_alone_and_keep_the_pool_sound) {
    g_rng = 0x2545f4914f6cdd1dull; /* independent of the tests before */
    g_evicted = 0;
    nx_ctx *c = mk(NSEQ, RCTX, 2 * RCTX, 2, NULL);
    ASSERT_TRUE(c != NULL);
    struct kv_cache *kv = ctx_kv_cache(c);
    const int64_t free0 = kv->n_free;
    nx_seqcache *sc = NULL;
    ASSERT_OK(nx_seqcache_init(c, 4, &sc));
    struct mirror mr[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        struct nx_kv_params buf;
        mr[s].kv = *policy_of(s, &buf);
        mr[s].ref = mk(1, RCTX, 0, 1, &mr[s].kv);
        ASSERT_TRUE(mr[s].ref != NULL);
        ASSERT_OK(nx_seq_set_kv(c, s, &mr[s].kv));
        mr[s].n = 0;
        mr[s].exact = true;
    }
    struct nx_batch b;
    ASSERT_OK(nx_batch_init(256, &b));
    int n_batches = 0, n_copies = 0, n_hits = 0, n_stores = 0, n_rm = 0, n_ends = 0;
    int64_t evicted_total = 0;
    for (int op = 0; op < 160; op++) {
        uint64_t before[NSEQ];
        for (int s = 0; s < NSEQ; s++) before[s] = seq_hash(kv, s);
        bool involved[NSEQ] = {false};
        uint32_t kind = rnd(20);
        if (kind < 9) {
            /* a batch over a random subset of sequences */
            int add[NSEQ] = {0}, last[NSEQ];
            nx_token tk[NSEQ][32];
            for (int s = 0; s < NSEQ; s++) {
                if (rnd(3) == 0) continue;
                int k = mr[s].n == 0 ? 10 + (int)rnd(20) : 1 + (int)rnd(8);
                if (nx_seq_n_past(c, s) + k >= RCTX) {
                    end_seq(c, mr, s);
                    before[s] = seq_hash(kv, s);
                    continue;
                }
                add[s] = k;
                for (int i = 0; i < k; i++) tk[s][i] = (nx_token)rnd(NV);
            }
            nx_batch_clear(&b);
            int done[NSEQ] = {0}, left = 0;
            for (int s = 0; s < NSEQ; s++) left += add[s];
            if (left == 0) continue;
            while (left > 0) {
                int s = (int)rnd(NSEQ);
                if (done[s] == add[s]) continue;
                int i = done[s]++;
                if (done[s] == add[s]) last[s] = b.n_tokens;
                ASSERT_OK(nx_batch_add(&b, tk[s][i], nx_seq_n_past(c, s) + i, s,
                                       done[s] == add[s]));
                left--;
            }
            ASSERT_OK(nx_decode_batch(c, &b));
            n_batches++;
            for (int s = 0; s < NSEQ; s++) {
                if (!add[s]) continue;
                involved[s] = true;
                ASSERT_OK(nx_decode(mr[s].ref, tk[s], add[s], false));
                if (!same_logits(nx_get_logits_ith(c, last[s]), nx_get_logits(mr[s].ref, -1)))
                    FAILF("op %d: sequence %d (%s) differs from its mirror after a batch", op, s,
                          mr[s].kv.policy);
                if (mr[s].n + add[s] <= RCTX) {
                    memcpy(mr[s].toks + mr[s].n, tk[s], sizeof(nx_token) * (size_t)add[s]);
                    mr[s].n += add[s];
                }
            }
        } else if (kind < 11) {
            /* copy a sequence into an empty one with the same kind of policy (blocks shared) */
            int src = (int)rnd(NSEQ), dst = (int)rnd(NSEQ);
            if (src == dst || nx_seq_n_past(c, src) == 0 || mr[src].kv.policy[0] == 'h') continue;
            end_seq(c, mr, dst);
            before[dst] = seq_hash(kv, dst);
            struct nx_kv_params dk = mr[src].kv; /* a fresh evictor of src's policy */
            ASSERT_OK(nx_seq_set_kv(c, dst, &dk));
            ASSERT_OK(nx_kv_seq_cp(c, src, dst, -1, -1));
            nx_ctx_free(mr[dst].ref);
            mr[dst].ref = mk(1, RCTX, 0, 1, &dk);
            ASSERT_TRUE(mr[dst].ref != NULL);
            ASSERT_OK(nx_seq_cp(mr[dst].ref, mr[src].ref, -1, -1));
            mr[dst].kv = dk;
            memcpy(mr[dst].toks, mr[src].toks, sizeof(nx_token) * (size_t)mr[src].n);
            mr[dst].n = mr[src].n;
            mr[dst].exact = mr[src].exact;
            ASSERT_EQ(nx_seq_n_past(c, dst), nx_ctx_n_past(mr[dst].ref));
            involved[dst] = true;
            n_copies++;
        } else if (kind < 14) {
            /* keep a sequence's prefix in the cache (refused when evicted or cut) */
            int s = (int)rnd(NSEQ);
            if (mr[s].n == 0 || mr[s].n > 64 || !mr[s].exact) continue;
            nx_status st = nx_seqcache_store_seq(sc, s, mr[s].toks, mr[s].n);
            ASSERT_TRUE(st == NX_STATUS_OK || st == NX_STATUS_INVALID_ARG);
            n_stores += st == NX_STATUS_OK;
        } else if (kind < 17) {
            /* a request into an empty sequence that starts with a cached prefix */
            int s = (int)rnd(NSEQ), slot = (int)rnd(4);
            int32_t sn = 0;
            const nx_token *st = seqcache_slot_tokens(sc, slot, &sn);
            /* not into the h2o sequence: reused blocks carry the accumulated attention of the
               sequence that stored them, which its mirror cannot have */
            if (!st || mr[s].kv.policy[0] == 'h') continue;
            end_seq(c, mr, s);
            before[s] = seq_hash(kv, s);
            nx_token req[80];
            /* a reused prefix within every budget: the mirror decodes it as a call of its own,
               which must not evict */
            int32_t keep = 1 + (int32_t)rnd((uint32_t)NX_MIN(sn, 20)), extra = RWIN + (int32_t)rnd(12);
            memcpy(req, st, sizeof(nx_token) * (size_t)keep);
            for (int32_t i = 0; i < extra; i++) req[keep + i] = (nx_token)rnd(NV);
            int32_t reused = -1;
            ASSERT_OK(nx_seqcache_prefill_seq(sc, s, req, keep + extra, false, &reused));
            ASSERT_EQ(reused, keep);
            if (reused > 0) ASSERT_OK(nx_decode(mr[s].ref, req, reused, false));
            ASSERT_OK(nx_decode(mr[s].ref, req + reused, keep + extra - reused, false));
            if (!same_logits(nx_get_logits(c, -1), nx_get_logits(mr[s].ref, -1)))
                FAILF("op %d: sequence %d (%s) differs from its mirror after a cache hit", op, s,
                      mr[s].kv.policy);
            memcpy(mr[s].toks, req, sizeof(nx_token) * (size_t)(keep + extra));
            mr[s].n = keep + extra;
            involved[s] = true;
            n_hits++;
        } else if (kind < 19) {
            /* remove a sequence's tail */
            int s = (int)rnd(NSEQ);
            int32_t np = nx_seq_n_past(c, s);
            if (np < 2) continue;
            int32_t p0 = np / 2 + (int32_t)rnd((uint32_t)(np / 2));
            ASSERT_OK(nx_kv_seq_rm(c, s, p0, -1));
            ASSERT_OK(nx_seq_rm(mr[s].ref, p0, -1));
            ASSERT_EQ(nx_seq_n_past(c, s), nx_ctx_n_past(mr[s].ref));
            mr[s].exact = false;
            involved[s] = true;
            n_rm++;
        } else {
            int s = (int)rnd(NSEQ);
            end_seq(c, mr, s);
            involved[s] = true;
            n_ends++;
        }
        if (!pool_consistent(kv)) FAILF("op %d: the pool's references do not add up", op);
        for (int s = 0; s < NSEQ; s++)
            if (!involved[s] && seq_hash(kv, s) != before[s])
                FAILF("op %d: sequence %d changed without taking part", op, s);
        if (g_test_failed) break;
    }
    for (int s = 0; s < NSEQ; s++) {
        struct nx_kv_stats st;
        nx_seq_kv_stats(c, s, &st);
        evicted_total += st.tokens_evicted;
    }
    evicted_total += g_evicted;
    fprintf(stderr, "  %d batches, %d copies, %d stores, %d cache hits, %d rm, %d ends, %lld "
                    "evicted\n",
            n_batches, n_copies, n_stores, n_hits, n_rm, n_ends, (long long)evicted_total);
    ASSERT_TRUE(n_batches > 40 && n_copies > 3 && n_hits > 3 && n_rm > 3 && evicted_total > 0);
    for (int s = 0; s < NSEQ; s++) ASSERT_OK(nx_kv_seq_rm(c, s, -1, -1));
    nx_seqcache_free(sc);
    ASSERT_TRUE(pool_consistent(kv));
    ASSERT_EQ(kv->n_free, free0);
    ASSERT_EQ(kv->n_free, kv->p.n_blocks);
    nx_batch_free(&b);
    for (int s = 0; s < NSEQ; s++) nx_ctx_free(mr[s].ref);
    nx_ctx_free(c);
}

/* An evicting sequence reusing a cached prefix copies the shared blocks it compacts: the slot
   keeps the original rows, so a second request for the same prefix still matches a fresh
   prefill. */
TEST(evicting_sequence_copies_cached_blocks) {
    struct nx_kv_params ev = kvp("snapkv", 24, NX_KV_REGIME_PREFILL);
    nx_ctx *c = mk(2, 128, 128, 1, NULL);
    nx_ctx *fresh = mk(1, 128, 0, 1, NULL);
    ASSERT_TRUE(c && fresh);
    nx_seqcache *sc = NULL;
    ASSERT_OK(nx_seqcache_init(c, 2, &sc));
    nx_token t[80];
    for (int i = 0; i < 80; i++) t[i] = (nx_token)rnd(NV);
    ASSERT_OK(nx_decode(c, t, 36, false)); /* sequence 0, full policy */
    ASSERT_OK(nx_seqcache_store(sc, t, 36));
    ASSERT_OK(nx_seq_set_kv(c, 1, &ev));
    int32_t reused = 0;
    ASSERT_OK(nx_seqcache_prefill_seq(sc, 1, t, 80, false, &reused));
    ASSERT_EQ(reused, 36);
    struct nx_kv_stats st;
    nx_seq_kv_stats(c, 1, &st);
    ASSERT_TRUE(st.tokens_evicted > 0);
    /* the cached prefix is intact: a new request in sequence 0 matches a fresh prefill */
    ASSERT_OK(nx_seqcache_prefill(sc, t, 50, false, &reused));
    ASSERT_EQ(reused, 36);
    ASSERT_OK(nx_decode(fresh, t, 50, false));
    ASSERT_TRUE(same_logits(nx_get_logits(c, -1), nx_get_logits(fresh, -1)));
    ASSERT_TRUE(pool_consistent(ctx_kv_cache(c)));
    nx_seqcache_free(sc);
    nx_ctx_reset(c);
    ASSERT_EQ(ctx_kv_cache(c)->n_free, ctx_kv_cache(c)->p.n_blocks);
    nx_ctx_free(fresh);
    nx_ctx_free(c);
}

/* Contexts share the process's thread pool: two contexts with different thread counts, used
   alternately, give the same logits as each alone. */
TEST(contexts_share_the_thread_pool) {
    nx_ctx *a = mk(1, 64, 0, 1, NULL), *b3 = mk(1, 64, 0, 3, NULL);
    ASSERT_TRUE(a && b3);
    nx_token t[20];
    for (int i = 0; i < 20; i++) t[i] = (nx_token)rnd(NV);
    ASSERT_OK(nx_decode(a, t, 20, false));
    ASSERT_OK(nx_decode(b3, t, 20, false));
    ASSERT_TRUE(same_logits(nx_get_logits(a, -1), nx_get_logits(b3, -1)));
    for (int i = 0; i < 5; i++) {
        ASSERT_OK(nx_decode(b3, &t[i], 1, false));
        ASSERT_OK(nx_decode(a, &t[i], 1, false));
        ASSERT_TRUE(same_logits(nx_get_logits(a, -1), nx_get_logits(b3, -1)));
    }
    nx_ctx_free(a);
    ASSERT_OK(nx_ctx_set_threads(b3, 4, 4));
    ASSERT_OK(nx_decode(b3, t, 3, false));
    nx_ctx_free(b3);
}

TEST_MAIN
