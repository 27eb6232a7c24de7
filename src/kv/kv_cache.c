/*
 * kv_cache.c - DESIGN: the pool is parallel arrays indexed by block id (keys, values,
 * positions, pins, accumulators) plus a stack of free ids, shared by every sequence; each
 * sequence has its own tables (n_layer * n_head_kv of them, in one array). Tables hold block
 * ids; a block is on the free stack exactly when nothing references it (invariant checked by
 * the tests: references recounted from the tables + outside holders, in-use + free = pool
 * size). Tables are sized at init (for n_ctx tokens each), so nothing allocates after
 * kv_cache_init. Pushes to the free stack take the cache's mutex, since eviction compacts the
 * tables of different layers on different threads. Compaction walks the kept tokens in order
 * and copies each to the next write slot only when it moves; a dropped run that covers whole
 * blocks costs nothing but the unlink.
 *
 * Reference counts (for the sequence cache): refs[b] counts the tables holding b plus the
 * holders outside them. Every path that used to push a block on the free stack drops one
 * reference instead; the block is free when the count reaches zero. With no outside holders
 * (ext_refs == 0) and no sequence copies (nx_kv_seq_cp) every in-use block has exactly one
 * reference, as before.
 */
#include "kv/kv_cache.h"

#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "kern/kern.h"

static void push_free(struct kv_cache *c, int32_t b);

nx_status kv_cache_init(const struct kv_cache_params *p, struct kv_cache **out) {
    *out = NULL;
    if (p->n_layer < 1 || p->n_head_kv < 1 || p->head_dim < 1 || p->block < 1 ||
        p->n_blocks < 1 || p->n_blocks > INT32_MAX || p->n_seq < 0 || p->n_seq > 4096 ||
        p->max_table_tokens < 0 || (p->type != NX_TYPE_F16 && p->type != NX_TYPE_F32))
        return NX_STATUS_INVALID_ARG;
    struct kv_cache *c = nx_calloc(1, sizeof *c);
    if (!c) return NX_STATUS_NOMEM;
    c->p = *p;
    if (c->p.n_seq == 0) c->p.n_seq = 1;
    c->n_tables_seq = (int64_t)p->n_layer * p->n_head_kv;
    pthread_mutex_init(&c->free_lock, NULL);
    c->row_bytes = (size_t)p->head_dim * (p->type == NX_TYPE_F32 ? 4 : 2);
    size_t slots, kv_bytes;
    if (!nx_mul_size((size_t)p->n_blocks, (size_t)p->block, &slots) ||
        !nx_mul_size(slots, c->row_bytes, &kv_bytes))
        goto nomem;
    c->block_bytes = (size_t)p->block * (2 * c->row_bytes + sizeof(int32_t) +
                                         (p->with_acc ? sizeof(float) : 0));
    c->k_pool = nx_malloc_aligned(kv_bytes);
    c->v_pool = nx_malloc_aligned(kv_bytes);
    /* decode at depth reads every block of a table, each at its own place in the pool: huge
       pages spare a TLB walk per 4 KiB block (+1.1-1.4% decode at depth 4096, Q4_K_M,
       paired A/B on a Sapphire-Rapids-class Xeon) */
    nx_advise_huge(c->k_pool, kv_bytes);
    nx_advise_huge(c->v_pool, kv_bytes);
    c->pos_pool = nx_malloc(slots * sizeof(int32_t));
    c->acc_pool = nx_calloc(slots, sizeof(float));
    c->acc_owner = nx_calloc((size_t)p->n_blocks, sizeof(uint32_t));
    c->seq_tag = nx_calloc((size_t)c->p.n_seq, sizeof(uint32_t));
    c->pin_pool = nx_calloc(slots, 1);
    c->refs = nx_calloc((size_t)p->n_blocks, sizeof(int32_t));
    c->free_ids = nx_malloc((size_t)p->n_blocks * sizeof(int32_t));
    size_t n_tables = (size_t)c->p.n_seq * (size_t)c->n_tables_seq;
    c->tables = nx_calloc(n_tables, sizeof *c->tables);
    c->seq_peak_blocks = nx_calloc((size_t)c->p.n_seq, sizeof(int64_t));
    if (!c->k_pool || !c->v_pool || !c->pos_pool || !c->acc_pool || !c->acc_owner || !c->seq_tag ||
        !c->pin_pool || !c->refs || !c->free_ids || !c->tables || !c->seq_peak_blocks)
        goto nomem;
    /* a table can never hold more than the whole pool, nor (positions being distinct) more
       than max_table_tokens, plus a block for a partly filled first one */
    int64_t cap = p->n_blocks;
    if (p->max_table_tokens > 0)
        cap = NX_MIN(cap, (p->max_table_tokens + p->block - 1) / p->block + 1);
    for (size_t i = 0; i < n_tables; i++) {
        c->tables[i].cap = (int32_t)cap;
        c->tables[i].blocks = nx_malloc((size_t)cap * sizeof(int32_t));
        if (!c->tables[i].blocks) goto nomem;
    }
    kv_cache_clear(c);
    c->peak_blocks = 0;
    *out = c;
    return NX_STATUS_OK;
nomem:
    kv_cache_free(c);
    return NX_STATUS_NOMEM;
}

