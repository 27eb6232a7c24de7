/*
 * policy_nexus.c - "nexus": Nexus Sampling (paper §2; EVICTION.md §2.4 steps 1-8).
 *
 * DESIGN
 * - Blocks (step 1): blocks over CACHE ORDER, block j = cache indices [j*b, (j+1)*b), the last
 *   one possibly partial. Sink blocks: those overlapping the first min(sink, n) tokens (with the
 *   default sink = b exactly block 0). Always kept too: every block overlapping the last
 *   min(recent, n) tokens and the partial last block. Candidates: the full blocks in between,
 *   j = 0..M-1 in cache order (oldest first). K = floor(keep / b) - #sink - #recent blocks,
 *   clamped to [0, M]; so the layer keeps at most floor(keep / b) * b <= keep tokens whenever
 *   keep >= kv_policy_min_keep, and whole blocks only (pages). n_tokens <= keep: keep all.
 * - Window (step 2): the rows the engine gives (its ring buffer of the last W = 16 queries);
 *   all of them feed a, the H = nexus_walk most recent feed the walk (EVICTION.md: "take the 3
 *   most recent"), oldest of those first.
 * - Head aggregation (step 3): reading (A) by default, the mean over ALL query heads of the
 *   per-head causal softmax rows (each head against its KV head), which EVICTION.md argues for
 *   (Sketch&Walk's convention, TOVA's too); reading (B) behind nexus_mean_vectors: q_bar = mean
 *   of the query heads, k_bar_i = mean of the KV heads' keys, one softmax of
 *   q_bar.k_bar / sqrt(d). One score vector per layer either way; the selection is shared by
 *   every KV head (per_head = false).
 * - Base score (step 4): BlockSum of the row over each candidate block, rownorm over the
 *   candidates, a = mean of the rows. A row with no candidate mass (a window query older than
 *   every candidate) is skipped: it adds nothing to a, the row count or the walk.
 * - Walk (step 5): C = 0 (the paper: "Starting from C = 0"); per walk row, g = 1 + <a(q), C>,
 *   C += g a(q); c_tilde = C / |C|_1 (0 when C = 0).
 * - Weight (step 6): w_j = (a_j + lambda c_tilde_j + eps r_j) * nexus_w_scale,
 *   r_j = j / (M - 1) (paper eq. 5: 0 for the oldest candidate, 1 for the newest; r = 1 when
 *   M = 1). The scale defaults to 1 (the paper does not rescale; EVICTION.md shows that n-
 *   averaging barely sharpens at w ~ 1/M, hence the knob).
 * - Priority (step 7): log pi_j = logsumexp_i(log(u_ij) / w_j) - log n in double (online
 *   logsumexp), so nothing underflows at w ~ 1e-4. u_ij = kvp_u01 of the counter-based RNG keyed
 *   by (seed, layer, block id, i, stream): block id = the original position of the block's
 *   first token (stable across evictions while blocks stay intact; unique), stream = 0 with
 *   nexus_fixed_draws (default: classical reservoir keys, drawn once per block; the paper's
 *   survival argument treats each event's inclusion probability as given and does not say
 *   which, EVICTION.md asks for both) or 1 + eviction_index (a fresh lottery per event).
 *   w <= 0 gives log pi = -inf (never chosen before a positive weight).
 * - Selection (step 8): the K candidates of highest log pi; equal priorities prefer the NEWER
 *   block (the paper's tie-break direction). Plus sink and recent blocks.
 * - No window (n_win == 0): documented fallback, the K newest candidates (pure recency).
 * - Options (issue 15; the paper's reading is every option off): nexus_select_topk keeps the K
 *   candidates of highest w (deterministic top-K on the same weights; ties newer first);
 *   nexus_per_head runs steps 3-8 once per KV head with only that head's query group (the
 *   heads then hold different blocks, and later evictions see one view per head);
 *   nexus_match_kv rounds K to the nearest block, K = round((keep - forced) / b) with forced
 *   the tokens of the sink, recent and partial blocks, so the layer holds keep tokens on
 *   average (up to b / 2 more or less) like the token-granular policies, instead of up to b - 1
 *   plus the partial block fewer.
 * - Scratch: 2 * n_tokens + 7 * M doubles (M <= n_tokens) + head_dim floats.
 */
