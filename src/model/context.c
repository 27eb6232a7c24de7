/*
 * context.c - DESIGN: an nx_ctx owns one sequence's KV cache, every work buffer the forward
 * pass needs for a batch of up to n_batch tokens (sized once at init: no allocation while
 * decoding; only a request for logits of more rows than ever before grows the logits buffer),
 * and a persistent thread pool.
 *
 * The forward pass is straight-line code (llama2.c style) run by every pool thread at once
 * (forward_worker). Work is split deterministically: token rows for norms/quantization, output
 * rows for matrix products (claimed in chunks, see mm_phase), (token, head) pairs for RoPE and
 * (token, KV head) units for attention; barriers separate
 * dependent steps. Each output element is computed by exactly one thread in a fixed order, so the
 * logits do not depend on the number of threads.
 *
 * KV cache: a paged pool (kv/kv_cache.h), one block table per (layer, KV head); keys are
 * stored after RoPE at their absolute positions and attention walks the table's blocks, the
 * G query heads of a KV head together. With a budget (kv_density / kv_budget and a policy),
 * kv/kv_evict.c compacts the tables after prompt chunks (and, in the stream regime, whenever a
 * layer holds a block more than its budget); the forward pass feeds it the newest queries and,
 * for H2O, accumulated attention. Eviction rounds run layers in parallel on the same pool.
 */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/threadpool.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "kern/types.h"
#include "kv/kv_cache.h"
#include "kv/kv_evict.h"
#include "kv/kv_policy.h"
#include "model/context.h"
#include "model/model.h"


struct nx_ctx {
    const struct nx_model *model;
    struct nx_ctx_params p;
    struct nx_pool *pool;

    struct kv_cache *kv; /* paged K/V blocks, one table per (layer, KV head) */
    int32_t n_past;      /* positions processed so far (the next token's position) */
    int64_t max_tokens;  /* most tokens one table can hold (its share of the pool) */
    struct kv_evictor *ev; /* NULL when nothing is ever evicted */
    bool acc_attn;       /* accumulate attention per cached token (h2o) */
    char policy_name[32];
    struct kv_policy_params pp; /* the policy's parameters, from nx_ctx_params */

    /* work buffers for up to n_batch tokens */
    float *x;      /* (n_batch, n_embd) residual stream */
    float *xn;     /* (n_batch, max(n_embd, qd)) normed input / attention output */
    float *q;      /* (n_batch, qd) */
    float *k;      /* (n_batch, kvd) */
    float *v;      /* (n_batch, kvd) */
    float *ffa;    /* (n_batch, max(n_ff, n_embd)) gate / projection output */
    float *ffb;    /* (n_batch, n_ff) up */
    unsigned char *xq_a; /* (n_batch, xq_row) activations prepared for a weight type */
    unsigned char *xq_b;
    size_t xq_row;
    float *rope_cs;  /* (n_batch, n_rot/2, 2) cos, sin */
    float *scores;   /* (n_threads_max, gqa, max_tokens) attention probabilities */
    float *att_tmp;  /* (n_threads_max, gqa, head_dim) per-block attention output */
    int n_threads_max;

    float *logits;   /* (logits_cap, n_vocab) */
    int32_t logits_cap;
    int32_t logits_rows;  /* rows kept by the last decode */
    bool logits_all;
    int32_t last_n;       /* tokens in the last decode call */
    atomic_llong chunk_ctr; /* matmul chunk claims of the current pass (see mm_phase) */

    /* the current job */
    const nx_token *job_tok;
    int32_t job_n;
    int32_t job_pos0;
    int32_t job_out0;     /* first token index whose logits are kept */
    float *job_logits;

    char err[256];
};

/* ---- small ops ---- */

static void rmsnorm(float *y, const float *x, const float *w, int64_t n, float eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s * w[i];
}

static void rope_apply(float *x, const float *cs, int n_rot, bool neox) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        int i0 = neox ? i : 2 * i;
        int i1 = neox ? i + half : 2 * i + 1;
        float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

/* [start, end) of `n` items for thread ith of nth, in multiples of `align` items. */
static void split(int64_t n, int64_t align, int ith, int nth, int64_t *start, int64_t *end) {
    int64_t blocks = (n + align - 1) / align;
    int64_t b0 = blocks * ith / nth, b1 = blocks * (ith + 1) / nth;
    *start = NX_MIN(b0 * align, n);
    *end = NX_MIN(b1 * align, n);
}

/* Prepare activation rows [t0,t1) of src (row length k, stride lds floats) for weight type wt. */
static void prep_rows(struct nx_ctx *c, unsigned char *xq, enum nx_type wt, const float *src,
                      int64_t lds, int64_t k, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) kern_quantize_act(wt, src + t * lds, xq + t * c->xq_row, k);
}

