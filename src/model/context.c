/*
 * context.c - DESIGN: an nx_ctx's lifecycle and state: the shared KV block pool and its
 * sequences (position, policy, evictor each), every work buffer the forward pass needs for a
 * step of up to n_batch tokens (sized once at init: no allocation while decoding; only a
 * request for logits of more rows than ever before grows the logits buffer), and a reference
 * to the process's shared thread pool. The forward pass itself is forward.c; the range
 * operations, splicing and the sequence cache are splice.c and seqcache.c.
 *
 * A decode call is turned into steps: the job arrays (token, position, sequence, how many
 * later entries of the same sequence) are filled, every sequence of the step reserves its
 * blocks at once (all or nothing), forward.c runs, and then each sequence of the step with an
 * eviction budget is held to it (kv/kv_evict.c, layers in parallel on the pool). Sequences
 * with H2O's accumulators get private copies of shared blocks before a step, since attention
 * writes into them.
 */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/threadpool.h"
#include "kern/kern.h"
#include "kern/types.h"
#include "kv/kv_cache.h"
#include "kv/kv_evict.h"
#include "kv/kv_policy.h"
#include "model/context.h"
#include "model/ctx_impl.h"
#include "model/model.h"

#define KV_WINDOW_MAX 256

/* ---- policy parameters ---- */

struct nx_kv_params nx_kv_default_params(void) {
    struct nx_kv_params p;
    memset(&p, 0, sizeof p);
    p.policy = "full";
    p.regime = NX_KV_REGIME_PREFILL;
    p.sink = 32;
    p.recent = 32;
    p.window = 16;
    p.seed = 0x6e657875735f6b76ull;
    return p;
}

nx_status nx_kv_params_set(struct nx_kv_params *p, const char *name, double value) {
    struct kv_policy_params pp = kv_policy_default_params();
    if (!p || !name || strlen(name) >= sizeof p->opts[0].name ||
        kv_policy_set_option(&pp, name, value) != NX_STATUS_OK)
        return NX_STATUS_INVALID_ARG;
    int i = 0;
    while (i < p->n_opts && strcmp(p->opts[i].name, name) != 0) i++;
    if (i == NX_KV_MAX_OPTS) return NX_STATUS_INVALID_ARG;
    snprintf(p->opts[i].name, sizeof p->opts[i].name, "%s", name);
    p->opts[i].value = value;
    if (i == p->n_opts) p->n_opts++;
    return NX_STATUS_OK;
}

/* Check kv and turn it into a policy and its parameters; NULL when fine, else the problem. */
static const char *kv_resolve(const struct nx_kv_params *kv, int32_t block,
                              const struct kv_policy **pol, struct kv_policy_params *pp) {
    *pol = kv_policy_find(kv->policy ? kv->policy : "full");
    if (!*pol)
        return "unknown KV policy (full, streaming, h2o, snapkv, pyramidkv, adakv, morphkv, "
               "tova, nexus)";
    if (!(kv->density >= 0 && kv->density <= 1) || kv->budget < 0)
        return "kv density must be in [0, 1] and budget >= 0";
    if (kv->sink < 0 || kv->recent < 0 || kv->window < 1 || kv->window > KV_WINDOW_MAX)
        return "kv sink/recent must be >= 0 and window in [1, 256]";
    if (kv->regime != NX_KV_REGIME_PREFILL && kv->regime != NX_KV_REGIME_STREAM)
        return "kv regime must be prefill or stream";
    if (kv->n_opts < 0 || kv->n_opts > NX_KV_MAX_OPTS) return "kv option count out of range";
    *pp = kv_policy_default_params();
    pp->block = block;
    pp->sink = kv->sink;
    pp->recent = kv->recent;
    pp->seed = kv->seed;
    for (int i = 0; i < kv->n_opts; i++)
        if (kv_policy_set_option(pp, kv->opts[i].name, kv->opts[i].value) != NX_STATUS_OK)
            return "kv policy option unknown or out of range";
    return NULL;
}

static bool kv_evicts(const struct nx_kv_params *kv, const struct kv_policy *pol) {
    return strcmp(pol->name, "full") != 0 && (kv->budget > 0 || kv->density > 0);
}

/* Tokens per (layer, KV head) one sequence needs under kv: n_ctx, or for an evicting policy
   its largest budget (twice that for pyramid layers) plus one batch and two blocks. */
