/*
 * policy_bounds.c - "random" and "bottomk", the floors every eviction policy is measured
 * against, and "oracle", the ceiling (issue 15: each table shows a policy between them).
 *
 * DESIGN
 * - Both are token-granular with a uniform budget: sink + recent + keep - s - r middle tokens
 *   per KV head (exactly min(keep, n)), like snapkv.
 * - random: a uniform random subset of the middle tokens, shared by every head. Token i's key
 *   is kvp_u01(kvp_rng_bits(seed, layer, pos[i], 0, 1 + eviction_index)): a fresh, seeded draw
 *   at every eviction, independent of scores, threads and cache order.
 * - bottomk: the middle tokens of LOWEST SnapKV score (window attention, pooled, group mean;
 *   per KV head): what an attention-based policy would evict first, so it bounds from below
 *   what the attention signal is worth. No window: the oldest middle tokens (the inverse of
 *   recency).
 * - oracle: the window rows are taken as the FUTURE queries (the harness decodes the whole
 *   teacher-forced sequence as one prompt with the window set to the queries after the prompt,
 *   then removes those positions and decodes them again from the compressed cache: teacher
 *   forcing knows the future). Tokens at or after the oldest window row's position are the
 *   future region and always kept (the harness removes them); of the past tokens it keeps the
 *   sink, the `recent` newest past tokens and those with the most attention from the window
 *   rows (mean over the group's query heads and the rows of the causal softmax, no pooling),
 *   per KV head, keep - (future tokens) in all. Outside that harness it is a SnapKV without
 *   pooling that protects the window's own tokens. No window: recency.
 * - Scratch: as snapkv (n_head_kv * n_tokens + 3 * n_tokens doubles + n_tokens int64).
 */
#include <math.h>
#include <string.h>

#include "kv/kv_policy_impl.h"

static nx_status random_select(const struct kv_layer_view *view, int64_t keep,
                               const struct kv_policy_params *params, void *scratch,
                               struct kv_selection *out) {
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens;
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    double *score = kvp_take(&arena, (size_t)n * sizeof(double));
    if (!score) return NX_STATUS_INVALID_ARG;
    for (int64_t i = 0; i < n; i++)
        score[i] = kvp_u01(kvp_rng_bits(params->seed, (uint64_t)view->layer,
                                        (uint64_t)(int64_t)view->pos[i], 0,
                                        params->eviction_index + 1));
    return kvp_select_scored(view, keep, params, score, true, NULL, &arena, out);
}

static nx_status bottomk_select(const struct kv_layer_view *view, int64_t keep,
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
    st = kvp_snap_or_recency(view, params, score, &arena);
    if (st != NX_STATUS_OK) return st;
    for (size_t i = 0; i < cells; i++) score[i] = -score[i];
    return kvp_select_scored(view, keep, params, score, false, NULL, &arena, out);
}

static nx_status oracle_select(const struct kv_layer_view *view, int64_t keep,
                               const struct kv_policy_params *params, void *scratch,
                               struct kv_selection *out) {
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens;
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    double *score = kvp_take(&arena, (size_t)n * sizeof(double));
    double *z = kvp_take(&arena, (size_t)n * sizeof(double));
    int64_t *idx = kvp_take(&arena, (size_t)n * sizeof(int64_t));
    if (!score || !z || !idx) return NX_STATUS_INVALID_ARG;
    if (!kvp_has_window(view)) {
        return kvp_snap_select(view, keep, params, scratch, out);
    }
    int64_t past = 0; /* tokens before the oldest window row: the candidates */
    while (past < n && view->pos[past] < view->win_pos[0]) past++;
    const int64_t keep_past = NX_MAX(0, keep - (n - past));
    const int32_t group = view->n_head / view->n_head_kv;
    for (int32_t g = 0; g < view->n_head_kv; g++) {
        for (int64_t i = 0; i < past; i++) score[i] = 0.0;
        for (int32_t h = g * group; h < (g + 1) * group; h++)
            for (int32_t row = 0; row < view->n_win; row++) {
                kvp_row_probs(view, h, row, n, z);
                for (int64_t i = 0; i < past; i++) score[i] += z[i];
            }
        uint8_t *row = out->keep + (size_t)g * (size_t)n;
        int64_t s, r;
        kvp_protected(past, params, &s, &r);
        kvp_finish_row(past, s, r, keep_past - s - r, score, idx, row);
        memset(row + past, 1, (size_t)(n - past));
    }
    return NX_STATUS_OK;
}

const struct kv_policy kv_policy_random = {
    .name = "random",
    .needs_acc_attn = false,
    .per_head = false,
    .block_granular = false,
    .select = random_select,
};

const struct kv_policy kv_policy_bottomk = {
    .name = "bottomk",
    .needs_acc_attn = false,
    .per_head = true,
    .block_granular = false,
    .select = bottomk_select,
};

const struct kv_policy kv_policy_oracle = {
    .name = "oracle",
    .needs_acc_attn = false,
    .per_head = true,
    .block_granular = false,
    .select = oracle_select,
};