/*
 * Matrix-product phases with dynamic scheduling: the rows of every product in a phase are cut
 * into chunks that threads claim from one shared atomic counter, so a slower thread takes fewer
 * chunks instead of making the others wait at the barrier. Which thread computes a chunk does
 * not change its values (kernels are pure per element), so results stay thread-count
 * independent. The counter is never reset inside a pass: every thread advances its private
 * `base` by (chunks in the phase + nth), which is exactly how far the counter moves (each thread
 * makes one failing claim), so all threads agree on where the next phase starts.
 */
enum mm_post { MM_STORE, MM_ADD_RESIDUAL, MM_SWIGLU };

struct mm_job {
    const struct nx_weight *w;
    const unsigned char *xq;
    float *y;
    int64_t ldy;
    enum mm_post post;
    const struct nx_weight *w2; /* MM_SWIGLU: the up projection (same rows as w = gate) */
    const unsigned char *xq2;
    float *y2;
};

static void mm_phase(struct nx_ctx *c, int64_t *base, const struct mm_job *jobs, int nj, int64_t n,
                     int nth) {
    int64_t chunk[4], count[4], total = 0;
    for (int j = 0; j < nj; j++) {
        int64_t rows = jobs[j].w->ne1;
        /* decode: ~8 chunks per thread for balance; prefill: ~3, since each kernel call
           re-arranges its activation panel (a fixed cost per call) */
        int64_t per_thread = n > 1 ? 3 : 8;
        int64_t ch = nx_align_up((size_t)(rows / ((int64_t)nth * per_thread) + 1), 16);
        if (ch < 16) ch = 16;
        chunk[j] = ch;
        count[j] = (rows + ch - 1) / ch;
        total += count[j];
    }
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&c->chunk_ctr, 1, memory_order_relaxed) - *base;
        if (t >= total) break;
        int j = 0;
        while (t >= count[j]) t -= count[j++];
        const struct mm_job *jb = &jobs[j];
        const struct nx_weight *w = jb->w;
        int64_t r0 = t * chunk[j], r1 = NX_MIN(r0 + chunk[j], w->ne1);
        kern_matmul(w->type, w->ne0, w->data, w->row_bytes, r0, r1, jb->xq, c->xq_row, n, jb->y,
                    jb->ldy);
        if (jb->post == MM_ADD_RESIDUAL) {
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = r0; r < r1; r++) c->x[i * jb->ldy + r] += jb->y[i * jb->ldy + r];
        } else if (jb->post == MM_SWIGLU) {
            const struct nx_weight *u = jb->w2;
            kern_matmul(u->type, u->ne0, u->data, u->row_bytes, r0, r1, jb->xq2, c->xq_row, n,
                        jb->y2, jb->ldy);
            for (int64_t i = 0; i < n; i++) {
                kern_swiglu(jb->y + i * jb->ldy + r0, jb->y2 + i * jb->ldy + r0, r1 - r0);
            }
        }
    }
    *base += total + nth;
}

/* x += W . src for the batch: prepare this thread's activation rows [t0, t1) of src (row
 * length W->ne0), then the product into tmp (n, n_embd) with the residual add per chunk. */
static void residual_matmul(struct nx_ctx *c, const struct nx_weight *w, const float *src,
                            float *tmp, int64_t *base, int64_t t0, int64_t t1, int nth) {
    prep_rows(c, c->xq_a, w->type, src, w->ne0, w->ne0, t0, t1);
    nx_pool_barrier(c->pool);
    struct mm_job j = {w, c->xq_a, tmp, w->ne1, MM_ADD_RESIDUAL, 0, 0, 0};
    mm_phase(c, base, &j, 1, c->job_n, nth);
    nx_pool_barrier(c->pool);
}

