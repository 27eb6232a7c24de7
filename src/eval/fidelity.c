/*
 * fidelity.c - the runner of `nexus eval`: fidelity of KV eviction against the dense model,
 * teacher-forced.
 *
 * DESIGN: streams are either text the model samples itself at temperature 1 from BOS with seed
 * seed + stream index, or consecutive pieces of a text file (--file; BOS, then stream_len - 1
 * tokens of the file), so every configuration sees the same tokens. Each policy x density x
 * regime runs two contexts in lockstep over the same tokens: a dense one and one with the
 * policy. The first half of the stream is a prompt (one multi-token decode, compressed at its
 * end in both regimes); the second half is teacher-forced one token at a time (evicting only in
 * the stream regime). At every position of the second half:
 *   kl     = KL(dense || policy) of the next-token distributions (nats),
 *   top1   = 1 when both argmaxes agree,
 *   nll    = -log p_policy(next token) (perplexity = exp(mean nll)),
 *   recall = over positions where the dense model puts >= 0.5 on its argmax and that token last
 *            occurred >= k blocks earlier in the stream: the fraction where the policy's argmax
 *            is the same (long-range retrieval a tiny model can show),
 *   kv_frac = KV bytes the policy's context holds / bytes the dense one holds (all layers and
 *            heads, whole blocks), so policies whose minimum keep differs are compared honestly.
 * Means are per stream, then mean and standard deviation over streams. Everything is
 * deterministic: same seed (and file), same numbers. Progress goes to stderr, a table to stdout,
 * one JSON record per configuration to --json, and per regime one SVG (KL, top-1 and recall
 * against density, one line per policy) to --svg DIR; files are written atomically.
 */
#include "eval/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "gen/generate.h"
#include "eval/metrics.h"
#include "eval/outfile.h"
#include "eval/progress.h"
#include "eval/svg.h"

enum { MAX_POL = 16, MAX_DEN = 16, MAX_REG = 2 };

struct acc {
    double sum, sum2;
    int n;
};

static void acc_add(struct acc *a, double v) {
    if (isnan(v)) return;
    a->sum += v;
    a->sum2 += v * v;
    a->n++;
}
static double acc_mean(const struct acc *a) { return a->n ? a->sum / a->n : NAN; }
static double acc_sd(const struct acc *a) {
    if (a->n < 2) return 0;
    double m = acc_mean(a);
    double v = (a->sum2 - a->n * m * m) / (a->n - 1);
    return v > 0 ? sqrt(v) : 0;
}

struct eval_result {
    const char *policy;
    float density;
    int regime;
    struct acc kl, top1, nll, rec;
    struct acc kvf; /* KV bytes held by the policy / by dense, mean over the scored positions */
};

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static nx_status make(const nx_model *m, const struct eval_params *ep, const char *policy,
                      float density, int regime, nx_ctx **out) {
    struct nx_ctx_params cp = ep->base ? *ep->base : nx_ctx_default_params();
    cp.kv.budget = 0;
    cp.n_ctx = ep->stream_len + 1;
    cp.n_threads = cp.n_threads_batch = ep->threads;
    cp.kv.policy = policy;
    cp.kv.density = density;
    cp.kv.regime = regime;
    char err[256];
    nx_status st = nx_ctx_init(m, &cp, out, err, sizeof err);
    if (st != NX_STATUS_OK) fprintf(stderr, "eval: %s: %s\n", policy, err);
    return st;
}

/* The model's own text: temperature-1 sampling from BOS. */
static nx_status sample_stream(const nx_model *m, const struct eval_params *ep, uint64_t seed,
                               nx_token *toks) {
    nx_ctx *c = NULL;
    nx_status rc = make(m, ep, "full", 0, NX_KV_REGIME_PREFILL, &c);
    if (rc != NX_STATUS_OK) return rc;
    struct nx_sampler_params sp = nx_sampler_default_params();
    sp.temp = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    sp.seed = seed;
    nx_sampler *s;
    if ((rc = nx_sampler_init(&sp, nx_model_n_vocab(m), &s)) != NX_STATUS_OK) {
        nx_ctx_free(c);
        return rc;
    }
    toks[0] = nx_token_bos(m) >= 0 ? nx_token_bos(m) : 0;
    struct nx_gen_params gp = nx_gen_default_params();
    gp.max_tokens = ep->stream_len - 1;
    gp.ignore_eog = true;
    gp.sampler = s;
    gp.tokens = toks + 1;
    gp.tokens_cap = ep->stream_len - 1;
    struct nx_gen_result gr;
    struct nx_err err;
    rc = nx_generate(m, c, toks, 1, &gp, &gr, &err);
    if (rc == NX_STATUS_OK && gr.n_generated != ep->stream_len - 1) rc = NX_STATUS_KV_FULL;
    if (rc != NX_STATUS_OK) fprintf(stderr, "eval: sampling: %s\n", nx_ctx_last_error(c));
    nx_sampler_free(s);
    nx_ctx_free(c);
    return rc;
}

