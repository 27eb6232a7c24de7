/*
 * test_import.c - `nexus import` (model/nxw_import.c): NXW1 weights + template -> GGUF.
 * The oracle is the NXW1 file the test writes itself: every tensor of the output must hold
 * exactly those floats, the metadata must be the template's plus the overrides, and every
 * malformed input must fail with a message and leave no output file.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"
#include "model/nxw_import.h"
#include "kern/types.h"
#include "nexus.h"
#include "model/mkmodel.h"
#include "support/tmpdir.h"
#include "test.h"

/* A 1-layer llama template with the synthetic vocabulary. */
static void make_template(const char *path) {
    struct mkmodel_params p;
    struct nx_err err;
    mkmodel_default_params(&p);
    p.n_layer = 1;
    p.n_embd = 32;
    p.n_head = 2;
    p.n_head_kv = 1;
    p.n_ff = 48;
    p.n_vocab = 260;
    p.n_threads = 1;
    p.progress = false;
    if (mkmodel_write(&p, path, &err) != NX_STATUS_OK) {
        fprintf(stderr, "%s\n", err.msg);
        abort();
    }
}

/* Value k of tensor number ti in the weights the test writes. */
static float weight_value(int ti, int64_t k) { return (float)(ti + 1) * 0.001f + (float)k * 1e-6f; }

static void put_u32(FILE *f, uint32_t v) {
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fwrite(b, 1, 4, f);
}

static void put_i64(FILE *f, int64_t v) {
    for (int i = 0; i < 8; i++) fputc((int)(((uint64_t)v >> (8 * i)) & 0xFF), f);
}

/*
 * Write an NXW1 file with every tensor of the template (in reverse order, so order does not
 * matter), tensor skip left out (-1: none), tensor bad_shape with ne[0] + 1 (-1: none), and an
 * extra tensor when extra is set.
 */
static void write_nxw(const char *tmpl, const char *path, int skip, int bad_shape, bool extra) {
    struct gguf_file *g;
    struct nx_err err;
    if (gguf_open(tmpl, &g, &err)) abort();
    int nt = (int)gguf_n_tensors(g);
    FILE *f = fopen(path, "wb");
    fwrite("NXW1", 1, 4, f);
    put_u32(f, (uint32_t)(nt - (skip >= 0) + extra));
    for (int ti = nt - 1; ti >= 0; ti--) {
        if (ti == skip) continue;
        const struct gguf_tensor *t = gguf_tensor(g, ti);
        put_u32(f, (uint32_t)strlen(t->name));
        fputs(t->name, f);
        put_u32(f, (uint32_t)t->n_dims);
        int64_t n = 1;
        for (int d = 0; d < t->n_dims; d++) {
            int64_t e = t->ne[d] + (ti == bad_shape && d == 0);
            put_i64(f, e);
            n *= e;
        }
        for (int64_t k = 0; k < n; k++) {
            float v = weight_value(ti, k);
            fwrite(&v, 4, 1, f);
        }
    }
    if (extra) {
        put_u32(f, 5);
        fputs("extra", f);
        put_u32(f, 1);
        put_i64(f, 2);
        float v[2] = {1, 2};
        fwrite(v, 4, 2, f);
    }
    fclose(f);
    gguf_close(g);
}

