/*
 * toolpath.h - `nexus eval-toolpath`: the cost of the tool path (the paper's headline), four
 * arms over registries of N tools drawn from the real MCP servers' tool lists
 * (../shared/data/mcp) and BFCL functions, queries from BFCL simple (their question and their
 * function, which is always in the registry). This header is its specification.
 *
 * Arms (every arm forces the tool name and generates the arguments greedily under the tool's
 * full-schema grammar, so they differ only in what precedes the first argument token):
 *   all       H + the full schema block of every tool of the registry + "User: Q" + the call
 *             prefix, prefilled; the name is the query's true tool (an oracle choice);
 *   topk      H + the blocks of the router's top-k + user + prefix, prefilled; the name is the
 *             router's choice;
 *   splice    H prefilled, the top-k blocks (compiled once, alone, at m0 = 0) spliced one after
 *             the other at the running position with the default depth-adaptive repair, then
 *             user + prefix prefilled;
 *   nexus     route; the main prompt holds H' + the top-k signatures + user (main-context
 *             tokens); the arguments come from the sidecar (agent/sidecar.h: the chosen tool's
 *             block spliced at its anchor 0 in a second sequence + the window "User: Q").
 * A block is ag_sidecar_block_text(tool) ("Tool: / Description: / Parameters: SCHEMA").
 * Measures per query and arm: prompt tokens (for nexus the main prompt), whether they fit the
 * context limit (prompt + arg_tokens <= ctx_limit), the time to the first argument token
 * (TTFA: from the start of the arm's work to the pick of the first argument token, routing
 * included for topk, splice and nexus) cold (the sequence empty) and cached (the static part
 * of the prompt, which does not depend on the query, already in the sequence: all: H + every
 * block; topk and splice: H; nexus: the main prompt's H', which the sidecar does not need, so
 * nexus cached = nexus cold + nothing), the arguments' validity (a JSON object passing
 * ag_args_check against the schema), and for nexus the main prompt's own prefill time.
 * An arm whose prompt exceeds max_prompt tokens is not run (reported as such).
 * static_once: the all arm's static part (header + every schema, the same for every query of a
 * size) is prefilled once per size, timed, and held in a third sequence; each query's cached
 * TTFA is measured on a shared copy of it, and its cold TTFA is reported as that prefill's time
 * plus the cached TTFA (the same work as a cold run, whose cost at N = 250 is a 30K-token
 * prefill per query otherwise). Recorded in the JSON (static_prefill_ms per size).
 * reps: the two measurements that take well under a second and decide the cached ratio, the
 * all arm's cached TTFA (with static_once) and nexus's TTFA (cold, then cached: the same
 * work), are each taken reps times per query and the median kept (valid: every repeat valid),
 * so that one stall of a shared machine does not decide a pair; the long prefills run once.
 * Recorded in the JSON.
 * Output: a Markdown table per N on stdout (medians over queries), paired per-query ratios
 * (all / nexus TTFA cold and cached: geometric mean, min, max), JSON and an SVG (TTFA cold and
 * cached vs N per arm) when asked, both written atomically; each size's table, and the JSON and
 * SVG of the sizes done so far, as soon as that size is done; progress on stderr.
 */
#ifndef NX_EVAL_TOOLPATH_H
#define NX_EVAL_TOOLPATH_H

#include <stdbool.h>
#include <stdint.h>

#include "nexus.h"

enum { TOOLPATH_MAX_SIZES = 8, TOOLPATH_MAX_REPS = 64 };

struct toolpath_params {
    const char *model_path;      /* as recorded */
    const char *mcp_dir;         /* directory of MCP tools/list captures (*.json but SUMMARY.json) */
    const char *bfcl;            /* BFCL question file (JSON Lines) */
    int sizes[TOOLPATH_MAX_SIZES];
    int n_sizes;
    int queries;                 /* queries per size */
    int k;                       /* top-k */
    int arg_tokens;              /* argument token budget */
    int32_t ctx_limit;           /* the context "fits" is judged against */
    int32_t max_prompt;          /* longest prompt run */
    bool static_once;            /* the all arm's static prefill once per size (above) */
    int reps;                    /* repeats of the short measurements (below); default 1 */
    int threads;
    uint64_t seed;
    const char *json, *svg;      /* NULL: none */
};
struct toolpath_params toolpath_default_params(void);

/* Runs the evaluation on m. 0 on success; 1 with a message on stderr. */
int toolpath_run(const nx_model *m, const struct toolpath_params *p);

#endif
