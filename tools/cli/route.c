/*
 * route.c - the tool-routing subcommands: `nexus route`, `nexus signatures`,
 * `nexus eval-routing` and `nexus bench-slb`.
 *
 * DESIGN
 * - route: registry from files (--tools, repeatable) and/or MCP servers (--mcp CONFIG through
 *   mcp_config_list_tools), sorted; one router; prints the chosen tool, the top-k, the margin,
 *   whether the gate fired (and the reranked order when a reranker ran) and the signature.
 * - signatures: every tool's compressed signature, its characters and tokens under the model's
 *   tokenizer (a vocabulary-only GGUF is enough), against the tool's full JSON as given
 *   (compact); median / p90 / p99 / max and the saving (1 - sum sig tokens / sum full tokens).
 * - eval-routing, BFCL (default; ../shared/data/bfcl):
 *     queries: BFCL_v4_{live_multiple,multiple}; text = the user messages of the first turn;
 *     expected = the function names of possible_answer's ground_truth (any of them counts).
 *     Store: every function definition of every line (names repeat with reworded
 *     descriptions). Pool: the first definition of each distinct name over both files.
 *     Sweep at N tools: the query's own definition of the expected tool, then its own other
 *     candidates (seeded shuffle: real hard negatives), then distractors drawn (seeded) from
 *     the pool, never a name already present; the N tools are shuffled (seeded) so ties do not
 *     favour the answer. R@1, R@5 with Wilson 95% intervals.
 *     Pooled: each set against its own pool (all its distinct names, first definitions, sorted
 *     by name): R@1 / R@3 / R@5, the wrongly routed queries, and the margin gate: queries split
 *     by a seeded hash into calibration / test halves, tau = the 20th percentile (--gate-pct)
 *     of calibration margins, reported: fire rate and R@1 with and without firing on the test
 *     half.
 *     Abstention: relevant queries (both sets) and irrelevance queries
 *     (BFCL_v4_{live_irrelevance,irrelevance}) each routed within their own function list;
 *     split in halves the same way; threshold = rt_calibrate_abstain on the calibration tops;
 *     reported on the test half: abstention rate on irrelevance, false abstention on relevant.
 * - eval-routing, any registry: --tools FILE... --queries Q.jsonl ({"query", "tool"} per line).
 * - bench-slb: seeded random unit vectors; per size and kernel, the latency of single top-5
 *   lookups (quantize query + scan + top-k), median and p99 over --iters lookups.
 * JSON and SVG outputs are written atomically (eval/outfile.h, eval/svg.h).
 */
#include "route.h"
#include "args.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "eval/outfile.h"
#include "eval/svg.h"
#include "mcp/mcp.h"
#include "nexus.h"
#include "route/bm25.h"
#include "route/cascade.h"
#include "route/chat_rerank.h"
#include "route/embed.h"
#include "route/registry.h"
#include "route/router.h"
#include "route/signature.h"
#include "route/slb.h"

#define MAX_FILES 64

/* ---- small helpers ---- */

static int bad_arg(const char *cmd, const char *fmt, const char *a) {
    fprintf(stderr, "nexus %s: ", cmd);
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 2;
}

/* "10,50,100" -> sizes; returns count or -1 */
static int parse_sizes(const char *cmd, const char *s, int *out, int max) {
    int n = args_int_list(s, 1, 1000000, out, max);
    if (n < 0) fprintf(stderr, "nexus %s: bad size list '%s'\n", cmd, s);
    return n;
}

