/*
 * ruler_run.c - the runner of `nexus eval-ruler`.
 *
 * DESIGN: every (task, sample) prompt is generated once (seed + sample index) with the model's
 * tokenizer so that prompt + generation fits the target length, then every configuration (policy
 * x density x regime; "full" once, as the dense reference) gets a fresh context, decodes the
 * prompt in one call (compressed at its end, or in chunks when longer than the budget allows)
 * and generates greedily up to the task's length or an end-of-generation token. The score is
 * RULER's string_match_all x 100, averaged over samples. Deterministic for a seed.
 */
#include "eval/ruler_run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "eval/eval.h"
#include "eval/outfile.h"
#include "eval/progress.h"
#include "eval/ruler.h"

enum { MAX_CFG = 512 };

struct ruler_params ruler_default_params(void) {
    struct ruler_params p = {.tasks = "all",
                             .policies = "full,streaming,h2o,snapkv,pyramidkv,adakv,morphkv,tova,nexus",
                             .densities = "0.2", .regimes = "prefill", .length = 4096,
                             .samples = 4, .max_new = 0, .threads = 2, .seed = 1};
    return p;
}


static int32_t count_tokens(void *user, const char *text, size_t len) {
    const nx_model *m = user;
    int32_t n = nx_tokenize(m, text, len, NULL, 0, false, false);
    if (n == INT32_MIN) return -1;
    if (n < 0) n = -n;
    return n + (nx_token_bos(m) >= 0 ? 1 : 0);
}

