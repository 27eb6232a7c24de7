/*
 * kv_policy.c - the policy registry, defaults, scratch sizing and the helpers the policies share
 * (declared in kv_policy_impl.h).
 *
 * DESIGN
 * - Policies are pure functions of (view, keep, params): no global mutable state, no
 *   allocation. Work memory comes from the caller's scratch buffer through a bump allocator
 *   (kvp_arena); kv_policy_scratch_bytes() bounds what any policy takes:
 *     doubles: n_head_kv * n_tokens (scores) + n_head_kv * n_tokens (ada-kv's flattened index
 *     list, int64) + 8 * n_tokens (rows, accumulators, pooled, nexus block arrays, index list)
 *     + 2 * n_head_kv (ada-kv quotas) + head_dim (nexus reading B's mean query) + 64; plus 1024
 *     bytes of alignment slack (each piece is 64-byte aligned).
 * - Attention rows are computed in double from float dot products (8 float partial sums so the
 *   compiler can vectorise; about 1e-7 relative error, far below any real score gap). The
 *   softmax runs over all cached keys; keys at positions after the window query's position get
 *   probability 0 (causal mask).
 * - Top-k is a quickselect over an index list with a strict total order (score descending, then
 *   lower index first; Nexus asks for the newer-first tie rule), so the result does not depend
 *   on the input order or on the platform's sort; NaN scores rank below everything.
 * - Argument checks (kvp_check): view, params and out non-NULL, out->keep non-NULL; keep > 0;
 *   n_head >= 1, n_head_kv >= 1, n_head % n_head_kv == 0, head_dim >= 1, n_layer >= 1,
 *   0 <= layer < n_layer, n_tokens >= 0, n_win >= 0; pos and k present when n_tokens > 0;
 *   win_pos and win_q present when n_win > 0; block >= 1, sink >= 0, recent >= 0,
 *   pool_kernel >= 1, pyramid_beta > 0, adakv_alpha in [0, 1], nexus_walk >= 0, nexus_n >= 1,
 *   nexus_lambda >= 0, nexus_eps >= 0, nexus_w_scale > 0 (all finite). Anything else:
 *   NX_STATUS_INVALID_ARG and the selection is untouched.
 * - The RNG is counter-based (no state): 64 bits = a chain of splitmix64 finalisers over
 *   (seed, layer, block id, stream, draw index), so a draw depends only on its key.
 */
#include <math.h>
#include <string.h>

#include "kern/kern.h"
#include "kv/kv_policy_impl.h"

static const struct kv_policy *const g_policies[] = {
    &kv_policy_full,   &kv_policy_streaming, &kv_policy_h2o,  &kv_policy_snapkv,
    &kv_policy_pyramidkv, &kv_policy_adakv, &kv_policy_morphkv, &kv_policy_tova,
    &kv_policy_nexus,  &kv_policy_random, &kv_policy_bottomk,
    &kv_policy_oracle,
};

const struct kv_policy *kv_policy_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < NX_ARRAY_LEN(g_policies); i++)
        if (strcmp(g_policies[i]->name, name) == 0) return g_policies[i];
    return NULL;
}

bool kv_policy_needs_values(const struct kv_policy *policy, const struct kv_policy_params *params) {
    return policy == &kv_policy_oracle && params->oracle_values;
}

struct kv_policy_params kv_policy_default_params(void) {
    struct kv_policy_params p;
    memset(&p, 0, sizeof(p));
    p.block = 32;
    p.sink = 32;
    p.recent = 32;
    p.pool_kernel = 7;
    p.pool_max = true;
    p.pyramid_beta = 20.0f;
    p.adakv_alpha = 0.2f;
    p.morph_max = false;
    p.nexus_walk = 3;
    p.nexus_lambda = 0.5f;
    p.nexus_eps = 1e-6f;
    p.nexus_n = 5;
    p.nexus_w_scale = 1.0f;
    p.nexus_fixed_draws = true;
    p.nexus_mean_vectors = false;
    p.seed = 0x6e657875735f6b76ull; /* "nexus_kv" */
    p.eviction_index = 0;
    return p;
}

/* ---- options by name ---------------------------------------------------------------------- */

