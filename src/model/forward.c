/*
 * forward.c - DESIGN: the decoder's forward pass over one step of up to n_batch tokens, of
 * any sequences of the context (continuous batching), in straight-line code (llama2.c style)
 * run by every pool thread at once (forward_worker). The weights are read once per step for
 * all the step's tokens.
 *
 * Work is split deterministically: token rows for norms/quantization, output rows for matrix
 * products (claimed in chunks, see mm_phase), (token, head) pairs for RoPE, (sequence, KV
 * head) units for appending keys and values to that sequence's tables, and KV blocks, tiles
 * of tokens or (token, KV head) units for attention (see attention); barriers separate
 * dependent steps. Each operation runs on the first kern_threads_for(its cost) threads, and a
 * step none of whose operations is worth a second thread runs on one (step_threads). Each
 * output element is computed by exactly one thread in a fixed order, so the logits depend
 * neither on the thread count nor on which other sequences share the step: a token's row goes through the same kernels whatever
 * the batch (kern_matmul's columns are independent), and its attention reads only its own
 * sequence's table, up to its own position (the cached tokens plus the step's earlier entries
 * of the sequence, appended in order before attention runs).
 *
 * Keys are stored after RoPE at their absolute positions; attention reduces the table's
 * blocks to fused partial states (kern_attn_block, the G query heads of a KV head together)
 * merged in block order. For a sequence with an eviction budget the pass
 * feeds its evictor the newest queries and, for H2O, accumulated attention in the table's
 * per-slot accumulators (one thread owns a KV head's tokens then, so the sums keep their
 * order).
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/threadpool.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "kern/types.h"
#include "model/ctx_impl.h"
#include "model/model.h"
#include "model/ops.h"

/* Prepare this thread's activation rows [t0,t1) of the n rows of src (row length k, stride lds
 * floats) for weight type wt: each row on its own (c->xq_row apart), or, where wt's kernels
 * read n columns as a prepared batch (kern_batch_cols), the batch's columns [t0, t1) (row
 * splits are aligned to KERN_BATCH_ALIGN). matmul_rows makes the same choice. */
static void prep_rows(struct nx_ctx *c, unsigned char *xq, enum nx_type wt, const float *src,
                      int64_t lds, int64_t k, int64_t n, int64_t t0, int64_t t1) {
    if (kern_batch_cols(wt, n) > 0) {
        kern_prepare_batch(wt, k, src, lds, n, t0, t1, xq);
        return;
    }
    for (int64_t t = t0; t < t1; t++) kern_quantize_act(wt, src + t * lds, xq + t * c->xq_row, k);
}

