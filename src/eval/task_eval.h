/*
 * task_eval.h - the runner of `nexus task-eval`: exact-match accuracy of token-id retrieval
 * tasks (as written by scripts/train/evaluate.py --write-tasks) under KV-eviction policy specs
 * (eval_policy_spec), paired against a reference spec on the same instances (the protocol is
 * in task_eval.c).
 */
#ifndef NX_EVAL_TASK_EVAL_H
#define NX_EVAL_TASK_EVAL_H

#include <stdint.h>

#include "nexus.h"

struct task_eval_params {
    const char *tasks;           /* JSON lines file */
    const char *const *policies; /* "full" runs once, dense */
    int n_policies;
    const double *densities;          /* each in (0, 1] */
    const char *const *density_names; /* as printed in the table (the user's spelling) */
    int n_densities;
    const int *regimes;          /* NX_KV_REGIME_PREFILL / _STREAM (task_eval.c: the protocol);
                                    NULL or n_regimes 0: prefill only */
    int n_regimes;               /* 0..2 */
    const char *reference;       /* the spec every accuracy is paired against (one of the
                                    policies); NULL: "full" */
    int seeds;                   /* eviction seeds for seed-dependent specs (0: 1), <= 64 */
    int threads;                 /* instances run at once in worker processes, 1..64 */
    uint64_t seed;
    const char *json_path; /* NULL: no JSON */
    const char *svg_path;  /* NULL: no plot; else accuracy against density, a panel per regime */
};

/* Prints the Markdown table; NX_STATUS_OK, or INVALID_ARG (bad parameters: a spec, density,
 * reference), IO / FORMAT (the tasks file), NOMEM, ABORTED (an instance failed), IO (the JSON
 * file), with a message on stderr. */
nx_status task_eval_run(const nx_model *m, const struct task_eval_params *p);

#endif
