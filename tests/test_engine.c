/*
 * test_engine.c - the engine end to end through include/nexus.h: the stories260K golden greedy
 * output and first-step logits, thread-count invariance, batch vs step-by-step agreement,
 * decode errors, the thread pool, and the sampler.
 */
#include <jansson.h>
#include <stdatomic.h>
#include <time.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "core/threadpool.h"
#include "kern/kern.h"
#include "support/tmpdir.h"
#include "nexus.h"
#include "test.h"

static char g_path[512];

static const char *shared_path(const char *rel) {
    snprintf(g_path, sizeof g_path, "%s/%s", test_shared(), rel);
    return g_path;
}

struct golden {
    int n;
    int ids[256];
    int top_id[5];
    double top_logit[5];
};

static int load_golden(const char *rel, struct golden *g) {
    json_error_t je;
    json_t *root = json_load_file(shared_path(rel), 0, &je);
    if (!root) return -1;
    json_t *ids = json_object_get(root, "generated_ids");
    g->n = (int)json_array_size(ids);
    for (int i = 0; i < g->n && i < 256; i++) g->ids[i] = (int)json_integer_value(json_array_get(ids, i));
    json_t *top = json_object_get(root, "first_step_top5");
    for (int i = 0; i < 5; i++) {
        json_t *e = json_array_get(top, i);
        g->top_id[i] = (int)json_integer_value(json_array_get(e, 0));
        g->top_logit[i] = json_real_value(json_array_get(e, 1));
    }
    json_decref(root);
    return 0;
}

static nx_model *load(const char *rel) {
    char err[512];
    nx_model *m = NULL;
    nx_status st = nx_model_load(shared_path(rel), NULL, &m, err, sizeof err);
    if (st) fprintf(stderr, "  load %s: %s\n", rel, err);
    return m;
}

static nx_ctx *ctx_for(const nx_model *m, int threads, enum nx_type kv, int n_batch) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.kv_type = kv;
    if (n_batch) cp.n_batch = n_batch;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) fprintf(stderr, "  ctx: %s\n", err);
    return c;
}

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

/* Greedy from BOS; returns the number of generated ids written to out. */
static int greedy(nx_ctx *c, const nx_model *m, int n, int *out) {
    nx_token t = nx_token_bos(m);
    for (int i = 0; i < n; i++) {
        if (nx_decode(c, &t, 1, false)) return i;
        t = argmax(nx_get_logits(c, -1), nx_model_n_vocab(m));
        out[i] = t;
    }
    return n;
}

#define STORIES "models/stories260K/stories260K.gguf"

TEST(stories_golden_greedy_128) {
    struct golden g;
    ASSERT_OK(load_golden("models/stories260K/golden_greedy_from_bos.json", &g));
    ASSERT_EQ(g.n, 128);
    nx_model *m = load(STORIES);
    ASSERT_TRUE(m != NULL);
    enum nx_type kvs[] = {NX_TYPE_F32, NX_TYPE_F16};
    for (int k = 0; k < 2; k++) {
        nx_ctx *c = ctx_for(m, 2, kvs[k], 0);
        ASSERT_TRUE(c != NULL);
        int ids[128];
        ASSERT_EQ(greedy(c, m, 128, ids), 128);
        for (int i = 0; i < 128; i++)
            if (ids[i] != g.ids[i]) {
                nx_ctx_free(c);
                nx_model_free(m);
                FAILF("kv %s: token %d: got %d, golden %d", nx_type_name(kvs[k]), i, ids[i], g.ids[i]);
            }
        nx_ctx_free(c);
    }
    nx_model_free(m);
}

TEST(stories_first_step_logits_1e4) {
    struct golden g;
    ASSERT_OK(load_golden("models/stories260K/golden_greedy_from_bos.json", &g));
    nx_model *m = load(STORIES);
    ASSERT_TRUE(m != NULL);
    nx_ctx *c = ctx_for(m, 1, NX_TYPE_F32, 0);
    nx_token bos = nx_token_bos(m);
    ASSERT_OK(nx_decode(c, &bos, 1, false));
    const float *l = nx_get_logits(c, -1);
    for (int i = 0; i < 5; i++) ASSERT_NEAR(l[g.top_id[i]], g.top_logit[i], 1e-4);
    ASSERT_EQ(argmax(l, nx_model_n_vocab(m)), g.top_id[0]);
    nx_ctx_free(c);
    nx_model_free(m);
}

