/*
 * kv_evict.c - DESIGN: the bridge between the paged cache and the pure policies.
 *
 * Window: per layer a ring of `window` query rows (n_head * head_dim floats) with the position
 * each holds (-1 = empty); the forward pass writes the rows of the newest tokens. A view lists
 * the valid rows oldest first.
 *
 * Views: when every KV head of a layer holds the same positions (always true for shared-selection
 * policies, and for per-head ones until their first compaction) one view covers all heads.
 * Otherwise each KV head gets its own view (n_head_kv = 1, the G query heads of its group), so
 * per-head policies keep working on ragged caches. Policies that move budget between heads
 * (select_ragged: adakv) get all the heads' views at once and are held to the layer total
 * n_head_kv * budget instead of a per-head budget.
 *
 * Buffers: per thread, one worst-case view (keys as floats, positions per head, accumulators,
 * window; values as floats too once a policy that reads them is set), the keep mask and the
 * policy scratch, all sized at init from max_tokens, in one
 * struct kv_evict_bufs a context shares between its sequences' evictors. kv_evict_layer only
 * touches its layer's tables (of its sequence) and its thread's buffers, so layers run in
 * parallel.
 */
#include "kv/kv_evict.h"

#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "kern/kern.h"

struct evict_buf {
    float *k;        /* (n_head_kv, max_tokens, head_dim) */
    float *v;        /* the same for values, or NULL (kv_evict_bufs_want_values) */
    int32_t *pos;    /* (n_head_kv, max_tokens) */
    float *acc;      /* (n_head_kv, max_tokens) */
    float *win_q;    /* (window, n_head, head_dim) */
    int32_t *win_pos; /* (window) */
    uint8_t *keep;   /* (n_head_kv, max_tokens) */
    void *scratch;
    size_t scratch_bytes;
    struct kv_layer_view *views; /* (n_head_kv) ragged views */
    uint8_t **rows;              /* (n_head_kv) their keep rows */
};

struct kv_evict_bufs {
    int n_threads;
    int32_t n_head;
    int32_t window;
    int64_t max_tokens;
    struct evict_buf *bufs; /* (n_threads) */
};

struct kv_evictor {
    struct kv_cache *kv;
    struct kv_evict_params p;
    float *ring;       /* (n_layer, window, n_head * head_dim) */
    int32_t *ring_pos; /* (n_layer, window) */
    int64_t min_keep;
    int64_t rounds;
    atomic_llong evicted;
    atomic_llong skipped;
    double seconds;
};

/* Sequence e's table (layer, head). */
static struct kv_table *seq_table(const struct kv_evictor *e, int layer, int head) {
    return kv_seq_table(e->kv, e->p.seq, layer, head);
}

static size_t qrow(const struct kv_evictor *e) {
    return (size_t)e->p.n_head * (size_t)e->kv->p.head_dim;
}

nx_status kv_evict_bufs_init(const struct kv_cache *kv, int32_t n_head, int32_t window,
                             int n_threads, int64_t max_tokens, struct kv_evict_bufs **out) {
    *out = NULL;
    if (window < 1 || n_head < kv->p.n_head_kv || n_threads < 1 || max_tokens < 1)
        return NX_STATUS_INVALID_ARG;
    struct kv_evict_bufs *e = nx_calloc(1, sizeof *e);
    if (!e) return NX_STATUS_NOMEM;
    e->n_threads = n_threads;
    e->n_head = n_head;
    e->window = window;
    e->max_tokens = max_tokens;
    size_t W = (size_t)window, hd = (size_t)kv->p.head_dim, qr = (size_t)n_head * hd;
    size_t nkv = (size_t)kv->p.n_head_kv, mt = (size_t)max_tokens;
    e->bufs = nx_calloc((size_t)n_threads, sizeof *e->bufs);
    if (!e->bufs) goto nomem;
    struct kv_layer_view worst = {.layer = 0, .n_layer = kv->p.n_layer, .n_head = n_head,
                                  .n_head_kv = kv->p.n_head_kv, .head_dim = kv->p.head_dim,
                                  .n_tokens = max_tokens, .n_win = window};
    for (int t = 0; t < n_threads; t++) {
        struct evict_buf *b = &e->bufs[t];
        b->k = nx_malloc(nkv * mt * hd * sizeof(float));
        b->pos = nx_malloc(nkv * mt * sizeof(int32_t));
        b->acc = nx_malloc(nkv * mt * sizeof(float));
        b->win_q = nx_malloc(W * qr * sizeof(float));
        b->win_pos = nx_malloc(W * sizeof(int32_t));
        b->keep = nx_malloc(nkv * mt);
        b->scratch_bytes = kv_policy_scratch_bytes(&worst);
        b->scratch = nx_malloc_aligned(b->scratch_bytes ? b->scratch_bytes : 64);
        b->views = nx_calloc(nkv, sizeof *b->views);
        b->rows = nx_calloc(nkv, sizeof *b->rows);
        if (!b->k || !b->pos || !b->acc || !b->win_q || !b->win_pos || !b->keep || !b->scratch ||
            !b->views || !b->rows)
            goto nomem;
    }
    *out = e;
    return NX_STATUS_OK;
nomem:
    kv_evict_bufs_free(e);
    return NX_STATUS_NOMEM;
}