nx_status kv_policy_set_option(struct kv_policy_params *pp, const char *name, double v) {
    if (!name || !isfinite(v)) return NX_STATUS_INVALID_ARG;
    bool flag = v == 0 || v == 1, whole = v == floor(v);
    if (strcmp(name, "nexus.walk") == 0) {
        if (!whole || v < 0 || v > 256) return NX_STATUS_INVALID_ARG;
        pp->nexus_walk = (int32_t)v;
    } else if (strcmp(name, "nexus.lambda") == 0) {
        if (!(v >= 0)) return NX_STATUS_INVALID_ARG;
        pp->nexus_lambda = (float)v;
    } else if (strcmp(name, "nexus.eps") == 0) {
        if (!(v >= 0)) return NX_STATUS_INVALID_ARG;
        pp->nexus_eps = (float)v;
    } else if (strcmp(name, "nexus.n") == 0) {
        if (!whole || v < 1 || v > 100000) return NX_STATUS_INVALID_ARG;
        pp->nexus_n = (int32_t)v;
    } else if (strcmp(name, "nexus.w_scale") == 0) {
        if (!(v > 0)) return NX_STATUS_INVALID_ARG;
        pp->nexus_w_scale = (float)v;
    } else if (strcmp(name, "nexus.fresh_draws") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->nexus_fixed_draws = v == 0;
    } else if (strcmp(name, "nexus.mean_vectors") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->nexus_mean_vectors = v == 1;
    } else if (strcmp(name, "nexus.select_topk") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->nexus_select_topk = v == 1;
    } else if (strcmp(name, "nexus.per_head") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->nexus_per_head = v == 1;
    } else if (strcmp(name, "nexus.match_kv") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->nexus_match_kv = v == 1;
    } else if (strcmp(name, "oracle.values") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->oracle_values = v == 1;
    } else if (strcmp(name, "pool.kernel") == 0) {
        if (!whole || v < 1 || v > 1024) return NX_STATUS_INVALID_ARG;
        pp->pool_kernel = (int32_t)v;
    } else if (strcmp(name, "pool.max") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->pool_max = v == 1;
    } else if (strcmp(name, "pyramidkv.beta") == 0) {
        if (!(v > 0)) return NX_STATUS_INVALID_ARG;
        pp->pyramid_beta = (float)v;
    } else if (strcmp(name, "adakv.alpha") == 0) {
        if (!(v >= 0 && v <= 1)) return NX_STATUS_INVALID_ARG;
        pp->adakv_alpha = (float)v;
    } else if (strcmp(name, "morphkv.max") == 0) {
        if (!flag) return NX_STATUS_INVALID_ARG;
        pp->morph_max = v == 1;
    } else {
        return NX_STATUS_INVALID_ARG;
    }
    return NX_STATUS_OK;
}

