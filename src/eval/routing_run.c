/* routing_run.c - the runner of `nexus eval-routing` (the protocol is in routing_run.h). */
#include "eval/routing_run.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "eval/outfile.h"
#include "eval/svg.h"
#include "route/cascade.h"
#include "route/embed.h"
#include "route/registry.h"
#include "route/router.h"
#include "route/slb.h"

/* root to path (atomically), a message on stderr either way. */
static nx_status save_json(const char *path, json_t *root) {
    char err[1300];
    nx_status st = nx_outfile_write_json(path, root, err, sizeof err);
    if (st != NX_STATUS_OK)
        fprintf(stderr, "nexus eval-routing: %s\n", err);
    else
        fprintf(stderr, "eval-routing: wrote %s\n", path);
    return st;
}

struct equery {
    char *id;
    char *text;
    int set;    /* index into the set names */
    int *cands; /* store indices of the query's own functions */
    int n_cands;
    int *expect; /* name ids of the expected tools (empty: irrelevance) */
    int n_expect;
    int exp_def; /* the query's own definition of the first expected tool, or -1 */
};

struct eval_ctx {
    rt_registry store; /* every definition (RT_DUP_KEEP_ALL) */
    int *name_id;      /* (store.n) */
    int n_names;
    char **names; /* (n_names) borrowed from the store */
    struct equery *q;
    int nq, capq;
    /* embedding caches */
    rt_embedder *emb;
    float *dvec; /* (store.n, dim) */
    unsigned char *dhave;
    float *qvec; /* (nq, dim) */
    unsigned char *qhave;
    uint64_t seed;
};

static void equery_free(struct equery *q) {
    nx_free(q->id);
    nx_free(q->text);
    nx_free(q->cands);
    nx_free(q->expect);
}

static void ectx_free(struct eval_ctx *c) {
    for (int i = 0; i < c->nq; i++) equery_free(&c->q[i]);
    nx_free(c->q);
    nx_free(c->name_id);
    nx_free(c->names);
    nx_free(c->dvec);
    nx_free(c->dhave);
    nx_free(c->qvec);
    nx_free(c->qhave);
    rt_registry_free(&c->store);
}

/* The user text of a BFCL question: user contents of the first turn, joined by newlines. */
static char *bfcl_text(json_t *question) {
    json_t *turn = json_array_get(question, 0);
    if (!json_is_array(turn)) return NULL;
    size_t len = 1, i;
    json_t *m;
    int any_user = 0;
    json_array_foreach(turn, i, m) {
        json_t *c = json_object_get(m, "content"), *r = json_object_get(m, "role");
        if (json_is_string(c) && json_is_string(r) && !strcmp(json_string_value(r), "user")) {
            len += strlen(json_string_value(c)) + 1;
            any_user = 1;
        }
    }
    if (!any_user) return NULL;
    char *s = nx_malloc(len);
    if (!s) return NULL;
    s[0] = 0;
    size_t o = 0;
    json_array_foreach(turn, i, m) {
        json_t *c = json_object_get(m, "content"), *r = json_object_get(m, "role");
        if (json_is_string(c) && json_is_string(r) && !strcmp(json_string_value(r), "user"))
            o += (size_t)snprintf(s + o, len - o, "%s%s", o ? "\n" : "", json_string_value(c));
    }
    return s;
}

/* id -> ground-truth names, from a possible_answer file (JSON Lines). */
struct answer {
    char *id;
    json_t *names; /* array of strings */
};

static int cmp_answer(const void *a, const void *b) {
    return strcmp(((const struct answer *)a)->id, ((const struct answer *)b)->id);
}

static int load_answers(const char *path, struct answer **out, int *n_out, char *err,
                        size_t errlen) {
    size_t len;
    char *text = nx_read_file(path, NX_READ_FILE_MAX, &len, err, errlen);
    if (!text) return -1;
    struct answer *a = NULL;
    int n = 0, cap = 0, line = 0, rc = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        line++;
        if (ll > 0 && !(ll == 1 && p[0] == '\r')) {
            json_error_t je;
            json_t *v = json_loadb(p, ll, 0, &je);
            json_t *id = v ? json_object_get(v, "id") : NULL;
            json_t *gt = v ? json_object_get(v, "ground_truth") : NULL;
            if (!v || !json_is_string(id) || !json_is_array(gt)) {
                snprintf(err, errlen, "%.900s:%d: %.200s", path, line,
                         v ? "expected {\"id\": ..., \"ground_truth\": [...]}" : je.text);
                json_decref(v);
                rc = -1;
                break;
            }
            if (n == cap) {
                cap = cap ? cap * 2 : 256;
                struct answer *na = nx_realloc(a, sizeof *na * (size_t)cap);
                if (!na) {
                    json_decref(v);
                    snprintf(err, errlen, "out of memory");
                    rc = -1;
                    break;
                }
                a = na;
            }
            json_t *names = json_array();
            size_t i;
            json_t *call;
            json_array_foreach(gt, i, call) {
                const char *k;
                json_t *x;
                if (json_is_object(call))
                    json_object_foreach(call, k, x) json_array_append_new(names, json_string(k));
            }
            a[n].id = nx_strdup(json_string_value(id));
            a[n].names = names;
            n++;
            json_decref(v);
        }
        if (!nl) break;
        p = nl + 1;
    }
    nx_free(text);
    if (rc) {
        for (int i = 0; i < n; i++) {
            nx_free(a[i].id);
            json_decref(a[i].names);
        }
        nx_free(a);
        return -1;
    }
    qsort(a, (size_t)n, sizeof *a, cmp_answer);
    *out = a;
    *n_out = n;
    return 0;
}

static void free_answers(struct answer *a, int n) {
    for (int i = 0; i < n; i++) {
        nx_free(a[i].id);
        json_decref(a[i].names);
    }
    nx_free(a);
}