static int64_t seq_need_tokens(const struct nx_ctx_params *p, const struct nx_kv_params *kv,
                               const struct kv_policy *pol, const struct kv_policy_params *pp) {
    int64_t B = p->kv_block;
    if (!kv_evicts(kv, pol)) return p->n_ctx;
    int64_t budget = kv->budget > 0 ? kv->budget : (int64_t)ceil((double)kv->density * p->n_ctx);
    budget = NX_MAX(budget, kv_policy_min_keep(pol, pp));
    if (strcmp(pol->name, "pyramidkv") == 0) budget *= 2;
    return NX_MIN(budget + p->n_batch + 2 * B, (int64_t)p->n_ctx + B);
}

static nx_status ctx_fail(nx_ctx *c, nx_status st, const char *msg) {
    snprintf(c->err, sizeof c->err, "%s", msg);
    return st;
}

nx_status nx_seq_set_kv(nx_ctx *c, nx_seq_id seq, const struct nx_kv_params *kv) {
    if (seq < 0 || seq >= c->n_seq || !kv)
        return ctx_set_error(c, NX_STATUS_INVALID_ARG, "set_kv: sequence %d out of range [0, %d)",
                             seq, c->n_seq);
    const struct kv_policy *pol;
    struct kv_policy_params pp;
    const char *bad = kv_resolve(kv, c->p.kv_block, &pol, &pp);
    if (bad) return ctx_fail(c, NX_STATUS_INVALID_ARG, bad);
    const struct nx_hparams *hp = &c->model->hp;
    struct kv_evictor *ev = NULL;
    if (kv_evicts(kv, pol)) {
        if (!c->ev_bufs &&
            kv_evict_bufs_init(c->kv, hp->n_head, KV_WINDOW_MAX, c->n_threads_max, c->max_tokens,
                               &c->ev_bufs) != NX_STATUS_OK)
            return ctx_fail(c, NX_STATUS_NOMEM, "set_kv: out of memory for eviction buffers");
        if (kv_policy_needs_values(pol, &pp) &&
            kv_evict_bufs_want_values(c->ev_bufs, c->kv) != NX_STATUS_OK)
            return ctx_fail(c, NX_STATUS_NOMEM, "set_kv: out of memory for the value buffers");
        struct kv_evict_params ep = {.policy = pol, .pp = pp, .density = kv->density,
                                     .budget = kv->budget, .regime = kv->regime,
                                     .window = kv->window, .n_head = hp->n_head, .seq = seq};
        if (kv_evict_init(c->kv, &ep, &ev) != NX_STATUS_OK)
            return ctx_fail(c, NX_STATUS_NOMEM, "set_kv: out of memory for the evictor");
    }
    struct ctx_seq *s = &c->seqs[seq];
    kv_evict_free(s->ev);
    s->ev = ev;
    s->kv = *kv;
    snprintf(s->policy_name, sizeof s->policy_name, "%s", pol->name);
    s->kv.policy = s->policy_name;
    s->pol = pol;
    s->pp = pp;
    s->acc_attn = ev && pol->needs_acc_attn;
    return NX_STATUS_OK;
}

/* ---- eviction ---- */

struct evict_job {
    struct nx_ctx *c;
    struct kv_evictor *ev;
    int64_t budget;
};

static void evict_worker(void *arg, int ith, int nth) {
    struct evict_job *j = arg;
    for (int il = ith; il < j->c->model->hp.n_layer; il += nth)
        kv_evict_layer(j->ev, j->c->ev_bufs, il, j->budget, ith);
}

/* One eviction round of sequence seq over every layer, layers split across the threads. */
static void evict_round(struct nx_ctx *c, int seq, bool prompt) {
    struct ctx_seq *s = &c->seqs[seq];
    double t0 = nx_time_s();
    struct evict_job j = {c, s->ev, kv_evict_budget(s->ev, s->n_past + s->seen_base)};
    /* the buffers exist for the thread count they were made with (set_threads may add more) */
    int nth = NX_MIN(prompt ? c->p.n_threads_batch : c->p.n_threads,
                     kv_evict_bufs_threads(c->ev_bufs));
    ctx_pool_run(c, evict_worker, &j, nth);
    kv_evict_round_done(s->ev, nx_time_s() - t0);
    kv_seq_peak_update(c->kv, seq);
}

/* ---- internal accessors (model/context.h) ---- */

