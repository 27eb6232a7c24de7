/*
 * main.c - the `nexus` command-line tool: run, logits, tokenize, bench, mkmodel.
 *
 * DESIGN: each subcommand parses its own flags with the small helpers below, talks to the
 * engine only through include/nexus.h, prints results to stdout and statistics/progress to
 * stderr, and exits non-zero with a one-line message on any error. This is the only place
 * allowed to exit().
 */
#include <errno.h>
#include <stdarg.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "args.h"
#include "gen/generate.h"
#include "nexus.h"
#include "bench.h"
#include "chat_cmd.h"
#include "embed_cmd.h"
#include "kv_cmd.h"
#include "eval/eval.h"
#include "eval/efficiency.h"
#include "eval/ruler_run.h"
#include "eval/longbench_run.h"
#include "grammar_cmd.h"
#include "mcp_cmd.h"
#include "import_cmd.h"
#include "agent_cmd.h"
#include "mkmodel_cmd.h"
#include "task_eval.h"
#include "route.h"
#include "serve_cmd.h"

#define die(...) cli_die("nexus", __VA_ARGS__)

/* ---- flag parsing (tools/cli/args.h) ---- */

/* Parses argv[2..] against the tables; exits with status 1 after the message on a bad flag. */
static void parse_flags(const struct arg *const *tables, int argc, char **argv) {
    if (args_parse(tables, argc, argv, 2, "nexus", false, NULL, 0, NULL) != ARGS_OK) exit(1);
}

static char *read_file(const char *path, size_t *len) {
    char err[512];
    char *buf = nx_read_file(path, NX_READ_FILE_MAX, len, err, sizeof err);
    if (!buf) die("%s", err);
    return buf;
}

struct common_opts {
    const char *model;
    int threads;
    int ctx;
    struct nx_ctx_params cp; /* KV policy and budget flags land here */
    enum nx_type kv_type;
    bool use_mmap;
    bool ref_kernels;
};

static const char *const k_kv_types[] = {"f16", "f32", NULL};
static const char *const k_regimes[] = {"prefill", "stream", NULL}; /* = NX_KV_REGIME_* */
static const char *const k_nexus_select[] = {"reservoir", "topk", NULL}; /* nexus.select_topk */

/* The flags shared by every model subcommand, as a table over *o (choice flags land in the
 * int fields and are applied by common_finish). */
struct common_flags {
    struct arg tab[32];
    int kv_type, kv_regime;
    bool kv_type_seen, kv_regime_seen;
    /* policy options (nx_kv_params_set), applied by common_finish when given */
    int32_t nexus_walk, nexus_n;
    float nexus_lambda, nexus_eps, nexus_w_scale;
    bool nexus_fresh_draws, nexus_mean_vectors, nexus_per_head, nexus_match_kv;
    int nexus_select;
    bool seen_select;
    bool seen_walk, seen_n, seen_lambda, seen_eps, seen_w_scale;
};