static json_t *jreal(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static int write_json(const char *cmd, const char *path, json_t *root) {
    struct nx_outfile o;
    char err[1300];
    if (nx_outfile_open(&o, path, err, sizeof err)) {
        fprintf(stderr, "nexus %s: %s\n", cmd, err);
        return -1;
    }
    if (json_dumpf(root, o.f, JSON_COMPACT | JSON_PRESERVE_ORDER) != 0) {
        nx_outfile_abort(&o);
        fprintf(stderr, "nexus %s: cannot write '%s'\n", cmd, path);
        return -1;
    }
    fputc('\n', o.f);
    if (nx_outfile_commit(&o, err, sizeof err)) {
        fprintf(stderr, "nexus %s: %s\n", cmd, err);
        return -1;
    }
    fprintf(stderr, "%s: wrote %s\n", cmd, path);
    return 0;
}

/* Registry from files and an optional MCP config, sorted (route/cascade.h); -1 after printing
 * the message. */
static int build_registry(const char *cmd, rt_registry *reg, const char *const *files, int nf,
                          const char *mcp) {
    char err[1024];
    if (rt_registry_build(reg, files, nf, mcp, err, sizeof err)) {
        fprintf(stderr, "nexus %s: %s\n", cmd, err);
        return -1;
    }
    return 0;
}

/* ---- nexus route ---- */

static void route_usage(void) {
    fprintf(stderr,
            "usage: nexus route (--tools FILE ... | --mcp CONFIG) [--embedder bm25|dense|hybrid]\n"
            "                   [--embed-model PATH] [--tau X] [-k 5] [--abstain-below X]\n"
            "                   [--rerank-model PATH.gguf] [--chat-model PATH.gguf [--chat-tau 0.05]\n"
            "                   [--name-decode]] \"query\"\n"
            "When the gate fires (margin < tau) the top-k are reranked by the cross-encoder\n"
            "(--rerank-model) or else by the chat model's relevance score (--chat-model); if the\n"
            "chat reranker's own top-two gap is below --chat-tau (or always with --name-decode)\n"
            "the chat model picks among the top-k names by constrained decoding.\n");
}

static const char *const k_modes[] = {"bm25", "dense", "hybrid", NULL}; /* = enum rt_mode */

int route_main(int argc, char **argv) {
    const char *files[MAX_FILES], *mcp = NULL, *embed_model = NULL, *rerank_model = NULL;
    const char *query = NULL, *chat_model = NULL;
    struct arg_strs tool_files = {files, 0, MAX_FILES};
    bool name_decode = false;
    double chat_tau = 0.05;
    int mode = RT_MODE_BM25;
    struct rt_router_params p = rt_router_default_params();
    const struct arg tab[] = {
        A_STRS("--tools", NULL, &tool_files),
        A_STR("--mcp", NULL, &mcp),
        A_CHOICE("--embedder", NULL, &mode, k_modes),
        A_STR("--embed-model", NULL, &embed_model),
        A_STR("--rerank-model", NULL, &rerank_model),
        A_STR("--chat-model", NULL, &chat_model),
        A_DOUBLE("--chat-tau", NULL, &chat_tau),
        A_FLAG("--name-decode", NULL, &name_decode),
        A_FLOAT("--tau", NULL, &p.tau),
        A_INT("--rrf-depth", NULL, &p.rrf_depth, 0, 1000000),
        A_FLOAT("--abstain-below", NULL, &p.abstain_below),
        A_INT("-k", NULL, &p.k, 1, RT_SLB_KMAX),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    int prc = args_parse(tabs, argc, argv, 2, "nexus route", true, &query, 1, NULL);
    if (prc != ARGS_OK) {
        route_usage();
        return prc == ARGS_HELP ? 0 : 2;
    }
    int nf = tool_files.n;
    p.mode = (enum rt_mode)mode;
    if (!query || (nf == 0 && !mcp)) {
        route_usage();
        return 2;
    }
    if (p.mode != RT_MODE_BM25 && !embed_model)
        return bad_arg("route", "--embedder %s needs --embed-model PATH", rt_mode_name(p.mode));
    if (name_decode && !chat_model) return bad_arg("route", "%s needs --chat-model PATH", "--name-decode");
    rt_registry reg;
    if (build_registry("route", &reg, files, nf, mcp)) {
        rt_registry_free(&reg);
        return 1;
    }
    char err[1024];
    rt_embedder *emb = NULL;
    rt_reranker *rr = NULL;
    rt_router *rt = NULL;
    nx_model *chat = NULL;
    int rc = 1;
    if (p.mode != RT_MODE_BM25) {
        if (rt_embedder_open(embed_model, &emb, err, sizeof err) != NX_STATUS_OK) {
            fprintf(stderr, "nexus route: %s\n", err);
            goto done;
        }
        p.embedder = emb;
    }
    if (rerank_model) {
        if (rt_reranker_open(rerank_model, &rr, err, sizeof err) != NX_STATUS_OK) {
            fprintf(stderr, "nexus route: %s\n", err);
            goto done;
        }
        p.reranker = rr;
    }
    if (chat_model) {
        struct nx_model_params mp = nx_model_default_params();
        if (nx_model_load(chat_model, &mp, &chat, err, sizeof err)) {
            fprintf(stderr, "nexus route: cannot load '%s': %s\n", chat_model, err);
            goto done;
        }
        if (!rr) {
            if (rt_reranker_chat_open(chat, &rr, err, sizeof err) != NX_STATUS_OK) {
                fprintf(stderr, "nexus route: %s\n", err);
                goto done;
            }
            p.reranker = rr;
        }
    }
    rt = rt_router_new(&reg, NULL, 0, &p, NULL, err, sizeof err);
    if (!rt) {
        fprintf(stderr, "nexus route: %s\n", err);
        goto done;
    }
    struct rt_cascade_params cp = rt_cascade_default_params();
    cp.chat = chat;
    cp.name_decode = name_decode;
    cp.chat_tau = chat_tau;
    struct rt_cascade_result res;
    if (rt_cascade_route(rt, &reg, rr, &cp, query, &res, err, sizeof err)) {
        fprintf(stderr, "nexus route: %s\n", err);
        goto done;
    }
    const struct rt_route out = res.route;
    const struct rt_tool *ch = &reg.tools[out.chosen];
    printf("tools: %d (%s)\n", reg.n, rt_mode_name(p.mode));
    printf("chosen: %s%s\n", ch->name, out.abstain ? " (abstain: top score below threshold)" : "");
    printf("top-%d:\n", out.n);
    for (int i = 0; i < out.n; i++)
        printf("  %2d  %-40s %.6f\n", i + 1, reg.tools[out.hit[i].id].name, out.hit[i].score);
    if (isfinite(out.margin))
        printf("margin: %.6f\n", out.margin);
    else
        printf("margin: inf (one tool)\n");
    printf("gate: %s (tau %.6g)\n", out.gate ? "fired" : "not fired", p.tau);
    if (out.reranked) {
        printf("reranked (%s):\n", rr->name);
        for (int i = 0; i < out.n_rerank; i++)
            printf("  %2d  %-40s %.6f\n", i + 1, reg.tools[out.rerank[i].id].name, out.rerank[i].score);
    } else if (out.undecided) {
        printf("undecided: the gate fired and no reranker is configured (--rerank-model, --chat-model)\n");
    }
    if (res.name_decoded) {
        ch = &reg.tools[res.chosen];
        printf("name decoding (%s) chose: %s\n", name_decode ? "--name-decode" : "chat reranker undecided",
               ch->name);
        printf("chosen after name decoding: %s\n", ch->name);
    }
    char *sig = rt_signature(ch);
    printf("signature: %s\n", sig ? sig : "(out of memory)");
    nx_free(sig);
    rc = 0;
done:
    rt_router_free(rt);
    rt_reranker_free(rr);
    nx_model_free(chat);
    rt_embedder_free(emb);
    rt_registry_free(&reg);
    return rc;
}

/* ---- nexus signatures ---- */

static int count_tokens(const nx_model *m, const char *s) {
    int32_t n = nx_tokenize(m, s, strlen(s), NULL, 0, false, false);
    if (n == INT32_MIN) return -1;
    return n < 0 ? -n : n;
}

int signatures_main(int argc, char **argv) {
    const char *files[MAX_FILES], *model = NULL, *json_path = NULL;
    bool verbose = false;
    /* --tools takes every following word that is not a flag: the first through the table, the
       rest as positional words */
    struct arg_strs tool_files = {files, 0, MAX_FILES};
    const struct arg tab[] = {
        A_STRS("--tools", NULL, &tool_files),
        A_STR("-m", "--model", &model),
        A_STR("--json", NULL, &json_path),
        A_FLAG("-v", "--verbose", &verbose),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    const char *more[MAX_FILES];
    int n_more = 0;
    int prc = args_parse(tabs, argc, argv, 2, "nexus signatures", true, more, MAX_FILES, &n_more);
    if (prc != ARGS_OK) {
        fprintf(stderr, "usage: nexus signatures --tools FILE... -m VOCAB.gguf [--json OUT] [-v]\n");
        return prc == ARGS_HELP ? 0 : 2;
    }
    for (int k = 0; k < n_more; k++) {
        if (tool_files.n == MAX_FILES) return bad_arg("signatures", "too many files (%s)", more[k]);
        files[tool_files.n++] = more[k];
    }
    int nf = tool_files.n;
    if (nf == 0 || !model) {
        fprintf(stderr, "usage: nexus signatures --tools FILE... -m VOCAB.gguf [--json OUT] [-v]\n");
        return 2;
    }
    rt_registry reg;
    if (build_registry("signatures", &reg, files, nf, NULL)) {
        rt_registry_free(&reg);
        return 1;
    }
    char err[1024];
    nx_model *m = NULL;
    struct nx_model_params mp = nx_model_default_params();
    if (nx_model_load(model, &mp, &m, err, sizeof err)) {
        fprintf(stderr, "nexus signatures: cannot load '%s': %s\n", model, err);
        rt_registry_free(&reg);
        return 1;
    }
    int n = reg.n, rc = 1;
    float *sig_tok = nx_malloc(sizeof(float) * (size_t)n), *sig_chr = nx_malloc(sizeof(float) * (size_t)n);
    float *full_tok = nx_malloc(sizeof(float) * (size_t)n), *full_chr = nx_malloc(sizeof(float) * (size_t)n);
    json_t *root = json_object(), *tools = json_array();
    double s_sig_tok = 0, s_full_tok = 0, s_sig_chr = 0, s_full_chr = 0;
    if (!sig_tok || !sig_chr || !full_tok || !full_chr || !root || !tools) {
        fprintf(stderr, "nexus signatures: out of memory\n");
        goto done;
    }
    if (verbose) printf("%-40s %6s %6s  %s\n", "tool", "sig_t", "full_t", "signature");
    for (int i = 0; i < n; i++) {
        const struct rt_tool *t = &reg.tools[i];
        char *sig = rt_signature(t);
        if (!sig) {
            fprintf(stderr, "nexus signatures: out of memory\n");
            goto done;
        }
        int st = count_tokens(m, sig), ft = count_tokens(m, t->raw_json);
        if (st < 0 || ft < 0) {
            fprintf(stderr, "nexus signatures: the tokenizer failed on tool '%s'\n", t->name);
            nx_free(sig);
            goto done;
        }
        sig_tok[i] = (float)st;
        full_tok[i] = (float)ft;
        sig_chr[i] = (float)strlen(sig);
        full_chr[i] = (float)strlen(t->raw_json);
        s_sig_tok += st;
        s_full_tok += ft;
        s_sig_chr += sig_chr[i];
        s_full_chr += full_chr[i];
        if (verbose) printf("%-40s %6d %6d  %s\n", t->name, st, ft, sig);
        json_array_append_new(tools, json_pack("{s:s,s:s,s:s,s:i,s:i,s:i,s:i}", "name", t->name,
                                               "source", t->source, "signature", sig,
                                               "sig_chars", (int)sig_chr[i], "sig_tokens", st,
                                               "full_chars", (int)full_chr[i], "full_tokens", ft));
        nx_free(sig);
    }
    double med_t = rt_percentile(sig_tok, n, 50), p90_t = rt_percentile(sig_tok, n, 90);
    double p99_t = rt_percentile(sig_tok, n, 99), max_t = rt_percentile(sig_tok, n, 100);
    double med_c = rt_percentile(sig_chr, n, 50), p99_c = rt_percentile(sig_chr, n, 99);
    double fmed_t = rt_percentile(full_tok, n, 50), fp99_t = rt_percentile(full_tok, n, 99);
    double saving = 1.0 - s_sig_tok / s_full_tok;
    printf("tools: %d from %d file(s); tokenizer: %s\n", n, nf, model);
    printf("%-22s %10s %10s %10s %10s %12s\n", "", "median", "p90", "p99", "max", "total");
    printf("%-22s %10.1f %10.1f %10.1f %10.1f %12.0f\n", "signature tokens", med_t, p90_t, p99_t,
           max_t, s_sig_tok);
    printf("%-22s %10.1f %10.1f %10.1f %10.1f %12.0f\n", "signature chars", med_c,
           rt_percentile(sig_chr, n, 90), p99_c, rt_percentile(sig_chr, n, 100), s_sig_chr);
    printf("%-22s %10.1f %10.1f %10.1f %10.1f %12.0f\n", "full JSON tokens", fmed_t,
           rt_percentile(full_tok, n, 90), fp99_t, rt_percentile(full_tok, n, 100), s_full_tok);
    printf("%-22s %10.1f %10.1f %10.1f %10.1f %12.0f\n", "full JSON chars",
           rt_percentile(full_chr, n, 50), rt_percentile(full_chr, n, 90),
           rt_percentile(full_chr, n, 99), rt_percentile(full_chr, n, 100), s_full_chr);
    printf("signatures are %.1f%% of the full JSON tokens (saving %.1f%%), %.1f%% of its chars\n",
           100.0 * s_sig_tok / s_full_tok, 100.0 * saving, 100.0 * s_sig_chr / s_full_chr);
    json_object_set_new(root, "tokenizer", json_string(model));
    json_object_set_new(root, "n_tools", json_integer(n));
    json_object_set_new(root, "sig_tokens_median", jreal(med_t));
    json_object_set_new(root, "sig_tokens_p90", jreal(p90_t));
    json_object_set_new(root, "sig_tokens_p99", jreal(p99_t));
    json_object_set_new(root, "sig_tokens_max", jreal(max_t));
    json_object_set_new(root, "sig_tokens_total", jreal(s_sig_tok));
    json_object_set_new(root, "sig_chars_median", jreal(med_c));
    json_object_set_new(root, "sig_chars_p99", jreal(p99_c));
    json_object_set_new(root, "full_tokens_median", jreal(fmed_t));
    json_object_set_new(root, "full_tokens_p99", jreal(fp99_t));
    json_object_set_new(root, "full_tokens_total", jreal(s_full_tok));
    json_object_set_new(root, "full_chars_total", jreal(s_full_chr));
    json_object_set_new(root, "token_saving", jreal(saving));
    json_object_set_new(root, "percentiles", json_string("linear interpolation, position p/100*(n-1)"));
    json_object_set_new(root, "tools", tools);
    tools = NULL;
    rc = 0;
    if (json_path && write_json("signatures", json_path, root)) rc = 1;
done:
    json_decref(tools);
    json_decref(root);
    nx_free(sig_tok);
    nx_free(sig_chr);
    nx_free(full_tok);
    nx_free(full_chr);
    nx_model_free(m);
    rt_registry_free(&reg);
    return rc;
}

/* ---- nexus bench-slb ---- */

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double unif(uint64_t *s) { return (double)(splitmix(s) >> 11) / 9007199254740992.0; }

static void rand_unit(uint64_t *s, float *v, int d) {
    double n = 0;
    for (int i = 0; i < d; i++) {
        /* Box-Muller normal */
        double u1 = unif(s), u2 = unif(s);
        v[i] = (float)(sqrt(-2.0 * log(u1 + 1e-300)) * cos(6.283185307179586 * u2));
        n += (double)v[i] * v[i];
    }
    for (int i = 0; i < d; i++) v[i] /= (float)sqrt(n);
}

int bench_slb_main(int argc, char **argv) {
    int dim = 384, sizes[16] = {10, 50, 100, 250, 1000}, ns = 5;
    long iters = 20000, seed = 1;
    const char *json_path = NULL, *sizes_s = NULL;
    const struct arg tab[] = {
        A_INT("--dim", NULL, &dim, 1, 65536),
        A_STR("--sizes", NULL, &sizes_s),
        A_LONG("--iters", NULL, &iters, 1, 100000000),
        A_LONG("--seed", NULL, &seed, 0, LONG_MAX),
        A_STR("--json", NULL, &json_path),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    int prc = args_parse(tabs, argc, argv, 2, "nexus bench-slb", true, NULL, 0, NULL);
    if (prc != ARGS_OK) {
        fprintf(stderr, "usage: nexus bench-slb [--dim 384] [--sizes 10,50,100,250,1000] "
                "[--iters 20000] [--seed S] [--json OUT]\n");
        return prc == ARGS_HELP ? 0 : 2;
    }
    if (sizes_s && (ns = parse_sizes("bench-slb", sizes_s, sizes, 16)) < 0) return 2;
    const char *knames[3] = {"ref", "avx2", "avx512"};
    json_t *root = json_object(), *rows = json_array();
    json_object_set_new(root, "dim", json_integer(dim));
    json_object_set_new(root, "k", json_integer(5));
    json_object_set_new(root, "iters", json_integer(iters));
    json_object_set_new(root, "chosen_kernel", json_string(rt_slb_kernel_name()));
    json_object_set_new(root, "note", json_string("preliminary: measured on a shared machine"));
    printf("SLB lookup latency, dim %d, top-5, %ld lookups per cell (chosen kernel: %s)\n", dim,
           iters, rt_slb_kernel_name());
    printf("%-8s %6s %12s %12s %12s\n", "kernel", "tools", "median_us", "p99_us", "mean_us");
    float *q = nx_malloc(sizeof(float) * (size_t)dim * 64), *v = nx_malloc(sizeof(float) * (size_t)dim);
    float *lat = nx_malloc(sizeof(float) * (size_t)iters);
    char err[256];
    int rc = 0;
    if (!q || !v || !lat) {
        fprintf(stderr, "nexus bench-slb: out of memory\n");
        rc = 1;
        goto done;
    }
    uint64_t st = (uint64_t)seed;
    for (int i = 0; i < 64; i++) rand_unit(&st, q + (size_t)i * dim, dim);
    for (int si = 0; si < ns; si++) {
        rt_slb *s;
        if (rt_slb_new(dim, &s, err, sizeof err) != NX_STATUS_OK) {
            fprintf(stderr, "nexus bench-slb: %s\n", err);
            rc = 1;
            goto done;
        }
        for (int r = 0; r < sizes[si]; r++) {
            rand_unit(&st, v, dim);
            if (rt_slb_add(s, v) < 0) {
                fprintf(stderr, "nexus bench-slb: out of memory\n");
                rt_slb_free(s);
                rc = 1;
                goto done;
            }
        }
        for (int ki = 0; ki < 3; ki++) {
            rt_slb_dots_fn fn = rt_slb_kernel_by_name(knames[ki]);
            if (!fn) continue;
            rt_slb_set_kernel(s, fn);
            struct rt_hit h[RT_SLB_KMAX];
            float margin;
            volatile float sink = 0;
            for (int w = 0; w < 200; w++) { /* warm-up */
                rt_slb_topk(s, q + (size_t)(w & 63) * dim, 5, h, &margin, NULL);
                sink += h[0].score;
            }
            double sum = 0;
            for (long it = 0; it < iters; it++) {
                double t0 = now_ns();
                rt_slb_topk(s, q + (size_t)(it & 63) * dim, 5, h, &margin, NULL);
                double t1 = now_ns();
                sink += h[0].score;
                lat[it] = (float)((t1 - t0) / 1000.0);
                sum += lat[it];
            }
            (void)sink;
            double med = rt_percentile(lat, (int)iters, 50), p99 = rt_percentile(lat, (int)iters, 99);
            printf("%-8s %6d %12.3f %12.3f %12.3f\n", knames[ki], sizes[si], med, p99, sum / iters);
            json_array_append_new(rows, json_pack("{s:s,s:i,s:o,s:o,s:o}", "kernel", knames[ki],
                                                  "tools", sizes[si], "median_us", jreal(med),
                                                  "p99_us", jreal(p99), "mean_us", jreal(sum / iters)));
        }
        rt_slb_free(s);
    }
    printf("(preliminary figures: shared, busy machine; one thread; includes query quantization)\n");
    json_object_set_new(root, "rows", rows);
    rows = NULL;
    if (json_path && write_json("bench-slb", json_path, root)) rc = 1;
done:
    json_decref(rows);
    json_decref(root);
    nx_free(q);
    nx_free(v);
    nx_free(lat);
    return rc;
}

/* ---- nexus eval-routing ---- */

struct equery {
    char *id;
    char *text;
    int set;        /* index into the set names */
    int *cands;     /* store indices of the query's own functions */
    int n_cands;
    int *expect;    /* name ids of the expected tools (empty: irrelevance) */
    int n_expect;
    int exp_def;    /* the query's own definition of the first expected tool, or -1 */
};

struct eval_ctx {
    rt_registry store;  /* every definition (RT_DUP_KEEP_ALL) */
    int *name_id;       /* (store.n) */
    int n_names;
    char **names;       /* (n_names) borrowed from the store */
    struct equery *q;
    int nq, capq;
    /* embedding caches */
    rt_embedder *emb;
    float *dvec;        /* (store.n, dim) */
    unsigned char *dhave;
    float *qvec;        /* (nq, dim) */
    unsigned char *qhave;
    uint64_t seed;
};

static void equery_free(struct equery *q) {
    nx_free(q->id);
    nx_free(q->text);
    nx_free(q->cands);
    nx_free(q->expect);
}

static void ectx_free(struct eval_ctx *c) {
    for (int i = 0; i < c->nq; i++) equery_free(&c->q[i]);
    nx_free(c->q);
    nx_free(c->name_id);
    nx_free(c->names);
    nx_free(c->dvec);
    nx_free(c->dhave);
    nx_free(c->qvec);
    nx_free(c->qhave);
    rt_registry_free(&c->store);
}

/* The user text of a BFCL question: user contents of the first turn, joined by newlines. */
static char *bfcl_text(json_t *question) {
    json_t *turn = json_array_get(question, 0);
    if (!json_is_array(turn)) return NULL;
    size_t len = 1, i;
    json_t *m;
    int any_user = 0;
    json_array_foreach(turn, i, m) {
        json_t *c = json_object_get(m, "content"), *r = json_object_get(m, "role");
        if (json_is_string(c) && json_is_string(r) && !strcmp(json_string_value(r), "user")) {
            len += strlen(json_string_value(c)) + 1;
            any_user = 1;
        }
    }
    if (!any_user) return NULL;
    char *s = nx_malloc(len);
    if (!s) return NULL;
    s[0] = 0;
    size_t o = 0;
    json_array_foreach(turn, i, m) {
        json_t *c = json_object_get(m, "content"), *r = json_object_get(m, "role");
        if (json_is_string(c) && json_is_string(r) && !strcmp(json_string_value(r), "user"))
            o += (size_t)snprintf(s + o, len - o, "%s%s", o ? "\n" : "", json_string_value(c));
    }
    return s;
}

/* id -> ground-truth names, from a possible_answer file (JSON Lines). */
struct answer {
    char *id;
    json_t *names; /* array of strings */
};

static int cmp_answer(const void *a, const void *b) {
    return strcmp(((const struct answer *)a)->id, ((const struct answer *)b)->id);
}

static int load_answers(const char *path, struct answer **out, int *n_out, char *err, size_t errlen) {
    size_t len;
    char *text = nx_read_file(path, NX_READ_FILE_MAX, &len, err, errlen);
    if (!text) return -1;
    struct answer *a = NULL;
    int n = 0, cap = 0, line = 0, rc = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        line++;
        if (ll > 0 && !(ll == 1 && p[0] == '\r')) {
            json_error_t je;
            json_t *v = json_loadb(p, ll, 0, &je);
            json_t *id = v ? json_object_get(v, "id") : NULL;
            json_t *gt = v ? json_object_get(v, "ground_truth") : NULL;
            if (!v || !json_is_string(id) || !json_is_array(gt)) {
                snprintf(err, errlen, "%.900s:%d: %.200s", path, line,
                         v ? "expected {\"id\": ..., \"ground_truth\": [...]}" : je.text);
                json_decref(v);
                rc = -1;
                break;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                struct answer *na = nx_realloc(a, sizeof *na * (size_t)cap);
                if (!na) {
                    json_decref(v);
                    snprintf(err, errlen, "out of memory");
                    rc = -1;
                    break;
                }
                a = na;
            }
            json_t *names = json_array();
            size_t i;
            json_t *call;
            json_array_foreach(gt, i, call) {
                const char *k;
                json_t *x;
                if (json_is_object(call)) json_object_foreach(call, k, x) json_array_append_new(names, json_string(k));
            }
            a[n].id = nx_strdup(json_string_value(id));
            a[n].names = names;
            n++;
            json_decref(v);
        }
        if (!nl) break;
        p = nl + 1;
    }
    nx_free(text);
    if (rc) {
        for (int i = 0; i < n; i++) {
            nx_free(a[i].id);
            json_decref(a[i].names);
        }
        nx_free(a);
        return -1;
    }
    qsort(a, (size_t)n, sizeof *a, cmp_answer);
    *out = a;
    *n_out = n;
    return 0;
}

static void free_answers(struct answer *a, int n) {
    for (int i = 0; i < n; i++) {
        nx_free(a[i].id);
        json_decref(a[i].names);
    }
    nx_free(a);
}

static struct equery *new_query(struct eval_ctx *c) {
    if (c->nq == c->capq) {
        int nc = c->capq ? c->capq * 2 : 512;
        struct equery *nq = nx_realloc(c->q, sizeof *nq * (size_t)nc);
        if (!nq) return NULL;
        c->q = nq;
        c->capq = nc;
    }
    struct equery *q = &c->q[c->nq++];
    memset(q, 0, sizeof *q);
    q->exp_def = -1;
    return q;
}

/* Loads one BFCL question file (JSON Lines) into the store and the query list; answers may be
 * NULL (irrelevance). Expected names are kept as strings in *exp_names (json array per query,
 * resolved to name ids after all files are loaded). */
static int load_bfcl_set(struct eval_ctx *c, const char *path, int set, struct answer *ans,
                         int n_ans, json_t *exp_names, char *err, size_t errlen) {
    size_t len;
    char *text = nx_read_file(path, NX_READ_FILE_MAX, &len, err, errlen);
    if (!text) return -1;
    int line = 0, rc = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        line++;
        if (ll > 0 && !(ll == 1 && p[0] == '\r')) {
            char where[1100];
            snprintf(where, sizeof where, "%.1000s:%d", path, line);
            json_error_t je;
            json_t *v = json_loadb(p, ll, 0, &je);
            json_t *id = v ? json_object_get(v, "id") : NULL;
            json_t *fns = v ? json_object_get(v, "function") : NULL;
            char *qt = v ? bfcl_text(json_object_get(v, "question")) : NULL;
            if (!v || !json_is_string(id) || !json_is_array(fns) || !qt) {
                snprintf(err, errlen, "%.1000s: %.150s", where,
                         !v ? je.text : "expected {\"id\", \"question\": [[{role, content}]], \"function\": [...]} with a user message");
                nx_free(qt);
                json_decref(v);
                rc = -1;
                break;
            }
            int start = c->store.n;
            if (rt_registry_add_json(&c->store, v, where, "bfcl", err, errlen) < 0) {
                nx_free(qt);
                json_decref(v);
                rc = -1;
                break;
            }
            struct equery *q = new_query(c);
            if (!q) {
                nx_free(qt);
                json_decref(v);
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
            q->id = nx_strdup(json_string_value(id));
            q->text = qt;
            q->set = set;
            q->n_cands = c->store.n - start;
            q->cands = nx_malloc(sizeof(int) * (size_t)(q->n_cands > 0 ? q->n_cands : 1));
            for (int i = 0; q->cands && i < q->n_cands; i++) q->cands[i] = start + i;
            json_t *names = NULL;
            if (ans) {
                struct answer key = {.id = q->id};
                struct answer *a = bsearch(&key, ans, (size_t)n_ans, sizeof *ans, cmp_answer);
                if (a) names = a->names;
            }
            json_array_append_new(exp_names, names ? json_incref(names) : json_array());
            json_decref(v);
            if (!q->id || !q->cands) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
        }
        if (!nl) break;
        p = nl + 1;
    }
    nx_free(text);
    return rc;
}

static int cmp_name_idx(const void *a, const void *b, void *ctx) {
    const rt_registry *r = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(r->tools[x].name, r->tools[y].name);
    return c ? c : (x > y) - (x < y);
}

/* name ids: distinct names in bytewise order */
static int assign_names(struct eval_ctx *c) {
    int n = c->store.n;
    int *ord = nx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    c->name_id = nx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    c->names = nx_malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (!ord || !c->name_id || !c->names) {
        nx_free(ord);
        return -1;
    }
    for (int i = 0; i < n; i++) ord[i] = i;
    qsort_r(ord, (size_t)n, sizeof *ord, cmp_name_idx, &c->store);
    c->n_names = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(c->store.tools[ord[i]].name, c->store.tools[ord[i - 1]].name) != 0)
            c->names[c->n_names++] = c->store.tools[ord[i]].name;
        c->name_id[ord[i]] = c->n_names - 1;
    }
    nx_free(ord);
    return 0;
}

static int find_name(const struct eval_ctx *c, const char *s) {
    int lo = 0, hi = c->n_names - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, r = strcmp(c->names[mid], s);
        if (!r) return mid;
        if (r < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

/* Pool of a set mask: first definition (store order) of each distinct name, in name order. */
static int build_pool(const struct eval_ctx *c, unsigned set_mask, int **out) {
    int *first = nx_malloc(sizeof(int) * (size_t)(c->n_names ? c->n_names : 1));
    int *pool = nx_malloc(sizeof(int) * (size_t)(c->n_names ? c->n_names : 1));
    if (!first || !pool) {
        nx_free(first);
        nx_free(pool);
        return -1;
    }
    for (int i = 0; i < c->n_names; i++) first[i] = -1;
    for (int qi = 0; qi < c->nq; qi++) {
        const struct equery *q = &c->q[qi];
        if (!(set_mask & (1u << q->set))) continue;
        for (int j = 0; j < q->n_cands; j++) {
            int d = q->cands[j];
            if (first[c->name_id[d]] < 0) first[c->name_id[d]] = d;
        }
    }
    int n = 0;
    for (int i = 0; i < c->n_names; i++)
        if (first[i] >= 0) pool[n++] = first[i];
    nx_free(first);
    *out = pool;
    return n;
}

static int ensure_vecs(struct eval_ctx *c, const int *defs, int n, char *err, size_t errlen) {
    if (!c->emb) return 0;
    int dim = c->emb->dim;
    for (int i = 0; i < n; i++) {
        int d = defs[i];
        if (c->dhave[d]) continue;
        char *doc = rt_embed_document(&c->store.tools[d]);
        if (!doc) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        nx_status rc =
            c->emb->embed(c->emb, doc, RT_DOCUMENT, c->dvec + (size_t)d * dim, err, errlen);
        nx_free(doc);
        if (rc != NX_STATUS_OK) return -1;
        c->dhave[d] = 1;
    }
    return 0;
}

static const float *query_vec(struct eval_ctx *c, int qi, char *err, size_t errlen) {
    if (!c->emb) return NULL;
    float *v = c->qvec + (size_t)qi * c->emb->dim;
    if (!c->qhave[qi]) {
        if (c->emb->embed(c->emb, c->q[qi].text, RT_QUERY, v, err, errlen) != NX_STATUS_OK)
            return NULL;
        c->qhave[qi] = 1;
    }
    return v;
}

/* Routes query qi within the tools sub[0..n); fills out. Returns 0 or -1. */
static int route_subset(struct eval_ctx *c, const struct rt_router_params *p, int qi,
                        const int *sub, int n, float *gather, struct rt_route *out, char *err,
                        size_t errlen) {
    if (ensure_vecs(c, sub, n, err, errlen)) return -1;
    const float *qv = NULL;
    if (c->emb) {
        int dim = c->emb->dim;
        for (int i = 0; i < n; i++)
            memcpy(gather + (size_t)i * dim, c->dvec + (size_t)sub[i] * dim, sizeof(float) * (size_t)dim);
        qv = query_vec(c, qi, err, errlen);
        if (!qv) return -1;
    }
    rt_router *rt = rt_router_new(&c->store, sub, n, p, c->emb ? gather : NULL, err, errlen);
    if (!rt) return -1;
    int rc = rt_router_route(rt, c->q[qi].text, qv, out, err, errlen);
    rt_router_free(rt);
    return rc;
}

/* rank (1-based) of the first expected name among the hits, 0 when not in them */
static int expected_rank(const struct eval_ctx *c, const struct equery *q, const struct rt_route *r) {
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < q->n_expect; j++)
            if (c->name_id[r->hit[i].id] == q->expect[j]) return i + 1;
    return 0;
}

static uint64_t mix3(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t s = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
                 (c + 1) * 0x94d049bb133111ebull;
    return splitmix(&s);
}

struct cell {
    int set, n_tools, n, c1, c3, c5;
};

static json_t *cell_json(const struct cell *cl, const char *set_name) {
    double lo1, hi1, lo5, hi5;
    rt_wilson(cl->c1, cl->n, 1.96, &lo1, &hi1);
    rt_wilson(cl->c5, cl->n, 1.96, &lo5, &hi5);
    double r1 = cl->n ? (double)cl->c1 / cl->n : NAN, r5 = cl->n ? (double)cl->c5 / cl->n : NAN;
    json_t *o = json_object();
    json_object_set_new(o, "set", json_string(set_name));
    json_object_set_new(o, "n_tools", json_integer(cl->n_tools));
    json_object_set_new(o, "n_queries", json_integer(cl->n));
    json_object_set_new(o, "r1", jreal(r1));
    json_object_set_new(o, "r1_ci95", json_pack("[o,o]", jreal(lo1), jreal(hi1)));
    json_object_set_new(o, "r3", jreal(cl->n ? (double)cl->c3 / cl->n : NAN));
    json_object_set_new(o, "r5", jreal(r5));
    json_object_set_new(o, "r5_ci95", json_pack("[o,o]", jreal(lo5), jreal(hi5)));
    return o;
}

static void print_cell(const char *emb, const char *set, const struct cell *cl, const char *label) {
    double lo1, hi1, lo5, hi5;
    rt_wilson(cl->c1, cl->n, 1.96, &lo1, &hi1);
    rt_wilson(cl->c5, cl->n, 1.96, &lo5, &hi5);
    char nt[32];
    if (label)
        snprintf(nt, sizeof nt, "%s %d", label, cl->n_tools);
    else
        snprintf(nt, sizeof nt, "%d", cl->n_tools);
    printf("%-8s %-14s %-11s %6d  %.3f [%.3f, %.3f]  %.3f [%.3f, %.3f]\n", emb, set, nt, cl->n,
           cl->n ? (double)cl->c1 / cl->n : 0, lo1, hi1, cl->n ? (double)cl->c5 / cl->n : 0, lo5,
           hi5);
}

static json_t *wrong_json(const struct eval_ctx *c, const struct equery *q, const struct rt_route *r,
                          int rank, int with_text) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(q->id));
    if (with_text) json_object_set_new(o, "query", json_string(q->text));
    json_object_set_new(o, "expected", json_string(c->names[q->expect[0]]));
    json_object_set_new(o, "got", json_string(c->store.tools[r->hit[0].id].name));
    json_object_set_new(o, "expected_rank", rank ? json_integer(rank) : json_null());
    return o;
}