void kv_evict_bufs_free(struct kv_evict_bufs *e) {
    if (!e) return;
    if (e->bufs)
        for (int t = 0; t < e->n_threads; t++) {
            struct evict_buf *b = &e->bufs[t];
            nx_free(b->k);
            nx_free(b->v);
            nx_free(b->pos);
            nx_free(b->acc);
            nx_free(b->win_q);
            nx_free(b->win_pos);
            nx_free(b->keep);
            nx_free_aligned(b->scratch);
            nx_free(b->views);
            nx_free(b->rows);
        }
    nx_free(e->bufs);
    nx_free(e);
}

nx_status kv_evict_bufs_want_values(struct kv_evict_bufs *e, const struct kv_cache *kv) {
    if (e->bufs[0].v) return NX_STATUS_OK;
    static const float any_values = 0.0f; /* only v != NULL matters to the size */
    struct kv_layer_view worst = {.layer = 0, .n_layer = kv->p.n_layer, .n_head = e->n_head,
                                  .n_head_kv = kv->p.n_head_kv, .head_dim = kv->p.head_dim,
                                  .n_tokens = e->max_tokens, .n_win = e->window,
                                  .v = &any_values};
    size_t bytes = kv_policy_scratch_bytes(&worst);
    size_t cells = (size_t)kv->p.n_head_kv * (size_t)e->max_tokens * (size_t)kv->p.head_dim;
    float **v = nx_calloc((size_t)e->n_threads, sizeof *v);
    void **sc = nx_calloc((size_t)e->n_threads, sizeof *sc);
    bool ok = v && sc && bytes != SIZE_MAX;
    for (int t = 0; ok && t < e->n_threads; t++) {
        v[t] = nx_malloc(cells * sizeof(float));
        sc[t] = nx_malloc_aligned(bytes);
        ok = v[t] && sc[t];
    }
    if (ok)
        for (int t = 0; t < e->n_threads; t++) { /* all or nothing */
            struct evict_buf *b = &e->bufs[t];
            nx_free_aligned(b->scratch);
            b->scratch = sc[t];
            b->scratch_bytes = bytes;
            b->v = v[t];
        }
    else
        for (int t = 0; v && sc && t < e->n_threads; t++) {
            nx_free(v[t]);
            nx_free_aligned(sc[t]);
        }
    nx_free(v);
    nx_free(sc);
    return ok ? NX_STATUS_OK : NX_STATUS_NOMEM;
}

int kv_evict_bufs_threads(const struct kv_evict_bufs *b) { return b->n_threads; }

nx_status kv_evict_init(struct kv_cache *kv, const struct kv_evict_params *p,
                        struct kv_evictor **out) {
    *out = NULL;
    if (!p->policy || p->window < 1 || p->n_head < kv->p.n_head_kv || p->seq < 0 ||
        p->seq >= kv->p.n_seq)
        return NX_STATUS_INVALID_ARG;
    struct kv_evictor *e = nx_calloc(1, sizeof *e);
    if (!e) return NX_STATUS_NOMEM;
    e->kv = kv;
    e->p = *p;
    e->min_keep = kv_policy_min_keep(p->policy, &p->pp);
    size_t nl = (size_t)kv->p.n_layer, W = (size_t)p->window;
    e->ring = nx_calloc(nl * W * qrow(e), sizeof(float));
    e->ring_pos = nx_malloc(nl * W * sizeof(int32_t));
    if (!e->ring || !e->ring_pos) {
        kv_evict_free(e);
        return NX_STATUS_NOMEM;
    }
    kv_evict_reset(e);
    *out = e;
    return NX_STATUS_OK;
}

