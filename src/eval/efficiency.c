/*
 * efficiency.c - the runner of `nexus eval-efficiency`: what eviction saves at decode time.
 *
 * DESIGN: per policy, one context sized for prompt + the longest length; a prompt of `prompt`
 * seeded random tokens is decoded (one multi-token call, untimed), then the longest length is
 * decoded one token at a time (the same seeded tokens for every policy), timing every step. At
 * each checkpoint length L_k the run records, over the window of steps (L_{k-1}, L_k]:
 * tokens/s, median and p99 step latency, and the share of the window spent evicting (the
 * context's evict_seconds); and at L_k itself the KV bytes the sequence holds (steady state for
 * an evicting policy) and the peak so far. So one run of 8K tokens yields the 1K, 4K and 8K
 * figures. "full" ignores the density. Token values do not change the speed of a dense forward
 * pass; they do steer which blocks a policy keeps, which changes nothing in its cost.
 */
#include "eval/efficiency.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#include "core/nx_base.h"
#include "eval/eval.h"
#include "eval/outfile.h"
#include "eval/progress.h"
#include "eval/svg.h"

enum { MAX_POL = 16, MAX_LEN = 16 };

struct effi_point {
    int gen, ctx;
    double tps, tps_cum, med_ms, p99_ms, evict_share;
    size_t kv_bytes, kv_peak;
};

struct effi_params effi_default_params(void) {
    struct effi_params p = {.policies = "full,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus",
                            .density = 0.2f, .regime = NX_KV_REGIME_STREAM, .prompt = 512,
                            .lengths = "1024,4096,8192", .threads = 2, .seed = 1};
    return p;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* median and p99 (nearest rank) of v[0..n), sorted in place */
static void med_p99(double *v, int n, double *med, double *p99) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    *med = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    int k = (int)ceil(0.99 * n) - 1;
    *p99 = v[k < 0 ? 0 : k];
}

static nx_status run_policy(const nx_model *m, const struct effi_params *ep, const char *policy,
                            const int *lens, int nl, const nx_token *toks, struct effi_point *out,
                            struct nx_progress *pg, int pg_base) {
    int maxlen = lens[nl - 1];
    struct nx_ctx_params cp = ep->base ? *ep->base : nx_ctx_default_params();
    cp.n_ctx = ep->prompt + maxlen + 1;
    cp.n_threads = cp.n_threads_batch = ep->threads;
    cp.kv.policy = policy;
    cp.kv.budget = 0;
    cp.kv.density = strcmp(policy, "full") ? ep->density : 0;
    cp.kv.regime = ep->regime;
    nx_ctx *c = NULL;
    char err[256];
    nx_status rc = nx_ctx_init(m, &cp, &c, err, sizeof err);
    if (rc != NX_STATUS_OK) {
        fprintf(stderr, "eval-efficiency: %s: %s\n", policy, err);
        return rc;
    }
    double *lat = nx_malloc(sizeof *lat * (size_t)maxlen), *win = nx_malloc(sizeof *win * (size_t)maxlen);
    rc = NX_STATUS_NOMEM;
    if (!lat || !win) {
        fprintf(stderr, "eval-efficiency: out of memory\n");
        goto done;
    }
    if (ep->prompt > 0 && (rc = nx_decode(c, toks, ep->prompt, false)) != NX_STATUS_OK) {
        fprintf(stderr, "eval-efficiency: %s: prompt: %s\n", policy, nx_ctx_last_error(c));
        goto done;
    }
    struct nx_kv_stats k0;
    nx_ctx_kv_stats(c, &k0);
    double ev_prev = k0.evict_seconds, total = 0;
    int prev = 0, li = 0;
    for (int i = 0; i < maxlen; i++) {
        double t0 = nx_time_s();
        if ((rc = nx_decode(c, &toks[ep->prompt + i], 1, false)) != NX_STATUS_OK) {
            fprintf(stderr, "eval-efficiency: %s: step %d: %s\n", policy, i, nx_ctx_last_error(c));
            goto done;
        }
        lat[i] = nx_time_s() - t0;
        total += lat[i];
        if (i + 1 == lens[li]) {
            struct nx_kv_stats ks;
            nx_ctx_kv_stats(c, &ks);
            int n = i + 1 - prev;
            double wsum = 0;
            for (int j = 0; j < n; j++) wsum += (win[j] = lat[prev + j]);
            struct effi_point *pt = &out[li];
            pt->gen = i + 1;
            pt->ctx = ep->prompt + i + 1;
            pt->tps = n / wsum;
            pt->tps_cum = (i + 1) / total;
            med_p99(win, n, &pt->med_ms, &pt->p99_ms);
            pt->med_ms *= 1e3, pt->p99_ms *= 1e3;
            pt->evict_share = (ks.evict_seconds - ev_prev) / wsum;
            pt->kv_bytes = ks.bytes_current;
            pt->kv_peak = ks.bytes_peak;
            ev_prev = ks.evict_seconds;
            prev = i + 1;
            li++;
        }
        nx_progress_update(pg, pg_base + i + 1, policy);
    }
    rc = NX_STATUS_OK;
done:
    nx_free(lat);
    nx_free(win);
    nx_ctx_free(c);
    return rc;
}