struct eval_opts {
    const char *bfcl_dir;
    const char *embedders[3];
    int n_emb;
    const char *embed_model;
    int sizes[16], n_sizes;
    uint64_t seed;
    double gate_pct;
    int rrf_depth;
    const char *json_path, *svg_path;
    const char *tools[MAX_FILES];
    int n_tools;
    const char *queries;
};

#define N_SETS 4
static const char *const k_sets[N_SETS] = {"live_multiple", "multiple", "live_irrelevance", "irrelevance"};

/* one embedder over the BFCL evaluation; appends its record to out */
static int eval_bfcl_embedder(struct eval_ctx *c, const struct eval_opts *o, enum rt_mode mode,
                              json_t *out, double r1_by[2][16], double r1_err[2][16],
                              double r5_by[2][16], double r5_err[2][16]) {
    char err[1024];
    struct rt_router_params p = rt_router_default_params();
    p.mode = mode;
    p.k = RT_SLB_KMAX;
    p.embedder = c->emb;
    p.rrf_depth = o->rrf_depth;
    int maxn = 0;
    for (int i = 0; i < o->n_sizes; i++) maxn = o->sizes[i] > maxn ? o->sizes[i] : maxn;
    int *pool_all = NULL;
    int npool_all = build_pool(c, 3u, &pool_all);
    if (npool_all < 0) return -1;
    if (maxn < npool_all) maxn = npool_all;
    int *sub = nx_malloc(sizeof(int) * (size_t)(maxn + 64));
    int *stamp = nx_calloc((size_t)c->n_names, sizeof(int));
    float *gather = c->emb ? nx_malloc(sizeof(float) * (size_t)c->emb->dim * (size_t)(maxn + 64)) : NULL;
    json_t *rec = json_object(), *sweep = json_array(), *pooled = json_array();
    int rc = -1, stampv = 0;
    if (!sub || !stamp || (c->emb && !gather)) {
        fprintf(stderr, "nexus eval-routing: out of memory\n");
        goto done;
    }
    const char *ename = rt_mode_name(mode);
    json_object_set_new(rec, "embedder", json_string(ename));
    json_object_set_new(rec, "embed_model", mode == RT_MODE_BM25 || !o->embed_model ? json_null() : json_string(o->embed_model));
    json_object_set_new(rec, "pool_tools", json_integer(npool_all));
    /* ---- sweep over N ---- */
    for (int set = 0; set < 2; set++) {
        for (int si = 0; si < o->n_sizes; si++) {
            int N = o->sizes[si] < npool_all ? o->sizes[si] : npool_all;
            struct cell cl = {set, N, 0, 0, 0, 0};
            json_t *wrong = json_array();
            for (int qi = 0; qi < c->nq; qi++) {
                struct equery *q = &c->q[qi];
                if (q->set != set || q->exp_def < 0) continue;
                uint64_t rs = mix3(o->seed, (uint64_t)qi, (uint64_t)N);
                stampv++;
                int n = 0;
                sub[n++] = q->exp_def;
                for (int j = 0; j < q->n_expect; j++) stamp[q->expect[j]] = stampv;
                /* own candidates, shuffled */
                int oc[64], noc = 0;
                for (int j = 0; j < q->n_cands && noc < 64; j++) {
                    int d = q->cands[j];
                    if (stamp[c->name_id[d]] == stampv) continue;
                    oc[noc++] = d;
                }
                for (int j = noc - 1; j > 0; j--) {
                    int r = (int)(splitmix(&rs) % (uint64_t)(j + 1)), t = oc[j];
                    oc[j] = oc[r];
                    oc[r] = t;
                }
                for (int j = 0; j < noc && n < N; j++) {
                    if (stamp[c->name_id[oc[j]]] == stampv) continue;
                    stamp[c->name_id[oc[j]]] = stampv;
                    sub[n++] = oc[j];
                }
                /* pool distractors: rejection sampling, or a sweep once it gets crowded */
                int tries = 0;
                while (n < N && tries < 64 * N) {
                    int d = pool_all[splitmix(&rs) % (uint64_t)npool_all];
                    tries++;
                    if (stamp[c->name_id[d]] == stampv) continue;
                    stamp[c->name_id[d]] = stampv;
                    sub[n++] = d;
                }
                for (int j = 0; j < npool_all && n < N; j++) {
                    int d = pool_all[j];
                    if (stamp[c->name_id[d]] == stampv) continue;
                    stamp[c->name_id[d]] = stampv;
                    sub[n++] = d;
                }
                for (int j = n - 1; j > 0; j--) {
                    int r = (int)(splitmix(&rs) % (uint64_t)(j + 1)), t = sub[j];
                    sub[j] = sub[r];
                    sub[r] = t;
                }
                struct rt_route r;
                if (route_subset(c, &p, qi, sub, n, gather, &r, err, sizeof err)) {
                    fprintf(stderr, "nexus eval-routing: %s: %s\n", q->id, err);
                    json_decref(wrong);
                    goto done;
                }
                int rank = expected_rank(c, q, &r);
                cl.n++;
                cl.c1 += rank == 1;
                cl.c3 += rank >= 1 && rank <= 3;
                cl.c5 += rank >= 1 && rank <= 5;
                if (rank != 1) /* compact: [id, expected, got, expected_rank or null] */
                    json_array_append_new(wrong, json_pack("[s,s,s,o]", q->id, c->names[q->expect[0]],
                                                           c->store.tools[r.hit[0].id].name,
                                                           rank ? json_integer(rank) : json_null()));
            }
            print_cell(ename, k_sets[set], &cl, NULL);
            fflush(stdout);
            json_t *cj = cell_json(&cl, k_sets[set]);
            json_object_set_new(cj, "wrong_fields", json_pack("[s,s,s,s]", "id", "expected", "got", "expected_rank"));
            json_object_set_new(cj, "wrong", wrong);
            json_array_append_new(sweep, cj);
            double lo, hi;
            rt_wilson(cl.c1, cl.n, 1.96, &lo, &hi);
            r1_by[set][si] = cl.n ? (double)cl.c1 / cl.n : NAN;
            r1_err[set][si] = (hi - lo) / 2;
            rt_wilson(cl.c5, cl.n, 1.96, &lo, &hi);
            r5_by[set][si] = cl.n ? (double)cl.c5 / cl.n : NAN;
            r5_err[set][si] = (hi - lo) / 2;
        }
    }
    /* ---- pooled registry per set, with the margin gate ---- */
    for (int set = 0; set < 2; set++) {
        int *pool = NULL;
        int np = build_pool(c, 1u << set, &pool);
        if (np < 0) goto done;
        struct cell cl = {set, np, 0, 0, 0, 0};
        json_t *wrong = json_array();
        float *m_cal = nx_malloc(sizeof(float) * (size_t)c->nq), *m_test = nx_malloc(sizeof(float) * (size_t)c->nq);
        int *ok_test = nx_malloc(sizeof(int) * (size_t)c->nq);
        int ncal = 0, ntest = 0;
        if (!m_cal || !m_test || !ok_test) {
            nx_free(pool);
            nx_free(m_cal);
            nx_free(m_test);
            nx_free(ok_test);
            json_decref(wrong);
            goto done;
        }
        rt_router *rt = NULL;
        if (ensure_vecs(c, pool, np, err, sizeof err) == 0) {
            if (c->emb)
                for (int i = 0; i < np; i++)
                    memcpy(gather + (size_t)i * c->emb->dim, c->dvec + (size_t)pool[i] * c->emb->dim,
                           sizeof(float) * (size_t)c->emb->dim);
            rt = rt_router_new(&c->store, pool, np, &p, c->emb ? gather : NULL, err, sizeof err);
        }
        int fail = !rt;
        for (int qi = 0; !fail && qi < c->nq; qi++) {
            struct equery *q = &c->q[qi];
            if (q->set != set || q->n_expect == 0) continue;
            struct rt_route r;
            const float *qv = c->emb ? query_vec(c, qi, err, sizeof err) : NULL;
            if ((c->emb && !qv) || rt_router_route(rt, q->text, qv, &r, err, sizeof err)) {
                fail = 1;
                break;
            }
            int rank = expected_rank(c, q, &r);
            cl.n++;
            cl.c1 += rank == 1;
            cl.c3 += rank >= 1 && rank <= 3;
            cl.c5 += rank >= 1 && rank <= 5;
            if (rank != 1) json_array_append_new(wrong, wrong_json(c, q, &r, rank, 1));
            if (mix3(o->seed ^ 0x5a5a, (uint64_t)qi, 7) & 1) {
                m_test[ntest] = r.margin;
                ok_test[ntest++] = rank == 1;
            } else {
                m_cal[ncal++] = r.margin;
            }
        }
        rt_router_free(rt);
        nx_free(pool);
        if (fail) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
            nx_free(m_cal);
            nx_free(m_test);
            nx_free(ok_test);
            json_decref(wrong);
            goto done;
        }
        print_cell(ename, k_sets[set], &cl, "pooled");
        fflush(stdout);
        double tau = rt_percentile(m_cal, ncal, o->gate_pct);
        int fired = 0, ok_f = 0, ok_n = 0;
        for (int i = 0; i < ntest; i++) {
            if (m_test[i] < tau) {
                fired++;
                ok_f += ok_test[i];
            } else {
                ok_n += ok_test[i];
            }
        }
        json_t *cj = cell_json(&cl, k_sets[set]);
        json_object_set_new(cj, "gate", json_pack("{s:f,s:o,s:i,s:i,s:o,s:o,s:o}", "percentile", o->gate_pct,
                                                  "tau", jreal(tau), "n_cal", ncal, "n_test", ntest,
                                                  "fire_rate_test", jreal(ntest ? (double)fired / ntest : NAN),
                                                  "r1_test_fired", jreal(fired ? (double)ok_f / fired : NAN),
                                                  "r1_test_not_fired", jreal(ntest - fired ? (double)ok_n / (ntest - fired) : NAN)));
        printf("%-8s %-14s gate: tau = p%.0f of calibration margins = %.6g; test half: fires on "
               "%.1f%%, R@1 %.3f when fired vs %.3f when not\n", ename, k_sets[set], o->gate_pct,
               tau, ntest ? 100.0 * fired / ntest : 0.0, fired ? (double)ok_f / fired : 0.0,
               ntest - fired ? (double)ok_n / (ntest - fired) : 0.0);
        json_object_set_new(cj, "wrong", wrong);
        json_array_append_new(pooled, cj);
        nx_free(m_cal);
        nx_free(m_test);
        nx_free(ok_test);
    }
    /* ---- abstention: each query within its own functions ---- */
    {
        float *pos[2], *neg[2];
        int npos[2] = {0, 0}, nneg[2] = {0, 0}, own_n[2] = {0, 0}, own_c1[2] = {0, 0};
        for (int h = 0; h < 2; h++) {
            pos[h] = nx_malloc(sizeof(float) * (size_t)c->nq);
            neg[h] = nx_malloc(sizeof(float) * (size_t)c->nq);
        }
        int fail = !pos[0] || !pos[1] || !neg[0] || !neg[1];
        for (int qi = 0; !fail && qi < c->nq; qi++) {
            struct equery *q = &c->q[qi];
            int irrelevant = q->set >= 2;
            if (!irrelevant && q->exp_def < 0) continue;
            struct rt_route r;
            if (route_subset(c, &p, qi, q->cands, q->n_cands, gather, &r, err, sizeof err)) {
                fprintf(stderr, "nexus eval-routing: %s: %s\n", q->id, err);
                fail = 1;
                break;
            }
            if (r.n == 0) continue;
            if (!irrelevant) {
                own_n[q->set]++;
                own_c1[q->set] += expected_rank(c, q, &r) == 1;
            }
            int h = (int)(mix3(o->seed ^ 0xa5a5, (uint64_t)qi, 11) & 1); /* 0: calibration */
            if (irrelevant)
                neg[h][nneg[h]++] = r.hit[0].score;
            else
                pos[h][npos[h]++] = r.hit[0].score;
        }
        if (!fail) {
            json_t *own = json_array();
            for (int set = 0; set < 2; set++) {
                struct cell cl = {set, 0, own_n[set], own_c1[set], 0, 0};
                double lo, hi;
                rt_wilson(cl.c1, cl.n, 1.96, &lo, &hi);
                json_array_append_new(own, json_pack("{s:s,s:i,s:o,s:[o,o]}", "set", k_sets[set],
                                                     "n_queries", cl.n,
                                                     "r1", jreal(cl.n ? (double)cl.c1 / cl.n : NAN),
                                                     "r1_ci95", jreal(lo), jreal(hi)));
                printf("%-8s %-14s own candidates: R@1 %.3f [%.3f, %.3f] over %d queries\n", ename,
                       k_sets[set], cl.n ? (double)cl.c1 / cl.n : 0.0, lo, hi, cl.n);
            }
            json_object_set_new(rec, "own_candidates", own);
            double t = rt_calibrate_abstain(pos[0], npos[0], neg[0], nneg[0]);
            int abst = 0, fab = 0;
            for (int i = 0; i < nneg[1]; i++) abst += neg[1][i] < t;
            for (int i = 0; i < npos[1]; i++) fab += pos[1][i] < t;
            double lo, hi, lo2, hi2;
            rt_wilson(abst, nneg[1], 1.96, &lo, &hi);
            rt_wilson(fab, npos[1], 1.96, &lo2, &hi2);
            json_object_set_new(rec, "abstention", json_pack(
                "{s:o,s:i,s:i,s:i,s:i,s:o,s:[o,o],s:o,s:[o,o],s:s}", "threshold", jreal(t),
                "n_cal_relevant", npos[0], "n_cal_irrelevant", nneg[0], "n_test_relevant", npos[1],
                "n_test_irrelevant", nneg[1],
                "abstain_rate_irrelevant", jreal(nneg[1] ? (double)abst / nneg[1] : NAN),
                "abstain_rate_irrelevant_ci95", jreal(lo), jreal(hi),
                "false_abstain_rate_relevant", jreal(npos[1] ? (double)fab / npos[1] : NAN),
                "false_abstain_rate_relevant_ci95", jreal(lo2), jreal(hi2),
                "procedure", "each query routed within its own BFCL function list; top score; "
                             "threshold maximising answered(relevant)+abstained(irrelevant) rates "
                             "on the calibration half; rates on the test half"));
            printf("%-8s abstention: threshold %.6g (top score); test half: abstains on %.1f%% "
                   "[%.1f, %.1f] of %d irrelevant queries, wrongly on %.1f%% [%.1f, %.1f] of %d "
                   "relevant ones\n", ename, t, nneg[1] ? 100.0 * abst / nneg[1] : 0.0, 100 * lo,
                   100 * hi, nneg[1], npos[1] ? 100.0 * fab / npos[1] : 0.0, 100 * lo2, 100 * hi2,
                   npos[1]);
        }
        for (int h = 0; h < 2; h++) {
            nx_free(pos[h]);
            nx_free(neg[h]);
        }
        if (fail) goto done;
    }
    json_object_set_new(rec, "sweep", sweep);
    json_object_set_new(rec, "pooled", pooled);
    sweep = pooled = NULL;
    json_array_append(out, rec);
    rc = 0;