void kv_evict_free(struct kv_evictor *e) {
    if (!e) return;
    nx_free(e->ring);
    nx_free(e->ring_pos);
    nx_free(e);
}

void kv_evict_reset(struct kv_evictor *e) {
    size_t n = (size_t)e->kv->p.n_layer * (size_t)e->p.window;
    for (size_t i = 0; i < n; i++) e->ring_pos[i] = -1;
}

float *kv_evict_window_slot(struct kv_evictor *e, int layer, int32_t pos) {
    size_t slot = (size_t)layer * (size_t)e->p.window + (size_t)(pos % e->p.window);
    return e->ring + slot * qrow(e);
}

void kv_evict_window_mark(struct kv_evictor *e, int layer, int32_t pos) {
    e->ring_pos[(size_t)layer * (size_t)e->p.window + (size_t)(pos % e->p.window)] = pos;
}

void kv_evict_forget_from(struct kv_evictor *e, int32_t pos) {
    size_t n = (size_t)e->kv->p.n_layer * (size_t)e->p.window;
    for (size_t i = 0; i < n; i++)
        if (e->ring_pos[i] >= pos) e->ring_pos[i] = -1;
}

int64_t kv_evict_budget(const struct kv_evictor *e, int64_t seen) {
    int64_t b = e->p.budget > 0 ? e->p.budget : (int64_t)((double)e->p.density * (double)seen);
    return b < e->min_keep ? e->min_keep : b;
}


bool kv_evict_due(const struct kv_evictor *e, int64_t seen, bool prompt_chunk) {
    if (strcmp(e->p.policy->name, "full") == 0) return false;
    if (!prompt_chunk && e->p.regime != NX_KV_REGIME_STREAM) return false;
    int64_t budget = kv_evict_budget(e, seen);
    int64_t slack = prompt_chunk ? 0 : e->kv->p.block - 1;
    const struct kv_cache *kv = e->kv;
    for (int il = 0; il < kv->p.n_layer; il++) {
        /* the layer's budget (pyramid layers differ); L = tokens seen */
        struct kv_layer_view v = {.layer = il, .n_layer = kv->p.n_layer, .n_tokens = seen};
        int64_t lk = kv_policy_layer_keep(e->p.policy, &v, budget, &e->p.pp), total = 0;
        for (int h = 0; h < kv->p.n_head_kv; h++) {
            int64_t n = seq_table(e, il, h)->n_tokens;
            if (!e->p.policy->select_ragged && n > lk + slack) return true;
            total += n;
        }
        if (e->p.policy->select_ragged && total > kv->p.n_head_kv * (lk + slack)) return true;
    }
    return false;
}

static int32_t pos_at(const struct kv_cache *kv, const struct kv_table *t, int64_t i) {
    return kv_block_pos(kv, kv_slot_block(kv, t, i))[i % kv->p.block];
}

/* Gather head h's keys (as floats), accumulators and (optionally) values and positions into the
 * buffers. */
static void gather_head(const struct kv_cache *kv, const struct kv_table *t, float *k, float *v,
                        float *acc, int32_t *pos) {
    const int64_t B = kv->p.block, hd = kv->p.head_dim;
    for (int64_t i0 = 0; i0 < t->n_tokens; i0 += B) {
        int32_t b = t->blocks[i0 / B];
        int64_t n = NX_MIN(B, t->n_tokens - i0);
        kern_load_kv(kv->p.type, n * hd, kv_block_k(kv, b), k + i0 * hd);
        if (v) kern_load_kv(kv->p.type, n * hd, kv_block_v(kv, b), v + i0 * hd);
        if (acc && kv->acc_pool) memcpy(acc + i0, kv_block_acc(kv, b), sizeof(float) * (size_t)n);
        if (pos) memcpy(pos + i0, kv_block_pos(kv, b), sizeof(int32_t) * (size_t)n);
    }
}

