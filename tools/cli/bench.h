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
/* Runs the benchmark on a fresh context sized for depth + max(n_prompt, n_gen). */
int bench_run(nx_model *m, nx_ctx *c, int n_threads, const struct bench_params *p);
#endif
