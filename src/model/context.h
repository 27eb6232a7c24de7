/* context.h - internal accessors of nx_ctx for tests and tools inside the tree. */
#ifndef NX_CONTEXT_H
#define NX_CONTEXT_H
#include "nexus.h"
struct kv_cache;
/* The context's paged cache (borrowed; valid for the context's life). */
struct kv_cache *ctx_kv_cache(nx_ctx *ctx);
/* Current per-layer budget (tokens per KV head), or -1 when nothing is evicted. */
int64_t ctx_kv_budget(const nx_ctx *ctx, int layer);
#endif
