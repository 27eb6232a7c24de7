/*
 * kv_cache.h - a paged KV cache: one pool of fixed-size blocks, sized when the context is
 * created, shared by up to n_seq sequences, each with its own block table per (layer, KV head).
 *
 * A block holds `block` token slots of one (layer, KV head): keys and values (F16 or F32,
 * `head_dim` each; keys after RoPE), the original position of each token, and optionally a
 * float per slot for cumulative attention (H2O). A table lists its blocks in token order; every
 * block but the last is full. Eviction compacts a table (kept tokens move forward, order kept)
 * and returns emptied blocks to the pool, so freed memory is really reused.
 *
 * Memory accounting counts blocks in use (keys + values + positions + accumulators), current
 * and peak. A cache is used by one thread at a time, except that accessors, appends (after a
 * successful kv_cache_reserve, so they never allocate) and compactions of DIFFERENT tables may
 * run concurrently; reserve and clear must not overlap anything.
 */
#ifndef NX_KV_CACHE_H
#define NX_KV_CACHE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

struct kv_cache_params {
    int32_t n_layer;
    int32_t n_head_kv;
    int32_t head_dim;
    enum nx_type type;   /* NX_TYPE_F16 or NX_TYPE_F32 */
    int32_t block;       /* tokens per block (>= 1) */
    int64_t n_blocks;    /* blocks in the pool */
    bool with_acc;       /* count the cumulative-attention float per slot in the accounting
                            (the accumulators are always there, for any sequence's policy) */
    int32_t n_seq;       /* sequences (>= 1; 0 counts as 1) */
    int64_t max_table_tokens; /* most tokens one table ever holds (0: the whole pool) */
};

struct kv_table {
    int32_t *blocks;  /* (cap) block ids in token order */
    int32_t n_blocks;
    int32_t cap;
    int64_t n_tokens;
};

struct kv_cache {
    struct kv_cache_params p;
    size_t row_bytes;         /* head_dim * element size */
    size_t block_bytes;       /* accounting bytes of one block */
    unsigned char *k_pool;    /* (n_blocks, block, head_dim) */
    unsigned char *v_pool;
    int32_t *pos_pool;        /* (n_blocks, block) */
    float *acc_pool;          /* (n_blocks, block) or NULL */
    uint32_t *acc_owner;      /* (n_blocks) the tag of the sequence whose attention the block's
                                 accumulators hold; 0: none yet (all zero) */
    uint32_t *seq_tag;        /* (n_seq) each sequence's tag: a new one whenever it is cleared,
                                 so a later request on the same sequence is another owner */
    uint32_t next_tag;
    uint8_t *pin_pool;        /* (n_blocks, block): 1 = eviction must keep this slot */
    int32_t *refs;            /* (n_blocks) references: tables holding the block + holders
                                 outside the tables (the sequence cache); 0 = free */
    int64_t ext_refs;         /* references held outside the tables (kv_block_ref) */
    int32_t *free_ids;        /* stack of free block ids */
    int64_t n_free;
    struct kv_table *tables;  /* (n_seq, n_layer, n_head_kv); sequence s's start at
                                 s * n_layer * n_head_kv */
    int64_t n_tables_seq;     /* n_layer * n_head_kv */
    int64_t peak_blocks;
    int64_t *seq_peak_blocks; /* (n_seq) most blocks each sequence's tables held at once */
    pthread_mutex_t free_lock; /* guards free_ids/n_free/refs when tables compact concurrently */
};

/* Errors: INVALID_ARG, NOMEM. */
nx_status kv_cache_init(const struct kv_cache_params *p, struct kv_cache **out);
void kv_cache_free(struct kv_cache *c);
/* Forget every token of every sequence; all blocks return to the pool (peak is kept). */
void kv_cache_clear(struct kv_cache *c);
/* Forget sequence seq's tokens: its tables drop their block references (blocks shared with
 * other sequences or held outside the tables stay). */
void kv_cache_clear_seq(struct kv_cache *c, int seq);

/* Sequence seq's tables (n_layer * n_head_kv of them, layer-major). */
static inline struct kv_table *kv_seq_tables(struct kv_cache *c, int seq) {
    return &c->tables[(size_t)seq * (size_t)c->n_tables_seq];
}
static inline struct kv_table *kv_seq_table(struct kv_cache *c, int seq, int layer, int head) {
    return &c->tables[(size_t)seq * (size_t)c->n_tables_seq +
                      (size_t)layer * (size_t)c->p.n_head_kv + (size_t)head];
}
/* Sequence 0's table (single-sequence callers). */
static inline struct kv_table *kv_table_at(struct kv_cache *c, int layer, int head) {
    return kv_seq_table(c, 0, layer, head);
}

/* Make sure every table of sequence s can take n_new[s] more tokens (for every s < n_seq)
 * without allocating: KV_FULL (nothing changed) when the pool is too small. */
