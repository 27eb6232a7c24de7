/*
 * eval.c - `nexus eval`: fidelity of KV eviction against the dense model, teacher-forced.
 *
 * DESIGN: for each stream (text the model samples itself at temperature 1 from BOS with seed
 * seed + stream index, so every configuration sees the same tokens), each policy x density x
 * regime runs two contexts in lockstep over the same tokens: a dense one and one with the
 * policy. The first half of the stream is a prompt (one multi-token decode, compressed at its
 * end in both regimes); the second half is teacher-forced one token at a time (evicting only in
 * the stream regime). At every position of the second half:
 *   kl     = KL(dense || policy) of the next-token distributions (nats),
 *   top1   = 1 when both argmaxes agree,
 *   nll    = -log p_policy(next token) (perplexity = exp(mean nll)),
 *   recall = over positions where the dense model puts >= 0.5 on its argmax and that token last
 *            occurred >= k blocks earlier in the stream: the fraction where the policy's argmax
 *            is the same (long-range retrieval a tiny model can show).
 * Means are per stream, then mean and standard deviation over streams. Progress goes to stderr,
 * a table to stdout, one JSON record per configuration to --json.
 */
#include "eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/metrics.h"

struct eval_cfg {
    const char *policy;
    float density;
    int regime;
};

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

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static nx_ctx *make(const nx_model *m, const struct eval_params *ep, const char *policy,
                    float density, int regime) {
    struct nx_ctx_params cp = ep->base ? *ep->base : nx_ctx_default_params();
    cp.kv_budget = 0;
    cp.n_ctx = ep->stream_len + 1;
    cp.n_threads = cp.n_threads_batch = ep->threads;
    cp.kv_policy = policy;
    cp.kv_density = density;
    cp.kv_regime = regime;
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) fprintf(stderr, "eval: %s: %s\n", policy, err);
    return c;
}

/* The model's own text: temperature-1 sampling from BOS. */
static int sample_stream(const nx_model *m, const struct eval_params *ep, uint64_t seed,
                         nx_token *toks) {
    nx_ctx *c = make(m, ep, "full", 0, NX_KV_REGIME_PREFILL);
    if (!c) return -1;
    struct nx_sampler_params sp = nx_sampler_default_params();
    sp.temp = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    sp.seed = seed;
    nx_sampler *s;
    if (nx_sampler_init(&sp, nx_model_n_vocab(m), &s)) {
        nx_ctx_free(c);
        return -1;
    }
    toks[0] = nx_token_bos(m) >= 0 ? nx_token_bos(m) : 0;
    for (int i = 1; i < ep->stream_len; i++) {
        if (nx_decode(c, &toks[i - 1], 1, false)) break;
        toks[i] = nx_sampler_sample(s, nx_get_logits(c, -1));
    }
    nx_sampler_free(s);
    nx_ctx_free(c);
    return 0;
}

/* One configuration on one stream; adds the per-stream means to the accumulators. */
static int run_one(const nx_model *m, const struct eval_params *ep, const struct eval_cfg *cfg,
                   const nx_token *toks, struct acc out[4]) {
    int nv = nx_model_n_vocab(m), L = ep->stream_len, half = L / 2;
    nx_ctx *d = make(m, ep, "full", 0, cfg->regime);
    nx_ctx *p = make(m, ep, cfg->policy, cfg->density, cfg->regime);
    if (!d || !p) {
        nx_ctx_free(d);
        nx_ctx_free(p);
        return -1;
    }
    int rc = 0;
    if (nx_decode(d, toks, half, false) || nx_decode(p, toks, half, false)) rc = -1;
    struct acc kl = {0}, top1 = {0}, nll = {0}, rec = {0};
    /* position i: the logits after toks[i-1] predict toks[i] */
    for (int i = half; i < L && rc == 0; i++) {
        const float *ld = nx_get_logits(d, -1), *lp = nx_get_logits(p, -1);
        acc_add(&kl, metric_kl(ld, lp, nv));
        acc_add(&top1, metric_top1_agree(ld, lp, nv));
        acc_add(&nll, -metric_log_prob(lp, nv, toks[i]));
        int a = argmax(ld, nv);
        if (exp(metric_log_prob(ld, nv, a)) >= 0.5) {
            int last = -1;
            for (int j = i - 1; j >= 0 && last < 0; j--)
                if (toks[j] == a) last = j;
            if (last >= 0 && i - last >= ep->recall_blocks * 32)
                acc_add(&rec, argmax(lp, nv) == a);
        }
        if (i + 1 < L && (nx_decode(d, &toks[i], 1, false) || nx_decode(p, &toks[i], 1, false)))
            rc = -1;
    }
    nx_ctx_free(d);
    nx_ctx_free(p);
    if (rc) return rc;
    acc_add(&out[0], acc_mean(&kl));
    acc_add(&out[1], acc_mean(&top1));
    acc_add(&out[2], acc_mean(&nll));
    if (rec.n > 0) acc_add(&out[3], acc_mean(&rec));
    return 0;
}

