/*
 * grammar_cmd.c - `nexus bench-grammar` and the grammar flags of `nexus run`.
 *
 * DESIGN: bench-grammar reads BFCL files (one JSON object per line, "function": [{name,
 * parameters}]), deduplicates the parameter schemas (identical schemas compile to identical
 * grammars), compiles each with BFCL's type names, and runs N constrained generations per
 * schema with the model at temperature 1 (no top-k/top-p/min-p), each from BOS with its own
 * seed and a token budget (the sampler forces the shortest completion near it). Every mask
 * computation is timed on its own (the same call the sampler makes, done just before it);
 * median / p99 / max over all steps are printed. Outputs go to a JSON-lines file for the
 * independent validator (scripts/check_grammar_outputs.py); jansson parses each one here too.
 * --shard I/N runs every N-th schema so several processes can split the work.
 */
#include <errno.h>
#include <stdarg.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "grammar/mask.h"
#include <time.h>
#include "grammar_cmd.h"
#include "args.h"
#include "nexus.h"

#define gdie(...) cli_die("nexus", __VA_ARGS__)

nx_grammar *grammar_cmd_load(const char *schema_file, const char *gbnf_file) {
    const char *path = schema_file ? schema_file : gbnf_file;
    if (!path) return NULL;
    char err[600];
    size_t len;
    char *text = nx_read_file(path, NX_READ_FILE_MAX, &len, err, sizeof err);
    if (!text) gdie("%s", err);
    nx_grammar *g;
    nx_status st = schema_file ? nx_grammar_from_json_schema(text, len, NULL, &g, err, sizeof err)
                               : nx_grammar_from_gbnf(text, len, NULL, &g, err, sizeof err);
    nx_free(text);
    if (st) gdie("%s: %s", path, err);
    return g;
}

/* This thread's CPU time: unlike wall time it leaves out time the thread was not running. */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

struct dvec {
    double *v;
    size_t n, cap;
};
static void dpush(struct dvec *d, double x) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 4096;
        d->v = realloc(d->v, sizeof *d->v * d->cap);
        if (!d->v) gdie("out of memory");
    }
    d->v[d->n++] = x;
}

