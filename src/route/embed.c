/* embed.c - rt_embedder_open / rt_reranker_open: pick the implementation from the path. */
#include "route/embed.h"

#include <stdio.h>
#include <sys/stat.h>

#include "core/nx_base.h"
#include "route/embed_impl.h"

nx_status rt_embedder_open(const char *path, rt_embedder **out, char *err, size_t errlen) {
    struct stat st;
    *out = NULL;
    if (!path || stat(path, &st) != 0)
        return nx_errf(err, errlen, NX_STATUS_NOT_FOUND,
                       "embedding model '%s': no such file or directory", path ? path : "");
    if (S_ISDIR(st.st_mode)) return rt_embedder_model2vec_open(path, out, err, errlen);
    return rt_embedder_gguf_open(path, out, err, errlen);
}

nx_status rt_reranker_open(const char *path, rt_reranker **out, char *err, size_t errlen) {
    return rt_reranker_gguf_open(path, out, err, errlen);
}
