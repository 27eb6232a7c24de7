/* bench.h - `nexus bench`: prefill and decode speed at a context depth, against the roofline. */
#ifndef NX_BENCH_H
#define NX_BENCH_H
#include <stdbool.h>
#include "nexus.h"

struct bench_params {
    int n_prompt; /* tokens per prefill measurement (0 = skip) */
    int n_gen;    /* tokens per decode measurement (0 = skip) */
    int depth;    /* tokens already in the context before each measurement */
    int reps;     /* repetitions; medians are reported with min and max */
    bool json;    /* one JSON object on stdout instead of a table */
    bool measure_bandwidth;
};
struct bench_params bench_default_params(void);

/*
 * `nexus bench --parallel N[,N...]`: for each N, a context of N sequences (base's settings,
 * n_seq_max = N, n_ctx = depth + n_prompt + n_gen + 1), each prefilled with depth + n_prompt
 * tokens (batches of up to n_batch entries, timed: aggregate prefill t/s), then n_gen steps of
 * one batch holding one token of every sequence (continuous batching: aggregate and
 * per-sequence decode t/s). policies (may be NULL): a comma list of POLICY[:DENSITY] given to
 * the sequences in turn (nx_seq_set_kv). Reports KV bytes per sequence and peak RSS; --json
 * prints one JSON object per N.
 */
int bench_parallel(nx_model *m, const struct nx_ctx_params *base, const struct bench_params *p,
                   const int *ns, int n_ns, const char *policies);
/* Runs the benchmark on a fresh context sized for depth + max(n_prompt, n_gen). */
int bench_run(nx_model *m, nx_ctx *c, int n_threads, const struct bench_params *p);
#endif
