/*
 * policy_snapkv.c - "snapkv": observation-window attention, pooled (EVICTION.md §1.3), and the
 * score helper kvp_snap_scores shared with pyramidkv and adakv.
 *
 * DESIGN
 * - Score (the kvpress convention): for each query head h and window row q, the causal softmax
 *   of q against all cached keys (keys at positions after q's position get 0); the MEAN over
 *   the window rows; 1-D pooling over the key axis (kernel pool_kernel, stride 1, same padding,
 *   max or avg; avg counts the zero padding, like torch's avg_pool1d) over the non-recent keys
 *   [0, n - r) only; then the MEAN over the G query heads of the group -> one score per
 *   (KV head, token).
 * - Selection, per KV head: sink + recent + the top keep - s - r middle tokens (ties: lower
 *   index). Exactly min(keep, n) per head when keep >= sink + recent.
 * - Differences from the original SnapKV: the original SUMS over window rows (a constant factor,
 *   same ranking unless pooling mixes rows - it does not, so the same ranking), expands K/V to
 *   the query heads and selects per query head (xG memory; we select per KV head, averaging the
 *   group after pooling as kvpress does), has no sink protection, and treats the window itself
 *   as the protected suffix. Here the window rows are the engine's last n_win queries and the
 *   protected suffix is `recent`; they need not coincide. Pooling over [0, n - r) mirrors the
 *   original pooling over the prefix outside the window.
 * - No window (n_win == 0): documented fallback to recency (sink + newest tokens).
 * - Scratch: n_head_kv * n_tokens + 3 * n_tokens doubles + n_tokens int64.
 */
#include <string.h>

#include "kv/kv_policy_impl.h"

nx_status kvp_snap_scores(const struct kv_layer_view *view, const struct kv_policy_params *params,
                          int64_t r, double *score, struct kvp_arena *arena) {
    const int64_t n = view->n_tokens, np = n - r;
    const int32_t group = view->n_head / view->n_head_kv;
    double *z = kvp_take(arena, (size_t)n * sizeof(double));
    double *acc = kvp_take(arena, (size_t)n * sizeof(double));
    double *pooled = kvp_take(arena, (size_t)n * sizeof(double));
    if (!z || !acc || !pooled) return NX_STATUS_INVALID_ARG;
    memset(score, 0, (size_t)view->n_head_kv * (size_t)n * sizeof(double));
    for (int32_t h = 0; h < view->n_head; h++) {
        double *sc = score + (size_t)(h / group) * (size_t)n;
        for (int64_t i = 0; i < np; i++) acc[i] = 0.0;
        for (int32_t row = 0; row < view->n_win; row++) {
            kvp_row_probs(view, h, row, n, z);
            for (int64_t i = 0; i < np; i++) acc[i] += z[i];
        }
        for (int64_t i = 0; i < np; i++) acc[i] /= (double)view->n_win;
        kvp_pool1d(acc, pooled, np, params->pool_kernel, params->pool_max);
        for (int64_t i = 0; i < np; i++) sc[i] += pooled[i];
    }
    for (size_t i = 0; i < (size_t)view->n_head_kv * (size_t)n; i++) score[i] /= (double)group;
    return NX_STATUS_OK;
}

static nx_status snapkv_select(const struct kv_layer_view *view, int64_t keep,
                               const struct kv_policy_params *params, void *scratch,
                               struct kv_selection *out) {
    nx_status st = kvp_check(view, keep, params, out);
    if (st != NX_STATUS_OK) return st;
    return kvp_snap_select(view, keep, params, scratch, out);
}

nx_status kvp_snap_select(const struct kv_layer_view *view, int64_t keep,
                          const struct kv_policy_params *params, void *scratch,
                          struct kv_selection *out) {
    nx_status st;
    const int64_t n = view->n_tokens;
    if (n <= keep) {
        kvp_keep_all(view, out);
        return NX_STATUS_OK;
    }
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    double *score = kvp_take(&arena, (size_t)view->n_head_kv * (size_t)n * sizeof(double));
    if (!score) return NX_STATUS_INVALID_ARG;
    st = kvp_snap_or_recency(view, params, score, &arena);
    if (st != NX_STATUS_OK) return st;
    return kvp_select_scored(view, keep, params, score, false, NULL, &arena, out);
}

nx_status kvp_snap_or_recency(const struct kv_layer_view *view,
                              const struct kv_policy_params *params, double *score,
                              struct kvp_arena *arena) {
    int64_t s, r;
    kvp_protected(view->n_tokens, params, &s, &r);
    if (!kvp_has_window(view)) {
        kvp_recency_scores(view->n_tokens, view->n_head_kv, score);
        return NX_STATUS_OK;
    }
    return kvp_snap_scores(view, params, r, score, arena);
}

const struct kv_policy kv_policy_snapkv = {
    .name = "snapkv",
    .needs_acc_attn = false,
    .per_head = true,
    .block_granular = false,
    .select = snapkv_select,
};