static void forward_worker(void *arg, int ith, int nth) {
    struct nx_ctx *c = arg;
    const struct nx_model *m = c->model;
    const struct nx_hparams *hp = &m->hp;
    struct nx_pool *pool = c->pool;
    const int64_t n = c->job_n, pos0 = c->job_pos0;
    const int64_t n_embd = hp->n_embd, hd = hp->head_dim;
    const int64_t qd = (int64_t)hp->n_head * hd, kvd = (int64_t)hp->n_head_kv * hd;
    const int64_t n_ff = hp->n_ff, half = hp->n_rot / 2;
    const int gqa = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    int64_t t0, t1;
    split(n, 1, ith, nth, &t0, &t1);
    int64_t base = 0; /* this thread's view of where the chunk counter's current phase starts */

    /* embeddings and the RoPE table for this batch */
    for (int64_t t = t0; t < t1; t++) {
        const struct nx_weight *e = &m->tok_embd;
        quant_dequantize_row_ref(e->type, (const unsigned char *)e->data +
                                              (size_t)c->job_tok[t] * e->row_bytes,
                                 c->x + t * n_embd, n_embd);
        double pos = (double)(pos0 + t);
        for (int64_t i = 0; i < half; i++) {
            double th = pos * (double)m->rope_inv_freq[i];
            c->rope_cs[(t * half + i) * 2] = (float)cos(th);
            c->rope_cs[(t * half + i) * 2 + 1] = (float)sin(th);
        }
    }
    nx_pool_barrier(pool);

    for (int il = 0; il < hp->n_layer; il++) {
        const struct nx_layer *L = &m->layers[il];
        bool k_sep = L->wk.type != L->wq.type, v_sep = L->wv.type != L->wq.type;
        bool kv_same = L->wk.type == L->wv.type;

        /* attention norm, activations for q/k/v */
        for (int64_t t = t0; t < t1; t++)
            rmsnorm(c->xn + t * n_embd, c->x + t * n_embd, L->attn_norm, n_embd, hp->rms_eps);
        prep_rows(c, c->xq_a, L->wq.type, c->xn, n_embd, n_embd, t0, t1);
        if (k_sep || v_sep)
            prep_rows(c, c->xq_b, k_sep ? L->wk.type : L->wv.type, c->xn, n_embd, n_embd, t0, t1);
        nx_pool_barrier(pool);
        if (v_sep && k_sep && !kv_same) {
            /* three different weight types: q and k first, then v with its own activations */
            struct mm_job qk[2] = {{&L->wq, c->xq_a, c->q, qd, MM_STORE, 0, 0, 0},
                                   {&L->wk, c->xq_b, c->k, kvd, MM_STORE, 0, 0, 0}};
            mm_phase(c, &base, qk, 2, n, nth);
            nx_pool_barrier(pool);
            prep_rows(c, c->xq_b, L->wv.type, c->xn, n_embd, n_embd, t0, t1);
            nx_pool_barrier(pool);
            struct mm_job vj = {&L->wv, c->xq_b, c->v, kvd, MM_STORE, 0, 0, 0};
            mm_phase(c, &base, &vj, 1, n, nth);
        } else {
            struct mm_job qkv[3] = {
                {&L->wq, c->xq_a, c->q, qd, MM_STORE, 0, 0, 0},
                {&L->wk, k_sep ? c->xq_b : c->xq_a, c->k, kvd, MM_STORE, 0, 0, 0},
                {&L->wv, v_sep ? c->xq_b : c->xq_a, c->v, kvd, MM_STORE, 0, 0, 0}};
            mm_phase(c, &base, qkv, 3, n, nth);
        }
        nx_pool_barrier(pool);

        /* q: bias, norm, RoPE per (token, head); k/v: per KV head, tokens appended in order */
        {
            int64_t units = n * hp->n_head + hp->n_head_kv;
            int64_t u0, u1;
            split(units, 1, ith, nth, &u0, &u1);
            for (int64_t u = u0; u < u1; u++) {
                if (u < n * hp->n_head) {
                    int64_t t = u / hp->n_head, h = u % hp->n_head;
                    float *qh = c->q + t * qd + h * hd;
                    if (L->bq)
                        for (int64_t i = 0; i < hd; i++) qh[i] += L->bq[h * hd + i];
                    if (L->q_norm) rmsnorm(qh, qh, L->q_norm, hd, hp->rms_eps);
                    rope_apply(qh, c->rope_cs + t * half * 2, hp->n_rot, hp->rope_neox);
                    if (c->ev && t >= n - c->p.kv_window) {
                        int32_t pos = (int32_t)(pos0 + t);
                        memcpy(kv_evict_window_slot(c->ev, il, pos) + h * hd, qh,
                               sizeof(float) * (size_t)hd);
                        if (h == 0) kv_evict_window_mark(c->ev, il, pos);
                    }
                    continue;
                }
                int64_t h = u - n * hp->n_head;
                struct kv_table *tab = kv_table_at(c->kv, il, (int)h);
                for (int64_t t = 0; t < n; t++) {
                    float *kh = c->k + t * kvd + h * hd;
                    float *vh = c->v + t * kvd + h * hd;
                    if (L->bk)
                        for (int64_t i = 0; i < hd; i++) kh[i] += L->bk[h * hd + i];
                    if (L->bv)
                        for (int64_t i = 0; i < hd; i++) vh[i] += L->bv[h * hd + i];
                    if (L->k_norm) rmsnorm(kh, kh, L->k_norm, hd, hp->rms_eps);
                    rope_apply(kh, c->rope_cs + t * half * 2, hp->n_rot, hp->rope_neox);
                    kv_append(c->kv, tab, (int32_t)(pos0 + t), kh, vh);
                }
            }
        }
        nx_pool_barrier(pool);

        /* causal attention per (token, KV head), the gqa query heads of the group together;
           output into xn (n, qd) */
        {
            const struct kv_cache *kv = c->kv;
            const int64_t B = kv->p.block;
            float *sc = c->scores + (size_t)ith * (size_t)gqa * (size_t)c->max_tokens;
            float *acc = c->att_tmp + (size_t)ith * (size_t)gqa * (size_t)hd;
            /* with accumulators, one thread owns all tokens of a KV head (no shared writes);
               otherwise units are dealt round-robin, so early (short) and late (long) rows of a
               prompt are shared evenly */
            int64_t u0 = ith, u1 = n * hp->n_head_kv, ustep = nth;
            if (c->acc_attn) {
                split(n * hp->n_head_kv, n, ith, nth, &u0, &u1);
                ustep = 1;
            }
            for (int64_t u = u0; u < u1; u += ustep) {
                int64_t t = c->acc_attn ? u % n : u / hp->n_head_kv;
                int64_t kvh = c->acc_attn ? u / n : u % hp->n_head_kv;
                const struct kv_table *tab = &kv->tables[(size_t)il * hp->n_head_kv + kvh];
                int64_t ntok = tab->n_tokens - n + t + 1; /* cached before the batch + causal */
                const float *qg = c->q + t * qd + kvh * gqa * hd;
                float *out = c->xn + t * qd + kvh * gqa * hd;
                for (int64_t j0 = 0; j0 < ntok; j0 += B) {
                    int32_t b = tab->blocks[j0 / B];
                    kern_attn_scores(kv->p.type, hd, kv_block_k(kv, b), kv->row_bytes,
                                     NX_MIN(B, ntok - j0), qg, gqa, scale, sc + j0, c->max_tokens);
                }
                for (int g = 0; g < gqa; g++) kern_softmax(sc + (size_t)g * c->max_tokens, ntok);
                if (c->acc_attn) {
                    for (int64_t j0 = 0; j0 < ntok; j0 += B) {
                        float *acc_b = kv_block_acc(kv, tab->blocks[j0 / B]);
                        for (int64_t j = j0; j < NX_MIN(j0 + B, ntok); j++)
                            for (int g = 0; g < gqa; g++)
                                acc_b[j - j0] += sc[(size_t)g * c->max_tokens + j];
                    }
                }
                memset(out, 0, sizeof(float) * (size_t)(gqa * hd));
                for (int64_t j0 = 0; j0 < ntok; j0 += B) {
                    int32_t b = tab->blocks[j0 / B];
                    kern_attn_values(kv->p.type, hd, kv_block_v(kv, b), kv->row_bytes,
                                     NX_MIN(B, ntok - j0), sc + j0, c->max_tokens, gqa, acc);
                    for (int64_t i = 0; i < gqa * hd; i++) out[i] += acc[i];
                }
            }
        }
        nx_pool_barrier(pool);
        residual_matmul(c, &L->wo, c->xn, c->ffa, &base, t0, t1, nth);

        /* feed-forward: down(silu(gate x) * up x) */
        for (int64_t t = t0; t < t1; t++)
            rmsnorm(c->xn + t * n_embd, c->x + t * n_embd, L->ffn_norm, n_embd, hp->rms_eps);
        prep_rows(c, c->xq_a, L->gate.type, c->xn, n_embd, n_embd, t0, t1);
        if (L->up.type != L->gate.type)
            prep_rows(c, c->xq_b, L->up.type, c->xn, n_embd, n_embd, t0, t1);
        nx_pool_barrier(pool);
        {
            struct mm_job gj = {&L->gate, c->xq_a, c->ffa, n_ff, MM_SWIGLU, &L->up,
                                L->up.type != L->gate.type ? c->xq_b : c->xq_a, c->ffb};
            mm_phase(c, &base, &gj, 1, n, nth);
        }
        nx_pool_barrier(pool);
        residual_matmul(c, &L->down, c->ffa, c->ffb, &base, t0, t1, nth);
    }

    /* output: final norm and logits for tokens [out0, n) */
    int64_t out0 = c->job_out0, nout = n - out0;
    int64_t o0, o1;
    split(nout, 1, ith, nth, &o0, &o1);
    for (int64_t t = o0; t < o1; t++)
        rmsnorm(c->xn + t * n_embd, c->x + (out0 + t) * n_embd, m->output_norm, n_embd,
                hp->rms_eps);
    prep_rows(c, c->xq_a, m->output.type, c->xn, n_embd, n_embd, o0, o1);
    nx_pool_barrier(pool);
    if (nout > 0) {
        struct mm_job lj = {&m->output, c->xq_a, c->job_logits, hp->n_vocab, MM_STORE, 0, 0, 0};
        mm_phase(c, &base, &lj, 1, nout, nth);
    }
}