struct kv_cache *ctx_kv_cache(nx_ctx *c) { return c->kv; }
const struct nx_model *ctx_model(const nx_ctx *c) { return c->model; }
int32_t ctx_n_seq(const nx_ctx *c) { return c->n_seq; }
int32_t ctx_seq_n_past(const nx_ctx *c, int seq) { return c->seqs[seq].n_past; }
void ctx_seq_set_n_past(nx_ctx *c, int seq, int32_t n_past) {
    c->seqs[seq].n_past = n_past;
    c->last_n = 0;
}
void ctx_set_n_past(nx_ctx *c, int32_t n_past) { ctx_seq_set_n_past(c, 0, n_past); }
bool ctx_seq_evicting(const nx_ctx *c, int seq) { return c->seqs[seq].ev != NULL; }
bool ctx_evicting(const nx_ctx *c) { return ctx_seq_evicting(c, 0); }
void ctx_seq_evict_forget_from(nx_ctx *c, int seq, int32_t pos) {
    if (c->seqs[seq].ev) kv_evict_forget_from(c->seqs[seq].ev, pos);
}
void ctx_evict_forget_from(nx_ctx *c, int32_t pos) { ctx_seq_evict_forget_from(c, 0, pos); }
void ctx_seq_clear(nx_ctx *c, int seq) {
    kv_cache_clear_seq(c->kv, seq);
    if (c->seqs[seq].ev) kv_evict_reset(c->seqs[seq].ev);
    c->seqs[seq].n_past = 0;
    c->seqs[seq].seen_base = 0;
    c->last_n = 0;
}
int64_t ctx_seq_grow_blocks(const nx_ctx *c, int seq) {
    const struct ctx_seq *s = &c->seqs[seq];
    int64_t tokens = seq_need_tokens(&c->p, &s->kv, s->pol, &s->pp);
    return (tokens + c->p.kv_block - 1) / c->p.kv_block;
}
nx_status ctx_set_error(nx_ctx *c, nx_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    return st;
}

int64_t ctx_kv_budget(const nx_ctx *c, int layer) {
    const struct ctx_seq *s = &c->seqs[0];
    if (!s->ev) return -1;
    int64_t budget = kv_evict_budget(s->ev, s->n_past + s->seen_base);
    struct kv_layer_view v = {.layer = layer, .n_layer = c->model->hp.n_layer,
                              .n_tokens = s->n_past + s->seen_base};
    return kv_policy_layer_keep(s->pol, &v, budget, &s->pp);
}

void nx_ctx_kv_stats(const nx_ctx *c, struct nx_kv_stats *out) {
    memset(out, 0, sizeof *out);
    out->bytes_current = kv_bytes_in_use(c->kv);
    out->bytes_peak = kv_bytes_peak(c->kv);
    out->bytes_pool = kv_bytes_pool(c->kv);
    out->tokens_cached = c->kv->tables[0].n_tokens;
    for (int s = 0; s < c->n_seq; s++) {
        const struct kv_evictor *ev = c->seqs[s].ev;
        if (!ev) continue;
        out->evictions += kv_evict_rounds(ev);
        out->tokens_evicted += kv_evict_tokens_evicted(ev);
        out->evict_seconds += kv_evict_seconds(ev);
    }
}

void nx_seq_kv_stats(const nx_ctx *c, nx_seq_id seq, struct nx_kv_stats *out) {
    memset(out, 0, sizeof *out);
    if (seq < 0 || seq >= c->n_seq) return;
    out->bytes_current = (size_t)kv_seq_blocks(c->kv, seq) * c->kv->block_bytes;
    out->bytes_peak = (size_t)kv_seq_peak_blocks(c->kv, seq) * c->kv->block_bytes;
    out->bytes_pool = kv_bytes_pool(c->kv);
    out->tokens_cached = kv_seq_table(c->kv, seq, 0, 0)->n_tokens;
    const struct kv_evictor *ev = c->seqs[seq].ev;
    if (ev) {
        out->evictions = kv_evict_rounds(ev);
        out->tokens_evicted = kv_evict_tokens_evicted(ev);
        out->evict_seconds = kv_evict_seconds(ev);
    }
}

/* ---- lifecycle ---- */