static void common_table(struct common_opts *o, struct common_flags *f) {
    const struct arg t[] = {
        A_STR("-m", "--model", &o->model),
        A_INT("-t", "--threads", &o->threads, 1, 512),
        A_INT("-c", "--ctx", &o->ctx, 0, 1 << 24),
        A_CHOICE("--kv-type", NULL, &f->kv_type, k_kv_types, .seen = &f->kv_type_seen),
        A_FLAG("--mmap", NULL, &o->use_mmap),
        A_STR("--kv-policy", NULL, &o->cp.kv.policy),
        A_FLOAT("--kv-density", NULL, &o->cp.kv.density),
        A_I32("--kv-budget", NULL, &o->cp.kv.budget, 1, INT32_MAX),
        A_CHOICE("--kv-regime", NULL, &f->kv_regime, k_regimes, .seen = &f->kv_regime_seen),
        A_I32("--kv-block", NULL, &o->cp.kv_block, 1, 4096),
        A_I32("--kv-sink", NULL, &o->cp.kv.sink, 0, 1 << 20),
        A_I32("--kv-recent", NULL, &o->cp.kv.recent, 0, 1 << 20),
        A_I32("--kv-window", NULL, &o->cp.kv.window, 1, 256),
        A_U64("--kv-seed", NULL, &o->cp.kv.seed, 0, LONG_MAX),
        A_I32("--nexus-walk", NULL, &f->nexus_walk, 0, 256, .seen = &f->seen_walk),
        A_FLOAT("--nexus-lambda", NULL, &f->nexus_lambda, .seen = &f->seen_lambda),
        A_FLOAT("--nexus-eps", NULL, &f->nexus_eps, .seen = &f->seen_eps),
        A_I32("--nexus-n", NULL, &f->nexus_n, 1, 100000, .seen = &f->seen_n),
        A_FLOAT("--nexus-w-scale", NULL, &f->nexus_w_scale, .seen = &f->seen_w_scale),
        A_FLAG("--nexus-fresh-draws", NULL, &f->nexus_fresh_draws),
        A_FLAG("--nexus-mean-vectors", NULL, &f->nexus_mean_vectors),
        A_CHOICE("--nexus-select", NULL, &f->nexus_select, k_nexus_select, .seen = &f->seen_select),
        A_FLAG("--nexus-per-head", NULL, &f->nexus_per_head),
        A_FLAG("--nexus-match-kv", NULL, &f->nexus_match_kv),
        A_FLAG("--ref-kernels", NULL, &o->ref_kernels),
        A_END,
    };
    _Static_assert(sizeof t <= sizeof f->tab, "common flag table too small");
    memcpy(f->tab, t, sizeof t);
}

/* A policy option (nx_kv_params_set) from a flag; an out-of-range value is fatal. */
static void kv_opt(struct nx_kv_params *kv, const char *flag, const char *name, double v) {
    if (nx_kv_params_set(kv, name, v) != NX_STATUS_OK) die("%s: value %g out of range", flag, v);
}

static void common_finish(struct common_opts *o, const struct common_flags *f) {
    struct nx_kv_params *kv = &o->cp.kv;
    if (f->kv_type_seen) o->kv_type = f->kv_type == 1 ? NX_TYPE_F32 : NX_TYPE_F16;
    if (f->kv_regime_seen) kv->regime = f->kv_regime;
    if (f->seen_walk) kv_opt(kv, "--nexus-walk", "nexus.walk", f->nexus_walk);
    if (f->seen_lambda) kv_opt(kv, "--nexus-lambda", "nexus.lambda", f->nexus_lambda);
    if (f->seen_eps) kv_opt(kv, "--nexus-eps", "nexus.eps", f->nexus_eps);
    if (f->seen_n) kv_opt(kv, "--nexus-n", "nexus.n", f->nexus_n);
    if (f->seen_w_scale) kv_opt(kv, "--nexus-w-scale", "nexus.w_scale", f->nexus_w_scale);
    if (f->nexus_fresh_draws) kv_opt(kv, "--nexus-fresh-draws", "nexus.fresh_draws", 1);
    if (f->nexus_mean_vectors) kv_opt(kv, "--nexus-mean-vectors", "nexus.mean_vectors", 1);
    if (f->seen_select) kv_opt(kv, "--nexus-select", "nexus.select_topk", f->nexus_select);
    if (f->nexus_per_head) kv_opt(kv, "--nexus-per-head", "nexus.per_head", 1);
    if (f->nexus_match_kv) kv_opt(kv, "--nexus-match-kv", "nexus.match_kv", 1);
}

/* Parses a model subcommand's flags: the shared ones, then the command's own table(s). */
static void parse_model_flags(struct common_opts *o, const struct arg *own, const struct arg *own2,
                              int argc, char **argv) {
    struct common_flags f = {0};
    common_table(o, &f);
    const struct arg *tabs[] = {f.tab, own, own2, NULL};
    if (!own2) tabs[2] = NULL;
    parse_flags(tabs, argc, argv);
    common_finish(o, &f);
}

static struct common_opts common_defaults(void) {
    struct common_opts o = {.model = NULL, .threads = 2, .ctx = 0, .kv_type = NX_TYPE_F16};
    o.cp = nx_ctx_default_params();
    return o;
}

