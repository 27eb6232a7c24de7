/*
 * test_arch.c - the engine against an independent double-precision reference, per architecture
 * and weight type; the random-model writer (mkmodel); the reference itself against a golden
 * greedy run of stories260K.
 *
 * DESIGN
 * - The oracle (tests/support/ref_forward.c) is validated first, on a real model with golden
 *   ids and logits computed elsewhere (numpy float64). Everything else is compared to it.
 * - Models are random (src/model/mkmodel.c), written to a temporary directory, small enough for
 *   the O(n^2) double reference: 2 layers, n_embd 256 (so K-quant rows of 256 work), 4 heads /
 *   2 kv heads, ff 512, vocab 320; qwen3 uses head_dim 128 != n_embd / n_head.
 * - Error metric: max over all positions and vocab entries of |engine - reference|, divided by
 *   the standard deviation of the reference logits (about 2 for these models). Per-type
 *   tolerances are in g_types below with the reason for each. test_arch_sensitivity proves each
 *   tolerance is tight enough: it runs the reference with one convention flipped (rope pair
 *   layout, rope_freqs ignored, rope base, qwen2 biases, qwen3 q/k norms, GQA head mapping) and
 *   requires the flipped model to miss the correct one by several times the tolerance.
 * - NX_TEST_VERBOSE=1 prints the measured error of every case.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "kern/kern.h"
#include "kern/types.h"
#include "kv/kvblock.h"
#include "model/model.h"
#include "model/fingerprint.h"
#include "nexus.h"
#include "support/ref_forward.h"
#include "support/tmpdir.h"
#include "test.h"
#include "model/mkmodel.h"

/* ---------------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------------- */

static bool verbose(void) {
    const char *v = getenv("NX_TEST_VERBOSE");
    return v && *v && strcmp(v, "0") != 0;
}

static size_t argmax_d(const double *x, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++) {
        if (x[i] > x[best]) best = i;
    }
    return best;
}

static double std_dev(const double *x, size_t n) {
    double mean = 0.0, ss = 0.0;
    for (size_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)n;
    for (size_t i = 0; i < n; i++) ss += (x[i] - mean) * (x[i] - mean);
    return sqrt(ss / (double)n);
}

/* max |a - b| / std(b) over n values. */
static double rel_err(const double *a, const double *b, size_t n) {
    double mx = 0.0;
    for (size_t i = 0; i < n; i++) mx = fmax(mx, fabs(a[i] - b[i]));
    return mx / std_dev(b, n);
}

static double rms_rel(const double *a, const double *b, size_t n) {
    double ss = 0.0;
    for (size_t i = 0; i < n; i++) ss += (a[i] - b[i]) * (a[i] - b[i]);
    return sqrt(ss / (double)n) / std_dev(b, n);
}

/* Deterministic pseudo-random token ids in [3, n_vocab) (no specials). */
static void make_tokens(int32_t *tok, int n, int n_vocab, uint32_t seed) {
    uint32_t s = seed * 2654435761u + 12345u;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        tok[i] = 3 + (int32_t)((s >> 8) % (uint32_t)(n_vocab - 3));
    }
}

static bool files_equal(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    bool eq = fa && fb;
    while (eq) {
        int ca = fgetc(fa), cb = fgetc(fb);
        if (ca != cb) eq = false;
        if (ca == EOF || cb == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return eq;
}

/* ---------------------------------------------------------------------------------------------
 * (a) The oracle on stories260K: golden greedy ids and first-step logits
 * ------------------------------------------------------------------------------------------- */

TEST(ref_stories260k_golden) {
    char path[512], gpath[512];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", test_shared());
    snprintf(gpath, sizeof gpath, "%s/models/stories260K/golden_greedy_from_bos.json",
             test_shared());
    json_error_t jerr;
    json_t *golden = json_load_file(gpath, 0, &jerr);
    if (!golden) FAILF("cannot read %s: %s", gpath, jerr.text);
    json_t *ids = json_object_get(golden, "generated_ids");
    json_t *top5 = json_object_get(golden, "first_step_top5");
    int bos = (int)json_integer_value(json_object_get(golden, "bos"));
    size_t n_gen = json_array_size(ids);
    if (n_gen < 32 || json_array_size(top5) != 5) {
        json_decref(golden);
        FAILF("golden file has %zu ids", n_gen);
    }

    struct ref_model *m = NULL;
    struct nx_err err;
    nx_status st = ref_model_load(path, &m, &err);
    if (st != NX_STATUS_OK) {
        json_decref(golden);
        FAILF("ref_model_load: %s", err.msg);
    }
    int nv = ref_model_n_vocab(m);
    /* Teacher forcing: one pass over [BOS, g0 .. g_{n-2}]; greedy decoding reproduces the
     * golden run iff argmax(logits[t]) == g_t at every t. */
    int n = (int)n_gen;
    int32_t *tok = malloc(sizeof *tok * (size_t)n);
    double *logits = malloc(sizeof *logits * (size_t)n * (size_t)nv);
    ASSERT_TRUE(tok && logits);
    tok[0] = bos;
    for (int i = 1; i < n; i++) tok[i] = (int32_t)json_integer_value(json_array_get(ids, i - 1));
    ASSERT_EQ(ref_forward(m, tok, n, logits), 0);
    int mismatch = -1;
    for (int t = 0; t < n && mismatch < 0; t++) {
        int want = (int)json_integer_value(json_array_get(ids, (size_t)t));
        if ((int)argmax_d(logits + (size_t)t * (size_t)nv, (size_t)nv) != want) mismatch = t;
    }
    double worst = 0.0;
    for (size_t i = 0; i < 5; i++) {
        json_t *pair = json_array_get(top5, i);
        int id = (int)json_integer_value(json_array_get(pair, 0));
        double want = json_number_value(json_array_get(pair, 1));
        worst = fmax(worst, fabs(logits[id] - want));
    }
    if (verbose()) {
        fprintf(stderr, "  stories260K: %d greedy ids checked, top-5 max |diff| %.3g\n", n,
                worst);
    }
    free(tok);
    free(logits);
    ref_model_free(m);
    json_decref(golden);
    ASSERT_EQ(mismatch, -1);
    ASSERT_TRUE(worst < 1e-4);
}

/* ---------------------------------------------------------------------------------------------
 * mkmodel: determinism, names/shapes/types, errors
 * ------------------------------------------------------------------------------------------- */

TEST(mkmodel_deterministic) {
    struct mkmodel_params p;
    struct nx_err err;
    char a[256], b[256], c[256];
    mkmodel_default_params(&p);
    p.wtype = "q4_k";
    p.n_vocab = 4352; /* token_embd has > 1M elements: generated by several threads */
    p.n_threads = 1;
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("det_a.gguf", a, sizeof a), &err));
    p.n_threads = 3;
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("det_b.gguf", b, sizeof b), &err));
    ASSERT_TRUE(files_equal(a, b));
    p.seed = 2;
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("det_c.gguf", c, sizeof c), &err));
    ASSERT_TRUE(!files_equal(a, c));
}