done:
    json_decref(sweep);
    json_decref(pooled);
    json_decref(rec);
    nx_free(pool_all);
    nx_free(sub);
    nx_free(stamp);
    nx_free(gather);
    return rc;
}

static int eval_bfcl(const struct eval_opts *o) {
    struct eval_ctx c;
    memset(&c, 0, sizeof c);
    rt_registry_init(&c.store);
    c.store.dup = RT_DUP_KEEP_ALL;
    c.seed = o->seed;
    char err[1200], path[1100];
    json_t *exp_names = json_array();
    int rc = 1;
    for (int set = 0; set < N_SETS; set++) {
        struct answer *ans = NULL;
        int n_ans = 0;
        if (set < 2) {
            snprintf(path, sizeof path, "%s/possible_answer/BFCL_v4_%s.json", o->bfcl_dir, k_sets[set]);
            if (load_answers(path, &ans, &n_ans, err, sizeof err)) {
                fprintf(stderr, "nexus eval-routing: %s\n", err);
                goto done;
            }
        }
        snprintf(path, sizeof path, "%s/BFCL_v4_%s.json", o->bfcl_dir, k_sets[set]);
        int lrc = load_bfcl_set(&c, path, set, ans, n_ans, exp_names, err, sizeof err);
        free_answers(ans, n_ans);
        if (lrc) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
            goto done;
        }
    }
    if (assign_names(&c)) {
        fprintf(stderr, "nexus eval-routing: out of memory\n");
        goto done;
    }
    int skipped = 0;
    for (int qi = 0; qi < c.nq; qi++) {
        struct equery *q = &c.q[qi];
        json_t *names = json_array_get(exp_names, (size_t)qi);
        size_t nn = json_array_size(names);
        q->expect = nx_malloc(sizeof(int) * (nn ? nn : 1));
        if (!q->expect) goto done;
        for (size_t j = 0; j < nn; j++) {
            int id = find_name(&c, json_string_value(json_array_get(names, j)));
            if (id >= 0) q->expect[q->n_expect++] = id;
        }
        for (int j = 0; j < q->n_cands && q->n_expect > 0; j++)
            if (c.name_id[q->cands[j]] == q->expect[0]) {
                q->exp_def = q->cands[j];
                break;
            }
        if (q->set < 2 && q->exp_def < 0) skipped++;
    }
    int counts[N_SETS] = {0};
    for (int qi = 0; qi < c.nq; qi++) counts[c.q[qi].set]++;
    fprintf(stderr, "eval-routing: %d definitions, %d distinct names; queries: live_multiple %d, "
            "multiple %d, live_irrelevance %d, irrelevance %d; %d relevant queries skipped (answer "
            "not among their functions)\n", c.store.n, c.n_names, counts[0], counts[1], counts[2],
            counts[3], skipped);
    json_t *root = json_object(), *embs = json_array();
    json_object_set_new(root, "dataset", json_string("bfcl_v4"));
    json_object_set_new(root, "bfcl_dir", json_string(o->bfcl_dir));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
    json_t *sz = json_array();
    for (int i = 0; i < o->n_sizes; i++) json_array_append_new(sz, json_integer(o->sizes[i]));
    json_object_set_new(root, "sizes", sz);
    json_object_set_new(root, "skipped_relevant_queries", json_integer(skipped));
    json_object_set_new(root, "rrf_k", json_integer(60));
    json_object_set_new(root, "rrf_depth", json_integer(o->rrf_depth));
    json_object_set_new(root, "protocol", json_string(
        "sweep: the query's own definition of the expected tool + its own other candidates + "
        "seeded distractors from the pool (first definition of each name over live_multiple and "
        "multiple), shuffled; pooled: each set against all its distinct names; R@k counts a hit "
        "when any ground-truth name is in the top k"));
    printf("%-8s %-14s %-11s %6s  %-22s  %-22s\n", "embedder", "set", "tools", "n", "R@1 [95% CI]",
           "R@5 [95% CI]");
    static double r1[3][2][16], r1e[3][2][16], r5[3][2][16], r5e[3][2][16];
    int ok = 1;
    for (int e = 0; e < o->n_emb && ok; e++) {
        enum rt_mode mode = (enum rt_mode)rt_mode_parse(o->embedders[e]);
        c.emb = NULL;
        if (mode != RT_MODE_BM25) {
            if (!o->embed_model) {
                fprintf(stderr, "nexus eval-routing: --embedder %s needs --embed-model PATH\n", o->embedders[e]);
                ok = 0;
                break;
            }
            if (rt_embedder_open(o->embed_model, &c.emb, err, sizeof err) != NX_STATUS_OK) {
                fprintf(stderr, "nexus eval-routing: %s\n", err);
                ok = 0;
                break;
            }
            nx_free(c.dvec);
            nx_free(c.dhave);
            nx_free(c.qvec);
            nx_free(c.qhave);
            c.dvec = nx_malloc(sizeof(float) * (size_t)c.emb->dim * (size_t)c.store.n);
            c.dhave = nx_calloc((size_t)c.store.n, 1);
            c.qvec = nx_malloc(sizeof(float) * (size_t)c.emb->dim * (size_t)c.nq);
            c.qhave = nx_calloc((size_t)c.nq, 1);
            if (!c.dvec || !c.dhave || !c.qvec || !c.qhave) {
                fprintf(stderr, "nexus eval-routing: out of memory\n");
                rt_embedder_free(c.emb);
                c.emb = NULL;
                ok = 0;
                break;
            }
        }
        if (eval_bfcl_embedder(&c, o, mode, embs, r1[e], r1e[e], r5[e], r5e[e])) ok = 0;
        rt_embedder_free(c.emb);
        c.emb = NULL;
    }
    json_object_set_new(root, "embedders", embs);
    if (ok) rc = 0;
    if (ok && o->json_path && write_json("eval-routing", o->json_path, root)) rc = 1;
    if (ok && o->svg_path) {
        double xs[16];
        for (int i = 0; i < o->n_sizes; i++) xs[i] = o->sizes[i];
        struct svg_series s[4][3];
        struct svg_panel panels[4];
        for (int set = 0; set < 2; set++) {
            for (int e = 0; e < o->n_emb; e++) {
                s[set * 2][e] = (struct svg_series){o->embedders[e], xs, r1[e][set], r1e[e][set], o->n_sizes};
                s[set * 2 + 1][e] = (struct svg_series){o->embedders[e], xs, r5[e][set], r5e[e][set], o->n_sizes};
            }
        }
        static char titles[4][64];
        for (int set = 0; set < 2; set++) {
            snprintf(titles[set * 2], 64, "%s: R@1", k_sets[set]);
            snprintf(titles[set * 2 + 1], 64, "%s: R@5", k_sets[set]);
            panels[set * 2] = (struct svg_panel){titles[set * 2], "tools in the registry (N)", "accuracy", true, false, s[set * 2], o->n_emb};
            panels[set * 2 + 1] = (struct svg_panel){titles[set * 2 + 1], "tools in the registry (N)", "accuracy", true, false, s[set * 2 + 1], o->n_emb};
        }
        char title[600];
        const char *em = o->embed_model ? strrchr(o->embed_model, '/') : NULL;
        em = em && em[1] ? em + 1 : o->embed_model;
        snprintf(title, sizeof title, "Tool routing on BFCL v4: accuracy vs registry size (real distractors, seed %llu; bars: Wilson 95%%)%s%.200s",
                 (unsigned long long)o->seed, em ? "; embedder " : "", em ? em : "");
        if (svg_save(o->svg_path, title, panels, 4, err, sizeof err)) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
            rc = 1;
        } else {
            fprintf(stderr, "eval-routing: wrote %s\n", o->svg_path);
        }
    }
    json_decref(root);
