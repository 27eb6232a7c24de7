/*
 * policy_h2o.c - "h2o": Heavy-Hitter Oracle (EVICTION.md §1.2).
 *
 * DESIGN
 * - Score: view->acc_attn, the cumulative attention each cached key received (summed over the
 *   query heads of its group and over every query row the engine computed; the engine keeps it
 *   and drops the entries of evicted tokens with them, so evicted tokens never come back). Not
 *   normalised by how many queries could see a key, as in the original; this biases towards
 *   early tokens, which is part of the baseline.
 * - Selection, per KV head independently: the first s = min(sink, n) and last
 *   r = min(recent, n - s) tokens + the top keep - s - r middle tokens by acc_attn (ties: lower
 *   index). The original has no sink protection (heavy + recent); our common convention adds
 *   it. Exactly min(keep, n) tokens per head when keep >= sink + recent.
 * - acc_attn == NULL (the engine did not accumulate): documented fallback to recency, i.e.
 *   sink + the newest keep - s tokens, rather than an error mid-stream.
 * - Scratch: n_head_kv * n_tokens doubles + n_tokens int64.
 */
#include "kv/kv_policy_impl.h"

static nx_status h2o_select(const struct kv_layer_view *view, int64_t keep,
                            const struct kv_policy_params *params, void *scratch,
                            struct kv_selection *out) {
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens;
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    const size_t cells = (size_t)view->n_head_kv * (size_t)n;
    double *score = kvp_take(&arena, cells * sizeof(double));
    if (!score) return NX_STATUS_INVALID_ARG;
    if (view->acc_attn) {
        for (size_t i = 0; i < cells; i++) score[i] = (double)view->acc_attn[i];
    } else {
        kvp_recency_scores(n, view->n_head_kv, score);
    }
    return kvp_select_scored(view, keep, params, score, false, NULL, &arena, out);
}

const struct kv_policy kv_policy_h2o = {
    .name = "h2o",
    .needs_acc_attn = true,
    .per_head = true,
    .block_granular = false,
    .select = h2o_select,
};