struct nx_ctx_params nx_ctx_default_params(void) {
    struct nx_ctx_params p = {.n_ctx = 0, .n_batch = 512, .n_threads = 2, .n_threads_batch = 2,
                              .kv_type = NX_TYPE_F16, .n_seq_max = 1, .kv_pool_tokens = 0,
                              .kv_block = 32, .kv_extra_tokens = 0,
                              .kv = nx_kv_default_params()};
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

static void *alloc_i(size_t n, size_t size, bool *ok) {
    void *p = nx_calloc(n ? n : 1, size);
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
    if (p.n_seq_max == 0) p.n_seq_max = 1;
    const struct kv_policy *pol = NULL;
    struct kv_policy_params pp;
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
    else if (p.n_seq_max < 1 || p.n_seq_max > 1024)
        bad = "n_seq_max must be in [1, 1024]";
    else if (p.kv_block < 1 || p.kv_block > 4096)
        bad = "kv_block must be in [1, 4096]";
    else if (p.kv_extra_tokens < 0 || p.kv_extra_tokens > (1 << 24) || p.kv_pool_tokens < 0 ||
             p.kv_pool_tokens > (1 << 28))
        bad = "kv_extra_tokens must be in [0, 16777216] and kv_pool_tokens in [0, 2^28]";
    else
        bad = kv_resolve(&p.kv, p.kv_block, &pol, &pp);
    if (bad) {
        if (err && errlen) snprintf(err, errlen, "%s", bad);
        return NX_STATUS_INVALID_ARG;
    }
    struct nx_ctx *c = nx_calloc(1, sizeof *c);
    if (!c) goto nomem;
    c->model = model;
    c->p = p;
    c->n_seq = p.n_seq_max;
    const struct nx_hparams *hp = &model->hp;
    size_t hd = (size_t)hp->head_dim, qd = (size_t)hp->n_head * hd, kvd = (size_t)hp->n_head_kv * hd;
    size_t nb = (size_t)p.n_batch;
    {
        const int64_t B = p.kv_block;
        /* every sequence's need in whole blocks (or the pool asked for), and room for a
           sequence cache's blocks (nx_seqcache) on top */
        int64_t per_table =
            p.kv_pool_tokens > 0
                ? ((int64_t)p.kv_pool_tokens + B - 1) / B
                : (int64_t)p.n_seq_max * ((seq_need_tokens(&p, &p.kv, pol, &pp) + B - 1) / B);
        per_table += ((int64_t)p.kv_extra_tokens + B - 1) / B;
        struct kv_cache_params kp = {.n_layer = hp->n_layer, .n_head_kv = hp->n_head_kv,
                                     .head_dim = hp->head_dim, .type = p.kv_type, .block = p.kv_block,
                                     .with_acc = pol->needs_acc_attn, .n_seq = p.n_seq_max,
                                     .max_table_tokens = p.n_ctx};
        kp.n_blocks = per_table * hp->n_layer * hp->n_head_kv;
        if (kp.n_blocks > INT32_MAX || kv_cache_init(&kp, &c->kv) != NX_STATUS_OK) goto nomem;
        /* positions are distinct, so a table never holds more than n_ctx tokens */
        c->max_tokens = NX_MIN(per_table * B * hp->n_head_kv, (int64_t)p.n_ctx + B);
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
    c->job_tok = alloc_i(nb, sizeof(int32_t), &ok);
    c->job_pos = alloc_i(nb, sizeof(int32_t), &ok);
    c->job_seq = alloc_i(nb, sizeof(int32_t), &ok);
    c->job_tail = alloc_i(nb, sizeof(int32_t), &ok);
    c->job_out = alloc_i(nb, sizeof(int32_t), &ok);
    c->job_bseq = alloc_i(nb, sizeof(int32_t), &ok);
    c->row_of = alloc_i(nb, sizeof(int32_t), &ok);
    c->seq_count = alloc_i((size_t)c->n_seq, sizeof(int64_t), &ok);
    c->seq_last = alloc_i((size_t)c->n_seq, sizeof(int32_t), &ok);
    c->seqs = alloc_i((size_t)c->n_seq, sizeof *c->seqs, &ok);
    if (!ok) goto nomem;
    nx_status st = nx_ctx_set_threads(c, p.n_threads, p.n_threads_batch);
    if (st) goto nomem;
    for (int s = 0; s < c->n_seq; s++)
        if (nx_seq_set_kv(c, s, &p.kv) != NX_STATUS_OK) goto nomem;
    c->p.kv = c->seqs[0].kv;
    *out = c;
    return NX_STATUS_OK;
nomem:
    nx_ctx_free(c);
    if (err && errlen) snprintf(err, errlen, "out of memory creating a context (n_ctx %d)", p.n_ctx);
    return NX_STATUS_NOMEM;
}

/* Only the Q4_K and Q6_K matmuls use per-thread kernel buffers. */
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
    if (!c->pool_ref || want > c->n_threads_max) {
        bool ok = true;
        int gqa = c->model->hp.n_head / c->model->hp.n_head_kv;
        float *sc = alloc_f((size_t)want * (size_t)gqa, (size_t)c->max_tokens, &ok);
        float *tmp = alloc_f((size_t)want * 2 * CTX_ATT_TILE * (size_t)gqa,
                             (size_t)c->model->hp.head_dim, &ok);
        int64_t B = c->kv->p.block, nblk = (c->max_tokens + B - 1) / B;
        size_t units =
            (size_t)NX_MAX(want * CTX_ATT_TILE, CTX_ATT_SPLIT_TOKENS * c->model->hp.n_head_kv);
        float *parts = alloc_f(units * (size_t)nblk * (size_t)gqa,
                               (size_t)c->model->hp.head_dim + 2, &ok);
        /* every thread of the shared pool sizes its kernel buffers for this context's largest
           matmul, so that no decode step allocates (kern_reserve) */
        const struct nx_hparams *hp = &c->model->hp;
        int64_t k_max = NX_MAX(NX_MAX(hp->n_embd, hp->n_ff), (int64_t)hp->n_head * hp->head_dim);
        if (!ok || nx_pool_shared_acquire(want, model_has_kquant(c->model) ? kern_reserve : NULL,
                                          k_max, c->p.n_batch) != NX_STATUS_OK) {
            nx_free_aligned(sc);
            nx_free_aligned(tmp);
            nx_free_aligned(parts);
            return NX_STATUS_NOMEM;
        }
        if (c->pool_ref) nx_pool_shared_release();
        c->pool_ref = true;
        nx_free_aligned(c->scores);
        nx_free_aligned(c->att_tmp);
        c->scores = sc;
        c->att_tmp = tmp;
        nx_free_aligned(c->att_parts);
        c->att_parts = parts;
        c->n_threads_max = want;
    }
    c->p.n_threads = n_threads;
    c->p.n_threads_batch = n_threads_batch;
    return NX_STATUS_OK;
}

void nx_ctx_free(nx_ctx *c) {
    if (!c) return;
    if (c->pool_ref) nx_pool_shared_release();
    if (c->seqs)
        for (int s = 0; s < c->n_seq; s++) kv_evict_free(c->seqs[s].ev);
    kv_evict_bufs_free(c->ev_bufs);
    kv_cache_free(c->kv);
    probe_free(c);
    float *bufs[] = {c->x,       c->xn,      c->q,      c->k,         c->v,
                     c->ffa,     c->ffb,     c->rope_cs, c->scores,   c->att_tmp,
                     c->att_parts,
                     c->logits, (float *)c->xq_a, (float *)c->xq_b};
    for (size_t i = 0; i < NX_ARRAY_LEN(bufs); i++) nx_free_aligned(bufs[i]);
    void *ibufs[] = {c->job_tok, c->job_pos, c->job_seq, c->job_tail, c->job_out, c->job_bseq,
                     c->row_of, c->seq_count, c->seq_last, c->seqs};
    for (size_t i = 0; i < NX_ARRAY_LEN(ibufs); i++) nx_free(ibufs[i]);
    nx_free(c);
}

/* ---- decoding ---- */

static nx_status grow_logits(nx_ctx *c, int32_t rows) {
    if (rows <= c->logits_cap) return NX_STATUS_OK;
    bool ok = true;
    float *l = alloc_f((size_t)rows, (size_t)c->model->hp.n_vocab, &ok);
    if (!ok) return ctx_fail(c, NX_STATUS_NOMEM, "out of memory for logits");
    nx_free_aligned(c->logits);
    c->logits = l;
    c->logits_cap = rows;
    return NX_STATUS_OK;
}

/*
 * The step's bookkeeping from job_n / job_seq: entries per sequence (seq_count), later entries
 * of the same sequence (job_tail), the distinct sequences (job_bseq) and whether one of them
 * accumulates attention. Then reserve every sequence's blocks at once and give accumulating
 * sequences private blocks. KV_FULL (nothing changed but private copies) on failure.
 */
static nx_status step_prepare(nx_ctx *c) {
    memset(c->seq_count, 0, sizeof(int64_t) * (size_t)c->n_seq);
    for (int32_t t = c->job_n - 1; t >= 0; t--) c->job_tail[t] = (int32_t)c->seq_count[c->job_seq[t]]++;
    c->job_nbseq = 0;
    c->job_acc = false;
    for (int32_t t = 0; t < c->job_n; t++)
        if (c->job_tail[t] == c->seq_count[c->job_seq[t]] - 1) {
            int s = c->job_seq[t];
            c->job_bseq[c->job_nbseq++] = s;
            if (c->seqs[s].acc_attn) {
                c->job_acc = true;
                /* attention writes the accumulators of every block it reads */
                struct kv_table *tabs = kv_seq_tables(c->kv, s);
                for (int64_t i = 0; i < c->kv->n_tables_seq; i++)
                    if (kv_table_unshare(c->kv, &tabs[i], 0) != NX_STATUS_OK)
                        return NX_STATUS_KV_FULL;
            }
        }
    nx_status st = kv_cache_reserve_seqs(c->kv, c->seq_count);
    if (st != NX_STATUS_OK) return st;
    /* ... and those accumulators count this sequence's attention only (not that of the
       sequence a block was reused or copied from) */
    for (int32_t i = 0; i < c->job_nbseq; i++) {
        int s = c->job_bseq[i];
        if (!c->seqs[s].acc_attn) continue;
        struct kv_table *tabs = kv_seq_tables(c->kv, s);
        for (int64_t k = 0; k < c->kv->n_tables_seq; k++) kv_table_own_acc(c->kv, &tabs[k], s);
    }
    return NX_STATUS_OK;
}

/* After the forward pass: positions advance, and each sequence is held to its budget.
   prompt_all >= 0 forces the prompt flag (nx_decode: the whole call), else a sequence's
   share of the step decides. */
static void step_finish(nx_ctx *c, int prompt_all) {
    for (int32_t t = 0; t < c->job_n; t++) c->seqs[c->job_seq[t]].n_past = c->job_pos[t] + 1;
    for (int32_t i = 0; i < c->job_nbseq; i++) {
        int s = c->job_bseq[i];
        struct ctx_seq *sq = &c->seqs[s];
        bool prompt = prompt_all >= 0 ? prompt_all > 0 : c->seq_count[s] > 1;
        if (sq->ev && kv_evict_due(sq->ev, sq->n_past + sq->seen_base, prompt))
            evict_round(c, s, prompt);
    }
}

nx_status ctx_decode_seq(nx_ctx *c, int seq, const nx_token *tokens, int32_t n, bool all_logits) {
    const struct nx_hparams *hp = &c->model->hp;
    struct ctx_seq *s0 = &c->seqs[seq];
    c->err[0] = 0;
    if (n <= 0 || !tokens) return ctx_fail(c, NX_STATUS_INVALID_ARG, "empty batch");
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= hp->n_vocab) {
            snprintf(c->err, sizeof c->err, "token %d at index %d is out of range [0, %d)",
                     tokens[i], i, hp->n_vocab);
            return NX_STATUS_INVALID_ARG;
        }
    if ((int64_t)s0->n_past + n > c->p.n_ctx) {
        snprintf(c->err, sizeof c->err, "KV cache full: %d + %d tokens > n_ctx %d", s0->n_past,
                 n, c->p.n_ctx);
        return NX_STATUS_KV_FULL;
    }
    int32_t rows = all_logits ? n : 1;
    if (grow_logits(c, rows)) return NX_STATUS_NOMEM;
    for (int32_t done = 0; done < n;) {
        int32_t nb = NX_MIN(n - done, c->p.n_batch);
        bool last_chunk = done + nb == n;
        c->job_n = nb;
        for (int32_t i = 0; i < nb; i++) {
            c->job_tok[i] = tokens[done + i];
            c->job_pos[i] = s0->n_past + i;
            c->job_seq[i] = seq;
        }
        if (step_prepare(c) != NX_STATUS_OK) {
            if (done == 0)
                snprintf(c->err, sizeof c->err, "KV cache full: %d + %d tokens > n_ctx %d",
                         s0->n_past, n, c->p.n_ctx);
            else
                snprintf(c->err, sizeof c->err, "KV pool exhausted after %d of %d tokens", done,
                         n);
            return NX_STATUS_KV_FULL;
        }
        if (all_logits) {
            c->job_nout = nb;
            for (int32_t i = 0; i < nb; i++) c->job_out[i] = i;
            c->job_logits = c->logits + (size_t)done * (size_t)hp->n_vocab;
        } else {
            c->job_nout = last_chunk ? 1 : 0;
            c->job_out[0] = nb - 1;
            c->job_logits = c->logits;
        }
        forward_run(c, nb == 1 ? c->p.n_threads : c->p.n_threads_batch);
        step_finish(c, n > 1);
        done += nb;
    }
    c->logits_all = all_logits;
    c->last_n = n;
    c->last_batch = false;
    return NX_STATUS_OK;
}