done:
    json_decref(exp_names);
    ectx_free(&c);
    return rc;
}

/* --tools FILE... --queries Q.jsonl */
static int eval_custom(const struct eval_opts *o) {
    rt_registry reg;
    if (build_registry("eval-routing", &reg, o->tools, o->n_tools, NULL)) {
        rt_registry_free(&reg);
        return 1;
    }
    char err[1200];
    size_t len;
    char *text = nx_read_file(o->queries, NX_READ_FILE_MAX, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "nexus eval-routing: %s\n", err);
        rt_registry_free(&reg);
        return 1;
    }
    enum rt_mode mode = (enum rt_mode)rt_mode_parse(o->embedders[0]);
    struct rt_router_params p = rt_router_default_params();
    p.mode = mode;
    p.k = RT_SLB_KMAX;
    p.rrf_depth = o->rrf_depth;
    rt_embedder *emb = NULL;
    rt_router *rt = NULL;
    json_t *root = json_object(), *wrong = json_array();
    int rc = 1, n = 0, c1 = 0, c3 = 0, c5 = 0, line = 0;
    if (mode != RT_MODE_BM25) {
        if (!o->embed_model) {
            fprintf(stderr, "nexus eval-routing: --embedder %s needs --embed-model PATH\n", o->embedders[0]);
            goto done;
        }
        if (rt_embedder_open(o->embed_model, &emb, err, sizeof err) != NX_STATUS_OK) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
            goto done;
        }
        p.embedder = emb;
    }
    rt = rt_router_new(&reg, NULL, 0, &p, NULL, err, sizeof err);
    if (!rt) {
        fprintf(stderr, "nexus eval-routing: %s\n", err);
        goto done;
    }
    for (char *s = text; *s;) {
        char *nl = strchr(s, '\n');
        size_t ll = nl ? (size_t)(nl - s) : strlen(s);
        line++;
        size_t k = 0;
        while (k < ll && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k < ll) {
            json_error_t je;
            json_t *v = json_loadb(s, ll, 0, &je);
            json_t *qv = v ? json_object_get(v, "query") : NULL, *tv = v ? json_object_get(v, "tool") : NULL;
            if (!v || !json_is_string(qv) || !json_is_string(tv)) {
                fprintf(stderr, "nexus eval-routing: %s:%d: %s\n", o->queries, line,
                        v ? "expected {\"query\": \"...\", \"tool\": \"name\"}" : je.text);
                json_decref(v);
                goto done;
            }
            int want = rt_registry_find(&reg, json_string_value(tv));
            if (want < 0) {
                fprintf(stderr, "nexus eval-routing: %s:%d: tool '%s' is not in the registry\n",
                        o->queries, line, json_string_value(tv));
                json_decref(v);
                goto done;
            }
            struct rt_route r;
            if (rt_router_route(rt, json_string_value(qv), NULL, &r, err, sizeof err)) {
                fprintf(stderr, "nexus eval-routing: %s:%d: %s\n", o->queries, line, err);
                json_decref(v);
                goto done;
            }
            int rank = 0;
            for (int i = 0; i < r.n && !rank; i++)
                if (r.hit[i].id == want) rank = i + 1;
            n++;
            c1 += rank == 1;
            c3 += rank >= 1 && rank <= 3;
            c5 += rank >= 1 && rank <= 5;
            if (rank != 1)
                json_array_append_new(wrong, json_pack("{s:i,s:s,s:s,s:s,s:o}", "line", line, "query",
                                                       json_string_value(qv), "expected",
                                                       reg.tools[want].name, "got",
                                                       reg.tools[r.hit[0].id].name, "expected_rank",
                                                       rank ? json_integer(rank) : json_null()));
            json_decref(v);
        }
        if (!nl) break;
        s = nl + 1;
    }
    if (n == 0) {
        fprintf(stderr, "nexus eval-routing: %s: no queries\n", o->queries);
        goto done;
    }
    struct cell cl = {0, reg.n, n, c1, c3, c5};
    printf("%-8s %-14s %-11s %6s  %-22s  %-22s\n", "embedder", "set", "tools", "n", "R@1 [95% CI]",
           "R@5 [95% CI]");
    print_cell(rt_mode_name(mode), "queries", &cl, NULL);
    json_t *cj = cell_json(&cl, o->queries);
    json_object_update(root, cj);
    json_decref(cj);
    json_object_set_new(root, "embedder", json_string(rt_mode_name(mode)));
    json_object_set_new(root, "embed_model", emb ? json_string(o->embed_model) : json_null());
    json_object_set_new(root, "wrong", wrong);
    wrong = NULL;
    rc = 0;
    if (o->json_path && write_json("eval-routing", o->json_path, root)) rc = 1;