/* Find tensor name in f and check its type and shape. */
#define CHECK_TENSOR(f, name, type_, ne0, ne1) \
    do { \
        const struct gguf_tensor *t_ = gguf_find_tensor((f), (name)); \
        if (!t_) FAILF("tensor %s missing", (name)); \
        if (t_->type != (type_) || t_->ne[0] != (ne0) || t_->ne[1] != (ne1)) \
            FAILF("tensor %s: type %s [%lld, %lld], expected %s [%lld, %lld]", (name), \
                  nx_type_name(t_->type), (long long)t_->ne[0], (long long)t_->ne[1], \
                  nx_type_name(type_), (long long)(ne0), (long long)(ne1)); \
    } while (0)

TEST(mkmodel_q4_k_m_mix_and_keys) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256];
    mkmodel_default_params(&p);
    p.arch = "qwen3";
    p.n_layer = 8;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.head_dim = 128;
    p.wtype = "q4_k_m";
    p.rope_base = 0.0f;
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("mix.gguf", path, sizeof path), &err));
    struct gguf_file *f = NULL;
    ASSERT_OK(gguf_open(path, &f, &err));
    /* untied: token_embd keeps the default Q4_K, output gets Q6_K */
    CHECK_TENSOR(f, "token_embd.weight", NX_TYPE_Q4_K, 256, 320);
    CHECK_TENSOR(f, "output.weight", NX_TYPE_Q6_K, 256, 320);
    CHECK_TENSOR(f, "output_norm.weight", NX_TYPE_F32, 256, 1);
    /* use_more_bits(i, 8): i < 1 || i >= 7 || (i - 1) % 3 == 2  ->  layers 0, 3, 6, 7 */
    for (int l = 0; l < 8; l++) {
        bool more = l == 0 || l == 3 || l == 6 || l == 7;
        enum nx_type hi = more ? NX_TYPE_Q6_K : NX_TYPE_Q4_K;
        char n[64];
        snprintf(n, sizeof n, "blk.%d.attn_v.weight", l);
        CHECK_TENSOR(f, n, hi, 256, 256);
        snprintf(n, sizeof n, "blk.%d.ffn_down.weight", l);
        CHECK_TENSOR(f, n, hi, 512, 256);
        snprintf(n, sizeof n, "blk.%d.attn_q.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_Q4_K, 256, 512);
        snprintf(n, sizeof n, "blk.%d.attn_k.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_Q4_K, 256, 256);
        snprintf(n, sizeof n, "blk.%d.attn_output.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_Q4_K, 512, 256);
        snprintf(n, sizeof n, "blk.%d.ffn_gate.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_Q4_K, 256, 512);
        snprintf(n, sizeof n, "blk.%d.ffn_up.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_Q4_K, 256, 512);
        snprintf(n, sizeof n, "blk.%d.attn_q_norm.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_F32, 128, 1);
        snprintf(n, sizeof n, "blk.%d.attn_k_norm.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_F32, 128, 1);
        snprintf(n, sizeof n, "blk.%d.attn_norm.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_F32, 256, 1);
        snprintf(n, sizeof n, "blk.%d.ffn_norm.weight", l);
        CHECK_TENSOR(f, n, NX_TYPE_F32, 256, 1);
    }
    ASSERT_EQ(gguf_n_tensors(f), 3 + 8 * 11);
    uint32_t v = 0;
    float fv;
    const char *s;
    size_t len;
    ASSERT_TRUE(gguf_get_str(f, "general.architecture", &s, &len));
    ASSERT_TRUE(len == 5 && memcmp(s, "qwen3", 5) == 0);
    ASSERT_TRUE(gguf_get_u32(f, "general.file_type", &v));
    ASSERT_EQ(v, 15);
    ASSERT_TRUE(gguf_get_u32(f, "qwen3.attention.key_length", &v));
    ASSERT_EQ(v, 128);
    ASSERT_TRUE(gguf_get_u32(f, "qwen3.attention.value_length", &v));
    ASSERT_EQ(v, 128);
    ASSERT_TRUE(gguf_get_u32(f, "qwen3.rope.dimension_count", &v));
    ASSERT_EQ(v, 128);
    ASSERT_TRUE(gguf_get_u32(f, "qwen3.block_count", &v));
    ASSERT_EQ(v, 8);
    ASSERT_TRUE(gguf_get_u32(f, "qwen3.vocab_size", &v));
    ASSERT_EQ(v, 320);
    ASSERT_TRUE(gguf_get_f32(f, "qwen3.attention.layer_norm_rms_epsilon", &fv));
    ASSERT_NEAR(fv, 1e-6, 1e-12);
    ASSERT_TRUE(!gguf_get_f32(f, "qwen3.rope.freq_base", &fv)); /* rope_base 0: key omitted */
    ASSERT_TRUE(gguf_get_str(f, "tokenizer.ggml.model", &s, &len));
    ASSERT_TRUE(len == 5 && memcmp(s, "llama", 5) == 0);
    ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 3, &s, &len));
    ASSERT_TRUE(len == 6 && memcmp(s, "<0x00>", 6) == 0);
    gguf_close(f);

    /* tied llama with Llama-3 rope scaling and qwen2 biases */
    mkmodel_default_params(&p);
    p.tied_output = true;
    p.llama3_rope_scaling = true;
    p.rope_base = 500000.0f;
    p.n_head = 4; /* head_dim 64 */
    p.wtype = "q4_k_m";
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("tied.gguf", path, sizeof path), &err));
    ASSERT_OK(gguf_open(path, &f, &err));
    ASSERT_TRUE(gguf_find_tensor(f, "output.weight") == NULL);
    CHECK_TENSOR(f, "token_embd.weight", NX_TYPE_Q6_K, 256, 320);
    CHECK_TENSOR(f, "rope_freqs.weight", NX_TYPE_F32, 32, 1);
    /* Llama-3.1 rule, base 500000, head_dim 64: the highest frequencies are not scaled, the
     * lowest are divided by 8, with a smooth ramp between */
    const struct gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
    float r0, r31;
    memcpy(&r0, rf->data, 4);
    memcpy(&r31, (const char *)rf->data + 31 * 4, 4);
    ASSERT_NEAR(r0, 1.0, 0.0);
    ASSERT_NEAR(r31, 8.0, 0.0);
    ASSERT_TRUE(gguf_get_f32(f, "llama.rope.freq_base", &fv));
    ASSERT_NEAR(fv, 500000.0, 0.0);
    ASSERT_TRUE(gguf_find_key(f, "llama.attention.key_length") < 0);
    gguf_close(f);

    mkmodel_default_params(&p);
    p.arch = "qwen2";
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("qwen2.gguf", path, sizeof path), &err));
    ASSERT_OK(gguf_open(path, &f, &err));
    CHECK_TENSOR(f, "blk.1.attn_q.bias", NX_TYPE_F32, 256, 1);
    CHECK_TENSOR(f, "blk.1.attn_k.bias", NX_TYPE_F32, 128, 1);
    CHECK_TENSOR(f, "blk.1.attn_v.bias", NX_TYPE_F32, 128, 1);
    gguf_close(f);
}

TEST(mkmodel_rejects_bad_shapes) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256];
    test_tmp_path("bad.gguf", path, sizeof path);
    mkmodel_default_params(&p);
    p.n_embd = 64;
    p.n_head = 4;
    p.wtype = "q4_k";
    ASSERT_EQ(mkmodel_write(&p, path, &err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err.msg, "token_embd.weight") && strstr(err.msg, "256"));
    p.wtype = "q8_0"; /* 64 is fine for 32-blocks, but ff 500 is not */
    p.n_ff = 500;
    ASSERT_EQ(mkmodel_write(&p, path, &err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err.msg, "ffn_down") != NULL);
    mkmodel_default_params(&p);
    p.n_vocab = 258;
    ASSERT_EQ(mkmodel_write(&p, path, &err), NX_STATUS_INVALID_ARG);
    mkmodel_default_params(&p);
    p.wtype = "q3_k";
    ASSERT_EQ(mkmodel_write(&p, path, &err), NX_STATUS_INVALID_ARG);
    mkmodel_default_params(&p);
    p.n_head_kv = 3;
    ASSERT_EQ(mkmodel_write(&p, path, &err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(access(path, F_OK) != 0); /* nothing written */
}

TEST(mkmodel_tokenizer_from) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256], src[512];
    snprintf(src, sizeof src, "%s/models/stories260K/stories260K.gguf", test_shared());
    mkmodel_default_params(&p);
    p.tokenizer_from = src;
    p.n_vocab = 0; /* take the 512 tokens of stories260K */
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("tokfrom.gguf", path, sizeof path), &err));
    struct gguf_file *f = NULL, *g = NULL;
    ASSERT_OK(gguf_open(path, &f, &err));
    ASSERT_OK(gguf_open(src, &g, &err));
    CHECK_TENSOR(f, "token_embd.weight", NX_TYPE_F32, 256, 512);
    int n_tok_keys = 0;
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        const char *key = gguf_kv_key(g, i);
        if (strncmp(key, "tokenizer.", 10) != 0) continue;
        n_tok_keys++;
        ASSERT_TRUE(gguf_find_key(f, key) >= 0);
        ASSERT_EQ(gguf_kv_type(f, gguf_find_key(f, key)), gguf_kv_type(g, i));
    }
    ASSERT_EQ(n_tok_keys, 9);
    const char *s1, *s2;
    size_t l1, l2;
    ASSERT_TRUE(gguf_arr_str(f, "tokenizer.ggml.tokens", 511, &s1, &l1));
    ASSERT_TRUE(gguf_arr_str(g, "tokenizer.ggml.tokens", 511, &s2, &l2));
    ASSERT_TRUE(l1 == l2 && memcmp(s1, s2, l1) == 0);
    uint32_t pad;
    ASSERT_TRUE(gguf_get_u32(f, "tokenizer.ggml.padding_token_id", &pad));
    ASSERT_EQ(pad, 4294967295u);
    gguf_close(f);
    gguf_close(g);
    p.n_vocab = 500;
    ASSERT_EQ(mkmodel_write(&p, path, &err), NX_STATUS_INVALID_ARG);
}