/* Streams cut from a text file: BOS (when the model has one), then stream_len - 1 file tokens,
   consecutive and non-overlapping. Returns the number of streams (<= want), or a negative
   nx_status with a message on stderr. */
static int file_streams(const nx_model *m, const struct eval_params *ep, nx_token *toks,
                        int want) {
    size_t len;
    char *text = eval_read_file(ep->text_file, &len, "eval");
    if (!text) return NX_STATUS_IO;
    int32_t n = 0;
    nx_token *ft = eval_tokenize(m, text, len, 0, &n);
    nx_free(text);
    if (!ft) {
        fprintf(stderr, "eval: cannot tokenize '%s'\n", ep->text_file);
        return NX_STATUS_NOMEM;
    }
    int L = ep->stream_len, bos = nx_token_bos(m) >= 0, per = L - bos;
    int have = per > 0 ? n / per : 0;
    if (have < 1) {
        fprintf(stderr, "eval: '%s' gives %d tokens, fewer than one stream of %d\n",
                ep->text_file, n, L);
        nx_free(ft);
        return NX_STATUS_INVALID_ARG;
    }
    int ns = have < want ? have : want;
    for (int s = 0; s < ns; s++) {
        nx_token *t = toks + (size_t)s * L;
        if (bos) t[0] = nx_token_bos(m);
        memcpy(t + bos, ft + (size_t)s * per, sizeof *t * (size_t)per);
    }
    if (ns < want)
        fprintf(stderr, "eval: '%s' holds %d streams of %d tokens (%d asked for)\n",
                ep->text_file, ns, L, want);
    nx_free(ft);
    return ns;
}

/* One configuration on one stream; adds the per-stream means to the result. */
static nx_status run_one(const nx_model *m, const struct eval_params *ep, struct eval_result *r,
                         const nx_token *toks) {
    int nv = nx_model_n_vocab(m), L = ep->stream_len, half = L / 2;
    int block = ep->base && ep->base->kv_block > 0 ? ep->base->kv_block : 32;
    nx_ctx *d = NULL, *p = NULL;
    nx_status rc = make(m, ep, "full", 0, r->regime, &d);
    if (rc == NX_STATUS_OK) rc = make(m, ep, r->policy, r->density, r->regime, &p);
    if (rc != NX_STATUS_OK) {
        nx_ctx_free(d);
        nx_ctx_free(p);
        return rc;
    }
    rc = nx_decode(d, toks, half, false);
    if (rc == NX_STATUS_OK) rc = nx_decode(p, toks, half, false);
    struct acc kl = {0}, top1 = {0}, nll = {0}, rec = {0}, kvf = {0};
    /* position i: the logits after toks[i-1] predict toks[i] */
    for (int i = half; i < L && rc == 0; i++) {
        const float *ld = nx_get_logits(d, -1), *lp = nx_get_logits(p, -1);
        struct nx_kv_stats sd, sp;
        nx_ctx_kv_stats(d, &sd);
        nx_ctx_kv_stats(p, &sp);
        if (sd.bytes_current > 0) acc_add(&kvf, (double)sp.bytes_current / (double)sd.bytes_current);
        acc_add(&kl, metric_kl(ld, lp, nv));
        acc_add(&top1, metric_top1_agree(ld, lp, nv));
        acc_add(&nll, -metric_log_prob(lp, nv, toks[i]));
        int a = argmax(ld, nv);
        if (exp(metric_log_prob(ld, nv, a)) >= 0.5) {
            int last = -1;
            for (int j = i - 1; j >= 0 && last < 0; j--)
                if (toks[j] == a) last = j;
            if (last >= 0 && i - last >= ep->recall_blocks * block)
                acc_add(&rec, argmax(lp, nv) == a);
        }
        if (i + 1 < L && (rc = nx_decode(d, &toks[i], 1, false)) == NX_STATUS_OK)
            rc = nx_decode(p, &toks[i], 1, false);
    }
    if (rc) fprintf(stderr, "eval: decode failed: %s%s\n", nx_ctx_last_error(d),
                    nx_ctx_last_error(p));
    nx_ctx_free(d);
    nx_ctx_free(p);
    if (rc) return rc;
    acc_add(&r->kl, acc_mean(&kl));
    acc_add(&r->top1, acc_mean(&top1));
    acc_add(&r->nll, acc_mean(&nll));
    if (rec.n > 0) acc_add(&r->rec, acc_mean(&rec));
    acc_add(&r->kvf, acc_mean(&kvf));
    return NX_STATUS_OK;
}

