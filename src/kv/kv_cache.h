/*
 * kv_cache.h - a paged KV cache: one pool of fixed-size blocks, sized when the context is
 * created, and per (layer, KV head) block tables for the sequence.
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
    bool with_acc;       /* keep a cumulative-attention float per slot */
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
    int32_t *free_ids;        /* stack of free block ids */
    int64_t n_free;
    struct kv_table *tables;  /* (n_layer, n_head_kv) */
    int64_t peak_blocks;
    pthread_mutex_t free_lock; /* guards free_ids/n_free when tables compact concurrently */
};

/* Errors: INVALID_ARG, NOMEM. */
nx_status kv_cache_init(const struct kv_cache_params *p, struct kv_cache **out);
void kv_cache_free(struct kv_cache *c);
/* Forget every token; all blocks return to the pool (peak is kept). */
void kv_cache_clear(struct kv_cache *c);

static inline struct kv_table *kv_table_at(struct kv_cache *c, int layer, int head) {
    return &c->tables[(size_t)layer * (size_t)c->p.n_head_kv + (size_t)head];
}

/* Make sure every table can take n_new more tokens without allocating: KV_FULL (nothing
 * changed) when the pool is too small. */
nx_status kv_cache_reserve(struct kv_cache *c, int64_t n_new);
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
 * Keep the tokens of table t whose keep[i] is nonzero (i in [0, n_tokens)), in order; emptied
 * blocks return to the pool. Whole dropped blocks are unlinked without copying.
 */
void kv_compact(struct kv_cache *c, struct kv_table *t, const uint8_t *keep);
/* Drop tokens at index >= n (n <= n_tokens). */
void kv_truncate(struct kv_cache *c, struct kv_table *t, int64_t n);

/* Accounting. */
int64_t kv_blocks_in_use(const struct kv_cache *c);
size_t kv_bytes_in_use(const struct kv_cache *c);
size_t kv_bytes_peak(const struct kv_cache *c);
size_t kv_bytes_pool(const struct kv_cache *c);

#endif