/* Logits after a 40-token prompt must be bit-identical for 1, 2 and 3 threads: with the
 * default minimum work per thread (stories260K's steps then run on one thread), and with
 * every operation split over all threads (minimum 0), in 4-token KV blocks so that decode
 * attention is split by block groups across threads (forward.c). */
TEST(thread_count_invariance) {
    nx_model *m = load(STORIES);
    ASSERT_TRUE(m != NULL);
    nx_token toks[40];
    for (int i = 0; i < 40; i++) toks[i] = (nx_token)((i * 37 + 11) % nx_model_n_vocab(m));
    int nv = nx_model_n_vocab(m);
    float *ref = malloc(sizeof(float) * (size_t)nv * 41);
    for (int run = 0; run < 6; run++) {
        int th = run % 3 + 1;
        kern_set_min_ns_per_thread(run < 3 ? -1 : 0);
        struct nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = 512;
        cp.n_threads = cp.n_threads_batch = th;
        cp.kv_type = NX_TYPE_F16;
        cp.kv_block = 4;
        nx_ctx *c = NULL;
        char err[256];
        if (nx_ctx_init(m, &cp, &c, err, sizeof err)) FAILF("ctx: %s", err);
        ASSERT_OK(nx_decode(c, toks, 40, true));
        nx_token t = 5;
        for (int i = 0; i < 40; i++) {
            const float *l = nx_get_logits(c, i);
            if (run == 0)
                memcpy(ref + (size_t)i * nv, l, sizeof(float) * (size_t)nv);
            else if (memcmp(ref + (size_t)i * nv, l, sizeof(float) * (size_t)nv) != 0)
                FAILF("threads %d (run %d): prompt logits at %d differ from 1 thread", th, run, i);
        }
        ASSERT_OK(nx_decode(c, &t, 1, false));
        if (run == 0)
            memcpy(ref + (size_t)40 * nv, nx_get_logits(c, -1), sizeof(float) * (size_t)nv);
        else if (memcmp(ref + (size_t)40 * nv, nx_get_logits(c, -1), sizeof(float) * (size_t)nv))
            FAILF("threads %d (run %d): decode logits differ from 1 thread", th, run);
        nx_ctx_free(c);
    }
    kern_set_min_ns_per_thread(-1);
    free(ref);
    nx_model_free(m);
}

/* Bit for bit: a 70-token prompt in one batch (attention tiles of 8 entries reading whole KV
 * blocks once for all of them), in chunks of 7 and token by token, in 4-token KV blocks. */
TEST(batch_matches_step_by_step_bits) {
    nx_model *m = load(STORIES);
    ASSERT_TRUE(m != NULL);
    int nv = nx_model_n_vocab(m);
    enum { N = 70 };
    nx_token toks[N];
    for (int i = 0; i < N; i++) toks[i] = (nx_token)((i * 53 + 7) % nv);
    nx_ctx *cs[3];
    for (int k = 0; k < 3; k++) {
        struct nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = 128;
        cp.n_threads = cp.n_threads_batch = 2;
        cp.kv_type = NX_TYPE_F16;
        cp.kv_block = 4;
        cp.n_batch = k == 1 ? 7 : 128;
        char err[256];
        if (nx_ctx_init(m, &cp, &cs[k], err, sizeof err)) FAILF("ctx: %s", err);
    }
    ASSERT_OK(nx_decode(cs[0], toks, N, true));
    ASSERT_OK(nx_decode(cs[1], toks, N, true));
    for (int i = 0; i < N; i++) {
        ASSERT_OK(nx_decode(cs[2], &toks[i], 1, false));
        const float *la = nx_get_logits(cs[0], i), *lb = nx_get_logits(cs[1], i);
        const float *ls = nx_get_logits(cs[2], -1);
        if (memcmp(la, ls, sizeof(float) * (size_t)nv) || memcmp(la, lb, sizeof(float) * (size_t)nv))
            FAILF("token %d: batch / chunks of 7 / one by one logits differ", i);
    }
    for (int k = 0; k < 3; k++) nx_ctx_free(cs[k]);
    nx_model_free(m);
}