static nx_status write_json(const struct eval_params *ep, const struct eval_result *res, int n,
                            int streams) {
    struct nx_outfile o;
    char err[1200];
    nx_status st = nx_outfile_open(&o, ep->json_path, err, sizeof err);
    if (st != NX_STATUS_OK) {
        fprintf(stderr, "eval: %s\n", err);
        return st;
    }
    const struct nx_ctx_params *b = ep->base;
    fprintf(o.f, "[\n");
    for (int i = 0; i < n; i++) {
        const struct eval_result *r = &res[i];
        fprintf(o.f,
                "  {\"policy\":\"%s\",\"density\":%.4f,\"regime\":\"%s\",\"kl\":%.6g,"
                "\"kl_sd\":%.6g,\"top1\":%.6g,\"top1_sd\":%.6g,\"ppl\":%.6g,"
                "\"nll\":%.6g,\"nll_sd\":%.6g,\"recall\":%.6g,\"recall_sd\":%.6g,"
                "\"recall_streams\":%d,\"streams\":%d,\"stream_len\":%d,\"seed\":%llu,"
                "\"source\":\"%s\",\"kv_block\":%d,\"kv_sink\":%d,\"kv_recent\":%d,"
                "\"recall_blocks\":%d,\"kv_frac\":%.6g,\"kv_frac_sd\":%.6g}%s\n",
                r->policy, r->density, eval_regime_name(r->regime), acc_mean(&r->kl),
                acc_sd(&r->kl), acc_mean(&r->top1), acc_sd(&r->top1), exp(acc_mean(&r->nll)),
                acc_mean(&r->nll), acc_sd(&r->nll), r->rec.n ? acc_mean(&r->rec) : 0.0,
                acc_sd(&r->rec), r->rec.n, streams, ep->stream_len,
                (unsigned long long)ep->seed, ep->text_file ? "file" : "sampled",
                b ? b->kv_block : 32, b ? b->kv.sink : 32, b ? b->kv.recent : 32,
                ep->recall_blocks, acc_mean(&r->kvf), acc_sd(&r->kvf), i + 1 < n ? "," : "");
    }
    fprintf(o.f, "]\n");
    if ((st = nx_outfile_commit(&o, err, sizeof err)) != NX_STATUS_OK) {
        fprintf(stderr, "eval: %s\n", err);
        return st;
    }
    return NX_STATUS_OK;
}