/* y = W . X over rows [r0, r1) for the n columns prep_rows prepared in xq. */
static void matmul_rows(const struct nx_ctx *c, const struct nx_weight *w, const unsigned char *xq,
                        int64_t r0, int64_t r1, int64_t n, float *y, int64_t ldy) {
    if (kern_batch_cols(w->type, n) > 0)
        kern_matmul_batch(w->type, w->ne0, w->data, w->row_bytes, r0, r1, xq, n, y, ldy);
    else
        kern_matmul(w->type, w->ne0, w->data, w->row_bytes, r0, r1, xq, c->xq_row, n, y, ldy);
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
                     int ith, int nth) {
    int64_t chunk[4], count[4], total = 0;
    /* only the first kern_threads_for(cost) threads claim chunks (small products: one) */
    double cost = 0;
    for (int j = 0; j < nj; j++) {
        cost += kern_matmul_cost_ns(jobs[j].w->type, jobs[j].w->ne0, jobs[j].w->ne1, n);
        if (jobs[j].post == MM_SWIGLU)
            cost += kern_matmul_cost_ns(jobs[j].w2->type, jobs[j].w2->ne0, jobs[j].w2->ne1, n);
    }
    nth = kern_threads_for(cost, nth);
    for (int j = 0; j < nj; j++) {
        int64_t rows = jobs[j].w->ne1;
        /* chunks per thread: kern_matmul_chunks_per_thread (few where each kernel call
           re-arranges its activations); prefill chunks are multiples of
           kern_matmul_row_quantum rows, so no chunk ends in a narrower leftover tile */
        int64_t parts = (int64_t)nth * kern_matmul_chunks_per_thread(jobs[j].w->type, n);
        int64_t align = n > 16 ? kern_matmul_row_quantum(jobs[j].w->type) : 16;
        int64_t ch = nx_align_up((size_t)((rows + parts - 1) / parts), (size_t)align);
        chunk[j] = ch;
        count[j] = (rows + ch - 1) / ch;
        total += count[j];
    }
    while (ith < nth) {
        int64_t t = atomic_fetch_add_explicit(&c->chunk_ctr, 1, memory_order_relaxed) - *base;
        if (t >= total) break;
        int j = 0;
        while (t >= count[j]) t -= count[j++];
        const struct mm_job *jb = &jobs[j];
        const struct nx_weight *w = jb->w;
        int64_t r0 = t * chunk[j], r1 = NX_MIN(r0 + chunk[j], w->ne1);
        matmul_rows(c, w, jb->xq, r0, r1, n, jb->y, jb->ldy);
        if (jb->post == MM_ADD_RESIDUAL) {
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = r0; r < r1; r++) c->x[i * jb->ldy + r] += jb->y[i * jb->ldy + r];
        } else if (jb->post == MM_SWIGLU) {
            const struct nx_weight *u = jb->w2;
            matmul_rows(c, u, jb->xq2, r0, r1, n, jb->y2, jb->ldy);
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
                            float *tmp, int64_t *base, int64_t t0, int64_t t1, int ith, int nth) {
    prep_rows(c, c->xq_a, w->type, src, w->ne0, w->ne0, c->job_n, t0, t1);
    nx_pool_barrier(c->pool);
    struct mm_job j = {w, c->xq_a, tmp, w->ne1, MM_ADD_RESIDUAL, 0, 0, 0};
    mm_phase(c, base, &j, 1, c->job_n, ith, nth);
    nx_pool_barrier(c->pool);
}

/* The KV table token t attends to over KV head kvh, and how many of its tokens (causal). */
static const struct kv_table *attn_table(const struct nx_ctx *c, int il, int64_t t, int64_t kvh,
                                         int64_t *ntok) {
    const struct kv_cache *kv = c->kv;
    const struct kv_table *tab = &kv->tables[(size_t)c->job_seq[t] * (size_t)kv->n_tables_seq +
                                             (size_t)il * c->model->hp.n_head_kv + kvh];
    *ntok = tab->n_tokens - c->job_tail[t];
    return tab;
}

/* Accumulated attention of token t over KV head kvh (H2O): scores and softmax, the
 * probabilities summed over the gqa heads into the table's per-slot accumulators. The output
 * itself comes from the fused path (attn_tile), as for every other sequence, so a sequence
 * whose budget is never reached gets the same bits as with the full policy. */
static void attn_accumulate(struct nx_ctx *c, int il, int64_t t, int64_t kvh, int ith) {
    const struct kv_cache *kv = c->kv;
    const struct nx_hparams *hp = &c->model->hp;
    const int64_t B = kv->p.block, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd;
    const int gqa = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    float *sc = c->scores + (size_t)ith * (size_t)gqa * (size_t)c->max_tokens;
    int64_t ntok;
    const struct kv_table *tab = attn_table(c, il, t, kvh, &ntok);
    const float *qg = c->q + t * qd + kvh * gqa * hd;
    for (int64_t j0 = 0; j0 < ntok; j0 += B) {
        int32_t b = tab->blocks[j0 / B];
        kern_attn_scores(kv->p.type, hd, kv_block_k(kv, b), kv->row_bytes, NX_MIN(B, ntok - j0),
                         qg, gqa, scale, sc + j0, c->max_tokens);
    }
    for (int g = 0; g < gqa; g++) kern_softmax(sc + (size_t)g * c->max_tokens, ntok);
    for (int64_t j0 = 0; j0 < ntok; j0 += B) {
        float *acc_b = kv_block_acc(kv, tab->blocks[j0 / B]);
        for (int64_t j = j0; j < NX_MIN(j0 + B, ntok); j++)
            for (int g = 0; g < gqa; g++) acc_b[j - j0] += sc[(size_t)g * c->max_tokens + j];
    }
}

/* Fused partial states of nq query heads q over the blocks [b0, b1) of table tab (ntok
 * tokens), part b at parts + (b - b0) * rec (kern_attn_blocks, i.e. one kern_attn_block per
 * cache block, a fixed partition, each block's successor prefetched while it is reduced),
 * ATT_RUN blocks per call. */
#define ATT_RUN 16
static void attn_run(const struct kv_cache *kv, const struct kv_table *tab, int64_t ntok,
                     int64_t b0, int64_t b1, int64_t hd, const float *q, int64_t nq, float scale,
                     float *parts, int64_t rec) {
    const int64_t B = kv->p.block;
    const void *kp[ATT_RUN], *vp[ATT_RUN];
    for (int64_t r0 = b0; r0 < b1; r0 += ATT_RUN) {
        int64_t nb = NX_MIN((int64_t)ATT_RUN, b1 - r0);
        for (int64_t i = 0; i < nb; i++) {
            int32_t blk = tab->blocks[r0 + i];
            kp[i] = kv_block_k(kv, blk), vp[i] = kv_block_v(kv, blk);
        }
        NX_ASSERT(rec == nq * (hd + 2) && "attn_run: parts of a call are contiguous");
        kern_attn_blocks(kv->p.type, hd, kp, vp, kv->row_bytes, nb, B, ntok - r0 * B, q, nq, scale,
                         parts + (r0 - b0) * rec);
    }
}

/* Fused partial states of KV blocks [b0, b1) of token t's table over KV head kvh, part b at
 * parts + b * gqa * (hd + 2). */
static void attn_parts(const struct nx_ctx *c, int il, int64_t t, int64_t kvh, int64_t b0,
                       int64_t b1, float *parts) {
    const struct kv_cache *kv = c->kv;
    const struct nx_hparams *hp = &c->model->hp;
    const int64_t hd = hp->head_dim, qd = (int64_t)hp->n_head * hd;
    const int gqa = hp->n_head / hp->n_head_kv;
    const float scale = 1.0f / sqrtf((float)hd);
    int64_t ntok;
    const struct kv_table *tab = attn_table(c, il, t, kvh, &ntok);
    const float *qg = c->q + t * qd + kvh * gqa * hd;
    attn_run(kv, tab, ntok, b0, b1, hd, qg, gqa, scale, parts + b0 * gqa * (hd + 2), gqa * (hd + 2));
}

/*
 * Attention of the nt (<= CTX_ATT_TILE) consecutive step entries t0.. of one sequence over KV
 * head kvh, into xn. Blocks every entry sees whole are reduced once for all of them (one
 * kern_attn_block call with nt * gqa query heads, so each K/V row is read once per tile); the
 * rest per entry; blocks past an entry's end are empty parts (m = -inf), which the merge skips.
 * kern_attn_block and kern_attn_merge compute each head independently of the others, so every
 * entry gets the bits it gets alone (nt = 1: decode, other batches, thread counts).
 * Scratch: parts (CTX_ATT_TILE * blocks of max_tokens * gqa * (hd + 2) floats), tmp (2 *
 * CTX_ATT_TILE * gqa * hd floats).
 */
static void attn_tile(const struct nx_ctx *c, int il, int64_t t0, int64_t nt, int64_t kvh,
                      float *parts, float *tmp) {
    const struct kv_cache *kv = c->kv;
    const struct nx_hparams *hp = &c->model->hp;
    const int64_t B = kv->p.block, hd = hp->head_dim, qd = (int64_t)hp->n_head * hd;
    const int gqa = hp->n_head / hp->n_head_kv;
    const int64_t psz = gqa * (hd + 2), rec = nt * psz, gq = gqa * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    if (nt == 1) {
        int64_t ntok;
        attn_table(c, il, t0, kvh, &ntok);
        attn_parts(c, il, t0, kvh, 0, (ntok + B - 1) / B, parts);
        kern_attn_merge(hd, gqa, (ntok + B - 1) / B, parts, c->xn + t0 * qd + kvh * gq);
        return;
    }
    int64_t nmin = INT64_MAX, nbmax = 0, ntok;
    const struct kv_table *tab = NULL;
    float *qbuf = tmp, *obuf = tmp + CTX_ATT_TILE * gq;
    for (int64_t i = 0; i < nt; i++) {
        tab = attn_table(c, il, t0 + i, kvh, &ntok);
        nmin = NX_MIN(nmin, ntok);
        nbmax = NX_MAX(nbmax, (ntok + B - 1) / B);
        memcpy(qbuf + i * gq, c->q + (t0 + i) * qd + kvh * gq, sizeof(float) * (size_t)gq);
    }
    attn_run(kv, tab, nmin / B * B, 0, nmin / B, hd, qbuf, nt * gqa, scale, parts, rec);
    for (int64_t i = 0; i < nt; i++) {
        attn_table(c, il, t0 + i, kvh, &ntok);
        int64_t nblk = (ntok + B - 1) / B;
        for (int64_t b = nmin / B; b < nbmax; b++) {
            float *p = parts + b * rec + i * psz;
            if (b < nblk) {
                int32_t blk = tab->blocks[b];
                kern_attn_block(kv->p.type, hd, kv_block_k(kv, blk), kv->row_bytes,
                                kv_block_v(kv, blk), kv->row_bytes, NX_MIN(B, ntok - b * B),
                                qbuf + i * gq, gqa, scale, p);
                continue;
            }
            for (int g = 0; g < gqa; g++) {
                p[g * (hd + 2)] = -INFINITY;
                p[g * (hd + 2) + 1] = 0.0f;
                memset(p + g * (hd + 2) + 2, 0, sizeof(float) * (size_t)hd);
            }
        }
    }
    kern_attn_merge(hd, nt * gqa, nbmax, parts, obuf);
    for (int64_t i = 0; i < nt; i++)
        memcpy(c->xn + (t0 + i) * qd + kvh * gq, obuf + i * gq, sizeof(float) * (size_t)gq);
}

/* Entry t starts an attention tile (see attention). */
static bool tile_start(const struct nx_ctx *c, int64_t t) {
    return t % CTX_ATT_TILE == 0 || c->job_seq[t] != c->job_seq[t - 1];
}

/*
 * Causal attention of the step, output into xn (n, qd). Every (token, KV head) reduces its
 * table block by block to fused partial states (kern_attn_block) merged in block order
 * (kern_attn_merge): the same kernel calls on the same inputs whichever thread runs them, so
 * the output does not depend on the thread count, the batch, or how the work below is dealt.
 * - Decode (n <= CTX_ATT_SPLIT_TOKENS and fewer (token, KV head) pairs than ~4 per thread): each
 *   pair's blocks are cut into groups of ATT_GROUP_BLOCKS (fixed, independent of nth) dealt
 *   round-robin to the threads (flash-decoding); a barrier, then each pair is merged by one
 *   thread from the shared c->att_parts.
 * - Otherwise (prompts, batches): units of (KV head, tile of up to CTX_ATT_TILE consecutive
 *   entries of one sequence) are claimed from the chunk counter; a tile reads each KV block
 *   once for all its entries (attn_tile) in the claiming thread's slice of att_parts.
 * - With attention accumulators (H2O) one thread owns all tokens of a KV head, in order, one
 *   entry at a time; those sequences also get their probabilities (attn_accumulate).
 * Only the first kern_threads_for(cost) threads take part (small attention runs on one).
 */
#define ATT_GROUP_BLOCKS 8
static void attention(struct nx_ctx *c, int il, int ith, int nth, int64_t *base) {
    const struct nx_hparams *hp = &c->model->hp;
    const int64_t n = c->job_n, nkv = hp->n_head_kv, hd = hp->head_dim;
    const int64_t qd = (int64_t)hp->n_head * hd, B = c->kv->p.block;
    const int gqa = hp->n_head / hp->n_head_kv;
    const int64_t psz = gqa * (hd + 2), nblk_max = (c->max_tokens + B - 1) / B;
    double cost = 0;
    for (int64_t t = 0; t < n; t++)
        cost += kern_attn_cost_ns(c->kv->p.type, hd, (int64_t)c->job_pos[t] + 1, gqa) * (double)nkv;
    int nuse = kern_threads_for(cost, nth);
    if (!c->job_acc && n <= CTX_ATT_SPLIT_TOKENS && n * nkv < 4 * (int64_t)nuse) {
        int64_t gmax = 1;
        for (int64_t u = 0; u < n * nkv; u++) {
            int64_t ntok;
            attn_table(c, il, u / nkv, u % nkv, &ntok);
            int64_t g = ((ntok + B - 1) / B + ATT_GROUP_BLOCKS - 1) / ATT_GROUP_BLOCKS;
            if (g > gmax) gmax = g;
        }
        for (int64_t u = ith; ith < nuse && u < n * nkv * gmax; u += nuse) {
            int64_t pair = u / gmax, b0 = (u % gmax) * ATT_GROUP_BLOCKS, ntok;
            attn_table(c, il, pair / nkv, pair % nkv, &ntok);
            int64_t nblk = (ntok + B - 1) / B;
            if (b0 < nblk)
                attn_parts(c, il, pair / nkv, pair % nkv, b0, NX_MIN(b0 + ATT_GROUP_BLOCKS, nblk),
                           c->att_parts + pair * nblk_max * psz);
        }
        nx_pool_barrier(c->pool);
        for (int64_t pair = ith; ith < nuse && pair < n * nkv; pair += nuse) {
            int64_t t = pair / nkv, kvh = pair % nkv, ntok;
            attn_table(c, il, t, kvh, &ntok);
            kern_attn_merge(hd, gqa, (ntok + B - 1) / B, c->att_parts + pair * nblk_max * psz,
                            c->xn + t * qd + kvh * gqa * hd);
        }
        return;
    }
    float *parts = c->att_parts + (size_t)ith * CTX_ATT_TILE * (size_t)nblk_max * (size_t)psz;
    float *tmp = c->att_tmp + (size_t)ith * 2 * CTX_ATT_TILE * (size_t)gqa * (size_t)hd;
    if (c->job_acc) {
        int64_t u0 = 0, u1 = 0;
        if (ith < nuse) op_split(n * nkv, n, ith, nuse, &u0, &u1);
        for (int64_t u = u0; u < u1; u++) {
            int64_t t = u % n, kvh = u / n;
            if (c->seqs[c->job_seq[t]].acc_attn) attn_accumulate(c, il, t, kvh, ith);
            attn_tile(c, il, t, 1, kvh, parts, tmp);
        }
        return;
    }
    /* tiles: runs of up to CTX_ATT_TILE consecutive entries of one sequence, cut at fixed
       places (every CTX_ATT_TILE entries of the step, and where the sequence changes); units
       (KV head, tile) claimed from the chunk counter (as mm_phase: a slow thread takes fewer) */
    int64_t ntile = 0;
    for (int64_t t = 0; t < n; t++) ntile += tile_start(c, t);
    while (ith < nuse) {
        int64_t u = atomic_fetch_add_explicit(&c->chunk_ctr, 1, memory_order_relaxed) - *base;
        if (u >= nkv * ntile) break;
        int64_t kvh = u / ntile, k = u % ntile, t0 = 0;
        for (int64_t t = 0;; t++)
            if (tile_start(c, t) && k-- == 0) {
                t0 = t;
                break;
            }
        int64_t nt = 1;
        while (t0 + nt < n && !tile_start(c, t0 + nt)) nt++;
        attn_tile(c, il, t0, nt, kvh, parts, tmp);
    }
    *base += nkv * ntile + nuse;
}

static void forward_worker(void *arg, int ith, int nth) {
    struct nx_ctx *c = arg;
    const struct nx_model *m = c->model;
    const struct nx_hparams *hp = &m->hp;
    struct nx_pool *pool = c->pool;
    const int64_t n = c->job_n;
    const int64_t n_embd = hp->n_embd, hd = hp->head_dim;
    const int64_t qd = (int64_t)hp->n_head * hd, kvd = (int64_t)hp->n_head_kv * hd;
    const int64_t n_ff = hp->n_ff, half = hp->n_rot / 2;
    int64_t t0, t1; /* this thread's token rows (norms, prep_rows' columns) */
    op_split(n, KERN_BATCH_ALIGN, ith, nth, &t0, &t1);
    int64_t base = 0; /* this thread's view of where the chunk counter's current phase starts */

    /* embeddings and the RoPE table for this batch */
    for (int64_t t = t0; t < t1; t++) {
        const struct nx_weight *e = &m->tok_embd;
        kern_weight_row(e->type, e->data, e->row_bytes, n_embd, c->job_tok[t], c->x + t * n_embd);
        op_rope_table(c->rope_cs + t * half * 2, (double)c->job_pos[t], m->rope_inv_freq, half);
    }
    nx_pool_barrier(pool);

    for (int il = 0; il < hp->n_layer; il++) {
        const struct nx_layer *L = &m->layers[il];
        bool k_sep = L->wk.type != L->wq.type, v_sep = L->wv.type != L->wq.type;
        bool kv_same = L->wk.type == L->wv.type;

        /* attention norm, activations for q/k/v */
        for (int64_t t = t0; t < t1; t++)
            op_rmsnorm(c->xn + t * n_embd, c->x + t * n_embd, L->attn_norm, n_embd, hp->rms_eps);
        prep_rows(c, c->xq_a, L->wq.type, c->xn, n_embd, n_embd, n, t0, t1);
        if (k_sep || v_sep)
            prep_rows(c, c->xq_b, k_sep ? L->wk.type : L->wv.type, c->xn, n_embd, n_embd, n, t0, t1);
        nx_pool_barrier(pool);
        if (v_sep && k_sep && !kv_same) {
            /* three different weight types: q and k first, then v with its own activations */
            struct mm_job qk[2] = {{&L->wq, c->xq_a, c->q, qd, MM_STORE, 0, 0, 0},
                                   {&L->wk, c->xq_b, c->k, kvd, MM_STORE, 0, 0, 0}};
            mm_phase(c, &base, qk, 2, n, ith, nth);
            nx_pool_barrier(pool);
            prep_rows(c, c->xq_b, L->wv.type, c->xn, n_embd, n_embd, n, t0, t1);
            nx_pool_barrier(pool);
            struct mm_job vj = {&L->wv, c->xq_b, c->v, kvd, MM_STORE, 0, 0, 0};
            mm_phase(c, &base, &vj, 1, n, ith, nth);
        } else {
            struct mm_job qkv[3] = {
                {&L->wq, c->xq_a, c->q, qd, MM_STORE, 0, 0, 0},
                {&L->wk, k_sep ? c->xq_b : c->xq_a, c->k, kvd, MM_STORE, 0, 0, 0},
                {&L->wv, v_sep ? c->xq_b : c->xq_a, c->v, kvd, MM_STORE, 0, 0, 0}};
            mm_phase(c, &base, qkv, 3, n, ith, nth);
        }
        nx_pool_barrier(pool);

        /* q: bias, norm, RoPE per (token, head); k/v: per KV head, tokens appended in order */
        {
            int64_t units = n * hp->n_head + (int64_t)c->job_nbseq * hp->n_head_kv;
            int64_t u0, u1;
            op_split(units, 1, ith, nth, &u0, &u1);
            for (int64_t u = u0; u < u1; u++) {
                if (u < n * hp->n_head) {
                    int64_t t = u / hp->n_head, h = u % hp->n_head;
                    float *qh = c->q + t * qd + h * hd;
                    if (L->bq)
                        for (int64_t i = 0; i < hd; i++) qh[i] += L->bq[h * hd + i];
                    if (L->q_norm) op_rmsnorm(qh, qh, L->q_norm, hd, hp->rms_eps);
                    op_rope_apply(qh, c->rope_cs + t * half * 2, hp->n_rot, hp->rope_neox);
                    const struct ctx_seq *sq = &c->seqs[c->job_seq[t]];
                    if (sq->ev && c->job_tail[t] < sq->kv.window) {
                        int32_t pos = c->job_pos[t];
                        memcpy(kv_evict_window_slot(sq->ev, il, pos) + h * hd, qh,
                               sizeof(float) * (size_t)hd);
                        if (h == 0) kv_evict_window_mark(sq->ev, il, pos);
                    }
                    continue;
                }
                int64_t su = u - n * hp->n_head, h = su % hp->n_head_kv;
                int32_t seq = c->job_bseq[su / hp->n_head_kv];
                struct kv_table *tab = kv_seq_table(c->kv, seq, il, (int)h);
                for (int64_t t = 0; t < n; t++) {
                    if (c->job_seq[t] != seq) continue;
                    float *kh = c->k + t * kvd + h * hd;
                    float *vh = c->v + t * kvd + h * hd;
                    if (L->bk)
                        for (int64_t i = 0; i < hd; i++) kh[i] += L->bk[h * hd + i];
                    if (L->bv)
                        for (int64_t i = 0; i < hd; i++) vh[i] += L->bv[h * hd + i];
                    if (L->k_norm) op_rmsnorm(kh, kh, L->k_norm, hd, hp->rms_eps);
                    op_rope_apply(kh, c->rope_cs + t * half * 2, hp->n_rot, hp->rope_neox);
                    kv_append(c->kv, tab, c->job_pos[t], kh, vh);
                }
            }
        }
        nx_pool_barrier(pool);

        /* causal attention per (token, KV head), the gqa query heads of the group together;
           output into xn (n, qd) */
        attention(c, il, ith, nth, &base);
        nx_pool_barrier(pool);
        /* q and xn are only read until residual_matmul's barriers: thread 0 copies them */
        if (c->probe && ith == 0) probe_capture(c, il);
        residual_matmul(c, &L->wo, c->xn, c->ffa, &base, t0, t1, ith, nth);

        /* feed-forward: down(silu(gate x) * up x) */
        for (int64_t t = t0; t < t1; t++)
            op_rmsnorm(c->xn + t * n_embd, c->x + t * n_embd, L->ffn_norm, n_embd, hp->rms_eps);
        prep_rows(c, c->xq_a, L->gate.type, c->xn, n_embd, n_embd, n, t0, t1);
        if (L->up.type != L->gate.type)
            prep_rows(c, c->xq_b, L->up.type, c->xn, n_embd, n_embd, n, t0, t1);
        nx_pool_barrier(pool);
        {
            struct mm_job gj = {&L->gate, c->xq_a, c->ffa, n_ff, MM_SWIGLU, &L->up,
                                L->up.type != L->gate.type ? c->xq_b : c->xq_a, c->ffb};
            mm_phase(c, &base, &gj, 1, n, ith, nth);
        }
        nx_pool_barrier(pool);
        residual_matmul(c, &L->down, c->ffa, c->ffb, &base, t0, t1, ith, nth);
    }

    /* output: final norm and logits for tokens [out0, n) */
    int64_t nout = c->job_nout;
    int64_t o0, o1;
    op_split(nout, KERN_BATCH_ALIGN, ith, nth, &o0, &o1);
    for (int64_t t = o0; t < o1; t++)
        op_rmsnorm(c->xn + t * n_embd, c->x + (int64_t)c->job_out[t] * n_embd, m->output_norm,
                   n_embd, hp->rms_eps);
    prep_rows(c, c->xq_a, m->output.type, c->xn, n_embd, n_embd, nout, o0, o1);
    nx_pool_barrier(pool);
    if (nout > 0) {
        struct mm_job lj = {&m->output, c->xq_a, c->job_logits, hp->n_vocab, MM_STORE, 0, 0, 0};
        mm_phase(c, &base, &lj, 1, nout, ith, nth);
    }
}

void ctx_pool_run(struct nx_ctx *c, void (*fn)(void *, int, int), void *arg, int nth) {
    struct nx_pool *pool = nx_pool_shared_lock();
    c->pool = pool;
    nx_pool_run(pool, fn, arg, NX_MIN(nth, nx_pool_size(pool)));
    c->pool = NULL;
    nx_pool_shared_unlock();
}

/* Threads the step's largest operation deserves (kern_threads_for): when no product and no
 * attention of the step is worth a second thread (tiny models), the step runs on one thread
 * without waking the pool. */
static int step_threads(const struct nx_ctx *c, int nth) {
    const struct nx_model *m = c->model;
    const struct nx_hparams *hp = &m->hp;
    int64_t n = c->job_n;
    double most = kern_matmul_cost_ns(m->output.type, m->output.ne0, m->output.ne1, c->job_nout);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct nx_layer *L = &m->layers[il];
        const struct nx_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        double qkv = 0;
        for (size_t i = 0; i < NX_ARRAY_LEN(ws); i++) {
            double w = kern_matmul_cost_ns(ws[i]->type, ws[i]->ne0, ws[i]->ne1, n);
            if (i < 3) qkv += w;
            most = NX_MAX(most, i < 3 ? qkv : w);
        }
    }
    double att = 0;
    for (int64_t t = 0; t < n; t++)
        att += kern_attn_cost_ns(c->kv->p.type, hp->head_dim, (int64_t)c->job_pos[t] + 1,
                                 hp->n_head / hp->n_head_kv) * (double)hp->n_head_kv;
    return kern_threads_for(NX_MAX(most, att), nth);
}

void forward_run(struct nx_ctx *c, int nth) {
    atomic_store(&c->chunk_ctr, 0);
    ctx_pool_run(c, forward_worker, c, step_threads(c, nth));
}
