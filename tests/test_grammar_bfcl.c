/*
 * test_grammar_bfcl.c - BFCL's multiple and live_multiple function schemas: every one compiles
 * (BFCL type names mapped, nothing refused); a sample of them is generated under the grammar on
 * the Llama-3 vocabulary with random token choices among the allowed ones (a stand-in for a
 * random model at temperature 1; the full run with a model is `nexus bench-grammar`), each
 * output parses (jansson) and, when python3 with jsonschema is installed, validates against
 * the full schema with the independent checker scripts/check_grammar_outputs.py (which is also
 * shown to reject a wrong output).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nexus.h"
#include "support/tmpdir.h"
#include "test.h"

static const char *k_files[] = {"BFCL_v4_multiple.json", "BFCL_v4_live_multiple.json"};

/* Calls fn(schema json_t, function name, file) for every function of both files. */
typedef void (*fn_cb)(json_t *params, const char *name, const char *file, void *ud);
static long for_each_function(fn_cb cb, void *ud) {
    long n = 0;
    for (int fi = 0; fi < 2; fi++) {
        char path[512];
        snprintf(path, sizeof path, "%s/data/bfcl/%s", test_shared(), k_files[fi]);
        FILE *f = fopen(path, "r");
        if (!f) return -1;
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0) {
            json_t *row = json_loads(line, 0, NULL);
            if (!row) continue;
            size_t k;
            json_t *fn;
            json_array_foreach(json_object_get(row, "function"), k, fn) {
                cb(json_object_get(fn, "parameters"), json_string_value(json_object_get(fn, "name")),
                   k_files[fi], ud);
                n++;
            }
            json_decref(row);
        }
        free(line);
        fclose(f);
    }
    return n;
}

struct compile_ud {
    long ok, refused;
    char first_err[600];
};
static void compile_cb(json_t *params, const char *name, const char *file, void *ud) {
    struct compile_ud *u = ud;
    char *s = json_dumps(params, JSON_COMPACT);
    struct nx_json_schema_params p = nx_json_schema_default_params();
    p.bfcl_types = true;
    nx_grammar *g;
    char err[512];
    if (s && nx_grammar_from_json_schema(s, strlen(s), &p, &g, err, sizeof err) == NX_STATUS_OK) {
        u->ok++;
        nx_grammar_free(g);
    } else {
        if (!u->refused) snprintf(u->first_err, sizeof u->first_err, "%s (%s): %s", name, file, err);
        u->refused++;
    }
    nx_free(s);
}

TEST(bfcl_every_schema_compiles) {
    struct compile_ud u = {0};
    long n = for_each_function(compile_cb, &u);
    ASSERT_TRUE(n > 0);
    ASSERT_EQ(n, 4735); /* 200 + 1053 rows' functions */
    if (u.refused) FAILF("%ld refused, first: %s", u.refused, u.first_err);
    ASSERT_EQ(u.ok, n);
}

static bool python_jsonschema(void) {
    return system("python3 -c 'import jsonschema' >/dev/null 2>&1") == 0;
}

struct gen_ud {
    nx_model *vocab;
    nx_grammar_vocab *gv;
    FILE *out;
    long idx, done, parse_fail;
    uint64_t rng;
    json_t *seen;
};