nx_status nx_decode_batch(nx_ctx *c, const struct nx_batch *b) {
    const struct nx_hparams *hp = &c->model->hp;
    c->err[0] = 0;
    if (!b || b->n_tokens <= 0 || !b->token || !b->pos || !b->seq_id)
        return ctx_fail(c, NX_STATUS_INVALID_ARG, "decode_batch: empty batch");
    const int32_t n = b->n_tokens;
    if (n > c->p.n_batch)
        return ctx_set_error(c, NX_STATUS_INVALID_ARG,
                             "decode_batch: %d entries > n_batch %d", n, c->p.n_batch);
    for (int s = 0; s < c->n_seq; s++) c->seq_last[s] = c->seqs[s].n_past - 1;
    int32_t nout = 0;
    for (int32_t i = 0; i < n; i++) {
        nx_token t = b->token[i];
        nx_seq_id s = b->seq_id[i];
        nx_pos p = b->pos[i];
        if (t < 0 || t >= hp->n_vocab)
            return ctx_set_error(c, NX_STATUS_INVALID_ARG,
                                 "decode_batch: token %d at entry %d is out of range [0, %d)", t,
                                 i, hp->n_vocab);
        if (s < 0 || s >= c->n_seq)
            return ctx_set_error(c, NX_STATUS_INVALID_ARG,
                                 "decode_batch: sequence %d at entry %d is out of range [0, %d)",
                                 s, i, c->n_seq);
        if (p <= c->seq_last[s] || p >= c->p.n_ctx)
            return ctx_set_error(c, NX_STATUS_INVALID_ARG,
                                 "decode_batch: position %d of sequence %d at entry %d is not "
                                 "after %d or not below n_ctx %d",
                                 p, s, i, c->seq_last[s], c->p.n_ctx);
        c->seq_last[s] = p;
        if (!b->logits || b->logits[i]) nout++;
    }
    if (grow_logits(c, NX_MAX(nout, 1))) return NX_STATUS_NOMEM;
    c->job_n = n;
    memcpy(c->job_tok, b->token, sizeof(int32_t) * (size_t)n);
    memcpy(c->job_pos, b->pos, sizeof(int32_t) * (size_t)n);
    memcpy(c->job_seq, b->seq_id, sizeof(int32_t) * (size_t)n);
    if (step_prepare(c) != NX_STATUS_OK)
        return ctx_set_error(c, NX_STATUS_KV_FULL, "decode_batch: the KV pool cannot hold %d "
                                                   "more tokens", n);
    c->job_nout = 0;
    for (int32_t i = 0; i < n; i++) {
        c->row_of[i] = -1;
        if (!b->logits || b->logits[i]) {
            c->row_of[i] = c->job_nout;
            c->job_out[c->job_nout++] = i;
        }
    }
    c->job_logits = c->logits;
    forward_run(c, n == 1 ? c->p.n_threads : c->p.n_threads_batch);
    step_finish(c, -1);
    c->last_n = n;
    c->last_batch = true;
    c->logits_all = false;
    return NX_STATUS_OK;
}

