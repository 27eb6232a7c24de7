/* test_eval.c - `nexus eval` end to end on stories260K with a tiny configuration: the dense
 * policy agrees with itself exactly, an evicting policy does not, and the JSON has the fields;
 * the attention-level figures: 0 error and mass 1 for the dense cache, a local-only cache's mass
 * recomputed here from the dense attention and the positions its tables held, the probe
 * changing no logits at any thread count. */
#include <jansson.h>
#include <math.h>
#include <unistd.h>

#include "eval/eval.h"
#include "eval/efficiency.h"
#include "core/alloc.h"
#include "kern/quant.h"
#include "kv/kv_cache.h"
#include "model/context.h"
#include "model/mkmodel.h"
#include "test.h"

TEST(eval_small_run_writes_json) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", test_shared());
    nx_model *m = NULL;
    char err[256];
    ASSERT_OK(nx_model_load(path, NULL, &m, err, sizeof err));
    char out[] = "/tmp/nx_test_eval_XXXXXX";
    int fd = mkstemp(out);
    ASSERT_TRUE(fd >= 0);
    close(fd);
    struct eval_params ep = {.policies = "full,nexus", .densities = "0.2", .regimes = "stream",
                             .streams = 2, .stream_len = 256,
                             .threads = 1, .seed = 3, .json_path = out};
    ASSERT_EQ(eval_run(m, &ep), 0);
    json_error_t je;
    json_t *root = json_load_file(out, 0, &je);
    unlink(out);
    ASSERT_TRUE(root != NULL);
    ASSERT_EQ(json_array_size(root), 2);
    json_t *full = json_array_get(root, 0), *nex = json_array_get(root, 1);
    ASSERT_STR_EQ(json_string_value(json_object_get(full, "policy")), "full");
    ASSERT_NEAR(json_number_value(json_object_get(full, "kl")), 0, 0);
    ASSERT_NEAR(json_number_value(json_object_get(full, "top1")), 1, 0);
    /* the dense cache read everything: no attention error, all of the attention mass */
    ASSERT_NEAR(json_number_value(json_object_get(full, "attn_err")), 0, 0);
    ASSERT_NEAR(json_number_value(json_object_get(full, "attn_mass")), 1, 0);
    ASSERT_EQ(json_array_size(json_object_get(full, "attn_err_layers")), 5);
    double ae = json_number_value(json_object_get(nex, "attn_err"));
    double am = json_number_value(json_object_get(nex, "attn_mass"));
    ASSERT_TRUE(ae > 0 && ae < 2);
    ASSERT_TRUE(am > 0 && am < 1);
    ASSERT_NEAR(json_number_value(json_object_get(nex, "attn_mass_diff")), am - 1, 1e-5);
    /* the first layer sees exact inputs at the prompt's positions, the error grows with depth */
    json_t *layers = json_object_get(nex, "attn_err_layers");
    ASSERT_TRUE(json_number_value(json_array_get(layers, 0)) > 0);
    double kl = json_number_value(json_object_get(nex, "kl"));
    ASSERT_TRUE(kl > 0 && kl < 5);
    ASSERT_TRUE(json_number_value(json_object_get(nex, "ppl")) > 1);
    ASSERT_TRUE(json_object_get(nex, "longrange") != NULL);
    ASSERT_TRUE(json_object_get(nex, "kl_se") != NULL);
    /* paired against the dense cache: the difference is the value itself for KL */
    ASSERT_NEAR(json_number_value(json_object_get(nex, "kl_diff")), kl, 1e-9);
    ASSERT_STR_EQ(json_string_value(json_object_get(nex, "regime")), "stream");
    json_decref(root);
    ep.densities = "1.5";
    ASSERT_EQ(eval_run(m, &ep), NX_STATUS_INVALID_ARG);
    nx_model_free(m);
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *r = malloc(n + 1);
    if (r) memcpy(r, buf, n + 1);
    return r;
}

static nx_model *load_stories(void) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", test_shared());
    nx_model *m = NULL;
    if (nx_model_load(path, NULL, &m, err, sizeof err)) return NULL;
    return m;
}