#include <math.h>
#include <string.h>

#include "kv/kv_policy_impl.h"

void kvp_nexus_layout(int64_t n_tokens, int64_t keep, const struct kv_policy_params *params,
                      struct kvp_nexus_blocks *bl) {
    const int64_t n = NX_MAX(n_tokens, 0), b = NX_MAX(params->block, 1);
    const int64_t nb = (n + b - 1) / b;
    const int64_t s = NX_MIN((int64_t)NX_MAX(params->sink, 0), n);
    const int64_t rec = NX_MIN((int64_t)NX_MAX(params->recent, 0), n);
    int64_t n_sink = NX_MIN((s + b - 1) / b, nb), fr = nb;
    if (rec > 0) fr = NX_MIN(fr, (n - rec) / b);
    if (n % b != 0) fr = NX_MIN(fr, nb - 1);
    fr = NX_MAX(fr, n_sink);
    bl->n_blocks = nb;
    bl->n_sink = n_sink;
    bl->first_recent = fr;
    bl->m = fr - n_sink;
    int64_t k = keep / b - n_sink - (nb - fr);
    if (params->nexus_match_kv) {
        /* tokens the forced blocks hold; the rest of keep in whole blocks, rounded to nearest */
        const int64_t forced = NX_MIN(n_sink * b, n) + (n - fr * b);
        k = keep >= forced ? (keep - forced + b / 2) / b : 0;
    }
    bl->k = NX_MAX(0, NX_MIN(k, bl->m));
}

static void walk_step(const double *row, double *c, int64_t m) {
    double g = 1.0;
    for (int64_t j = 0; j < m; j++) g += row[j] * c[j];
    for (int64_t j = 0; j < m; j++) c[j] += g * row[j];
}

static void normalise_l1(const double *c, double *ctil, int64_t m) {
    double l1 = 0.0;
    for (int64_t j = 0; j < m; j++) l1 += fabs(c[j]);
    for (int64_t j = 0; j < m; j++) ctil[j] = l1 > 0.0 ? c[j] / l1 : 0.0;
}

void kvp_nexus_walk(const double *rows, int32_t n_rows, int64_t m, int32_t h, double *a,
                    double *c, double *ctil) {
    for (int64_t j = 0; j < m; j++) c[j] = 0.0;
    if (a) {
        for (int64_t j = 0; j < m; j++) a[j] = 0.0;
        for (int32_t q = 0; q < n_rows; q++)
            for (int64_t j = 0; j < m; j++) a[j] += rows[(size_t)q * (size_t)m + (size_t)j];
        for (int64_t j = 0; j < m && n_rows > 0; j++) a[j] /= (double)n_rows;
    }
    for (int32_t q = NX_MAX(0, n_rows - NX_MAX(h, 0)); q < n_rows; q++)
        walk_step(rows + (size_t)q * (size_t)m, c, m);
    normalise_l1(c, ctil, m);
}

/* Head-aggregated probability row of window row `row` (reading A or B) into p[0..n), over the
   KV heads [g0, g1) and their query heads. */
static void aggregated_row(const struct kv_layer_view *view, bool mean_vectors, int32_t row,
                           int32_t g0, int32_t g1, double *z, double *p, float *qbar) {
    const int64_t n = view->n_tokens;
    const int32_t d = view->head_dim, grp = view->n_head / view->n_head_kv;
    const int32_t h0 = g0 * grp, h1 = g1 * grp;
    if (!mean_vectors) {
        for (int64_t i = 0; i < n; i++) p[i] = 0.0;
        for (int32_t h = h0; h < h1; h++) {
            kvp_row_probs(view, h, row, n, z);
            for (int64_t i = 0; i < n; i++) p[i] += z[i];
        }
        for (int64_t i = 0; i < n; i++) p[i] /= (double)(h1 - h0);
        return;
    }
    const float *q = view->win_q + (size_t)row * (size_t)view->n_head * (size_t)d;
    for (int32_t e = 0; e < d; e++) {
        double acc = 0.0;
        for (int32_t h = h0; h < h1; h++) acc += q[(size_t)h * (size_t)d + (size_t)e];
        qbar[e] = (float)(acc / (double)(h1 - h0));
    }
    const double scale = 1.0 / sqrt((double)d);
    for (int64_t i = 0; i < n; i++) {
        if (view->pos[i] > view->win_pos[row]) {
            p[i] = -INFINITY;
            continue;
        }
        double acc = 0.0;
        for (int32_t g = g0; g < g1; g++)
            acc += kvp_dot(qbar, view->k + ((size_t)g * (size_t)n + (size_t)i) * (size_t)d, d);
        p[i] = acc / (double)(g1 - g0) * scale;
    }
    kvp_softmax(p, n);
}

