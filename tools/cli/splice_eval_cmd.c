/*
 * splice_eval_cmd.c - `nexus splice-eval`: flags to src/eval/splice_run.h's parameters.
 *
 *   nexus splice-eval -m MODEL [--depths 0,64,256,512,1024,2048] [--block 64] [--query 32]
 *                     [--streams 4] [--reps 3] [--seed S] [-t N] [--f32]
 *                     [--repair-p 256] [--repair-base 5] [--repair-k 4]
 *                     [--json OUT] [--svg FILE]
 *   nexus splice-eval -m MODEL --seqcache [--requests 64] [--sys-len 256] [--tail 32]
 *                     [-t N] [--json OUT]
 */
#include <stdio.h>

#include "args.h"
#include "eval/splice_run.h"
#include "kv_cmd.h"
#include "nexus.h"

static int se_fail(const char *msg, const char *arg) {
    fprintf(stderr, "nexus splice-eval: %s%s\n", msg, arg ? arg : "");
    return 1;
}

int splice_eval_main(int argc, char **argv) {
    struct splice_eval_params p = {.block = 64, .query = 32, .streams = 4, .reps = 3,
                                   .threads = 2, .seed = 1};
    p.splice = nx_splice_default_params();
    const char *depths_s = "0,64,256,512,1024,2048";
    bool seqcache = false;
    long requests = 64, sys_len = 256, tail = 32;
    const struct arg tab[] = {
        A_STR("-m", "--model", &p.model_path),
        A_STR("--depths", NULL, &depths_s),
        A_STR("--json", NULL, &p.json),
        A_STR("--svg", NULL, &p.svg),
        A_LONG("--block", NULL, &p.block, 1, 1 << 16),
        A_LONG("--query", NULL, &p.query, 1, 1 << 16),
        A_LONG("--streams", NULL, &p.streams, 1, 1000),
        A_LONG("--reps", NULL, &p.reps, 1, 100),
        A_LONG("-t", "--threads", &p.threads, 1, 512),
        A_U64("--seed", NULL, &p.seed, 0, 1LL << 62),
        A_I32("--repair-p", NULL, &p.splice.repair_p, 1, 1 << 24),
        A_FLOAT("--repair-base", NULL, &p.splice.repair_base),
        A_FLOAT("--repair-k", NULL, &p.splice.repair_k),
        A_LONG("--requests", NULL, &requests, 1, 1 << 20),
        A_LONG("--sys-len", NULL, &sys_len, 1, 1 << 20),
        A_LONG("--tail", NULL, &tail, 1, 1 << 20),
        A_FLAG("--seqcache", NULL, &seqcache),
        A_FLAG("--f32", NULL, &p.f32),
        A_END,
    };
    const struct arg *tabs[] = {tab, NULL};
    if (args_parse(tabs, argc, argv, 1, "nexus splice-eval", false, NULL, 0, NULL) != ARGS_OK) return 1;
    if (!(p.splice.repair_base >= 0 && p.splice.repair_base <= 100))
        return se_fail("--repair-base: expected a number in [0, 100]", NULL);
    if (!(p.splice.repair_k >= 1)) return se_fail("--repair-k: expected a number >= 1", NULL);
    if (!p.model_path) return se_fail("no model (-m MODEL)", NULL);
    int dl[SPLICE_EVAL_MAX_DEPTHS];
    p.n_depths = args_int_list(depths_s, 0, 1 << 22, dl, SPLICE_EVAL_MAX_DEPTHS);
    if (p.n_depths < 0)
        return se_fail("--depths: expected up to 16 comma-separated integers >= 0: ", depths_s);
    for (int i = 0; i < p.n_depths; i++) p.depths[i] = dl[i];
    char err[512];
    nx_model *m = NULL;
    if (nx_model_load(p.model_path, NULL, &m, err, sizeof err)) return se_fail(err, NULL);
    nx_status st = seqcache
                       ? splice_eval_seqcache(m, requests, sys_len, tail, p.threads, p.seed, p.json)
                       : splice_eval_run(m, &p);
    int rc = cli_exit_status(st);
    nx_model_free(m);
    return rc;
}
