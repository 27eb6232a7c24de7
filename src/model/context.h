/* context.h - internal accessors of nx_ctx for tests and tools inside the tree. */
#ifndef NX_CONTEXT_H
#define NX_CONTEXT_H
#include "nexus.h"
struct kv_cache;
/* The context's paged cache (borrowed; valid for the context's life). */
struct kv_cache *ctx_kv_cache(nx_ctx *ctx);
/* Current per-layer budget (tokens per KV head), or -1 when nothing is evicted. */
int64_t ctx_kv_budget(const nx_ctx *ctx, int layer);

/* For kv/ splicing and the sequence cache (src/model/splice.c, src/kv/seqcache.c). */
struct nx_model;
const struct nx_model *ctx_model(const nx_ctx *ctx);
/* Set the next token's position (after the caller changed the cache directly); forgets the
   last logits. */
void ctx_set_n_past(nx_ctx *ctx, int32_t n_past);
/* True when the context has an eviction budget (its evictor may compact the tables). */
bool ctx_evicting(const nx_ctx *ctx);
/* Drop the evictor's window rows of positions >= pos (no-op without an evictor). */
void ctx_evict_forget_from(nx_ctx *ctx, int32_t pos);
/* Record a message for nx_ctx_last_error; returns st. */
nx_status ctx_set_error(nx_ctx *ctx, nx_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#endif
