/*
 * kv_policy_impl.h - helpers shared by the eviction policies (src/kv/policy_*.c) and exposed to
 * tests: argument checks, a bump allocator over the caller's scratch buffer, causal window
 * attention rows, 1-D pooling, partial top-k with deterministic ties, the SnapKV score family,
 * the counter-based RNG and the Nexus score / priority pipeline.
 *
 * Everything here is pure: outputs depend only on the arguments, nothing global is written.
 */
#ifndef NX_KV_POLICY_IMPL_H
#define NX_KV_POLICY_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kv/kv_policy.h"

extern const struct kv_policy kv_policy_full;
extern const struct kv_policy kv_policy_streaming;
extern const struct kv_policy kv_policy_h2o;
extern const struct kv_policy kv_policy_snapkv;
extern const struct kv_policy kv_policy_pyramidkv;
extern const struct kv_policy kv_policy_adakv;
extern const struct kv_policy kv_policy_morphkv;
extern const struct kv_policy kv_policy_tova;
extern const struct kv_policy kv_policy_nexus;
extern const struct kv_policy kv_policy_random;
extern const struct kv_policy kv_policy_bottomk;
extern const struct kv_policy kv_policy_oracle;

/* ---- scratch ------------------------------------------------------------------------------ */

/* Bump allocator over the caller's scratch buffer; pieces are 64-byte aligned. */
struct kvp_arena {
    unsigned char *p;
    size_t left;
};
void kvp_arena_init(struct kvp_arena *a, void *scratch, size_t bytes);
/* n bytes, or NULL when the arena is exhausted (a programmer error: scratch too small). */
void *kvp_take(struct kvp_arena *a, size_t n);

/* ---- checks and common selection steps ---------------------------------------------------- */

/*
 * Validates the view, the budget and the parameters (see kv_policy.c for the list). Returns
 * NX_STATUS_OK or NX_STATUS_INVALID_ARG. Every policy calls it first.
 */
nx_status kvp_check(const struct kv_layer_view *view, int64_t keep,
                    const struct kv_policy_params *params, const struct kv_selection *out);

/* Protected token counts for n tokens: *s = min(sink, n), *r = min(recent, n - *s). */
void kvp_protected(int64_t n, const struct kv_policy_params *params, int64_t *s, int64_t *r);

/* Sets every keep flag of every head. */
/* The common start of every select: kvp_check, then keep everything when n_tokens <= keep.
   Returns true when the selection is final (its status in *st); false: go on selecting. */
bool kvp_prologue(const struct kv_layer_view *view, int64_t keep,
                  const struct kv_policy_params *params, struct kv_selection *out,
                  nx_status *st);
void kvp_keep_all(const struct kv_layer_view *view, struct kv_selection *out);

/* True when the window can be scored (n_win > 0 and its arrays present). */
bool kvp_has_window(const struct kv_layer_view *view);

/*
 * One head's row: keeps [0, s), [n - r, n) and the `quota` middle tokens of [s, n - r) with the
 * highest score[i] (ties: lower index; NaN ranks below everything). quota is clamped to
 * [0, n - s - r]. idx: n int64 of scratch. row: n flags, fully written.
 */
void kvp_finish_row(int64_t n, int64_t s, int64_t r, int64_t quota, const double *score,
                    int64_t *idx, uint8_t *row);

/*
 * Partial selection: reorders idx[0..n) so that idx[0..k) are the k best entries by score[idx]
 * descending (NaN lowest); equal scores rank the lower index first, or the higher one when
 * newer_first. Deterministic; O(n) expected, O(n log n) worst case (heapsort fallback).
 */
void kvp_topk(const double *score, int64_t *idx, int64_t n, int64_t k, bool newer_first);

/* ---- attention rows ----------------------------------------------------------------------- */

/* Dot product of two float vectors (8 float partial sums, summed in double). */
double kvp_dot(const float *a, const float *b, int32_t d);

/*
 * Logits of window row `row`, query head qh, against the keys [0, n_keys) of KV head
 * qh / (n_head / n_head_kv): z[i] = q.k_i / sqrt(head_dim), or -INFINITY for keys at positions
 * after the row's position (causal mask).
 */
void kvp_row_logits(const struct kv_layer_view *view, int32_t qh, int32_t row, int64_t n_keys,
                    double *z);
/* kvp_row_logits followed by kvp_softmax, in float through the SIMD kernels (the hot path of
   window scoring); masked keys get exactly 0. Returns false when no key is visible. */
bool kvp_row_probs(const struct kv_layer_view *view, int32_t qh, int32_t row, int64_t n_keys,
                   double *z);

/* In-place softmax of z[0..n) (-INFINITY entries get 0). All masked: all 0; returns false. */
bool kvp_softmax(double *z, int64_t n);

/*
 * 1-D pooling over in[0..n) into out[0..n): stride 1, kernel k, "same" padding of k / 2 on the
 * left: out[i] pools in[i - k/2 .. i - k/2 + k - 1] restricted to [0, n). max: the maximum of
 * those; avg: their sum / k (zero padding counted, as torch's avg_pool1d does by default).
 */
void kvp_pool1d(const double *in, double *out, int64_t n, int32_t k, bool max);

/*
 * SnapKV-family scores (policy_snapkv.c): for each KV head g and token i < n_tokens - r, the
 * mean over the query heads of the group of pool(mean over window rows of the causal softmax
 * probability of key i). score: (n_head_kv, n_tokens); entries i >= n_tokens - r are 0.
 * Needs a window (kvp_has_window). Takes 3 * n_tokens doubles from the arena.
 */
