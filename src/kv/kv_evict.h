/*
 * kv_evict.h - holds one sequence's KV cache (its tables in a shared pool) to its budget:
 * decides when to evict, builds the policy's view of each layer (keys as floats, positions,
 * the observation window, cumulative attention), runs the policy and compacts the tables.
 * The gather buffers (struct kv_evict_bufs) are shared by every evictor of a context, since
 * the sequences of a context are evicted one at a time.
 *
 * The forward pass feeds it the post-RoPE queries of the newest tokens (a ring of `window`
 * per layer) and, for policies that need it, cumulative attention in the cache's per-slot
 * accumulators. All buffers are sized at init; kv_evict_layer allocates nothing. Layers are
 * independent: different threads may run kv_evict_layer on different layers at once, each with
 * its own thread index.
 */
#ifndef NX_KV_EVICT_H
#define NX_KV_EVICT_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_cache.h"
#include "kv/kv_policy.h"

struct kv_evict_params {
    const struct kv_policy *policy;
    struct kv_policy_params pp;
    float density;     /* budget = floor(density * seen) when budget == 0 */
    int64_t budget;    /* fixed budget in tokens (> 0), or 0 */
    int regime;        /* NX_KV_REGIME_PREFILL / NX_KV_REGIME_STREAM */
    int32_t window;    /* observation-window queries kept per layer */
    int32_t n_head;    /* query heads */
    int32_t seq;       /* the sequence whose tables are held to the budget */
};

struct kv_evictor;
struct kv_evict_bufs;

/* Buffers for n_threads concurrent kv_evict_layer calls on tables of up to max_tokens tokens,
 * windows of up to `window` queries of n_head heads. Errors: INVALID_ARG, NOMEM. */
nx_status kv_evict_bufs_init(const struct kv_cache *kv, int32_t n_head, int32_t window,
                             int n_threads, int64_t max_tokens, struct kv_evict_bufs **out);
/* Adds the value buffers (as floats, like the keys) a policy that reads values needs
 * (kv_policy_needs_values); once, later calls do nothing. Not while kv_evict_layer runs.
 * Errors: NOMEM (b unchanged). */
nx_status kv_evict_bufs_want_values(struct kv_evict_bufs *b, const struct kv_cache *kv);
void kv_evict_bufs_free(struct kv_evict_bufs *b);
/* Most threads that may call kv_evict_layer at once with these buffers (indices 0 .. n-1). */
int kv_evict_bufs_threads(const struct kv_evict_bufs *b);

nx_status kv_evict_init(struct kv_cache *kv, const struct kv_evict_params *p,
                        struct kv_evictor **out);
void kv_evict_free(struct kv_evictor *e);
/* Forget the window (with kv_cache_clear). */
void kv_evict_reset(struct kv_evictor *e);

/* Where the forward pass stores the n_head*head_dim query floats of the token at `pos` in
 * `layer` (ring slot pos % window). Query head h's row starts at h*head_dim; threads may fill
 * different heads of one slot concurrently. kv_evict_window_mark records that the slot holds
 * pos (once per token, by one thread). */
float *kv_evict_window_slot(struct kv_evictor *e, int layer, int32_t pos);
void kv_evict_window_mark(struct kv_evictor *e, int layer, int32_t pos);
/* Drop window rows of positions >= pos (after a truncation). */
void kv_evict_forget_from(struct kv_evictor *e, int32_t pos);

/* Budget (tokens per KV head per layer) after `seen` tokens, never below the policy's minimum. */
int64_t kv_evict_budget(const struct kv_evictor *e, int64_t seen);
/* Whether an eviction round is due after a chunk: prefill regime -> after a multi-token call's
 * chunks; stream regime -> also when a layer holds >= budget + block tokens. */
bool kv_evict_due(const struct kv_evictor *e, int64_t seen, bool prompt_chunk);
/* Evict layer `layer` to `budget` using thread ith's buffers of b (whose window and
 * max_tokens must cover this evictor's). A table whose compaction needs a private copy of a
 * shared block and finds no free block keeps its tokens (counted in kv_evict_skipped). */
void kv_evict_layer(struct kv_evictor *e, struct kv_evict_bufs *b, int layer, int64_t budget,
                    int ith);
/* Account one finished round (all layers) that took `seconds`. */
void kv_evict_round_done(struct kv_evictor *e, double seconds);
int64_t kv_evict_skipped(const struct kv_evictor *e);
const struct kv_evict_params *kv_evict_params_of(const struct kv_evictor *e);
int64_t kv_evict_rounds(const struct kv_evictor *e);
int64_t kv_evict_tokens_evicted(const struct kv_evictor *e);
double kv_evict_seconds(const struct kv_evictor *e);

#endif
