/* ruler_run.h - the runner of `nexus eval-ruler`: RULER-style synthetic tasks generated with the model's
 * own tokenizer at a target length, greedy generation under each policy x density x regime,
 * string-match scores (src/eval/ruler.h). */
#ifndef NX_EVAL_RULER_CLI_H
#define NX_EVAL_RULER_CLI_H
#include <stdint.h>
#include "nexus.h"

struct ruler_params {
    const char *tasks;     /* comma-separated task names, or "all" */
    const char *policies;  /* comma-separated; "full" runs once (dense reference) */
    const char *densities; /* comma-separated, in (0, 1] */
    const char *regimes;   /* prefill, stream or both */
    int length;            /* target tokens: prompt + generation */
    int samples;           /* samples per task */
    int max_new;           /* tokens to generate; 0: RULER's per-task default */
    int threads;
    uint64_t seed;
    const char *json_path; /* NULL: none */
    const struct nx_ctx_params *base;
};
struct ruler_params ruler_default_params(void);
/* Prints the table (and the tasks left out); NX_STATUS_OK, or the failing step's status
 * (INVALID_ARG for bad parameters, NOMEM, the engine's, IO) with a message on stderr. */
nx_status eval_ruler_run(const nx_model *m, const struct ruler_params *p);
#endif
