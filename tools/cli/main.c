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
#include "nexus.h"
#include "bench.h"
#include "embed_cmd.h"
#include "kv_cmd.h"
#include "eval.h"
#include "eval_efficiency.h"
#include "eval_ruler.h"
#include "eval_longbench.h"
#include "mcp_cmd.h"
#include "import_cmd.h"
#include "task_eval.h"
#include "mkmodel.h"
#include "route.h"

__attribute__((noreturn, format(printf, 1, 2))) static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nexus: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

/* ---- flag parsing ---- */

static long parse_long(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        die("%s: expected an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
    return x;
}

static double parse_double(const char *flag, const char *v) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) die("%s: expected a number, got '%s'", flag, v);
    return x;
}

static const char *need_arg(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) die("%s needs a value", argv[*i]);
    return argv[++*i];
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

/* Handles flags shared by every model subcommand; returns true when argv[*i] was one. */
static bool common_flag(struct common_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "-m") || !strcmp(a, "--model"))
        o->model = need_arg(argc, argv, i);
    else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
        o->threads = (int)parse_long(a, need_arg(argc, argv, i), 1, 512);
    else if (!strcmp(a, "-c") || !strcmp(a, "--ctx"))
        o->ctx = (int)parse_long(a, need_arg(argc, argv, i), 0, 1 << 24);
    else if (!strcmp(a, "--kv-type")) {
        const char *v = need_arg(argc, argv, i);
        if (!strcmp(v, "f16"))
            o->kv_type = NX_TYPE_F16;
        else if (!strcmp(v, "f32"))
            o->kv_type = NX_TYPE_F32;
        else
            die("--kv-type: expected f16 or f32, got '%s'", v);
    } else if (!strcmp(a, "--mmap"))
        o->use_mmap = true;
    else if (!strcmp(a, "--kv-policy"))
        o->cp.kv_policy = need_arg(argc, argv, i);
    else if (!strcmp(a, "--kv-density"))
        o->cp.kv_density = (float)parse_double(a, need_arg(argc, argv, i));
    else if (!strcmp(a, "--kv-budget"))
        o->cp.kv_budget = (int32_t)parse_long(a, need_arg(argc, argv, i), 1, INT32_MAX);
    else if (!strcmp(a, "--kv-regime")) {
        const char *v = need_arg(argc, argv, i);
        if (!strcmp(v, "prefill"))
            o->cp.kv_regime = NX_KV_REGIME_PREFILL;
        else if (!strcmp(v, "stream"))
            o->cp.kv_regime = NX_KV_REGIME_STREAM;
        else
            die("--kv-regime: expected prefill or stream, got '%s'", v);
    } else if (!strcmp(a, "--kv-block"))
        o->cp.kv_block = (int32_t)parse_long(a, need_arg(argc, argv, i), 1, 4096);
    else if (!strcmp(a, "--kv-sink"))
        o->cp.kv_sink = (int32_t)parse_long(a, need_arg(argc, argv, i), 0, 1 << 20);
    else if (!strcmp(a, "--kv-recent"))
        o->cp.kv_recent = (int32_t)parse_long(a, need_arg(argc, argv, i), 0, 1 << 20);
    else if (!strcmp(a, "--kv-window"))
        o->cp.kv_window = (int32_t)parse_long(a, need_arg(argc, argv, i), 1, 256);
    else if (!strcmp(a, "--kv-seed"))
        o->cp.kv_seed = (uint64_t)parse_long(a, need_arg(argc, argv, i), 0, LONG_MAX);
    else if (!strcmp(a, "--nexus-walk"))
        o->cp.nexus_walk = (int32_t)parse_long(a, need_arg(argc, argv, i), 0, 256);
    else if (!strcmp(a, "--nexus-lambda"))
        o->cp.nexus_lambda = (float)parse_double(a, need_arg(argc, argv, i));
    else if (!strcmp(a, "--nexus-eps"))
        o->cp.nexus_eps = (float)parse_double(a, need_arg(argc, argv, i));
    else if (!strcmp(a, "--nexus-n"))
        o->cp.nexus_n = (int32_t)parse_long(a, need_arg(argc, argv, i), 1, 100000);
    else if (!strcmp(a, "--nexus-w-scale"))
        o->cp.nexus_w_scale = (float)parse_double(a, need_arg(argc, argv, i));
    else if (!strcmp(a, "--nexus-fresh-draws"))
        o->cp.nexus_fresh_draws = true;
    else if (!strcmp(a, "--nexus-mean-vectors"))
        o->cp.nexus_mean_vectors = true;
    else if (!strcmp(a, "--ref-kernels"))
        o->ref_kernels = true;
    else
        return false;
    return true;
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