static int split_list(char *s, char **items, int max) {
    int n = 0;
    for (char *t = strtok(s, ","); t && n < max; t = strtok(NULL, ",")) items[n++] = t;
    return n;
}

int eval_run(const nx_model *m, const struct eval_params *ep) {
    char pol_buf[512], den_buf[256], reg_buf[64];
    snprintf(pol_buf, sizeof pol_buf, "%s", ep->policies);
    snprintf(den_buf, sizeof den_buf, "%s", ep->densities);
    snprintf(reg_buf, sizeof reg_buf, "%s", ep->regimes);
    char *pols[16], *dens[16], *regs[4];
    int np = split_list(pol_buf, pols, 16), nd = split_list(den_buf, dens, 16),
        nr = split_list(reg_buf, regs, 4);
    if (np == 0 || nd == 0 || nr == 0) {
        fprintf(stderr, "eval: empty --policies, --densities or --regimes\n");
        return 1;
    }
    for (int r = 0; r < nr; r++)
        if (strcmp(regs[r], "prefill") && strcmp(regs[r], "stream")) {
            fprintf(stderr, "eval: unknown regime '%s' (prefill, stream)\n", regs[r]);
            return 1;
        }
    float dv[16];
    for (int i = 0; i < nd; i++) {
        char *end;
        dv[i] = strtof(dens[i], &end);
        if (*end || !(dv[i] > 0 && dv[i] <= 1)) {
            fprintf(stderr, "eval: density '%s' must be in (0, 1]\n", dens[i]);
            return 1;
        }
    }
    int L = ep->stream_len;
    nx_token *toks = malloc(sizeof *toks * (size_t)L * (size_t)ep->streams);
    if (!toks) return 1;
    for (int s = 0; s < ep->streams; s++) {
        fprintf(stderr, "\rsampling stream %d/%d", s + 1, ep->streams);
        if (sample_stream(m, ep, ep->seed + (uint64_t)s, toks + (size_t)s * L)) {
            free(toks);
            return 1;
        }
    }
    fprintf(stderr, "\n");
    FILE *js = NULL;
    if (ep->json_path) {
        js = fopen(ep->json_path, "w");
        if (!js) {
            fprintf(stderr, "eval: cannot write '%s'\n", ep->json_path);
            free(toks);
            return 1;
        }
        fprintf(js, "[\n");
    }
    printf("| policy | density | regime | KL (nats) | top-1 | ppl | recall (n streams) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    int total = np * nd * nr, done = 0, first = 1;
    for (int pi = 0; pi < np; pi++)
        for (int di = 0; di < nd; di++)
            for (int ri = 0; ri < nr; ri++) {
                struct eval_cfg cfg = {pols[pi], dv[di],
                                       strcmp(regs[ri], "stream") == 0 ? NX_KV_REGIME_STREAM
                                                                       : NX_KV_REGIME_PREFILL};
                struct acc out[4] = {{0}};
                for (int s = 0; s < ep->streams; s++) {
                    fprintf(stderr, "\r[%d/%d] %s d=%.2f %s: stream %d/%d   ", done + 1, total,
                            cfg.policy, cfg.density, regs[ri], s + 1, ep->streams);
                    if (run_one(m, ep, &cfg, toks + (size_t)s * L, out)) {
                        fprintf(stderr, "\neval: %s failed\n", cfg.policy);
                        free(toks);
                        if (js) fclose(js);
                        return 1;
                    }
                }
                done++;
                double ppl = exp(acc_mean(&out[2]));
                printf("| %s | %.2f | %s | %.4f ± %.4f | %.3f ± %.3f | %.3f | %.3f ± %.3f (%d) |\n",
                       cfg.policy, cfg.density, regs[ri], acc_mean(&out[0]), acc_sd(&out[0]),
                       acc_mean(&out[1]), acc_sd(&out[1]), ppl, acc_mean(&out[3]),
                       acc_sd(&out[3]), out[3].n);
                fflush(stdout);
                if (js) {
                    fprintf(js,
                            "%s  {\"policy\":\"%s\",\"density\":%.4f,\"regime\":\"%s\",\"kl\":%.6g,"
                            "\"kl_sd\":%.6g,\"top1\":%.6g,\"top1_sd\":%.6g,\"ppl\":%.6g,"
                            "\"nll_sd\":%.6g,\"recall\":%.6g,\"recall_sd\":%.6g,"
                            "\"recall_streams\":%d,\"streams\":%d,\"stream_len\":%d,\"seed\":%llu}",
                            first ? "" : ",\n", cfg.policy, cfg.density, regs[ri],
                            acc_mean(&out[0]), acc_sd(&out[0]), acc_mean(&out[1]),
                            acc_sd(&out[1]), ppl, acc_sd(&out[2]),
                            out[3].n ? acc_mean(&out[3]) : 0.0, acc_sd(&out[3]), out[3].n,
                            ep->streams, L, (unsigned long long)ep->seed);
                    first = 0;
                }
            }
    fprintf(stderr, "\n");
    if (js) {
        fprintf(js, "\n]\n");
        fclose(js);
    }
    free(toks);
    return 0;
}