static struct equery *new_query(struct eval_ctx *c) {
    if (c->nq == c->capq) {
        int nc = c->capq ? c->capq * 2 : 512;
        struct equery *nq = nx_realloc(c->q, sizeof *nq * (size_t)nc);
        if (!nq) return NULL;
        c->q = nq;
        c->capq = nc;
    }
    struct equery *q = &c->q[c->nq++];
    memset(q, 0, sizeof *q);
    q->exp_def = -1;
    return q;
}

/* Loads one BFCL question file (JSON Lines) into the store and the query list; answers may be
 * NULL (irrelevance). Expected names are kept as strings in *exp_names (json array per query,
 * resolved to name ids after all files are loaded). */
static int load_bfcl_set(struct eval_ctx *c, const char *path, int set, struct answer *ans,
                         int n_ans, json_t *exp_names, char *err, size_t errlen) {
    size_t len;
    char *text = nx_read_file(path, NX_READ_FILE_MAX, &len, err, errlen);
    if (!text) return -1;
    int line = 0, rc = 0;
    for (char *p = text; *p;) {
        char *nl = strchr(p, '\n');
        size_t ll = nl ? (size_t)(nl - p) : strlen(p);
        line++;
        if (ll > 0 && !(ll == 1 && p[0] == '\r')) {
            char where[1100];
            snprintf(where, sizeof where, "%.1000s:%d", path, line);
            json_error_t je;
            json_t *v = json_loadb(p, ll, 0, &je);
            json_t *id = v ? json_object_get(v, "id") : NULL;
            json_t *fns = v ? json_object_get(v, "function") : NULL;
            char *qt = v ? bfcl_text(json_object_get(v, "question")) : NULL;
            if (!v || !json_is_string(id) || !json_is_array(fns) || !qt) {
                snprintf(
                    err, errlen, "%.1000s: %.150s", where,
                    !v ? je.text
                       : "expected {\"id\", \"question\": [[{role, content}]], \"function\": [...]} with a user message");
                nx_free(qt);
                json_decref(v);
                rc = -1;
                break;
            }
            int start = c->store.n;
            if (rt_registry_add_json(&c->store, v, where, "bfcl", err, errlen) < 0) {
                nx_free(qt);
                json_decref(v);
                rc = -1;
                break;
            }
            struct equery *q = new_query(c);
            if (!q) {
                nx_free(qt);
                json_decref(v);
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
            q->id = nx_strdup(json_string_value(id));
            q->text = qt;
            q->set = set;
            q->n_cands = c->store.n - start;
            q->cands = nx_malloc(sizeof(int) * (size_t)(q->n_cands > 0 ? q->n_cands : 1));
            for (int i = 0; q->cands && i < q->n_cands; i++) q->cands[i] = start + i;
            json_t *names = NULL;
            if (ans) {
                struct answer key = {.id = q->id};
                struct answer *a = bsearch(&key, ans, (size_t)n_ans, sizeof *ans, cmp_answer);
                if (a) names = a->names;
            }
            json_array_append_new(exp_names, names ? json_incref(names) : json_array());
            json_decref(v);
            if (!q->id || !q->cands) {
                snprintf(err, errlen, "out of memory");
                rc = -1;
                break;
            }
        }
        if (!nl) break;
        p = nl + 1;
    }
    nx_free(text);
    return rc;
}

static int cmp_name_idx(const void *a, const void *b, void *ctx) {
    const rt_registry *r = ctx;
    int x = *(const int *)a, y = *(const int *)b;
    int c = strcmp(r->tools[x].name, r->tools[y].name);
    return c ? c : (x > y) - (x < y);
}

/* name ids: distinct names in bytewise order */
static int assign_names(struct eval_ctx *c) {
    int n = c->store.n;
    int *ord = nx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    c->name_id = nx_malloc(sizeof(int) * (size_t)(n ? n : 1));
    c->names = nx_malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (!ord || !c->name_id || !c->names) {
        nx_free(ord);
        return -1;
    }
    for (int i = 0; i < n; i++) ord[i] = i;
    qsort_r(ord, (size_t)n, sizeof *ord, cmp_name_idx, &c->store);
    c->n_names = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || strcmp(c->store.tools[ord[i]].name, c->store.tools[ord[i - 1]].name) != 0)
            c->names[c->n_names++] = c->store.tools[ord[i]].name;
        c->name_id[ord[i]] = c->n_names - 1;
    }
    nx_free(ord);
    return 0;
}