static nx_model *load_model(const struct common_opts *o) {
    if (!o->model) die("no model given (-m MODEL.gguf)");
    if (o->ref_kernels) nx_kernels_force_ref(true);
    struct nx_model_params mp = nx_model_default_params();
    mp.use_mmap = o->use_mmap;
    nx_model *m;
    char err[512];
    double t0 = nx_time_s();
    nx_status st = nx_model_load(o->model, &mp, &m, err, sizeof err);
    if (st) die("cannot load '%s': %s (%s)", o->model, err, nx_status_name(st));
    fprintf(stderr, "model: %s (%.1f MiB, loaded in %.2f s, kernels %s)\n", nx_model_desc(m),
            (double)nx_model_weight_bytes(m) / 1048576.0, nx_time_s() - t0, nx_kernels_name());
    return m;
}

static nx_ctx *make_ctx(const nx_model *m, const struct common_opts *o) {
    struct nx_ctx_params cp = o->cp;
    cp.n_ctx = o->ctx;
    cp.n_threads = o->threads;
    cp.n_threads_batch = o->threads;
    cp.kv_type = o->kv_type;
    nx_ctx *c;
    char err[256];
    nx_status st = nx_ctx_init(m, &cp, &c, err, sizeof err);
    if (st) die("cannot create context: %s", err);
    return c;
}

/* Tokenizes with special-token parsing, BOS/EOS as the model asks when add_special
 * (nx_gen_tokenize); nx_free the result. */
static nx_token *tokenize_text(const nx_model *m, const char *text, size_t len, bool add_special,
                               int32_t *n_out) {
    nx_token *toks;
    struct nx_err err;
    nx_status st = nx_gen_tokenize(m, text, len,
                                   (add_special ? NX_GEN_TOK_ADD_SPECIAL : 0u) | NX_GEN_TOK_PARSE_SPECIAL,
                                   &toks, n_out, &err);
    if (st) die(st == NX_STATUS_NOMEM ? "out of memory" : "tokenizer failed");
    return toks;
}

/* nx_generate's streaming callback: the text as it comes, flushed. */
static int print_text(void *user, const char *text, size_t len) {
    fwrite(text, 1, len, user);
    fflush(user);
    return 0;
}

/* ---- nexus run ---- */

