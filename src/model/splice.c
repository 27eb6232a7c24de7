/*
 * splice.c - DESIGN: compiling KV blocks from a context, splicing them into a live sequence,
 * depth-adaptive repair, and the position-range operations (nx_seq_rm / nx_seq_shift).
 *
 * Keys live in the cache after RoPE at their absolute positions. RoPE turns each pair
 * (x[i0], x[i1]) of a head (adjacent pairs (2i, 2i+1), or NEOX halves (i, i + n_rot/2); only
 * the first n_rot dimensions) by the angle pos * theta_i, theta_i = the model's
 * rope_inv_freq[i] (base, linear scale and Llama-3 rope_freqs folded in). Rotations of one
 * plane compose by adding angles, so a key stored at m0 becomes the key at m0 + delta by one
 * more rotation by delta * theta_i, whatever the scaling; the angle and the rotation are
 * computed in double from the stored (rounded) key, so the only error is the KV type's
 * rounding of the result (and the float rounding of the stored rotation itself). Values carry
 * no position and are copied as they are (converted when the block's and the cache's KV types
 * differ). A splice at delta = 0 into a cache of the block's type copies rows bit for bit.
 *
 * Spliced tokens become ordinary cache entries (appended to every (layer, KV head) table in
 * position order); with pin set, their slots carry the cache's pin flag and compaction keeps
 * them whatever the eviction policy selects.
 *
 * Repair: the last ceil(n * R / 100) tokens of the block are not spliced but decoded with
 * nx_decode, so they (and everything after) attend to the re-anchored block through real
 * forward passes. R = R_base up to P positions, then grows linearly to 100% at P * K.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "kern/kern.h"
#include "kv/kv_cache.h"
#include "kv/kvblock.h"
#include "model/context.h"
#include "model/fingerprint.h"
#include "model/model.h"

/* ---- rotation ---- */

struct rot {
    int half;
    bool neox;
    double *cs; /* (half, 2) cos, sin of delta * theta_i */
};

/* r rotates by delta positions from now on (r made by rot_init for the same model) */
static void rot_set(struct rot *r, const struct nx_model *m, int64_t delta) {
    for (int i = 0; i < r->half; i++) {
        double th = (double)delta * (double)m->rope_inv_freq[i];
        r->cs[2 * i] = cos(th);
        r->cs[2 * i + 1] = sin(th);
    }
}

static nx_status rot_init(struct rot *r, const struct nx_model *m, int64_t delta) {
    r->half = m->hp.n_rot / 2;
    r->neox = m->hp.rope_neox;
    r->cs = nx_malloc(sizeof(double) * 2 * (size_t)(r->half > 0 ? r->half : 1));
    if (!r->cs) return NX_STATUS_NOMEM;
    rot_set(r, m, delta);
    return NX_STATUS_OK;
}

/* Rotate a key (floats, in place); the products and sums in double. */
static void rot_floats(const struct rot *r, float *x) {
    for (int i = 0; i < r->half; i++) {
        int i0 = r->neox ? i : 2 * i, i1 = r->neox ? i + r->half : 2 * i + 1;
        double c = r->cs[2 * i], s = r->cs[2 * i + 1];
        double x0 = x[i0], x1 = x[i1];
        x[i0] = (float)(x0 * c - x1 * s);
        x[i1] = (float)(x0 * s + x1 * c);
    }
}

/* Rotate the key row (cache type t, head_dim elements) in place through floats in `tmp`. */
static void rot_row(const struct rot *r, enum nx_type t, int hd, void *row, float *tmp) {
    kern_load_kv(t, hd, row, tmp);
    rot_floats(r, tmp);
    kern_store_kv(t, hd, tmp, row);
}

static int32_t pos_at(const struct kv_cache *kv, const struct kv_table *t, int64_t i) {
    return kv_block_pos(kv, kv_slot_block(kv, t, i))[i % kv->p.block];
}

/* ---- compile ---- */