/* kvp_nexus_weights over the KV heads [g0, g1) only. */
static nx_status nexus_weights_heads(const struct kv_layer_view *view,
                                     const struct kv_policy_params *params,
                                     const struct kvp_nexus_blocks *bl, int32_t g0, int32_t g1,
                                     double *a, double *ctil, double *w,
                                     struct kvp_arena *arena) {
    const int64_t n = view->n_tokens, m = bl->m, b = params->block;
    if (m <= 0) return NX_STATUS_OK;
    double *z = kvp_take(arena, (size_t)n * sizeof(double));
    double *p = kvp_take(arena, (size_t)n * sizeof(double));
    double *brow = kvp_take(arena, (size_t)m * sizeof(double));
    double *c = kvp_take(arena, (size_t)m * sizeof(double));
    float *qbar = kvp_take(arena, (size_t)view->head_dim * sizeof(float));
    if (!z || !p || !brow || !c || !qbar) return NX_STATUS_INVALID_ARG;
    for (int64_t j = 0; j < m; j++) a[j] = c[j] = 0.0;
    const int32_t walk_from = NX_MAX(0, view->n_win - NX_MAX(params->nexus_walk, 0));
    int32_t used = 0;
    for (int32_t row = 0; row < view->n_win; row++) {
        aggregated_row(view, params->nexus_mean_vectors, row, g0, g1, z, p, qbar);
        double tot = 0.0;
        for (int64_t j = 0; j < m; j++) {
            const double *pb = p + (bl->n_sink + j) * b;
            double sum = 0.0;
            for (int64_t i = 0; i < b; i++) sum += pb[i];
            brow[j] = sum;
            tot += sum;
        }
        if (!(tot > 0.0)) continue;
        for (int64_t j = 0; j < m; j++) brow[j] /= tot;
        used++;
        for (int64_t j = 0; j < m; j++) a[j] += brow[j];
        if (row >= walk_from) walk_step(brow, c, m);
    }
    for (int64_t j = 0; j < m && used > 0; j++) a[j] /= (double)used;
    normalise_l1(c, ctil, m);
    const double lambda = params->nexus_lambda, eps = params->nexus_eps;
    const double scale = params->nexus_w_scale;
    for (int64_t j = 0; j < m; j++) {
        double r = m > 1 ? (double)j / (double)(m - 1) : 1.0;
        w[j] = (a[j] + lambda * ctil[j] + eps * r) * scale;
    }
    return NX_STATUS_OK;
}

nx_status kvp_nexus_weights(const struct kv_layer_view *view,
                            const struct kv_policy_params *params,
                            const struct kvp_nexus_blocks *bl, double *a, double *ctil,
                            double *w, struct kvp_arena *arena) {
    return nexus_weights_heads(view, params, bl, 0, view->n_head_kv, a, ctil, w, arena);
}

uint64_t kvp_nexus_stream(const struct kv_policy_params *params) {
    return params->nexus_fixed_draws ? 0 : params->eviction_index + 1;
}

double kvp_nexus_log_priority(double w, int32_t n, uint64_t seed, uint64_t layer,
                              uint64_t block_id, uint64_t stream) {
    if (!(w > 0.0) || n < 1) return -INFINITY;
    double mx = -INFINITY, sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        double t = log(kvp_u01(kvp_rng_bits(seed, layer, block_id, (uint64_t)i, stream))) / w;
        if (t > mx) {
            sum = sum * exp(mx - t) + 1.0;
            mx = t;
        } else {
            sum += exp(t - mx);
        }
    }
    return mx + log(sum) - log((double)n);
}