/* ---- eviction ---- */

struct evict_job {
    struct nx_ctx *c;
    int64_t budget;
};

static void evict_worker(void *arg, int ith, int nth) {
    struct evict_job *j = arg;
    for (int il = ith; il < j->c->model->hp.n_layer; il += nth)
        kv_evict_layer(j->c->ev, il, j->budget, ith);
}

/* One eviction round over every layer, layers split across the pool's threads. */
static void evict_round(struct nx_ctx *c, bool prompt) {
    double t0 = nx_time_s();
    struct evict_job j = {c, kv_evict_budget(c->ev, c->n_past)};
    /* the evictor has buffers for the thread count of nx_ctx_init (set_threads may add more) */
    int nth = NX_MIN(prompt ? c->p.n_threads_batch : c->p.n_threads, kv_evict_threads(c->ev));
    nx_pool_run(c->pool, evict_worker, &j, nth);
    kv_evict_round_done(c->ev, nx_time_s() - t0);
}

struct kv_cache *ctx_kv_cache(nx_ctx *c) { return c->kv; }
const struct nx_model *ctx_model(const nx_ctx *c) { return c->model; }
void ctx_set_n_past(nx_ctx *c, int32_t n_past) {
    c->n_past = n_past;
    c->last_n = 0;
}
bool ctx_evicting(const nx_ctx *c) { return c->ev != NULL; }
void ctx_evict_forget_from(nx_ctx *c, int32_t pos) {
    if (c->ev) kv_evict_forget_from(c->ev, pos);
}
nx_status ctx_set_error(nx_ctx *c, nx_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return st;
}