done:
    json_decref(wrong);
    json_decref(root);
    rt_router_free(rt);
    rt_embedder_free(emb);
    nx_free(text);
    rt_registry_free(&reg);
    return rc;
}

static void eval_usage(void) {
    fprintf(stderr,
            "usage: nexus eval-routing [--bfcl DIR] [--embedders bm25,hybrid,dense] [--embed-model PATH]\n"
            "                          [--sizes 10,50,100,250] [--seed S] [--gate-pct 20] [--rrf-depth 0]\n"
            "                          [--json OUT] [--svg OUT]\n"
            "       nexus eval-routing --tools TOOLS.json... --queries Q.jsonl\n"
            "                          [--embedder bm25|hybrid|dense] [--embed-model PATH] [--json OUT]\n");
}

int eval_routing_main(int argc, char **argv) {
    struct eval_opts o = {.bfcl_dir = "../shared/data/bfcl", .embedders = {"bm25"}, .n_emb = 1,
                          .sizes = {10, 50, 100, 250}, .n_sizes = 4, .seed = 1, .gate_pct = 20};
    static char emb_list[64];
    const char *emb_s = NULL, *sizes_s = NULL;
    struct arg_strs tool_files = {o.tools, 0, MAX_FILES};
    const struct arg tab[] = {
        A_STR("--bfcl", NULL, &o.bfcl_dir),
        A_STRS("--tools", NULL, &tool_files),
        A_STR("--queries", NULL, &o.queries),
        A_STR("--embedder", "--embedders", &emb_s),
        A_STR("--embed-model", NULL, &o.embed_model),
        A_STR("--sizes", NULL, &sizes_s),
        A_U64("--seed", NULL, &o.seed, 0, LONG_MAX),
        A_INT("--rrf-depth", NULL, &o.rrf_depth, 0, 1000000),
        A_DOUBLE("--gate-pct", NULL, &o.gate_pct),
        A_STR("--json", NULL, &o.json_path),
        A_STR("--svg", NULL, &o.svg_path),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    const char *more[MAX_FILES];
    int n_more = 0;
    int prc = args_parse(tabs, argc, argv, 2, "nexus eval-routing", true, more, MAX_FILES, &n_more);
    if (prc != ARGS_OK) {
        eval_usage();
        return prc == ARGS_HELP ? 0 : 2;
    }
    /* --tools takes every following word that is not a flag */
    for (int k = 0; k < n_more; k++) {
        if (tool_files.n == MAX_FILES) return bad_arg("eval-routing", "too many files (%s)", more[k]);
        o.tools[tool_files.n++] = more[k];
    }
    o.n_tools = tool_files.n;
    if (emb_s) {
        if (strlen(emb_s) >= sizeof emb_list) return bad_arg("eval-routing", "%s: list too long", "--embedder");
        snprintf(emb_list, sizeof emb_list, "%s", emb_s);
        o.n_emb = 0;
        for (char *t = strtok(emb_list, ","); t; t = strtok(NULL, ",")) {
            if (rt_mode_parse(t) < 0 || o.n_emb == 3)
                return bad_arg("eval-routing", "--embedder: expected bm25, dense or hybrid, got '%s'", t);
            o.embedders[o.n_emb++] = t;
        }
        if (o.n_emb == 0) return bad_arg("eval-routing", "%s: empty list", "--embedder");
    }
    if (sizes_s && (o.n_sizes = parse_sizes("eval-routing", sizes_s, o.sizes, 16)) < 0) return 2;
    if (o.gate_pct < 0 || o.gate_pct > 100) {
        char g[64];
        snprintf(g, sizeof g, "%g", o.gate_pct);
        return bad_arg("eval-routing", "--gate-pct must be in [0, 100], got %s", g);
    }
    if (o.n_tools || o.queries) {
        if (!o.n_tools || !o.queries) {
            eval_usage();
            return bad_arg("eval-routing", "%s", "--tools and --queries go together");
        }
        if (o.n_emb != 1) return bad_arg("eval-routing", "%s", "give one --embedder with --tools/--queries");
        return eval_custom(&o);
    }
    return eval_bfcl(&o);
}