void kv_cache_free(struct kv_cache *c) {
    if (!c) return;
    if (c->tables) {
        size_t n_tables = (size_t)c->p.n_seq * (size_t)c->n_tables_seq;
        for (size_t i = 0; i < n_tables; i++) nx_free(c->tables[i].blocks);
    }
    nx_free(c->tables);
    nx_free(c->seq_peak_blocks);
    nx_free_aligned(c->k_pool);
    nx_free_aligned(c->v_pool);
    nx_free(c->pos_pool);
    nx_free(c->acc_pool);
    nx_free(c->acc_owner);
    nx_free(c->seq_tag);
    nx_free(c->pin_pool);
    nx_free(c->refs);
    nx_free(c->free_ids);
    pthread_mutex_destroy(&c->free_lock);
    nx_free(c);
}

/* A fresh owner tag for sequence seq (0 is never a tag). */
static void new_seq_tag(struct kv_cache *c, int seq) {
    if (++c->next_tag == 0) c->next_tag = 1;
    c->seq_tag[seq] = c->next_tag;
}

void kv_cache_clear(struct kv_cache *c) {
    size_t n_tables = (size_t)c->p.n_seq * (size_t)c->n_tables_seq;
    for (int s = 0; s < c->p.n_seq; s++) new_seq_tag(c, s);
    if (c->ext_refs > 0) {
        /* blocks held outside the tables stay; the tables drop their references */
        for (size_t i = 0; i < n_tables; i++) {
            struct kv_table *t = &c->tables[i];
            while (t->n_blocks > 0) push_free(c, t->blocks[--t->n_blocks]);
            t->n_tokens = 0;
        }
        return;
    }
    memset(c->refs, 0, sizeof(int32_t) * (size_t)c->p.n_blocks);
    for (size_t i = 0; i < n_tables; i++) {
        c->tables[i].n_blocks = 0;
        c->tables[i].n_tokens = 0;
    }
    /* hand out low ids first (pop from the top) */
    c->n_free = c->p.n_blocks;
    for (int64_t i = 0; i < c->p.n_blocks; i++) c->free_ids[i] = (int32_t)(c->p.n_blocks - 1 - i);
}

void kv_cache_clear_seq(struct kv_cache *c, int seq) {
    new_seq_tag(c, seq);
    struct kv_table *tabs = kv_seq_tables(c, seq);
    for (int64_t i = 0; i < c->n_tables_seq; i++) {
        struct kv_table *t = &tabs[i];
        while (t->n_blocks > 0) push_free(c, t->blocks[--t->n_blocks]);
        t->n_tokens = 0;
    }
}

/* The last block of t is partly filled and shared: the next append would write into it. */
static bool tail_shared(const struct kv_cache *c, const struct kv_table *t) {
    return t->n_tokens % c->p.block != 0 && t->n_blocks > 0 &&
           c->refs[t->blocks[t->n_blocks - 1]] > 1;
}

static int64_t blocks_needed(const struct kv_cache *c, const struct kv_table *t, int64_t n_new) {
    int64_t need = (t->n_tokens + n_new + c->p.block - 1) / c->p.block;
    return (need > t->n_blocks ? need - t->n_blocks : 0) + (n_new > 0 && tail_shared(c, t));
}

static int32_t pop_free(struct kv_cache *c) {
    int32_t b = c->free_ids[--c->n_free];
    c->refs[b] = 1;
    if (c->acc_pool) memset(kv_block_acc(c, b), 0, sizeof(float) * (size_t)c->p.block);
    c->acc_owner[b] = 0;
    return b;
}