int64_t ctx_kv_budget(const nx_ctx *c, int layer) {
    if (!c->ev) return -1;
    int64_t budget = kv_evict_budget(c->ev, c->n_past);
    struct kv_layer_view v = {.layer = layer, .n_layer = c->model->hp.n_layer,
                              .n_tokens = c->n_past};
    return kv_policy_layer_keep(kv_policy_find(c->policy_name), &v, budget, &c->pp);
}

void nx_ctx_kv_stats(const nx_ctx *c, struct nx_kv_stats *out) {
    memset(out, 0, sizeof *out);
    out->bytes_current = kv_bytes_in_use(c->kv);
    out->bytes_peak = kv_bytes_peak(c->kv);
    out->bytes_pool = kv_bytes_pool(c->kv);
    out->tokens_cached = c->kv->tables[0].n_tokens;
    if (c->ev) {
        out->evictions = kv_evict_rounds(c->ev);
        out->tokens_evicted = kv_evict_tokens_evicted(c->ev);
        out->evict_seconds = kv_evict_seconds(c->ev);
    }
}

/* ---- lifecycle ---- */

struct nx_ctx_params nx_ctx_default_params(void) {
    struct nx_ctx_params p = {
        .n_ctx = 0, .n_batch = 512, .n_threads = 2, .n_threads_batch = 2, .kv_type = NX_TYPE_F16,
        .kv_policy = "full", .kv_density = 0, .kv_budget = 0, .kv_regime = NX_KV_REGIME_PREFILL,
        .kv_block = 32, .kv_sink = 32, .kv_recent = 32, .kv_window = 16, .nexus_walk = 3,
        .nexus_lambda = 0.5f, .nexus_eps = 1e-6f, .nexus_n = 5, .nexus_w_scale = 1.0f,
        .kv_seed = 0x6e657875735f6b76ull, .nexus_fresh_draws = false,
        .nexus_mean_vectors = false};
    return p;
}

static size_t max_act_row(const struct nx_model *m) {
    size_t mx = kern_act_row_bytes(m->output.type, m->output.ne0);
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct nx_layer *L = &m->layers[il];
        const struct nx_weight *all[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t i = 0; i < NX_ARRAY_LEN(all); i++)
            mx = NX_MAX(mx, kern_act_row_bytes(all[i]->type, all[i]->ne0));
    }
    return nx_align_up(mx, 64);
}

static float *alloc_f(size_t rows, size_t cols, bool *ok) {
    size_t n;
    if (!nx_mul_size(rows, cols, &n) || !nx_mul_size(n, sizeof(float), &n)) {
        *ok = false;
        return NULL;
    }
    float *p = nx_malloc_aligned(n);
    if (!p) *ok = false;
    return p;
}

