/* longbench_run.h - the runner of `nexus eval-longbench`: LongBench-format jsonl files (the user brings the
 * data), greedy generation under each policy x density x regime, LongBench's per-dataset
 * metrics (src/eval/longbench.h). */
#ifndef NX_EVAL_LONGBENCH_CLI_H
#define NX_EVAL_LONGBENCH_CLI_H
#include <stdint.h>
#include "nexus.h"

struct longbench_params {
    const char *data;      /* comma-separated jsonl files */
    const char *policies, *densities, *regimes;
    int max_len;           /* prompt tokens kept (middle truncated); 0: the model's trained
                              context minus the generation length */
    int max_new;           /* tokens to generate; 0: LongBench's per-dataset length */
    int limit;             /* records per file (0: all) */
    const char *tmpl;      /* prompt template with {context} and {input}; NULL: context, a blank
                              line, input, newline */
    int threads;
    const char *json_path;
    const struct nx_ctx_params *base;
};
struct longbench_params longbench_default_params(void);
/* Keeps the first max/2 and the last max - max/2 of n tokens (in place); returns the new count. */
int32_t longbench_truncate_middle(nx_token *toks, int32_t n, int32_t max);
/* Builds the prompt text (nx_free) from the template. */
char *longbench_prompt(const char *tmpl, const char *context, const char *input);
/* Runs every file x configuration, prints the table; NX_STATUS_OK, or the failing step's status
 * (INVALID_ARG for bad parameters, the loader's, NOMEM, ...) with a message on stderr. */
nx_status eval_longbench_run(const nx_model *m, const struct longbench_params *p);
#endif
