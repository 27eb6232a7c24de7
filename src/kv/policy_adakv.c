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
 * - Ragged heads (select_ragged): after a head-adaptive round the KV heads of a layer hold
 *   different tokens. The stream regime then evicts when the layer's heads hold more than
 *   H * (keep + block - 1) tokens together, scores each head on its own tokens (its own view,
 *   the same SnapKV scores) and runs the same allocation over the union of the heads' middle
 *   cells (cells ordered head-major, so ties break as above), with b_h = keep - s_h - r_h.
 *   With equal heads it gives exactly the aligned selection (tested).
 * - Scratch: 2 * n_head_kv * n_tokens + 4 * n_tokens + 6 * n_head_kv words (ragged: the heads'
 *   token counts summed in place of n_head_kv * n_tokens).
 */
#include <math.h>

#include "kv/kv_policy_impl.h"

/*
 * The allocation shared by both entry points. Head h holds n[h] tokens, its scores at
 * score[off[h] + i], its protected counts s[h] / r[h]. Fills quota[h] (middle tokens head h
 * keeps). gidx: sum of the heads' middle counts int64s; exact: hkv doubles.
 */
static void adakv_quotas(int32_t hkv, const int64_t *n, const int64_t *off, const int64_t *s,
                         const int64_t *r, int64_t keep, double alpha, const double *score,
                         int64_t *gidx, double *exact, int64_t *quota) {
    /* global top sum(b_h) over the flattened (head, middle token) cells off[h] + i */
    int64_t cnt = 0, total = 0;
    for (int32_t h = 0; h < hkv; h++) {
        int64_t m = n[h] - s[h] - r[h];
        total += NX_MAX(0, NX_MIN(keep - s[h] - r[h], m));
        for (int64_t i = s[h]; i < n[h] - r[h]; i++) gidx[cnt++] = off[h] + i;
    }
    kvp_topk(score, gidx, cnt, total, false);
    for (int32_t h = 0; h < hkv; h++) quota[h] = 0;
    for (int64_t j = 0; j < NX_MIN(total, cnt); j++) {
        int32_t h = hkv - 1;
        while (h > 0 && gidx[j] < off[h]) h--;
        quota[h]++;
    }
    int64_t sum = 0;
    for (int32_t h = 0; h < hkv; h++) {
        int64_t m = n[h] - s[h] - r[h], b = NX_MAX(0, NX_MIN(keep - s[h] - r[h], m));
        exact[h] = (double)quota[h] * (1.0 - alpha) + floor(alpha * (double)b);
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
}

/* Per-KV-head scores of one view into score (n_head_kv rows of n_tokens). */
static nx_status adakv_scores(const struct kv_layer_view *view,
                              const struct kv_policy_params *params, int64_t r, double *score,
                              struct kvp_arena *arena) {
    if (kvp_has_window(view)) return kvp_snap_scores(view, params, r, score, arena);
    kvp_recency_scores(view->n_tokens, view->n_head_kv, score);
    return NX_STATUS_OK;
}

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
    int64_t *hn = kvp_take(&arena, 4 * (size_t)hkv * sizeof(int64_t));
    if (!score || !gidx || !quota || !exact || !hn) return NX_STATUS_INVALID_ARG;
    int64_t s, r;
    kvp_protected(n, params, &s, &r);
    st = adakv_scores(view, params, r, score, &arena);
    if (st != NX_STATUS_OK) return st;
    int64_t *off = hn + hkv, *hs = hn + 2 * hkv, *hr = hn + 3 * hkv;
    for (int32_t h = 0; h < hkv; h++) {
        hn[h] = n;
        off[h] = (int64_t)h * n;
        hs[h] = s;
        hr[h] = r;
    }
    adakv_quotas(hkv, hn, off, hs, hr, keep, params->adakv_alpha, score, gidx, exact, quota);
    return kvp_select_scored(view, keep, params, score, false, quota, &arena, out);
}

/* Heads that hold different tokens: the same allocation over each head's own cells. */
static nx_status adakv_select_ragged(const struct kv_layer_view *views, int32_t hkv, int64_t keep,
                                     const struct kv_policy_params *params, void *scratch,
                                     size_t scratch_bytes, uint8_t *const *keep_rows) {
    if (!views || hkv < 1 || keep < 1 || !params || !scratch || !keep_rows)
        return NX_STATUS_INVALID_ARG;
    int64_t total_n = 0, max_n = 0;
    for (int32_t h = 0; h < hkv; h++) {
        if (views[h].n_head_kv != 1 || views[h].n_tokens < 0 || !keep_rows[h])
            return NX_STATUS_INVALID_ARG;
        total_n += views[h].n_tokens;
        max_n = NX_MAX(max_n, views[h].n_tokens);
    }
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, scratch_bytes);
    double *score = kvp_take(&arena, (size_t)total_n * sizeof(double));
    int64_t *gidx = kvp_take(&arena, (size_t)total_n * sizeof(int64_t));
    int64_t *quota = kvp_take(&arena, (size_t)hkv * sizeof(int64_t));
    double *exact = kvp_take(&arena, (size_t)hkv * sizeof(double));
    int64_t *hn = kvp_take(&arena, 4 * (size_t)hkv * sizeof(int64_t));
    int64_t *idx = kvp_take(&arena, (size_t)max_n * sizeof(int64_t));
    if (!score || !gidx || !quota || !exact || !hn || !idx) return NX_STATUS_INVALID_ARG;
    int64_t *off = hn + hkv, *hs = hn + 2 * hkv, *hr = hn + 3 * hkv;
    int64_t o = 0;
    for (int32_t h = 0; h < hkv; h++) {
        hn[h] = views[h].n_tokens;
        off[h] = o;
        kvp_protected(hn[h], params, &hs[h], &hr[h]);
        struct kvp_arena sub = arena; /* the score helper's temporaries, reused per head */
        nx_status st = adakv_scores(&views[h], params, hr[h], score + o, &sub);
        if (st != NX_STATUS_OK) return st;
        o += hn[h];
    }
    adakv_quotas(hkv, hn, off, hs, hr, keep, params->adakv_alpha, score, gidx, exact, quota);
    for (int32_t h = 0; h < hkv; h++)
        kvp_finish_row(hn[h], hs[h], hr[h], quota[h], score + off[h], idx, keep_rows[h]);
    return NX_STATUS_OK;
}

const struct kv_policy kv_policy_adakv = {
    .name = "adakv",
    .needs_acc_attn = false,
    .per_head = true,
    .block_granular = false,
    .select = adakv_select,
    .select_ragged = adakv_select_ragged,
};