nx_status nx_decode(nx_ctx *c, const nx_token *tokens, int32_t n, bool all_logits) {
    return ctx_decode_seq(c, 0, tokens, n, all_logits);
}

const float *nx_get_logits_ith(nx_ctx *c, int32_t i) {
    if (c->last_n == 0) return NULL;
    if (i < 0) i = c->last_n + i;
    if (i < 0 || i >= c->last_n) return NULL;
    if (c->last_batch) {
        int32_t r = c->row_of[i];
        return r < 0 ? NULL : c->logits + (size_t)r * (size_t)c->model->hp.n_vocab;
    }
    if (!c->logits_all) return i == c->last_n - 1 ? c->logits : NULL;
    return c->logits + (size_t)i * (size_t)c->model->hp.n_vocab;
}

const float *nx_get_logits(nx_ctx *c, int32_t i) { return nx_get_logits_ith(c, i); }

/* ---- batches ---- */

nx_status nx_batch_init(int32_t n_max, struct nx_batch *out) {
    memset(out, 0, sizeof *out);
    if (n_max < 1 || n_max > (1 << 24)) return NX_STATUS_INVALID_ARG;
    out->token = nx_malloc(sizeof(nx_token) * (size_t)n_max);
    out->pos = nx_malloc(sizeof(nx_pos) * (size_t)n_max);
    out->seq_id = nx_malloc(sizeof(nx_seq_id) * (size_t)n_max);
    out->logits = nx_malloc((size_t)n_max);
    if (!out->token || !out->pos || !out->seq_id || !out->logits) {
        nx_batch_free(out);
        return NX_STATUS_NOMEM;
    }
    out->n_max = n_max;
    return NX_STATUS_OK;
}

