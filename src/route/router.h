/*
 * router.h - query -> top-k tools: BM25, dense (SLB over an rt_embedder) or hybrid (reciprocal
 * rank fusion of both), the margin gate, an optional reranker hook, abstention, and the
 * calibration / statistics helpers the evaluation uses.
 *
 * DESIGN
 * - A router indexes a subset of a registry (or all of it): a BM25 index always; an INT8 SLB of
 *   the tools' document embeddings when an embedder is given (dense, hybrid).
 *   Document text for the embedder: "<name>: <description>" (kind RT_DOCUMENT); the query is
 *   embedded with kind RT_QUERY.
 * - Scores per mode: bm25 = BM25 score; dense = INT8 cosine (SLB); hybrid = RRF score
 *   sum_r 1 / (rrf_k + rank_r(d)) over the BM25 ranking (documents with a positive BM25 score
 *   only) and the dense ranking (every document), ranks from 1, both at full depth unless
 *   rrf_depth > 0 limits each list. Ties: the earlier tool of the subset (registry order) first.
 * - margin = s1 - s2 in the mode's score scale (INFINITY with one tool); the gate fires when
 *   margin < tau (tau <= 0: never). tau is calibrated per mode and registry as a percentile of
 *   the margins over a calibration split (rt_percentile; procedure in the README).
 * - When the gate fires and a reranker is configured, the top rerank_k hits are re-scored with
 *   rr->score(query, "<name>: <description>") and reordered (ties keep the first-stage order);
 *   the chosen tool is the reranked first. Without a reranker the chosen tool is the first hit
 *   and `undecided` tells callers (CLI) to try their next stage (chat reranker, name decoding).
 * - Abstention: when abstain_below is finite, a query whose top score is below it abstains.
 * Ownership: the router borrows the registry, embedder and reranker (they must outlive it).
 * Thread-safety: one query at a time per router.
 */
#ifndef NX_ROUTE_ROUTER_H
#define NX_ROUTE_ROUTER_H

#include <stdbool.h>
#include <stdint.h>

#include "route/embed.h"
#include "route/registry.h"
#include "route/slb.h"

enum rt_mode { RT_MODE_BM25 = 0, RT_MODE_DENSE = 1, RT_MODE_HYBRID = 2 };

struct rt_router_params {
    enum rt_mode mode;
    int k;               /* hits reported, 1..RT_SLB_KMAX (default 5) */
    float tau;           /* margin gate threshold (default 0: never fires) */
    float abstain_below; /* top-score abstention threshold (default NAN: never abstains) */
    int rrf_k;           /* default 60 */
    int rrf_depth;       /* 0 (default): full rankings */
    float bm25_k1, bm25_b;  /* 1.2, 0.75 */
    rt_embedder *embedder;  /* borrowed; required for dense and hybrid */
    rt_reranker *reranker;  /* borrowed; optional */
    int rerank_k;           /* hits reranked when the gate fires (default: k) */
};
struct rt_router_params rt_router_default_params(void);

/* Mode by name ("bm25", "dense", "hybrid"); -1 when unknown. */
int rt_mode_parse(const char *s);
const char *rt_mode_name(enum rt_mode m);

struct rt_route {
    int n;                              /* hits */
    struct rt_hit hit[RT_SLB_KMAX];     /* id = registry index; first-stage order */
    float margin;                       /* hit[0].score - hit[1].score */
    bool gate;                          /* margin < tau */
    bool reranked;                      /* the reranker reordered the top */
    int n_rerank;
    struct rt_hit rerank[RT_SLB_KMAX];  /* reranked order with reranker scores */
    bool undecided;                     /* gate fired and no reranker ran */
    bool abstain;                       /* top score < abstain_below */
    int chosen;                         /* registry index of the chosen tool (-1: no tools) */
};

typedef struct rt_router rt_router;

/*
 * Indexes the tools subset[0..n) of reg (subset NULL: all n = reg->n). doc_vecs (optional):
 * precomputed document embeddings, n x embedder->dim, row i for subset[i]; otherwise they are
 * computed with the embedder. NULL with a message on failure (embedder error, OOM, dense mode
 * without an embedder).
 */
rt_router *rt_router_new(const rt_registry *reg, const int *subset, int n,
                         const struct rt_router_params *p, const float *doc_vecs, char *err,
                         size_t errlen);
void rt_router_free(rt_router *rt);

/* Routes one query. qvec (optional): the query embedding (dense/hybrid), else computed.
 * Returns NX_STATUS_OK, or NX_STATUS_NOMEM / NX_STATUS_INVALID_ARG (the embedder or reranker
 * failed) with a message. */
nx_status rt_router_route(rt_router *rt, const char *query, const float *qvec, struct rt_route *out,
                    char *err, size_t errlen);

/* The document text the embedder sees for a tool: "<name>: <description>" (nx_free). */
char *rt_embed_document(const struct rt_tool *t);

/* Reciprocal rank fusion: fused[d] (n_docs, zeroed first) += 1 / (k + r) for each ranking, r the
 * 1-based position of d in rankings[i][0..lens[i]). */
void rt_rrf(const int32_t *const *rankings, const int *lens, int n_rankings, int n_docs, int k,
            float *fused);

/* Sorts ids 0..n-1 by score descending (ties: lower id first) into order[n]. */
void rt_rank_scores(const float *scores, int n, int32_t *order);

/* The p-th percentile (0..100) of v[n] by linear interpolation between order statistics
 * (position p/100 * (n-1)); NAN when n = 0. v is not modified. */
double rt_percentile(const float *v, int n, double p);

/* Wilson score interval of k successes in n trials at normal quantile z (1.96: 95%). */
void rt_wilson(int k, int n, double z, double *lo, double *hi);

/* Abstention threshold from a calibration split: top scores of answerable (pos) and
 * unanswerable (neg) queries; the threshold t (abstain when score < t) maximising
 * answered(pos)/npos + abstained(neg)/nneg, over midpoints between distinct values (ties: the
 * lowest such t). NAN when either set is empty. */
double rt_calibrate_abstain(const float *pos, int npos, const float *neg, int nneg);

#endif