nx_status nx_kv_block_compile(nx_ctx *ctx, const nx_token *prefix, int32_t n_prefix,
                              const nx_token *tokens, int32_t n, int32_t m0, nx_kv_block **out) {
    *out = NULL;
    const struct nx_model *m = ctx_model(ctx);
    if (n <= 0 || !tokens || n_prefix < 0 || (n_prefix > 0 && !prefix) || m0 < n_prefix)
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "compile: need n > 0 tokens and 0 <= n_prefix (%d) <= m0 (%d)",
                             n_prefix, m0);
    if (ctx_evicting(ctx))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "compile: the context has an eviction budget; compile in one without");
    if ((int64_t)m0 + n > nx_ctx_n_ctx(ctx))
        return ctx_set_error(ctx, NX_STATUS_KV_FULL, "compile: m0 %d + %d tokens > n_ctx %d", m0,
                             n, nx_ctx_n_ctx(ctx));
    ctx_seq_clear(ctx, 0);
    ctx_set_n_past(ctx, m0 - n_prefix);
    nx_status st;
    if (n_prefix > 0 && (st = nx_decode(ctx, prefix, n_prefix, false))) return st;
    if ((st = nx_decode(ctx, tokens, n, false))) return st;
    struct kv_cache *kv = ctx_kv_cache(ctx);
    const int nl = m->hp.n_layer, nkv = m->hp.n_head_kv;
    for (int il = 0; il < nl; il++)
        for (int h = 0; h < nkv; h++)
            if (kv_table_at(kv, il, h)->n_tokens != (int64_t)n_prefix + n)
                return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                                     "compile: the cache does not hold the block's tokens");
    struct nx_kv_block *b;
    struct kv_fingerprint fp;
    kv_fingerprint_of(m, &fp);
    if ((st = kvblock_alloc(&fp, kv->p.type, n, m0, &b)))
        return ctx_set_error(ctx, st, "compile: out of memory for the block");
    memcpy((void *)b->tokens, tokens, sizeof(nx_token) * (size_t)n);
    for (int il = 0; il < nl; il++)
        for (int h = 0; h < nkv; h++) {
            struct kv_table *t = kv_table_at(kv, il, h);
            for (int32_t i = 0; i < n; i++) {
                int64_t j = (int64_t)n_prefix + i;
                int32_t blk = kv_slot_block(kv, t, j);
                size_t off = (size_t)(j % kv->p.block) * kv->row_bytes;
                memcpy((void *)kvblock_k_row(b, il, h, i), kv_block_k(kv, blk) + off,
                       kv->row_bytes);
                memcpy((void *)kvblock_v_row(b, il, h, i), kv_block_v(kv, blk) + off,
                       kv->row_bytes);
            }
        }
    *out = b;
    return NX_STATUS_OK;
}

/* ---- splice ---- */

struct nx_splice_params nx_splice_default_params(void) {
    struct nx_splice_params p = {.pos = -1, .pin = false, .repair = true, .repair_p = 256,
                                 .repair_base = 5.0f, .repair_k = 4.0f, .repair_pct = -1.0f};
    return p;
}

double nx_splice_repair_pct(const struct nx_splice_params *p, int32_t pos) {
    double r;
    if (p->repair_pct >= 0)
        r = p->repair_pct;
    else if (pos <= p->repair_p)
        r = p->repair_base;
    else if (p->repair_k <= 1)
        r = 100;
    else
        r = p->repair_base + (double)(pos - p->repair_p) /
                                 ((double)p->repair_p * ((double)p->repair_k - 1.0)) *
                                 (100.0 - p->repair_base);
    return r < 0 ? 0 : r > 100 ? 100 : r;
}

