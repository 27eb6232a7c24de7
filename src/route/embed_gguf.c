/* embed_gguf.c - BERT-family GGUF encoders as embedders and rerankers (placeholder until the
 * encoder lands). */
#include <stdio.h>

#include "route/embed_impl.h"

rt_embedder *rt_embedder_gguf_open(const char *path, char *err, size_t errlen) {
    snprintf(err, errlen, "GGUF embedder '%s': not implemented yet", path);
    return NULL;
}

rt_reranker *rt_reranker_gguf_open(const char *path, char *err, size_t errlen) {
    snprintf(err, errlen, "GGUF reranker '%s': not implemented yet", path);
    return NULL;
}