nx_status nx_ctx_init(const nx_model *model, const struct nx_ctx_params *params, nx_ctx **out,
                      char *err, size_t errlen) {
    struct nx_ctx_params p = params ? *params : nx_ctx_default_params();
    *out = NULL;
    if (p.n_ctx == 0) p.n_ctx = NX_MIN(model->hp.n_ctx_train, 4096);
    if (p.n_batch <= 0) p.n_batch = 512;
    if (p.n_batch > p.n_ctx) p.n_batch = p.n_ctx;
    const char *bad = NULL;
    if (model->enc)
        bad = "an encoder model (bert / nomic-bert) has no decoding context: use nx_embed or "
              "nx_rerank_score";
    else if (model->vocab_only)
        bad = "the model file has no weights (vocabulary only)";
    else if (p.n_ctx < 1 || p.n_ctx > (1 << 24))
        bad = "n_ctx must be in [1, 16777216]";
    else if (p.n_threads < 1 || p.n_threads > 512 || p.n_threads_batch < 1 ||
             p.n_threads_batch > 512)
        bad = "thread counts must be in [1, 512]";
    else if (p.kv_type != NX_TYPE_F16 && p.kv_type != NX_TYPE_F32)
        bad = "kv_type must be F16 or F32";
    else if (p.kv_policy && !kv_policy_find(p.kv_policy))
        bad = "unknown KV policy (full, streaming, h2o, snapkv, pyramidkv, adakv, morphkv, tova, "
              "nexus)";
    else if (!(p.kv_density >= 0 && p.kv_density <= 1) || p.kv_budget < 0)
        bad = "kv_density must be in [0, 1] and kv_budget >= 0";
    else if (p.kv_block < 1 || p.kv_block > 4096 || p.kv_sink < 0 || p.kv_recent < 0 ||
             p.kv_window < 1 || p.kv_window > 256)
        bad = "kv_block must be in [1, 4096], kv_sink/kv_recent >= 0, kv_window in [1, 256]";
    else if (p.kv_extra_tokens < 0 || p.kv_extra_tokens > (1 << 24))
        bad = "kv_extra_tokens must be in [0, 16777216]";
    else if (p.kv_regime != NX_KV_REGIME_PREFILL && p.kv_regime != NX_KV_REGIME_STREAM)
        bad = "kv_regime must be prefill or stream";
    else if (p.nexus_walk < 0 || p.nexus_n < 1 || !(p.nexus_lambda >= 0) ||
             !(p.nexus_eps >= 0) || !(p.nexus_w_scale > 0))
        bad = "nexus parameters out of range (walk >= 0, n >= 1, lambda >= 0, eps >= 0, "
              "w_scale > 0)";
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "%s", bad);
        return NX_STATUS_INVALID_ARG;
    }
    struct nx_ctx *c = nx_calloc(1, sizeof *c);
    if (!c) goto nomem;
    c->model = model;
    c->p = p;
    const struct nx_hparams *hp = &model->hp;
    size_t hd = (size_t)hp->head_dim, qd = (size_t)hp->n_head * hd, kvd = (size_t)hp->n_head_kv * hd;
    size_t nb = (size_t)p.n_batch;
    const struct kv_policy *pol = kv_policy_find(p.kv_policy ? p.kv_policy : "full");
    snprintf(c->policy_name, sizeof c->policy_name, "%s", pol->name);
    c->p.kv_policy = c->policy_name;
    struct kv_policy_params pp = kv_policy_default_params();
    pp.block = p.kv_block;
    pp.sink = p.kv_sink;
    pp.recent = p.kv_recent;
    pp.nexus_walk = p.nexus_walk;
    pp.nexus_lambda = p.nexus_lambda;
    pp.nexus_eps = p.nexus_eps;
    pp.nexus_n = p.nexus_n;
    pp.nexus_w_scale = p.nexus_w_scale;
    pp.nexus_fixed_draws = !p.nexus_fresh_draws;
    pp.nexus_mean_vectors = p.nexus_mean_vectors;
    pp.seed = p.kv_seed;
    c->pp = pp;
    bool evicting = strcmp(pol->name, "full") != 0 && (p.kv_budget > 0 || p.kv_density > 0);
    {
        /* pool: without eviction every table can hold n_ctx tokens; with eviction, the largest
           budget n_ctx allows (twice that for pyramid layers) plus one batch and two blocks */
        int64_t B = p.kv_block, per_table_tokens = p.n_ctx;
        if (evicting) {
            int64_t budget = p.kv_budget > 0 ? p.kv_budget
                                             : (int64_t)ceil((double)p.kv_density * p.n_ctx);
            budget = NX_MAX(budget, kv_policy_min_keep(pol, &pp));
            if (strcmp(pol->name, "pyramidkv") == 0) budget *= 2;
            per_table_tokens = NX_MIN(budget + p.n_batch + 2 * B, (int64_t)p.n_ctx + B);
        }
        struct kv_cache_params kp = {.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv,
                                     .head_dim = hp->head_dim, .type = p.kv_type,
                                     .block = p.kv_block, .with_acc = pol->needs_acc_attn};
        int64_t per_table = (per_table_tokens + B - 1) / B;
        /* room for a sequence cache's blocks (nx_seqcache) on top */
        int64_t extra = ((int64_t)p.kv_extra_tokens + B - 1) / B;
        kp.n_blocks = (per_table + extra) * hp->n_layer * hp->n_head_kv;
        if (kp.n_blocks > INT32_MAX || kv_cache_init(&kp, &c->kv) != NX_STATUS_OK) goto nomem;
        /* a per-head policy may give one head up to every head's share (Ada-KV) */
        c->max_tokens = NX_MIN(per_table * B * (pol->per_head ? hp->n_head_kv : 1),
                               (int64_t)p.n_ctx + B);
        c->acc_attn = evicting && pol->needs_acc_attn;
    }
    bool ok = true;
    size_t wide = NX_MAX((size_t)hp->n_embd, qd);
    c->x = alloc_f(nb, (size_t)hp->n_embd, &ok);
    c->xn = alloc_f(nb, wide, &ok);
    c->q = alloc_f(nb, qd, &ok);
    c->k = alloc_f(nb, kvd, &ok);
    c->v = alloc_f(nb, kvd, &ok);
    c->ffa = alloc_f(nb, NX_MAX((size_t)hp->n_ff, (size_t)hp->n_embd), &ok);
    c->ffb = alloc_f(nb, NX_MAX((size_t)hp->n_ff, (size_t)hp->n_embd), &ok);
    c->rope_cs = alloc_f(nb, (size_t)NX_MAX(hp->n_rot, 2), &ok);
    c->xq_row = max_act_row(model);
    c->xq_a = (unsigned char *)alloc_f(nb, c->xq_row / sizeof(float) + 1, &ok);
    c->xq_b = (unsigned char *)alloc_f(nb, c->xq_row / sizeof(float) + 1, &ok);
    c->logits_cap = 1;
    c->logits = alloc_f(1, (size_t)hp->n_vocab, &ok);
    if (!ok) goto nomem;
    nx_status st = nx_ctx_set_threads(c, p.n_threads, p.n_threads_batch);
    if (st) goto nomem;
    if (evicting) {
        struct kv_evict_params ep = {.policy = pol, .pp = pp, .density = p.kv_density,
                                     .budget = p.kv_budget, .regime = p.kv_regime,
                                     .window = p.kv_window, .n_head = hp->n_head,
                                     .n_threads = c->n_threads_max, .max_tokens = c->max_tokens};
        if (kv_evict_init(c->kv, &ep, &c->ev) != NX_STATUS_OK) goto nomem;
    }
    *out = c;
    return NX_STATUS_OK;