nx_status nx_ctx_splice(nx_ctx *ctx, const nx_kv_block *b, const struct nx_splice_params *params,
                        int32_t *n_repaired) {
    struct nx_splice_params p = params ? *params : nx_splice_default_params();
    const struct nx_model *m = ctx_model(ctx);
    struct kv_cache *kv = ctx_kv_cache(ctx);
    if (n_repaired) *n_repaired = 0;
    if (!b) return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "splice: no block");
    struct nx_err e = {{0}};
    struct kv_fingerprint mfp;
    kv_fingerprint_of(m, &mfp);
    if (kv_fingerprint_check(&b->fp, &mfp, &e)) return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "%s", e.msg);
    if (p.repair && (p.repair_p < 1 || !(p.repair_base >= 0) || !(p.repair_k >= 1)))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "splice: repair parameters out of range (P >= 1, R_base >= 0, K >= 1)");
    const int32_t n_past0 = nx_ctx_n_past(ctx), n = b->n_tokens;
    const int32_t pos = p.pos < 0 ? n_past0 : p.pos;
    if (pos < n_past0)
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "splice: position %d is before the sequence's end (n_past %d)", pos,
                             n_past0);
    if ((int64_t)pos + n > nx_ctx_n_ctx(ctx))
        return ctx_set_error(ctx, NX_STATUS_KV_FULL, "splice: %d + %d tokens > n_ctx %d", pos, n,
                             nx_ctx_n_ctx(ctx));
    double r = p.repair ? nx_splice_repair_pct(&p, pos) : 0.0;
    int32_t n_rep = (int32_t)ceil((double)n * r / 100.0 - 1e-9);
    n_rep = n_rep < 0 ? 0 : n_rep > n ? n : n_rep;
    const int32_t n_sp = n - n_rep;
    if (kv_cache_reserve(kv, n_sp) != NX_STATUS_OK)
        return ctx_set_error(ctx, NX_STATUS_KV_FULL, "splice: the KV pool cannot hold %d tokens",
                             n_sp);
    const int64_t delta = (int64_t)pos - b->m0;
    const int hd = m->hp.head_dim;
    const enum nx_type kt = kv->p.type;
    bool raw = delta == 0 && b->type == kt;
    struct rot rr = {0};
    float *tmp = nx_malloc(sizeof(float) * (size_t)hd);
    unsigned char *kbuf = nx_malloc(kv->row_bytes), *vbuf = nx_malloc(kv->row_bytes);
    if (!tmp || !kbuf || !vbuf || (n_sp > 0 && rot_init(&rr, m, delta))) {
        nx_free(tmp);
        nx_free(kbuf);
        nx_free(vbuf);
        nx_free(rr.cs);
        return ctx_set_error(ctx, NX_STATUS_NOMEM, "splice: out of memory");
    }
    for (int il = 0; il < m->hp.n_layer; il++)
        for (int h = 0; h < m->hp.n_head_kv; h++) {
            struct kv_table *t = kv_table_at(kv, il, h);
            for (int32_t i = 0; i < n_sp; i++) {
                const unsigned char *ks = kvblock_k_row(b, il, h, i);
                const unsigned char *vs = kvblock_v_row(b, il, h, i);
                if (raw) {
                    kv_append_raw(kv, t, pos + i, ks, vs, p.pin);
                    continue;
                }
                /* keys: rotate from the block's type into the cache's; values: convert */
                kern_load_kv(b->type, hd, ks, tmp);
                if (delta != 0) rot_floats(&rr, tmp);
                kern_store_kv(kt, hd, tmp, kbuf);
                if (b->type == kt) {
                    memcpy(vbuf, vs, kv->row_bytes);
                } else {
                    kern_load_kv(b->type, hd, vs, tmp);
                    kern_store_kv(kt, hd, tmp, vbuf);
                }
                kv_append_raw(kv, t, pos + i, kbuf, vbuf, p.pin);
            }
        }
    nx_free(tmp);
    nx_free(kbuf);
    nx_free(vbuf);
    nx_free(rr.cs);
    ctx_set_n_past(ctx, pos + n_sp);
    if (n_rep > 0) {
        nx_status st = nx_decode(ctx, b->tokens + n_sp, n_rep, false);
        if (st) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", nx_ctx_last_error(ctx));
            nx_ctx_truncate(ctx, n_past0);
            return ctx_set_error(ctx, st, "splice: repair decode failed: %s", msg);
        }
        if (p.pin)
            for (int il = 0; il < m->hp.n_layer; il++)
                for (int h = 0; h < m->hp.n_head_kv; h++) {
                    struct kv_table *t = kv_table_at(kv, il, h);
                    for (int64_t i = t->n_tokens - 1; i >= 0 && pos_at(kv, t, i) >= pos; i--) {
                        int32_t blk = kv_slot_block(kv, t, i);
                        kv_block_pin(kv, blk)[i % kv->p.block] = 1;
                    }
                }
    }
    if (n_repaired) *n_repaired = n_rep;
    return NX_STATUS_OK;
}

