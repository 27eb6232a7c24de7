/*
 * longbench_run.c - the runner of `nexus eval-longbench --data FILE.jsonl`.
 *
 * DESIGN: every record becomes prompt = template(context, input) (by default the context, a
 * blank line and the input: LongBench's per-dataset prompt wording is its own and is not
 * reproduced; pass --template to use it), tokenized with BOS; prompts longer than max_len tokens
 * keep their first max_len/2 and last max_len - max_len/2 tokens, as LongBench's pred.py does
 * (on token ids here, not by decoding and re-tokenizing). Each configuration (policy x density
 * x regime; "full" once) generates greedily in a fresh context up to the dataset's length; the
 * score is LongBench's metric, max over the answers, mean x 100 per dataset. Records of
 * unsupported datasets (jieba-segmented Chinese metrics) are counted and skipped.
 */
#include "eval/longbench_run.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "eval/eval.h"
#include "eval/longbench.h"
#include "eval/outfile.h"
#include "eval/progress.h"

enum { MAX_CFG = 512, MAX_FILES = 64, MAX_DS = 64 };

struct longbench_params longbench_default_params(void) {
    struct longbench_params p = {.policies = "full,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus",
                                 .densities = "0.2", .regimes = "prefill", .threads = 2};
    return p;
}

int32_t longbench_truncate_middle(nx_token *toks, int32_t n, int32_t max) {
    if (n <= max || max <= 0) return n;
    int32_t head = max / 2, tail = max - head;
    memmove(toks + head, toks + n - tail, sizeof *toks * (size_t)tail);
    return max;
}

char *longbench_prompt(const char *tmpl, const char *context, const char *input) {
    if (!tmpl) tmpl = "{context}\n\n{input}\n";
    size_t cap = strlen(tmpl) + 1, nc = strlen(context), ni = strlen(input);
    for (const char *p = tmpl; (p = strchr(p, '{')); p++) {
        if (!strncmp(p, "{context}", 9)) cap += nc;
        if (!strncmp(p, "{input}", 7)) cap += ni;
    }
    char *out = nx_malloc(cap), *o = out;
    if (!out) return NULL;
    for (const char *p = tmpl; *p;) {
        if (!strncmp(p, "{context}", 9)) {
            memcpy(o, context, nc), o += nc, p += 9;
        } else if (!strncmp(p, "{input}", 7)) {
            memcpy(o, input, ni), o += ni, p += 7;
        } else {
            *o++ = *p++;
        }
    }
    *o = 0;
    return out;
}


struct ds_acc {
    char name[64];
    enum lb_metric metric;
    double *sum; /* per configuration */
    int n, truncated, unsupported;
};