/* The layer's window rows oldest first; g0..g0+ng heads of each row. Returns the row count. */
static int32_t gather_window(const struct kv_evictor *e, int layer, int g0, int ng, float *q,
                             int32_t *qpos) {
    const int32_t W = e->p.window;
    const int32_t *rp = e->ring_pos + (size_t)layer * (size_t)W;
    int32_t idx[256];
    int32_t n = 0;
    for (int32_t s = 0; s < W && n < 256; s++) {
        if (rp[s] < 0) continue;
        int32_t j = n++;
        while (j > 0 && rp[idx[j - 1]] > rp[s]) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = s;
    }
    size_t hd = (size_t)e->kv->p.head_dim;
    for (int32_t r = 0; r < n; r++) {
        const float *src = e->ring + ((size_t)layer * (size_t)W + (size_t)idx[r]) * qrow(e);
        memcpy(q + (size_t)r * (size_t)ng * hd, src + (size_t)g0 * hd,
               sizeof(float) * (size_t)ng * hd);
        qpos[r] = rp[idx[r]];
    }
    return n;
}

static bool heads_aligned(const struct kv_evictor *e, int layer) {
    const struct kv_cache *kv = e->kv;
    const struct kv_table *t0 = seq_table(e, layer, 0);
    for (int h = 1; h < kv->p.n_head_kv; h++) {
        const struct kv_table *t = t0 + h;
        if (t->n_tokens != t0->n_tokens) return false;
        for (int64_t i = 0; i < t->n_tokens; i++)
            if (pos_at(kv, t, i) != pos_at(kv, t0, i)) return false;
    }
    return true;
}

/* A layer whose heads diverged, for a policy that allocates across heads: every head's view at
 * once, held to the layer total. */
static void evict_ragged(struct kv_evictor *e, struct kv_evict_bufs *eb, int layer,
                         int64_t budget, int ith) {
    struct kv_cache *kv = e->kv;
    struct evict_buf *b = &eb->bufs[ith];
    const int nkv = kv->p.n_head_kv, hd = kv->p.head_dim, G = e->p.n_head / nkv;
    const size_t mt = (size_t)eb->max_tokens, W = (size_t)e->p.window;
    struct kv_table *tabs = seq_table(e, layer, 0);
    struct kv_policy_params pp = e->p.pp;
    pp.eviction_index = (uint64_t)e->rounds;
    struct kv_layer_view *views = b->views;
    uint8_t **rows = b->rows;
    const bool want_v = kv_policy_needs_values(e->p.policy, &pp) && b->v;
    int64_t total = 0, last = 0;
    for (int h = 0; h < nkv; h++) {
        int64_t n = tabs[h].n_tokens;
        total += n;
        if (n > 0) last = NX_MAX(last, (int64_t)pos_at(kv, &tabs[h], n - 1) + 1);
    }
    struct kv_layer_view lv = {.layer = layer, .n_layer = kv->p.n_layer, .n_tokens = last};
    if (total <= nkv * kv_policy_layer_keep(e->p.policy, &lv, budget, &pp)) return;
    for (int h = 0; h < nkv; h++) {
        float *k = b->k + (size_t)h * mt * (size_t)hd, *acc = b->acc + (size_t)h * mt;
        float *v = want_v ? b->v + (size_t)h * mt * (size_t)hd : NULL;
        int32_t *pos = b->pos + (size_t)h * mt;
        float *wq = b->win_q + (size_t)h * W * (size_t)G * (size_t)hd;
        int32_t *wp = b->win_pos; /* the same positions for every head */
        gather_head(kv, &tabs[h], k, v, acc, pos);
        views[h] = (struct kv_layer_view){.layer = layer, .n_layer = kv->p.n_layer, .n_head = G,
                                          .n_head_kv = 1, .head_dim = hd,
                                          .n_tokens = tabs[h].n_tokens, .pos = pos, .k = k, .v = v,
                                          .win_q = wq, .win_pos = wp,
                                          .acc_attn = e->p.policy->needs_acc_attn ? acc : NULL};
        views[h].n_win = gather_window(e, layer, h * G, G, wq, wp);
        rows[h] = b->keep + (size_t)h * mt;
    }
    if (e->p.policy->select_ragged(views, nkv, budget, &pp, b->scratch, b->scratch_bytes, rows) !=
        NX_STATUS_OK)
        return;
    for (int h = 0; h < nkv; h++) {
        int64_t before = tabs[h].n_tokens;
        if (kv_compact(kv, &tabs[h], rows[h]) != NX_STATUS_OK) atomic_fetch_add(&e->skipped, 1);
        atomic_fetch_add(&e->evicted, before - tabs[h].n_tokens);
    }
}