/* ---- position ranges ---- */

/* First index of t whose position is >= p (positions increase along a table). */
static int64_t lower_index(const struct kv_cache *kv, const struct kv_table *t, int64_t p) {
    int64_t lo = 0, hi = t->n_tokens;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (pos_at(kv, t, mid) < p)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void norm_range(nx_pos *p0, nx_pos *p1) {
    if (*p0 < 0) *p0 = 0;
    if (*p1 < 0) *p1 = INT32_MAX;
}

static nx_status seq_rm(nx_ctx *ctx, int seq, nx_pos p0, nx_pos p1) {
    const struct nx_model *m = ctx_model(ctx);
    struct kv_cache *kv = ctx_kv_cache(ctx);
    struct kv_table *tabs = kv_seq_tables(kv, seq);
    norm_range(&p0, &p1);
    if (p0 > p1) return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_rm: p0 %d > p1 %d", p0, p1);
    const int nt = m->hp.n_layer * m->hp.n_head_kv;
    int64_t max_n = 0;
    bool tail_empty = true;
    /* pass 1: private copies of shared blocks that a compaction would write (nothing changes
       logically, so a failure leaves the sequence as it was) */
    for (int ti = 0; ti < nt; ti++) {
        struct kv_table *t = &tabs[ti];
        int64_t i0 = lower_index(kv, t, p0), i1 = lower_index(kv, t, p1);
        if (i1 < t->n_tokens) tail_empty = false;
        if (i0 < i1 && i1 < t->n_tokens && kv_table_unshare(kv, t, i0))
            return ctx_set_error(ctx, NX_STATUS_KV_FULL, "seq_rm: no free block to copy into");
        max_n = NX_MAX(max_n, t->n_tokens);
    }
    uint8_t *keep = nx_malloc((size_t)(max_n > 0 ? max_n : 1));
    if (!keep) return ctx_set_error(ctx, NX_STATUS_NOMEM, "seq_rm: out of memory");
    for (int ti = 0; ti < nt; ti++) {
        struct kv_table *t = &tabs[ti];
        int64_t i0 = lower_index(kv, t, p0), i1 = lower_index(kv, t, p1);
        if (i0 >= i1) continue;
        if (i1 == t->n_tokens) {
            kv_truncate(kv, t, i0);
            continue;
        }
        for (int64_t i = 0; i < t->n_tokens; i++) {
            keep[i] = i < i0 || i >= i1;
            if (!keep[i]) kv_block_pin(kv, kv_slot_block(kv, t, i))[i % kv->p.block] = 0;
        }
        /* pass 1 gave the table private blocks from i0 on: the compaction cannot fail */
        nx_status cst = kv_compact(kv, t, keep);
        NX_ASSERT(cst == NX_STATUS_OK);
        (void)cst;
    }
    nx_free(keep);
    int32_t n_past = ctx_seq_n_past(ctx, seq);
    ctx_seq_evict_forget_from(ctx, seq, p0);
    ctx_seq_set_n_past(ctx, seq, tail_empty && p0 < n_past ? p0 : n_past);
    return NX_STATUS_OK;
}

static nx_status seq_shift(nx_ctx *ctx, int seq, nx_pos p0, nx_pos p1, nx_pos delta) {
    const struct nx_model *m = ctx_model(ctx);
    struct kv_cache *kv = ctx_kv_cache(ctx);
    struct kv_table *tabs = kv_seq_tables(kv, seq);
    norm_range(&p0, &p1);
    if (p0 > p1) return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_shift: p0 %d > p1 %d", p0, p1);
    if (delta == 0) return NX_STATUS_OK;
    const int nt = m->hp.n_layer * m->hp.n_head_kv;
    const int32_t n_past = ctx_seq_n_past(ctx, seq), n_ctx = nx_ctx_n_ctx(ctx);
    const bool to_end = p1 >= n_past;
    int64_t new_n_past = to_end && n_past >= p0 ? (int64_t)n_past + delta : n_past;
    if (new_n_past < 0 || new_n_past > n_ctx)
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "seq_shift: n_past would become %lld, outside [0, n_ctx %d]",
                             (long long)new_n_past, n_ctx);
    /* pass 1: check order and range in every table, and unshare what will be rewritten */
    for (int ti = 0; ti < nt; ti++) {
        struct kv_table *t = &tabs[ti];
        int64_t i0 = lower_index(kv, t, p0), i1 = lower_index(kv, t, p1);
        if (i0 >= i1) {
            if (t->n_tokens > 0 && pos_at(kv, t, t->n_tokens - 1) >= new_n_past)
                return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                                     "seq_shift: n_past %lld would not be past the cached tokens",
                                     (long long)new_n_past);
            continue;
        }
        int64_t lo = (int64_t)pos_at(kv, t, i0) + delta, hi = (int64_t)pos_at(kv, t, i1 - 1) + delta;
        if (lo < 0 || hi >= new_n_past || hi >= n_ctx || (i0 > 0 && pos_at(kv, t, i0 - 1) >= lo) ||
            (i1 < t->n_tokens && pos_at(kv, t, i1) <= hi))
            return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                                 "seq_shift: positions [%lld, %lld] would overlap other tokens or "
                                 "leave [0, n_past)",
                                 (long long)lo, (long long)hi);
        if (i1 < t->n_tokens && pos_at(kv, t, t->n_tokens - 1) >= new_n_past)
            return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_shift: tokens past n_past");
        if (kv_table_unshare(kv, t, i0))
            return ctx_set_error(ctx, NX_STATUS_KV_FULL, "seq_shift: no free block to copy into");
    }
    struct rot rr;
    float *tmp = nx_malloc(sizeof(float) * (size_t)m->hp.head_dim);
    if (!tmp || rot_init(&rr, m, delta)) {
        nx_free(tmp);
        return ctx_set_error(ctx, NX_STATUS_NOMEM, "seq_shift: out of memory");
    }
    for (int ti = 0; ti < nt; ti++) {
        struct kv_table *t = &tabs[ti];
        int64_t i0 = lower_index(kv, t, p0), i1 = lower_index(kv, t, p1);
        for (int64_t i = i0; i < i1; i++) {
            int32_t blk = kv_slot_block(kv, t, i);
            size_t slot = (size_t)(i % kv->p.block);
            unsigned char *k = kv_block_k(kv, blk) + slot * kv->row_bytes;
            rot_row(&rr, kv->p.type, m->hp.head_dim, k, tmp);
            kv_block_pos(kv, blk)[slot] += delta;
        }
    }
    nx_free(tmp);
    nx_free(rr.cs);
    ctx_seq_evict_forget_from(ctx, seq, NX_MIN(p0, p0 + delta) < 0 ? 0 : NX_MIN(p0, p0 + delta));
    ctx_seq_set_n_past(ctx, seq, (int32_t)new_n_past);
    return NX_STATUS_OK;
}

