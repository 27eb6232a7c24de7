/* embed_model2vec.c - model2vec static embeddings (placeholder until the loader lands). */
#include <stdio.h>

#include "route/embed_impl.h"

rt_embedder *rt_embedder_model2vec_open(const char *dir, char *err, size_t errlen) {
    snprintf(err, errlen, "model2vec embedder '%s': not implemented yet", dir);
    return NULL;
}
