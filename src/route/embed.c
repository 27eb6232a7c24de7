/* embed.c - rt_embedder_open / rt_reranker_open: pick the implementation from the path. */
#include "route/embed.h"

#include <stdio.h>
#include <sys/stat.h>

#include "route/embed_impl.h"

rt_embedder *rt_embedder_open(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (!path || stat(path, &st) != 0) {
        snprintf(err, errlen, "embedding model '%s': no such file or directory", path ? path : "");
        return NULL;
    }
    if (S_ISDIR(st.st_mode)) return rt_embedder_model2vec_open(path, err, errlen);
    return rt_embedder_gguf_open(path, err, errlen);
}

rt_reranker *rt_reranker_open(const char *path, char *err, size_t errlen) {
    return rt_reranker_gguf_open(path, err, errlen);
}