/*
 * Close the gaps eviction left in sequence seq's positions, table by table: a (layer, KV head)
 * table holding n_t tokens whose last one is g_t positions before n_past gets the positions
 * base_t .. base_t + n_t - 1 with base_t = P - n_t - g_t, where P = max over tables of
 * n_t + g_t is the new n_past. So every table's tokens become consecutive and the newest
 * ones stay where they are relative to the next query; when all tables hold the same positions
 * (policies that select positions for every head at once) they become 0, 1, 2, ... Each moved
 * key is re-rotated by its own delta (runs share one). Pass 1 gives every table private
 * blocks from its first moving token (the only step that can fail), pass 2 moves; so on error
 * nothing but private copies has changed.
 */
static nx_status seq_compact(nx_ctx *ctx, int seq, nx_pos *shift_out) {
    const struct nx_model *m = ctx_model(ctx);
    struct kv_cache *kv = ctx_kv_cache(ctx);
    struct kv_table *tabs = kv_seq_tables(kv, seq);
    const int nt = m->hp.n_layer * m->hp.n_head_kv;
    const int32_t n_past = ctx_seq_n_past(ctx, seq);
    if (shift_out) *shift_out = 0;
    int64_t P = 0;
    for (int ti = 0; ti < nt; ti++) {
        const struct kv_table *t = &tabs[ti];
        if (t->n_tokens > 0)
            P = NX_MAX(P, t->n_tokens + (n_past - 1 - pos_at(kv, t, t->n_tokens - 1)));
    }
    if (P >= n_past) return NX_STATUS_OK; /* nothing to close */
    /* the new position of table t's token i */
#define NEWPOS(t, i) ((int32_t)(P - (t)->n_tokens - (n_past - 1 - pos_at(kv, (t), (t)->n_tokens - 1)) + (i)))
    for (int ti = 0; ti < nt; ti++) {
        struct kv_table *t = &tabs[ti];
        int64_t i0 = 0;
        while (i0 < t->n_tokens && pos_at(kv, t, i0) == NEWPOS(t, i0)) i0++;
        if (i0 < t->n_tokens && kv_table_unshare(kv, t, i0))
            return ctx_set_error(ctx, NX_STATUS_KV_FULL, "seq_compact: no free block to copy into");
    }
    float *tmp = nx_malloc(sizeof(float) * (size_t)m->hp.head_dim);
    struct rot rr = {0};
    if (!tmp || rot_init(&rr, m, 0)) {
        nx_free(tmp);
        return ctx_set_error(ctx, NX_STATUS_NOMEM, "seq_compact: out of memory");
    }
    int32_t at = 0; /* the delta rr rotates by */
    for (int ti = 0; ti < nt; ti++) {
        struct kv_table *t = &tabs[ti];
        for (int64_t i = 0; i < t->n_tokens; i++) {
            int32_t blk = kv_slot_block(kv, t, i);
            size_t slot = (size_t)(i % kv->p.block);
            int32_t p = kv_block_pos(kv, blk)[slot], d = NEWPOS(t, i) - p;
            if (d == 0) continue;
            if (d != at) {
                rot_set(&rr, m, d);
                at = d;
            }
            rot_row(&rr, kv->p.type, m->hp.head_dim, kv_block_k(kv, blk) + slot * kv->row_bytes, tmp);
            kv_block_pos(kv, blk)[slot] = p + d;
        }
    }
#undef NEWPOS
    nx_free(tmp);
    nx_free(rr.cs);
    const int32_t shift = n_past - (int32_t)P;
    ctx_seq_evict_forget_from(ctx, seq, 0);
    ctx_seq_set_seen_base(ctx, seq, ctx_seq_seen_base(ctx, seq) + shift);
    ctx_seq_set_n_past(ctx, seq, (int32_t)P);
    if (shift_out) *shift_out = shift;
    return NX_STATUS_OK;
}