void nx_batch_free(struct nx_batch *b) {
    if (!b) return;
    nx_free(b->token);
    nx_free(b->pos);
    nx_free(b->seq_id);
    nx_free(b->logits);
    memset(b, 0, sizeof *b);
}

void nx_batch_clear(struct nx_batch *b) { b->n_tokens = 0; }

nx_status nx_batch_add(struct nx_batch *b, nx_token token, nx_pos pos, nx_seq_id seq,
                       bool logits) {
    if (b->n_tokens >= b->n_max) return NX_STATUS_INVALID_ARG;
    int32_t i = b->n_tokens++;
    b->token[i] = token;
    b->pos[i] = pos;
    b->seq_id[i] = seq;
    b->logits[i] = logits;
    return NX_STATUS_OK;
}

/* ---- state ---- */

int32_t nx_ctx_n_past(const nx_ctx *c) { return c->seqs[0].n_past; }
int32_t nx_ctx_n_ctx(const nx_ctx *c) { return c->p.n_ctx; }
int32_t nx_ctx_n_seq_max(const nx_ctx *c) { return c->n_seq; }
nx_pos nx_seq_n_past(const nx_ctx *c, nx_seq_id seq) {
    return seq < 0 || seq >= c->n_seq ? -1 : c->seqs[seq].n_past;
}
int64_t nx_seq_n_seen(const nx_ctx *c, nx_seq_id seq) {
    return seq < 0 || seq >= c->n_seq ? -1 : c->seqs[seq].n_past + c->seqs[seq].seen_base;
}
int64_t ctx_seq_seen_base(const nx_ctx *c, int seq) { return c->seqs[seq].seen_base; }
void ctx_seq_set_seen_base(nx_ctx *c, int seq, int64_t base) { c->seqs[seq].seen_base = base; }
void nx_ctx_reset(nx_ctx *c) {
    kv_cache_clear(c->kv);
    for (int s = 0; s < c->n_seq; s++) {
        c->seqs[s].n_past = 0;
        c->seqs[s].seen_base = 0;
        if (c->seqs[s].ev) kv_evict_reset(c->seqs[s].ev);
    }
    c->last_n = 0;
}