/* Candidate priorities of the KV heads [g0, g1) into lp[0..m): reservoir keys, the weights
   themselves (select_topk), or recency without a window. */
static nx_status nexus_priorities(const struct kv_layer_view *view,
                                  const struct kv_policy_params *params,
                                  const struct kvp_nexus_blocks *bl, int32_t g0, int32_t g1,
                                  double *a, double *ctil, double *w, double *lp,
                                  struct kvp_arena arena) {
    const int64_t m = bl->m, b = params->block;
    if (!kvp_has_window(view) || m <= 0) {
        for (int64_t j = 0; j < m; j++) lp[j] = (double)j;
        return NX_STATUS_OK;
    }
    nx_status st = nexus_weights_heads(view, params, bl, g0, g1, a, ctil, w, &arena);
    if (st != NX_STATUS_OK) return st;
    const uint64_t stream = kvp_nexus_stream(params);
    for (int64_t j = 0; j < m; j++) {
        uint64_t id = (uint64_t)(int64_t)view->pos[(bl->n_sink + j) * b];
        lp[j] = params->nexus_select_topk
                    ? (w[j] > 0.0 ? w[j] : -INFINITY)
                    : kvp_nexus_log_priority(w[j], params->nexus_n, params->seed,
                                             (uint64_t)view->layer, id, stream);
    }
    return NX_STATUS_OK;
}

static nx_status nexus_select(const struct kv_layer_view *view, int64_t keep,
                              const struct kv_policy_params *params, void *scratch,
                              struct kv_selection *out) {
    nx_status st;
    if (kvp_prologue(view, keep, params, out, &st)) return st;
    const int64_t n = view->n_tokens, b = params->block;
    struct kvp_nexus_blocks bl;
    kvp_nexus_layout(n, keep, params, &bl);
    const int64_t m = bl.m;
    struct kvp_arena arena;
    kvp_arena_init(&arena, scratch, kv_policy_scratch_bytes(view));
    double *a = kvp_take(&arena, (size_t)m * sizeof(double) + 1);
    double *ctil = kvp_take(&arena, (size_t)m * sizeof(double) + 1);
    double *w = kvp_take(&arena, (size_t)m * sizeof(double) + 1);
    double *lp = kvp_take(&arena, (size_t)m * sizeof(double) + 1);
    int64_t *idx = kvp_take(&arena, (size_t)m * sizeof(int64_t) + 1);
    if (!a || !ctil || !w || !lp || !idx) return NX_STATUS_INVALID_ARG;
    /* one selection for every head, or (per_head) one per KV head from its own query group */
    const int32_t n_sel = params->nexus_per_head ? view->n_head_kv : 1;
    for (int32_t g = 0; g < n_sel; g++) {
        const int32_t g1 = params->nexus_per_head ? g + 1 : view->n_head_kv;
        st = nexus_priorities(view, params, &bl, params->nexus_per_head ? g : 0, g1, a, ctil,
                              w, lp, arena);
        if (st != NX_STATUS_OK) return st;
        for (int64_t j = 0; j < m; j++) idx[j] = j;
        kvp_topk(lp, idx, m, bl.k, true);
        uint8_t *row = out->keep + (size_t)g * (size_t)n;
        memset(row, 0, (size_t)n);
        memset(row, 1, (size_t)NX_MIN(bl.n_sink * b, n));
        if (bl.first_recent * b < n)
            memset(row + bl.first_recent * b, 1, (size_t)(n - bl.first_recent * b));
        for (int64_t t = 0; t < bl.k; t++) memset(row + (bl.n_sink + idx[t]) * b, 1, (size_t)b);
    }
    for (int32_t h = n_sel; h < view->n_head_kv; h++)
        memcpy(out->keep + (size_t)h * (size_t)n, out->keep, (size_t)n);
    return NX_STATUS_OK;
}

const struct kv_policy kv_policy_nexus = {
    .name = "nexus",
    .needs_acc_attn = false,
    .per_head = false,
    .block_granular = true,
    .select = nexus_select,
};