/* Same seed, same numbers (byte-identical JSON); another seed, other streams and numbers. */
TEST(eval_same_seed_same_numbers) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    char a[] = "/tmp/nx_test_eval_a_XXXXXX", b[] = "/tmp/nx_test_eval_b_XXXXXX";
    close(mkstemp(a));
    close(mkstemp(b));
    struct nx_ctx_params base = nx_ctx_default_params();
    base.kv_block = base.kv.sink = base.kv.recent = 8;
    struct eval_params ep = {.policies = "h2o,nexus", .densities = "0.2", .regimes = "stream",
                             .streams = 2, .stream_len = 128,
                             .threads = 1, .seed = 11, .json_path = a, .base = &base};
    ASSERT_EQ(eval_run(m, &ep), 0);
    ep.json_path = b;
    ASSERT_EQ(eval_run(m, &ep), 0);
    char *ja = slurp(a), *jb = slurp(b);
    ASSERT_TRUE(ja && jb);
    ASSERT_TRUE(strstr(ja, "\"kl\":") != NULL);
    ASSERT_STR_EQ(ja, jb);
    free(jb);
    ep.seed = 12;
    ASSERT_EQ(eval_run(m, &ep), 0);
    jb = slurp(b);
    ASSERT_TRUE(jb != NULL);
    ASSERT_TRUE(strcmp(ja, jb) != 0);
    free(ja);
    free(jb);
    unlink(a);
    unlink(b);
    nx_model_free(m);
}

/* Same numbers for 1, 2 and 4 worker processes: bounds (both oracles in the prefill regime),
   both budget rules, several eviction seeds; the bounds bracket the policies on KL. */
TEST(eval_same_numbers_for_every_thread_count) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    char a[] = "/tmp/nx_test_eval_ta_XXXXXX", b[] = "/tmp/nx_test_eval_tb_XXXXXX";
    close(mkstemp(a));
    close(mkstemp(b));
    struct nx_ctx_params base = nx_ctx_default_params();
    base.kv_block = base.kv.sink = base.kv.recent = 8;
    struct eval_params ep = {.policies = "full,random,oracle,oracle/values,snapkv,nexus,"
                                         "nexus/topk/fresh",
                             .densities = "0.2", .regimes = "prefill,stream",
                             .budgets = "seen,prompt", .streams = 4, .stream_len = 192,
                             .seeds = 2, .score_len = 48, .threads = 1, .seed = 5,
                             .json_path = a, .base = &base};
    ASSERT_EQ(eval_run(m, &ep), 0);
    char *ja = slurp(a);
    ASSERT_TRUE(ja != NULL);
    for (int t = 2; t <= 4; t += 2) {
        ep.threads = t;
        ep.json_path = b;
        ASSERT_EQ(eval_run(m, &ep), 0);
        char *jb = slurp(b);
        ASSERT_TRUE(jb != NULL);
        if (strcmp(ja, jb)) FAILF("%d threads give other numbers than 1", t);
        free(jb);
    }
    json_error_t je;
    json_t *root = json_load_file(a, 0, &je);
    ASSERT_TRUE(root != NULL);
    ASSERT_EQ(json_array_size(root), 28);
    double kl_rand = -1, kl_orc = -1, kl_val = -1, kl_snap = -1;
    for (size_t i = 0; i < json_array_size(root); i++) {
        json_t *o = json_array_get(root, i);
        const char *p = json_string_value(json_object_get(o, "policy"));
        if (strcmp(json_string_value(json_object_get(o, "regime")), "prefill") ||
            strcmp(json_string_value(json_object_get(o, "budget")), "prompt"))
            continue;
        double kl = json_number_value(json_object_get(o, "kl"));
        if (!strcmp(p, "random")) kl_rand = kl;
        if (!strcmp(p, "oracle")) kl_orc = kl;
        if (!strcmp(p, "oracle/values")) kl_val = kl;
        if (!strcmp(p, "snapkv")) kl_snap = kl;
    }
    ASSERT_TRUE(kl_orc >= 0 && kl_rand > kl_orc);
    /* the value-aware oracle is a ceiling too: below random and snapkv (on these four short
       stories260K streams it ties the mass oracle: 0.036 against 0.032, SE 0.01) */
    ASSERT_TRUE(kl_val >= 0 && kl_val < kl_rand && kl_val < kl_snap);
    ASSERT_TRUE(strstr(ja, "\"attn_mass\":") != NULL && strstr(ja, "\"attn_err_layers\":[") != NULL);
    json_decref(root);
    free(ja);
    unlink(a);
    unlink(b);
    ep.reference = "h2o"; /* not among the policies */
    ep.json_path = NULL;
    ASSERT_EQ(eval_run(m, &ep), NX_STATUS_INVALID_ARG);
    /* a list longer than the sweep holds is refused, never cut short (16 used to drop the
       17th policy silently) */
    char many[1024] = "full";
    for (int i = 0; i < EVAL_MAX_ITEMS; i++) strcat(many, ",random");
    ep.reference = NULL;
    ep.policies = many;
    ASSERT_EQ(eval_run(m, &ep), NX_STATUS_INVALID_ARG);
    char longlist[1500] = "full";
    while (strlen(longlist) < 1100) strcat(longlist, ",nexus/nexus.n=5");
    ep.policies = longlist;
    ASSERT_EQ(eval_run(m, &ep), NX_STATUS_INVALID_ARG);
    nx_model_free(m);
}