nx_status ctx_seq_truncate(nx_ctx *c, int seq, int32_t n_past) {
    struct ctx_seq *s = &c->seqs[seq];
    if (n_past < 0 || n_past > s->n_past) return NX_STATUS_INVALID_ARG;
    /* drop every cached token at a position >= n_past */
    struct kv_table *tabs = kv_seq_tables(c->kv, seq);
    for (int64_t ti = 0; ti < c->kv->n_tables_seq; ti++) {
        struct kv_table *t = &tabs[ti];
        int64_t keep = t->n_tokens;
        while (keep > 0) {
            int32_t b = kv_slot_block(c->kv, t, keep - 1);
            if (kv_block_pos(c->kv, b)[(keep - 1) % c->kv->p.block] < n_past) break;
            keep--;
        }
        kv_truncate(c->kv, t, keep);
    }
    if (s->ev) kv_evict_forget_from(s->ev, n_past);
    s->n_past = n_past;
    c->last_n = 0;
    return NX_STATUS_OK;
}

nx_status nx_ctx_truncate(nx_ctx *c, int32_t n_past) { return ctx_seq_truncate(c, 0, n_past); }
size_t nx_ctx_kv_bytes(const nx_ctx *c) { return kv_bytes_pool(c->kv); }
const char *nx_ctx_last_error(const nx_ctx *c) { return c->err; }
