/*
 * test_encoder.c - BERT-family encoders (bert, nomic-bert) end to end: random-weight models
 * written by mkmodel, run through include/nexus.h (nx_embed_tokens, nx_embed, nx_rerank_score)
 * and compared with the double-precision reference encoder (tests/support/ref_encoder.c) for
 * F32, F16 and Q8_0 weights; pooling modes, token types, L2 normalisation, thread-count
 * invariance, the text path, the routing interface (rt_embedder / rt_reranker), sensitivity
 * checks (a reference with one convention flipped must be far outside the tolerance), and bad
 * files and inputs giving clear errors.
 *
 * Tolerances (max |engine - reference| over the elements of an L2-normalised 64-d embedding,
 * relative for unnormalised ones, or of a reranker logit), per weight type in TOL below with the
 * values measured on this machine; the last test prints the largest differences of a run.
 * Sensitivity: every reference variant must differ from the engine by more than 5x the F32
 * tolerance.
 */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/nx_base.h"
#include "gguf/gguf.h"
#include "kern/kern.h"
#include "nexus.h"
#include "route/embed.h"
#include "support/ref_encoder.h"
#include "support/tmpdir.h"
#include "test.h"
#include "support/cli.h"
#include "model/mkmodel.h"

/* ---- models ---- */

#define E_DIM 64

struct spec {
    const char *arch;  /* bert | nomic-bert */
    const char *type;  /* f32 f16 q8_0 */
    bool rerank;
    bool fused;
    int pooling;       /* 0 / 1 mean, 2 cls */
    const char *tokenizer;
    uint64_t seed;
    float scale;       /* weight scale (0 = 1) */
    int embd, ff;      /* 0 = E_DIM, 128 */
};

/* Write the model described by s; returns its path (in buf) or NULL. */
static const char *make_model(const struct spec *s, char *buf, size_t cap) {
    struct mkmodel_params p;
    mkmodel_default_params(&p);
    p.arch = s->arch;
    p.wtype = s->type;
    p.n_layer = 2;
    p.n_embd = s->embd ? s->embd : E_DIM;
    p.n_head = 4;
    p.n_head_kv = 4;
    p.n_ff = s->ff ? s->ff : 128;
    p.n_vocab = s->tokenizer ? 0 : 300;
    p.n_ctx_train = 48;
    p.rope_base = 0;
    p.seed = s->seed ? s->seed : 7;
    p.rerank = s->rerank;
    p.qkv_fused = s->fused;
    p.pooling = s->pooling;
    p.tokenizer_from = s->tokenizer;
    p.n_threads = 1;
    if (s->scale > 0) p.weight_scale = s->scale;
    char name[128];
    snprintf(name, sizeof name, "%s_%s_%d%d%d_%llu_%g_%d_%d%s.gguf", s->arch, s->type, s->rerank,
             s->fused, s->pooling, (unsigned long long)p.seed, (double)p.weight_scale, p.n_embd,
             p.n_ff, s->tokenizer ? "_bge" : "");
    struct nx_err err;
    if (mkmodel_write(&p, test_tmp_path(name, buf, cap), &err) != NX_STATUS_OK) {
        fprintf(stderr, "  mkmodel: %s\n", err.msg);
        return NULL;
    }
    return buf;
}

static nx_model *load(const char *path) {
    char err[512];
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m, err, sizeof err) != NX_STATUS_OK)
        fprintf(stderr, "  load %s: %s\n", path, err);
    return m;
}

static struct ref_encoder *load_ref(const char *path) {
    struct ref_encoder *r = NULL;
    struct nx_err err;
    if (ref_encoder_load(path, &r, &err) != NX_STATUS_OK) fprintf(stderr, "  ref: %s\n", err.msg);
    return r;
}

/* Deterministic token sequence: [CLS] = 101, random ids in [104, 300), [SEP] = 102; types 0 up
 * to and including the middle [SEP], 1 after it when pair. */
static int make_tokens(uint64_t seed, int n, bool pair, int32_t *tok, int32_t *types) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (int i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = 104 + (int32_t)(x % 196);
        types[i] = 0;
    }
    tok[0] = 101;
    tok[n - 1] = 102;
    if (pair) {
        int mid = n / 2;
        tok[mid] = 102;
        for (int i = mid + 1; i < n; i++) types[i] = 1;
    }
    return n;
}