static nx_token *tokenize_text(const nx_model *m, const char *text, size_t len, bool add_special,
                               int32_t *n_out) {
    int32_t n = nx_tokenize(m, text, len, NULL, 0, add_special, true);
    if (n == INT32_MIN) die("tokenizer failed");
    int32_t need = n < 0 ? -n : n;
    nx_token *toks = malloc(sizeof *toks * (size_t)(need > 0 ? need : 1));
    if (!toks) die("out of memory");
    n = nx_tokenize(m, text, len, toks, need, add_special, true);
    if (n < 0) die("tokenizer failed");
    *n_out = n;
    return toks;
}

static void print_piece(const nx_model *m, nx_token t, FILE *out) {
    char buf[256];
    int32_t n = nx_token_to_piece(m, t, buf, sizeof buf, false);
    if (n > 0) fwrite(buf, 1, (size_t)n, out);
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
    int n_splices = 0;
    bool splice_pin = false, splice_repair = true;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-p") || !strcmp(a, "--prompt"))
            prompt = need_arg(argc, argv, &i);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file"))
            prompt_file = need_arg(argc, argv, &i);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict"))
            n_predict = parse_long(a, need_arg(argc, argv, &i), 0, 1 << 24);
        else if (!strcmp(a, "--temp"))
            sp.temp = (float)parse_double(a, need_arg(argc, argv, &i));
        else if (!strcmp(a, "--top-k"))
            sp.top_k = (int32_t)parse_long(a, need_arg(argc, argv, &i), 0, INT32_MAX);
        else if (!strcmp(a, "--top-p"))
            sp.top_p = (float)parse_double(a, need_arg(argc, argv, &i));
        else if (!strcmp(a, "--min-p"))
            sp.min_p = (float)parse_double(a, need_arg(argc, argv, &i));
        else if (!strcmp(a, "--repeat-penalty"))
            sp.repeat_penalty = (float)parse_double(a, need_arg(argc, argv, &i));
        else if (!strcmp(a, "--repeat-last-n"))
            sp.repeat_last_n = (int32_t)parse_long(a, need_arg(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--seed"))
            sp.seed = (uint64_t)parse_long(a, need_arg(argc, argv, &i), 0, LONG_MAX);
        else if (!strcmp(a, "--splice")) {
            if (n_splices == 16) die("--splice: at most 16 blocks");
            splices[n_splices++] = need_arg(argc, argv, &i);
        } else if (!strcmp(a, "--splice-pin"))
            splice_pin = true;
        else if (!strcmp(a, "--splice-no-repair"))
            splice_repair = false;
        else
            die("run: unknown option '%s' (see nexus --help)", a);
    }
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
        if (at) pos = parse_long("--splice", at + 1, 0, INT32_MAX);
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
    for (int32_t i = 0; i < n_prompt; i++) nx_sampler_accept(s, toks[i]);
    fwrite(prompt, 1, plen, stdout);
    fflush(stdout);
    double t0 = nx_time_s();
    nx_status st = nx_decode(c, toks, n_prompt, false);
    if (st) die("decode failed: %s", nx_ctx_last_error(c));
    double t_prompt = nx_time_s() - t0;
    long n_gen = 0;
    double t1 = nx_time_s();
    for (; n_gen < n_predict; n_gen++) {
        nx_token t = nx_sampler_sample(s, nx_get_logits(c, -1));
        if (nx_token_is_eog(m, t)) break;
        print_piece(m, t, stdout);
        fflush(stdout);
        if (n_gen + 1 == n_predict) {
            n_gen++;
            break;
        }
        st = nx_decode(c, &t, 1, false);
        if (st) die("decode failed: %s", nx_ctx_last_error(c));
    }
    double t_gen = nx_time_s() - t1;
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "prompt: %d tokens in %.3f s (%.1f tokens/s)\n", n_prompt, t_prompt,
            n_prompt / t_prompt);
    fprintf(stderr, "generation: %ld tokens in %.3f s (%.1f tokens/s)\n", n_gen, t_gen,
            n_gen > 0 ? n_gen / t_gen : 0.0);
    struct nx_kv_stats ks;
    nx_ctx_kv_stats(c, &ks);
    fprintf(stderr,
            "kv cache (%s): peak %.2f MiB, final %.2f MiB (pool %.2f MiB), %lld tokens cached, "
            "%lld eviction rounds, %lld token slots evicted, %.3f s evicting\n",
            o.cp.kv_policy ? o.cp.kv_policy : "full", (double)ks.bytes_peak / 1048576.0,
            (double)ks.bytes_current / 1048576.0, (double)ks.bytes_pool / 1048576.0,
            (long long)ks.tokens_cached, (long long)ks.evictions, (long long)ks.tokens_evicted,
            ks.evict_seconds);
    free(toks);
    nx_free(owned);
    nx_sampler_free(s);
    nx_ctx_free(c);
    nx_model_free(m);
    return 0;
}