/* Streams from a text file, and the SVG plots: one file per regime, one line per policy. */
TEST(eval_file_streams_and_svg) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    char txt[] = "/tmp/nx_test_eval_txt_XXXXXX";
    int fd = mkstemp(txt);
    ASSERT_TRUE(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 10; i++)
        fprintf(f, "Once upon a time, there was a little girl named Lily. She liked to play "
                   "with her ball in the park. One day she saw a big dog. ");
    fclose(f);
    char dir[] = "/tmp/nx_test_eval_svg_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    char js[300];
    snprintf(js, sizeof js, "%s/out.json", dir);
    struct nx_ctx_params base = nx_ctx_default_params();
    base.kv_block = base.kv.sink = base.kv.recent = 8;
    struct eval_params ep = {.policies = "full,streaming,nexus", .densities = "0.2,0.4",
                             .regimes = "prefill,stream", .streams = 100, .stream_len = 128,
                             .threads = 1, .seed = 1, .json_path = js,
                             .svg_dir = dir, .text_file = txt, .base = &base};
    ASSERT_EQ(eval_run(m, &ep), 0);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    ASSERT_TRUE(root != NULL);
    ASSERT_EQ(json_array_size(root), 12);
    json_t *r0 = json_array_get(root, 0);
    ASSERT_STR_EQ(json_string_value(json_object_get(r0, "source")), "file");
    /* the file holds fewer than 100 streams: the run uses what there is (and says so) */
    int ns = (int)json_integer_value(json_object_get(r0, "streams"));
    ASSERT_TRUE(ns >= 1 && ns < 100);
    /* repetitive text: the dense model predicts well */
    ASSERT_TRUE(json_number_value(json_object_get(r0, "ppl")) < 3);
    json_decref(root);
    for (int r = 0; r < 2; r++) {
        char p[300];
        snprintf(p, sizeof p, "%s/fidelity_%s.svg", dir, r ? "stream" : "prefill");
        char *svg = slurp(p);
        ASSERT_TRUE(svg != NULL);
        int lines = 0;
        for (const char *q = svg; (q = strstr(q, "<polyline")); q++) lines++;
        ASSERT_EQ(lines, 15); /* 5 panels x 3 policies */
        ASSERT_TRUE(strstr(svg, ">nexus</text>") != NULL);
        free(svg);
        unlink(p);
    }
    unlink(js);
    rmdir(dir);
    /* a file too short for one stream: an error naming it */
    f = fopen(txt, "w");
    fprintf(f, "Hi.");
    fclose(f);
    ep.json_path = NULL;
    ep.svg_dir = NULL;
    ASSERT_EQ(eval_run(m, &ep), NX_STATUS_INVALID_ARG);
    ep.text_file = "/nonexistent/nx_eval.txt";
    ASSERT_EQ(eval_run(m, &ep), NX_STATUS_IO);
    unlink(txt);
    ep.text_file = NULL;
    ep.policies = "nosuch";
    ASSERT_EQ(eval_run(m, &ep), NX_STATUS_INVALID_ARG);
    nx_model_free(m);
}

