/*
 * router.c - BM25 / dense / hybrid routing, the margin gate and the reranker hook (router.h),
 * plus rank fusion, percentiles, Wilson intervals and the abstention calibration.
 */
#include "route/router.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "route/bm25.h"

struct rt_router {
    const rt_registry *reg;
    struct rt_router_params p;
    int n;
    int *ids;        /* (n) registry index of local doc i */
    rt_bm25 *bm;
    rt_slb *slb;     /* dense / hybrid */
    float *bm_sc;    /* (n) */
    float *dn_sc;    /* (n) */
    float *fused;    /* (n) */
    int32_t *rank_a; /* (n) */
    int32_t *rank_b; /* (n) */
    int32_t *dots;   /* (n) */
    float *qvec;     /* (dim) */
};

struct rt_router_params rt_router_default_params(void) {
    return (struct rt_router_params){.mode = RT_MODE_BM25, .k = 5, .tau = 0, .abstain_below = NAN,
                                     .rrf_k = 60, .rrf_depth = 0, .bm25_k1 = 1.2f,
                                     .bm25_b = 0.75f};
}

int rt_mode_parse(const char *s) {
    if (!strcmp(s, "bm25")) return RT_MODE_BM25;
    if (!strcmp(s, "dense")) return RT_MODE_DENSE;
    if (!strcmp(s, "hybrid")) return RT_MODE_HYBRID;
    return -1;
}

const char *rt_mode_name(enum rt_mode m) {
    return m == RT_MODE_DENSE ? "dense" : m == RT_MODE_HYBRID ? "hybrid" : "bm25";
}

char *rt_embed_document(const struct rt_tool *t) {
    size_t n = strlen(t->name) + strlen(t->description) + 3;
    char *s = nx_malloc(n);
    if (s) snprintf(s, n, "%s: %s", t->name, t->description);
    return s;
}

void rt_router_free(rt_router *rt) {
    if (!rt) return;
    rt_bm25_free(rt->bm);
    rt_slb_free(rt->slb);
    nx_free(rt->ids);
    nx_free(rt->bm_sc);
    nx_free(rt->dn_sc);
    nx_free(rt->fused);
    nx_free(rt->rank_a);
    nx_free(rt->rank_b);
    nx_free(rt->dots);
    nx_free(rt->qvec);
    nx_free(rt);
}

rt_router *rt_router_new(const rt_registry *reg, const int *subset, int n,
                         const struct rt_router_params *p, const float *doc_vecs, char *err,
                         size_t errlen) {
    struct rt_router_params pp = p ? *p : rt_router_default_params();
    if (pp.k < 1 || pp.k > RT_SLB_KMAX) {
        snprintf(err, errlen, "router: k = %d is outside 1..%d", pp.k, RT_SLB_KMAX);
        return NULL;
    }
    if (pp.rerank_k <= 0 || pp.rerank_k > pp.k) pp.rerank_k = pp.k;
    if (pp.rrf_k < 1) pp.rrf_k = 60;
    if (pp.mode != RT_MODE_BM25 && !pp.embedder) {
        snprintf(err, errlen, "router: the %s mode needs an embedding model (--embed-model)",
                 rt_mode_name(pp.mode));
        return NULL;
    }
    if (!subset) n = reg->n;
    if (n < 0 || n > reg->n) {
        snprintf(err, errlen, "router: %d tools requested from a registry of %d", n, reg->n);
        return NULL;
    }
    rt_router *rt = nx_calloc(1, sizeof *rt);
    if (!rt) goto nomem;
    rt->reg = reg;
    rt->p = pp;
    rt->n = n;
    size_t m = (size_t)(n > 0 ? n : 1);
    rt->ids = nx_malloc(sizeof *rt->ids * m);
    rt->bm_sc = nx_malloc(sizeof(float) * m);
    rt->dn_sc = nx_malloc(sizeof(float) * m);
    rt->fused = nx_malloc(sizeof(float) * m);
    rt->rank_a = nx_malloc(sizeof(int32_t) * m);
    rt->rank_b = nx_malloc(sizeof(int32_t) * m);
    rt->dots = nx_malloc(sizeof(int32_t) * m);
    rt->bm = rt_bm25_new(pp.bm25_k1, pp.bm25_b);
    if (!rt->ids || !rt->bm_sc || !rt->dn_sc || !rt->fused || !rt->rank_a || !rt->rank_b ||
        !rt->dots || !rt->bm)
        goto nomem;
    for (int i = 0; i < n; i++) {
        int id = subset ? subset[i] : i;
        if (id < 0 || id >= reg->n) {
            snprintf(err, errlen, "router: tool index %d outside the registry", id);
            rt_router_free(rt);
            return NULL;
        }
        rt->ids[i] = id;
        if (rt_bm25_add_tool(rt->bm, &reg->tools[id])) goto nomem;
    }
    if (pp.mode != RT_MODE_BM25) {
        int dim = pp.embedder->dim;
        if (rt_slb_new(dim, &rt->slb, err, errlen) != NX_STATUS_OK) {
            rt_router_free(rt);
            return NULL;
        }
        rt->qvec = nx_malloc(sizeof(float) * (size_t)dim);
        if (!rt->qvec) goto nomem;
        for (int i = 0; i < n; i++) {
            const float *v = doc_vecs ? doc_vecs + (size_t)i * (size_t)dim : NULL;
            if (!v) {
                char *doc = rt_embed_document(&reg->tools[rt->ids[i]]);
                if (!doc) goto nomem;
                nx_status rc =
                    pp.embedder->embed(pp.embedder, doc, RT_DOCUMENT, rt->qvec, err, errlen);
                nx_free(doc);
                if (rc != NX_STATUS_OK) {
                    rt_router_free(rt);
                    return NULL;
                }
                v = rt->qvec;
            }
            if (rt_slb_add(rt->slb, v) < 0) goto nomem;
        }
    }
    return rt;
nomem:
    rt_router_free(rt);
    snprintf(err, errlen, "out of memory");
    return NULL;
}