/* ---- nexus logits ---- */

static nx_token *parse_token_list(const char *s, int32_t *n_out) {
    int32_t cap = 16, n = 0;
    nx_token *t = malloc(sizeof *t * (size_t)cap);
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) die("--tokens: bad token id near '%s'", p);
        if (n == cap) t = realloc(t, sizeof *t * (size_t)(cap *= 2));
        if (!t) die("out of memory");
        t[n++] = (nx_token)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) die("--tokens: expected ',' near '%s'", p);
    }
    *n_out = n;
    return t;
}

static int cmd_logits(int argc, char **argv) {
    struct common_opts o = common_defaults();
    const char *prompt = NULL, *tokens = NULL;
    int top = 10;
    bool bos = true;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "--prompt") || !strcmp(a, "-p"))
            prompt = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--tokens"))
            tokens = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--top"))
            top = (int)parse_long(a, need_arg(argc, argv, &i), 1, 1000);
        else if (!strcmp(a, "--no-bos"))
            bos = false;
        else
            die("logits: unknown option '%s'", a);
    }
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
    free(toks);
    nx_ctx_free(c);
    nx_model_free(m);
    return 0;
}

/* ---- nexus tokenize ---- */

static int cmd_tokenize(int argc, char **argv) {
    struct common_opts o = common_defaults();
    const char *text = NULL, *file = NULL;
    bool bos = false;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "--text"))
            text = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--file"))
            file = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--bos"))
            bos = true;
        else
            die("tokenize: unknown option '%s'", a);
    }
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
    free(toks);
    nx_free(owned);
    nx_model_free(m);
    return 0;
}

/* ---- nexus bench ---- */

static int cmd_bench(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct bench_params bp = bench_default_params();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "-p"))
            bp.n_prompt = (int)parse_long(a, need_arg(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "-n"))
            bp.n_gen = (int)parse_long(a, need_arg(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--depth") || !strcmp(a, "-d"))
            bp.depth = (int)parse_long(a, need_arg(argc, argv, &i), 0, 1 << 22);
        else if (!strcmp(a, "-r") || !strcmp(a, "--reps"))
            bp.reps = (int)parse_long(a, need_arg(argc, argv, &i), 1, 1000);
        else if (!strcmp(a, "--json"))
            bp.json = true;
        else if (!strcmp(a, "--no-bandwidth"))
            bp.measure_bandwidth = false;
        else
            die("bench: unknown option '%s'", a);
    }
    nx_model *m = load_model(&o);
    if (o.ctx == 0) o.ctx = bp.depth + (bp.n_prompt > bp.n_gen ? bp.n_prompt : bp.n_gen) + 1;
    nx_ctx *c = make_ctx(m, &o);
    int rc = bench_run(m, c, o.threads, &bp);
    nx_ctx_free(c);
    nx_model_free(m);
    return rc;
}

/* The policy x density x regime sweep flags shared by eval, eval-ruler and eval-longbench. */
static bool sweep_flag(int argc, char **argv, int *i, const char **policies,
                       const char **densities, const char **regimes) {
    const char *a = argv[*i];
    const char **dst = !strcmp(a, "--policies")    ? policies
                       : !strcmp(a, "--densities") ? densities
                       : !strcmp(a, "--regimes")   ? regimes
                                                   : NULL;
    if (dst) *dst = need_arg(argc, argv, i);
    return dst != NULL;
}

/* ---- nexus eval ---- */