TEST(import_copies_weights_and_metadata) {
    char tmpl[256], nxw[256], out[256];
    make_template(test_tmp_path("t.gguf", tmpl, sizeof tmpl));
    write_nxw(tmpl, test_tmp_path("w.nxw", nxw, sizeof nxw), -1, -1, false);
    struct import_set sets[2] = {{"llama.rope.dimension_count=u32:6"}, {"general.name=str:trained"}};
    struct nx_err err;
    ASSERT_OK(import_nxw(nxw, tmpl, test_tmp_path("o.gguf", out, sizeof out), sets, 2, &err));
    struct gguf_file *a, *b;
    ASSERT_OK(gguf_open(tmpl, &a, &err));
    ASSERT_OK(gguf_open(out, &b, &err));
    ASSERT_EQ(gguf_n_tensors(b), gguf_n_tensors(a));
    for (int64_t ti = 0; ti < gguf_n_tensors(a); ti++) {
        const struct gguf_tensor *ta = gguf_tensor(a, ti), *tb = gguf_tensor(b, ti);
        ASSERT_STR_EQ(tb->name, ta->name); /* the template's order */
        ASSERT_EQ(tb->type, NX_TYPE_F32);
        ASSERT_EQ(tb->n_dims, ta->n_dims);
        int64_t n = 1;
        for (int d = 0; d < 4; d++) {
            ASSERT_EQ(tb->ne[d], ta->ne[d]);
            n *= ta->ne[d];
        }
        const float *v = tb->data;
        for (int64_t k = 0; k < n; k++) {
            if (v[k] != weight_value((int)ti, k))
                FAILF("tensor %s element %lld: %g", tb->name, (long long)k, (double)v[k]);
        }
    }
    /* every template key once (the override replaced, not duplicated), plus the new one */
    bool had_rope = gguf_find_key(a, "llama.rope.dimension_count") >= 0;
    ASSERT_EQ(gguf_n_kv(b), gguf_n_kv(a) + (had_rope ? 0 : 1));
    uint32_t rot = 0;
    ASSERT_TRUE(gguf_get_u32(b, "llama.rope.dimension_count", &rot));
    ASSERT_EQ(rot, 6);
    const char *s;
    size_t len;
    ASSERT_TRUE(gguf_get_str(b, "general.name", &s, &len));
    ASSERT_TRUE(len == 7 && !memcmp(s, "trained", 7));
    ASSERT_TRUE(gguf_find_key(b, "tokenizer.ggml.tokens") >= 0);
    gguf_close(a);
    gguf_close(b);
    /* the engine loads it */
    nx_model *m = NULL;
    char emsg[256];
    ASSERT_OK(nx_model_load(out, NULL, &m, emsg, sizeof emsg));
    ASSERT_EQ(nx_model_n_vocab(m), 260);
    nx_model_free(m);
}

static void expect_fail(const char *nxw, const char *tmpl, const struct import_set *sets,
                        int n_sets, nx_status want, const char *msg_part) {
    char out[256];
    struct nx_err err;
    test_tmp_path("fail.gguf", out, sizeof out);
    unlink(out);
    nx_status st = import_nxw(nxw, tmpl, out, sets, n_sets, &err);
    if (st != want) FAILF("status %d, expected %d (%s)", (int)st, (int)want, err.msg);
    if (!strstr(err.msg, msg_part)) FAILF("message '%s' lacks '%s'", err.msg, msg_part);
    if (access(out, F_OK) == 0) FAILF("%s exists after a failure", out);
}

TEST(import_rejects_mismatches) {
    char tmpl[256], nxw[256];
    make_template(test_tmp_path("t.gguf", tmpl, sizeof tmpl));
    test_tmp_path("w.nxw", nxw, sizeof nxw);
    write_nxw(tmpl, nxw, 2, -1, false);
    expect_fail(nxw, tmpl, NULL, 0, NX_STATUS_INVALID_ARG, "lacks tensor");
    write_nxw(tmpl, nxw, -1, 3, false);
    expect_fail(nxw, tmpl, NULL, 0, NX_STATUS_INVALID_ARG, "shape");
    write_nxw(tmpl, nxw, -1, -1, true);
    expect_fail(nxw, tmpl, NULL, 0, NX_STATUS_INVALID_ARG, "'extra'");
    write_nxw(tmpl, nxw, -1, -1, false);
    const char *bad[] = {"noequals", "k=u32", "k=u64:1", "k=u32:-1", "k=i32:x", "k=f32:",
                         "k=bool:yes"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        struct import_set s = {bad[i]};
        expect_fail(nxw, tmpl, &s, 1, NX_STATUS_INVALID_ARG, "--set");
    }
    expect_fail("/nonexistent/w.nxw", tmpl, NULL, 0, NX_STATUS_IO, "nonexistent");
}

