/*
 * splice_run.h - the runners of `nexus splice-eval` (src/eval/splice_run.c has the method).
 *
 * splice_eval_run: for each depth d, streams sampled by the model give a history S[0, d), a
 * block S[d, d + block) compiled alone at m0 = 0, and a query; the block and query prefilled
 * (the reference) against the block spliced at d, without and with depth-adaptive repair: KL
 * and top-1 agreement of the query's next-token distributions, and the time to the first
 * token. Depths beyond the model's trained context are skipped (a note on stderr).
 * splice_eval_seqcache: the sequence cache on a mix of 4 fixed system prompts with random
 * tails: hit rate, reuse, lookup time and time to first token, against a cold prefill.
 *
 * Both print a Markdown table on stdout, progress on stderr, and write the JSON (and SVG) when
 * asked (atomically); NX_STATUS_OK, or the failing step's status (INVALID_ARG: no depth fits,
 * NOMEM, the engine's, IO) with a message on stderr.
 */
#ifndef NX_EVAL_SPLICE_RUN_H
#define NX_EVAL_SPLICE_RUN_H

#include <stdbool.h>
#include <stdint.h>

#include "nexus.h"

enum { SPLICE_EVAL_MAX_DEPTHS = 16 };

struct splice_eval_params {
    const char *model_path;  /* as recorded in the JSON */
    int32_t depths[SPLICE_EVAL_MAX_DEPTHS];
    int n_depths;
    long block, query, streams, reps, threads;
    uint64_t seed;
    bool f32;                /* F32 KV instead of F16 */
    struct nx_splice_params splice; /* repair_p / repair_base / repair_k */
    const char *json, *svg;  /* NULL: none */
};

nx_status splice_eval_run(const nx_model *m, const struct splice_eval_params *p);
nx_status splice_eval_seqcache(const nx_model *m, long requests, long sys_len, long tail,
                               long threads, uint64_t seed, const char *json);

#endif