static int cmd_eval(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct eval_params ep = {.policies = "full,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus",
                             .densities = "0.1,0.2,0.4", .regimes = "prefill,stream",
                             .streams = 16, .stream_len = 512, .recall_blocks = 2, .seed = 1};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i) ||
            sweep_flag(argc, argv, &i, &ep.policies, &ep.densities, &ep.regimes))
            continue;
        if (!strcmp(a, "--streams"))
            ep.streams = (int)parse_long(a, need_arg(argc, argv, &i), 1, 10000);
        else if (!strcmp(a, "--stream-len"))
            ep.stream_len = (int)parse_long(a, need_arg(argc, argv, &i), 8, 1 << 20);
        else if (!strcmp(a, "--recall-blocks"))
            ep.recall_blocks = (int)parse_long(a, need_arg(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--seed"))
            ep.seed = (uint64_t)parse_long(a, need_arg(argc, argv, &i), 0, LONG_MAX);
        else if (!strcmp(a, "--json"))
            ep.json_path = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--svg"))
            ep.svg_dir = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--file") || !strcmp(a, "-f"))
            ep.text_file = need_arg(argc, argv, &i);
        else
            die("eval: unknown option '%s'", a);
    }
    ep.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    ep.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = eval_run(m, &ep);
    nx_model_free(m);
    return rc;
}

/* ---- nexus eval-efficiency ---- */

static int cmd_eval_efficiency(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct effi_params ep = effi_default_params();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i)) continue;
        if (!strcmp(a, "--policies"))
            ep.policies = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--density"))
            ep.density = (float)parse_double(a, need_arg(argc, argv, &i));
        else if (!strcmp(a, "--regime")) {
            const char *v = need_arg(argc, argv, &i);
            ep.regime = eval_regime_from_name(v);
            if (ep.regime < 0) die("--regime: expected prefill or stream, got '%s'", v);
        } else if (!strcmp(a, "--prompt") || !strcmp(a, "-p"))
            ep.prompt = (int)parse_long(a, need_arg(argc, argv, &i), 0, 1 << 22);
        else if (!strcmp(a, "--lengths"))
            ep.lengths = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--seed"))
            ep.seed = (uint64_t)parse_long(a, need_arg(argc, argv, &i), 0, LONG_MAX);
        else if (!strcmp(a, "--json"))
            ep.json_path = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--svg"))
            ep.svg_dir = need_arg(argc, argv, &i);
        else
            die("eval-efficiency: unknown option '%s'", a);
    }
    ep.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    ep.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = eval_efficiency_run(m, &ep);
    nx_model_free(m);
    return rc;
}

/* ---- nexus eval-ruler ---- */

static int cmd_eval_ruler(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct ruler_params rp = ruler_default_params();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i)) continue;
        if (sweep_flag(argc, argv, &i, &rp.policies, &rp.densities, &rp.regimes)) continue;
        if (!strcmp(a, "--tasks"))
            rp.tasks = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--length"))
            rp.length = (int)parse_long(a, need_arg(argc, argv, &i), 16, 1 << 22);
        else if (!strcmp(a, "--samples"))
            rp.samples = (int)parse_long(a, need_arg(argc, argv, &i), 1, 100000);
        else if (!strcmp(a, "--max-new"))
            rp.max_new = (int)parse_long(a, need_arg(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--seed"))
            rp.seed = (uint64_t)parse_long(a, need_arg(argc, argv, &i), 0, LONG_MAX);
        else if (!strcmp(a, "--json"))
            rp.json_path = need_arg(argc, argv, &i);
        else
            die("eval-ruler: unknown option '%s'", a);
    }
    rp.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    rp.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = eval_ruler_run(m, &rp);
    nx_model_free(m);
    return rc;
}

/* ---- nexus eval-longbench ---- */

