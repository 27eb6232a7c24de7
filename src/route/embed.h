/*
 * embed.h - text embedders and rerankers behind one small interface (tool routing).
 *
 * The router (slb, bm25, hybrid fusion, margin gate) sees only these two vtables; the
 * implementations live in their own files:
 *   - GGUF encoders of the BERT family (`bert`, `nomic-bert`): bidirectional attention,
 *     WordPiece tokenizer, mean or CLS pooling, run by the Nexus engine;
 *   - model2vec static embeddings (a directory with model.safetensors + tokenizer.json);
 *   - cross-encoder rerankers (a GGUF BERT with a classification head) and the chat model's
 *     own relevance score.
 *
 * Conventions: functions return NX_STATUS_OK or a negative nx_status (include/nexus.h) with a
 * message in err (never crash on bad input); embeddings are L2-normalised float vectors of
 * length dim.
 */
#ifndef NX_ROUTE_EMBED_H
#define NX_ROUTE_EMBED_H

#include <stddef.h>

#include "nexus.h"

/* What a text is: query and document get different prefixes in some models
 * (nomic: "search_query: " / "search_document: "). */
enum rt_text_kind { RT_QUERY = 0, RT_DOCUMENT = 1 };

typedef struct rt_embedder rt_embedder;
struct rt_embedder {
    const char *name; /* e.g. "bert", "nomic-bert", "model2vec" */
    int dim;          /* output dimension */
    /* Embed one text into out[dim], L2-normalised. */
    nx_status (*embed)(rt_embedder *e, const char *text, enum rt_text_kind kind, float *out,
                       char *err, size_t errlen);
    void (*destroy)(rt_embedder *e);
};

typedef struct rt_reranker rt_reranker;
struct rt_reranker {
    const char *name; /* e.g. "cross-encoder", "chat-relevance" */
    /* Relevance of (query, document) into *score; higher is more relevant. */
    nx_status (*score)(rt_reranker *r, const char *query, const char *document, float *score,
                       char *err, size_t errlen);
    void (*destroy)(rt_reranker *r);
};

/* Opens an embedder from a path into *out: a directory holding model.safetensors +
 * tokenizer.json is a model2vec model; a .gguf file is a BERT-family encoder. On failure *out
 * is NULL and the status says why: NOT_FOUND (no such path), IO, FORMAT (a corrupt file),
 * UNSUPPORTED (not an encoder, an unsupported dtype or tokenizer), INVALID_ARG (a reranker
 * file), NOMEM. */
nx_status rt_embedder_open(const char *path, rt_embedder **out, char *err, size_t errlen);

/* Opens a cross-encoder reranker from a GGUF BERT file with a classification head (INVALID_ARG
 * for an embedding model without one; otherwise as rt_embedder_open). */
nx_status rt_reranker_open(const char *path, rt_reranker **out, char *err, size_t errlen);

static inline void rt_embedder_free(rt_embedder *e) {
    if (e) e->destroy(e);
}
static inline void rt_reranker_free(rt_reranker *r) {
    if (r) r->destroy(r);
}

#endif