/* A context for the tests below, as fidelity.c makes one: n_ctx / n_batch L + 1, one thread. */
static nx_ctx *att_ctx(const nx_model *m, const char *policy, int budget, int L, int threads) {
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.kv_block = cp.kv.sink = cp.kv.recent = 8;
    cp.n_ctx = cp.n_batch = L + 1;
    cp.n_threads = cp.n_threads_batch = threads;
    cp.kv.policy = policy;
    cp.kv.budget = budget;
    cp.kv.regime = NX_KV_REGIME_STREAM;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) return NULL;
    return c;
}

/* The positions of every (layer, KV head) table of a context: pos[(l * nkv + h) * cap + j],
   counts in n[l * nkv + h]. */
static void table_positions(nx_ctx *c, int nl, int nkv, int cap, int32_t *pos, int *n) {
    struct kv_cache *kv = ctx_kv_cache(c);
    for (int l = 0; l < nl; l++)
        for (int h = 0; h < nkv; h++) {
            const struct kv_table *t = kv_table_at(kv, l, h);
            n[l * nkv + h] = (int)t->n_tokens;
            for (int64_t j = 0; j < t->n_tokens; j++)
                pos[(l * nkv + h) * cap + j] =
                    kv_block_pos(kv, kv_slot_block(kv, t, j))[j % kv->p.block];
        }
}

/* A local-only cache (streaming at its smallest budget: sink and recent blocks, evicting while
   it decodes): the attention mass `nexus eval` reports equals the mass recomputed here, step by
   step, from the dense run's queries and keys and the positions the streaming cache's tables
   held before each step (plus the step's own token; the prompt's last token read the whole
   prompt, since compression follows the step). */