nx_status eval_longbench_run(const nx_model *m, const struct longbench_params *lp) {
    char fbuf[4096];
    char *files[MAX_FILES];
    int nf = eval_split_list(lp->data, fbuf, sizeof fbuf, files, MAX_FILES, "eval-longbench",
                             "data");
    if (nf < 0) return NX_STATUS_INVALID_ARG;
    if (nf == 0) {
        fprintf(stderr, "eval-longbench: no --data file\n");
        return NX_STATUS_INVALID_ARG;
    }
    struct eval_sweep sw;
    struct eval_sweep_cfg cfgs[MAX_CFG];
    int nc = eval_sweep_parse(lp->policies, lp->densities, lp->regimes, "eval-longbench", &sw, cfgs,
                              MAX_CFG);
    if (nc < 0) return NX_STATUS_INVALID_ARG;
    /* load everything first: a bad line fails before any generation */
    struct lb_set sets[MAX_FILES];
    memset(sets, 0, sizeof sets);
    nx_status rc = NX_STATUS_OK;
    int total = 0;
    struct ds_acc ds[MAX_DS];
    int nds = 0;
    memset(ds, 0, sizeof ds);
    for (int f = 0; f < nf; f++) {
        char err[1024];
        if ((rc = lb_load(files[f], lp->limit, &sets[f], err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "eval-longbench: %s\n", err);
            goto out;
        }
        total += sets[f].n;
    }
    int ctx_train = nx_model_n_ctx_train(m);
    struct nx_progress pg;
    nx_progress_start(&pg, stderr, "generations", total * nc);
    int done = 0;
    for (int f = 0; f < nf; f++)
        for (int i = 0; i < sets[f].n; i++) {
            const struct lb_record *r = &sets[f].r[i];
            int di = 0;
            while (di < nds && strcmp(ds[di].name, r->dataset)) di++;
            if (di == nds) {
                if (nds == MAX_DS) {
                    fprintf(stderr, "eval-longbench: more than %d datasets\n", MAX_DS);
                    rc = NX_STATUS_UNSUPPORTED;
                    goto out;
                }
                snprintf(ds[di].name, sizeof ds[di].name, "%s", r->dataset);
                lb_dataset_info(r->dataset, &ds[di].metric, NULL, NULL);
                ds[di].sum = nx_calloc((size_t)nc, sizeof *ds[di].sum);
                if (!ds[di].sum) {
                    fprintf(stderr, "eval-longbench: out of memory\n");
                    rc = NX_STATUS_NOMEM;
                    goto out;
                }
                nds++;
            }
            struct ds_acc *a = &ds[di];
            if (a->metric == LB_UNSUPPORTED) {
                a->unsupported++;
                done += nc;
                nx_progress_update(&pg, done, r->dataset);
                continue;
            }
            int max_new = lp->max_new;
            if (max_new <= 0) lb_dataset_info(r->dataset, NULL, &max_new, NULL);
            int32_t max_len = lp->max_len > 0 ? lp->max_len : ctx_train - max_new;
            if (max_len < 8) {
                fprintf(stderr, "eval-longbench: %s:%d: no room for a prompt (context %d, %d "
                                "tokens to generate); pass --max-len\n", files[f], r->line,
                        ctx_train, max_new);
                rc = NX_STATUS_INVALID_ARG;
                goto out;
            }
            char *text = longbench_prompt(lp->tmpl, r->context, r->input);
            int32_t n = 0;
            nx_token *toks = text ? eval_tokenize(m, text, strlen(text), 1, &n) : NULL;
            nx_free(text);
            if (!toks) {
                fprintf(stderr, "eval-longbench: %s:%d: cannot tokenize the prompt\n", files[f],
                        r->line);
                rc = NX_STATUS_NOMEM;
                goto out;
            }
            if (n > max_len) a->truncated++;
            n = longbench_truncate_middle(toks, n, max_len);
            for (int c = 0; c < nc; c++) {
                struct nx_ctx_params cp = lp->base ? *lp->base : nx_ctx_default_params();
                cp.n_ctx = n + max_new + 1;
                cp.n_threads = cp.n_threads_batch = lp->threads;
                cp.kv.policy = cfgs[c].policy;
                cp.kv.budget = 0;
                cp.kv.density = strcmp(cfgs[c].policy, "full") ? cfgs[c].density : 0;
                cp.kv.regime = cfgs[c].regime;
                nx_ctx *ctx = NULL;
                char *pred = NULL, err[256];
                if ((rc = nx_ctx_init(m, &cp, &ctx, err, sizeof err)) != NX_STATUS_OK)
                    fprintf(stderr, "eval-longbench: %s: %s\n", cfgs[c].policy, err);
                else if ((rc = eval_generate_greedy(m, ctx, toks, n, max_new, &pred)) ==
                         NX_STATUS_OK)
                    a->sum[c] += lb_score(r, pred);
                nx_ctx_free(ctx);
                if (!pred) {
                    nx_free(toks);
                    goto out;
                }
                nx_free(pred);
                nx_progress_update(&pg, ++done, r->dataset);
            }
            a->n++;
            nx_free(toks);
        }
    nx_progress_finish(&pg);
    printf("| policy | density | regime |");
    for (int d = 0; d < nds; d++)
        if (ds[d].n) printf(" %s (%s, n=%d) |", ds[d].name, lb_metric_name(ds[d].metric), ds[d].n);
    printf("\n|---|---|---|");
    for (int d = 0; d < nds; d++)
        if (ds[d].n) printf("---|");
    printf("\n");
    for (int c = 0; c < nc; c++) {
        if (!strcmp(cfgs[c].policy, "full"))
            printf("| full | 1.00 | - |");
        else
            printf("| %s | %.2f | %s |", cfgs[c].policy, cfgs[c].density,
                   eval_regime_name(cfgs[c].regime));
        for (int d = 0; d < nds; d++)
            if (ds[d].n) printf(" %.2f |", 100.0 * ds[d].sum[c] / ds[d].n);
        printf("\n");
    }
    for (int d = 0; d < nds; d++) {
        if (ds[d].truncated)
            printf("%s: %d of %d prompts middle-truncated\n", ds[d].name, ds[d].truncated, ds[d].n);
        if (ds[d].unsupported)
            printf("%s: %d records skipped (its metric needs jieba word segmentation, not "
                   "implemented)\n", ds[d].name, ds[d].unsupported);
    }
    fflush(stdout);
    if (lp->json_path) {
        struct nx_outfile o;
        char err[1200];
        if ((rc = nx_outfile_open(&o, lp->json_path, err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "eval-longbench: %s\n", err);
            goto out;
        }
        fprintf(o.f, "[\n");
        int first = 1;
        for (int d = 0; d < nds; d++)
            for (int c = 0; c < nc; c++) {
                fprintf(o.f, "%s  {\"dataset\":\"%s\",\"metric\":\"%s\",\"policy\":\"%s\","
                             "\"density\":%.4f,\"regime\":\"%s\",\"score\":",
                        first ? "" : ",\n", ds[d].name, lb_metric_name(ds[d].metric),
                        cfgs[c].policy, cfgs[c].density,
                        strcmp(cfgs[c].policy, "full") ? eval_regime_name(cfgs[c].regime) : "-");
                if (ds[d].n)
                    fprintf(o.f, "%.4f", 100.0 * ds[d].sum[c] / ds[d].n);
                else
                    fprintf(o.f, "null");
                fprintf(o.f, ",\"samples\":%d,\"truncated\":%d,\"unsupported\":%d}", ds[d].n,
                        ds[d].truncated, ds[d].unsupported);
                first = 0;
            }
        fprintf(o.f, "\n]\n");
        if ((rc = nx_outfile_commit(&o, err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "eval-longbench: %s\n", err);
            goto out;
        }
    }
    rc = NX_STATUS_OK;
out:
    for (int f = 0; f < nf; f++) lb_free(&sets[f]);
    for (int d = 0; d < nds; d++) nx_free(ds[d].sum);
    return rc;
}
