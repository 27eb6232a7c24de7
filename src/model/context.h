/* context.h - internal accessors of nx_ctx for the files around it (splice.c, seqcache.c) and
 * for tests and tools inside the tree. Sequence ids are checked by the callers. */
#ifndef NX_CONTEXT_H
#define NX_CONTEXT_H
#include "nexus.h"
struct kv_cache;
/* The context's paged cache (borrowed; valid for the context's life). */
struct kv_cache *ctx_kv_cache(nx_ctx *ctx);
/* Current per-layer budget of sequence 0 (tokens per KV head), or -1 when nothing is evicted. */
int64_t ctx_kv_budget(const nx_ctx *ctx, int layer);

struct nx_model;
const struct nx_model *ctx_model(const nx_ctx *ctx);
int32_t ctx_n_seq(const nx_ctx *ctx);
int32_t ctx_seq_n_past(const nx_ctx *ctx, int seq);
/* Set a sequence's next position (after the caller changed its tables directly); forgets the
   last logits. ctx_set_n_past: sequence 0. */
void ctx_seq_set_n_past(nx_ctx *ctx, int seq, int32_t n_past);
/* positions closed by compaction (tokens seen = n_past + base) */
int64_t ctx_seq_seen_base(const nx_ctx *ctx, int seq);
void ctx_seq_set_seen_base(nx_ctx *ctx, int seq, int64_t base);
void ctx_set_n_past(nx_ctx *ctx, int32_t n_past);
/* True when the sequence has an eviction budget (its evictor may compact its tables). */
bool ctx_seq_evicting(const nx_ctx *ctx, int seq);
bool ctx_evicting(const nx_ctx *ctx);
/* Drop the evictor's window rows of positions >= pos (no-op without an evictor). */
void ctx_seq_evict_forget_from(nx_ctx *ctx, int seq, int32_t pos);
void ctx_evict_forget_from(nx_ctx *ctx, int32_t pos);
/* End a sequence: its tables drop every block, n_past = 0, its evictor's window is emptied. */
void ctx_seq_clear(nx_ctx *ctx, int seq);
/* Drop a sequence's positions >= n_past (INVALID_ARG when out of range). */
nx_status ctx_seq_truncate(nx_ctx *ctx, int seq, int32_t n_past);
/* nx_decode for sequence seq. */
nx_status ctx_decode_seq(nx_ctx *ctx, int seq, const nx_token *tokens, int32_t n, bool all_logits);
/* Blocks per table the sequence may grow to under its policy (n_ctx, or its budget + batch). */
int64_t ctx_seq_grow_blocks(const nx_ctx *ctx, int seq);
/* Record a message for nx_ctx_last_error; returns st. */
nx_status ctx_set_error(nx_ctx *ctx, nx_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Attention probe (probe.c), for the eval harness and tests: once enabled, every forward step
 * records for its LAST entry, per layer, the query after RoPE (all query heads), the attention
 * output before the output projection, and the positions its attention read per KV head (the
 * table as it was at that moment, before the step's eviction). Off by default; when on, the
 * forward pass copies these rows on one thread (no allocation, same logits). */
struct ctx_attn_probe {
    int32_t n_layer, n_head, n_head_kv, head_dim;
    int64_t cap;       /* positions room per (layer, KV head) */
    float *q;          /* (n_layer, n_head * head_dim) */
    float *out;        /* (n_layer, n_head * head_dim) */
    int32_t *pos;      /* (n_layer, n_head_kv, cap) positions read, table order */
    int64_t *n_pos;    /* (n_layer, n_head_kv) */
    int32_t step_pos;  /* position of the recorded entry; -1 before the first step */
};
/* Turn the probe on (allocates once; NX_STATUS_NOMEM with the context's error set). */
nx_status ctx_attn_probe_enable(nx_ctx *ctx);
/* The probe, or NULL when it is off. */
const struct ctx_attn_probe *ctx_attn_probe_get(const nx_ctx *ctx);

/* The sequence cache, for the tests (seqcache.c). */
struct nx_seqcache;
/* Longest cached prefix of tokens and the slot holding it (-1 when none), without touching the
   context or the counters. */
int32_t seqcache_lookup(const struct nx_seqcache *sc, const nx_token *tokens, int32_t n,
                        int *slot);
/* The tokens slot s holds (NULL if empty) and their count. */
const nx_token *seqcache_slot_tokens(const struct nx_seqcache *sc, int s, int32_t *n);
#endif