TEST(eval_attention_mass_of_a_local_only_cache) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    char txt[] = "/tmp/nx_test_eval_am_XXXXXX", js[] = "/tmp/nx_test_eval_amj_XXXXXX";
    int fd = mkstemp(txt);
    ASSERT_TRUE(fd >= 0);
    FILE *f = fdopen(fd, "w");
    for (int r = 0; r < 3; r++)
        fprintf(f, "Once upon a time, there was a little girl named Lily. She liked to play with her "
               "red ball in the big park near her house. One day a small dog came to the park "
               "and took the ball. Lily ran after the dog, and the dog ran to his friend Tom. ");
    fclose(f);
    close(mkstemp(js));
    enum { L = 96, HALF = L / 2 };
    struct nx_ctx_params base = nx_ctx_default_params();
    base.kv_block = base.kv.sink = base.kv.recent = 8;
    /* budget 0.02 x 48 = 0: raised to the policy's minimum, sink + recent blocks */
    struct eval_params ep = {.policies = "streaming", .densities = "0.02", .regimes = "stream",
                             .budgets = "prompt", .streams = 1, .stream_len = L,
                             .threads = 1, .seed = 1, .json_path = js, .text_file = txt,
                             .base = &base};
    ASSERT_EQ(eval_run(m, &ep), 0);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    unlink(js);
    ASSERT_TRUE(root != NULL);
    double got = json_number_value(json_object_get(json_array_get(root, 0), "attn_mass"));
    json_decref(root);
    /* the same stream: BOS, then the file's first L - 1 tokens */
    char *text = slurp(txt);
    unlink(txt);
    ASSERT_TRUE(text != NULL);
    int32_t nt = 0;
    nx_token *ft = eval_tokenize(m, text, strlen(text), 0, &nt);
    free(text);
    ASSERT_TRUE(ft != NULL && nt >= L - 1);
    nx_token toks[L];
    toks[0] = nx_token_bos(m);
    memcpy(toks + 1, ft, sizeof *toks * (L - 1));
    nx_free(ft);
    const int nl = nx_model_n_layer(m), nh = nx_model_n_head(m), nkv = nx_model_n_head_kv(m);
    nx_ctx *d = att_ctx(m, "full", 0, L, 1), *s = att_ctx(m, "streaming", 1, L, 1);
    ASSERT_TRUE(d && s);
    ASSERT_OK(ctx_attn_probe_enable(d));
    const struct ctx_attn_probe *pr = ctx_attn_probe_get(d);
    const int hd = pr->head_dim, gqa = nh / nkv;
    static int32_t held[64 * L];
    static int nheld[64];
    ASSERT_TRUE(nl * nkv <= 64);
    ASSERT_OK(nx_decode(d, toks, HALF, false));
    ASSERT_OK(nx_decode(s, toks, HALF, false));
    double want = 0;
    int steps = 0;
    struct kv_cache *dkv = ctx_kv_cache(d);
    for (int i = HALF; i < L; i++) {
        int qp = i - 1; /* the query of the step whose logits predict toks[i] */
        double step_mass = 0;
        for (int l = 0; l < nl; l++)
            for (int h = 0; h < nh; h++) {
                const struct kv_table *t = kv_table_at(dkv, l, h / gqa);
                double sc[L], mx = -INFINITY, all = 0, kept = 0;
                for (int j = 0; j <= qp; j++) {
                    float k[64];
                    int32_t b = kv_slot_block(dkv, t, j);
                    quant_dequantize_row_ref(dkv->p.type,
                                             kv_block_k(dkv, b) + (size_t)(j % dkv->p.block) *
                                                                      dkv->row_bytes, k, hd);
                    double dot = 0;
                    for (int e = 0; e < hd; e++) dot += (double)pr->q[(l * nh + h) * hd + e] * k[e];
                    sc[j] = dot / sqrt((double)hd);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= qp; j++) all += sc[j] = exp(sc[j] - mx);
                if (i == HALF) {
                    kept = all; /* the prompt's last token read the whole prompt */
                } else {
                    int g = l * nkv + h / gqa;
                    for (int j = 0; j < nheld[g]; j++) kept += sc[held[g * L + j]];
                    kept += sc[qp]; /* the step's own token */
                }
                step_mass += kept / all;
            }
        want += step_mass / (nl * nh);
        steps++;
        table_positions(s, nl, nkv, L, held, nheld);
        if (i + 1 < L) {
            ASSERT_OK(nx_decode(d, &toks[i], 1, false));
            ASSERT_OK(nx_decode(s, &toks[i], 1, false));
        }
    }
    want /= steps;
    nx_ctx_free(d);
    nx_ctx_free(s);
    if (fabs(got - want) > 1e-5) FAILF("attention mass %.7f, recomputed %.7f", got, want);
    /* local only: clearly less than all of it, and far more than the share of positions held */
    ASSERT_TRUE(want < 0.95 && want > 0.3);
    nx_model_free(m);
}

/* The probe changes no logits (against a context without it), and records the same rows at 1
   and 2 threads, step after step, while an evicting policy compacts the tables. */
