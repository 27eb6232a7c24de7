/*
 * routing_run.h - the runner of `nexus eval-routing`: tool-routing accuracy on BFCL v4 (the
 * default; ../shared/data/bfcl) or on any registry with a query file.
 *
 * BFCL:
 *   queries: BFCL_v4_{live_multiple,multiple}; text = the user messages of the first turn;
 *   expected = the function names of possible_answer's ground_truth (any of them counts).
 *   Store: every function definition of every line (names repeat with reworded descriptions).
 *   Pool: the first definition of each distinct name over both files.
 *   Sweep at N tools: the query's own definition of the expected tool, then its own other
 *   candidates (seeded shuffle: real hard negatives), then distractors drawn (seeded) from the
 *   pool, never a name already present; the N tools are shuffled (seeded) so ties do not favour
 *   the answer. R@1, R@5 with Wilson 95% intervals.
 *   Pooled: each set against its own pool (all its distinct names, first definitions, sorted by
 *   name): R@1 / R@3 / R@5, the wrongly routed queries, and the margin gate: queries split by a
 *   seeded hash into calibration / test halves, tau = the gate_pct percentile of calibration
 *   margins, reported: fire rate and R@1 with and without firing on the test half.
 *   Abstention: relevant queries (both sets) and irrelevance queries
 *   (BFCL_v4_{live_irrelevance,irrelevance}) each routed within their own function list; split
 *   in halves the same way; threshold = rt_calibrate_abstain on the calibration tops; reported
 *   on the test half: abstention rate on irrelevance, false abstention on relevant.
 * Any registry: tools (files) + queries (JSONL, {"query", "tool"} per line), one embedder.
 *
 * The tables go to stdout, progress and messages to stderr; JSON and SVG are written atomically
 * (eval/outfile.h, eval/svg.h).
 */
#ifndef NX_EVAL_ROUTING_RUN_H
#define NX_EVAL_ROUTING_RUN_H

#include <stdint.h>

#include "nexus.h"

#define ROUTING_EVAL_MAX_FILES 64

struct routing_eval_params {
    const char *bfcl_dir;     /* BFCL data directory */
    const char *embedders[3]; /* "bm25", "dense", "hybrid" (route/router.h modes) */
    int n_emb;
    const char *embed_model; /* needed by dense and hybrid */
    int sizes[16], n_sizes;  /* registry sizes of the BFCL sweep */
    uint64_t seed;
    double gate_pct; /* [0, 100] */
    int rrf_depth;
    const char *json_path, *svg_path; /* NULL: not written */
    /* with n_tools > 0 (and queries): the registry evaluation instead of BFCL (n_emb == 1) */
    const char *tools[ROUTING_EVAL_MAX_FILES];
    int n_tools;
    const char *queries;
};

/* Runs the evaluation; NX_STATUS_OK, or INVALID_ARG (bad parameters: an embedder name, a missing
 * embed_model, tools without queries), FORMAT (a data file), NOMEM, IO, or the embedder's or
 * router's status, with a message on stderr. */
nx_status eval_routing_run(const struct routing_eval_params *p);

#endif