struct sid {
    float s;
    int32_t id;
};
static int cmp_sid(const void *a, const void *b) {
    const struct sid *x = a, *y = b;
    if (x->s != y->s) return x->s < y->s ? 1 : -1;
    return (x->id > y->id) - (x->id < y->id);
}

void rt_rank_scores(const float *scores, int n, int32_t *order) {
    struct sid *v = nx_malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v) { /* degrade to a selection without allocation: O(n^2), correct */
        for (int i = 0; i < n; i++) order[i] = i;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; j < n; j++) {
                float a = scores[order[i]], b = scores[order[j]];
                if (b > a || (b == a && order[j] < order[i])) {
                    int32_t t = order[i];
                    order[i] = order[j];
                    order[j] = t;
                }
            }
        return;
    }
    for (int i = 0; i < n; i++) v[i] = (struct sid){scores[i], i};
    qsort(v, (size_t)n, sizeof *v, cmp_sid);
    for (int i = 0; i < n; i++) order[i] = v[i].id;
    nx_free(v);
}

void rt_rrf(const int32_t *const *rankings, const int *lens, int n_rankings, int n_docs, int k,
            float *fused) {
    for (int d = 0; d < n_docs; d++) fused[d] = 0;
    for (int r = 0; r < n_rankings; r++)
        for (int i = 0; i < lens[r]; i++) {
            int32_t d = rankings[r][i];
            if (d >= 0 && d < n_docs) fused[d] += 1.0f / (float)(k + i + 1);
        }
}