nx_status nx_seq_rm(nx_ctx *ctx, nx_pos p0, nx_pos p1) { return seq_rm(ctx, 0, p0, p1); }
nx_status nx_seq_shift(nx_ctx *ctx, nx_pos p0, nx_pos p1, nx_pos delta) {
    return seq_shift(ctx, 0, p0, p1, delta);
}

static bool seq_ok(nx_ctx *ctx, nx_seq_id seq) { return seq >= 0 && seq < ctx_n_seq(ctx); }

nx_status nx_kv_seq_rm(nx_ctx *ctx, nx_seq_id seq, nx_pos p0, nx_pos p1) {
    if (!seq_ok(ctx, seq))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_rm: sequence %d out of range", seq);
    if (p0 < 0 && p1 < 0) {
        ctx_seq_clear(ctx, seq);
        return NX_STATUS_OK;
    }
    return seq_rm(ctx, seq, p0, p1);
}

nx_status nx_kv_seq_shift(nx_ctx *ctx, nx_seq_id seq, nx_pos p0, nx_pos p1, nx_pos delta) {
    if (!seq_ok(ctx, seq))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_shift: sequence %d out of range",
                             seq);
    return seq_shift(ctx, seq, p0, p1, delta);
}

nx_status nx_kv_seq_compact(nx_ctx *ctx, nx_seq_id seq, nx_pos *shift) {
    if (shift) *shift = 0;
    if (!seq_ok(ctx, seq))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_compact: sequence %d out of range",
                             seq);
    return seq_compact(ctx, seq, shift);
}