nx_status kvp_snap_scores(const struct kv_layer_view *view, const struct kv_policy_params *params,
                          int64_t r, double *score, struct kvp_arena *arena);

/*
 * SnapKV-style selection finish for a per-head (or shared: `shared`, one row of n) score:
 * every head keeps sink + recent + its top quota[h] middle tokens (quota NULL: keep - s - r).
 */
nx_status kvp_select_scored(const struct kv_layer_view *view, int64_t keep,
                            const struct kv_policy_params *params, const double *score,
                            bool shared, const int64_t *quota, struct kvp_arena *arena,
                            struct kv_selection *out);

/* kvp_snap_scores with r = the protected recent count, or recency scores without a window. */
nx_status kvp_snap_or_recency(const struct kv_layer_view *view,
                              const struct kv_policy_params *params, double *score,
                              struct kvp_arena *arena);

/* Recency score (score[i] = i) in every head row: the fallback when a policy has no signal. */
void kvp_recency_scores(int64_t n, int32_t n_rows, double *score);

/* PyramidKV per-layer budget (policy_pyramidkv.c). */
/* SnapKV selection (window scores, pooled, group mean; recency without a window) with budget
   keep, after kvp_check succeeded; shared by snapkv and pyramidkv. */
nx_status kvp_snap_select(const struct kv_layer_view *view, int64_t keep,
                          const struct kv_policy_params *params, void *scratch,
                          struct kv_selection *out);
int64_t kvp_pyramid_keep(const struct kv_layer_view *view, int64_t keep,
                         const struct kv_policy_params *params);

/* ---- counter-based RNG -------------------------------------------------------------------- */

/* splitmix64 finaliser (a bijection of 64-bit words). */
uint64_t kvp_mix64(uint64_t z);
/*
 * 64 random bits keyed by (seed, layer, block id, draw index, stream): a chain of splitmix64
 * finalisers over the key words. stream: 0 for fixed draws, otherwise 1 + eviction index.
 */
uint64_t kvp_rng_bits(uint64_t seed, uint64_t layer, uint64_t block, uint64_t draw,
                      uint64_t stream);
/* Uniform in the open interval (0, 1) from 64 bits: ((x >> 12) + 0.5) * 2^-52 (52 bits, so
   the largest value 1 - 2^-53 is exact in double; the smallest is 2^-53). */
double kvp_u01(uint64_t bits);

/* ---- Nexus (policy_nexus.c) --------------------------------------------------------------- */

/* Block layout of a layer under Nexus (blocks over cache order: block j = [j*b, (j+1)*b)). */
struct kvp_nexus_blocks {
    int64_t n_blocks;     /* ceil(n_tokens / b) */
    int64_t n_sink;       /* blocks overlapping the first min(sink, n) tokens: [0, n_sink) */
    int64_t first_recent; /* blocks [first_recent, n_blocks) overlap the recent tokens or are
                             the partial last block; always kept */
    int64_t m;            /* candidates [n_sink, n_sink + m): first_recent - n_sink (>= 0) */
    int64_t k;            /* candidates kept: floor(keep / b) - n_sink - recent blocks, in [0,m] */
};
void kvp_nexus_layout(int64_t n_tokens, int64_t keep, const struct kv_policy_params *params,
                      struct kvp_nexus_blocks *bl);

/*
 * Walk of §2.4 step 5 over rows a^(q) (n_rows x m, row-major, oldest first): C = 0; for each
 * of the last min(h, n_rows) rows in order, g = 1 + <a^(q), C>, C += g a^(q). Writes C (m) and
 * ctil = C / |C|_1 (all 0 when |C|_1 = 0). Also writes a = mean of all the rows (m) when a is
 * not NULL. Used by the policy through the streaming form below; exposed for tests.
 */
void kvp_nexus_walk(const double *rows, int32_t n_rows, int64_t m, int32_t h, double *a,
                    double *c, double *ctil);

/*
 * Nexus weights of the m candidates of a layer (§2.4 steps 3-6): per window row, the head-
 * aggregated probability row (reading A: mean over query heads of the per-head causal softmax;
 * reading B with params->nexus_mean_vectors: one softmax of the head-mean query against the
 * group-mean key), BlockSum over each candidate block, rownorm over the candidates (rows with
 * no candidate mass are skipped: they add nothing to a, C or the row count); a = mean of the
 * rows, the walk over the last H rows, s = a + lambda * ctil, w = (s + eps * r_j) * w_scale
 * with r_j = j / (m - 1) (r = 1 when m = 1). a, ctil, w: m doubles each (all required).
 * Needs a window. Takes 2 * n_tokens + 2 * m doubles and head_dim floats from the arena.
 */
nx_status kvp_nexus_weights(const struct kv_layer_view *view,
                            const struct kv_policy_params *params,
                            const struct kvp_nexus_blocks *bl, double *a, double *ctil,
                            double *w, struct kvp_arena *arena);

/*
 * log of the n-averaged reservoir priority of §2.4 step 7:
 * log pi = logsumexp_i(log(u_i) / w) - log n, u_i = kvp_u01(kvp_rng_bits(seed, layer, block_id,
 * i, stream)), i = 0..n-1, computed in double. w <= 0 or NaN gives -INFINITY.
 */
double kvp_nexus_log_priority(double w, int32_t n, uint64_t seed, uint64_t layer,
                              uint64_t block_id, uint64_t stream);
/* stream for kvp_rng_bits from the parameters: 0 with fixed draws, else 1 + eviction_index. */
uint64_t kvp_nexus_stream(const struct kv_policy_params *params);

#endif