/* ---------------------------------------------------------------------------------------------
 * (b) Engine vs reference, architecture x weight type
 * ------------------------------------------------------------------------------------------- */

/*
 * Tolerances, relative to the standard deviation of the reference logits (about 2 here):
 * max_rel bounds max |engine - ref| over every position and vocab entry, rms_rel the
 * root-mean-square difference, plus a least fraction of positions whose argmax agrees.
 * - F32, F16, BF16: the reference reads the very same weights (F16/BF16 are exact in double)
 *   and the engine keeps activations in F32 for these types, so only float rounding is left.
 *   1e-4 leaves a margin of ~40 for other summation orders; every argmax must agree.
 * - Q8_0, Q4_0: the engine rounds each activation vector to Q8_0 (8 bits per 32 values) before
 *   the dot products; the exact reference does not. The reference with that rounding emulated
 *   (REF_VAR_EMULATE_ACT_QUANT) lands on the engine's logits to ~1e-7 until one rounding
 *   decision flips (float vs double activations) and the difference cascades, so the
 *   comparison is against the exact reference, with limits that the emulation backs up
 *   independently of the engine (arch_calibration requires it within half of each limit).
 * - Q4_K, Q5_K, Q6_K, Q4_K_M: Q8_K activations (8 bits per 256, one scale): a bit coarser.
 * - argmax: with random weights the top two logits are often close, so quantized types need
 *   only 75% agreement.
 * Measured (max_rel / rms_rel / least argmax agreement, worst over the five archs, both kernel
 * sets, batch and one-by-one): F32 2.6e-6 / 5.0e-7 / 100%; F16 2.2e-6 / 5.0e-7 / 100%; BF16
 * 2.1e-6 / 4.8e-7 / 100%; Q8_0 0.088 / 0.019 / 96%; Q4_0 0.100 / 0.020 / 92%; Q4_K 0.126 /
 * 0.027 / 92%; Q5_K 0.135 / 0.027 / 92%; Q6_K 0.115 / 0.028 / 88%; Q4_K_M 0.137 / 0.027 / 92%.
 * What the limits catch is checked in arch_sensitivity: a wrong rope pair layout, GQA mapping,
 * missing qwen2 biases or qwen3 q/k norms miss by more than twice every limit (max_rel >= 0.93,
 * rms_rel >= 0.18); the subtler rope base x2 (0.55 / 0.105) and ignored Llama-3 rope_freqs
 * (0.05 / 0.007) are far beyond the float types' limits, which test the same conventions.
 */
