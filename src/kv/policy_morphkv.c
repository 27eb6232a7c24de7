/*
 * policy_morphkv.c - "morphkv": MorphKV's correlation-aware selection (EVICTION.md §1.6).
 *
 * DESIGN
 * - Score per KV head g: for each window row q, the logits q_h.k_i / sqrt(d) of the G query
 *   heads of the group are SUMMED (before any softmax), then one softmax over the OLDER keys
 *   only: cache indices [0, n - r), r = min(recent, n - s) (MorphKV restricts to everything
 *   except its window; here the protected suffix plays that role). Keys after the row's
 *   position are masked (causal). The rows are aggregated by sum (default, MorphKV's
 *   sum_fused, the README recipe) or max (params->morph_max, max_fused).
 * - Selection per KV head: sink + recent + the top keep - s - r older, non-sink tokens (ties:
 *   lower index). MorphKV has no sink protection (sinks survive on their scores); our
 *   convention adds it. MorphKV keeps W + 1 newest tokens; we keep `recent`.
 * - MorphKV stores the window's logit rows and drops evicted columns from them; here the
 *   engine's window queries are re-scored against the current keys, which is the same thing for
 *   the kept keys.
 * - No window: recency fallback (sink + newest).
 * - Scratch: n_head_kv * n_tokens + 2 * n_tokens doubles + n_tokens int64.
 */
#include <math.h>

#include "kv/kv_policy_impl.h"

static nx_status morphkv_select(const struct kv_layer_view *view, int64_t keep,
                                const struct kv_policy_params *params, void *scratch,
                                struct kv_selection *out) {
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens;
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    const int32_t hkv = view->n_head_kv, group = view->n_head / hkv;
    double *score = kvp_take(&arena, (size_t)hkv * (size_t)n * sizeof(double));
    double *z = kvp_take(&arena, (size_t)n * sizeof(double));
    double *zsum = kvp_take(&arena, (size_t)n * sizeof(double));
    if (!score || !z || !zsum) return NX_STATUS_INVALID_ARG;
    int64_t s, r;
    kvp_protected(n, params, &s, &r);
    const int64_t old = n - r;
    if (kvp_has_window(view)) {
        const double init = params->morph_max ? -INFINITY : 0.0;
        for (size_t i = 0; i < (size_t)hkv * (size_t)n; i++) score[i] = init;
        for (int32_t g = 0; g < hkv; g++) {
            double *sc = score + (size_t)g * (size_t)n;
            for (int32_t row = 0; row < view->n_win; row++) {
                for (int64_t i = 0; i < old; i++) zsum[i] = 0.0;
                for (int32_t j = 0; j < group; j++) {
                    kvp_row_logits(view, g * group + j, row, old, z);
                    for (int64_t i = 0; i < old; i++) zsum[i] += z[i];
                }
                kvp_softmax(zsum, old);
                for (int64_t i = 0; i < old; i++) {
                    if (params->morph_max) sc[i] = zsum[i] > sc[i] ? zsum[i] : sc[i];
                    else sc[i] += zsum[i];
                }
            }
        }
    } else {
        kvp_recency_scores(n, hkv, score);
    }
    return kvp_select_scored(view, keep, params, score, false, NULL, &arena, out);
}

const struct kv_policy kv_policy_morphkv = {
    .name = "morphkv",
    .needs_acc_attn = false,
    .per_head = true,
    .block_granular = false,
    .select = morphkv_select,
};