nx_status rt_router_route(rt_router *rt, const char *query, const float *qvec, struct rt_route *out,
                    char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->chosen = -1;
    out->margin = INFINITY;
    const struct rt_router_params *p = &rt->p;
    int n = rt->n;
    if (n == 0) return 0;
    if (p->mode != RT_MODE_DENSE) {
        if (rt_bm25_score(rt->bm, query, rt->bm_sc) < 0) {
            snprintf(err, errlen, "out of memory");
            return NX_STATUS_NOMEM;
        }
    }
    if (p->mode != RT_MODE_BM25) {
        if (!qvec) {
            nx_status st = p->embedder->embed(p->embedder, query, RT_QUERY, rt->qvec, err, errlen);
            if (st != NX_STATUS_OK) return st;
            qvec = rt->qvec;
        }
        rt_slb_scores(rt->slb, qvec, rt->dn_sc, rt->dots);
    }
    const float *sc = p->mode == RT_MODE_BM25 ? rt->bm_sc : rt->dn_sc;
    if (p->mode == RT_MODE_HYBRID) {
        rt_rank_scores(rt->bm_sc, n, rt->rank_a);
        int la = 0;
        while (la < n && rt->bm_sc[rt->rank_a[la]] > 0) la++; /* only lexical matches */
        rt_rank_scores(rt->dn_sc, n, rt->rank_b);
        int lb = n;
        if (p->rrf_depth > 0) {
            if (la > p->rrf_depth) la = p->rrf_depth;
            if (lb > p->rrf_depth) lb = p->rrf_depth;
        }
        const int32_t *ranks[2] = {rt->rank_a, rt->rank_b};
        int lens[2] = {la, lb};
        rt_rrf(ranks, lens, 2, n, p->rrf_k, rt->fused);
        sc = rt->fused;
    }
    int k = p->k < n ? p->k : n;
    int nh = 0;
    for (int i = 0; i < n; i++) rt_topk_push(out->hit, &nh, k, i, sc[i]);
    out->n = nh;
    if (nh >= 2) out->margin = out->hit[0].score - out->hit[1].score;
    for (int i = 0; i < nh; i++) out->hit[i].id = rt->ids[out->hit[i].id];
    out->chosen = out->hit[0].id;
    out->gate = out->margin < p->tau;
    out->abstain = isfinite(p->abstain_below) && out->hit[0].score < p->abstain_below;
    if (out->gate && p->reranker) {
        int m = p->rerank_k < nh ? p->rerank_k : nh;
        int nr = 0;
        for (int i = 0; i < m; i++) {
            char *doc = rt_embed_document(&rt->reg->tools[out->hit[i].id]);
            if (!doc) {
                snprintf(err, errlen, "out of memory");
                return NX_STATUS_NOMEM;
            }
            float s = 0;
            nx_status st = p->reranker->score(p->reranker, query, doc, &s, err, errlen);
            nx_free(doc);
            if (st != NX_STATUS_OK) return st;
            /* ties keep first-stage order: push with the first-stage position as id */
            rt_topk_push(out->rerank, &nr, m, i, s);
        }
        for (int i = 0; i < nr; i++) out->rerank[i].id = out->hit[out->rerank[i].id].id;
        out->n_rerank = nr;
        out->reranked = true;
        out->chosen = out->rerank[0].id;
    } else if (out->gate) {
        out->undecided = true;
    }
    return 0;
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

double rt_percentile(const float *v, int n, double p) {
    if (n <= 0) return NAN;
    float *c = nx_malloc(sizeof *c * (size_t)n);
    if (!c) return NAN;
    memcpy(c, v, sizeof *c * (size_t)n);
    qsort(c, (size_t)n, sizeof *c, cmp_float);
    if (p < 0) p = 0;
    if (p > 100) p = 100;
    double pos = p / 100.0 * (n - 1);
    int lo = (int)floor(pos);
    int hi = lo + 1 < n ? lo + 1 : lo;
    double r = c[lo] + (pos - lo) * ((double)c[hi] - c[lo]);
    nx_free(c);
    return r;
}

void rt_wilson(int k, int n, double z, double *lo, double *hi) {
    if (n <= 0) {
        *lo = 0;
        *hi = 1;
        return;
    }
    double ph = (double)k / n, z2 = z * z;
    double den = 1 + z2 / n;
    double mid = (ph + z2 / (2.0 * n)) / den;
    double half = z * sqrt(ph * (1 - ph) / n + z2 / (4.0 * n * n)) / den;
    *lo = mid - half < 0 ? 0 : mid - half;
    *hi = mid + half > 1 ? 1 : mid + half;
}

double rt_calibrate_abstain(const float *pos, int npos, const float *neg, int nneg) {
    if (npos <= 0 || nneg <= 0) return NAN;
    int n = npos + nneg;
    float *all = nx_malloc(sizeof *all * (size_t)n);
    if (!all) return NAN;
    memcpy(all, pos, sizeof *all * (size_t)npos);
    memcpy(all + npos, neg, sizeof *all * (size_t)nneg);
    qsort(all, (size_t)n, sizeof *all, cmp_float);
    double best_t = (double)all[0] - 1.0, best = -1;
    /* candidates: below everything, midpoints, above everything */
    for (int i = 0; i <= n; i++) {
        double t;
        if (i == 0) t = (double)all[0] - 1.0;
        else if (i == n) t = (double)all[n - 1] + 1.0;
        else if (all[i] == all[i - 1]) continue;
        else t = 0.5 * ((double)all[i - 1] + all[i]);
        int ans = 0, abst = 0;
        for (int j = 0; j < npos; j++) ans += pos[j] >= t;
        for (int j = 0; j < nneg; j++) abst += neg[j] < t;
        double v = (double)ans / npos + (double)abst / nneg;
        if (v > best) {
            best = v;
            best_t = t;
        }
    }
    nx_free(all);
    return best_t;
}