struct type_case {
    const char *wtype;
    double max_rel;
    double rms_rel;
    double min_argmax_agree;
};
static const struct type_case g_types[] = {
    {"f32", 1e-4, 1e-4, 1.0},         {"f16", 1e-4, 1e-4, 1.0},
    {"bf16", 1e-4, 1e-4, 1.0},        {"q8_0", 0.25, 0.05, 0.75},
    {"q4_0", 0.25, 0.05, 0.75},       {"q4_k", 0.35, 0.07, 0.75},
    {"q5_k", 0.35, 0.07, 0.75},       {"q6_k", 0.35, 0.07, 0.75},
    {"q4_k_m", 0.35, 0.07, 0.75},
};

struct arch_case {
    const char *label;
    const char *arch;
    int head_dim;
    bool llama3_rope;
    bool tied;
    float rope_base;
    int n_tokens; /* long enough for the feature under test to matter */
};
static const struct arch_case g_archs[] = {
    {"llama", "llama", 0, false, false, 10000.0f, 24},
    /* Llama-3.1 rope scaling only changes frequencies with wavelengths > 2048 positions;
     * their angles grow with the position, so this case runs 64 tokens (ignoring rope_freqs
     * then moves the logits by 0.05 std, 500x the float limit). */
    {"llama3", "llama", 0, true, true, 500000.0f, 64},
    {"mistral", "mistral", 0, false, false, 1000000.0f, 24},
    {"qwen2", "qwen2", 0, false, true, 1000000.0f, 24},
    {"qwen3", "qwen3", 128, false, false, 1000000.0f, 24},
};

static void arch_params(struct mkmodel_params *p, const struct arch_case *a, const char *wtype) {
    mkmodel_default_params(p);
    p->arch = a->arch;
    p->head_dim = a->head_dim;
    p->llama3_rope_scaling = a->llama3_rope;
    p->tied_output = a->tied;
    p->rope_base = a->rope_base;
    p->wtype = wtype;
    p->seed = 42;
}

/*
 * Engine logits (as double) for tok[0..n) from a fresh context: one nx_decode of all tokens
 * with all_logits, or (one_by_one) n single-token calls. Returns false with msg on failure.
 */
