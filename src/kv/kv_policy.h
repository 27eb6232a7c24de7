/*
 * kv_policy.h - KV-cache eviction policies as pure selection functions.
 *
 * A policy looks at one layer of one sequence's cache (keys as floats, original positions, the
 * observation window of recent queries, optional cumulative attention) and says which cached
 * tokens each KV head keeps. It never touches cache memory: kv_cache frees what is not kept.
 * Every policy is deterministic given its inputs and seed (no dependence on threads or time).
 *
 * Budget convention (one definition for every policy, EVICTION.md §0.1): `keep` is the number of
 * tokens kept per KV head in this layer, sink and recent tokens INCLUDED. Policies that
 * redistribute budget across layers (pyramidkv) or heads (adakv) keep the per-layer or per-head
 * average equal to `keep` (up to rounding) and say so in their file.
 *
 * Observation window: the last n_win queries of this layer (post-RoPE, all query heads, oldest
 * first) with their positions. A window query at position p only sees keys at positions <= p
 * (causal mask): keys that arrived later get probability 0 in that row.
 */
#ifndef NX_KV_POLICY_H
#define NX_KV_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

/* One layer of one sequence, as a policy sees it. All arrays are owned by the caller. */
struct kv_layer_view {
    int32_t layer;         /* index of this layer */
    int32_t n_layer;
    int32_t n_head;        /* query heads */
    int32_t n_head_kv;     /* KV heads; query head h uses KV head h / (n_head / n_head_kv) */
    int32_t head_dim;
    int64_t n_tokens;      /* cached tokens per KV head (all heads hold the same positions) */
    const int32_t *pos;    /* (n_tokens) original positions, strictly increasing */
    const float *k;        /* (n_head_kv, n_tokens, head_dim) keys after RoPE */
    int32_t n_win;         /* observation-window queries available (may be 0) */
    const float *win_q;    /* (n_win, n_head, head_dim) queries after RoPE, oldest first */
    const int32_t *win_pos; /* (n_win) their positions */
    const float *acc_attn; /* (n_head_kv, n_tokens) H2O cumulative attention (sum over the
                              query heads of the group and over every query row seen), or NULL */
    const float *v;        /* (n_head_kv, n_tokens, head_dim) values, or NULL: given only when
                              kv_policy_needs_values() (the value-aware oracle) */
};

/* Parameters shared by all policies, plus each policy's own (unused fields are ignored). */
struct kv_policy_params {
    int32_t block;        /* tokens per block (32) */
    int32_t sink;         /* tokens always kept at the start (one block = 32 by default) */
    int32_t recent;       /* newest tokens always kept (one block = 32 by default) */
    /* snapkv / pyramidkv / adakv */
    int32_t pool_kernel;  /* 1-D pooling kernel over the key axis (7) */
    bool pool_max;        /* max pooling (true) or average */
    /* morphkv */
    bool morph_max;       /* aggregate the window rows by max (true) or sum (false, default) */
    float pyramid_beta;   /* 20 */
    float adakv_alpha;    /* floor fraction 0.2 */
    /* nexus */
    int32_t nexus_walk;   /* H = 3 window rows in the walk */
    float nexus_lambda;   /* 0.5 */
    float nexus_eps;      /* 1e-6 recency tie-break */
    int32_t nexus_n;      /* 5 uniforms averaged per priority */
    float nexus_w_scale;  /* weights are multiplied by this before the reservoir keys (1) */
    bool nexus_fixed_draws; /* uniforms fixed per block (true) or fresh at each eviction */
    bool nexus_mean_vectors; /* head aggregation: average q/k vectors first (reading B) instead of
                                averaging per-head probability rows (reading A, default) */
    bool nexus_select_topk; /* keep the K candidates of highest weight (deterministic top-K on
                               the same weights) instead of the reservoir priorities */
    bool nexus_per_head;    /* weights and selection per KV head (its query group only) instead
                               of one selection shared by every head */
    bool nexus_match_kv;    /* K rounded to the nearest block so the layer holds about `keep`
                               tokens (mean held = keep), instead of rounding down */
    /* oracle */
    bool oracle_values;     /* score a past token by how far removing it moves each future
                               query's attention output (needs the values) instead of by the
                               attention mass it gets */
    uint64_t seed;
    uint64_t eviction_index; /* counter of eviction events (for fresh draws) */
};

/* The decision: keep[h * n_tokens + i] != 0 when KV head h keeps cached token i. */
struct kv_selection {
    uint8_t *keep;        /* (n_head_kv, n_tokens), filled by the policy */
};