static nx_status write_json(const nx_model *m, const struct effi_params *ep, char **pols, int np,
                            int nl, const struct effi_point *pts) {
    struct nx_outfile o;
    char err[1200];
    nx_status st = nx_outfile_open(&o, ep->json_path, err, sizeof err);
    if (st != NX_STATUS_OK) {
        fprintf(stderr, "eval-efficiency: %s\n", err);
        return st;
    }
    fprintf(o.f, "[\n");
    for (int pi = 0; pi < np; pi++)
        for (int li = 0; li < nl; li++) {
            const struct effi_point *p = &pts[pi * nl + li];
            fprintf(o.f,
                    "  {\"policy\":\"%s\",\"density\":%.4f,\"regime\":\"%s\",\"prompt\":%d,"
                    "\"gen_len\":%d,\"ctx_len\":%d,\"tps\":%.4f,\"tps_cum\":%.4f,"
                    "\"lat_median_ms\":%.5f,\"lat_p99_ms\":%.5f,\"kv_bytes\":%zu,"
                    "\"kv_bytes_peak\":%zu,\"evict_share\":%.6f,\"threads\":%d,"
                    "\"kernels\":\"%s\",\"model\":\"%s\",\"seed\":%llu}%s\n",
                    pols[pi], strcmp(pols[pi], "full") ? ep->density : 0.0,
                    eval_regime_name(ep->regime), ep->prompt, p->gen, p->ctx, p->tps, p->tps_cum,
                    p->med_ms, p->p99_ms, p->kv_bytes, p->kv_peak, p->evict_share, ep->threads,
                    nx_kernels_name(), nx_model_desc(m), (unsigned long long)ep->seed,
                    pi + 1 == np && li + 1 == nl ? "" : ",");
        }
    fprintf(o.f, "]\n");
    if ((st = nx_outfile_commit(&o, err, sizeof err)) != NX_STATUS_OK) {
        fprintf(stderr, "eval-efficiency: %s\n", err);
        return st;
    }
    return NX_STATUS_OK;
}

static nx_status write_svg(const nx_model *m, const struct effi_params *ep, char **pols, int np,
                           int nl, const struct effi_point *pts) {
    nx_status rc = eval_mkdir(ep->svg_dir, "eval-efficiency");
    if (rc != NX_STATUS_OK) return rc;
    double x[MAX_POL][MAX_LEN], tps[MAX_POL][MAX_LEN], kv[MAX_POL][MAX_LEN];
    struct svg_series st[MAX_POL], sk[MAX_POL];
    for (int pi = 0; pi < np; pi++) {
        for (int li = 0; li < nl; li++) {
            const struct effi_point *p = &pts[pi * nl + li];
            x[pi][li] = p->ctx;
            tps[pi][li] = p->tps;
            kv[pi][li] = (double)p->kv_bytes / 1048576.0;
        }
        st[pi] = (struct svg_series){pols[pi], x[pi], tps[pi], NULL, nl};
        sk[pi] = (struct svg_series){pols[pi], x[pi], kv[pi], NULL, nl};
    }
    struct svg_panel panels[2] = {
        {"decode tokens/s", "context length (tokens)", "tokens / s", true, true, st, np},
        {"KV cache per sequence", "context length (tokens)", "MiB", true, true, sk, np}};
    char path[1100], title[512], err[1300];
    snprintf(path, sizeof path, "%s/efficiency.svg", ep->svg_dir);
    snprintf(title, sizeof title, "%s, %d threads, density %.2f (%s regime), prompt %d",
             nx_model_desc(m), ep->threads, ep->density, eval_regime_name(ep->regime), ep->prompt);
    if ((rc = svg_save(path, title, panels, 2, err, sizeof err)) != NX_STATUS_OK) {
        fprintf(stderr, "eval-efficiency: %s\n", err);
        return rc;
    }
    fprintf(stderr, "eval-efficiency: wrote %s\n", path);
    return NX_STATUS_OK;
}