static int cmd_eval_longbench(int argc, char **argv) {
    struct common_opts o = common_defaults();
    struct longbench_params lp = longbench_default_params();
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (common_flag(&o, argc, argv, &i)) continue;
        if (sweep_flag(argc, argv, &i, &lp.policies, &lp.densities, &lp.regimes)) continue;
        if (!strcmp(a, "--data"))
            lp.data = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--max-len"))
            lp.max_len = (int)parse_long(a, need_arg(argc, argv, &i), 8, 1 << 22);
        else if (!strcmp(a, "--max-new"))
            lp.max_new = (int)parse_long(a, need_arg(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--limit"))
            lp.limit = (int)parse_long(a, need_arg(argc, argv, &i), 1, 1 << 30);
        else if (!strcmp(a, "--template"))
            lp.tmpl = need_arg(argc, argv, &i);
        else if (!strcmp(a, "--json"))
            lp.json_path = need_arg(argc, argv, &i);
        else
            die("eval-longbench: unknown option '%s'", a);
    }
    if (!lp.data) die("eval-longbench: --data FILE.jsonl is required");
    lp.threads = o.threads;
    o.cp.kv_type = o.kv_type;
    lp.base = &o.cp;
    nx_model *m = load_model(&o);
    int rc = eval_longbench_run(m, &lp);
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
            "  nexus mkmodel -o OUT.gguf [--preset NAME] [--arch A] [--type T] ... (--help)\n"
            "  nexus import -w WEIGHTS.nxw --like TEMPLATE.gguf -o OUT.gguf [--set K=T:V] (--help)\n"
            "  nexus task-eval -m MODEL --tasks FILE.jsonl [--policies ...] [--densities ...] (--help)\n"
            "  nexus mcp list|call (--config FILE | --server \"CMD ARGS\") [TOOL JSON] (--help)\n"
            "  nexus embed -m MODEL [--pooling mean|cls|last] [--no-normalize] [-t N] TEXT...\n"
            "  nexus rerank -m MODEL --query Q [-t N] DOC...\n"
            "  nexus eval -m MODEL [--policies full,nexus,...] [--densities 0.1,0.2]\n"
            "            [--regimes prefill,stream] [--streams N] [--stream-len N] [--seed S]\n"
            "            [--recall-blocks K] [--json OUT] [--svg DIR] [--file TEXT]\n"
            "  nexus eval-efficiency -m MODEL [--policies full,nexus,...] [--density 0.2]\n"
            "            [--regime stream|prefill] [--prompt 512] [--lengths 1024,4096,8192]\n"
            "            [--json OUT] [--svg DIR]\n"
            "  nexus eval-ruler -m MODEL [--tasks all|niah_single_1,...] [--length 4096]\n"
            "            [--samples 4] [--policies ...] [--densities 0.2] [--regimes prefill]\n"
            "            [--max-new N] [--seed S] [--json OUT]\n"
            "  nexus eval-longbench -m MODEL --data FILE.jsonl[,FILE2] [--policies ...]\n"
            "            [--densities 0.2] [--regimes prefill] [--max-len N] [--max-new N]\n"
            "            [--limit N] [--template '{context} ... {input}'] [--json OUT]\n"
            "  nexus route (--tools FILE | --mcp CONFIG) [--embedder bm25|dense|hybrid] \"query\"\n"
            "  nexus signatures --tools FILE... -m VOCAB.gguf [--json OUT]\n"
            "  nexus eval-routing [--embedders bm25,hybrid] [--embed-model PATH] [--json OUT]\n"
            "  nexus bench-slb [--dim 384] [--sizes 10,50,100,250,1000] [--json OUT]\n"
            "common: --kv-type f16|f32, --mmap (use weights in place), --ref-kernels\n"
            "KV budget (run, bench): --kv-policy full|streaming|h2o|snapkv|pyramidkv|adakv|\n"
            "  morphkv|tova|nexus, --kv-density D | --kv-budget TOKENS, --kv-regime prefill|stream,\n"
            "  --kv-block 32, --kv-sink 32, --kv-recent 32, --kv-window 16, --kv-seed S,\n"
            "  --nexus-walk 3, --nexus-lambda 0.5, --nexus-eps 1e-6, --nexus-n 5,\n"
            "  --nexus-w-scale 1, --nexus-fresh-draws, --nexus-mean-vectors\n",
            nx_version());
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage();
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "run")) return cmd_run(argc, argv);
    if (!strcmp(cmd, "logits")) return cmd_logits(argc, argv);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc, argv);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc, argv);
    if (!strcmp(cmd, "eval")) return cmd_eval(argc, argv);
    if (!strcmp(cmd, "eval-efficiency")) return cmd_eval_efficiency(argc, argv);
    if (!strcmp(cmd, "eval-ruler")) return cmd_eval_ruler(argc, argv);
    if (!strcmp(cmd, "eval-longbench")) return cmd_eval_longbench(argc, argv);
    if (!strcmp(cmd, "mkmodel")) return mkmodel_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "import")) return import_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "task-eval")) return task_eval_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "mcp")) return mcp_cmd_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "route")) return route_main(argc, argv);
    if (!strcmp(cmd, "signatures")) return signatures_main(argc, argv);
    if (!strcmp(cmd, "eval-routing")) return eval_routing_main(argc, argv);
    if (!strcmp(cmd, "bench-slb")) return bench_slb_main(argc, argv);
    if (!strcmp(cmd, "embed")) return embed_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "kv")) return kv_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "splice-eval")) return splice_eval_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "rerank")) return rerank_main(argc - 1, argv + 1);
    if (!strcmp(cmd, "--version")) {
        printf("nexus %s\n", nx_version());
        return 0;
    }
    usage();
    die("unknown command '%s'", cmd);
}
