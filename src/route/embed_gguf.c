/*
 * embed_gguf.c - DESIGN: BERT-family GGUF encoders (bert, nomic-bert) as rt_embedder, and
 * cross-encoders (bert with a classification head) as rt_reranker, run by the Nexus engine
 * through include/nexus.h (nx_embed, nx_rerank_score).
 *
 * - The embedder pools as the file says (mean or CLS; a file whose pooling is "rank" is a
 *   reranker and is refused here) and L2-normalises.
 * - nomic-bert needs task prefixes: "search_query: " for queries and "search_document: " for
 *   documents are prepended (nomic-embed-text-v1.5's model card); other models get the text
 *   as is (bge's query instruction is optional and left to the caller).
 * - The reranker's score is the classifier logit on [CLS] query [SEP] document [SEP].
 * - Threads: each call uses NX_EMBED_THREADS threads (environment, read at open; default 1, at
 *   most the online CPUs); results do not depend on the count. The default is 1 because the
 *   engine's pool spins between jobs, which costs more than it gains on a loaded machine with
 *   short texts. The model is read-only, so one embedder may be shared by threads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/nx_base.h"

#include "nexus.h"
#include "route/embed_impl.h"

struct gguf_embedder {
    rt_embedder base;
    nx_model *m;
    bool nomic;
    int n_threads;
    char name[32];
};

struct gguf_reranker {
    rt_reranker base;
    nx_model *m;
    int n_threads;
};

static int pick_threads(void) {
    const char *env = getenv("NX_EMBED_THREADS");
    long want = env ? strtol(env, NULL, 10) : 1;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (want < 1) want = 1;
    return (int)(want > n ? n : want);
}

/* Load path into *out and check it is an encoder; a status with a message otherwise. */
static nx_status open_encoder(const char *path, const char *what, nx_model **out, char *err,
                              size_t errlen) {
    nx_model *m = NULL;
    char msg[512];
    *out = NULL;
    nx_status st = nx_model_load(path, NULL, &m, msg, sizeof msg);
    if (st != NX_STATUS_OK) return nx_errf(err, errlen, st, "%s '%s': %s", what, path, msg);
    if (!nx_model_is_encoder(m)) {
        st = nx_errf(err, errlen, NX_STATUS_UNSUPPORTED,
                     "%s '%s': architecture '%s' is not an encoder (bert, nomic-bert)", what, path,
                     nx_model_arch(m));
        nx_model_free(m);
        return st;
    }
    *out = m;
    return NX_STATUS_OK;
}

static nx_status ge_embed(rt_embedder *e, const char *text, enum rt_text_kind kind, float *out,
                          char *err, size_t errlen) {
    struct gguf_embedder *g = (struct gguf_embedder *)e;
    const char *prefix = "";
    if (g->nomic) prefix = kind == RT_QUERY ? "search_query: " : "search_document: ";
    size_t np = strlen(prefix), nt = text ? strlen(text) : 0;
    char *buf = nx_malloc(np + nt + 1);
    if (!buf) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    memcpy(buf, prefix, np);
    if (nt) memcpy(buf + np, text, nt);
    buf[np + nt] = '\0';
    struct nx_embed_params p = nx_embed_default_params();
    p.n_threads = g->n_threads;
    char msg[512];
    nx_status st = nx_embed(g->m, buf, &p, out, e->dim, msg, sizeof msg);
    nx_free(buf);
    if (st != NX_STATUS_OK) return nx_errf(err, errlen, st, "%s embedder: %s", g->name, msg);
    return NX_STATUS_OK;
}

static void ge_free(rt_embedder *e) {
    struct gguf_embedder *g = (struct gguf_embedder *)e;
    nx_model_free(g->m);
    nx_free(g);
}

nx_status rt_embedder_gguf_open(const char *path, rt_embedder **out, char *err, size_t errlen) {
    nx_model *m;
    *out = NULL;
    nx_status st = open_encoder(path, "GGUF embedder", &m, err, errlen);
    if (st != NX_STATUS_OK) return st;
    if (nx_model_pooling(m) == NX_POOLING_RANK) {
        nx_model_free(m);
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "GGUF embedder '%s': the model is a reranker (rank pooling, classification "
                       "head); open it with rt_reranker_open",
                       path);
    }
    struct gguf_embedder *g = nx_calloc(1, sizeof *g);
    if (!g) {
        nx_model_free(m);
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    g->m = m;
    g->nomic = strcmp(nx_model_arch(m), "nomic-bert") == 0;
    g->n_threads = pick_threads();
    snprintf(g->name, sizeof g->name, "%s", nx_model_arch(m));
    g->base.name = g->name;
    g->base.dim = nx_model_n_embd(m);
    g->base.embed = ge_embed;
    g->base.destroy = ge_free;
    *out = &g->base;
    return NX_STATUS_OK;
}

static nx_status gr_score(rt_reranker *r, const char *query, const char *document, float *score,
                          char *err, size_t errlen) {
    struct gguf_reranker *g = (struct gguf_reranker *)r;
    struct nx_embed_params p = nx_embed_default_params();
    p.n_threads = g->n_threads;
    char msg[512];
    nx_status st = nx_rerank_score(g->m, query ? query : "", document ? document : "", &p, score,
                                   msg, sizeof msg);
    if (st != NX_STATUS_OK) return nx_errf(err, errlen, st, "cross-encoder: %s", msg);
    return NX_STATUS_OK;
}

static void gr_free(rt_reranker *r) {
    struct gguf_reranker *g = (struct gguf_reranker *)r;
    nx_model_free(g->m);
    nx_free(g);
}

nx_status rt_reranker_gguf_open(const char *path, rt_reranker **out, char *err, size_t errlen) {
    nx_model *m;
    *out = NULL;
    nx_status st = open_encoder(path, "GGUF reranker", &m, err, errlen);
    if (st != NX_STATUS_OK) return st;
    if (nx_model_n_cls_out(m) < 1) {
        nx_model_free(m);
        return nx_errf(
            err, errlen, NX_STATUS_INVALID_ARG,
            "GGUF reranker '%s': no classification head (cls.weight, cls.output.weight): "
            "an embedding model, not a cross-encoder",
            path);
    }
    struct gguf_reranker *g = nx_calloc(1, sizeof *g);
    if (!g) {
        nx_model_free(m);
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    g->m = m;
    g->n_threads = pick_threads();
    g->base.name = "cross-encoder";
    g->base.score = gr_score;
    g->base.destroy = gr_free;
    *out = &g->base;
    return NX_STATUS_OK;
}