size_t kv_policy_scratch_bytes(const struct kv_layer_view *view) {
    if (!view) return 0;
    size_t n = view->n_tokens > 0 ? (size_t)view->n_tokens : 0;
    size_t hkv = view->n_head_kv > 0 ? (size_t)view->n_head_kv : 0;
    size_t hd = view->head_dim > 0 ? (size_t)view->head_dim : 0;
    size_t a, b, words, bytes;
    if (!nx_mul_size(hkv, n, &a) || !nx_mul_size(a, 2, &a)) return SIZE_MAX;
    if (!nx_mul_size(n, 8, &b) || !nx_add_size(a, b, &words)) return SIZE_MAX;
    if (!nx_add_size(words, 2 * hkv + hd + 64, &words)) return SIZE_MAX;
    if (view->v && hkv > 0) {
        /* the value-aware oracle's greedy state (policy_bounds.c): per query row of one KV
           head's group 3 doubles per token and 4 more, plus 2 per token */
        size_t rows, cells, extra;
        size_t g = view->n_head > 0 ? (size_t)view->n_head / hkv : 0;
        size_t w = view->n_win > 0 ? (size_t)view->n_win : 0;
        if (!nx_mul_size(g, w, &rows) || !nx_mul_size(rows, n, &cells) ||
            !nx_mul_size(cells, 3, &cells) || !nx_mul_size(rows, 4, &extra) ||
            !nx_add_size(cells, extra, &extra) || !nx_add_size(extra, 2 * n + 64, &extra) ||
            !nx_add_size(words, extra, &words))
            return SIZE_MAX;
    }
    if (!nx_mul_size(words, 8, &bytes) || !nx_add_size(bytes, 1024, &bytes)) return SIZE_MAX;
    return bytes;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t kv_policy_min_keep(const struct kv_policy *policy, const struct kv_policy_params *params) {
    if (!policy || !params) return 1;
    int64_t sink = NX_MAX(params->sink, 0), recent = NX_MAX(params->recent, 0);
    int64_t b = NX_MAX(params->block, 1);
    if (policy == &kv_policy_full) return 1;
    if (policy == &kv_policy_streaming) return NX_MAX(sink + recent + b - 1, 1);
    if (policy == &kv_policy_nexus) return b * (ceil_div(sink, b) + ceil_div(recent, b) + 1);
    return NX_MAX(sink + recent, 1);
}

int64_t kv_policy_layer_keep(const struct kv_policy *policy, const struct kv_layer_view *view,
                             int64_t keep, const struct kv_policy_params *params) {
    if (policy == &kv_policy_pyramidkv && view && params)
        return kvp_pyramid_keep(view, keep, params);
    return keep;
}

/* ---- scratch ------------------------------------------------------------------------------ */

void kvp_arena_init(struct kvp_arena *a, void *scratch, size_t bytes) {
    a->p = scratch;
    a->left = scratch ? bytes : 0;
}

void *kvp_take(struct kvp_arena *a, size_t n) {
    if (!a->p) return NULL;
    size_t pad = (size_t)(-(uintptr_t)a->p & 63);
    size_t need;
    if (!nx_add_size(pad, n, &need) || need > a->left) return NULL;
    void *r = a->p + pad;
    a->p += need;
    a->left -= need;
    return r;
}

/* ---- checks ------------------------------------------------------------------------------- */

static bool finite_ge(float x, float lo) { return isfinite(x) && x >= lo; }

nx_status kvp_check(const struct kv_layer_view *view, int64_t keep,
                    const struct kv_policy_params *params, const struct kv_selection *out) {
    if (!view || !params || !out || !out->keep) return NX_STATUS_INVALID_ARG;
    if (keep <= 0) return NX_STATUS_INVALID_ARG;
    const struct kv_layer_view *v = view;
    if (v->n_head < 1 || v->n_head_kv < 1 || v->n_head % v->n_head_kv != 0 || v->head_dim < 1)
        return NX_STATUS_INVALID_ARG;
    if (v->n_layer < 1 || v->layer < 0 || v->layer >= v->n_layer) return NX_STATUS_INVALID_ARG;
    if (v->n_tokens < 0 || v->n_win < 0) return NX_STATUS_INVALID_ARG;
    if (v->n_tokens > 0 && (!v->pos || !v->k)) return NX_STATUS_INVALID_ARG;
    if (v->n_win > 0 && (!v->win_pos || !v->win_q)) return NX_STATUS_INVALID_ARG;
    const struct kv_policy_params *p = params;
    if (p->block < 1 || p->sink < 0 || p->recent < 0 || p->pool_kernel < 1)
        return NX_STATUS_INVALID_ARG;
    if (!finite_ge(p->pyramid_beta, 0.0f) || p->pyramid_beta == 0.0f) return NX_STATUS_INVALID_ARG;
    if (!finite_ge(p->adakv_alpha, 0.0f) || p->adakv_alpha > 1.0f) return NX_STATUS_INVALID_ARG;
    if (p->nexus_walk < 0 || p->nexus_n < 1) return NX_STATUS_INVALID_ARG;
    if (!finite_ge(p->nexus_lambda, 0.0f) || !finite_ge(p->nexus_eps, 0.0f))
        return NX_STATUS_INVALID_ARG;
    if (!finite_ge(p->nexus_w_scale, 0.0f) || p->nexus_w_scale == 0.0f)
        return NX_STATUS_INVALID_ARG;
    return NX_STATUS_OK;
}

void kvp_protected(int64_t n, const struct kv_policy_params *params, int64_t *s, int64_t *r) {
    *s = NX_MIN((int64_t)params->sink, n);
    *r = NX_MIN((int64_t)params->recent, n - *s);
}

bool kvp_prologue(const struct kv_layer_view *view, int64_t keep,
                  const struct kv_policy_params *params, struct kv_selection *out,
                  nx_status *st) {
    *st = kvp_check(view, keep, params, out);
    if (*st != NX_STATUS_OK) return true;
    if (view->n_tokens <= keep) {
        kvp_keep_all(view, out);
        return true;
    }
    return false;
}

void kvp_keep_all(const struct kv_layer_view *view, struct kv_selection *out) {
    if (view->n_tokens > 0)
        memset(out->keep, 1, (size_t)view->n_head_kv * (size_t)view->n_tokens);
}

bool kvp_has_window(const struct kv_layer_view *view) {
    return view->n_win > 0 && view->win_q && view->win_pos;
}

void kvp_recency_scores(int64_t n, int32_t n_rows, double *score) {
    for (int32_t h = 0; h < n_rows; h++)
        for (int64_t i = 0; i < n; i++) score[(size_t)h * (size_t)n + (size_t)i] = (double)i;
}

/* ---- top-k -------------------------------------------------------------------------------- */

/* True when entry a ranks before entry b. */
static inline bool ranks_before(const double *score, int64_t a, int64_t b, bool newer_first) {
    double x = score[a], y = score[b];
    if (isnan(x)) x = -INFINITY;
    if (isnan(y)) y = -INFINITY;
    if (x != y) return x > y;
    return newer_first ? a > b : a < b;
}

static void swap_idx(int64_t *idx, int64_t i, int64_t j) {
    int64_t t = idx[i];
    idx[i] = idx[j];
    idx[j] = t;
}

/* Sift-down in a heap whose parents rank after (are worse than) their children. */
static void sift_down(const double *score, int64_t *idx, int64_t root, int64_t end, bool nf) {
    for (;;) {
        int64_t c = 2 * root + 1;
        if (c >= end) return;
        if (c + 1 < end && ranks_before(score, idx[c], idx[c + 1], nf)) c++;
        if (!ranks_before(score, idx[root], idx[c], nf)) return;
        swap_idx(idx, root, c);
        root = c;
    }
}

/* Heap sort of idx[0..n), best first: the worst entry is popped to the back each round. */
static void heap_sort(const double *score, int64_t *idx, int64_t n, bool nf) {
    for (int64_t start = n / 2 - 1; start >= 0; start--) sift_down(score, idx, start, n, nf);
    for (int64_t end = n - 1; end > 0; end--) {
        swap_idx(idx, 0, end);
        sift_down(score, idx, 0, end, nf);
    }
}

void kvp_topk(const double *score, int64_t *idx, int64_t n, int64_t k, bool newer_first) {
    if (k <= 0 || k >= n) return;
    int64_t lo = 0, hi = n - 1;
    int depth = 8;
    for (int64_t m = n; m > 1; m >>= 1) depth += 2;
    while (hi > lo) {
        if (depth-- == 0) {
            heap_sort(score, idx + lo, hi - lo + 1, newer_first);
            return;
        }
        int64_t mid = lo + (hi - lo) / 2;
        /* median of three into mid */
        if (ranks_before(score, idx[mid], idx[lo], newer_first)) swap_idx(idx, mid, lo);
        if (ranks_before(score, idx[hi], idx[lo], newer_first)) swap_idx(idx, hi, lo);
        if (ranks_before(score, idx[hi], idx[mid], newer_first)) swap_idx(idx, hi, mid);
        swap_idx(idx, mid, hi);
        int64_t pivot = idx[hi], store = lo;
        for (int64_t i = lo; i < hi; i++)
            if (ranks_before(score, idx[i], pivot, newer_first)) swap_idx(idx, i, store++);
        swap_idx(idx, store, hi);
        if (store == k) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

void kvp_finish_row(int64_t n, int64_t s, int64_t r, int64_t quota, const double *score,
                    int64_t *idx, uint8_t *row) {
    int64_t m = n - s - r;
    quota = NX_MAX(0, NX_MIN(quota, m));
    memset(row, 0, (size_t)n);
    for (int64_t i = 0; i < s; i++) row[i] = 1;
    for (int64_t i = n - r; i < n; i++) row[i] = 1;
    if (quota == 0) return;
    for (int64_t i = 0; i < m; i++) idx[i] = s + i;
    kvp_topk(score, idx, m, quota, false);
    for (int64_t i = 0; i < quota; i++) row[idx[i]] = 1;
}

nx_status kvp_select_scored(const struct kv_layer_view *view, int64_t keep,
                            const struct kv_policy_params *params, const double *score,
                            bool shared, const int64_t *quota, struct kvp_arena *arena,
                            struct kv_selection *out) {
    int64_t n = view->n_tokens, s, r;
    kvp_protected(n, params, &s, &r);
    int64_t *idx = kvp_take(arena, (size_t)n * sizeof(int64_t));
    if (!idx) return NX_STATUS_INVALID_ARG;
    for (int32_t h = 0; h < view->n_head_kv; h++) {
        uint8_t *row = out->keep + (size_t)h * (size_t)n;
        if (shared && h > 0) {
            memcpy(row, out->keep, (size_t)n);
            continue;
        }
        const double *sc = shared ? score : score + (size_t)h * (size_t)n;
        int64_t q = quota ? quota[h] : keep - s - r;
        kvp_finish_row(n, s, r, q, sc, idx, row);
    }
    return NX_STATUS_OK;
}

/* ---- attention rows ----------------------------------------------------------------------- */

double kvp_dot(const float *a, const float *b, int32_t d) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int32_t i = 0;
    for (; i + 8 <= d; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    double sum = 0.0;
    for (; i < d; i++) sum += (double)a[i] * (double)b[i];
    for (int j = 0; j < 8; j++) sum += (double)acc[j];
    return sum;
}

/* Keys a window query at qpos can see: positions are increasing, so it is a prefix. */
static int64_t visible_keys(const struct kv_layer_view *view, int64_t n_keys, int32_t qpos) {
    int64_t lo = 0, hi = n_keys;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (view->pos[mid] <= qpos) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/*
 * Float logits of the visible keys through the SIMD attention kernel, written into the upper
 * half of z (z holds n_keys doubles = 2 n_keys floats) and widened in place in ascending order
 * (double i covers bytes [8i, 8i+8), float i lives at 4 n_keys + 4i >= 8i: each float is read
 * before anything overwrites it).
 */
static int64_t row_logits_f(const struct kv_layer_view *view, int32_t qh, int32_t row,
                            int64_t n_keys, double *z, float **fl) {
    const int32_t d = view->head_dim, g = qh / (view->n_head / view->n_head_kv);
    const float *q = view->win_q + ((size_t)row * (size_t)view->n_head + (size_t)qh) * (size_t)d;
    const float *k = view->k + (size_t)g * (size_t)view->n_tokens * (size_t)d;
    int64_t nv = visible_keys(view, n_keys, view->win_pos[row]);
    float *f = (float *)z + n_keys;
    kern_attn_scores(NX_TYPE_F32, d, k, (size_t)d * sizeof(float), nv, q, 1,
                     (float)(1.0 / sqrt((double)d)), f, nv > 0 ? nv : 1);
    *fl = f;
    return nv;
}

void kvp_row_logits(const struct kv_layer_view *view, int32_t qh, int32_t row, int64_t n_keys,
                    double *z) {
    float *f;
    int64_t nv = row_logits_f(view, qh, row, n_keys, z, &f);
    for (int64_t i = 0; i < nv; i++) z[i] = (double)f[i];
    for (int64_t i = nv; i < n_keys; i++) z[i] = -INFINITY;
}

bool kvp_row_probs(const struct kv_layer_view *view, int32_t qh, int32_t row, int64_t n_keys,
                   double *z) {
    float *f;
    int64_t nv = row_logits_f(view, qh, row, n_keys, z, &f);
    if (nv > 0) kern_softmax(f, nv);
    for (int64_t i = 0; i < nv; i++) z[i] = (double)f[i];
    for (int64_t i = nv; i < n_keys; i++) z[i] = 0.0;
    return nv > 0;
}

bool kvp_softmax(double *z, int64_t n) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (z[i] > mx) mx = z[i];
    if (mx == -INFINITY) {
        for (int64_t i = 0; i < n; i++) z[i] = 0.0;
        return false;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        z[i] = z[i] == -INFINITY ? 0.0 : exp(z[i] - mx);
        sum += z[i];
    }
    double inv = 1.0 / sum;
    for (int64_t i = 0; i < n; i++) z[i] *= inv;
    return true;
}

void kvp_pool1d(const double *in, double *out, int64_t n, int32_t k, bool max) {
    const int64_t left = k / 2;
    for (int64_t i = 0; i < n; i++) {
        int64_t lo = NX_MAX(i - left, 0), hi = NX_MIN(i - left + k - 1, n - 1);
        double acc = max ? -INFINITY : 0.0;
        for (int64_t j = lo; j <= hi; j++) {
            if (max) acc = in[j] > acc ? in[j] : acc;
            else acc += in[j];
        }
        out[i] = max ? acc : acc / (double)k;
    }
}

/* ---- RNG ---------------------------------------------------------------------------------- */

uint64_t kvp_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t kvp_rng_bits(uint64_t seed, uint64_t layer, uint64_t block, uint64_t draw,
                      uint64_t stream) {
    uint64_t h = kvp_mix64(seed ^ 0x4e58534b56524e47ull);
    h = kvp_mix64(h ^ layer);
    h = kvp_mix64(h ^ block);
    h = kvp_mix64(h ^ stream);
    return kvp_mix64(h ^ draw);
}

double kvp_u01(uint64_t bits) { return ((double)(bits >> 12) + 0.5) * 0x1p-52; }
