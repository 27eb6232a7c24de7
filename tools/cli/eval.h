/* eval.h - `nexus eval`: teacher-forced fidelity of KV policies against the dense model. */
#ifndef NX_EVAL_H
#define NX_EVAL_H
#include <stdint.h>
#include "nexus.h"

struct eval_params {
    const char *policies;  /* comma-separated */
    const char *densities; /* comma-separated, each in (0, 1] */
    const char *regimes;   /* "prefill", "stream" or both, comma-separated */
    int streams;           /* sampled streams */
    int stream_len;        /* tokens per stream (first half is the prompt) */
    int recall_blocks;     /* long-range recall: last occurrence at least this many blocks back */
    int threads;
    uint64_t seed;
    const char *json_path; /* NULL: no JSON */
    const struct nx_ctx_params *base; /* block, sink, recent, window, nexus knobs, KV type;
                                         NULL: defaults. Policy, density and regime are set per
                                         configuration. */
};
/* Runs every configuration; prints a Markdown table; 0 on success. */
int eval_run(const nx_model *m, const struct eval_params *p);
#endif