/* pop_free for concurrent compactions: -1 when the pool is empty. */
static int32_t pop_free_locked(struct kv_cache *c) {
    pthread_mutex_lock(&c->free_lock);
    int32_t b = c->n_free > 0 ? pop_free(c) : -1;
    int64_t used = c->p.n_blocks - c->n_free;
    if (used > c->peak_blocks) c->peak_blocks = used;
    pthread_mutex_unlock(&c->free_lock);
    return b;
}

/* Replace table slot bi (a shared block) by a private copy (block dst, just taken from the
   pool) of its first n slots. */
static void copy_block_into(struct kv_cache *c, struct kv_table *t, int32_t bi, int64_t n,
                            int32_t dst) {
    int32_t src = t->blocks[bi];
    size_t rows = (size_t)n;
    memcpy(kv_block_k(c, dst), kv_block_k(c, src), rows * c->row_bytes);
    memcpy(kv_block_v(c, dst), kv_block_v(c, src), rows * c->row_bytes);
    memcpy(kv_block_pos(c, dst), kv_block_pos(c, src), rows * sizeof(int32_t));
    memcpy(kv_block_pin(c, dst), kv_block_pin(c, src), rows);
    if (c->acc_pool) memcpy(kv_block_acc(c, dst), kv_block_acc(c, src), rows * sizeof(float));
    c->acc_owner[dst] = c->acc_owner[src];
    t->blocks[bi] = dst;
    push_free(c, src);
}

static void copy_block_private(struct kv_cache *c, struct kv_table *t, int32_t bi, int64_t n) {
    copy_block_into(c, t, bi, n, pop_free(c));
}

nx_status kv_cache_reserve_seqs(struct kv_cache *c, const int64_t *n_new) {
    int64_t total = 0;
    for (int s = 0; s < c->p.n_seq; s++) {
        if (n_new[s] <= 0) continue;
        struct kv_table *tabs = kv_seq_tables(c, s);
        for (int64_t i = 0; i < c->n_tables_seq; i++) {
            if ((tabs[i].n_tokens + n_new[s] + c->p.block - 1) / c->p.block > tabs[i].cap)
                return NX_STATUS_KV_FULL;
            total += blocks_needed(c, &tabs[i], n_new[s]);
        }
    }
    if (total > c->n_free) return NX_STATUS_KV_FULL;
    for (int s = 0; s < c->p.n_seq; s++) {
        if (n_new[s] <= 0) continue;
        struct kv_table *tabs = kv_seq_tables(c, s);
        for (int64_t i = 0; i < c->n_tables_seq; i++) {
            struct kv_table *t = &tabs[i];
            if (tail_shared(c, t))
                copy_block_private(c, t, t->n_blocks - 1, t->n_tokens % c->p.block);
            int64_t need = (t->n_tokens + n_new[s] + c->p.block - 1) / c->p.block;
            while (t->n_blocks < need) t->blocks[t->n_blocks++] = pop_free(c);
        }
        kv_seq_peak_update(c, s);
    }
    int64_t used = c->p.n_blocks - c->n_free;
    if (used > c->peak_blocks) c->peak_blocks = used;
    return NX_STATUS_OK;
}

nx_status kv_cache_reserve_seq(struct kv_cache *c, int seq, int64_t n_new) {
    int64_t small[8] = {0}, *n = small;
    if (c->p.n_seq > 8) {
        /* only the context's batch path reserves several sequences; this one is rare */
        n = nx_calloc((size_t)c->p.n_seq, sizeof *n);
        if (!n) return NX_STATUS_NOMEM;
    }
    n[seq] = n_new;
    nx_status st = kv_cache_reserve_seqs(c, n);
    if (n != small) nx_free(n);
    return st;
}

nx_status kv_cache_reserve(struct kv_cache *c, int64_t n_new) {
    return kv_cache_reserve_seq(c, 0, n_new);
}

int64_t kv_seq_blocks(const struct kv_cache *c, int seq) {
    const struct kv_table *tabs = &c->tables[(size_t)seq * (size_t)c->n_tables_seq];
    int64_t n = 0;
    for (int64_t i = 0; i < c->n_tables_seq; i++) n += tabs[i].n_blocks;
    return n;
}

int64_t kv_seq_peak_blocks(const struct kv_cache *c, int seq) { return c->seq_peak_blocks[seq]; }