static int cmd_run(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct nx_sampler_params sp = nx_sampler_default_params();
    sp.temp = 0; /* greedy unless asked */
    const char *prompt = "";
    const char *prompt_file = NULL;
    long n_predict = 128;
    const char *splices[16]; /* --splice FILE[@POS], in order */
    struct arg_strs splice_list = {splices, 0, 16};
    bool splice_pin = false, splice_repair = true;
    const char *json_schema = NULL, *grammar_file = NULL; /* constrained output */
    const struct arg own[] = {
        A_STR("-p", "--prompt", &prompt),
        A_STR("-f", "--file", &prompt_file),
        A_LONG("-n", "--n-predict", &n_predict, 0, 1 << 24),
        A_FLOAT("--temp", NULL, &sp.temp),
        A_I32("--top-k", NULL, &sp.top_k, 0, INT32_MAX),
        A_FLOAT("--top-p", NULL, &sp.top_p),
        A_FLOAT("--min-p", NULL, &sp.min_p),
        A_FLOAT("--repeat-penalty", NULL, &sp.repeat_penalty),
        A_I32("--repeat-last-n", NULL, &sp.repeat_last_n, 0, 1 << 20),
        A_U64("--seed", NULL, &sp.seed, 0, LONG_MAX),
        A_STRS("--splice", NULL, &splice_list),
        A_FLAG("--splice-pin", NULL, &splice_pin),
        A_CLEAR("--splice-no-repair", NULL, &splice_repair),
        A_STR("--json-schema", NULL, &json_schema),
        A_STR("--grammar-file", NULL, &grammar_file),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    int n_splices = splice_list.n;
    nx_model *m = load_model(&o);
    nx_ctx *c = make_ctx(m, &o);
    size_t plen = strlen(prompt);
    char *owned = NULL;
    if (prompt_file) {
        owned = read_file(prompt_file, &plen);
        prompt = owned;
    }
    /* compiled KV blocks first, in order (FILE@POS; no @POS: at the end of the sequence); a
       block at position 0 carries the BOS, so the prompt then gets none */
    bool spliced_at_0 = false;
    for (int k = 0; k < n_splices; k++) {
        const char *at = strrchr(splices[k], '@');
        char path[1024];
        long pos = -1;
        snprintf(path, sizeof path, "%.*s", at ? (int)(at - splices[k]) : (int)strlen(splices[k]),
                 splices[k]);
        long long pv;
        if (at && !args_long(at + 1, 0, INT32_MAX, &pv))
            die("--splice: expected an integer in [0, %d], got '%s'", INT32_MAX, at + 1);
        if (at) pos = (long)pv;
        nx_kv_block *b;
        char err[700];
        if (nx_kv_block_load(m, path, &b, err, sizeof err)) die("--splice: %s", err);
        struct nx_splice_params spp = nx_splice_default_params();
        spp.pos = (int32_t)pos;
        spp.pin = splice_pin;
        spp.repair = splice_repair;
        int32_t at_pos = pos < 0 ? nx_ctx_n_past(c) : (int32_t)pos, nrep = 0;
        double ts = nx_time_s();
        if (nx_ctx_splice(c, b, &spp, &nrep)) die("--splice %s: %s", splices[k], nx_ctx_last_error(c));
        fprintf(stderr, "spliced %s: %d tokens at %d (compiled at %d; %d re-decoded) in %.3f s\n",
                path, nx_kv_block_n_tokens(b), at_pos, nx_kv_block_m0(b), nrep, nx_time_s() - ts);
        spliced_at_0 |= at_pos == 0;
        nx_kv_block_free(b);
    }
    int32_t n_prompt;
    nx_token *toks = tokenize_text(m, prompt, plen, !spliced_at_0, &n_prompt);
    if (n_prompt == 0) die(n_splices ? "give a prompt (-p) after the spliced blocks"
                                     : "empty prompt and the model has no BOS token");
    if (nx_ctx_n_past(c) + n_prompt + n_predict > nx_ctx_n_ctx(c)) {
        n_predict = nx_ctx_n_ctx(c) - nx_ctx_n_past(c) - n_prompt;
        if (n_predict < 0) die("prompt (%d tokens) is longer than the context (%d)", n_prompt, nx_ctx_n_ctx(c));
        fprintf(stderr, "note: generation limited to %ld tokens by the context size\n", n_predict);
    }
    nx_sampler *s;
    if (nx_sampler_init(&sp, nx_model_n_vocab(m), &s)) die("invalid sampling parameters");
    nx_grammar *grammar = grammar_cmd_load(json_schema, grammar_file);
    nx_grammar_vocab *gvocab = NULL;
    if (grammar && (nx_grammar_vocab_init(m, &gvocab) ||
                    nx_sampler_set_grammar(s, grammar, gvocab, NULL, (int32_t)n_predict)))
        die("cannot attach the grammar");
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);
    struct nx_gen_params gp = nx_gen_default_params();
    gp.max_tokens = (int32_t)n_predict;
    gp.sampler = s;
    gp.on_text = print_text;
    gp.user = stdout;
    struct nx_gen_result gr;
    struct nx_err gerr;
    if (nx_generate(m, c, toks, n_prompt, &gp, &gr, &gerr)) die("decode failed: %s", nx_ctx_last_error(c));
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tokens/s)\n", n_prompt, gr.t_prompt,
            n_prompt / gr.t_prompt);
    fprintf(stderr, "generation: %ld tokens in %.3f s (%.1f tokens/s)\n", (long)gr.n_generated, gr.t_gen,
            gr.n_generated > 0 ? gr.n_generated / gr.t_gen : 0.0);
    struct nx_kv_stats ks;
    nx_ctx_kv_stats(c, &ks);
    fprintf(stderr,
            "kv cache (%s): peak %.2f MiB, final %.2f MiB (pool %.2f MiB), %lld tokens cached, "
            "%lld eviction rounds, %lld token slots evicted, %.3f s evicting\n",
            o.cp.kv.policy ? o.cp.kv.policy : "full", (double)ks.bytes_peak / 1048576.0,
            (double)ks.bytes_current / 1048576.0, (double)ks.bytes_pool / 1048576.0,
            (long long)ks.tokens_cached, (long long)ks.evictions, (long long)ks.tokens_evicted,
            ks.evict_seconds);
    nx_free(toks);
    nx_free(owned);
    nx_sampler_free(s);
    nx_grammar_vocab_free(gvocab);
    nx_grammar_free(grammar);
    nx_ctx_free(c);
    nx_model_free(m);
    return 0;
}