nx_status nx_kv_seq_keep(nx_ctx *ctx, nx_seq_id seq) {
    if (!seq_ok(ctx, seq))
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_keep: sequence %d out of range",
                             seq);
    for (int s = 0; s < ctx_n_seq(ctx); s++)
        if (s != seq) ctx_seq_clear(ctx, s);
    return NX_STATUS_OK;
}

/* Append rows i0..i1 of table st (cache skv) to table dt (cache dkv, after a reserve),
   converting between KV types; tmp/kb/vb: head_dim floats and a row of dkv's type each. */
static void copy_rows(const struct kv_cache *skv, const struct kv_table *st, int64_t i0,
                      int64_t i1, struct kv_cache *dkv, struct kv_table *dt, int hd, float *tmp,
                      unsigned char *kb, unsigned char *vb) {
    const bool same = skv->p.type == dkv->p.type;
    for (int64_t i = i0; i < i1; i++) {
        int32_t blk = kv_slot_block(skv, st, i);
        size_t slot = (size_t)(i % skv->p.block);
        const unsigned char *k = kv_block_k(skv, blk) + slot * skv->row_bytes;
        const unsigned char *v = kv_block_v(skv, blk) + slot * skv->row_bytes;
        if (!same) {
            kern_load_kv(skv->p.type, hd, k, tmp);
            kern_store_kv(dkv->p.type, hd, tmp, kb);
            kern_load_kv(skv->p.type, hd, v, tmp);
            kern_store_kv(dkv->p.type, hd, tmp, vb);
            k = kb;
            v = vb;
        }
        kv_append_raw(dkv, dt, kv_block_pos(skv, blk)[slot], k, v, kv_block_pin(skv, blk)[slot]);
    }
}

nx_status nx_kv_seq_cp(nx_ctx *ctx, nx_seq_id src, nx_seq_id dst, nx_pos p0, nx_pos p1) {
    if (!seq_ok(ctx, src) || !seq_ok(ctx, dst) || src == dst)
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "seq_cp: sequences %d -> %d (need two different ids in [0, %d))",
                             src, dst, ctx_n_seq(ctx));
    norm_range(&p0, &p1);
    if (p0 > p1) return ctx_set_error(ctx, NX_STATUS_INVALID_ARG, "seq_cp: p0 %d > p1 %d", p0, p1);
    struct kv_cache *kv = ctx_kv_cache(ctx);
    struct kv_table *stabs = kv_seq_tables(kv, src), *dtabs = kv_seq_tables(kv, dst);
    const int nt = (int)kv->n_tables_seq, hd = ctx_model(ctx)->hp.head_dim;
    int32_t first = INT32_MAX, last = -1;
    int64_t most = 0;
    bool share = true;
    for (int ti = 0; ti < nt; ti++) {
        const struct kv_table *t = &stabs[ti];
        int64_t i0 = lower_index(kv, t, p0), i1 = lower_index(kv, t, p1);
        most = NX_MAX(most, i1 - i0);
        if (i1 > i0) {
            first = NX_MIN(first, pos_at(kv, t, i0));
            last = NX_MAX(last, pos_at(kv, t, i1 - 1));
        }
        if (i0 != 0 || dtabs[ti].n_tokens != 0) share = false;
    }
    if (last < 0) return NX_STATUS_OK; /* nothing in the range */
    if (ctx_seq_n_past(ctx, dst) > first)
        return ctx_set_error(ctx, NX_STATUS_INVALID_ARG,
                             "seq_cp: sequence %d already reaches position %d > %d", dst,
                             ctx_seq_n_past(ctx, dst), first);
    if (share) {
        /* dst takes references to src's blocks: nothing is copied until one of them writes */
        for (int ti = 0; ti < nt; ti++) {
            struct kv_table *t = &stabs[ti];
            kv_table_share_prefix(kv, &dtabs[ti], t->blocks, lower_index(kv, t, p1));
        }
        kv_seq_peak_update(kv, dst);
    } else {
        if (kv_cache_reserve_seq(kv, dst, most))
            return ctx_set_error(ctx, NX_STATUS_KV_FULL,
                                 "seq_cp: the KV pool cannot hold %lld tokens", (long long)most);
        float *tmp = nx_malloc(sizeof(float) * (size_t)hd);
        if (!tmp) return ctx_set_error(ctx, NX_STATUS_NOMEM, "seq_cp: out of memory");
        for (int ti = 0; ti < nt; ti++) {
            const struct kv_table *t = &stabs[ti];
            copy_rows(kv, t, lower_index(kv, t, p0), lower_index(kv, t, p1), kv, &dtabs[ti], hd,
                      tmp, NULL, NULL);
        }
        nx_free(tmp);
    }
    ctx_seq_set_n_past(ctx, dst, last + 1);
    return NX_STATUS_OK;
}