nx_status kv_cache_reserve_seqs(struct kv_cache *c, const int64_t *n_new);
/* The same for one sequence, and for sequence 0. */
nx_status kv_cache_reserve_seq(struct kv_cache *c, int seq, int64_t n_new);
nx_status kv_cache_reserve(struct kv_cache *c, int64_t n_new);
/* Blocks held by sequence seq's tables now (shared blocks included), the most it ever held
   (updated by the reserve calls and kv_seq_peak_update). */
int64_t kv_seq_blocks(const struct kv_cache *c, int seq);
int64_t kv_seq_peak_blocks(const struct kv_cache *c, int seq);
void kv_seq_peak_update(struct kv_cache *c, int seq);
/* Append one token to a table (after kv_cache_reserve). k, v: head_dim floats. */
void kv_append(struct kv_cache *c, struct kv_table *t, int32_t pos, const float *k,
               const float *v);

/* Slot addresses: token i of table t lives in block t->blocks[i / block], slot i % block. */
static inline int32_t kv_slot_block(const struct kv_cache *c, const struct kv_table *t,
                                    int64_t i) {
    return t->blocks[i / c->p.block];
}
static inline unsigned char *kv_block_k(const struct kv_cache *c, int32_t b) {
    return c->k_pool + (size_t)b * (size_t)c->p.block * c->row_bytes;
}
static inline unsigned char *kv_block_v(const struct kv_cache *c, int32_t b) {
    return c->v_pool + (size_t)b * (size_t)c->p.block * c->row_bytes;
}
static inline int32_t *kv_block_pos(const struct kv_cache *c, int32_t b) {
    return c->pos_pool + (size_t)b * (size_t)c->p.block;
}
static inline float *kv_block_acc(const struct kv_cache *c, int32_t b) {
    return c->acc_pool ? c->acc_pool + (size_t)b * (size_t)c->p.block : NULL;
}

/*
 * Keep the tokens of table t whose keep[i] is nonzero or whose slot is pinned (i in
 * [0, n_tokens)), in order; emptied blocks return to the pool. Whole dropped blocks are
 * unlinked without copying. Shared blocks are never written: a block that moved tokens would
 * be written into is first replaced by a private copy (copy on write). KV_FULL (t unchanged)
 * when such a copy finds no free block. Compactions of different tables may run at once.
 */
nx_status kv_compact(struct kv_cache *c, struct kv_table *t, const uint8_t *keep);
/* Drop tokens at index >= n (n <= n_tokens). */
void kv_truncate(struct kv_cache *c, struct kv_table *t, int64_t n);

/*
 * Sharing (the sequence cache, kv/seqcache.h). A block may be held by several tables and by
 * holders outside the tables; it returns to the pool when the last reference goes. Writes never
 * touch a shared block: kv_cache_reserve copies a shared, partly filled last block first
 * (copy on write), and kv_table_unshare gives a table private copies of its shared blocks
 * from token index i0 on (before a compaction or a re-rotation writes into them); kv_compact
 * does the same for the blocks it rewrites. Tables of different sequences may share blocks
 * (kv_table_share_prefix: the sequence cache, and sequence copies).
 */
/* A reference held outside the tables / its release (the block is freed at zero). */
void kv_block_ref(struct kv_cache *c, int32_t b);
void kv_block_unref(struct kv_cache *c, int32_t b);
/* Make the empty table t hold the first n tokens of the blocks `blocks` (ceil(n / block) of
   them, held elsewhere); the table takes a reference to each. A partly used last block stays
   shared until the next append copies it (kv_cache_reserve). */
void kv_table_share_prefix(struct kv_cache *c, struct kv_table *t, const int32_t *blocks,
                           int64_t n);
/* Make t's attention accumulators sequence seq's own: the accumulators of every block of t
   that were summed for another sequence, or for an earlier use of seq before it was cleared
   (a block reused through the sequence cache or copied from another sequence's table), are
   zeroed and the block marked seq's. t's blocks must be private (kv_table_unshare(c, t, 0)
   first). A sequence's eviction statistics (H2O) thus count only its own queries' attention. */
void kv_table_own_acc(struct kv_cache *c, struct kv_table *t, int32_t seq);
/* Give t private copies of the shared blocks holding tokens >= i0. KV_FULL (nothing changed
   for the block that failed) when the pool has no free block. Takes the pool lock, so
   different tables may be unshared at once. */
nx_status kv_table_unshare(struct kv_cache *c, struct kv_table *t, int64_t i0);
/* Append one token whose key and value rows are already in the cache's type (row_bytes each);
   pin: eviction must keep it. After kv_cache_reserve. */
void kv_append_raw(struct kv_cache *c, struct kv_table *t, int32_t pos, const void *k,
                   const void *v, bool pin);
static inline uint8_t *kv_block_pin(const struct kv_cache *c, int32_t b) {
    return c->pin_pool + (size_t)b * (size_t)c->p.block;
}

/* Accounting. */
int64_t kv_blocks_in_use(const struct kv_cache *c);
size_t kv_bytes_in_use(const struct kv_cache *c);
size_t kv_bytes_peak(const struct kv_cache *c);
size_t kv_bytes_pool(const struct kv_cache *c);

#endif