static bool engine_logits(const char *path, const int32_t *tok, int n, int n_threads,
                          bool one_by_one, double *out, char *msg, size_t msglen) {
    nx_model *model = NULL;
    nx_ctx *ctx = NULL;
    struct nx_model_params mp = nx_model_default_params();
    if (nx_model_load(path, &mp, &model, msg, msglen) != NX_STATUS_OK) return false;
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 256;
    cp.n_threads = n_threads;
    cp.n_threads_batch = n_threads;
    cp.kv_type = NX_TYPE_F32;
    bool ok = false;
    if (nx_ctx_init(model, &cp, &ctx, msg, msglen) != NX_STATUS_OK) goto done;
    int nv = nx_model_n_vocab(model);
    for (int i = 0; i < (one_by_one ? n : 1); i++) {
        nx_status st = one_by_one ? nx_decode(ctx, tok + i, 1, false)
                                  : nx_decode(ctx, tok, n, true);
        if (st != NX_STATUS_OK) {
            snprintf(msg, msglen, "nx_decode: %s (%s)", nx_status_str(st),
                     nx_ctx_last_error(ctx));
            goto done;
        }
        for (int t = one_by_one ? i : 0; t < (one_by_one ? i + 1 : n); t++) {
            const float *lg = nx_get_logits(ctx, one_by_one ? -1 : t);
            if (!lg) {
                snprintf(msg, msglen, "nx_get_logits(%d) is NULL", t);
                goto done;
            }
            for (int j = 0; j < nv; j++) out[(size_t)t * (size_t)nv + (size_t)j] = lg[j];
        }
    }
    ok = true;
done:
    nx_ctx_free(ctx);
    nx_model_free(model);
    return ok;
}

/* Fraction of positions where the argmax of a equals that of b. */
static double argmax_agreement(const double *a, const double *b, int n, int nv) {
    int agree = 0;
    for (int t = 0; t < n; t++) {
        agree += argmax_d(a + (size_t)t * (size_t)nv, (size_t)nv) ==
                 argmax_d(b + (size_t)t * (size_t)nv, (size_t)nv);
    }
    return (double)agree / n;
}

/* Position and vocab index of the largest |a - b|, for failure messages. */
static void worst_diff(const double *a, const double *b, int n, int nv, int *pos, int *idx) {
    double mx = -1.0;
    for (int t = 0; t < n; t++) {
        for (int j = 0; j < nv; j++) {
            double d = fabs(a[(size_t)t * (size_t)nv + (size_t)j] -
                            b[(size_t)t * (size_t)nv + (size_t)j]);
            if (d > mx) {
                mx = d;
                *pos = t;
                *idx = j;
            }
        }
    }
}

/* Compare engine logits with the reference; print (always when verbose) and return pass. */
static bool judge(const char *label, const struct type_case *tc, const char *how,
                  const double *eng, const double *ref, int n, int nv) {
    size_t sz = (size_t)n * (size_t)nv;
    double e = rel_err(eng, ref, sz), r = rms_rel(eng, ref, sz);
    double agree = argmax_agreement(eng, ref, n, nv);
    bool pass = e <= tc->max_rel && r <= tc->rms_rel && agree >= tc->min_argmax_agree;
    if (!pass || verbose()) {
        int wp = 0, wi = 0;
        worst_diff(eng, ref, n, nv, &wp, &wi);
        size_t w = (size_t)wp * (size_t)nv + (size_t)wi;
        fprintf(stderr, "  %-8s %-6s %-14s max %.2e (<= %.0e) rms %.2e (<= %.0e) argmax %3.0f%% "
                "| worst: pos %d id %d engine %.5f ref %.5f%s\n", label, tc->wtype, how, e,
                tc->max_rel, r, tc->rms_rel, 100.0 * agree, wp, wi, eng[w], ref[w],
                pass ? "" : "  <-- FAIL");
    }
    return pass;
}

/*
 * One architecture x type case, with every kernel set the CPU has (the default one, and the
 * reference set when the default is SIMD): a batch decode with all logits and, when
 * one_by_one, also one token per nx_decode. Returns false (having said why) on failure.
 */
static bool run_case(const struct arch_case *a, const struct type_case *tc, bool one_by_one) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256], name[64], msg[512] = "";
    arch_params(&p, a, tc->wtype);
    snprintf(name, sizeof name, "%s_%s.gguf", a->label, tc->wtype);
    if (mkmodel_write(&p, test_tmp_path(name, path, sizeof path), &err) != NX_STATUS_OK) {
        fprintf(stderr, "  %s/%s: mkmodel: %s\n", a->label, tc->wtype, err.msg);
        return false;
    }
    struct ref_model *rm = NULL;
    if (ref_model_load(path, &rm, &err) != NX_STATUS_OK) {
        fprintf(stderr, "  %s/%s: ref load: %s\n", a->label, tc->wtype, err.msg);
        return false;
    }
    const int n = a->n_tokens, nv = ref_model_n_vocab(rm);
    const size_t sz = (size_t)n * (size_t)nv;
    int32_t tok[256];
    make_tokens(tok, n, nv, 7);
    double *ref = malloc(sz * sizeof *ref), *eng = malloc(sz * sizeof *eng);
    bool ok = ref && eng && ref_forward(rm, tok, n, ref) == 0;
    ref_model_free(rm);

    nx_kernels_force_ref(false);
    bool simd = strcmp(nx_kernels_name(), "ref") != 0;
    for (int pass = 0; ok && pass < (simd ? 2 : 1); pass++) {
        nx_kernels_force_ref(pass == 1);
        char how[32];
        for (int seq = 0; ok && seq < (one_by_one ? 2 : 1); seq++) {
            snprintf(how, sizeof how, "%s%s", nx_kernels_name(), seq ? " 1-by-1" : "");
            if (!engine_logits(path, tok, n, 1, seq, eng, msg, sizeof msg)) {
                fprintf(stderr, "  %s/%s %s: engine: %s\n", a->label, tc->wtype, how, msg);
                ok = false;
            } else {
                ok = judge(a->label, tc, how, eng, ref, n, nv);
            }
        }
    }
    nx_kernels_force_ref(false);
    free(ref);
    free(eng);
    remove(path);
    return ok;
}

