/* embed_impl.h - constructors behind rt_embedder_open / rt_reranker_open (internal). */
#ifndef NX_ROUTE_EMBED_IMPL_H
#define NX_ROUTE_EMBED_IMPL_H

#include "route/embed.h"

/* model2vec static embeddings: dir holds model.safetensors, tokenizer.json, config.json. */
nx_status rt_embedder_model2vec_open(const char *dir, rt_embedder **out, char *err, size_t errlen);
/* BERT-family GGUF encoder (bert, nomic-bert). */
nx_status rt_embedder_gguf_open(const char *path, rt_embedder **out, char *err, size_t errlen);
/* BERT-family GGUF cross-encoder with a classification head. */
nx_status rt_reranker_gguf_open(const char *path, rt_reranker **out, char *err, size_t errlen);

#endif
