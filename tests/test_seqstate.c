/*
 * test_seqstate.c - sequence state files (nx_seq_state_save / _load) on stories260K: a saved
 * and reloaded sequence decodes bit-identically to the original, dense and under eviction;
 * corrupt, truncated and foreign files are refused with the sequence unchanged; a failed write
 * leaves no file behind.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/fileio.h"
#include "core/nx_base.h"
#include "nexus.h"
#include "support/tmpdir.h"
#include "test.h"

#define MODEL "../shared/models/stories260K/stories260K.gguf"

static nx_model *g_m;
static nx_model *model(void) {
    if (!g_m) {
        char err[256];
        if (nx_model_load(MODEL, NULL, &g_m, err, sizeof err)) exit(1);
    }
    return g_m;
}

static nx_ctx *make_ctx(const struct nx_kv_params *kv) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_seq_max = 2;
    cp.n_threads = cp.n_threads_batch = 1;
    if (kv) cp.kv = *kv;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(model(), &cp, &c, err, sizeof err)) fprintf(stderr, "ctx: %s\n", err);
    return c;
}

/* Decode n tokens into seq, one at a time (so a policy's stream regime runs), with logits of
   the last copied into out (n_vocab floats) when out is not NULL. */
static nx_status feed(nx_ctx *c, nx_seq_id seq, const nx_token *t, int n, float *out) {
    struct nx_batch b;
    nx_batch_init(1, &b);
    nx_status st = NX_STATUS_OK;
    for (int i = 0; i < n && !st; i++) {
        nx_batch_clear(&b);
        nx_batch_add(&b, t[i], nx_seq_n_past(c, seq), seq, true);
        st = nx_decode_batch(c, &b);
    }
    if (!st && out) memcpy(out, nx_get_logits_ith(c, -1), sizeof(float) * 512);
    nx_batch_free(&b);
    return st;
}

static void tokens(nx_token *t, int n, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 3 + (nx_token)((seed >> 16) % 500);
    }
}

static void roundtrip(const struct nx_kv_params *kv, int n_prompt, int n_after) {
    nx_ctx *c = make_ctx(kv);
    ASSERT_TRUE(c != NULL);
    nx_token t[600];
    tokens(t, n_prompt + n_after, 7);
    ASSERT_EQ(feed(c, 0, t, n_prompt, NULL), NX_STATUS_OK);
    char path[512], err[512];
    test_tmp_path("seq.state", path, sizeof path);
    ASSERT_EQ(nx_seq_state_save(c, 0, path, NULL, 0, err, sizeof err), NX_STATUS_OK);
    struct nx_kv_stats before;
    nx_seq_kv_stats(c, 0, &before);
    if (kv) { /* the saved state really is a compressed history */
        ASSERT_TRUE(before.evictions > 0);
        ASSERT_TRUE(before.tokens_cached < n_prompt);
    }
    /* continue the original, then the reloaded copy in the other sequence */
    float a[512], b[512];
    ASSERT_EQ(feed(c, 0, t + n_prompt, n_after, a), NX_STATUS_OK);
    ASSERT_EQ(nx_seq_state_load(c, 1, path, NULL, 0, NULL, err, sizeof err), NX_STATUS_OK);
    ASSERT_EQ(nx_seq_n_past(c, 1), n_prompt);
    struct nx_kv_stats loaded;
    nx_seq_kv_stats(c, 1, &loaded);
    ASSERT_EQ(loaded.tokens_cached, before.tokens_cached);
    ASSERT_EQ(feed(c, 1, t + n_prompt, n_after, b), NX_STATUS_OK);
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    nx_ctx_free(c);
}

TEST(dense_sequence_resumes_bit_identically) { roundtrip(NULL, 200, 20); }

TEST(evicted_sequence_resumes_bit_identically) {
    struct nx_kv_params kv = nx_kv_default_params();
    kv.policy = "nexus";
    kv.budget = 96;
    kv.regime = NX_KV_REGIME_STREAM;
    /* 300 tokens under a 96-token budget: the saved state is a compressed history; the next
       eviction comes a block later, so the first tokens after the load must match exactly */
    roundtrip(&kv, 300, 8);
}

