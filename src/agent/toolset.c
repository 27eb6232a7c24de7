/* toolset.c - registry + router + signatures of an agent's tools (toolset.h). */
#include "agent/toolset.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "route/cascade.h"
#include "route/signature.h"

struct ag_toolset {
    rt_registry reg;
    rt_router *rt;
    char **sig; /* reg.n signatures */
};

void ag_toolset_free(ag_toolset *ts) {
    if (!ts) return;
    rt_router_free(ts->rt);
    if (ts->sig)
        for (int i = 0; i < ts->reg.n; i++) nx_free(ts->sig[i]);
    nx_free(ts->sig);
    rt_registry_free(&ts->reg);
    nx_free(ts);
}

nx_status ag_toolset_open(const char *const *files, int n_files, const char *mcp_config,
                          const struct rt_router_params *rp, ag_toolset **out, char *err,
                          size_t errlen) {
    *out = NULL;
    ag_toolset *ts = nx_calloc(1, sizeof *ts);
    if (!ts) {
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    nx_status st = rt_registry_build(&ts->reg, files, n_files, mcp_config, err, errlen);
    if (st) {
        rt_registry_free(&ts->reg);
        nx_free(ts);
        return st;
    }
    ts->sig = nx_calloc((size_t)ts->reg.n, sizeof *ts->sig);
    for (int i = 0; ts->sig && i < ts->reg.n; i++) {
        ts->sig[i] = rt_signature(&ts->reg.tools[i]);
        if (!ts->sig[i]) break;
    }
    if (!ts->sig || !ts->sig[ts->reg.n - 1]) {
        ag_toolset_free(ts);
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    struct rt_router_params p = rp ? *rp : rt_router_default_params();
    ts->rt = rt_router_new(&ts->reg, NULL, 0, &p, NULL, err, errlen);
    if (!ts->rt) {
        ag_toolset_free(ts);
        return NX_STATUS_INVALID_ARG;
    }
    *out = ts;
    return NX_STATUS_OK;
}

const rt_registry *ag_toolset_registry(const ag_toolset *ts) { return &ts->reg; }

const char *ag_toolset_signature(const ag_toolset *ts, int i) {
    return i >= 0 && i < ts->reg.n ? ts->sig[i] : NULL;
}

nx_status ag_toolset_route(ag_toolset *ts, const char *query, struct ag_choice *out, char *err,
                           size_t errlen) {
    memset(out, 0, sizeof *out);
    out->chosen = -1;
    struct rt_route r;
    double t0 = nx_time_s();
    nx_status st = rt_router_route(ts->rt, query, NULL, &r, err, errlen);
    out->seconds = nx_time_s() - t0;
    if (st) return st;
    const struct rt_hit *h = r.reranked ? r.rerank : r.hit;
    out->n = r.reranked ? r.n_rerank : r.n;
    for (int i = 0; i < out->n; i++) {
        out->tool[i] = h[i].id;
        out->score[i] = h[i].score;
    }
    out->chosen = r.chosen;
    out->margin = r.margin;
    out->gate = r.gate;
    out->reranked = r.reranked;
    out->abstain = r.abstain;
    out->undecided = r.undecided;
    return NX_STATUS_OK;
}

char *ag_toolset_prompt(const ag_toolset *ts, const struct ag_choice *c) {
    size_t n = 1;
    for (int i = 0; i < c->n; i++) n += strlen(ts->sig[c->tool[i]]) + 3;
    char *s = nx_malloc(n), *p = s;
    if (!s) return NULL;
    *p = 0;
    for (int i = 0; i < c->n; i++) p += sprintf(p, "- %s\n", ts->sig[c->tool[i]]);
    return s;
}