static uint64_t xs(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static void gen_cb(json_t *params, const char *name, const char *file, void *ud) {
    struct gen_ud *u = ud;
    char *key = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
    if (!key) return;
    if (json_object_get(u->seen, key)) {
        nx_free(key);
        return;
    }
    json_object_set_new(u->seen, key, json_true());
    nx_free(key);
    if (u->idx++ % 150 != 7) return; /* a sample of the 1497 distinct schemas */
    char *s = json_dumps(params, JSON_COMPACT);
    struct nx_json_schema_params p = nx_json_schema_default_params();
    p.bfcl_types = true;
    p.max_string_chars = 16;
    nx_grammar *g;
    char err[512];
    if (nx_grammar_from_json_schema(s, strlen(s), &p, &g, err, sizeof err) != NX_STATUS_OK) {
        nx_free(s);
        return;
    }
    int32_t n = nx_model_n_vocab(u->vocab), nw = (n + 63) / 64;
    uint64_t *bits = malloc(sizeof *bits * (size_t)nw);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)n);
    nx_grammar_matcher *m;
    nx_grammar_matcher_init(g, u->gv, &m);
    const int budget = 96;
    for (int gi = 0; gi < 3; gi++) {
        nx_grammar_matcher_reset(m);
        char text[4096];
        size_t tn = 0;
        for (int step = 0; step < budget; step++) {
            int64_t need = nx_grammar_matcher_completion_bytes(m);
            bool force = need >= 0 && budget - step <= need + 1;
            int32_t k = nx_grammar_matcher_mask(m, bits, force), na = 0;
            if (k <= 0) break;
            for (int32_t w = 0; w < nw; w++)
                for (uint64_t b = bits[w]; b; b &= b - 1) allowed[na++] = w * 64 + __builtin_ctzll(b);
            nx_token t = allowed[xs(&u->rng) % (uint64_t)na];
            if (nx_grammar_matcher_accept(m, t) != NX_STATUS_OK) break;
            if (nx_token_is_eog(u->vocab, t)) break;
            char piece[256];
            int32_t pn = nx_token_to_piece(u->vocab, t, piece, sizeof piece, false);
            if (pn > 0 && tn + (size_t)pn < sizeof text) {
                memcpy(text + tn, piece, (size_t)pn);
                tn += (size_t)pn;
            }
        }
        json_t *parsed = json_loadb(text, tn, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!parsed || !nx_grammar_matcher_is_finished(m)) u->parse_fail++;
        json_decref(parsed);
        json_t *rec = json_pack("{s:s,s:s,s:O,s:s%}", "file", file, "function", name, "schema",
                                params, "output", text, tn);
        char *js = json_dumps(rec, JSON_COMPACT);
        fprintf(u->out, "%s\n", js);
        nx_free(js);
        json_decref(rec);
        u->done++;
    }
    nx_grammar_matcher_free(m);
    free(bits);
    free(allowed);
    nx_grammar_free(g);
    nx_free(s);
}

TEST(bfcl_sample_generations_validate) {
    char path[512], err[256], out[512], cmd[1400];
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-llama-bpe.gguf", test_shared());
    struct gen_ud u = {.rng = 88172645463325252ull};
    ASSERT_OK(nx_model_load(path, NULL, &u.vocab, err, sizeof err));
    ASSERT_OK(nx_grammar_vocab_init(u.vocab, &u.gv));
    test_tmp_path("bfcl.jsonl", out, sizeof out);
    u.out = fopen(out, "w");
    u.seen = json_object();
    ASSERT_TRUE(u.out != NULL);
    for_each_function(gen_cb, &u);
    fclose(u.out);
    json_decref(u.seen);
    nx_grammar_vocab_free(u.gv);
    nx_model_free(u.vocab);
    ASSERT_TRUE(u.done >= 20);
    ASSERT_EQ(u.parse_fail, 0);
    if (!python_jsonschema()) {
        fprintf(stderr, "  (python3-jsonschema missing: skipped the independent validation)\n");
        return;
    }
    snprintf(cmd, sizeof cmd, "python3 scripts/check_grammar_outputs.py %s >/dev/null", out);
    ASSERT_EQ(system(cmd), 0);
    /* the checker itself must be able to fail */
    char bad[512];
    test_tmp_path("bad.jsonl", bad, sizeof bad);
    FILE *f = fopen(bad, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(f, "{\"schema\":{\"type\":\"dict\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
               "\"required\":[\"a\"]},\"output\":\"{\\\"a\\\":\\\"x\\\"}\"}\n");
    fclose(f);
    snprintf(cmd, sizeof cmd, "python3 scripts/check_grammar_outputs.py %s >/dev/null", bad);
    ASSERT_NE(system(cmd), 0);
}

TEST_MAIN