nx_status eval_ruler_run(const nx_model *m, const struct ruler_params *rp) {
    const char *task_list = rp->tasks ? rp->tasks : "all";
    char tbuf[512];
    char *titems[RULER_N_TASKS + 1];
    int tasks[RULER_N_TASKS], nt = 0;
    if (!strcmp(task_list, "all")) {
        for (int t = 0; t < RULER_N_TASKS; t++) tasks[nt++] = t;
    } else {
        int n = eval_split_list(task_list, tbuf, sizeof tbuf, titems, RULER_N_TASKS + 1,
                                "eval-ruler", "tasks");
        if (n < 0) return NX_STATUS_INVALID_ARG;
        for (int i = 0; i < n; i++) {
            int t = ruler_task_from_name(titems[i]);
            if (t < 0) {
                fprintf(stderr, "eval-ruler: unknown task '%s' (", titems[i]);
                for (int k = 0; k < RULER_N_TASKS; k++)
                    fprintf(stderr, "%s%s", k ? ", " : "", ruler_task_name(k));
                fprintf(stderr, ")\n");
                return NX_STATUS_INVALID_ARG;
            }
            if (nt < RULER_N_TASKS) tasks[nt++] = t;
        }
        if (nt == 0) {
            fprintf(stderr, "eval-ruler: empty --tasks\n");
            return NX_STATUS_INVALID_ARG;
        }
    }
    if (rp->samples < 1 || rp->length < 16 || rp->max_new < 0) {
        fprintf(stderr, "eval-ruler: need --samples >= 1, --length >= 16, --max-new >= 0\n");
        return NX_STATUS_INVALID_ARG;
    }
    struct eval_sweep sw;
    struct eval_sweep_cfg cfgs[MAX_CFG];
    int nc = eval_sweep_parse(rp->policies, rp->densities, rp->regimes, "eval-ruler", &sw, cfgs,
                              MAX_CFG);
    if (nc < 0) return NX_STATUS_INVALID_ARG;
    double *score = nx_calloc((size_t)(nc * nt), sizeof *score);
    double *ptoks = nx_calloc((size_t)nt, sizeof *ptoks);
    if (!score || !ptoks) {
        nx_free(score);
        nx_free(ptoks);
        fprintf(stderr, "eval-ruler: out of memory\n");
        return NX_STATUS_NOMEM;
    }
    nx_status rc = NX_STATUS_OK;
    struct nx_progress pg;
    nx_progress_start(&pg, stderr, "generations", nt * rp->samples * nc);
    int done = 0;
    char skipped[RULER_N_TASKS][512];
    memset(skipped, 0, sizeof skipped);
    for (int ti = 0; ti < nt; ti++)
        for (int s = 0; s < rp->samples; s++) {
            struct ruler_sample smp;
            char err[512];
            nx_status g = ruler_generate(tasks[ti], rp->length, rp->max_new, rp->seed + (uint64_t)s,
                                   count_tokens, (void *)m, &smp, err, sizeof err);
            if (g == NX_STATUS_UNSUPPORTED) { /* does not fit: the task is skipped and listed */
                snprintf(skipped[ti], sizeof skipped[ti], "%s", err);
                done += (rp->samples - s) * nc;
                nx_progress_update(&pg, done, ruler_task_name(tasks[ti]));
                break;
            }
            if (g) {
                fprintf(stderr, "eval-ruler: %s\n", err);
                rc = g;
                goto out;
            }
            int32_t n = 0;
            nx_token *toks = eval_tokenize(m, smp.prompt, strlen(smp.prompt), 1, &n);
            if (!toks) {
                fprintf(stderr, "eval-ruler: cannot tokenize the %s prompt\n",
                        ruler_task_name(tasks[ti]));
                ruler_sample_free(&smp);
                rc = NX_STATUS_NOMEM;
                goto out;
            }
            ptoks[ti] += n;
            for (int c = 0; c < nc; c++) {
                struct nx_ctx_params cp = rp->base ? *rp->base : nx_ctx_default_params();
                cp.n_ctx = n + smp.max_new + 1;
                cp.n_threads = cp.n_threads_batch = rp->threads;
                cp.kv.policy = cfgs[c].policy;
                cp.kv.budget = 0;
                cp.kv.density = strcmp(cfgs[c].policy, "full") ? cfgs[c].density : 0;
                cp.kv.regime = cfgs[c].regime;
                nx_ctx *ctx = NULL;
                char *pred = NULL;
                if ((rc = nx_ctx_init(m, &cp, &ctx, err, sizeof err)) != NX_STATUS_OK) {
                    fprintf(stderr, "eval-ruler: %s: %s\n", cfgs[c].policy, err);
                } else if ((rc = eval_generate_greedy(m, ctx, toks, n, smp.max_new, &pred)) ==
                           NX_STATUS_OK) {
                    score[c * nt + ti] += 100.0 * ruler_score_all(pred, smp.answers, smp.n_answers);
                }
                nx_ctx_free(ctx);
                if (!pred) {
                    nx_free(toks);
                    ruler_sample_free(&smp);
                    goto out;
                }
                nx_free(pred);
                char label[96];
                snprintf(label, sizeof label, "%s %s", ruler_task_name(tasks[ti]), cfgs[c].policy);
                nx_progress_update(&pg, ++done, label);
            }
            nx_free(toks);
            ruler_sample_free(&smp);
        }
    nx_progress_finish(&pg);
    for (int i = 0; i < nc * nt; i++) score[i] /= rp->samples;
    printf("RULER-style tasks, target %d tokens (prompt + generation), %d samples per task, "
           "string_match_all x 100\n| policy | density | regime |", rp->length, rp->samples);
    for (int ti = 0; ti < nt; ti++) printf(" %s |", ruler_task_name(tasks[ti]));
    printf(" mean |\n|---|---|---|");
    for (int ti = 0; ti <= nt; ti++) printf("---|");
    printf("\n");
    for (int c = 0; c < nc; c++) {
        int full = !strcmp(cfgs[c].policy, "full");
        if (full)
            printf("| full | 1.00 | - |");
        else
            printf("| %s | %.2f | %s |", cfgs[c].policy, cfgs[c].density,
                   eval_regime_name(cfgs[c].regime));
        double mean = 0;
        int nm = 0;
        for (int ti = 0; ti < nt; ti++) {
            if (skipped[ti][0]) {
                printf(" - |");
                continue;
            }
            printf(" %.1f |", score[c * nt + ti]);
            mean += score[c * nt + ti];
            nm++;
        }
        printf(" %.1f |\n", nm ? mean / nm : 0.0);
    }
    printf("mean prompt tokens:");
    for (int ti = 0; ti < nt; ti++) printf(" %s %.0f;", ruler_task_name(tasks[ti]), ptoks[ti] / rp->samples);
    for (int ti = 0; ti < nt; ti++)
        if (skipped[ti][0]) printf("\nskipped: %s", skipped[ti]);
    printf("\nleft out (need corpora we do not have):\n");
    for (int i = 0; i < ruler_n_left_out; i++) printf("  %s\n", ruler_left_out[i]);
    fflush(stdout);
    if (rp->json_path) {
        struct nx_outfile o;
        char err[1200];
        if ((rc = nx_outfile_open(&o, rp->json_path, err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "eval-ruler: %s\n", err);
            goto out;
        }
        fprintf(o.f, "{\"length\":%d,\"samples\":%d,\"seed\":%llu,\"metric\":\"string_match_all\","
                     "\"left_out\":[", rp->length, rp->samples, (unsigned long long)rp->seed);
        for (int i = 0; i < ruler_n_left_out; i++)
            fprintf(o.f, "%s\"%s\"", i ? "," : "", ruler_left_out[i]);
        fprintf(o.f, "],\n\"skipped\":[");
        for (int ti = 0, k = 0; ti < nt; ti++)
            if (skipped[ti][0]) fprintf(o.f, "%s\"%s\"", k++ ? "," : "", ruler_task_name(tasks[ti]));
        fprintf(o.f, "],\n\"results\":[\n");
        int first = 1;
        for (int c = 0; c < nc; c++)
            for (int ti = 0; ti < nt; ti++) {
                if (skipped[ti][0]) continue;
                fprintf(o.f, "%s  {\"task\":\"%s\",\"policy\":\"%s\",\"density\":%.4f,"
                             "\"regime\":\"%s\",\"score\":%.4f,\"prompt_tokens\":%.1f}",
                        first ? "" : ",\n", ruler_task_name(tasks[ti]), cfgs[c].policy,
                        cfgs[c].density,
                        strcmp(cfgs[c].policy, "full") ? eval_regime_name(cfgs[c].regime) : "-",
                        score[c * nt + ti], ptoks[ti] / rp->samples);
                first = 0;
            }
        fprintf(o.f, "\n");
        fprintf(o.f, "]}\n");
        if ((rc = nx_outfile_commit(&o, err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "eval-ruler: %s\n", err);
            goto out;
        }
    }
    rc = NX_STATUS_OK;
out:
    nx_free(score);
    nx_free(ptoks);
    return rc;
}
