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
 * - eval-routing: parses the flags and runs eval_routing_run (src/eval/routing_run.h has the
 *   protocol: BFCL v4 by default, or --tools FILE... --queries Q.jsonl).
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
#include "core/json.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "eval/outfile.h"
#include "eval/routing_run.h"
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

static int write_json(const char *cmd, const char *path, json_t *root) {
    char err[1300];
    if (nx_outfile_write_json(path, root, err, sizeof err) != NX_STATUS_OK) {
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
    json_object_set_new(root, "sig_tokens_median", nx_json_real_or_null(med_t));
    json_object_set_new(root, "sig_tokens_p90", nx_json_real_or_null(p90_t));
    json_object_set_new(root, "sig_tokens_p99", nx_json_real_or_null(p99_t));
    json_object_set_new(root, "sig_tokens_max", nx_json_real_or_null(max_t));
    json_object_set_new(root, "sig_tokens_total", nx_json_real_or_null(s_sig_tok));
    json_object_set_new(root, "sig_chars_median", nx_json_real_or_null(med_c));
    json_object_set_new(root, "sig_chars_p99", nx_json_real_or_null(p99_c));
    json_object_set_new(root, "full_tokens_median", nx_json_real_or_null(fmed_t));
    json_object_set_new(root, "full_tokens_p99", nx_json_real_or_null(fp99_t));
    json_object_set_new(root, "full_tokens_total", nx_json_real_or_null(s_full_tok));
    json_object_set_new(root, "full_chars_total", nx_json_real_or_null(s_full_chr));
    json_object_set_new(root, "token_saving", nx_json_real_or_null(saving));
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

static double unif(uint64_t *s) { return (double)(nx_splitmix64(s) >> 11) / 9007199254740992.0; }

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
            json_array_append_new(rows,
                                  json_pack("{s:s,s:i,s:o,s:o,s:o}", "kernel", knames[ki], "tools",
                                            sizes[si], "median_us", nx_json_real_or_null(med),
                                            "p99_us", nx_json_real_or_null(p99), "mean_us",
                                            nx_json_real_or_null(sum / iters)));
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

static void eval_usage(void) {
    fprintf(stderr,
            "usage: nexus eval-routing [--bfcl DIR] [--embedders bm25,hybrid,dense] [--embed-model PATH]\n"
            "                          [--sizes 10,50,100,250] [--seed S] [--gate-pct 20] [--rrf-depth 0]\n"
            "                          [--json OUT] [--svg OUT]\n"
            "       nexus eval-routing --tools TOOLS.json... --queries Q.jsonl\n"
            "                          [--embedder bm25|hybrid|dense] [--embed-model PATH] [--json OUT]\n");
}

int eval_routing_main(int argc, char **argv) {
    struct routing_eval_params o = {.bfcl_dir = "../shared/data/bfcl",
                                    .embedders = {"bm25"},
                                    .n_emb = 1,
                                    .sizes = {10, 50, 100, 250},
                                    .n_sizes = 4,
                                    .seed = 1,
                                    .gate_pct = 20};
    static char emb_list[64];
    const char *emb_s = NULL, *sizes_s = NULL;
    struct arg_strs tool_files = {o.tools, 0, ROUTING_EVAL_MAX_FILES};
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
    const char *more[ROUTING_EVAL_MAX_FILES];
    int n_more = 0;
    int prc = args_parse(tabs, argc, argv, 2, "nexus eval-routing", true, more,
                         ROUTING_EVAL_MAX_FILES, &n_more);
    if (prc != ARGS_OK) {
        eval_usage();
        return prc == ARGS_HELP ? 0 : 2;
    }
    /* --tools takes every following word that is not a flag */
    for (int k = 0; k < n_more; k++) {
        if (tool_files.n == ROUTING_EVAL_MAX_FILES)
            return bad_arg("eval-routing", "too many files (%s)", more[k]);
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
        if (o.n_emb != 1)
            return bad_arg("eval-routing", "%s", "give one --embedder with --tools/--queries");
    }
    return cli_exit_status(eval_routing_run(&o));
}
