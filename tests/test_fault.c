/*
 * test_fault.c - allocation-failure injection through the steps no other test steps through
 * one allocation at a time: a whole model load (nx_model_load: GGUF, vocabulary, weights,
 * templates) and a KV block file round trip (compile from a context, save, load against the
 * model, splice into a fresh context). For n = 1, 2, ... the n-th allocation from the start of
 * the step fails (nx_alloc_fail_after) until a run makes fewer than n: every failure is
 * NX_STATUS_NOMEM with a message (no output pointer left behind), nothing leaks
 * (nx_alloc_bytes back to its start), and the run that succeeds gives the undisturbed result.
 * The other modules have theirs: tokenization (test_tok), routing with signatures
 * (test_route), an MCP session (test_mcp), a chat template render (test_chat), a generation
 * (test_generate), the GGUF reader and writer (test_gguf), one server request
 * (test_server_oom); file writers' failed writes, fsyncs and renames: test_fileio.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nexus.h"
#include "support/tmpdir.h"
#include "test.h"

static void stories_path(char *buf, size_t cap) {
    snprintf(buf, cap, "%s/models/stories260K/stories260K.gguf", test_shared());
}

TEST(model_load_fails_cleanly_at_every_allocation) {
    char path[512], err[512];
    stories_path(path, sizeof path);
    size_t before = nx_alloc_bytes();
    long n;
    int nomem = 0;
    for (n = 1; n <= 100000; n++) {
        nx_model *m = (nx_model *)1;
        size_t fails = nx_alloc_failures();
        err[0] = 0;
        nx_alloc_fail_after(n);
        nx_status st = nx_model_load(path, NULL, &m, err, sizeof err);
        nx_alloc_fail_after(0);
        bool injected = nx_alloc_failures() != fails;
        if (st == NX_STATUS_OK) {
            ASSERT_EQ(nx_model_n_vocab(m), 512);
            nx_model_free(m);
        } else {
            if (st != NX_STATUS_NOMEM || m != NULL || !err[0])
                FAILF("n=%ld: status %d, model %p, message '%s'", n, (int)st, (void *)m, err);
            nomem++;
        }
        if (nx_alloc_bytes() != before)
            FAILF("n=%ld: %zu bytes leaked", n, nx_alloc_bytes() - before);
        if (!injected) {
            ASSERT_EQ(st, NX_STATUS_OK);
            break;
        }
    }
    printf("  nx_model_load: a failure at each of its %ld allocations, %d NOMEM\n", n - 1, nomem);
    ASSERT_TRUE(n > 10);
}

static nx_model *g_m;

/* compile a block, save it, load it back against the model, splice it: NX_STATUS_OK with the
   logits after a query token in *logit, or the first failing step's status */
static nx_status block_round_trip(const char *path, float *logit, char *err, size_t errlen) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 64;
    cp.n_threads = cp.n_threads_batch = 1;
    nx_ctx *c = NULL, *d = NULL;
    nx_kv_block *b = NULL, *lb = NULL;
    const nx_token toks[] = {1, 300, 301, 302, 303, 304, 305, 306, 307, 308};
    nx_status st = nx_ctx_init(g_m, &cp, &c, err, errlen);
    if (st == NX_STATUS_OK) st = nx_kv_block_compile(c, NULL, 0, toks, 10, 0, &b);
    if (st == NX_STATUS_OK) st = nx_kv_block_save(b, path, err, errlen);
    if (st == NX_STATUS_OK) st = nx_kv_block_load(g_m, path, &lb, err, errlen);
    if (st == NX_STATUS_OK) st = nx_ctx_init(g_m, &cp, &d, err, errlen);
    if (st == NX_STATUS_OK) {
        struct nx_splice_params sp = nx_splice_default_params();
        sp.pos = 0;
        int32_t nrep = 0;
        st = nx_ctx_splice(d, lb, &sp, &nrep);
    }
    nx_token q = 42;
    if (st == NX_STATUS_OK) st = nx_decode(d, &q, 1, false);
    if (st == NX_STATUS_OK) *logit = nx_get_logits(d, -1)[7];
    nx_kv_block_free(lb);
    nx_kv_block_free(b);
    nx_ctx_free(d);
    nx_ctx_free(c);
    return st;
}

TEST(kv_block_round_trip_fails_cleanly_at_every_allocation) {
    char path[512], err[512];
    stories_path(path, sizeof path);
    ASSERT_OK(nx_model_load(path, NULL, &g_m, err, sizeof err));
    char blk[512];
    test_tmp_path("fault.nxkv", blk, sizeof blk);
    float ref = 0, got = 0;
    size_t before = nx_alloc_bytes();
    ASSERT_OK(block_round_trip(blk, &ref, err, sizeof err));
    ASSERT_EQ(nx_alloc_bytes(), before);
    long n;
    int nomem = 0;
    for (n = 1; n <= 100000; n++) {
        size_t fails = nx_alloc_failures();
        err[0] = 0;
        nx_alloc_fail_after(n);
        nx_status st = block_round_trip(blk, &got, err, sizeof err);
        nx_alloc_fail_after(0);
        bool injected = nx_alloc_failures() != fails;
        if (st == NX_STATUS_OK) {
            if (got != ref) FAILF("n=%ld: a success with different logits", n);
        } else if (st == NX_STATUS_NOMEM) {
            nomem++;
        } else {
            FAILF("n=%ld: status %d (%s), expected NOMEM", n, (int)st, err);
        }
        if (nx_alloc_bytes() != before)
            FAILF("n=%ld: %zu bytes leaked", n, nx_alloc_bytes() - before);
        if (!injected) {
            ASSERT_EQ(st, NX_STATUS_OK);
            break;
        }
    }
    printf("  block compile + save + load + splice: a failure at each of %ld allocations, %d "
           "NOMEM\n",
           n - 1, nomem);
    ASSERT_TRUE(n > 10);
    nx_model_free(g_m);
}

TEST_MAIN