nomem:
    nx_ctx_free(c);
    if (err && errlen) snprintf(err, errlen, "out of memory creating a context (n_ctx %d)", p.n_ctx);
    return NX_STATUS_NOMEM;
}

/* Each thread of a new pool sizes its kernel buffers for this context's largest matmul, so
 * that no decode step allocates (kern_reserve). */
struct reserve_job {
    int64_t k_max, nc_max;
    atomic_int failed;
};
static void reserve_worker(void *arg, int ith, int nth) {
    struct reserve_job *j = arg;
    (void)ith, (void)nth;
    if (!kern_reserve(j->k_max, j->nc_max)) atomic_store(&j->failed, 1);
}

/* Only the Q4_K and Q6_K matmuls use such buffers. */
static bool is_kquant(const struct nx_weight *w) {
    enum nx_type t = nx_type_in_file(w->type);
    return t == NX_TYPE_Q4_K || t == NX_TYPE_Q6_K;
}
static bool model_has_kquant(const struct nx_model *m) {
    bool any = is_kquant(&m->output);
    for (int il = 0; il < m->hp.n_layer && !any; il++) {
        const struct nx_layer *L = &m->layers[il];
        any = is_kquant(&L->wq) || is_kquant(&L->wk) || is_kquant(&L->wv) || is_kquant(&L->wo) ||
              is_kquant(&L->gate) || is_kquant(&L->up) || is_kquant(&L->down);
    }
    return any;
}

nx_status nx_ctx_set_threads(nx_ctx *c, int32_t n_threads, int32_t n_threads_batch) {
    if (n_threads < 1 || n_threads_batch < 1 || n_threads > 512 || n_threads_batch > 512)
        return NX_STATUS_INVALID_ARG;
    int want = NX_MAX(n_threads, n_threads_batch);
    if (!c->pool || nx_pool_size(c->pool) != want) {
        struct nx_pool *pool;
        nx_status st = nx_pool_init(want, &pool);
        if (st) return st;
        bool ok = true;
        int gqa = c->model->hp.n_head / c->model->hp.n_head_kv;
        float *sc = alloc_f((size_t)want * (size_t)gqa, (size_t)c->max_tokens, &ok);
        float *tmp = alloc_f((size_t)want * (size_t)gqa, (size_t)c->model->hp.head_dim, &ok);
        if (!ok) {
            nx_pool_free(pool);
            nx_free_aligned(sc);
            nx_free_aligned(tmp);
            return NX_STATUS_NOMEM;
        }
        const struct nx_hparams *hp = &c->model->hp;
        struct reserve_job rj = {.k_max = NX_MAX(NX_MAX(hp->n_embd, hp->n_ff),
                                                 (int64_t)hp->n_head * hp->head_dim),
                                 .nc_max = c->p.n_batch};
        atomic_init(&rj.failed, 0);
        if (model_has_kquant(c->model)) nx_pool_run(pool, reserve_worker, &rj, want);
        if (atomic_load(&rj.failed)) {
            nx_pool_free(pool);
            nx_free_aligned(sc);
            nx_free_aligned(tmp);
            return NX_STATUS_NOMEM;
        }
        nx_pool_free(c->pool);
        nx_free_aligned(c->scores);
        nx_free_aligned(c->att_tmp);
        c->pool = pool;
        c->scores = sc;
        c->att_tmp = tmp;
        c->n_threads_max = want;
    }
    c->p.n_threads = n_threads;
    c->p.n_threads_batch = n_threads_batch;
    return NX_STATUS_OK;
}

void nx_ctx_free(nx_ctx *c) {
    if (!c) return;
    nx_pool_free(c->pool);
    kv_evict_free(c->ev);
    kv_cache_free(c->kv);
    float *bufs[] = {c->x, c->xn, c->q, c->k, c->v, c->ffa, c->ffb, c->rope_cs, c->scores, c->att_tmp,
                     c->logits, (float *)c->xq_a, (float *)c->xq_b};
    for (size_t i = 0; i < NX_ARRAY_LEN(bufs); i++) nx_free_aligned(bufs[i]);
    nx_free(c);
}