TEST(import_rejects_malformed_files) {
    char tmpl[256], nxw[256], cut[256];
    make_template(test_tmp_path("t.gguf", tmpl, sizeof tmpl));
    write_nxw(tmpl, test_tmp_path("w.nxw", nxw, sizeof nxw), -1, -1, false);
    FILE *f = fopen(nxw, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *b = malloc((size_t)n);
    ASSERT_TRUE(fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    test_tmp_path("cut.nxw", cut, sizeof cut);
    /* every header-region prefix, then prefixes spread over the data, and one extra byte */
    for (long len = 0; len <= n; len += len < 200 ? 1 : 997) {
        long use = len == n ? n + 1 : len;
        FILE *g = fopen(cut, "wb");
        fwrite(b, 1, (size_t)(use > n ? n : use), g);
        if (use > n) fputc(0, g);
        fclose(g);
        expect_fail(cut, tmpl, NULL, 0, NX_STATUS_FORMAT, "import:");
    }
    /* bad magic, zero dims, absurd name length */
    b[0] = 'X';
    FILE *g = fopen(cut, "wb");
    fwrite(b, 1, (size_t)n, g);
    fclose(g);
    expect_fail(cut, tmpl, NULL, 0, NX_STATUS_FORMAT, "not an NXW1");
    b[0] = 'N';
    b[8] = 0xFF;
    b[9] = 0xFF;
    g = fopen(cut, "wb");
    fwrite(b, 1, (size_t)n, g);
    fclose(g);
    expect_fail(cut, tmpl, NULL, 0, NX_STATUS_FORMAT, "name length");
    free(b);
}

/*
 * A committed trained model against torch (the oracle: the training script's own forward pass,
 * which the engine never sees): every logit at every answer position within 1e-3 and the same
 * argmax. ref is written by scripts/train/evaluate.py --write-ref.
 */
static void check_against_torch(const char *gguf, const char *ref) {
    json_error_t je;
    json_t *r = json_load_file(ref, 0, &je);
    if (!r) FAILF("cannot read %s: %s", ref, je.text);
    nx_model *m = NULL;
    char emsg[256];
    if (nx_model_load(gguf, NULL, &m, emsg, sizeof emsg)) {
        json_decref(r);
        FAILF("%s: %s", gguf, emsg);
    }
    json_t *seqs = json_object_get(r, "sequences");
    int nv = nx_model_n_vocab(m), checked = 0, bad = 0;
    double worst = 0;
    for (size_t i = 0; i < json_array_size(seqs); i++) {
        json_t *s = json_array_get(seqs, i);
        json_t *toks = json_object_get(s, "tokens"), *pos = json_object_get(s, "check_pos");
        json_t *am = json_object_get(s, "argmax"), *lg = json_object_get(s, "logits");
        int n = (int)json_array_size(toks);
        nx_token *t = malloc(sizeof *t * (size_t)n);
        for (int k = 0; k < n; k++) t[k] = (nx_token)json_integer_value(json_array_get(toks, (size_t)k));
        struct nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = n;
        cp.kv_type = NX_TYPE_F32;
        nx_ctx *c = NULL;
        if (nx_ctx_init(m, &cp, &c, emsg, sizeof emsg) || nx_decode(c, t, n, true)) {
            bad++;
        } else {
            for (size_t j = 0; j < json_array_size(pos); j++) {
                int p = (int)json_integer_value(json_array_get(pos, j));
                const float *l = nx_get_logits(c, p);
                json_t *row = json_array_get(lg, j);
                int best = 0;
                for (int v = 0; v < nv; v++) {
                    double d = fabs(l[v] - json_real_value(json_array_get(row, (size_t)v)));
                    worst = d > worst ? d : worst;
                    if (l[v] > l[best]) best = v;
                }
                bad += best != (int)json_integer_value(json_array_get(am, j));
                checked++;
            }
        }
        nx_ctx_free(c);
        free(t);
    }
    nx_model_free(m);
    json_decref(r);
    ASSERT_TRUE(checked >= 6);
    ASSERT_EQ(bad, 0);
    if (!(worst < 1e-3)) FAILF("%s: largest logit difference from torch %.3g", gguf, worst);
}

TEST(trained_retrieval_model_matches_torch) {
    check_against_torch("models/nexus-retrieval/nexus-retrieval.gguf",
                        "models/nexus-retrieval/torch_ref.json");
}

/* The text model on its first held-out stream (2048 tokens: every RoPE distance it was trained
   at), torch's logits from scripts/train/train_lm.py --write-ref. */
TEST(trained_kjv_model_matches_torch) {
    check_against_torch("models/nexus-kjv/nexus-kjv.gguf", "models/nexus-kjv/torch_ref.json");
}

TEST_MAIN