static int find_name(const struct eval_ctx *c, const char *s) {
    int lo = 0, hi = c->n_names - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, r = strcmp(c->names[mid], s);
        if (!r) return mid;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Pool of a set mask: first definition (store order) of each distinct name, in name order. */
static int build_pool(const struct eval_ctx *c, unsigned set_mask, int **out) {
    int *first = nx_malloc(sizeof(int) * (size_t)(c->n_names ? c->n_names : 1));
    int *pool = nx_malloc(sizeof(int) * (size_t)(c->n_names ? c->n_names : 1));
    if (!first || !pool) {
        nx_free(first);
        nx_free(pool);
        return -1;
    }
    for (int i = 0; i < c->n_names; i++) first[i] = -1;
    for (int qi = 0; qi < c->nq; qi++) {
        const struct equery *q = &c->q[qi];
        if (!(set_mask & (1u << q->set))) continue;
        for (int j = 0; j < q->n_cands; j++) {
            int d = q->cands[j];
            if (first[c->name_id[d]] < 0) first[c->name_id[d]] = d;
        }
    }
    int n = 0;
    for (int i = 0; i < c->n_names; i++)
        if (first[i] >= 0) pool[n++] = first[i];
    nx_free(first);
    *out = pool;
    return n;
}

static nx_status ensure_vecs(struct eval_ctx *c, const int *defs, int n, char *err, size_t errlen) {
    if (!c->emb) return NX_STATUS_OK;
    int dim = c->emb->dim;
    for (int i = 0; i < n; i++) {
        int d = defs[i];
        if (c->dhave[d]) continue;
        char *doc = rt_embed_document(&c->store.tools[d]);
        if (!doc) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        nx_status rc =
            c->emb->embed(c->emb, doc, RT_DOCUMENT, c->dvec + (size_t)d * dim, err, errlen);
        nx_free(doc);
        if (rc != NX_STATUS_OK) return rc;
        c->dhave[d] = 1;
    }
    return NX_STATUS_OK;
}

/* Query qi's embedding (cached) into *out; NULL without an embedder. */
static nx_status query_vec(struct eval_ctx *c, int qi, const float **out, char *err,
                           size_t errlen) {
    *out = NULL;
    if (!c->emb) return NX_STATUS_OK;
    float *v = c->qvec + (size_t)qi * c->emb->dim;
    if (!c->qhave[qi]) {
        nx_status st = c->emb->embed(c->emb, c->q[qi].text, RT_QUERY, v, err, errlen);
        if (st != NX_STATUS_OK) return st;
        c->qhave[qi] = 1;
    }
    *out = v;
    return NX_STATUS_OK;
}

/* A router over sub[0..n) of the store (vectors from the cache); NOMEM or INVALID_ARG from
 * rt_router_new's message. */
static nx_status subset_router(struct eval_ctx *c, const struct rt_router_params *p, const int *sub,
                               int n, float *gather, rt_router **out, char *err, size_t errlen) {
    nx_status st = ensure_vecs(c, sub, n, err, errlen);
    if (st != NX_STATUS_OK) return st;
    if (c->emb) {
        int dim = c->emb->dim;
        for (int i = 0; i < n; i++)
            memcpy(gather + (size_t)i * dim, c->dvec + (size_t)sub[i] * dim,
                   sizeof(float) * (size_t)dim);
    }
    *out = rt_router_new(&c->store, sub, n, p, c->emb ? gather : NULL, err, errlen);
    if (!*out) return strstr(err, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG;
    return NX_STATUS_OK;
}

/* Routes query qi within the tools sub[0..n); fills out. */
static nx_status route_subset(struct eval_ctx *c, const struct rt_router_params *p, int qi,
                              const int *sub, int n, float *gather, struct rt_route *out, char *err,
                              size_t errlen) {
    rt_router *rt = NULL;
    const float *qv = NULL;
    nx_status rc = subset_router(c, p, sub, n, gather, &rt, err, errlen);
    if (rc == NX_STATUS_OK) rc = query_vec(c, qi, &qv, err, errlen);
    if (rc == NX_STATUS_OK) rc = rt_router_route(rt, c->q[qi].text, qv, out, err, errlen);
    rt_router_free(rt);
    return rc;
}

/* rank (1-based) of the first expected name among the hits, 0 when not in them */
static int expected_rank(const struct eval_ctx *c, const struct equery *q,
                         const struct rt_route *r) {
    for (int i = 0; i < r->n; i++)
        for (int j = 0; j < q->n_expect; j++)
            if (c->name_id[r->hit[i].id] == q->expect[j]) return i + 1;
    return 0;
}

static uint64_t mix3(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t s = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull) * 0xbf58476d1ce4e5b9ull ^
                 (c + 1) * 0x94d049bb133111ebull;
    return nx_splitmix64(&s);
}

struct cell {
    int set, n_tools, n, c1, c3, c5;
};

static json_t *cell_json(const struct cell *cl, const char *set_name) {
    double lo1, hi1, lo5, hi5;
    rt_wilson(cl->c1, cl->n, 1.96, &lo1, &hi1);
    rt_wilson(cl->c5, cl->n, 1.96, &lo5, &hi5);
    double r1 = cl->n ? (double)cl->c1 / cl->n : NAN, r5 = cl->n ? (double)cl->c5 / cl->n : NAN;
    json_t *o = json_object();
    json_object_set_new(o, "set", json_string(set_name));
    json_object_set_new(o, "n_tools", json_integer(cl->n_tools));
    json_object_set_new(o, "n_queries", json_integer(cl->n));
    json_object_set_new(o, "r1", nx_json_real_or_null(r1));
    json_object_set_new(o, "r1_ci95",
                        json_pack("[o,o]", nx_json_real_or_null(lo1), nx_json_real_or_null(hi1)));
    json_object_set_new(o, "r3", nx_json_real_or_null(cl->n ? (double)cl->c3 / cl->n : NAN));
    json_object_set_new(o, "r5", nx_json_real_or_null(r5));
    json_object_set_new(o, "r5_ci95",
                        json_pack("[o,o]", nx_json_real_or_null(lo5), nx_json_real_or_null(hi5)));
    return o;
}

static void print_cell(const char *emb, const char *set, const struct cell *cl, const char *label) {
    double lo1, hi1, lo5, hi5;
    rt_wilson(cl->c1, cl->n, 1.96, &lo1, &hi1);
    rt_wilson(cl->c5, cl->n, 1.96, &lo5, &hi5);
    char nt[32];
    if (label)
        snprintf(nt, sizeof nt, "%s %d", label, cl->n_tools);
    else
        snprintf(nt, sizeof nt, "%d", cl->n_tools);
    printf("%-8s %-14s %-11s %6d  %.3f [%.3f, %.3f]  %.3f [%.3f, %.3f]\n", emb, set, nt, cl->n,
           cl->n ? (double)cl->c1 / cl->n : 0, lo1, hi1, cl->n ? (double)cl->c5 / cl->n : 0, lo5,
           hi5);
}

static json_t *wrong_json(const struct eval_ctx *c, const struct equery *q,
                          const struct rt_route *r, int rank, int with_text) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(q->id));
    if (with_text) json_object_set_new(o, "query", json_string(q->text));
    json_object_set_new(o, "expected", json_string(c->names[q->expect[0]]));
    json_object_set_new(o, "got", json_string(c->store.tools[r->hit[0].id].name));
    json_object_set_new(o, "expected_rank", rank ? json_integer(rank) : json_null());
    return o;
}

#define N_SETS 4
static const char *const k_sets[N_SETS] = {"live_multiple", "multiple", "live_irrelevance",
                                           "irrelevance"};