TEST(eval_attention_probe_is_invisible_and_thread_invariant) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    enum { L = 120 };
    nx_token toks[L];
    for (int i = 0; i < L; i++) toks[i] = (nx_token)(1 + (i * 37) % 500);
    const int nv = nx_model_n_vocab(m);
    nx_ctx *plain = att_ctx(m, "snapkv", 24, L, 1), *c1 = att_ctx(m, "snapkv", 24, L, 1),
           *c2 = att_ctx(m, "snapkv", 24, L, 2);
    ASSERT_TRUE(plain && c1 && c2);
    ASSERT_OK(ctx_attn_probe_enable(c1));
    ASSERT_OK(ctx_attn_probe_enable(c2));
    const struct ctx_attn_probe *p1 = ctx_attn_probe_get(c1), *p2 = ctx_attn_probe_get(c2);
    ASSERT_TRUE(ctx_attn_probe_get(plain) == NULL && p1 && p2);
    size_t qd = (size_t)p1->n_head * (size_t)p1->head_dim, rows = qd * (size_t)p1->n_layer;
    int evicted = 0;
    for (int i = L / 2; i <= L; i++) {
        nx_ctx *cs[3] = {plain, c1, c2};
        for (int k = 0; k < 3; k++)
            ASSERT_OK(i == L / 2 ? nx_decode(cs[k], toks, L / 2, false)
                                 : nx_decode(cs[k], &toks[i - 1], 1, false));
        ASSERT_TRUE(memcmp(nx_get_logits(plain, -1), nx_get_logits(c1, -1),
                           sizeof(float) * (size_t)nv) == 0);
        ASSERT_TRUE(memcmp(nx_get_logits(plain, -1), nx_get_logits(c2, -1),
                           sizeof(float) * (size_t)nv) == 0);
        ASSERT_EQ(p1->step_pos, i - 1);
        ASSERT_EQ(p2->step_pos, i - 1);
        ASSERT_TRUE(memcmp(p1->q, p2->q, sizeof(float) * rows) == 0);
        ASSERT_TRUE(memcmp(p1->out, p2->out, sizeof(float) * rows) == 0);
        for (int t = 0; t < p1->n_layer * p1->n_head_kv; t++) {
            ASSERT_EQ(p1->n_pos[t], p2->n_pos[t]);
            ASSERT_TRUE(memcmp(p1->pos + (size_t)t * p1->cap, p2->pos + (size_t)t * p2->cap,
                               sizeof(int32_t) * (size_t)p1->n_pos[t]) == 0);
            /* the newest position read is the step's own; fewer than all once evicting */
            ASSERT_EQ(p1->pos[(size_t)t * p1->cap + p1->n_pos[t] - 1], i - 1);
            evicted |= p1->n_pos[t] < i;
        }
    }
    ASSERT_TRUE(evicted);
    nx_ctx_free(plain);
    nx_ctx_free(c1);
    nx_ctx_free(c2);
    nx_model_free(m);
}

/* eval-efficiency: one run per policy yields every checkpoint; the evicting policy holds less
   KV memory than dense at the end, dense memory grows with the context, latencies are sane. */