nx_status nx_seq_cp(nx_ctx *dst, const nx_ctx *src, nx_pos p0, nx_pos p1) {
    const struct nx_model *m = ctx_model(dst);
    if (src == dst) return ctx_set_error(dst, NX_STATUS_INVALID_ARG, "seq_cp: src is dst");
    struct kv_fingerprint a, b;
    kv_fingerprint_of(m, &a);
    kv_fingerprint_of(ctx_model(src), &b);
    if (memcmp(&a, &b, sizeof a) != 0)
        return ctx_set_error(dst, NX_STATUS_INVALID_ARG, "seq_cp: the contexts use different models");
    norm_range(&p0, &p1);
    if (p0 > p1) return ctx_set_error(dst, NX_STATUS_INVALID_ARG, "seq_cp: p0 %d > p1 %d", p0, p1);
    if (nx_ctx_n_past(dst) > p0)
        return ctx_set_error(dst, NX_STATUS_INVALID_ARG,
                             "seq_cp: the destination already reaches position %d > p0 %d",
                             nx_ctx_n_past(dst), p0);
    /* the source is only read; its accessors take a non-const context */
    struct kv_cache *skv = ctx_kv_cache((nx_ctx *)src), *dkv = ctx_kv_cache(dst);
    const int nt = m->hp.n_layer * m->hp.n_head_kv, hd = m->hp.head_dim;
    int64_t most = 0;
    int32_t last = -1;
    for (int ti = 0; ti < nt; ti++) {
        const struct kv_table *t = &skv->tables[ti];
        int64_t i0 = lower_index(skv, t, p0), i1 = lower_index(skv, t, p1);
        most = NX_MAX(most, i1 - i0);
        if (i1 > i0) last = NX_MAX(last, pos_at(skv, t, i1 - 1));
    }
    if (last >= nx_ctx_n_ctx(dst))
        return ctx_set_error(dst, NX_STATUS_KV_FULL, "seq_cp: position %d >= n_ctx %d", last,
                             nx_ctx_n_ctx(dst));
    if (most > 0 && kv_cache_reserve(dkv, most))
        return ctx_set_error(dst, NX_STATUS_KV_FULL, "seq_cp: the KV pool cannot hold %lld tokens",
                             (long long)most);
    float *tmp = nx_malloc(sizeof(float) * (size_t)hd);
    unsigned char *kb = nx_malloc(dkv->row_bytes), *vb = nx_malloc(dkv->row_bytes);
    if (!tmp || !kb || !vb) {
        nx_free(tmp);
        nx_free(kb);
        nx_free(vb);
        return ctx_set_error(dst, NX_STATUS_NOMEM, "seq_cp: out of memory");
    }
    for (int ti = 0; ti < nt; ti++) {
        const struct kv_table *t = &skv->tables[ti];
        copy_rows(skv, t, lower_index(skv, t, p0), lower_index(skv, t, p1), dkv,
                  &dkv->tables[ti], hd, tmp, kb, vb);
    }
    nx_free(tmp);
    nx_free(kb);
    nx_free(vb);
    if (last >= 0) ctx_set_n_past(dst, last + 1);
    return NX_STATUS_OK;
}