TEST(arch_engine_vs_reference) {
    int failed = 0;
    for (size_t a = 0; a < NX_ARRAY_LEN(g_archs); a++) {
        for (size_t t = 0; t < NX_ARRAY_LEN(g_types); t++) {
            bool one_by_one = t == 0 || strcmp(g_types[t].wtype, "q4_k_m") == 0;
            if (!run_case(&g_archs[a], &g_types[t], one_by_one)) failed++;
        }
    }
    ASSERT_EQ(failed, 0);
}

/* rope.freq_base absent: the engine must use 10000 like the reference (a base x2 misses by
 * 0.55 std, see arch_sensitivity). Both rope layouts. */
TEST(arch_rope_base_default) {
    struct arch_case a = {"nobase", "llama", 0, false, false, 0.0f, 24};
    ASSERT_TRUE(run_case(&a, &g_types[0], false));
    a.arch = "qwen2";
    ASSERT_TRUE(run_case(&a, &g_types[0], false));
}

/* 1 and 2 threads give bit-identical logits, for a batch and for single tokens (every
 * operation split over both threads: these models are below the minimum work per thread). */
TEST(arch_threads_identical) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256], msg[512] = "";
    const char *types[] = {"f32", "bf16", "q8_0", "q4_k_m"};
    kern_set_min_ns_per_thread(0);
    for (size_t i = 0; i < NX_ARRAY_LEN(types); i++) {
        arch_params(&p, &g_archs[4], types[i]);
        ASSERT_OK(mkmodel_write(&p, test_tmp_path("threads.gguf", path, sizeof path), &err));
        const int n = 24, nv = p.n_vocab;
        int32_t tok[24];
        make_tokens(tok, n, nv, 3);
        size_t sz = (size_t)n * (size_t)nv;
        double *l1 = malloc(sz * sizeof *l1), *l2 = malloc(sz * sizeof *l2);
        ASSERT_TRUE(l1 && l2);
        for (int seq = 0; seq < 2; seq++) {
            bool ok1 = engine_logits(path, tok, n, 1, seq, l1, msg, sizeof msg);
            bool ok2 = ok1 && engine_logits(path, tok, n, 2, seq, l2, msg, sizeof msg);
            if (!ok2) {
                free(l1);
                free(l2);
                FAILF("%s: %s", types[i], msg);
            }
            if (memcmp(l1, l2, sz * sizeof *l1) != 0) {
                int wp = 0, wi = 0;
                worst_diff(l1, l2, n, nv, &wp, &wi);
                size_t w = (size_t)wp * (size_t)nv + (size_t)wi;
                double d = l1[w] - l2[w];
                free(l1);
                free(l2);
                FAILF("%s (%s): 1 vs 2 threads differ, e.g. pos %d id %d by %.3g", types[i],
                      seq ? "one token per call" : "batch", wp, wi, d);
            }
        }
        free(l1);
        free(l2);
    }
    kern_set_min_ns_per_thread(-1);
}

/*
 * A batch beyond the X4 in-place tiles' columns (100 tokens; all logits, so the output product
 * has 100 columns too) runs on prepared batches (kern_batch_cols): 1, 2 and 3 threads (every
 * operation split, the batch's columns prepared in each thread's share) and one token per call
 * (the in-place tiles, rows prepared one at a time) give bit-identical logits.
 */
TEST(arch_x4_prepared_batch_identical) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256], msg[512] = "";
    const char *types[] = {"f16", "bf16"};
    kern_set_min_ns_per_thread(0);
    for (size_t i = 0; i < NX_ARRAY_LEN(types); i++) {
        arch_params(&p, &g_archs[0], types[i]);
        p.n_layer = 2;
        ASSERT_OK(mkmodel_write(&p, test_tmp_path("x4batch.gguf", path, sizeof path), &err));
        const int n = 100, nv = p.n_vocab;
        int32_t tok[100];
        make_tokens(tok, n, nv, 9);
        size_t sz = (size_t)n * (size_t)nv;
        double *l[4];
        for (int r = 0; r < 4; r++) ASSERT_TRUE((l[r] = malloc(sz * sizeof(double))) != NULL);
        static const int threads[4] = {1, 2, 3, 2};
        for (int r = 0; r < 4; r++)
            if (!engine_logits(path, tok, n, threads[r], r == 3, l[r], msg, sizeof msg))
                FAILF("%s: %s", types[i], msg);
        if (kern_batch_cols(kern_weight_layout(NX_TYPE_F16, p.n_embd, p.n_embd), n) == 0)
            printf("  %s: no prepared batches in this kernel set (the paths still agree)\n",
                   types[i]);
        for (int r = 1; r < 4; r++)
            if (memcmp(l[0], l[r], sz * sizeof(double)) != 0) {
                int wp = 0, wi = 0;
                worst_diff(l[0], l[r], n, nv, &wp, &wi);
                FAILF("%s: %d threads%s differ from 1 thread, e.g. pos %d id %d", types[i],
                      threads[r], r == 3 ? " one token per call" : "", wp, wi);
            }
        for (int r = 0; r < 4; r++) free(l[r]);
    }
    kern_set_min_ns_per_thread(-1);
}