/* A prompt run as one batch, in chunks (n_batch 7) and token by token gives the same logits. */
TEST(batch_matches_step_by_step) {
    nx_model *m = load(STORIES);
    ASSERT_TRUE(m != NULL);
    int nv = nx_model_n_vocab(m);
    nx_token toks[30];
    for (int i = 0; i < 30; i++) toks[i] = (nx_token)((i * 53 + 7) % nv);
    nx_ctx *a = ctx_for(m, 2, NX_TYPE_F32, 0);
    nx_ctx *b = ctx_for(m, 2, NX_TYPE_F32, 7);
    nx_ctx *s = ctx_for(m, 2, NX_TYPE_F32, 0);
    ASSERT_OK(nx_decode(a, toks, 30, true));
    ASSERT_OK(nx_decode(b, toks, 30, true));
    for (int i = 0; i < 30; i++) {
        ASSERT_OK(nx_decode(s, &toks[i], 1, false));
        const float *la = nx_get_logits(a, i), *lb = nx_get_logits(b, i), *ls = nx_get_logits(s, -1);
        for (int v = 0; v < nv; v++) {
            ASSERT_NEAR(la[v], ls[v], 1e-4);
            ASSERT_NEAR(la[v], lb[v], 1e-4);
        }
    }
    ASSERT_EQ(nx_ctx_n_past(a), 30);
    ASSERT_EQ(nx_ctx_n_past(s), 30);
    nx_ctx_free(a);
    nx_ctx_free(b);
    nx_ctx_free(s);
    nx_model_free(m);
}