void kv_seq_peak_update(struct kv_cache *c, int seq) {
    int64_t n = kv_seq_blocks(c, seq);
    if (n > c->seq_peak_blocks[seq]) c->seq_peak_blocks[seq] = n;
}

void kv_append(struct kv_cache *c, struct kv_table *t, int32_t pos, const float *k,
               const float *v) {
    int64_t i = t->n_tokens;
    NX_ASSERT(i / c->p.block < t->n_blocks);
    int32_t b = kv_slot_block(c, t, i);
    size_t slot = (size_t)(i % c->p.block);
    kern_store_kv(c->p.type, c->p.head_dim, k, kv_block_k(c, b) + slot * c->row_bytes);
    kern_store_kv(c->p.type, c->p.head_dim, v, kv_block_v(c, b) + slot * c->row_bytes);
    kv_block_pos(c, b)[slot] = pos;
    kv_block_pin(c, b)[slot] = 0;
    if (c->acc_pool) kv_block_acc(c, b)[slot] = 0;
    t->n_tokens = i + 1;
}

void kv_append_raw(struct kv_cache *c, struct kv_table *t, int32_t pos, const void *k,
                   const void *v, bool pin) {
    int64_t i = t->n_tokens;
    NX_ASSERT(i / c->p.block < t->n_blocks);
    int32_t b = kv_slot_block(c, t, i);
    size_t slot = (size_t)(i % c->p.block);
    memcpy(kv_block_k(c, b) + slot * c->row_bytes, k, c->row_bytes);
    memcpy(kv_block_v(c, b) + slot * c->row_bytes, v, c->row_bytes);
    kv_block_pos(c, b)[slot] = pos;
    kv_block_pin(c, b)[slot] = pin;
    if (c->acc_pool) kv_block_acc(c, b)[slot] = 0;
    t->n_tokens = i + 1;
}

void kv_block_ref(struct kv_cache *c, int32_t b) {
    NX_ASSERT(c->refs[b] > 0);
    c->refs[b]++;
    c->ext_refs++;
}

void kv_table_share_prefix(struct kv_cache *c, struct kv_table *t, const int32_t *blocks,
                           int64_t n) {
    NX_ASSERT(t->n_tokens == 0 && t->n_blocks == 0);
    int32_t nb = (int32_t)((n + c->p.block - 1) / c->p.block);
    for (int32_t i = 0; i < nb; i++) {
        NX_ASSERT(c->refs[blocks[i]] > 0);
        c->refs[blocks[i]]++;
        t->blocks[i] = blocks[i];
    }
    t->n_blocks = nb;
    t->n_tokens = n;
}

void kv_table_own_acc(struct kv_cache *c, struct kv_table *t, int32_t seq) {
    uint32_t tag = c->seq_tag[seq];
    for (int32_t bi = 0; bi < t->n_blocks; bi++) {
        int32_t b = t->blocks[bi];
        if (c->acc_owner[b] == tag) continue;
        NX_ASSERT(c->refs[b] == 1);
        if (c->acc_pool) memset(kv_block_acc(c, b), 0, sizeof(float) * (size_t)c->p.block);
        c->acc_owner[b] = tag;
    }
}

nx_status kv_table_unshare(struct kv_cache *c, struct kv_table *t, int64_t i0) {
    for (int32_t bi = (int32_t)(i0 / c->p.block); bi < t->n_blocks; bi++) {
        /* a reference count above one can only drop concurrently (another table releasing
           the block), never rise, so reading it unlocked is safe: at worst a copy is made
           that was no longer needed */
        if (__atomic_load_n(&c->refs[t->blocks[bi]], __ATOMIC_ACQUIRE) <= 1) continue;
        int32_t dst = pop_free_locked(c);
        if (dst < 0) return NX_STATUS_KV_FULL;
        int64_t n = NX_MIN((int64_t)c->p.block, t->n_tokens - (int64_t)bi * c->p.block);
        copy_block_into(c, t, bi, NX_MAX(n, 0), dst);
    }
    return NX_STATUS_OK;
}

/* The free stack is shared by every table; compactions of different tables may run on
   different threads (one per layer), so pushes take the cache's lock. */
static void push_free(struct kv_cache *c, int32_t b) {
    pthread_mutex_lock(&c->free_lock);
    NX_ASSERT(c->refs[b] > 0);
    if (--c->refs[b] == 0) c->free_ids[c->n_free++] = b;
    pthread_mutex_unlock(&c->free_lock);
}