TEST(bad_files_are_refused_and_leave_the_sequence_unchanged) {
    nx_ctx *c = make_ctx(NULL);
    nx_token t[128];
    tokens(t, 128, 3);
    ASSERT_EQ(feed(c, 0, t, 100, NULL), NX_STATUS_OK);
    char path[512], bad[512], err[512];
    test_tmp_path("good.state", path, sizeof path);
    test_tmp_path("bad.state", bad, sizeof bad);
    ASSERT_EQ(nx_seq_state_save(c, 0, path, NULL, 0, err, sizeof err), NX_STATUS_OK);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *buf = malloc((size_t)n);
    ASSERT_EQ(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    /* sequence 1 holds something; every failed load must leave it as it is */
    ASSERT_EQ(feed(c, 1, t, 40, NULL), NX_STATUS_OK);
    int refused = 0;
    long cuts[] = {0, 4, 8, 95, 96, n / 2, n - 9, n - 1};
    for (size_t i = 0; i < NX_ARRAY_LEN(cuts); i++) {
        f = fopen(bad, "wb");
        fwrite(buf, 1, (size_t)cuts[i], f);
        fclose(f);
        nx_status st = nx_seq_state_load(c, 1, bad, NULL, 0, NULL, err, sizeof err);
        ASSERT_EQ(st, NX_STATUS_FORMAT);
        ASSERT_TRUE(strstr(err, "bad.state") != NULL);
        refused++;
    }
    for (int k = 0; k < 200; k++) {
        long at = (long)((unsigned)(k * 2654435761u) % (unsigned)n);
        buf[at] ^= (unsigned char)(1u << (k % 8));
        f = fopen(bad, "wb");
        fwrite(buf, 1, (size_t)n, f);
        fclose(f);
        nx_status st = nx_seq_state_load(c, 1, bad, NULL, 0, NULL, err, sizeof err);
        buf[at] ^= (unsigned char)(1u << (k % 8));
        ASSERT_TRUE(st == NX_STATUS_FORMAT || st == NX_STATUS_INVALID_ARG);
        refused++;
    }
    ASSERT_EQ(nx_seq_n_past(c, 1), 40);
    /* still decodes as a 40-token sequence: same logits as a fresh one */
    float a[512], b[512];
    ASSERT_EQ(feed(c, 1, t + 40, 1, a), NX_STATUS_OK);
    nx_ctx *c2 = make_ctx(NULL);
    ASSERT_EQ(feed(c2, 0, t, 41, b), NX_STATUS_OK);
    ASSERT_TRUE(memcmp(a, b, sizeof a) == 0);
    nx_ctx_free(c2);
    ASSERT_EQ(nx_seq_state_load(c, 1, "/nonexistent/x.state", NULL, 0, NULL, err, sizeof err), NX_STATUS_IO);
    ASSERT_EQ(nx_seq_state_load(c, 7, path, NULL, 0, NULL, err, sizeof err), NX_STATUS_INVALID_ARG);
    fprintf(stderr, "  %d damaged files refused\n", refused);
    free(buf);
    nx_ctx_free(c);
}

TEST(caller_data_round_trips) {
    nx_ctx *c = make_ctx(NULL);
    nx_token t[32];
    tokens(t, 32, 11);
    ASSERT_EQ(feed(c, 0, t, 32, NULL), NX_STATUS_OK);
    char path[512], err[512];
    test_tmp_path("user.state", path, sizeof path);
    ASSERT_EQ(nx_seq_state_save(c, 0, path, t, sizeof t, err, sizeof err), NX_STATUS_OK);
    nx_token back[32];
    size_t len = 0;
    ASSERT_EQ(nx_seq_state_load(c, 1, path, back, sizeof back - 1, &len, err, sizeof err),
              NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_seq_n_past(c, 1), 0);
    ASSERT_EQ(nx_seq_state_load(c, 1, path, back, sizeof back, &len, err, sizeof err),
              NX_STATUS_OK);
    ASSERT_EQ(len, sizeof t);
    ASSERT_TRUE(memcmp(back, t, sizeof t) == 0);
    nx_ctx_free(c);
}

TEST(file_of_another_model_is_refused) {
    nx_ctx *c = make_ctx(NULL);
    nx_token t[16];
    tokens(t, 16, 5);
    ASSERT_EQ(feed(c, 0, t, 16, NULL), NX_STATUS_OK);
    char path[512], err[512];
    test_tmp_path("s260.state", path, sizeof path);
    ASSERT_EQ(nx_seq_state_save(c, 0, path, NULL, 0, err, sizeof err), NX_STATUS_OK);
    nx_model *other = NULL;
    ASSERT_EQ(nx_model_load("../shared/models/llama-2-tiny-random/llama-2-tiny-random.gguf",
                            NULL, &other, err, sizeof err), NX_STATUS_OK);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 64;
    nx_ctx *oc = NULL;
    ASSERT_EQ(nx_ctx_init(other, &cp, &oc, err, sizeof err), NX_STATUS_OK);
    ASSERT_EQ(nx_seq_state_load(oc, 0, path, NULL, 0, NULL, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "another model") != NULL);
    nx_ctx_free(oc);
    nx_model_free(other);
    nx_ctx_free(c);
}

static int count_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

TEST(failed_writes_leave_nothing_behind) {
    nx_ctx *c = make_ctx(NULL);
    nx_token t[16];
    tokens(t, 16, 9);
    ASSERT_EQ(feed(c, 0, t, 16, NULL), NX_STATUS_OK);
    char path[512], err[512];
    test_tmp_path("w.state", path, sizeof path);
    unlink(path);
    int files0 = count_files(test_tmpdir());
    enum nx_io_op ops[] = {NX_IO_WRITE, NX_IO_FSYNC, NX_IO_CLOSE, NX_IO_RENAME};
    for (size_t i = 0; i < NX_ARRAY_LEN(ops); i++) {
        nx_io_reset();
        nx_io_fail_nth(ops[i], 1, EIO);
        ASSERT_EQ(nx_seq_state_save(c, 0, path, NULL, 0, err, sizeof err), NX_STATUS_IO);
        ASSERT_TRUE(access(path, F_OK) != 0);
        ASSERT_EQ(count_files(test_tmpdir()), files0);
    }
    nx_io_reset();
    nx_io_short_writes(true);
    ASSERT_EQ(nx_seq_state_save(c, 0, path, NULL, 0, err, sizeof err), NX_STATUS_OK);
    nx_io_reset();
    ASSERT_EQ(nx_seq_state_load(c, 1, path, NULL, 0, NULL, err, sizeof err), NX_STATUS_OK);
    nx_ctx_free(c);
}

TEST(zz_free) { nx_model_free(g_m); }

TEST_MAIN