struct kv_policy {
    const char *name;     /* "full", "streaming", "h2o", "snapkv", "pyramidkv", "adakv",
                             "morphkv", "tova", "nexus", and the bounds "random", "bottomk", "oracle" */
    bool needs_acc_attn;  /* the engine must accumulate acc_attn (h2o) */
    bool per_head;        /* selections may differ between KV heads (ragged) */
    bool block_granular;  /* keeps whole blocks (nexus, streaming) */
    /*
     * Choose what to keep with `keep` tokens per KV head (see the budget convention). Must keep
     * the first min(sink, n) and last min(recent, n) tokens, and exactly min(keep, n_tokens)
     * tokens per head for policies with a uniform budget (block-granular policies may keep
     * fewer, never more). scratch: at least kv_policy_scratch_bytes(view) bytes. Returns
     * NX_STATUS_OK or NX_STATUS_INVALID_ARG.
     */
    nx_status (*select)(const struct kv_layer_view *view, int64_t keep,
                        const struct kv_policy_params *params, void *scratch,
                        struct kv_selection *out);
    /*
     * Optional (NULL unless the policy moves budget between heads: adakv). A layer whose KV
     * heads hold different tokens: views[h] is KV head h alone (n_head_kv = 1, its group's
     * query heads and window rows); the heads share n_views * keep tokens; keep_rows[h] gets
     * views[h].n_tokens flags. scratch: scratch_bytes >= kv_policy_scratch_bytes() of one view
     * with n_views KV heads and the largest n_tokens. Without it the engine runs select() on
     * each head alone, holding each to `keep`.
     */
    nx_status (*select_ragged)(const struct kv_layer_view *views, int32_t n_views, int64_t keep,
                               const struct kv_policy_params *params, void *scratch,
                               size_t scratch_bytes, uint8_t *const *keep_rows);
};

/* Set one parameter by its public option name (nexus.h, nx_kv_params_set): "nexus.walk",
 * "nexus.lambda", "nexus.eps", "nexus.n", "nexus.w_scale", "nexus.fresh_draws",
 * "nexus.mean_vectors", "nexus.select_topk", "nexus.per_head", "nexus.match_kv", "pool.kernel", "pool.max", "pyramidkv.beta", "adakv.alpha",
 * "morphkv.max", "oracle.values". INVALID_ARG (pp unchanged) for an unknown name or a value out
 * of range. */
nx_status kv_policy_set_option(struct kv_policy_params *pp, const char *name, double v);
/* Whether select() reads view->v with these parameters (the oracle with oracle_values). */
bool kv_policy_needs_values(const struct kv_policy *policy, const struct kv_policy_params *params);
/* Policy by name, or NULL. */
const struct kv_policy *kv_policy_find(const char *name);
/* Default parameters (paper / EVICTION.md defaults). */
struct kv_policy_params kv_policy_default_params(void);
/*
 * Scratch bytes any policy needs for this view (sized once per context for the worst case):
 * 8 * (2 * n_head_kv * n_tokens + 8 * n_tokens + 2 * n_head_kv + head_dim + 64) + 1024 bytes,
 * and when the view carries values (v != NULL: the value-aware oracle) 8 * (3 * R * n_tokens +
 * 4 * R + 2 * n_tokens + 64) more, R = n_win * n_head / n_head_kv; SIZE_MAX on
 * overflow.
 * It only grows with n_tokens, n_head_kv and head_dim, so the size for the largest view serves
 * every smaller one.
 */
size_t kv_policy_scratch_bytes(const struct kv_layer_view *view);
/*
 * The smallest `keep` a policy honours exactly with these parameters: below it the protected
 * tokens (sink, recent; for block-granular policies the sink, recent and partial last blocks)
 * are still all kept, so a selection can exceed `keep`. The engine should refuse budgets below
 * it. token-granular: sink + recent; streaming: sink + recent + block - 1; nexus:
 * block * (ceil(sink / block) + ceil(recent / block) + 1); full: 1.
 */
int64_t kv_policy_min_keep(const struct kv_policy *policy, const struct kv_policy_params *params);
/*
 * Tokens per KV head (the average over heads for adakv) this layer keeps after select() with
 * budget `keep`, before the min_keep clamp: `keep` for every policy except pyramidkv, whose
 * per-layer budget follows the pyramid (policy_pyramidkv.c). The engine can call select() when
 * the layer holds more than this. view: only layer, n_layer, n_tokens and pos are read.
 */
int64_t kv_policy_layer_keep(const struct kv_policy *policy, const struct kv_layer_view *view,
                             int64_t keep, const struct kv_policy_params *params);

#endif