static double max_diff(const float *a, const double *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Tolerances per weight type, with the largest error measured over every test here. */
struct tol {
    const char *type;
    double embd;  /* normalised embedding elements */
    double logit; /* reranker logit */
};
static const struct tol TOL[] = {
    /* measured (AVX2 and NX_KERNELS=ref kernels): f32 embd 1.1e-07 logit 3.0e-07; f16 embd
       1.1e-07 logit 1.9e-07 (F16 weights are converted exactly, activations stay F32); q8_0
       embd 6.7e-03 logit 6.4e-03 (activations quantized to Q8_0 before each product) */
    {"f32", 2e-6, 5e-6},
    {"f16", 2e-6, 5e-6},
    {"q8_0", 2e-2, 2e-2},
    {"q4_k", 1e-2, 1e-2},  /* measured embd 2.5e-03 (activations quantized to Q8_K) */
    {"bf16", 2e-6, 5e-6},  /* measured embd 9.8e-08 */
    {"q4_0", 2e-2, 2e-2},  /* measured embd 4.3e-03 (activations quantized to Q8_0) */
};

static const struct tol *tol_for(const char *type) {
    for (size_t i = 0; i < NX_ARRAY_LEN(TOL); i++)
        if (strcmp(TOL[i].type, type) == 0) return &TOL[i];
    return &TOL[0];
}

static double g_worst[NX_ARRAY_LEN(TOL)][2]; /* per TOL entry: embd, logit (printed by the last test) */

static void note(const char *type, int which, double d) {
    for (size_t i = 0; i < NX_ARRAY_LEN(TOL); i++)
        if (strcmp(TOL[i].type, type) == 0) g_worst[i][which] = fmax(g_worst[i][which], d);
}

/* Embeddings of several sequences and pooling modes against the reference. */
static void check_embed_dims(const char *arch, const char *type, bool fused, int embd, int ff) {
    char path[256];
    struct spec s = {.arch = arch, .type = type, .fused = fused, .embd = embd, .ff = ff};
    ASSERT_TRUE(make_model(&s, path, sizeof path) != NULL);
    nx_model *m = load(path);
    struct ref_encoder *r = load_ref(path);
    ASSERT_TRUE(m && r);
    ASSERT_TRUE(nx_model_is_encoder(m));
    const int dim = embd ? embd : E_DIM;
    ASSERT_EQ(nx_model_n_embd(m), dim);
    ASSERT_EQ(nx_model_pooling(m), NX_POOLING_MEAN);
    const double tol = tol_for(type)->embd;
    const int lens[] = {2, 7, 23, 48};
    for (size_t li = 0; li < NX_ARRAY_LEN(lens); li++) {
        int32_t tok[48], ty[48];
        int n = make_tokens(li + 3, lens[li], li % 2 == 1, tok, ty);
        for (int pooling = NX_POOLING_MEAN; pooling <= NX_POOLING_LAST; pooling++) {
            for (int norm = 0; norm < 2; norm++) {
                struct nx_embed_params p = nx_embed_default_params();
                p.pooling = pooling;
                p.normalize = norm;
                float out[256];
                double ref[256];
                char err[256];
                ASSERT_OK(nx_embed_tokens(m, tok, ty, n, &p, out, dim, err, sizeof err));
                ASSERT_EQ(ref_encoder_embed(r, tok, ty, n, pooling, norm, ref), 0);
                /* unnormalised vectors are LayerNorm outputs (norm ~ sqrt(E)): relative */
                double scale = 1.0;
                if (!norm) {
                    double s2 = 0;
                    for (int i = 0; i < dim; i++) s2 += ref[i] * ref[i];
                    scale = sqrt(s2);
                }
                double d = max_diff(out, ref, dim) / scale;
                note(type, 0, d);
                if (!(d <= tol))
                    FAILF("%s %s n=%d pooling=%d norm=%d: max diff %.3g > %.3g", arch, type, n,
                          pooling, norm, d, tol);
            }
        }
    }
    ref_encoder_free(r);
    nx_model_free(m);
}

static void check_embed(const char *arch, const char *type, bool fused) {
    check_embed_dims(arch, type, fused, 0, 0);
}

TEST(bert_f32_matches_reference) { check_embed("bert", "f32", false); }
TEST(bert_f16_matches_reference) { check_embed("bert", "f16", false); }
TEST(bert_q8_0_matches_reference) { check_embed("bert", "q8_0", false); }
TEST(bert_fused_qkv_matches_reference) { check_embed("bert", "f32", true); }
TEST(nomic_f32_matches_reference) { check_embed("nomic-bert", "f32", false); }
TEST(nomic_f16_matches_reference) { check_embed("nomic-bert", "f16", false); }
TEST(nomic_q8_0_matches_reference) { check_embed("nomic-bert", "q8_0", false); }
/* K-quants need rows of 256: a wider model */
TEST(bert_q4_k_matches_reference) { check_embed_dims("bert", "q4_k", false, 256, 256); }
TEST(nomic_bf16_matches_reference) { check_embed_dims("nomic-bert", "bf16", false, 0, 0); }
TEST(bert_q4_0_matches_reference) { check_embed("bert", "q4_0", false); }

/* Reranker: the classification-head logit against the reference, by tokens and by text. */
static void check_rerank(const char *type, bool fused) {
    char path[256];
    struct spec s = {.arch = "bert", .type = type, .rerank = true, .fused = fused};
    ASSERT_TRUE(make_model(&s, path, sizeof path) != NULL);
    nx_model *m = load(path);
    struct ref_encoder *r = load_ref(path);
    ASSERT_TRUE(m && r);
    ASSERT_EQ(nx_model_pooling(m), NX_POOLING_RANK);
    ASSERT_EQ(nx_model_n_cls_out(m), 1);
    const double tol = tol_for(type)->logit;
    for (int k = 0; k < 4; k++) {
        int32_t tok[48], ty[48];
        int n = make_tokens(k + 11, 9 + 10 * k, true, tok, ty);
        float out[1];
        double ref[1];
        ASSERT_OK(nx_embed_tokens(m, tok, ty, n, NULL, out, 1, NULL, 0));
        ASSERT_EQ(ref_encoder_embed(r, tok, ty, n, NX_POOLING_RANK, false, ref), 0);
        note(type, 1, fabs(out[0] - ref[0]));
        if (!(fabs(out[0] - ref[0]) <= tol))
            FAILF("%s rerank n=%d: %.6f vs %.6f", type, n, out[0], ref[0]);
    }
    /* text path: [CLS] q [SEP] d [SEP] with types 0 / 1 */
    const char *q = "ab cd", *d = "efg, hi!";
    nx_token tq[16], td[16];
    int nq = nx_tokenize(m, q, strlen(q), tq, 16, false, false);
    int nd = nx_tokenize(m, d, strlen(d), td, 16, false, false);
    ASSERT_TRUE(nq > 0 && nd > 0);
    int32_t tok[40], ty[40];
    int n = 0;
    tok[n] = 101, ty[n++] = 0;
    for (int i = 0; i < nq; i++) tok[n] = tq[i], ty[n++] = 0;
    tok[n] = 102, ty[n++] = 0;
    for (int i = 0; i < nd; i++) tok[n] = td[i], ty[n++] = 1;
    tok[n] = 102, ty[n++] = 1;
    float score;
    double ref;
    char err[256];
    ASSERT_OK(nx_rerank_score(m, q, d, NULL, &score, err, sizeof err));
    ASSERT_EQ(ref_encoder_embed(r, tok, ty, n, NX_POOLING_RANK, false, &ref), 0);
    ASSERT_NEAR(score, ref, tol);
    /* the types matter: all-zero types give another score */
    double ref0;
    ref_encoder_set_variant(r, REF_ENC_VAR_TYPES_ZERO);
    ASSERT_EQ(ref_encoder_embed(r, tok, ty, n, NX_POOLING_RANK, false, &ref0), 0);
    if (tol < 1e-4) ASSERT_TRUE(fabs(ref0 - ref) > 100 * tol);
    ref_encoder_free(r);
    nx_model_free(m);
}

TEST(rerank_f32_matches_reference) { check_rerank("f32", false); }
TEST(rerank_f16_fused_matches_reference) { check_rerank("f16", true); }
TEST(rerank_q8_0_matches_reference) { check_rerank("q8_0", false); }

/* A reference with one convention flipped must land far outside the tolerance: the comparison
 * can fail. */
TEST(reference_variants_are_detected) {
    struct {
        const char *arch;
        bool rerank;
        unsigned variant;
        float scale;
    } cases[] = {
        {"bert", false, REF_ENC_VAR_CAUSAL, 1},     {"bert", false, REF_ENC_VAR_GELU_TANH, 1},
        {"bert", true, REF_ENC_VAR_GELU_TANH, 2},
        {"bert", false, REF_ENC_VAR_TYPES_ZERO, 1}, {"bert", false, REF_ENC_VAR_PRE_NORM, 1},
        {"nomic-bert", false, REF_ENC_VAR_ROPE_PAIRS, 1},
        {"nomic-bert", false, REF_ENC_VAR_CAUSAL, 1}, {"bert", true, REF_ENC_VAR_NO_TANH, 1},
    };
    for (size_t c = 0; c < NX_ARRAY_LEN(cases); c++) {
        char path[256];
        struct spec s = {.arch = cases[c].arch, .type = "f32", .rerank = cases[c].rerank,
                         .scale = cases[c].scale};
        ASSERT_TRUE(make_model(&s, path, sizeof path) != NULL);
        nx_model *m = load(path);
        struct ref_encoder *r = load_ref(path);
        ASSERT_TRUE(m && r);
        ref_encoder_set_variant(r, cases[c].variant);
        int32_t tok[20], ty[20];
        int n = make_tokens(5, 20, true, tok, ty);
        float out[E_DIM];
        double ref[E_DIM];
        int pooling = cases[c].rerank ? NX_POOLING_RANK : NX_POOLING_MEAN;
        int dim = cases[c].rerank ? 1 : E_DIM;
        struct nx_embed_params p = nx_embed_default_params();
        p.pooling = pooling;
        ASSERT_OK(nx_embed_tokens(m, tok, ty, n, &p, out, dim, NULL, 0));
        ASSERT_EQ(ref_encoder_embed(r, tok, ty, n, pooling, true, ref), 0);
        double d = max_diff(out, ref, dim);
        if (!(d > 5 * TOL[0].embd)) {
            fprintf(stderr, "  %s:%d: variant %u of %s (scale %g): diff %.3g not detectable\n",
                    __FILE__, __LINE__, cases[c].variant, cases[c].arch, cases[c].scale, d);
            g_test_failed = 1;
        }
        ref_encoder_free(r);
        nx_model_free(m);
    }
}

TEST(token_types_and_normalisation) {
    char path[256];
    struct spec s = {.arch = "bert", .type = "f32"};
    ASSERT_TRUE(make_model(&s, path, sizeof path) != NULL);
    nx_model *m = load(path);
    ASSERT_TRUE(m != NULL);
    int32_t tok[12], ty[12], zero[12] = {0};
    int n = make_tokens(9, 12, true, tok, ty);
    float a[E_DIM], b[E_DIM], c[E_DIM];
    ASSERT_OK(nx_embed_tokens(m, tok, ty, n, NULL, a, E_DIM, NULL, 0));
    ASSERT_OK(nx_embed_tokens(m, tok, zero, n, NULL, b, E_DIM, NULL, 0));
    ASSERT_OK(nx_embed_tokens(m, tok, NULL, n, NULL, c, E_DIM, NULL, 0));
    double dab = 0, dbc = 0, na = 0;
    for (int i = 0; i < E_DIM; i++) {
        dab = fmax(dab, fabs(a[i] - b[i]));
        dbc = fmax(dbc, fabs(b[i] - c[i]));
        na += (double)a[i] * a[i];
    }
    ASSERT_TRUE(dab > 1e-3); /* types change the embedding */
    ASSERT_TRUE(dbc == 0);   /* NULL types = all type 0 */
    ASSERT_NEAR(sqrt(na), 1.0, 1e-6);
    struct nx_embed_params p = nx_embed_default_params();
    p.normalize = false;
    ASSERT_OK(nx_embed_tokens(m, tok, ty, n, &p, b, E_DIM, NULL, 0));
    double nb = 0;
    for (int i = 0; i < E_DIM; i++) nb += (double)b[i] * b[i];
    ASSERT_TRUE(fabs(sqrt(nb) - 1.0) > 0.1);
    for (int i = 0; i < E_DIM; i++) ASSERT_NEAR(b[i] / sqrt(nb), a[i], 1e-6);
    nx_model_free(m);
}

/* 1 and 3 threads, with the default minimum work per thread (this tiny model then runs on
 * one) and with every product and the attention split over all threads (minimum 0). */
TEST(thread_count_invariance) {
    const char *archs[] = {"bert", "nomic-bert"};
    for (int k = 0; k < 4; k++) {
        kern_set_min_ns_per_thread(k < 2 ? -1 : 0);
        char path[256];
        struct spec s = {.arch = archs[k % 2], .type = "q8_0"};
        ASSERT_TRUE(make_model(&s, path, sizeof path) != NULL);
        nx_model *m = load(path);
        ASSERT_TRUE(m != NULL);
        int32_t tok[33], ty[33];
        int n = make_tokens(21, 33, false, tok, ty);
        float a[E_DIM], b[E_DIM];
        struct nx_embed_params p = nx_embed_default_params();
        ASSERT_OK(nx_embed_tokens(m, tok, ty, n, &p, a, E_DIM, NULL, 0));
        p.n_threads = 3;
        ASSERT_OK(nx_embed_tokens(m, tok, ty, n, &p, b, E_DIM, NULL, 0));
        ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
        nx_model_free(m);
    }
    kern_set_min_ns_per_thread(-1);
}

/* Weights used in place from the file mapping give the same results as weights read in. */
TEST(mmap_load_matches) {
    char path[256];
    struct spec s = {.arch = "nomic-bert", .type = "q8_0"};
    ASSERT_TRUE(make_model(&s, path, sizeof path) != NULL);
    nx_model *a = load(path), *b = NULL;
    struct nx_model_params mp = nx_model_default_params();
    mp.use_mmap = true;
    char err[512];
    ASSERT_OK(nx_model_load(path, &mp, &b, err, sizeof err));
    ASSERT_TRUE(a && b);
    ASSERT_EQ(nx_model_weight_bytes(a), nx_model_weight_bytes(b));
    float x[E_DIM], y[E_DIM];
    ASSERT_OK(nx_embed(a, "mapped weights", NULL, x, E_DIM, NULL, 0));
    ASSERT_OK(nx_embed(b, "mapped weights", NULL, y, E_DIM, NULL, 0));
    ASSERT_TRUE(memcmp(x, y, sizeof x) == 0);
    ASSERT_STR_EQ(nx_model_arch(b), "nomic-bert");
    nx_model_free(a);
    nx_model_free(b);
}

/* nx_embed on text = nx_embed_tokens on [CLS] + word pieces + [SEP], with the bge vocabulary;
 * truncation keeps [CLS] and [SEP]; the file's CLS pooling is used. */
TEST(text_path_with_bge_vocab) {
    char vocab[512], path[256];
    snprintf(vocab, sizeof vocab, "%s/models/vocab/ggml-vocab-bert-bge.gguf", test_shared());
    struct spec s = {.arch = "bert", .type = "f16", .pooling = 2, .tokenizer = vocab};
    ASSERT_TRUE(make_model(&s, path, sizeof path) != NULL);
    nx_model *m = load(path);
    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(nx_model_pooling(m), NX_POOLING_CLS);
    ASSERT_EQ(nx_model_n_vocab(m), 30522);
    const char *text = "Hello, world! Tool routing with WordPiece.";
    nx_token wp[64];
    int n = nx_tokenize(m, text, strlen(text), wp, 64, false, false);
    ASSERT_TRUE(n > 5);
    ASSERT_EQ(wp[0], 7592); /* "hello" in bert-base-uncased */
    int32_t seq[66];
    seq[0] = 101;
    memcpy(seq + 1, wp, (size_t)n * sizeof *seq);
    seq[n + 1] = 102;
    float a[E_DIM], b[E_DIM];
    ASSERT_OK(nx_embed(m, text, NULL, a, E_DIM, NULL, 0));
    ASSERT_OK(nx_embed_tokens(m, seq, NULL, n + 2, NULL, b, E_DIM, NULL, 0));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    /* a text longer than the 48 positions is truncated to 46 word pieces + [CLS] [SEP] */
    char longtext[2048] = "";
    for (int i = 0; i < 60; i++) strcat(longtext, "hello ");
    ASSERT_OK(nx_embed(m, longtext, NULL, a, E_DIM, NULL, 0));
    int32_t lseq[48];
    lseq[0] = 101;
    for (int i = 1; i < 47; i++) lseq[i] = 7592;
    lseq[47] = 102;
    ASSERT_OK(nx_embed_tokens(m, lseq, NULL, 48, NULL, b, E_DIM, NULL, 0));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    /* empty text: [CLS] [SEP] */
    int32_t e2[2] = {101, 102};
    ASSERT_OK(nx_embed(m, "", NULL, a, E_DIM, NULL, 0));
    ASSERT_OK(nx_embed_tokens(m, e2, NULL, 2, NULL, b, E_DIM, NULL, 0));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    nx_model_free(m);
}

/* The routing interface: rt_embedder_open / rt_reranker_open on GGUF encoders. */
TEST(route_embedder_and_reranker) {
    char bert[256], nomic[256], rr[256];
    struct spec sb = {.arch = "bert", .type = "f32"};
    struct spec sn = {.arch = "nomic-bert", .type = "f16"};
    struct spec sr = {.arch = "bert", .type = "f32", .rerank = true};
    ASSERT_TRUE(make_model(&sb, bert, sizeof bert) && make_model(&sn, nomic, sizeof nomic) &&
                make_model(&sr, rr, sizeof rr));
    char err[512];
    float a[E_DIM], b[E_DIM];
    /* bert: the text as is */
    rt_embedder *e = NULL;
    rt_embedder_open(bert, &e, err, sizeof err);
    if (!e) FAILF("rt_embedder_open: %s", err);
    ASSERT_STR_EQ(e->name, "bert");
    ASSERT_EQ(e->dim, E_DIM);
    nx_model *m = load(bert);
    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(e->embed(e, "abc de", RT_QUERY, a, err, sizeof err), 0);
    ASSERT_OK(nx_embed(m, "abc de", NULL, b, E_DIM, NULL, 0));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    nx_model_free(m);
    rt_embedder_free(e);
    /* nomic-bert: task prefixes */
    rt_embedder_open(nomic, &e, err, sizeof err);
    if (!e) FAILF("rt_embedder_open: %s", err);
    ASSERT_STR_EQ(e->name, "nomic-bert");
    m = load(nomic);
    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(e->embed(e, "abc de", RT_QUERY, a, err, sizeof err), 0);
    ASSERT_OK(nx_embed(m, "search_query: abc de", NULL, b, E_DIM, NULL, 0));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    ASSERT_EQ(e->embed(e, "abc de", RT_DOCUMENT, a, err, sizeof err), 0);
    ASSERT_OK(nx_embed(m, "search_document: abc de", NULL, b, E_DIM, NULL, 0));
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    nx_model_free(m);
    rt_embedder_free(e);
    /* the reranker */
    rt_reranker *r = NULL;
    rt_reranker_open(rr, &r, err, sizeof err);
    if (!r) FAILF("rt_reranker_open: %s", err);
    m = load(rr);
    ASSERT_TRUE(m != NULL);
    float s1, s2;
    ASSERT_EQ(r->score(r, "get weather", "weather forecast for a city", &s1, err, sizeof err), 0);
    ASSERT_OK(nx_rerank_score(m, "get weather", "weather forecast for a city", NULL, &s2, NULL,
                              0));
    ASSERT_TRUE(s1 == s2);
    nx_model_free(m);
    rt_reranker_free(r);
    /* wrong roles are refused with a message */
    rt_embedder *no_e = NULL;
    rt_reranker *no_r = NULL;
    ASSERT_EQ(rt_embedder_open(rr, &no_e, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(no_e == NULL);
    ASSERT_TRUE(strstr(err, "reranker") != NULL);
    ASSERT_EQ(rt_reranker_open(bert, &no_r, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(no_r == NULL);
    ASSERT_TRUE(strstr(err, "classification head") != NULL);
    char llama[512];
    snprintf(llama, sizeof llama, "%s/models/stories260K/stories260K.gguf", test_shared());
    ASSERT_EQ(rt_embedder_open(llama, &no_e, err, sizeof err), NX_STATUS_UNSUPPORTED);
    ASSERT_TRUE(no_e == NULL);
    ASSERT_TRUE(strstr(err, "not an encoder") != NULL);
}

TEST(bad_inputs_give_errors) {
    char path[256], rr[256];
    struct spec s = {.arch = "bert", .type = "f32"};
    struct spec sr = {.arch = "bert", .type = "f32", .rerank = true};
    ASSERT_TRUE(make_model(&s, path, sizeof path) && make_model(&sr, rr, sizeof rr));
    nx_model *m = load(path);
    ASSERT_TRUE(m != NULL);
    char err[512];
    float out[E_DIM];
    int32_t tok[50], ty[50];
    make_tokens(1, 50, true, tok, ty);
    ASSERT_EQ(nx_embed_tokens(m, tok, ty, 49, NULL, out, E_DIM, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "token count 49") != NULL);
    ASSERT_EQ(nx_embed_tokens(m, tok, ty, 0, NULL, out, E_DIM, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    tok[3] = 300;
    ASSERT_EQ(nx_embed_tokens(m, tok, ty, 10, NULL, out, E_DIM, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "token 300 at position 3") != NULL);
    tok[3] = 120;
    ty[4] = 2;
    ASSERT_EQ(nx_embed_tokens(m, tok, ty, 10, NULL, out, E_DIM, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "token type 2") != NULL);
    ty[4] = 0;
    ASSERT_EQ(nx_embed_tokens(m, tok, ty, 10, NULL, out, E_DIM - 1, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    struct nx_embed_params p = nx_embed_default_params();
    p.pooling = NX_POOLING_RANK;
    ASSERT_EQ(nx_embed_tokens(m, tok, ty, 10, &p, out, E_DIM, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "classification head") != NULL);
    p.pooling = NX_POOLING_NONE;
    ASSERT_EQ(nx_embed_tokens(m, tok, ty, 10, &p, out, E_DIM, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    float score;
    ASSERT_EQ(nx_rerank_score(m, "a", "b", NULL, &score, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    /* no decoder contexts on an encoder */
    nx_ctx *c = NULL;
    ASSERT_TRUE(nx_ctx_init(m, NULL, &c, err, sizeof err) != NX_STATUS_OK);
    ASSERT_TRUE(c == NULL);
    ASSERT_TRUE(strstr(err, "encoder model") != NULL);
    nx_model_free(m);
    /* decoder models are not encoders */
    char llama[512];
    snprintf(llama, sizeof llama, "%s/models/stories260K/stories260K.gguf", test_shared());
    m = load(llama);
    ASSERT_TRUE(m != NULL);
    ASSERT_TRUE(!nx_model_is_encoder(m));
    ASSERT_EQ(nx_embed(m, "hello", NULL, out, E_DIM, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "not an encoder") != NULL);
    nx_model_free(m);
    /* over-long rerank pairs are truncated, not refused */
    m = load(rr);
    ASSERT_TRUE(m != NULL);
    char longq[1024] = "";
    for (int i = 0; i < 80; i++) strcat(longq, "ab ");
    ASSERT_OK(nx_rerank_score(m, longq, longq, NULL, &score, err, sizeof err));
    ASSERT_TRUE(isfinite(score));
    nx_model_free(m);
}

/* Run a CLI entry point with stdout and stderr sent to files; returns its exit code and the
 * captured stdout in out (NUL-terminated, truncated to cap). */
/* `nexus ARGV...` as a process (tests/support/cli.h): its exit status; its stdout in out. */
static int run_cli(int argc, char **argv, char *out, size_t cap) {
    (void)argc;
    char *text = NULL;
    int rc = test_cli((const char *const *)argv, false, &text);
    snprintf(out, cap, "%s", text ? text : "");
    free(text);
    return rc;
}

TEST(cli_embed_and_rerank) {
    char bert[256], rr[256], out[4096];
    struct spec sb = {.arch = "bert", .type = "f32"};
    struct spec sr = {.arch = "bert", .type = "f32", .rerank = true};
    ASSERT_TRUE(make_model(&sb, bert, sizeof bert) && make_model(&sr, rr, sizeof rr));
    char *a1[] = {"embed", "-m", bert, "--pooling", "cls", "abc", "de f", NULL};
    ASSERT_EQ(run_cli(7, a1, out, sizeof out), 0);
    ASSERT_TRUE(strstr(out, "dim=64 pooling=cls norm=1.000000 values=[") != NULL);
    ASSERT_TRUE(strstr(out, "text=\"de f\"") != NULL);
    char *a2[] = {"rerank", "-m", rr, "--query", "abc", "one", "two", NULL};
    ASSERT_EQ(run_cli(7, a2, out, sizeof out), 0);
    ASSERT_TRUE(strstr(out, "0\t") == out && strstr(out, "\n1\t") && strstr(out, "best: "));
    char *a3[] = {"rerank", "-m", bert, "--query", "abc", "one", NULL}; /* not a reranker */
    ASSERT_EQ(run_cli(6, a3, out, sizeof out), 1);
    char *a4[] = {"embed", "-m", bert, "--pooling", "max", "x", NULL};
    ASSERT_TRUE(run_cli(6, a4, out, sizeof out) != 0);
}

/* ---- bad files: a copy of a good file with one defect ---- */

/* Copy src to dst; drop tensor `drop`, give tensor `transpose` the shape [ne1, ne0], drop key
 * `drop_key`, and (when set_causal) set ARCH.attention.causal = true. */
static int rewrite(const char *src, const char *dst, const char *drop, const char *transpose,
                   const char *drop_key, bool set_causal) {
    struct gguf_file *f = NULL;
    struct nx_err err;
    if (gguf_open(src, &f, &err) != NX_STATUS_OK) return -1;
    struct gguf_writer *w = gguf_writer_init();
    int rc = w ? 0 : -1;
    for (int64_t i = 0; i < gguf_n_kv(f) && rc == 0; i++) {
        const char *key = gguf_kv_key(f, i);
        if (drop_key && strcmp(key, drop_key) == 0) continue;
        nx_status st = set_causal && strstr(key, "attention.causal") ? gguf_writer_add_bool(w, key, true)
                                                                      : mkmodel_copy_kv(w, f, i, &err);
        if (st != NX_STATUS_OK) rc = -1;
    }
    for (int64_t i = 0; i < gguf_n_tensors(f) && rc == 0; i++) {
        const struct gguf_tensor *t = gguf_tensor(f, i);
        if (drop && strcmp(t->name, drop) == 0) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (transpose && strcmp(t->name, transpose) == 0) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        if (gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data, t->nbytes))
            rc = -1;
    }
    if (rc == 0 && gguf_writer_write(w, dst, &err) != NX_STATUS_OK) rc = -1;
    gguf_writer_free(w);
    gguf_close(f);
    return rc;
}

/* Loading dst must fail with `want` and a message containing `needle`. */
static void expect_load_error(const char *path, nx_status want, const char *needle) {
    char err[512] = "";
    nx_model *m = NULL;
    nx_status st = nx_model_load(path, NULL, &m, err, sizeof err);
    if (st != want || m != NULL || !strstr(err, needle))
        FAILF("load %s: status %d (want %d), message \"%s\" (want \"%s\")", path, st, want, err,
              needle);
}

TEST(bad_files_give_clear_errors) {
    char good[256], rr[256], bad[256];
    struct spec s = {.arch = "bert", .type = "f32"};
    struct spec sn = {.arch = "nomic-bert", .type = "f32"};
    struct spec sr = {.arch = "bert", .type = "f32", .rerank = true};
    ASSERT_TRUE(make_model(&s, good, sizeof good) && make_model(&sr, rr, sizeof rr));
    test_tmp_path("bad.gguf", bad, sizeof bad);

    ASSERT_EQ(rewrite(good, bad, "blk.1.attn_output_norm.bias", NULL, NULL, false), 0);
    expect_load_error(bad, NX_STATUS_FORMAT, "missing tensor 'blk.1.attn_output_norm.bias'");
    ASSERT_EQ(rewrite(good, bad, "position_embd.weight", NULL, NULL, false), 0);
    expect_load_error(bad, NX_STATUS_FORMAT, "missing tensor 'position_embd.weight'");
    ASSERT_EQ(rewrite(good, bad, NULL, "blk.0.ffn_up.weight", NULL, false), 0);
    expect_load_error(bad, NX_STATUS_FORMAT, "tensor 'blk.0.ffn_up.weight': expected shape");
    ASSERT_EQ(rewrite(good, bad, NULL, NULL, "bert.attention.layer_norm_epsilon", false), 0);
    expect_load_error(bad, NX_STATUS_FORMAT, "bert.attention.layer_norm_epsilon");
    ASSERT_EQ(rewrite(good, bad, NULL, NULL, NULL, true), 0);
    expect_load_error(bad, NX_STATUS_UNSUPPORTED, "bert.attention.causal");
    ASSERT_EQ(rewrite(rr, bad, "cls.output.bias", NULL, NULL, false), 0);
    expect_load_error(bad, NX_STATUS_FORMAT, "missing tensor 'cls.output.bias'");
    ASSERT_EQ(rewrite(rr, bad, "cls.weight", NULL, NULL, false), 0);
    expect_load_error(bad, NX_STATUS_UNSUPPORTED, "cls.weight");
    char nomic[256];
    ASSERT_TRUE(make_model(&sn, nomic, sizeof nomic) != NULL);
    ASSERT_EQ(rewrite(nomic, bad, "blk.0.ffn_gate.weight", NULL, NULL, false), 0);
    expect_load_error(bad, NX_STATUS_FORMAT, "missing tensor 'blk.0.ffn_gate.weight'");
    ASSERT_EQ(rewrite(nomic, bad, NULL, "blk.1.attn_qkv.weight", NULL, false), 0);
    expect_load_error(bad, NX_STATUS_FORMAT, "tensor 'blk.1.attn_qkv.weight'");
    /* a reranker whose pooling says rank but has no head: refused, not crashed later */
    ASSERT_EQ(rewrite(rr, bad, "cls.output.weight", NULL, NULL, false), 0);
    {
        char err[512];
        nx_model *m = NULL;
        nx_status st = nx_model_load(bad, NULL, &m, err, sizeof err);
        /* cls.output.bias without its weight is ignored; rank pooling without a head is not */
        ASSERT_EQ(st, NX_STATUS_FORMAT);
        ASSERT_TRUE(strstr(err, "pooling_type is rank") != NULL);
    }
}

/* Random byte corruptions of an encoder file (metadata and tensor-info region, where a flip
 * changes structure): every load either fails with a message or gives a model that embeds and
 * reranks without crashing. Seeded. */
TEST(corrupted_files_never_crash) {
    char good[256], bad[256];
    struct spec sr = {.arch = "bert", .type = "q8_0", .rerank = true};
    ASSERT_TRUE(make_model(&sr, good, sizeof good) != NULL);
    test_tmp_path("corrupt.gguf", bad, sizeof bad);
    FILE *f = fopen(good, "rb");
    ASSERT_TRUE(f != NULL);
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    ASSERT_TRUE(n > 4096 && n < sizeof buf);
    /* the header, keys and tensor infos come before the first tensor's data */
    struct gguf_file *gf = NULL;
    struct nx_err e;
    ASSERT_OK(gguf_open(good, &gf, &e));
    size_t meta = gguf_data_offset(gf);
    gguf_close(gf);
    static unsigned char work[1 << 20];
    uint64_t x = 12345;
    int loaded = 0, refused = 0;
    for (int it = 0; it < 150; it++) {
        memcpy(work, buf, n);
        for (int k = 0; k < 1 + it % 4; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t pos = (size_t)(x % meta);
            work[pos] ^= (unsigned char)(1u << ((x >> 32) % 8));
        }
        FILE *o = fopen(bad, "wb");
        ASSERT_TRUE(o != NULL);
        fwrite(work, 1, n, o);
        fclose(o);
        char err[512] = "";
        nx_model *m = NULL;
        if (nx_model_load(bad, NULL, &m, err, sizeof err) != NX_STATUS_OK) {
            ASSERT_TRUE(m == NULL && err[0] != 0);
            refused++;
            continue;
        }
        loaded++;
        if (nx_model_is_encoder(m)) {
            float v[4096];
            float sc;
            int dim = nx_model_n_embd(m);
            if (dim <= 4096) (void)nx_embed(m, "abc de", NULL, v, dim, err, sizeof err);
            (void)nx_rerank_score(m, "abc", "de", NULL, &sc, err, sizeof err);
        }
        nx_model_free(m);
    }
    ASSERT_TRUE(refused > 0);
    fprintf(stderr, "  corrupted files: %d refused, %d loaded\n", refused, loaded);
}

/* Last: print the largest differences measured (for the TOL table above). */
TEST(zz_report_measured_errors) {
    for (size_t i = 0; i < NX_ARRAY_LEN(TOL); i++)
        fprintf(stderr, "  measured max diff %-5s embd %.2g (tol %.2g)  logit %.2g (tol %.2g)\n",
                TOL[i].type, g_worst[i][0], TOL[i].embd, g_worst[i][1], TOL[i].logit);
}

TEST_MAIN
