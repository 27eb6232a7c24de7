/*
 * policy_streaming.c - "streaming": StreamingLLM's attention sinks + sliding window
 * (EVICTION.md §1.1), block-granular.
 *
 * DESIGN
 * - Keeps the first s = min(sink, n) tokens and a suffix of whole blocks. Blocks are defined
 *   over CACHE ORDER, not over original positions: block j holds cache indices [j*b, (j+1)*b)
 *   (b = params->block), the last block may be partial. After earlier evictions the cache is
 *   compacted, so a block is "the b consecutive surviving tokens at that cache slot"; when sink
 *   is a multiple of b (the default 32/32) every kept block lands on a block boundary again
 *   after compaction, so blocks stay intact and the paged cache frees whole pages.
 * - The suffix is the longest run of trailing blocks (the partial last block counts with its
 *   real size) with at most keep - s tokens. If that does not cover the last min(recent, n - s)
 *   tokens (keep below kv_policy_min_keep = sink + recent + block - 1), blocks are added until
 *   it does: protection wins over the budget. So a head keeps at most `keep` tokens whenever
 *   keep >= kv_policy_min_keep, possibly fewer (at most b - 1 fewer plus nothing else).
 * - Positions stay the original ones (what kvpress / KVCache-Factory and the paper's
 *   comparisons use); no pos-shift re-rotation. No scores, no window, no scratch; all heads
 *   keep the same tokens.
 */
#include <string.h>

#include "kv/kv_policy_impl.h"

static nx_status streaming_select(const struct kv_layer_view *view, int64_t keep,
                                  const struct kv_policy_params *params, void *scratch,
                                  struct kv_selection *out) {
    NX_UNUSED(scratch);
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens, b = params->block;
    int64_t s, r;
    kvp_protected(n, params, &s, &r);
    const int64_t n_blocks = (n + b - 1) / b, last = n - (n_blocks - 1) * b;
    /* suffix of m blocks holds last + (m - 1) * b tokens (m >= 1) */
    int64_t room = keep - s, tail = 0;
    if (room >= last) tail = last + (room - last) / b * b;
    while (tail < r) tail = tail == 0 ? last : tail + b;
    tail = NX_MIN(tail, n);
    uint8_t *row = out->keep;
    memset(row, 0, (size_t)n);
    memset(row, 1, (size_t)s);
    memset(row + (n - tail), 1, (size_t)tail);
    for (int32_t h = 1; h < view->n_head_kv; h++)
        memcpy(row + (size_t)h * (size_t)n, row, (size_t)n);
    return NX_STATUS_OK;
}

const struct kv_policy kv_policy_streaming = {
    .name = "streaming",
    .needs_acc_attn = false,
    .per_head = false,
    .block_granular = true,
    .select = streaming_select,
};