void kv_evict_layer(struct kv_evictor *e, struct kv_evict_bufs *eb, int layer, int64_t budget,
                    int ith) {
    struct kv_cache *kv = e->kv;
    struct evict_buf *b = &eb->bufs[ith];
    const struct kv_policy *pol = e->p.policy;
    const int nkv = kv->p.n_head_kv, hd = kv->p.head_dim, G = e->p.n_head / nkv;
    struct kv_table *tabs = seq_table(e, layer, 0);
    struct kv_policy_params pp = e->p.pp;
    pp.eviction_index = (uint64_t)e->rounds;
    bool aligned = heads_aligned(e, layer);
    const bool want_v = kv_policy_needs_values(pol, &pp) && b->v;
    if (!aligned && pol->select_ragged) {
        evict_ragged(e, eb, layer, budget, ith);
        return;
    }
    int n_views = aligned ? 1 : nkv;
    for (int vi = 0; vi < n_views; vi++) {
        int h0 = aligned ? 0 : vi, nh = aligned ? nkv : 1;
        struct kv_table *t0 = &tabs[h0];
        int64_t n = t0->n_tokens;
        struct kv_layer_view view = {.layer = layer, .n_layer = kv->p.n_layer,
                                     .n_head = aligned ? e->p.n_head : G, .n_head_kv = nh,
                                     .head_dim = hd, .n_tokens = n, .pos = b->pos, .k = b->k,
                                     .v = want_v ? b->v : NULL, .win_q = b->win_q,
                                     .win_pos = b->win_pos,
                                     .acc_attn = pol->needs_acc_attn ? b->acc : NULL};
        if (n == 0) continue;
        /* the layer's budget from the stream length (pyramid layers differ); skip when within */
        struct kv_layer_view lv = {.layer = layer, .n_layer = kv->p.n_layer,
                                   .n_tokens = NX_MAX(n, (int64_t)pos_at(kv, t0, n - 1) + 1)};
        if (n <= kv_policy_layer_keep(pol, &lv, budget, &pp)) continue;
        for (int h = 0; h < nh; h++)
            gather_head(kv, &t0[h], b->k + (size_t)h * (size_t)n * (size_t)hd,
                        want_v ? b->v + (size_t)h * (size_t)n * (size_t)hd : NULL,
                        b->acc + (size_t)h * (size_t)n, h == 0 ? b->pos : NULL);
        view.n_win = gather_window(e, layer, aligned ? 0 : h0 * G, aligned ? e->p.n_head : G,
                                   b->win_q, b->win_pos);
        struct kv_selection sel = {.keep = b->keep};
        if (pol->select(&view, budget, &pp, b->scratch, &sel) != NX_STATUS_OK) continue;
        for (int h = 0; h < nh; h++) {
            struct kv_table *t = &t0[h];
            int64_t before = t->n_tokens;
            if (kv_compact(kv, t, b->keep + (size_t)h * (size_t)n) != NX_STATUS_OK)
                atomic_fetch_add(&e->skipped, 1);
            atomic_fetch_add(&e->evicted, before - t->n_tokens);
        }
    }
}

void kv_evict_round_done(struct kv_evictor *e, double seconds) {
    e->rounds++;
    e->seconds += seconds;
}

int64_t kv_evict_rounds(const struct kv_evictor *e) { return e->rounds; }
int64_t kv_evict_tokens_evicted(const struct kv_evictor *e) { return atomic_load(&e->evicted); }
double kv_evict_seconds(const struct kv_evictor *e) { return e->seconds; }
int64_t kv_evict_skipped(const struct kv_evictor *e) { return atomic_load(&e->skipped); }
const struct kv_evict_params *kv_evict_params_of(const struct kv_evictor *e) { return &e->p; }