/* one embedder over the BFCL evaluation; appends its record to out */
static nx_status eval_bfcl_embedder(struct eval_ctx *c, const struct routing_eval_params *o,
                                    enum rt_mode mode, json_t *out, double r1_by[2][16],
                                    double r1_err[2][16], double r5_by[2][16],
                                    double r5_err[2][16]) {
    char err[1024];
    struct rt_router_params p = rt_router_default_params();
    p.mode = mode;
    p.k = RT_SLB_KMAX;
    p.embedder = c->emb;
    p.rrf_depth = o->rrf_depth;
    int maxn = 0;
    for (int i = 0; i < o->n_sizes; i++) maxn = o->sizes[i] > maxn ? o->sizes[i] : maxn;
    int *pool_all = NULL;
    int npool_all = build_pool(c, 3u, &pool_all);
    if (npool_all < 0) {
        fprintf(stderr, "nexus eval-routing: out of memory\n");
        return NX_STATUS_NOMEM;
    }
    if (maxn < npool_all) maxn = npool_all;
    int *sub = nx_malloc(sizeof(int) * (size_t)(maxn + 64));
    int *stamp = nx_calloc((size_t)c->n_names, sizeof(int));
    float *gather =
        c->emb ? nx_malloc(sizeof(float) * (size_t)c->emb->dim * (size_t)(maxn + 64)) : NULL;
    json_t *rec = json_object(), *sweep = json_array(), *pooled = json_array();
    nx_status rc = NX_STATUS_NOMEM;
    int stampv = 0;
    if (!sub || !stamp || (c->emb && !gather)) {
        fprintf(stderr, "nexus eval-routing: out of memory\n");
        goto done;
    }
    const char *ename = rt_mode_name(mode);
    json_object_set_new(rec, "embedder", json_string(ename));
    json_object_set_new(rec, "embed_model",
                        mode == RT_MODE_BM25 || !o->embed_model ? json_null()
                                                                : json_string(o->embed_model));
    json_object_set_new(rec, "pool_tools", json_integer(npool_all));
    /* ---- sweep over N ---- */
    for (int set = 0; set < 2; set++) {
        for (int si = 0; si < o->n_sizes; si++) {
            int N = o->sizes[si] < npool_all ? o->sizes[si] : npool_all;
            struct cell cl = {set, N, 0, 0, 0, 0};
            json_t *wrong = json_array();
            for (int qi = 0; qi < c->nq; qi++) {
                struct equery *q = &c->q[qi];
                if (q->set != set || q->exp_def < 0) continue;
                uint64_t rs = mix3(o->seed, (uint64_t)qi, (uint64_t)N);
                stampv++;
                int n = 0;
                sub[n++] = q->exp_def;
                for (int j = 0; j < q->n_expect; j++) stamp[q->expect[j]] = stampv;
                /* own candidates, shuffled */
                int oc[64], noc = 0;
                for (int j = 0; j < q->n_cands && noc < 64; j++) {
                    int d = q->cands[j];
                    if (stamp[c->name_id[d]] == stampv) continue;
                    oc[noc++] = d;
                }
                for (int j = noc - 1; j > 0; j--) {
                    int r = (int)(nx_splitmix64(&rs) % (uint64_t)(j + 1)), t = oc[j];
                    oc[j] = oc[r];
                    oc[r] = t;
                }
                for (int j = 0; j < noc && n < N; j++) {
                    if (stamp[c->name_id[oc[j]]] == stampv) continue;
                    stamp[c->name_id[oc[j]]] = stampv;
                    sub[n++] = oc[j];
                }
                /* pool distractors: rejection sampling, or a sweep once it gets crowded */
                int tries = 0;
                while (n < N && tries < 64 * N) {
                    int d = pool_all[nx_splitmix64(&rs) % (uint64_t)npool_all];
                    tries++;
                    if (stamp[c->name_id[d]] == stampv) continue;
                    stamp[c->name_id[d]] = stampv;
                    sub[n++] = d;
                }
                for (int j = 0; j < npool_all && n < N; j++) {
                    int d = pool_all[j];
                    if (stamp[c->name_id[d]] == stampv) continue;
                    stamp[c->name_id[d]] = stampv;
                    sub[n++] = d;
                }
                for (int j = n - 1; j > 0; j--) {
                    int r = (int)(nx_splitmix64(&rs) % (uint64_t)(j + 1)), t = sub[j];
                    sub[j] = sub[r];
                    sub[r] = t;
                }
                struct rt_route r;
                rc = route_subset(c, &p, qi, sub, n, gather, &r, err, sizeof err);
                if (rc != NX_STATUS_OK) {
                    fprintf(stderr, "nexus eval-routing: %s: %s\n", q->id, err);
                    json_decref(wrong);
                    goto done;
                }
                int rank = expected_rank(c, q, &r);
                cl.n++;
                cl.c1 += rank == 1;
                cl.c3 += rank >= 1 && rank <= 3;
                cl.c5 += rank >= 1 && rank <= 5;
                if (rank != 1) /* compact: [id, expected, got, expected_rank or null] */
                    json_array_append_new(wrong,
                                          json_pack("[s,s,s,o]", q->id, c->names[q->expect[0]],
                                                    c->store.tools[r.hit[0].id].name,
                                                    rank ? json_integer(rank) : json_null()));
            }
            print_cell(ename, k_sets[set], &cl, NULL);
            fflush(stdout);
            json_t *cj = cell_json(&cl, k_sets[set]);
            json_object_set_new(cj, "wrong_fields",
                                json_pack("[s,s,s,s]", "id", "expected", "got", "expected_rank"));
            json_object_set_new(cj, "wrong", wrong);
            json_array_append_new(sweep, cj);
            double lo, hi;
            rt_wilson(cl.c1, cl.n, 1.96, &lo, &hi);
            r1_by[set][si] = cl.n ? (double)cl.c1 / cl.n : NAN;
            r1_err[set][si] = (hi - lo) / 2;
            rt_wilson(cl.c5, cl.n, 1.96, &lo, &hi);
            r5_by[set][si] = cl.n ? (double)cl.c5 / cl.n : NAN;
            r5_err[set][si] = (hi - lo) / 2;
        }
    }
    /* ---- pooled registry per set, with the margin gate ---- */
    for (int set = 0; set < 2; set++) {
        int *pool = NULL;
        int np = build_pool(c, 1u << set, &pool);
        if (np < 0) {
            rc = NX_STATUS_NOMEM;
            goto done;
        }
        struct cell cl = {set, np, 0, 0, 0, 0};
        json_t *wrong = json_array();
        float *m_cal = nx_malloc(sizeof(float) * (size_t)c->nq),
              *m_test = nx_malloc(sizeof(float) * (size_t)c->nq);
        int *ok_test = nx_malloc(sizeof(int) * (size_t)c->nq);
        int ncal = 0, ntest = 0;
        if (!m_cal || !m_test || !ok_test) {
            nx_free(pool);
            nx_free(m_cal);
            nx_free(m_test);
            nx_free(ok_test);
            json_decref(wrong);
            rc = NX_STATUS_NOMEM;
            goto done;
        }
        rt_router *rt = NULL;
        rc = subset_router(c, &p, pool, np, gather, &rt, err, sizeof err);
        int fail = rc != NX_STATUS_OK;
        for (int qi = 0; !fail && qi < c->nq; qi++) {
            struct equery *q = &c->q[qi];
            if (q->set != set || q->n_expect == 0) continue;
            struct rt_route r;
            const float *qv = NULL;
            rc = query_vec(c, qi, &qv, err, sizeof err);
            if (rc == NX_STATUS_OK) rc = rt_router_route(rt, q->text, qv, &r, err, sizeof err);
            if (rc != NX_STATUS_OK) {
                fail = 1;
                break;
            }
            int rank = expected_rank(c, q, &r);
            cl.n++;
            cl.c1 += rank == 1;
            cl.c3 += rank >= 1 && rank <= 3;
            cl.c5 += rank >= 1 && rank <= 5;
            if (rank != 1) json_array_append_new(wrong, wrong_json(c, q, &r, rank, 1));
            if (mix3(o->seed ^ 0x5a5a, (uint64_t)qi, 7) & 1) {
                m_test[ntest] = r.margin;
                ok_test[ntest++] = rank == 1;
            } else {
                m_cal[ncal++] = r.margin;
            }
        }
        rt_router_free(rt);
        nx_free(pool);
        if (fail) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
            nx_free(m_cal);
            nx_free(m_test);
            nx_free(ok_test);
            json_decref(wrong);
            goto done;
        }
        print_cell(ename, k_sets[set], &cl, "pooled");
        fflush(stdout);
        double tau = rt_percentile(m_cal, ncal, o->gate_pct);
        int fired = 0, ok_f = 0, ok_n = 0;
        for (int i = 0; i < ntest; i++) {
            if (m_test[i] < tau) {
                fired++;
                ok_f += ok_test[i];
            } else {
                ok_n += ok_test[i];
            }
        }
        json_t *cj = cell_json(&cl, k_sets[set]);
        json_object_set_new(
            cj, "gate",
            json_pack("{s:f,s:o,s:i,s:i,s:o,s:o,s:o}", "percentile", o->gate_pct, "tau",
                      nx_json_real_or_null(tau), "n_cal", ncal, "n_test", ntest, "fire_rate_test",
                      nx_json_real_or_null(ntest ? (double)fired / ntest : NAN), "r1_test_fired",
                      nx_json_real_or_null(fired ? (double)ok_f / fired : NAN), "r1_test_not_fired",
                      nx_json_real_or_null(ntest - fired ? (double)ok_n / (ntest - fired) : NAN)));
        printf("%-8s %-14s gate: tau = p%.0f of calibration margins = %.6g; test half: fires on "
               "%.1f%%, R@1 %.3f when fired vs %.3f when not\n",
               ename, k_sets[set], o->gate_pct, tau, ntest ? 100.0 * fired / ntest : 0.0,
               fired ? (double)ok_f / fired : 0.0,
               ntest - fired ? (double)ok_n / (ntest - fired) : 0.0);
        json_object_set_new(cj, "wrong", wrong);
        json_array_append_new(pooled, cj);
        nx_free(m_cal);
        nx_free(m_test);
        nx_free(ok_test);
    }
    /* ---- abstention: each query within its own functions ---- */
    {
        float *pos[2], *neg[2];
        int npos[2] = {0, 0}, nneg[2] = {0, 0}, own_n[2] = {0, 0}, own_c1[2] = {0, 0};
        for (int h = 0; h < 2; h++) {
            pos[h] = nx_malloc(sizeof(float) * (size_t)c->nq);
            neg[h] = nx_malloc(sizeof(float) * (size_t)c->nq);
        }
        int fail = !pos[0] || !pos[1] || !neg[0] || !neg[1];
        rc = fail ? NX_STATUS_NOMEM : NX_STATUS_OK;
        for (int qi = 0; !fail && qi < c->nq; qi++) {
            struct equery *q = &c->q[qi];
            int irrelevant = q->set >= 2;
            if (!irrelevant && q->exp_def < 0) continue;
            struct rt_route r;
            rc = route_subset(c, &p, qi, q->cands, q->n_cands, gather, &r, err, sizeof err);
            if (rc != NX_STATUS_OK) {
                fprintf(stderr, "nexus eval-routing: %s: %s\n", q->id, err);
                fail = 1;
                break;
            }
            if (r.n == 0) continue;
            if (!irrelevant) {
                own_n[q->set]++;
                own_c1[q->set] += expected_rank(c, q, &r) == 1;
            }
            int h = (int)(mix3(o->seed ^ 0xa5a5, (uint64_t)qi, 11) & 1); /* 0: calibration */
            if (irrelevant)
                neg[h][nneg[h]++] = r.hit[0].score;
            else
                pos[h][npos[h]++] = r.hit[0].score;
        }
        if (!fail) {
            json_t *own = json_array();
            for (int set = 0; set < 2; set++) {
                struct cell cl = {set, 0, own_n[set], own_c1[set], 0, 0};
                double lo, hi;
                rt_wilson(cl.c1, cl.n, 1.96, &lo, &hi);
                json_array_append_new(
                    own, json_pack("{s:s,s:i,s:o,s:[o,o]}", "set", k_sets[set], "n_queries", cl.n,
                                   "r1", nx_json_real_or_null(cl.n ? (double)cl.c1 / cl.n : NAN),
                                   "r1_ci95", nx_json_real_or_null(lo), nx_json_real_or_null(hi)));
                printf("%-8s %-14s own candidates: R@1 %.3f [%.3f, %.3f] over %d queries\n", ename,
                       k_sets[set], cl.n ? (double)cl.c1 / cl.n : 0.0, lo, hi, cl.n);
            }
            json_object_set_new(rec, "own_candidates", own);
            double t = rt_calibrate_abstain(pos[0], npos[0], neg[0], nneg[0]);
            int abst = 0, fab = 0;
            for (int i = 0; i < nneg[1]; i++) abst += neg[1][i] < t;
            for (int i = 0; i < npos[1]; i++) fab += pos[1][i] < t;
            double lo, hi, lo2, hi2;
            rt_wilson(abst, nneg[1], 1.96, &lo, &hi);
            rt_wilson(fab, npos[1], 1.96, &lo2, &hi2);
            json_object_set_new(
                rec, "abstention",
                json_pack("{s:o,s:i,s:i,s:i,s:i,s:o,s:[o,o],s:o,s:[o,o],s:s}", "threshold",
                          nx_json_real_or_null(t), "n_cal_relevant", npos[0], "n_cal_irrelevant",
                          nneg[0], "n_test_relevant", npos[1], "n_test_irrelevant", nneg[1],
                          "abstain_rate_irrelevant",
                          nx_json_real_or_null(nneg[1] ? (double)abst / nneg[1] : NAN),
                          "abstain_rate_irrelevant_ci95", nx_json_real_or_null(lo),
                          nx_json_real_or_null(hi), "false_abstain_rate_relevant",
                          nx_json_real_or_null(npos[1] ? (double)fab / npos[1] : NAN),
                          "false_abstain_rate_relevant_ci95", nx_json_real_or_null(lo2),
                          nx_json_real_or_null(hi2), "procedure",
                          "each query routed within its own BFCL function list; top score; "
                          "threshold maximising answered(relevant)+abstained(irrelevant) rates "
                          "on the calibration half; rates on the test half"));
            printf("%-8s abstention: threshold %.6g (top score); test half: abstains on %.1f%% "
                   "[%.1f, %.1f] of %d irrelevant queries, wrongly on %.1f%% [%.1f, %.1f] of %d "
                   "relevant ones\n",
                   ename, t, nneg[1] ? 100.0 * abst / nneg[1] : 0.0, 100 * lo, 100 * hi, nneg[1],
                   npos[1] ? 100.0 * fab / npos[1] : 0.0, 100 * lo2, 100 * hi2, npos[1]);
        }
        for (int h = 0; h < 2; h++) {
            nx_free(pos[h]);
            nx_free(neg[h]);
        }
        if (fail) goto done;
    }
    json_object_set_new(rec, "sweep", sweep);
    json_object_set_new(rec, "pooled", pooled);
    sweep = pooled = NULL;
    json_array_append(out, rec);
    rc = NX_STATUS_OK;
