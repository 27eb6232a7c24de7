/*
 * policy_adakv.c - "adakv": Ada-KV head-adaptive allocation over SnapKV scores
 * (EVICTION.md §1.5, Ada-SnapKV).
 *
 * DESIGN
 * - Scores: kvp_snap_scores (per KV head: window mean, pooling, group mean after pooling). The
 *   original reduces the GQA group BEFORE pooling; with avg pooling both orders are the same,
 *   with max pooling they differ slightly. We reuse the snapkv scores so that adakv differs
 *   from snapkv only by the allocation.
 * - Allocation in the layer: B = keep - s - r middle tokens per head (s, r: protected sink and
 *   recent counts), m = n - s - r middle tokens per head. Take the global top H * B of all the
 *   heads' middle scores (ties: lower head, then lower index), count c_h per head, and set
 *   cap_h = round(c_h * (1 - alpha) + floor(alpha * B)) (round half away from zero), clamped to
 *   [0, m]. The exact values sum to at most H * B; if rounding pushes the sum above H * B, caps
 *   are decremented one at a time from the head with the largest rounding excess
 *   (cap_h - exact_h; ties: higher head index) until the sum is H * B. So each head keeps
 *   s + r + cap_h tokens, the total over heads never exceeds H * keep (it equals H * keep up to
 *   the flooring of alpha * B), and every head keeps at least s + r + floor(alpha * B) (only
 *   heads with a positive excess are decremented, each at most once).
 * - Normalisation of per-head scores (the original's optional `normalize`) is off, as in its
 *   defaults; no skip layers; alpha = params->adakv_alpha (0.2, the GQA recommendation).
 * - No window: recency fallback (every head then gets c_h = B, i.e. sink + newest).
 * - Scratch: 2 * n_head_kv * n_tokens + 3 * n_tokens + 2 * n_head_kv words + n_tokens int64.
 */
#include <math.h>

#include "kv/kv_policy_impl.h"

static nx_status adakv_select(const struct kv_layer_view *view, int64_t keep,
                              const struct kv_policy_params *params, void *scratch,
                              struct kv_selection *out) {
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens;
    const int32_t hkv = view->n_head_kv;
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    double *score = kvp_take(&arena, (size_t)hkv * (size_t)n * sizeof(double));
    int64_t *gidx = kvp_take(&arena, (size_t)hkv * (size_t)n * sizeof(int64_t));
    int64_t *quota = kvp_take(&arena, (size_t)hkv * sizeof(int64_t));
    double *exact = kvp_take(&arena, (size_t)hkv * sizeof(double));
    if (!score || !gidx || !quota || !exact) return NX_STATUS_INVALID_ARG;
    int64_t s, r;
    kvp_protected(n, params, &s, &r);
    if (kvp_has_window(view)) {
        st = kvp_snap_scores(view, params, r, score, &arena);
        if (st != NX_STATUS_OK) return st;
    } else {
        kvp_recency_scores(n, hkv, score);
    }
    const int64_t m = n - s - r, b = NX_MAX(0, NX_MIN(keep - s - r, m));
    /* global top hkv * b over the flattened (head, middle token) cells h * n + i */
    int64_t cnt = 0;
    for (int32_t h = 0; h < hkv; h++)
        for (int64_t i = s; i < n - r; i++) gidx[cnt++] = (int64_t)h * n + i;
    const int64_t total = (int64_t)hkv * b;
    kvp_topk(score, gidx, cnt, total, false);
    for (int32_t h = 0; h < hkv; h++) quota[h] = 0;
    for (int64_t j = 0; j < total; j++) quota[gidx[j] / n]++;
    const double alpha = params->adakv_alpha, fl = floor(alpha * (double)b);
    int64_t sum = 0;
    for (int32_t h = 0; h < hkv; h++) {
        exact[h] = (double)quota[h] * (1.0 - alpha) + fl;
        quota[h] = NX_MAX(0, NX_MIN((int64_t)floor(exact[h] + 0.5), m));
        sum += quota[h];
    }
    while (sum > total) {
        int32_t worst = -1;
        double excess = -INFINITY;
        for (int32_t h = 0; h < hkv; h++) {
            if (quota[h] == 0) continue;
            double e = (double)quota[h] - exact[h];
            if (e >= excess) {
                excess = e;
                worst = h;
            }
        }
        if (worst < 0) break;
        quota[worst]--;
        sum--;
    }
    return kvp_select_scored(view, keep, params, score, false, quota, &arena, out);
}

const struct kv_policy kv_policy_adakv = {
    .name = "adakv",
    .needs_acc_attn = false,
    .per_head = true,
    .block_granular = false,
    .select = adakv_select,
};
