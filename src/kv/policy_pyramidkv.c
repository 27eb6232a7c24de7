/*
 * policy_pyramidkv.c - "pyramidkv": SnapKV scores with a per-layer pyramid budget
 * (EVICTION.md §1.4, the KVCache-Factory integer rule).
 *
 * DESIGN
 * - Budget of layer l (kvp_pyramid_keep), with L = tokens seen by the sequence
 *   (max(n_tokens, pos[n-1] + 1): the prompt length for prefill-once compression, the stream
 *   length in the streaming regime, the same for every layer), w = recent and C = keep:
 *     L <= C or L < 2 * (C - w), or C - w <= 0: uniform, the layer keeps C;
 *     otherwise base = C - w, mn = floor(base / beta), mx = 2 * base - mn; if mx >= L - w then
 *     mx = L - w, mn = 2 * base - mx; step = (mx - mn) / (NL - 1) (integer; 0 when NL == 1);
 *     the layer keeps max(mx - l * step, sink) + w tokens. Layers near the bottom keep more.
 *     A single layer (NL == 1) is uniform (the rule divides by NL - 1).
 *   Sum over layers: NL * C <= sum < NL * C + NL * (NL - 1) / 2 (the step is floored, as in
 *   KVCache-Factory), so the average over layers stays within (NL - 1) / 2 tokens above keep.
 *   The sink is part of the prefix capacity mx - l * step; a layer whose capacity falls below
 *   the sink (only when (keep - recent) / beta < sink) is raised to the sink (+ recent), which
 *   adds at most NL * sink to that sum; with the defaults (sink = recent = 32, beta = 20) it
 *   never happens once keep >= 672.
 * - Using L = tokens seen rather than the layer's own cache length keeps each layer's budget a
 *   function of the stream only, so in the streaming regime every layer converges to its own
 *   budget (the early, uniform phase lasts while L < 2 * (C - w)). kvpress' float version
 *   (round, budget including the window) differs by rounding only.
 * - Selection: exactly snapkv's with the layer budget; per KV head. No window: recency.
 * - Scratch: as snapkv.
 */
#include "kv/kv_policy_impl.h"

int64_t kvp_pyramid_keep(const struct kv_layer_view *view, int64_t keep,
                         const struct kv_policy_params *params) {
    const int64_t w = NX_MAX(params->recent, 0), base = keep - w;
    int64_t seen = NX_MAX(view->n_tokens, 0);
    if (view->n_tokens > 0 && view->pos)
        seen = NX_MAX(seen, (int64_t)view->pos[view->n_tokens - 1] + 1);
    if (base <= 0 || seen <= keep || seen < 2 * base) return keep;
    if (!(params->pyramid_beta > 0.0f) || view->n_layer <= 1) return keep;
    int64_t mn = (int64_t)((double)base / (double)params->pyramid_beta);
    int64_t mx = 2 * base - mn;
    if (mx >= seen - w) {
        mx = seen - w;
        mn = 2 * base - mx;
    }
    int64_t step = (mx - mn) / (view->n_layer - 1);
    int64_t layer = NX_MAX(0, NX_MIN(view->layer, view->n_layer - 1));
    int64_t cap = NX_MAX(mx - layer * step, (int64_t)NX_MAX(params->sink, 0));
    return cap + w;
}

static nx_status pyramidkv_select(const struct kv_layer_view *view, int64_t keep,
                                  const struct kv_policy_params *params, void *scratch,
                                  struct kv_selection *out) {
    nx_status st = kvp_check(view, keep, params, out);
    if (st != NX_STATUS_OK) return st;
    /* SnapKV's selection with this layer's share of the budget */
    return kvp_snap_select(view, kvp_pyramid_keep(view, keep, params), params, scratch, out);
}

const struct kv_policy kv_policy_pyramidkv = {
    .name = "pyramidkv",
    .needs_acc_attn = false,
    .per_head = true,
    .block_granular = false,
    .select = pyramidkv_select,
};