void kv_block_unref(struct kv_cache *c, int32_t b) {
    NX_ASSERT(c->ext_refs > 0);
    c->ext_refs--;
    push_free(c, b);
}

/* Return blocks beyond what n_tokens needs to the pool. */
static void release_tail(struct kv_cache *c, struct kv_table *t) {
    int32_t need = (int32_t)((t->n_tokens + c->p.block - 1) / c->p.block);
    while (t->n_blocks > need) push_free(c, t->blocks[--t->n_blocks]);
}

/* Whether compaction keeps token i of t: asked for, or pinned (a spliced block's token). */
static inline bool slot_kept(const struct kv_cache *c, const struct kv_table *t, const uint8_t *keep,
                        int64_t i) {
    return keep[i] || kv_block_pin(c, kv_slot_block(c, t, i))[i % c->p.block];
}

nx_status kv_compact(struct kv_cache *c, struct kv_table *t, const uint8_t *keep) {
    const int64_t B = c->p.block, n = t->n_tokens;
    /* fast path: whole blocks dropped, every other token kept -> unlink blocks */
    bool block_aligned = true;
    for (int64_t s = 0; s < n && block_aligned; s += B) {
        int64_t e = NX_MIN(s + B, n);
        bool any = false, all = true;
        for (int64_t i = s; i < e; i++) {
            bool k = slot_kept(c, t, keep, i);
            any |= k;
            all &= k;
        }
        if (any && !all) block_aligned = false;
    }
    if (block_aligned) {
        int32_t w = 0;
        int64_t kept = 0;
        int32_t nb = t->n_blocks;
        for (int32_t bi = 0; bi < nb; bi++) {
            int64_t s = (int64_t)bi * B;
            if (s < n && slot_kept(c, t, keep, s)) {
                t->blocks[w++] = t->blocks[bi];
                kept += NX_MIN(B, n - s);
            } else {
                push_free(c, t->blocks[bi]);
            }
        }
        /* the kept blocks are full except possibly the last, which was the table's last */
        t->n_blocks = w;
        t->n_tokens = kept;
        return NX_STATUS_OK;
    }
    /* tokens move from the first dropped one on: the blocks from there are written, so
       shared ones get private copies first */
    int64_t first = 0;
    while (first < n && slot_kept(c, t, keep, first)) first++;
    if (kv_table_unshare(c, t, first) != NX_STATUS_OK) return NX_STATUS_KV_FULL;
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!slot_kept(c, t, keep, i)) continue;
        if (w != i) {
            int32_t sb = kv_slot_block(c, t, i), db = kv_slot_block(c, t, w);
            size_t ss = (size_t)(i % B), ds = (size_t)(w % B);
            memcpy(kv_block_k(c, db) + ds * c->row_bytes, kv_block_k(c, sb) + ss * c->row_bytes,
                   c->row_bytes);
            memcpy(kv_block_v(c, db) + ds * c->row_bytes, kv_block_v(c, sb) + ss * c->row_bytes,
                   c->row_bytes);
            kv_block_pos(c, db)[ds] = kv_block_pos(c, sb)[ss];
            kv_block_pin(c, db)[ds] = kv_block_pin(c, sb)[ss];
            if (c->acc_pool)
                kv_block_acc(c, db)[ds] =
                    c->acc_owner[db] == c->acc_owner[sb] ? kv_block_acc(c, sb)[ss] : 0.0f;
        }
        w++;
    }
    t->n_tokens = w;
    release_tail(c, t);
    return NX_STATUS_OK;
}

void kv_truncate(struct kv_cache *c, struct kv_table *t, int64_t n) {
    if (n < t->n_tokens) {
        t->n_tokens = n < 0 ? 0 : n;
        release_tail(c, t);
    }
}

int64_t kv_blocks_in_use(const struct kv_cache *c) { return c->p.n_blocks - c->n_free; }
size_t kv_bytes_in_use(const struct kv_cache *c) {
    return (size_t)kv_blocks_in_use(c) * c->block_bytes;
}
size_t kv_bytes_peak(const struct kv_cache *c) { return (size_t)c->peak_blocks * c->block_bytes; }
size_t kv_bytes_pool(const struct kv_cache *c) { return (size_t)c->p.n_blocks * c->block_bytes; }