/*
 * Q4_K weights copied into memory take the kernels' layout (Q4_K_IL on AVX2); with mmap they
 * stay as in the file. Logits (a batch, then single tokens) are bit-identical either way, and
 * the model fingerprint of KV block files is the same.
 */
TEST(arch_q4k_memory_layout_matches_mmap) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256], msg[256];
    mkmodel_default_params(&p);
    p.wtype = "q4_k"; /* token_embd too: the embedding lookup reads the in-memory layout */
    p.n_layer = 2;
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("q4k_layout.gguf", path, sizeof path), &err));
    nx_model *m[2] = {NULL, NULL};
    nx_ctx *c[2] = {NULL, NULL};
    const float *lg[2][2];
    int32_t tok[7];
    make_tokens(tok, 7, p.n_vocab, 11);
    for (int i = 0; i < 2; i++) {
        struct nx_model_params mp = nx_model_default_params();
        mp.use_mmap = i == 1;
        ASSERT_OK(nx_model_load(path, &mp, &m[i], msg, sizeof msg));
        struct nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = 64;
        cp.n_threads = cp.n_threads_batch = 2;
        ASSERT_OK(nx_ctx_init(m[i], &cp, &c[i], msg, sizeof msg));
        ASSERT_OK(nx_decode(c[i], tok, 6, false));
        lg[i][0] = nx_get_logits(c[i], -1);
    }
    enum nx_type want = kern_weight_layout(NX_TYPE_Q4_K, m[0]->layers[0].wq.ne0, m[0]->layers[0].wq.ne1);
    ASSERT_EQ(m[0]->layers[0].wq.type, want);
    ASSERT_EQ(m[0]->tok_embd.type, want);
    ASSERT_EQ(m[1]->layers[0].wq.type, NX_TYPE_Q4_K);
    size_t nv = (size_t)p.n_vocab;
    ASSERT_EQ(memcmp(lg[0][0], lg[1][0], nv * sizeof(float)), 0);
    for (int i = 0; i < 2; i++) {
        ASSERT_OK(nx_decode(c[i], tok + 6, 1, false));
        lg[i][1] = nx_get_logits(c[i], -1);
    }
    ASSERT_EQ(memcmp(lg[0][1], lg[1][1], nv * sizeof(float)), 0);
    struct kv_fingerprint f0, f1;
    kv_fingerprint_of(m[0], &f0);
    kv_fingerprint_of(m[1], &f1);
    ASSERT_TRUE(memcmp(&f0, &f1, sizeof f0) == 0);
    for (int i = 0; i < 2; i++) {
        nx_ctx_free(c[i]);
        nx_model_free(m[i]);
    }
}

/*
 * F16 weights copied into memory take the SIMD sets' X4 layout (rows interleaved by fours,
 * token_embd included: the embedding lookup reads rows through kern_weight_row); with mmap
 * they stay as in the file and run the file layout's kernels. X4 has its own order of
 * operations, so the logits agree to float rounding (not bit for bit); the model fingerprint
 * of KV block files is the same either way. With the reference kernels only (no AVX2) both
 * load as F16 and the logits are bit-identical.
 */
TEST(arch_f16_memory_layout_close_to_mmap) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256], msg[256];
    mkmodel_default_params(&p);
    p.wtype = "f16";
    p.n_layer = 2;
    ASSERT_OK(mkmodel_write(&p, test_tmp_path("f16_layout.gguf", path, sizeof path), &err));
    nx_model *m[2] = {NULL, NULL};
    nx_ctx *c[2] = {NULL, NULL};
    const float *lg[2];
    int32_t tok[7];
    make_tokens(tok, 7, p.n_vocab, 5);
    for (int i = 0; i < 2; i++) {
        struct nx_model_params mp = nx_model_default_params();
        mp.use_mmap = i == 1;
        ASSERT_OK(nx_model_load(path, &mp, &m[i], msg, sizeof msg));
        struct nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = 64;
        cp.n_threads = cp.n_threads_batch = 2;
        ASSERT_OK(nx_ctx_init(m[i], &cp, &c[i], msg, sizeof msg));
        ASSERT_OK(nx_decode(c[i], tok, 6, false));
        ASSERT_OK(nx_decode(c[i], tok + 6, 1, false));
        lg[i] = nx_get_logits(c[i], -1);
    }
    const struct nx_weight *wq = &m[0]->layers[0].wq, *te = &m[0]->tok_embd;
    ASSERT_EQ((int)wq->type, (int)kern_weight_layout(NX_TYPE_F16, wq->ne0, wq->ne1));
    ASSERT_EQ((int)te->type, (int)kern_weight_layout(NX_TYPE_F16, te->ne0, te->ne1));
    ASSERT_EQ((int)m[1]->layers[0].wq.type, (int)NX_TYPE_F16);
    size_t nv = (size_t)p.n_vocab;
    double mx = 0, scale = 0;
    for (size_t v = 0; v < nv; v++) {
        mx = fmax(mx, fabs((double)lg[0][v] - lg[1][v]));
        scale = fmax(scale, fabs((double)lg[1][v]));
    }
    printf("  X4 (%s) vs file layout: max logit diff %.3g (max |logit| %.3g)\n",
           nx_type_name(wq->type), mx, scale);
    ASSERT_TRUE(mx <= 1e-4 * (scale + 1));
    if (wq->type == NX_TYPE_F16) ASSERT_EQ(memcmp(lg[0], lg[1], nv * sizeof(float)), 0);
    struct kv_fingerprint f0, f1;
    kv_fingerprint_of(m[0], &f0);
    kv_fingerprint_of(m[1], &f1);
    ASSERT_TRUE(memcmp(&f0, &f1, sizeof f0) == 0);
    for (int i = 0; i < 2; i++) {
        nx_ctx_free(c[i]);
        nx_model_free(m[i]);
    }
}