/* One SVG per regime: KL, top-1 and recall against density, one line per policy. */
static nx_status write_svgs(const struct eval_params *ep, const struct eval_result *res, int np,
                            int nd, int nr, int streams) {
    nx_status st = eval_mkdir(ep->svg_dir, "eval");
    if (st != NX_STATUS_OK) return st;
    for (int ri = 0; ri < nr; ri++) {
        double x[MAX_POL][MAX_DEN], kl[MAX_POL][MAX_DEN], kle[MAX_POL][MAX_DEN];
        double t1[MAX_POL][MAX_DEN], t1e[MAX_POL][MAX_DEN], rc[MAX_POL][MAX_DEN],
            rce[MAX_POL][MAX_DEN];
        struct svg_series s_kl[MAX_POL], s_t1[MAX_POL], s_rc[MAX_POL];
        int regime = 0;
        for (int pi = 0; pi < np; pi++) {
            for (int di = 0; di < nd; di++) {
                const struct eval_result *r = &res[(pi * nd + di) * nr + ri];
                regime = r->regime;
                x[pi][di] = r->density;
                kl[pi][di] = acc_mean(&r->kl), kle[pi][di] = acc_sd(&r->kl);
                t1[pi][di] = acc_mean(&r->top1), t1e[pi][di] = acc_sd(&r->top1);
                rc[pi][di] = acc_mean(&r->rec), rce[pi][di] = acc_sd(&r->rec);
            }
            const char *name = res[pi * nd * nr].policy;
            s_kl[pi] = (struct svg_series){name, x[pi], kl[pi], kle[pi], nd};
            s_t1[pi] = (struct svg_series){name, x[pi], t1[pi], t1e[pi], nd};
            s_rc[pi] = (struct svg_series){name, x[pi], rc[pi], rce[pi], nd};
        }
        struct svg_panel panels[3] = {
            {"KL(dense || policy)", "density", "nats / token", false, true, s_kl, np},
            {"top-1 agreement", "density", "fraction", false, false, s_t1, np},
            {"long-range recall", "density", "fraction kept", false, false, s_rc, np}};
        char path[1100], title[256], err[1300];
        snprintf(path, sizeof path, "%s/fidelity_%s.svg", ep->svg_dir, eval_regime_name(regime));
        snprintf(title, sizeof title,
                 "Fidelity against dense, %s regime (%d %s streams of %d tokens, mean ± sd)",
                 eval_regime_name(regime), streams, ep->text_file ? "file" : "sampled",
                 ep->stream_len);
        if ((st = svg_save(path, title, panels, 3, err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "eval: %s\n", err);
            return st;
        }
        fprintf(stderr, "eval: wrote %s\n", path);
    }
    return NX_STATUS_OK;
}

nx_status eval_run(const nx_model *m, const struct eval_params *ep) {
    char pol_buf[512], den_buf[256], reg_buf[64];
    snprintf(pol_buf, sizeof pol_buf, "%s", ep->policies ? ep->policies : "");
    snprintf(den_buf, sizeof den_buf, "%s", ep->densities ? ep->densities : "");
    snprintf(reg_buf, sizeof reg_buf, "%s", ep->regimes ? ep->regimes : "");
    struct eval_sweep sw;
    nx_status rc = eval_sweep_split(pol_buf, den_buf, reg_buf, "eval", &sw);
    if (rc != NX_STATUS_OK) return rc;
    const int np = sw.np, nd = sw.nd, nr = sw.nr;
    if (ep->streams < 1 || ep->stream_len < 8) {
        fprintf(stderr, "eval: need at least 1 stream of at least 8 tokens\n");
        return NX_STATUS_INVALID_ARG;
    }
    int L = ep->stream_len;
    nx_token *toks = nx_malloc(sizeof *toks * (size_t)L * (size_t)ep->streams);
    struct eval_result *res = nx_calloc((size_t)(np * nd * nr), sizeof *res);
    if (!toks || !res) {
        nx_free(toks);
        nx_free(res);
        fprintf(stderr, "eval: out of memory\n");
        return NX_STATUS_NOMEM;
    }
    int streams = ep->streams;
    if (ep->text_file) {
        streams = file_streams(m, ep, toks, ep->streams);
        if (streams < 0) {
            rc = (nx_status)streams;
            goto out;
        }
    } else {
        struct nx_progress pg;
        nx_progress_start(&pg, stderr, "streams sampled", streams);
        for (int s = 0; s < streams; s++) {
            rc = sample_stream(m, ep, ep->seed + (uint64_t)s, toks + (size_t)s * L);
            if (rc != NX_STATUS_OK) goto out;
            nx_progress_update(&pg, s + 1, NULL);
        }
        nx_progress_finish(&pg);
    }
    printf("| policy | density | regime | KV kept | KL (nats) | top-1 | ppl | recall (n streams) |\n");
    printf("|---|---|---|---|---|---|---|---|\n");
    int total = np * nd * nr;
    struct nx_progress pg;
    nx_progress_start(&pg, stderr, "config x stream runs", total * streams);
    for (int pi = 0, k = 0; pi < np; pi++)
        for (int di = 0; di < nd; di++)
            for (int ri = 0; ri < nr; ri++, k++) {
                struct eval_result *r = &res[k];
                r->policy = sw.pols[pi];
                r->density = sw.dv[di];
                r->regime = sw.rv[ri];
                char label[128];
                snprintf(label, sizeof label, "%s d=%.2f %s", r->policy, r->density,
                         eval_regime_name(r->regime));
                for (int s = 0; s < streams; s++) {
                    if ((rc = run_one(m, ep, r, toks + (size_t)s * L)) != NX_STATUS_OK) {
                        fprintf(stderr, "\neval: %s failed\n", label);
                        goto out;
                    }
                    nx_progress_update(&pg, k * streams + s + 1, label);
                }
                printf("| %s | %.2f | %s | %.3f | %.4f ± %.4f | %.3f ± %.3f | %.3f | %.3f ± %.3f (%d) |\n",
                       r->policy, r->density, eval_regime_name(r->regime), acc_mean(&r->kvf), acc_mean(&r->kl), acc_sd(&r->kl),
                       acc_mean(&r->top1), acc_sd(&r->top1), exp(acc_mean(&r->nll)),
                       acc_mean(&r->rec), acc_sd(&r->rec), r->rec.n);
                fflush(stdout);
            }
    nx_progress_finish(&pg);
    if (ep->json_path && (rc = write_json(ep, res, total, streams)) != NX_STATUS_OK) goto out;
    if (ep->svg_dir && (rc = write_svgs(ep, res, np, nd, nr, streams)) != NX_STATUS_OK) goto out;
    rc = NX_STATUS_OK;
out:
    nx_free(toks);
    nx_free(res);
    return rc;
}