nx_status eval_efficiency_run(const nx_model *m, const struct effi_params *ep) {
    char pol_buf[512], len_buf[256];
    char *pols[MAX_POL], *ls[MAX_LEN];
    int np = eval_split_list(ep->policies, pol_buf, sizeof pol_buf, pols, MAX_POL,
                             "eval-efficiency", "policies");
    int nl = eval_split_list(ep->lengths, len_buf, sizeof len_buf, ls, MAX_LEN, "eval-efficiency",
                             "lengths");
    if (np < 0 || nl < 0) return NX_STATUS_INVALID_ARG;
    if (eval_check_policies(pols, np, "eval-efficiency")) return NX_STATUS_INVALID_ARG;
    if (!(ep->density > 0 && ep->density <= 1)) {
        fprintf(stderr, "eval-efficiency: --density must be in (0, 1]\n");
        return NX_STATUS_INVALID_ARG;
    }
    if (ep->prompt < 0 || ep->threads < 1) {
        fprintf(stderr, "eval-efficiency: bad --prompt or --threads\n");
        return NX_STATUS_INVALID_ARG;
    }
    int lens[MAX_LEN];
    if (nl == 0) {
        fprintf(stderr, "eval-efficiency: empty --lengths\n");
        return NX_STATUS_INVALID_ARG;
    }
    for (int i = 0; i < nl; i++) {
        char *end;
        long v = strtol(ls[i], &end, 10);
        if (*end || end == ls[i] || v < 1 || v > (1 << 22) || (i > 0 && v <= lens[i - 1])) {
            fprintf(stderr, "eval-efficiency: --lengths must be ascending integers in [1, 4194304], "
                            "got '%s'\n", ls[i]);
            return NX_STATUS_INVALID_ARG;
        }
        lens[i] = (int)v;
    }
    int maxlen = lens[nl - 1], ntok = ep->prompt + maxlen;
    nx_token *toks = nx_malloc(sizeof *toks * (size_t)ntok);
    struct effi_point *pts = nx_calloc((size_t)(np * nl), sizeof *pts);
    nx_status rc = NX_STATUS_NOMEM;
    if (!toks || !pts) {
        fprintf(stderr, "eval-efficiency: out of memory\n");
        goto out;
    }
    uint64_t s = ep->seed * 0x9E3779B97F4A7C15ull + 1;
    int nv = nx_model_n_vocab(m);
    for (int i = 0; i < ntok; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        toks[i] = (nx_token)((s >> 33) % (uint64_t)nv);
    }
    if (nx_token_bos(m) >= 0) toks[0] = nx_token_bos(m);
    struct nx_progress pg;
    nx_progress_start(&pg, stderr, "decode steps", np * maxlen);
    for (int pi = 0; pi < np; pi++) {
        rc = run_policy(m, ep, pols[pi], lens, nl, toks, pts + pi * nl, &pg, pi * maxlen);
        if (rc != NX_STATUS_OK) goto out;
    }
    nx_progress_finish(&pg);
    printf("model: %s, %d threads, kernels %s, prompt %d, density %.2f, %s regime\n",
           nx_model_desc(m), ep->threads, nx_kernels_name(), ep->prompt, ep->density,
           eval_regime_name(ep->regime));
    printf("| policy | generated | context | tok/s | vs full | median ms | p99 ms | KV MiB | "
           "vs full | evicting, %% |\n|---|---|---|---|---|---|---|---|---|---|\n");
    int full = -1;
    for (int pi = 0; pi < np; pi++)
        if (!strcmp(pols[pi], "full")) full = pi;
    for (int pi = 0; pi < np; pi++)
        for (int li = 0; li < nl; li++) {
            const struct effi_point *p = &pts[pi * nl + li], *f = full >= 0 ? &pts[full * nl + li] : NULL;
            char vs1[32] = "-", vs2[32] = "-";
            if (f) {
                snprintf(vs1, sizeof vs1, "%.2fx", p->tps / f->tps);
                snprintf(vs2, sizeof vs2, "%.3fx", (double)p->kv_bytes / (double)f->kv_bytes);
            }
            printf("| %s | %d | %d | %.1f | %s | %.3f | %.3f | %.2f | %s | %.1f |\n", pols[pi],
                   p->gen, p->ctx, p->tps, vs1, p->med_ms, p->p99_ms,
                   (double)p->kv_bytes / 1048576.0, vs2, 100.0 * p->evict_share);
        }
    fflush(stdout);
    if (ep->json_path && (rc = write_json(m, ep, pols, np, nl, pts)) != NX_STATUS_OK) goto out;
    if (ep->svg_dir && (rc = write_svg(m, ep, pols, np, nl, pts)) != NX_STATUS_OK) goto out;
    rc = NX_STATUS_OK;
out:
    nx_free(toks);
    nx_free(pts);
    return rc;
}