TEST(decode_rejects_bad_input_without_changing_state) {
    nx_model *m = load(STORIES);
    ASSERT_TRUE(m != NULL);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 8;
    nx_ctx *c;
    char err[256];
    ASSERT_OK(nx_ctx_init(m, &cp, &c, err, sizeof err));
    nx_token bad[2] = {1, 100000};
    ASSERT_EQ(nx_decode(c, bad, 2, false), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(nx_ctx_last_error(c), "100000") != NULL);
    ASSERT_EQ(nx_ctx_n_past(c), 0);
    nx_token neg = -1;
    ASSERT_EQ(nx_decode(c, &neg, 1, false), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_decode(c, bad, 0, false), NX_STATUS_INVALID_ARG);
    nx_token ok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ASSERT_OK(nx_decode(c, ok, 6, false));
    ASSERT_EQ(nx_decode(c, ok, 3, false), NX_STATUS_KV_FULL);
    ASSERT_EQ(nx_ctx_n_past(c), 6);
    ASSERT_OK(nx_decode(c, ok, 2, false));
    ASSERT_EQ(nx_ctx_truncate(c, 9), NX_STATUS_INVALID_ARG);
    ASSERT_OK(nx_ctx_truncate(c, 3));
    ASSERT_EQ(nx_ctx_n_past(c), 3);
    nx_ctx_free(c);
    cp.kv_type = NX_TYPE_Q4_0;
    ASSERT_EQ(nx_ctx_init(m, &cp, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(c == NULL);
    nx_model_free(m);
}

TEST(truncate_then_redecode_matches) {
    nx_model *m = load(STORIES);
    ASSERT_TRUE(m != NULL);
    int nv = nx_model_n_vocab(m);
    nx_ctx *c = ctx_for(m, 2, NX_TYPE_F32, 0);
    nx_token toks[12] = {1, 400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410};
    ASSERT_OK(nx_decode(c, toks, 12, false));
    float *first = malloc(sizeof(float) * (size_t)nv);
    memcpy(first, nx_get_logits(c, -1), sizeof(float) * (size_t)nv);
    ASSERT_OK(nx_ctx_truncate(c, 5));
    ASSERT_OK(nx_decode(c, toks + 5, 7, false));
    for (int v = 0; v < nv; v++) ASSERT_NEAR(first[v], nx_get_logits(c, -1)[v], 1e-5);
    free(first);
    nx_ctx_free(c);
    nx_model_free(m);
}

TEST(v1_file_refused_through_api) {
    char err[512] = "";
    nx_model *m = (nx_model *)1;
    nx_status st = nx_model_load(shared_path("models/stories260K-v1/tinyllamas-stories-260k-f32.gguf"),
                                 NULL, &m, err, sizeof err);
    ASSERT_EQ(st, NX_STATUS_UNSUPPORTED);
    ASSERT_TRUE(m == NULL);
    ASSERT_TRUE(strstr(err, "v1") != NULL || strstr(err, "version 1") != NULL);
    st = nx_model_load("/nonexistent/model.gguf", NULL, &m, err, sizeof err);
    ASSERT_EQ(st, NX_STATUS_IO);
}

TEST(llama2_tiny_random_f16_first_step) {
    nx_model *m = load("models/llama-2-tiny-random/llama-2-tiny-random.gguf");
    ASSERT_TRUE(m != NULL);
    struct golden g;
    ASSERT_OK(load_golden("models/llama-2-tiny-random/golden_greedy_from_bos.json", &g));
    nx_ctx *c = ctx_for(m, 2, NX_TYPE_F32, 0);
    nx_token bos = nx_token_bos(m);
    ASSERT_OK(nx_decode(c, &bos, 1, false));
    const float *l = nx_get_logits(c, -1);
    /* F16 weights; the engine may convert activations: logits are ~0.2, compare absolutely */
    for (int i = 0; i < 5; i++) ASSERT_NEAR(l[g.top_id[i]], g.top_logit[i], 2e-3);
    nx_ctx_free(c);
    nx_model_free(m);
}

TEST(mmap_option_gives_same_logits) {
    nx_model *a = load(STORIES);
    struct nx_model_params mp = nx_model_default_params();
    mp.use_mmap = true;
    nx_model *b = NULL;
    char err[256];
    ASSERT_OK(nx_model_load(shared_path(STORIES), &mp, &b, err, sizeof err));
    nx_ctx *ca = ctx_for(a, 1, NX_TYPE_F16, 0), *cb = ctx_for(b, 1, NX_TYPE_F16, 0);
    nx_token toks[5] = {1, 403, 407, 261, 378};
    ASSERT_OK(nx_decode(ca, toks, 5, false));
    ASSERT_OK(nx_decode(cb, toks, 5, false));
    ASSERT_EQ(memcmp(nx_get_logits(ca, -1), nx_get_logits(cb, -1), sizeof(float) * 512), 0);
    nx_ctx_free(ca);
    nx_ctx_free(cb);
    nx_model_free(a);
    nx_model_free(b);
}

TEST(vocab_only_file_tokenizes_but_cannot_run) {
    nx_model *m = load("models/vocab/ggml-vocab-llama-bpe.gguf");
    ASSERT_TRUE(m != NULL);
    ASSERT_EQ(nx_model_n_vocab(m), 128256);
    nx_token t[8];
    ASSERT_EQ(nx_tokenize(m, "Hello world", 11, t, 8, false, false), 2);
    ASSERT_EQ(t[0], 9906); /* "Hello" */
    ASSERT_EQ(t[1], 1917); /* " world" */
    nx_ctx *c = (nx_ctx *)1;
    char err[256];
    ASSERT_EQ(nx_ctx_init(m, NULL, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(c == NULL);
    ASSERT_TRUE(strstr(err, "vocabulary only") != NULL);
    nx_model_free(m);
}

/* ---- whole-file reads ---- */

TEST(read_file_limits_and_errors) {
    char path[512], err[256];
    test_tmp_path("rf.bin", path, sizeof path);
    FILE *f = fopen(path, "wb");
    ASSERT_TRUE(f != NULL);
    for (int i = 0; i < 200000; i++) fputc('a' + i % 26, f); /* past the first 64 KiB buffer */
    fclose(f);
    size_t len = 0;
    char *b = nx_read_file(path, NX_READ_FILE_MAX, &len, err, sizeof err);
    ASSERT_TRUE(b != NULL);
    ASSERT_EQ(len, 200000);
    ASSERT_EQ(b[199999], 'a' + 199999 % 26);
    ASSERT_EQ(b[200000], 0);
    nx_free(b);
    b = nx_read_file(path, 200000, &len, err, sizeof err); /* exactly the limit */
    ASSERT_TRUE(b != NULL);
    nx_free(b);
    ASSERT_TRUE(nx_read_file(path, 199999, &len, err, sizeof err) == NULL);
    ASSERT_CONTAINS(err, "rf.bin' is larger than 199999 bytes");
    ASSERT_TRUE(nx_read_file(path, (size_t)1 << 17, &len, err, sizeof err) == NULL);
    ASSERT_CONTAINS(err, "is larger than");
    ASSERT_TRUE(nx_read_file("/nonexistent/x", NX_READ_FILE_MAX, &len, err, sizeof err) == NULL);
    ASSERT_CONTAINS(err, "cannot open '/nonexistent/x': No such file");
    ASSERT_TRUE(nx_read_file(test_tmpdir(), NX_READ_FILE_MAX, &len, err, sizeof err) == NULL);
    ASSERT_CONTAINS(err, "error reading");
    test_tmp_path("empty", path, sizeof path);
    fclose(fopen(path, "wb"));
    b = nx_read_file(path, 0, &len, err, sizeof err);
    ASSERT_TRUE(b != NULL && len == 0 && b[0] == 0);
    nx_free(b);
}

/* ---- thread pool ---- */

struct pool_job {
    struct nx_pool *pool;
    atomic_long sum;
    long parts[8];
};

static void pool_fn(void *arg, int ith, int nth) {
    struct pool_job *j = arg;
    for (int step = 0; step < 50; step++) {
        j->parts[ith] = step * 10 + ith;
        nx_pool_barrier(j->pool);
        if (ith == 0) {
            long s = 0;
            for (int i = 0; i < nth; i++) s += j->parts[i];
            atomic_fetch_add(&j->sum, s);
        }
        nx_pool_barrier(j->pool);
    }
}

TEST(threadpool_runs_and_barriers) {
    for (int n = 1; n <= 4; n++) {
        struct pool_job j = {0};
        ASSERT_OK(nx_pool_init(n, &j.pool));
        for (int rep = 0; rep < 200; rep++) nx_pool_run(j.pool, pool_fn, &j, n);
        /* per step: sum_i (10*step + i) */
        long expect = 0;
        for (int step = 0; step < 50; step++) expect += 10L * step * n + (long)n * (n - 1) / 2;
        ASSERT_EQ(atomic_load(&j.sum), expect * 200);
        if (n > 1) nx_pool_run(j.pool, pool_fn, &j, 1); /* fewer participants than threads */
        nx_pool_free(j.pool);
    }
}

static double process_cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static double cpu_ms_while_sleeping(int ms) {
    double c0 = process_cpu_ms();
    struct timespec ts = {0, (long)ms * 1000000L};
    nanosleep(&ts, NULL);
    return process_cpu_ms() - c0;
}

static bool prep_ok(int64_t a, int64_t b) {
    (void)a, (void)b;
    return true;
}

/* Idle workers leave their vCPUs alone: a new pool's workers sleep until their first job, and
 * the one-off preparation job sends them back to sleep (a spinning worker would burn ~5 ms of
 * CPU per worker here, and slows the driver's vCPU on the project's VMs). */
TEST(threadpool_idle_workers_sleep) {
    struct nx_pool *pool;
    ASSERT_OK(nx_pool_init(4, &pool));
    double idle = cpu_ms_while_sleeping(40);
    nx_pool_free(pool);
    ASSERT_TRUE(idle < 3.0);
    ASSERT_OK(nx_pool_shared_acquire(4, prep_ok, 1, 1));
    double after_prep = cpu_ms_while_sleeping(40);
    nx_pool_shared_release();
    ASSERT_TRUE(after_prep < 3.0);
}

/* ---- sampler ---- */

TEST(sampler_greedy_and_seed) {
    float l[6] = {0.1f, 2.0f, 1.5f, -1.0f, 2.0f, 0.0f};
    struct nx_sampler_params p = nx_sampler_default_params();
    p.temp = 0;
    nx_sampler *s;
    ASSERT_OK(nx_sampler_init(&p, 6, &s));
    ASSERT_EQ(nx_sampler_sample(s, l), 1); /* tie breaks to the lower id */
    nx_sampler_free(s);
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0;
    int seq_a[50], seq_b[50];
    ASSERT_OK(nx_sampler_init(&p, 6, &s));
    for (int i = 0; i < 50; i++) seq_a[i] = nx_sampler_sample(s, l);
    nx_sampler_free(s);
    ASSERT_OK(nx_sampler_init(&p, 6, &s));
    for (int i = 0; i < 50; i++) seq_b[i] = nx_sampler_sample(s, l);
    nx_sampler_free(s);
    ASSERT_EQ(memcmp(seq_a, seq_b, sizeof seq_a), 0);
    p.top_k = 1;
    ASSERT_OK(nx_sampler_init(&p, 6, &s));
    for (int i = 0; i < 20; i++) ASSERT_EQ(nx_sampler_sample(s, l), 1);
    nx_sampler_free(s);
}

/* Monte Carlo: probabilities .5 .3 .2; top-p 0.75 keeps {0, 1} in ratio 5:3; min-p 0.5 keeps
 * {0, 1} too (0.2 < 0.25); temperature 0.5 squares and renormalises. 20000 draws, 4 sigma. */
TEST(sampler_distributions) {
    float l[3] = {logf(0.5f), logf(0.3f), logf(0.2f)};
    struct {
        float temp, top_p, min_p;
        double expect[3];
    } cases[] = {
        {1.0f, 1.0f, 0.0f, {0.5, 0.3, 0.2}},
        {1.0f, 0.75f, 0.0f, {0.625, 0.375, 0.0}},
        {1.0f, 1.0f, 0.5f, {0.625, 0.375, 0.0}},
        {0.5f, 1.0f, 0.0f, {0.25 / 0.38, 0.09 / 0.38, 0.04 / 0.38}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        struct nx_sampler_params p = nx_sampler_default_params();
        p.temp = cases[ci].temp;
        p.top_k = 0;
        p.top_p = cases[ci].top_p;
        p.min_p = cases[ci].min_p;
        p.seed = 7 + ci;
        nx_sampler *s;
        ASSERT_OK(nx_sampler_init(&p, 3, &s));
        int cnt[3] = {0};
        const int N = 20000;
        for (int i = 0; i < N; i++) cnt[nx_sampler_sample(s, l)]++;
        nx_sampler_free(s);
        for (int k = 0; k < 3; k++) {
            double e = cases[ci].expect[k], sd = sqrt(e * (1 - e) / N);
            ASSERT_NEAR((double)cnt[k] / N, e, 4 * sd + 1e-9);
        }
    }
}

TEST(sampler_repeat_penalty) {
    float l[4] = {2.0f, 1.9f, -1.0f, 0.5f};
    struct nx_sampler_params p = nx_sampler_default_params();
    p.temp = 0;
    p.repeat_penalty = 1.5f;
    p.repeat_last_n = 4;
    nx_sampler *s;
    ASSERT_OK(nx_sampler_init(&p, 4, &s));
    nx_sampler_accept(s, 0);
    ASSERT_EQ(nx_sampler_sample(s, l), 1); /* 2.0/1.5 < 1.9 */
    nx_sampler_free(s);
    p.repeat_penalty = 0;
    ASSERT_EQ(nx_sampler_init(&p, 4, &s), NX_STATUS_INVALID_ARG);
}

TEST_MAIN