done:
    json_decref(sweep);
    json_decref(pooled);
    json_decref(rec);
    nx_free(pool_all);
    nx_free(sub);
    nx_free(stamp);
    nx_free(gather);
    return rc;
}

static nx_status eval_bfcl(const struct routing_eval_params *o) {
    struct eval_ctx c;
    memset(&c, 0, sizeof c);
    rt_registry_init(&c.store);
    c.store.dup = RT_DUP_KEEP_ALL;
    c.seed = o->seed;
    char err[1200], path[1100];
    json_t *exp_names = json_array();
    nx_status rc = NX_STATUS_FORMAT;
    for (int set = 0; set < N_SETS; set++) {
        struct answer *ans = NULL;
        int n_ans = 0;
        if (set < 2) {
            snprintf(path, sizeof path, "%s/possible_answer/BFCL_v4_%s.json", o->bfcl_dir,
                     k_sets[set]);
            if (load_answers(path, &ans, &n_ans, err, sizeof err)) {
                fprintf(stderr, "nexus eval-routing: %s\n", err);
                goto done;
            }
        }
        snprintf(path, sizeof path, "%s/BFCL_v4_%s.json", o->bfcl_dir, k_sets[set]);
        int lrc = load_bfcl_set(&c, path, set, ans, n_ans, exp_names, err, sizeof err);
        free_answers(ans, n_ans);
        if (lrc) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
            goto done;
        }
    }
    if (assign_names(&c)) {
        fprintf(stderr, "nexus eval-routing: out of memory\n");
        rc = NX_STATUS_NOMEM;
        goto done;
    }
    int skipped = 0;
    for (int qi = 0; qi < c.nq; qi++) {
        struct equery *q = &c.q[qi];
        json_t *names = json_array_get(exp_names, (size_t)qi);
        size_t nn = json_array_size(names);
        q->expect = nx_malloc(sizeof(int) * (nn ? nn : 1));
        if (!q->expect) {
            fprintf(stderr, "nexus eval-routing: out of memory\n");
            rc = NX_STATUS_NOMEM;
            goto done;
        }
        for (size_t j = 0; j < nn; j++) {
            int id = find_name(&c, json_string_value(json_array_get(names, j)));
            if (id >= 0) q->expect[q->n_expect++] = id;
        }
        for (int j = 0; j < q->n_cands && q->n_expect > 0; j++)
            if (c.name_id[q->cands[j]] == q->expect[0]) {
                q->exp_def = q->cands[j];
                break;
            }
        if (q->set < 2 && q->exp_def < 0) skipped++;
    }
    int counts[N_SETS] = {0};
    for (int qi = 0; qi < c.nq; qi++) counts[c.q[qi].set]++;
    fprintf(stderr,
            "eval-routing: %d definitions, %d distinct names; queries: live_multiple %d, "
            "multiple %d, live_irrelevance %d, irrelevance %d; %d relevant queries skipped (answer "
            "not among their functions)\n",
            c.store.n, c.n_names, counts[0], counts[1], counts[2], counts[3], skipped);
    json_t *root = json_object(), *embs = json_array();
    json_object_set_new(root, "dataset", json_string("bfcl_v4"));
    json_object_set_new(root, "bfcl_dir", json_string(o->bfcl_dir));
    json_object_set_new(root, "seed", json_integer((json_int_t)o->seed));
    json_t *sz = json_array();
    for (int i = 0; i < o->n_sizes; i++) json_array_append_new(sz, json_integer(o->sizes[i]));
    json_object_set_new(root, "sizes", sz);
    json_object_set_new(root, "skipped_relevant_queries", json_integer(skipped));
    json_object_set_new(root, "rrf_k", json_integer(60));
    json_object_set_new(root, "rrf_depth", json_integer(o->rrf_depth));
    json_object_set_new(
        root, "protocol",
        json_string(
            "sweep: the query's own definition of the expected tool + its own other candidates + "
            "seeded distractors from the pool (first definition of each name over live_multiple and "
            "multiple), shuffled; pooled: each set against all its distinct names; R@k counts a hit "
            "when any ground-truth name is in the top k"));
    printf("%-8s %-14s %-11s %6s  %-22s  %-22s\n", "embedder", "set", "tools", "n", "R@1 [95% CI]",
           "R@5 [95% CI]");
    static double r1[3][2][16], r1e[3][2][16], r5[3][2][16], r5e[3][2][16];
    rc = NX_STATUS_OK;
    for (int e = 0; e < o->n_emb && rc == NX_STATUS_OK; e++) {
        enum rt_mode mode = (enum rt_mode)rt_mode_parse(o->embedders[e]);
        c.emb = NULL;
        if (mode != RT_MODE_BM25) {
            if (!o->embed_model) {
                fprintf(stderr, "nexus eval-routing: --embedder %s needs --embed-model PATH\n",
                        o->embedders[e]);
                rc = NX_STATUS_INVALID_ARG;
                break;
            }
            if ((rc = rt_embedder_open(o->embed_model, &c.emb, err, sizeof err)) != NX_STATUS_OK) {
                fprintf(stderr, "nexus eval-routing: %s\n", err);
                break;
            }
            nx_free(c.dvec);
            nx_free(c.dhave);
            nx_free(c.qvec);
            nx_free(c.qhave);
            c.dvec = nx_malloc(sizeof(float) * (size_t)c.emb->dim * (size_t)c.store.n);
            c.dhave = nx_calloc((size_t)c.store.n, 1);
            c.qvec = nx_malloc(sizeof(float) * (size_t)c.emb->dim * (size_t)c.nq);
            c.qhave = nx_calloc((size_t)c.nq, 1);
            if (!c.dvec || !c.dhave || !c.qvec || !c.qhave) {
                fprintf(stderr, "nexus eval-routing: out of memory\n");
                rt_embedder_free(c.emb);
                c.emb = NULL;
                rc = NX_STATUS_NOMEM;
                break;
            }
        }
        rc = eval_bfcl_embedder(&c, o, mode, embs, r1[e], r1e[e], r5[e], r5e[e]);
        rt_embedder_free(c.emb);
        c.emb = NULL;
    }
    json_object_set_new(root, "embedders", embs);
    if (rc == NX_STATUS_OK && o->json_path) rc = save_json(o->json_path, root);
    if (rc == NX_STATUS_OK && o->svg_path) {
        double xs[16];
        for (int i = 0; i < o->n_sizes; i++) xs[i] = o->sizes[i];
        struct svg_series s[4][3];
        struct svg_panel panels[4];
        for (int set = 0; set < 2; set++) {
            for (int e = 0; e < o->n_emb; e++) {
                s[set * 2][e] =
                    (struct svg_series){o->embedders[e], xs, r1[e][set], r1e[e][set], o->n_sizes};
                s[set * 2 + 1][e] =
                    (struct svg_series){o->embedders[e], xs, r5[e][set], r5e[e][set], o->n_sizes};
            }
        }
        static char titles[4][64];
        for (int set = 0; set < 2; set++) {
            snprintf(titles[set * 2], 64, "%s: R@1", k_sets[set]);
            snprintf(titles[set * 2 + 1], 64, "%s: R@5", k_sets[set]);
            panels[set * 2] = (struct svg_panel){
                titles[set * 2], "tools in the registry (N)", "accuracy", true, false, s[set * 2],
                o->n_emb};
            panels[set * 2 + 1] = (struct svg_panel){titles[set * 2 + 1],
                                                     "tools in the registry (N)",
                                                     "accuracy",
                                                     true,
                                                     false,
                                                     s[set * 2 + 1],
                                                     o->n_emb};
        }
        char title[600];
        const char *em = o->embed_model ? strrchr(o->embed_model, '/') : NULL;
        em = em && em[1] ? em + 1 : o->embed_model;
        snprintf(
            title, sizeof title,
            "Tool routing on BFCL v4: accuracy vs registry size (real distractors, seed %llu; bars: Wilson 95%%)%s%.200s",
            (unsigned long long)o->seed, em ? "; embedder " : "", em ? em : "");
        if ((rc = svg_save(o->svg_path, title, panels, 4, err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
        } else {
            fprintf(stderr, "eval-routing: wrote %s\n", o->svg_path);
        }
    }
    json_decref(root);
done:
    json_decref(exp_names);
    ectx_free(&c);
    return rc;
}

/* --tools FILE... --queries Q.jsonl */
static nx_status eval_custom(const struct routing_eval_params *o) {
    rt_registry reg;
    char err[1200];
    nx_status rc = rt_registry_build(&reg, o->tools, o->n_tools, NULL, err, sizeof err);
    if (rc != NX_STATUS_OK) {
        fprintf(stderr, "nexus eval-routing: %s\n", err);
        rt_registry_free(&reg);
        return rc;
    }
    size_t len;
    char *text = nx_read_file(o->queries, NX_READ_FILE_MAX, &len, err, sizeof err);
    if (!text) {
        fprintf(stderr, "nexus eval-routing: %s\n", err);
        rt_registry_free(&reg);
        return NX_STATUS_IO;
    }
    enum rt_mode mode = (enum rt_mode)rt_mode_parse(o->embedders[0]);
    struct rt_router_params p = rt_router_default_params();
    p.mode = mode;
    p.k = RT_SLB_KMAX;
    p.rrf_depth = o->rrf_depth;
    rt_embedder *emb = NULL;
    rt_router *rt = NULL;
    json_t *root = json_object(), *wrong = json_array();
    int n = 0, c1 = 0, c3 = 0, c5 = 0, line = 0;
    if (mode != RT_MODE_BM25) {
        if (!o->embed_model) {
            fprintf(stderr, "nexus eval-routing: --embedder %s needs --embed-model PATH\n",
                    o->embedders[0]);
            rc = NX_STATUS_INVALID_ARG;
            goto done;
        }
        if ((rc = rt_embedder_open(o->embed_model, &emb, err, sizeof err)) != NX_STATUS_OK) {
            fprintf(stderr, "nexus eval-routing: %s\n", err);
            goto done;
        }
        p.embedder = emb;
    }
    rt = rt_router_new(&reg, NULL, 0, &p, NULL, err, sizeof err);
    if (!rt) {
        fprintf(stderr, "nexus eval-routing: %s\n", err);
        rc = strstr(err, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG;
        goto done;
    }
    for (char *s = text; *s;) {
        char *nl = strchr(s, '\n');
        size_t ll = nl ? (size_t)(nl - s) : strlen(s);
        line++;
        size_t k = 0;
        while (k < ll && (s[k] == ' ' || s[k] == '\t' || s[k] == '\r')) k++;
        if (k < ll) {
            json_error_t je;
            json_t *v = json_loadb(s, ll, 0, &je);
            json_t *qv = v ? json_object_get(v, "query") : NULL,
                   *tv = v ? json_object_get(v, "tool") : NULL;
            if (!v || !json_is_string(qv) || !json_is_string(tv)) {
                fprintf(stderr, "nexus eval-routing: %s:%d: %s\n", o->queries, line,
                        v ? "expected {\"query\": \"...\", \"tool\": \"name\"}" : je.text);
                json_decref(v);
                rc = NX_STATUS_FORMAT;
                goto done;
            }
            int want = rt_registry_find(&reg, json_string_value(tv));
            if (want < 0) {
                fprintf(stderr, "nexus eval-routing: %s:%d: tool '%s' is not in the registry\n",
                        o->queries, line, json_string_value(tv));
                json_decref(v);
                rc = NX_STATUS_INVALID_ARG;
                goto done;
            }
            struct rt_route r;
            if ((rc = rt_router_route(rt, json_string_value(qv), NULL, &r, err, sizeof err)) !=
                NX_STATUS_OK) {
                fprintf(stderr, "nexus eval-routing: %s:%d: %s\n", o->queries, line, err);
                json_decref(v);
                goto done;
            }
            int rank = 0;
            for (int i = 0; i < r.n && !rank; i++)
                if (r.hit[i].id == want) rank = i + 1;
            n++;
            c1 += rank == 1;
            c3 += rank >= 1 && rank <= 3;
            c5 += rank >= 1 && rank <= 5;
            if (rank != 1)
                json_array_append_new(wrong, json_pack("{s:i,s:s,s:s,s:s,s:o}", "line", line,
                                                       "query", json_string_value(qv), "expected",
                                                       reg.tools[want].name, "got",
                                                       reg.tools[r.hit[0].id].name, "expected_rank",
                                                       rank ? json_integer(rank) : json_null()));
            json_decref(v);
        }
        if (!nl) break;
        s = nl + 1;
    }
    if (n == 0) {
        fprintf(stderr, "nexus eval-routing: %s: no queries\n", o->queries);
        rc = NX_STATUS_FORMAT;
        goto done;
    }
    struct cell cl = {0, reg.n, n, c1, c3, c5};
    printf("%-8s %-14s %-11s %6s  %-22s  %-22s\n", "embedder", "set", "tools", "n", "R@1 [95% CI]",
           "R@5 [95% CI]");
    print_cell(rt_mode_name(mode), "queries", &cl, NULL);
    json_t *cj = cell_json(&cl, o->queries);
    json_object_update(root, cj);
    json_decref(cj);
    json_object_set_new(root, "embedder", json_string(rt_mode_name(mode)));
    json_object_set_new(root, "embed_model", emb ? json_string(o->embed_model) : json_null());
    json_object_set_new(root, "wrong", wrong);
    wrong = NULL;
    rc = o->json_path ? save_json(o->json_path, root) : NX_STATUS_OK;
done:
    json_decref(wrong);
    json_decref(root);
    rt_router_free(rt);
    rt_embedder_free(emb);
    nx_free(text);
    rt_registry_free(&reg);
    return rc;
}

nx_status eval_routing_run(const struct routing_eval_params *p) {
    for (int e = 0; e < p->n_emb; e++)
        if (rt_mode_parse(p->embedders[e]) < 0) {
            fprintf(stderr, "nexus eval-routing: unknown embedder '%s' (bm25, dense, hybrid)\n",
                    p->embedders[e]);
            return NX_STATUS_INVALID_ARG;
        }
    if (p->n_emb < 1 || p->n_sizes < 1 || !(p->gate_pct >= 0 && p->gate_pct <= 100)) {
        fprintf(stderr, "nexus eval-routing: need an embedder, a size, and gate_pct in [0, 100]\n");
        return NX_STATUS_INVALID_ARG;
    }
    if (p->n_tools || p->queries) {
        if (!p->n_tools || !p->queries || p->n_emb != 1) {
            fprintf(stderr, "nexus eval-routing: --tools and --queries go together, with one "
                            "embedder\n");
            return NX_STATUS_INVALID_ARG;
        }
        return eval_custom(p);
    }
    return eval_bfcl(p);
}