int bench_grammar_main(int argc, char **argv) {
    const char *model_path = NULL, *bfcl = "../shared/data/bfcl", *out_path = NULL;
    const char *times_path = NULL;
    int n_gen = 20, max_tokens = 128, max_string = 16, shard = 0, n_shards = 1, threads = 1;
    bool cpu_time = false;
    long limit = -1;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && v) model_path = argv[++i];
        else if (!strcmp(a, "--bfcl") && v) bfcl = argv[++i];
        else if (!strcmp(a, "--out") && v) out_path = argv[++i];
        else if (!strcmp(a, "--times") && v) times_path = argv[++i];
        else if (!strcmp(a, "-n") && v) n_gen = atoi(argv[++i]);
        else if (!strcmp(a, "--max-tokens") && v) max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--max-string") && v) max_string = atoi(argv[++i]);
        else if (!strcmp(a, "--limit") && v) limit = atol(argv[++i]);
        else if (!strcmp(a, "--seed") && v) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "-t") && v) threads = atoi(argv[++i]);
        else if (!strcmp(a, "--cpu-time")) cpu_time = true;
        else if (!strcmp(a, "--shard") && v) {
            if (sscanf(argv[++i], "%d/%d", &shard, &n_shards) != 2 || n_shards < 1 || shard < 0 ||
                shard >= n_shards)
                gdie("--shard: expected I/N with 0 <= I < N");
        } else {
            fprintf(stderr,
                    "usage: nexus bench-grammar -m MODEL.gguf [--bfcl DIR] [-n 20] [--max-tokens 128]\n"
                    "       [--max-string 16] [--limit N] [--seed S] [--shard I/N] [--out OUT.jsonl]\n"
                    "       [--times TIMES.txt] [-t THREADS] [--cpu-time]\n");
            return 1;
        }
    }
    if (!model_path) gdie("bench-grammar: no model (-m)");
    if (n_gen < 1 || max_tokens < 8) gdie("bench-grammar: bad -n or --max-tokens");
    char err[600];
    nx_model *m;
    if (nx_model_load(model_path, NULL, &m, err, sizeof err)) gdie("%s: %s", model_path, err);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = max_tokens + 8;
    cp.n_threads = cp.n_threads_batch = threads;
    nx_ctx *ctx;
    if (nx_ctx_init(m, &cp, &ctx, err, sizeof err)) gdie("context: %s", err);
    double t0 = nx_time_s();
    nx_grammar_vocab *gv;
    if (nx_grammar_vocab_init(m, &gv)) gdie("grammar vocabulary: out of memory");
    fprintf(stderr, "model: %s; grammar vocabulary indexed in %.2f s\n", nx_model_desc(m),
            nx_time_s() - t0);
    int32_t n_vocab = nx_model_n_vocab(m);
    uint64_t *bits = malloc(sizeof *bits * (size_t)((n_vocab + 63) / 64));
    FILE *out = out_path ? fopen(out_path, "w") : NULL;
    if (out_path && !out) gdie("%s: %s", out_path, strerror(errno));
    FILE *tf = times_path ? fopen(times_path, "w") : NULL;
    if (times_path && !tf) gdie("%s: %s", times_path, strerror(errno));
    json_t *seen = json_object();
    struct dvec times = {0}, warm = {0}, fills = {0};
    long n_fn = 0, n_schema = 0, n_done = 0, n_gens = 0, n_parse_fail = 0, n_refused = 0;
    long n_tokens = 0, n_forced_gens = 0, n_incomplete = 0, n_partial = 0;
    int64_t max_work = 0, budget = 0;
    const char *files[] = {"BFCL_v4_multiple.json", "BFCL_v4_live_multiple.json"};
    double t_start = nx_time_s();
    for (int fi = 0; fi < 2; fi++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", bfcl, files[fi]);
        FILE *f = fopen(path, "r");
        if (!f) gdie("%s: %s", path, strerror(errno));
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, f) > 0) {
            json_error_t je;
            json_t *row = json_loads(line, 0, &je);
            if (!row) gdie("%s: %s", path, je.text);
            json_t *fns = json_object_get(row, "function");
            size_t k;
            json_t *fn;
            json_array_foreach(fns, k, fn) {
                n_fn++;
                json_t *params = json_object_get(fn, "parameters");
                char *key = json_dumps(params, JSON_COMPACT | JSON_SORT_KEYS);
                if (!key || json_object_get(seen, key)) {
                    nx_free(key);
                    continue;
                }
                json_object_set_new(seen, key, json_true());
                long idx = n_schema++;
                nx_free(key);
                if (idx % n_shards != shard || (limit >= 0 && idx >= limit)) continue;
                char *schema = json_dumps(params, JSON_COMPACT);
                struct nx_json_schema_params sp = nx_json_schema_default_params();
                sp.bfcl_types = true;
                sp.max_string_chars = max_string;
                nx_grammar *g;
                if (nx_grammar_from_json_schema(schema, strlen(schema), &sp, &g, err, sizeof err)) {
                    fprintf(stderr, "refused %s: %s\n", json_string_value(json_object_get(fn, "name")),
                            err);
                    n_refused++;
                    nx_free(schema);
                    continue;
                }
                n_done++;
                /* one sampler per schema: its RNG runs on over the generations, and the mask
                   cache is kept (nx_sampler_grammar_reset) */
                struct nx_sampler_params p = nx_sampler_default_params();
                p.temp = 1.0f;
                p.top_k = 0;
                p.top_p = 1.0f;
                p.min_p = 0;
                p.seed = seed * 1000003u + (uint64_t)idx;
                nx_sampler *s;
                if (nx_sampler_init(&p, n_vocab, &s)) gdie("sampler");
                if (nx_sampler_set_grammar(s, g, gv, NULL, max_tokens)) gdie("set grammar");
                nx_grammar_matcher *gm = nx_sampler_grammar_matcher(s);
                for (int gi = 0; gi < n_gen; gi++) {
                    nx_sampler_grammar_reset(s);
                    nx_ctx_reset(ctx);
                    nx_token t = nx_token_bos(m);
                    char text[8192];
                    size_t tn = 0;
                    bool forced = false, ended = false;
                    for (int step = 0; step < max_tokens; step++) {
                        if (nx_decode(ctx, &t, 1, false)) gdie("decode: %s", nx_ctx_last_error(ctx));
                        int64_t need = nx_grammar_matcher_completion_bytes(gm);
                        bool force = need >= 0 && (int64_t)(max_tokens - step) <= need + 1;
                        forced |= force;
                        struct gmatcher_stats st0, st1;
                        gmatcher_stats((struct gmatcher *)gm, &st0);
                        double a = cpu_time ? cpu_now() : nx_time_s();
                        nx_grammar_matcher_mask(gm, bits, force);
                        double us = ((cpu_time ? cpu_now() : nx_time_s()) - a) * 1e6;
                        gmatcher_stats((struct gmatcher *)gm, &st1);
                        if (st1.last_work > max_work) max_work = st1.last_work;
                        budget = st1.budget;
                        n_partial += st1.partial_masks > st0.partial_masks;
                        dpush(&times, us);
                        dpush(st1.cache_misses > st0.cache_misses ? &fills : &warm, us);
                        if (tf) fprintf(tf, "%.3f\n", us);
                        t = nx_sampler_sample(s, nx_get_logits(ctx, -1));
                        n_tokens++;
                        if (t < 0 || nx_token_is_eog(m, t)) {
                            ended = true;
                            break;
                        }
                        char piece[512];
                        int32_t pn = nx_token_to_piece(m, t, piece, sizeof piece, false);
                        if (pn > 0 && tn + (size_t)pn < sizeof text) {
                            memcpy(text + tn, piece, (size_t)pn);
                            tn += (size_t)pn;
                        }
                    }
                    text[tn] = 0;
                    n_gens++;
                    n_forced_gens += forced;
                    n_incomplete += !ended;
                    json_t *parsed = json_loadb(text, tn, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
                    if (!parsed) n_parse_fail++;
                    json_decref(parsed);
                    if (out) {
                        json_t *rec = json_pack("{s:s,s:s,s:O,s:s%,s:b,s:b}", "file", files[fi],
                                                "function",
                                                json_string_value(json_object_get(fn, "name")),
                                                "schema", params, "output", text, tn, "ended",
                                                ended, "forced", forced);
                        char *js = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
                        if (js) fprintf(out, "%s\n", js);
                        nx_free(js);
                        json_decref(rec);
                    }
                }
                nx_sampler_free(s);
                nx_grammar_free(g);
                nx_free(schema);
                if (n_done % 50 == 0)
                    fprintf(stderr, "  %ld schemas, %ld generations, %.0f s\n", n_done, n_gens,
                            nx_time_s() - t_start);
            }
            json_decref(row);
        }
        free(line);
        fclose(f);
    }
    qsort(times.v, times.n, sizeof *times.v, cmp_double);
    double med = times.n ? times.v[times.n / 2] : 0, p99 = times.n ? times.v[(size_t)(times.n * 0.99)] : 0;
    double p90 = times.n ? times.v[(size_t)(times.n * 0.90)] : 0;
    double mx = times.n ? times.v[times.n - 1] : 0, sum = 0;
    for (size_t i = 0; i < times.n; i++) sum += times.v[i];
    printf("bench-grammar: %ld functions, %ld distinct parameter schemas (shard %d/%d: %ld compiled, "
           "%ld refused)\n",
           n_fn, n_schema, shard, n_shards, n_done, n_refused);
    printf("generations: %ld (%d per schema, max %d tokens, strings capped at %d chars), %ld tokens, "
           "%ld parse failures (jansson), %ld reached the forced closure, %ld without EOS\n",
           n_gens, n_gen, max_tokens, max_string, n_tokens, n_parse_fail, n_forced_gens,
           n_incomplete);
    printf("mask per step (%zu steps, Llama-3 vocab %d tokens): median %.2f us, p90 %.2f us, p99 %.2f "
           "us, max %.0f us, mean %.2f us\n",
           times.n, n_vocab, med, p90, p99, mx, times.n ? sum / (double)times.n : 0);
    qsort(warm.v, warm.n, sizeof *warm.v, cmp_double);
    qsort(fills.v, fills.n, sizeof *fills.v, cmp_double);
    if (warm.n)
        printf("  steps served from the mask cache (%zu): median %.2f us, p99 %.2f us; steps that "
               "filled a cache entry (%zu, first visit of a grammar position): median %.0f us, "
               "p99 %.0f us\n",
               warm.n, warm.v[warm.n / 2], warm.v[(size_t)(warm.n * 0.99)], fills.n,
               fills.n ? fills.v[fills.n / 2] : 0, fills.n ? fills.v[(size_t)(fills.n * 0.99)] : 0);
    printf("  times are %s\n", cpu_time ? "thread CPU time" : "wall time (include preemption)");
    printf("  work per mask: max %lld units (budget %lld); %ld masks cut short by the budget\n",
           (long long)max_work, (long long)budget, n_partial);
    printf("wall %.1f s\n", nx_time_s() - t_start);
    if (out) fclose(out);
    if (tf) fclose(tf);
    json_decref(seen);
    free(times.v);
    free(warm.v);
    free(fills.v);
    free(bits);
    nx_grammar_vocab_free(gv);
    nx_ctx_free(ctx);
    nx_model_free(m);
    return n_parse_fail || n_refused ? 2 : 0;
}
