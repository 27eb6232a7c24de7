/*
 * policy_tova.c - "tova": Token Omission Via Attention (EVICTION.md §1.7).
 *
 * DESIGN
 * - Score: the LAST window row only (the newest query), its causal softmax over all cached
 *   keys per query head, averaged over ALL n_head query heads -> one score per token, one
 *   selection shared by every KV head (per_head = false).
 * - Selection: sink + recent + the top keep - s - r middle tokens (ties: lower index). The
 *   original TOVA has no sink or recent protection (it keeps the top cache_size of everything);
 *   our common budget convention adds it, so TOVA here can only differ from the original in the
 *   protected tokens.
 * - No window: recency fallback (sink + newest).
 * - Scratch: 2 * n_tokens doubles + n_tokens int64.
 */
#include "kv/kv_policy_impl.h"

static nx_status tova_select(const struct kv_layer_view *view, int64_t keep,
                             const struct kv_policy_params *params, void *scratch,
                             struct kv_selection *out) {
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens;
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    double *score = kvp_take(&arena, (size_t)n * sizeof(double));
    double *z = kvp_take(&arena, (size_t)n * sizeof(double));
    if (!score || !z) return NX_STATUS_INVALID_ARG;
    if (kvp_has_window(view)) {
        for (int64_t i = 0; i < n; i++) score[i] = 0.0;
        for (int32_t h = 0; h < view->n_head; h++) {
            kvp_row_probs(view, h, view->n_win - 1, n, z);
            for (int64_t i = 0; i < n; i++) score[i] += z[i];
        }
        for (int64_t i = 0; i < n; i++) score[i] /= (double)view->n_head;
    } else {
        kvp_recency_scores(n, 1, score);
    }
    return kvp_select_scored(view, keep, params, score, true, NULL, &arena, out);
}

const struct kv_policy kv_policy_tova = {
    .name = "tova",
    .needs_acc_attn = false,
    .per_head = false,
    .block_granular = false,
    .select = tova_select,
};