TEST(eval_efficiency_checkpoints) {
    nx_model *m = load_stories();
    ASSERT_TRUE(m != NULL);
    char dir[] = "/tmp/nx_test_effi_XXXXXX";
    ASSERT_TRUE(mkdtemp(dir) != NULL);
    char js[300], svg[300];
    snprintf(js, sizeof js, "%s/e.json", dir);
    snprintf(svg, sizeof svg, "%s/efficiency.svg", dir);
    struct nx_ctx_params base = nx_ctx_default_params();
    base.kv_block = base.kv.sink = base.kv.recent = 8;
    struct effi_params ep = effi_default_params();
    ep.policies = "full,streaming,nexus";
    ep.prompt = 32;
    ep.lengths = "16,64,160";
    ep.threads = 1;
    ep.json_path = js;
    ep.svg_dir = dir;
    ep.base = &base;
    ASSERT_EQ(eval_efficiency_run(m, &ep), 0);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    ASSERT_TRUE(root != NULL);
    ASSERT_EQ(json_array_size(root), 9);
    static const int gens[3] = {16, 64, 160};
    for (int i = 0; i < 9; i++) {
        json_t *r = json_array_get(root, i);
        ASSERT_EQ(json_integer_value(json_object_get(r, "gen_len")), gens[i % 3]);
        ASSERT_EQ(json_integer_value(json_object_get(r, "ctx_len")), 32 + gens[i % 3]);
        double med = json_number_value(json_object_get(r, "lat_median_ms"));
        double p99 = json_number_value(json_object_get(r, "lat_p99_ms"));
        double share = json_number_value(json_object_get(r, "evict_share"));
        ASSERT_TRUE(med > 0 && p99 >= med);
        ASSERT_TRUE(json_number_value(json_object_get(r, "tps")) > 0);
        ASSERT_TRUE(share >= 0 && share <= 1);
        if (i < 3) ASSERT_NEAR(share, 0, 0); /* dense never evicts */
    }
    json_int_t full0 = json_integer_value(json_object_get(json_array_get(root, 0), "kv_bytes"));
    json_int_t full2 = json_integer_value(json_object_get(json_array_get(root, 2), "kv_bytes"));
    json_int_t str2 = json_integer_value(json_object_get(json_array_get(root, 5), "kv_bytes"));
    json_int_t nex2 = json_integer_value(json_object_get(json_array_get(root, 8), "kv_bytes"));
    ASSERT_TRUE(full2 > full0);
    /* density 0.2 of 192 tokens = 38, raised to whole blocks: well under half of dense */
    ASSERT_TRUE(str2 * 2 < full2);
    ASSERT_TRUE(nex2 * 2 < full2);
    json_decref(root);
    char *s = slurp(svg);
    ASSERT_TRUE(s != NULL);
    ASSERT_TRUE(strstr(s, "decode tokens/s") != NULL);
    free(s);
    unlink(js);
    unlink(svg);
    rmdir(dir);
    ep.json_path = ep.svg_dir = NULL;
    ep.lengths = "64,16";
    ASSERT_EQ(eval_efficiency_run(m, &ep), NX_STATUS_INVALID_ARG);
    ep.lengths = "16,x";
    ASSERT_EQ(eval_efficiency_run(m, &ep), NX_STATUS_INVALID_ARG);
    ep.lengths = "16";
    ep.density = 0;
    ASSERT_EQ(eval_efficiency_run(m, &ep), NX_STATUS_INVALID_ARG);
    nx_model_free(m);
}

/* eval-efficiency on a random GQA model in the Q4_K_M mix (what the 1B measurement runs on,
   at a tiny size): dense KV grows linearly with the context, the evicting policy stays bounded */
TEST(eval_efficiency_on_a_random_q4km_model) {
    char path[] = "/tmp/nx_test_effi_model_XXXXXX";
    close(mkstemp(path));
    struct mkmodel_params mp;
    mkmodel_default_params(&mp);
    mp.wtype = "q4_k_m";
    mp.n_ctx_train = 1024;
    mp.n_threads = 1;
    mp.progress = false;
    struct nx_err e;
    ASSERT_OK(mkmodel_write(&mp, path, &e));
    nx_model *m = NULL;
    char err[256];
    ASSERT_OK(nx_model_load(path, NULL, &m, err, sizeof err));
    unlink(path);
    char js[] = "/tmp/nx_test_effi_q4_XXXXXX";
    close(mkstemp(js));
    struct effi_params ep = effi_default_params();
    ep.policies = "full,snapkv";
    ep.prompt = 64;
    ep.lengths = "64,256";
    ep.threads = 1;
    ep.json_path = js;
    ASSERT_EQ(eval_efficiency_run(m, &ep), 0);
    json_error_t je;
    json_t *root = json_load_file(js, 0, &je);
    unlink(js);
    ASSERT_TRUE(root != NULL);
    ASSERT_EQ(json_array_size(root), 4);
    double f0 = (double)json_integer_value(json_object_get(json_array_get(root, 0), "kv_bytes"));
    double f1 = (double)json_integer_value(json_object_get(json_array_get(root, 1), "kv_bytes"));
    double s1 = (double)json_integer_value(json_object_get(json_array_get(root, 3), "kv_bytes"));
    /* 128 -> 320 tokens: dense bytes grow 2.5x (whole 32-token blocks); snapkv at 0.2 of 320
       holds its 64-token minimum plus at most a block */
    ASSERT_NEAR(f1 / f0, 320.0 / 128.0, 0.01);
    ASSERT_TRUE(s1 <= f1 * 96.0 / 320.0 + 1);
    json_decref(root);
    nx_model_free(m);
}

TEST_MAIN