static nx_status ctx_fail(nx_ctx *c, nx_status st, const char *msg) {
    snprintf(c->err, sizeof c->err, "%s", msg);
    return st;
}

nx_status nx_decode(nx_ctx *c, const nx_token *tokens, int32_t n, bool all_logits) {
    const struct nx_hparams *hp = &c->model->hp;
    c->err[0] = 0;
    if (n <= 0 || !tokens) return ctx_fail(c, NX_STATUS_INVALID_ARG, "empty batch");
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) {
            snprintf(c->err, sizeof c->err, "token %d at index %d is out of range [0, %d)",
                     tokens[i], i, hp->n_vocab);
            return NX_STATUS_INVALID_ARG;
        }
    if ((int64_t)c->n_past + n > c->p.n_ctx ||
        kv_cache_reserve(c->kv, NX_MIN(n, c->p.n_batch)) != NX_STATUS_OK) {
        snprintf(c->err, sizeof c->err, "KV cache full: %d + %d tokens > n_ctx %d", c->n_past, n,
                 c->p.n_ctx);
        return NX_STATUS_KV_FULL;
    }
    int32_t rows = all_logits ? n : 1;
    if (rows > c->logits_cap) {
        bool ok = true;
        float *l = alloc_f((size_t)rows, (size_t)hp->n_vocab, &ok);
        if (!ok) return ctx_fail(c, NX_STATUS_NOMEM, "out of memory for logits");
        nx_free_aligned(c->logits);
        c->logits = l;
        c->logits_cap = rows;
    }
    for (int32_t done = 0; done < n;) {
        int32_t nb = NX_MIN(n - done, c->p.n_batch);
        if (done > 0 && kv_cache_reserve(c->kv, nb) != NX_STATUS_OK) {
            snprintf(c->err, sizeof c->err, "KV pool exhausted after %d of %d tokens", done, n);
            return NX_STATUS_KV_FULL;
        }
        bool last_chunk = done + nb == n;
        c->job_tok = tokens + done;
        c->job_n = nb;
        c->job_pos0 = c->n_past;
        if (all_logits) {
            c->job_out0 = 0;
            c->job_logits = c->logits + (size_t)done * (size_t)hp->n_vocab;
        } else {
            c->job_out0 = last_chunk ? nb - 1 : nb; /* nb: no outputs for this chunk */
            c->job_logits = c->logits;
        }
        int nth = nb == 1 ? c->p.n_threads : c->p.n_threads_batch;
        atomic_store(&c->chunk_ctr, 0);
        nx_pool_run(c->pool, forward_worker, c, nth);
        c->n_past += nb;
        done += nb;
        if (c->ev && kv_evict_due(c->ev, c->n_past, n > 1)) evict_round(c, n > 1);
    }
    c->logits_rows = rows;
    c->logits_all = all_logits;
    c->last_n = n;
    return NX_STATUS_OK;
}

const float *nx_get_logits(nx_ctx *c, int32_t i) {
    if (c->last_n == 0) return NULL;
    if (i < 0) i = c->last_n + i;
    if (i < 0 || i >= c->last_n) return NULL;
    if (!c->logits_all) return i == c->last_n - 1 ? c->logits : NULL;
    return c->logits + (size_t)i * (size_t)c->model->hp.n_vocab;
}

int32_t nx_ctx_n_past(const nx_ctx *c) { return c->n_past; }
int32_t nx_ctx_n_ctx(const nx_ctx *c) { return c->p.n_ctx; }
void nx_ctx_reset(nx_ctx *c) {
    c->n_past = 0;
    kv_cache_clear(c->kv);
    if (c->ev) kv_evict_reset(c->ev);
    c->last_n = 0;
}
nx_status nx_ctx_truncate(nx_ctx *c, int32_t n_past) {
    if (n_past < 0 || n_past > c->n_past) return NX_STATUS_INVALID_ARG;
    /* drop every cached token at a position >= n_past */
    for (int il = 0; il < c->model->hp.n_layer; il++)
        for (int h = 0; h < c->model->hp.n_head_kv; h++) {
            struct kv_table *t = kv_table_at(c->kv, il, h);
            int64_t keep = t->n_tokens;
            while (keep > 0) {
                int32_t b = kv_slot_block(c->kv, t, keep - 1);
                if (kv_block_pos(c->kv, b)[(keep - 1) % c->kv->p.block] < n_past) break;
                keep--;
            }
            kv_truncate(c->kv, t, keep);
        }
    if (c->ev) kv_evict_forget_from(c->ev, n_past);
    c->n_past = n_past;
    c->last_n = 0;
    return NX_STATUS_OK;
}
size_t nx_ctx_kv_bytes(const nx_ctx *c) { return kv_bytes_pool(c->kv); }
const char *nx_ctx_last_error(const nx_ctx *c) { return c->err; }