/* ---------------------------------------------------------------------------------------------
 * The tolerances are honest: expected engine error vs what a wrong convention costs
 * ------------------------------------------------------------------------------------------- */

/* max_rel and rms_rel of the reference run with `variant` against the exact one. */
static bool variant_err(const char *path, int n, unsigned variant, double *max_rel,
                        double *rms) {
    struct ref_model *rm = NULL;
    struct nx_err err;
    if (ref_model_load(path, &rm, &err) != NX_STATUS_OK) return false;
    int nv = ref_model_n_vocab(rm);
    size_t sz = (size_t)n * (size_t)nv;
    int32_t tok[256];
    make_tokens(tok, n, nv, 7);
    double *a = malloc(sz * sizeof *a), *b = malloc(sz * sizeof *b);
    bool ok = a && b && ref_forward(rm, tok, n, a) == 0;
    ref_model_set_variant(rm, variant);
    ok = ok && ref_forward(rm, tok, n, b) == 0;
    if (ok) {
        *max_rel = rel_err(b, a, sz);
        *rms = rms_rel(b, a, sz);
    }
    free(a);
    free(b);
    ref_model_free(rm);
    return ok;
}

/*
 * The engine's activation rounding, emulated in the reference, stays within half of each
 * type's limits (so a correct engine passes with a margin), and is exactly zero for the float
 * types. This backs the quantized limits without relying on the engine being right.
 */
TEST(arch_calibration) {
    struct mkmodel_params p;
    struct nx_err err;
    char path[256];
    for (size_t a = 0; a < NX_ARRAY_LEN(g_archs); a++) {
        for (size_t t = 0; t < NX_ARRAY_LEN(g_types); t++) {
            const struct type_case *tc = &g_types[t];
            arch_params(&p, &g_archs[a], tc->wtype);
            ASSERT_OK(mkmodel_write(&p, test_tmp_path("calib.gguf", path, sizeof path), &err));
            double e = -1.0, r = -1.0;
            ASSERT_TRUE(variant_err(path, g_archs[a].n_tokens, REF_VAR_EMULATE_ACT_QUANT, &e,
                                    &r));
            bool quant = tc->max_rel > 1e-3;
            bool pass = quant ? e * 2.0 <= tc->max_rel && r * 2.0 <= tc->rms_rel : e == 0.0;
            if (verbose() || !pass) {
                fprintf(stderr, "  %-8s %-6s emulated activation rounding: max %.2e rms %.2e%s\n",
                        g_archs[a].label, tc->wtype, e, r, pass ? "" : "  <-- FAIL");
            }
            ASSERT_TRUE(pass);
        }
    }
    remove(path);
}

/*
 * A wrong convention must miss the exact reference by more than twice the limits it is
 * checked against: every type's (strict) or the float types' (the rope_freqs case, whose
 * effect is below the quantization noise but 1000x the float limit).
 */
TEST(arch_sensitivity) {
    struct {
        size_t arch;
        unsigned variant;
        bool strict;
        const char *what;
    } cases[] = {
        {0, REF_VAR_ROPE_LAYOUT, true, "llama with NEOX rope"},
        {2, REF_VAR_ROPE_LAYOUT, true, "mistral with NEOX rope"},
        {3, REF_VAR_ROPE_LAYOUT, true, "qwen2 with adjacent-pair rope"},
        {4, REF_VAR_ROPE_LAYOUT, true, "qwen3 with adjacent-pair rope"},
        {1, REF_VAR_NO_ROPE_FREQS, false, "llama3 without rope_freqs"},
        {0, REF_VAR_ROPE_BASE, false, "llama with rope base x2"},
        {3, REF_VAR_NO_BIAS, true, "qwen2 without q/k/v biases"},
        {4, REF_VAR_NO_QK_NORM, true, "qwen3 without q/k norms"},
        {0, REF_VAR_GQA_MODULO, true, "llama with kv head h % n_kv"},
    };
    struct mkmodel_params p;
    struct nx_err err;
    char path[256];
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        const struct arch_case *a = &g_archs[cases[i].arch];
        arch_params(&p, a, "f32");
        ASSERT_OK(mkmodel_write(&p, test_tmp_path("sens.gguf", path, sizeof path), &err));
        double e = -1.0, r = -1.0;
        ASSERT_TRUE(variant_err(path, a->n_tokens, cases[i].variant, &e, &r));
        /* caught by a type when either measure exceeds twice its limit */
        bool caught = true;
        for (size_t t = 0; t < NX_ARRAY_LEN(g_types); t++) {
            const struct type_case *tc = &g_types[t];
            if (!cases[i].strict && tc->max_rel > 1e-3) continue;
            caught = caught && (e > 2.0 * tc->max_rel || r > 2.0 * tc->rms_rel);
        }
        if (verbose() || !caught) {
            fprintf(stderr, "  %-32s max %.3f rms %.3f (%s)%s\n", cases[i].what, e, r,
                    cases[i].strict ? "all types" : "float types", caught ? "" : "  <-- FAIL");
        }
        ASSERT_TRUE(caught);
    }
    remove(path);
}

TEST_MAIN