/* ---- nexus logits ---- */

/* "1,2,3" -> token ids (each in [0, INT32_MAX], args_long); nx_free the result. */
static nx_token *parse_token_list(const char *s, int32_t *n_out) {
    size_t n = 1;
    for (const char *p = s; *p; p++) n += *p == ',';
    nx_token *t = nx_malloc(sizeof *t * n);
    if (!t) die("out of memory");
    int32_t k = 0;
    for (const char *p = s;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        long long v;
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        if (len == 0 && !comma && k > 0) break; /* a trailing comma */
        if (len >= sizeof item || !args_long(item, 0, INT32_MAX, &v)) die("--tokens: bad token id near '%s'", p);
        t[k++] = (nx_token)v;
        if (!comma) break;
        p = comma + 1;
    }
    *n_out = k;
    return t;
}

static int cmd_logits(int argc, char **argv) {
    struct common_opts o = common_defaults();
    const char *prompt = NULL, *tokens = NULL;
    int top = 10;
    bool bos = true;
    const struct arg own[] = {
        A_STR("--prompt", "-p", &prompt),
        A_STR("--tokens", NULL, &tokens),
        A_INT("--top", NULL, &top, 1, 1000),
        A_CLEAR("--no-bos", NULL, &bos),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    if (!prompt == !tokens) die("logits: give exactly one of --prompt TEXT or --tokens 1,2,3");
    nx_model *m = load_model(&o);
    int32_t n;
    nx_token *toks = tokens ? parse_token_list(tokens, &n)
                            : tokenize_text(m, prompt, strlen(prompt), bos, &n);
    if (n == 0) die("no tokens");
    if (o.ctx == 0) o.ctx = n;
    nx_ctx *c = make_ctx(m, &o);
    nx_status st = nx_decode(c, toks, n, true);
    if (st) die("decode failed: %s", nx_ctx_last_error(c));
    int32_t nv = nx_model_n_vocab(m);
    if (top > nv) top = nv;
    int32_t *best = malloc(sizeof *best * (size_t)top);
    for (int32_t p = 0; p < n; p++) {
        const float *l = nx_get_logits(c, p);
        double mx = l[0];
        for (int32_t v = 1; v < nv; v++) mx = l[v] > mx ? l[v] : mx;
        double sum = 0;
        for (int32_t v = 0; v < nv; v++) sum += exp(l[v] - mx);
        /* top-N by insertion (ties to the lower id) */
        int nb = 0;
        for (int32_t v = 0; v < nv; v++) {
            if (nb == top && l[v] <= l[best[nb - 1]]) continue;
            int j = nb < top ? nb++ : top - 1;
            while (j > 0 && l[best[j - 1]] < l[v]) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = v;
        }
        printf("pos=%d tok=%d argmax=%d lse=%.6f top%d=", p, toks[p], best[0], mx + log(sum), top);
        for (int j = 0; j < nb; j++) printf("%s%d:%.6f", j ? "," : "", best[j], l[best[j]]);
        printf("\n");
    }
    free(best);
    nx_free(toks);
    nx_ctx_free(c);
    nx_model_free(m);
    return 0;
}

/* ---- nexus tokenize ---- */

static int cmd_tokenize(int argc, char **argv) {
    struct common_opts o = common_defaults();
    const char *text = NULL, *file = NULL;
    bool bos = false;
    const struct arg own[] = {
        A_STR("--text", NULL, &text),
        A_STR("--file", NULL, &file),
        A_FLAG("--bos", NULL, &bos),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    if (!text == !file) die("tokenize: give exactly one of --text TEXT or --file F");
    nx_model *m = load_model(&o);
    size_t len;
    char *owned = NULL;
    if (file) {
        owned = read_file(file, &len);
        text = owned;
    } else {
        len = strlen(text);
    }
    int32_t n;
    nx_token *toks = tokenize_text(m, text, len, bos, &n);
    for (int32_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", toks[i]);
    printf("\n");
    nx_free(toks);
    nx_free(owned);
    nx_model_free(m);
    return 0;
}

/* ---- nexus bench ---- */

static int cmd_bench(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct bench_params bp = bench_default_params();
    int par[16], n_par = 0;
    const char *par_list = NULL, *par_policies = NULL;
    const struct arg own[] = {
        A_INT("-p", NULL, &bp.n_prompt, 0, 1 << 20),
        A_INT("-n", NULL, &bp.n_gen, 0, 1 << 20),
        A_INT("--depth", "-d", &bp.depth, 0, 1 << 22),
        A_INT("-r", "--reps", &bp.reps, 1, 1000),
        A_FLAG("--json", NULL, &bp.json),
        A_CLEAR("--no-bandwidth", NULL, &bp.measure_bandwidth),
        A_STR("--parallel", NULL, &par_list),
        A_STR("--seq-policies", NULL, &par_policies),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    if (par_list) { /* N or a comma list of N */
        char buf[128], *save = NULL;
        snprintf(buf, sizeof buf, "%s", par_list);
        for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            char *end;
            long v = strtol(t, &end, 10);
            if (n_par == 16) die("bench: --parallel: at most 16 values");
            if (*end || end == t || v < 1 || v > 1024)
                die("bench: --parallel: expected integers in [1, 1024], got '%s'", t);
            par[n_par++] = (int)v;
        }
    }
    nx_model *m = load_model(&o);
    if (n_par > 0) {
        struct nx_ctx_params cp = o.cp;
        cp.n_threads = cp.n_threads_batch = o.threads;
        cp.kv_type = o.kv_type;
        int rc = bench_parallel(m, &cp, &bp, par, n_par, par_policies);
        nx_model_free(m);
        return rc;
    }
    if (o.ctx == 0) o.ctx = bp.depth + (bp.n_prompt > bp.n_gen ? bp.n_prompt : bp.n_gen) + 1;
    nx_ctx *c = make_ctx(m, &o);
    int rc = bench_run(m, c, o.threads, &bp);
    nx_ctx_free(c);
    nx_model_free(m);
    return rc;
}

/* The policy x density x regime sweep flags shared by eval, eval-ruler and eval-longbench. */
#define SWEEP_FLAGS(pp, dd, rr) \
    A_STR("--policies", NULL, pp), A_STR("--densities", NULL, dd), A_STR("--regimes", NULL, rr)

/* ---- nexus eval ---- */

static int cmd_eval(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct eval_params ep = {.policies = "full,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus",
                             .densities = "0.1,0.2,0.4", .regimes = "prefill,stream",
                             .streams = 64, .stream_len = 512, .seed = 1, .budgets = "seen",
                             .reference = "full", .seeds = 1, .score_len = 64};
    const struct arg own[] = {
        SWEEP_FLAGS(&ep.policies, &ep.densities, &ep.regimes),
        A_INT("--streams", NULL, &ep.streams, 1, 10000),
        A_INT("--stream-len", NULL, &ep.stream_len, 8, 1 << 20),
        A_STR("--budgets", NULL, &ep.budgets),
        A_STR("--reference", NULL, &ep.reference),
        A_INT("--seeds", NULL, &ep.seeds, 1, 64),
        A_INT("--score-len", NULL, &ep.score_len, 0, 1 << 20),
        A_U64("--seed", NULL, &ep.seed, 0, LONG_MAX),
        A_STR("--json", NULL, &ep.json_path),
        A_STR("--svg", NULL, &ep.svg_dir),
        A_STR("--file", "-f", &ep.text_file),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    ep.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    ep.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = cli_exit_status(eval_run(m, &ep));
    nx_model_free(m);
    return rc;
}

/* ---- nexus eval-efficiency ---- */

static int cmd_eval_efficiency(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct effi_params ep = effi_default_params();
    const struct arg own[] = {
        A_STR("--policies", NULL, &ep.policies),
        A_FLOAT("--density", NULL, &ep.density),
        A_CHOICE("--regime", NULL, &ep.regime, k_regimes), /* index = NX_KV_REGIME_* */
        A_INT("--prompt", "-p", &ep.prompt, 0, 1 << 22),
        A_STR("--lengths", NULL, &ep.lengths),
        A_U64("--seed", NULL, &ep.seed, 0, LONG_MAX),
        A_STR("--json", NULL, &ep.json_path),
        A_STR("--svg", NULL, &ep.svg_dir),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    ep.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    ep.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = cli_exit_status(eval_efficiency_run(m, &ep));
    nx_model_free(m);
    return rc;
}

/* ---- nexus eval-ruler ---- */

static int cmd_eval_ruler(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct ruler_params rp = ruler_default_params();
    const struct arg own[] = {
        SWEEP_FLAGS(&rp.policies, &rp.densities, &rp.regimes),
        A_STR("--tasks", NULL, &rp.tasks),
        A_INT("--length", NULL, &rp.length, 16, 1 << 22),
        A_INT("--samples", NULL, &rp.samples, 1, 100000),
        A_INT("--max-new", NULL, &rp.max_new, 0, 1 << 20),
        A_U64("--seed", NULL, &rp.seed, 0, LONG_MAX),
        A_STR("--json", NULL, &rp.json_path),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    rp.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    rp.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = cli_exit_status(eval_ruler_run(m, &rp));
    nx_model_free(m);
    return rc;
}

/* ---- nexus eval-longbench ---- */

static int cmd_eval_longbench(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct longbench_params lp = longbench_default_params();
    const struct arg own[] = {
        SWEEP_FLAGS(&lp.policies, &lp.densities, &lp.regimes),
        A_STR("--data", NULL, &lp.data),
        A_INT("--max-len", NULL, &lp.max_len, 8, 1 << 22),
        A_INT("--max-new", NULL, &lp.max_new, 1, 1 << 20),
        A_INT("--limit", NULL, &lp.limit, 1, 1 << 30),
        A_STR("--template", NULL, &lp.tmpl),
        A_STR("--json", NULL, &lp.json_path),
        A_END,
    };
    parse_model_flags(&o, own, NULL, argc, argv);
    if (!lp.data) die("eval-longbench: --data FILE.jsonl is required");
    lp.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    lp.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = cli_exit_status(eval_longbench_run(m, &lp));
    nx_model_free(m);
    return rc;
}

static void usage(void) {
    fprintf(stderr,
            "nexus %s - an inference runtime for long-lived LLM agents\n"
            "usage:\n"
            "  nexus run -m MODEL [-p PROMPT | -f FILE] [-n N] [-t N] [-c CTX] [--temp T]\n"
            "            [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S]\n"
            "            [--splice BLOCK[@POS]]... [--splice-pin] [--splice-no-repair]\n"
            "  nexus kv compile -m MODEL (--text T | --file F) [--m0 N] [--prefix TEXT] [--f32]\n"
            "            [--no-bos] -o BLOCK\n"
            "  nexus kv info BLOCK [-m MODEL]\n"
            "  nexus splice-eval -m MODEL [--depths 0,64,256,...] [--block 64] [--query 32]\n"
            "            [--streams 4] [--reps 3] [--json OUT] [--svg FILE]\n"
            "  nexus logits -m MODEL (--prompt TEXT | --tokens 1,2,3) [--top 10] [--no-bos]\n"
            "  nexus tokenize -m MODEL (--text TEXT | --file F) [--bos]\n"
            "  nexus bench -m MODEL [-p 512] [-n 128] [--depth D] [-t N] [-r REPS] [--json]\n"
            "            [--parallel N[,N...]] [--seq-policies POLICY[:DENSITY],...]\n"
            "  nexus mkmodel -o OUT.gguf [--preset NAME] [--arch A] [--type T] ... (--help)\n"
            "  nexus import -w WEIGHTS.nxw --like TEMPLATE.gguf -o OUT.gguf [--set K=T:V] (--help)\n"
            "  nexus task-eval -m MODEL --tasks FILE.jsonl [--policies ...] [--densities ...] (--help)\n"
            "  nexus mcp list|call (--config FILE | --server \"CMD ARGS\") [TOOL JSON] (--help)\n"
            "  nexus embed -m MODEL [--pooling mean|cls|last] [--no-normalize] [-t N] TEXT...\n"
            "  nexus rerank -m MODEL --query Q [-t N] DOC...\n"
            "  nexus eval -m MODEL [--policies full,nexus,...] [--densities 0.1,0.2]\n"
            "            [--regimes prefill,stream] [--streams N] [--stream-len N] [--seed S]\n"
            "            [--budgets seen,prompt] [--reference full|SPEC] [--seeds N]\n"
            "            [--score-len 64] [--json OUT] [--svg DIR] [--file TEXT]\n"
            "            (SPEC: policy or policy/opt/..., e.g. nexus/topk/fresh; bounds: random,\n"
            "            bottomk, oracle, oracle/values; -t N runs N streams at once)\n"
            "  nexus eval-efficiency -m MODEL [--policies full,nexus,...] [--density 0.2]\n"
            "            [--regime stream|prefill] [--prompt 512] [--lengths 1024,4096,8192]\n"
            "            [--json OUT] [--svg DIR]\n"
            "  nexus eval-ruler -m MODEL [--tasks all|niah_single_1,...] [--length 4096]\n"
            "            [--samples 4] [--policies ...] [--densities 0.2] [--regimes prefill]\n"
            "            [--max-new N] [--seed S] [--json OUT]\n"
            "  nexus eval-longbench -m MODEL --data FILE.jsonl[,FILE2] [--policies ...]\n"
            "            [--densities 0.2] [--regimes prefill] [--max-len N] [--max-new N]\n"
            "            [--limit N] [--template '{context} ... {input}'] [--json OUT]\n"
            "  nexus agent -m MODEL --mcp CONFIG [--steps N] [--trace OUT.json] \"task\" (--help)\n"
            "  nexus eval-toolpath -m MODEL [--sizes 10,50,100,250] [--json OUT] [--svg FILE] (--help)\n"
            "  nexus route (--tools FILE | --mcp CONFIG) [--embedder bm25|dense|hybrid] \"query\"\n"
            "  nexus signatures --tools FILE... -m VOCAB.gguf [--json OUT]\n"
            "  nexus eval-routing [--embedders bm25,hybrid] [--embed-model PATH] [--json OUT]\n"
            "  nexus bench-slb [--dim 384] [--sizes 10,50,100,250,1000] [--json OUT]\n"
            "common: --kv-type f16|f32, --mmap (use weights in place), --ref-kernels\n"
            "KV budget (run, bench): --kv-policy full|streaming|h2o|snapkv|pyramidkv|adakv|\n"
            "  morphkv|tova|nexus, --kv-density D | --kv-budget TOKENS, --kv-regime prefill|stream,\n"
            "  --kv-block 32, --kv-sink 32, --kv-recent 32, --kv-window 16, --kv-seed S,\n"
            "  --nexus-walk 3, --nexus-lambda 0.5, --nexus-eps 1e-6, --nexus-n 5,\n"
            "  --nexus-w-scale 1, --nexus-fresh-draws, --nexus-mean-vectors,\n"
            "  --nexus-select reservoir|topk, --nexus-per-head, --nexus-match-kv\n",
            nx_version());
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc, argv);
    if (!strcmp(cmd, "chat")) return chat_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc, argv);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc, argv);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc, argv);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
    if (!strcmp(cmd, "eval-efficiency")) return cmd_eval_efficiency(argc, argv);
    if (!strcmp(cmd, "eval-ruler")) return cmd_eval_ruler(argc, argv);
    if (!strcmp(cmd, "eval-longbench")) return cmd_eval_longbench(argc, argv);
    if (!strcmp(cmd, "mkmodel")) return mkmodel_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "agent")) return agent_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "eval-toolpath")) return eval_toolpath_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "import")) return import_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "task-eval")) return task_eval_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "mcp")) return mcp_cmd_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "bench-grammar")) return bench_grammar_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "route")) return route_main(argc, argv);
    if (!strcmp(cmd, "signatures")) return signatures_main(argc, argv);
    if (!strcmp(cmd, "eval-routing")) return eval_routing_main(argc, argv);
    if (!strcmp(cmd, "bench-slb")) return bench_slb_main(argc, argv);
    if (!strcmp(cmd, "embed")) return embed_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "kv")) return kv_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "splice-eval")) return splice_eval_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "rerank")) return rerank_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "serve")) return serve_main(argc, argv);
    if (!strcmp(cmd, "--version")) {
        printf("nexus %s\n", nx_version());
        return 0;
    }
    usage();
    die("unknown command '%s'", cmd);
}
