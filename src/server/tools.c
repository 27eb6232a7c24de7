/* tools.c - the MCP tools `nexus serve --mcp` offers and runs (see tools.h). */
#include "server/tools.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "agent/argcheck.h"
#include "agent/exec.h"
#include "agent/toolset.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/nx_base.h"
#include "mcp/mcp.h"
#include "server/constrain.h"

struct srv_tools {
    struct srv_tools_params p;
    mcp_config *cfg;
    ag_toolset *ts;
    ag_exec *ex;
    bool *offerable; /* per registry tool: its schema compiles to a grammar */
    pthread_mutex_t mu;
};

void srv_tools_free(struct srv_tools *T) {
    if (!T) return;
    ag_exec_free(T->ex);
    ag_toolset_free(T->ts);
    mcp_config_free(T->cfg);
    nx_free(T->offerable);
    pthread_mutex_destroy(&T->mu);
    nx_free(T);
}

/* A tool is offered only when the grammar compiler takes its input schema (it refuses an
   unsupported keyword by name rather than drop it); the others are named in the log. */
static nx_status check_schemas(struct srv_tools *T, char *err, size_t errlen) {
    const rt_registry *reg = ag_toolset_registry(T->ts);
    T->offerable = nx_calloc((size_t)reg->n, sizeof *T->offerable);
    if (!T->offerable) {
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    int n_ok = 0;
    for (int i = 0; i < reg->n; i++) {
        nx_grammar *g = NULL;
        char why[300] = "";
        nx_status st = srv_schema_grammar(reg->tools[i].schema, &g, why, sizeof why);
        nx_grammar_free(g);
        if (st == NX_STATUS_NOMEM) {
            snprintf(err, errlen, "out of memory");
            return st;
        }
        T->offerable[i] = st == NX_STATUS_OK;
        n_ok += T->offerable[i];
        if (st) NX_LOGW("--mcp: tool '%s' is not offered: %s", reg->tools[i].name, why);
    }
    if (!n_ok) {
        snprintf(err, errlen, "no tool of the MCP servers has a schema the grammar compiler "
                 "supports");
        return NX_STATUS_UNSUPPORTED;
    }
    return NX_STATUS_OK;
}

nx_status srv_tools_open(const struct srv_tools_params *p, struct srv_tools **out, char *err,
                         size_t errlen) {
    *out = NULL;
    if (!p->mcp_config) {
        snprintf(err, errlen, "--mcp: no config given");
        return NX_STATUS_INVALID_ARG;
    }
    struct srv_tools *T = nx_calloc(1, sizeof *T);
    if (!T) {
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    pthread_mutex_init(&T->mu, NULL);
    T->p = *p;
    if (T->p.k <= 0) T->p.k = 5;
    if (T->p.max_steps <= 0) T->p.max_steps = 4;
    char e2[400];
    nx_status st = mcp_config_load(p->mcp_config, &T->cfg, e2, sizeof e2);
    if (st) {
        snprintf(err, errlen, "--mcp %s: %s", p->mcp_config, e2);
        srv_tools_free(T);
        return st;
    }
    struct rt_router_params rp = rt_router_default_params();
    rp.k = RT_SLB_KMAX; /* the first k offerable ones are taken */
    st = ag_toolset_open(NULL, 0, p->mcp_config, &rp, &T->ts, e2, sizeof e2);
    if (!st) st = check_schemas(T, e2, sizeof e2);
    if (!st) {
        struct ag_exec_params ep = {.timeout_ms = p->timeout_ms, .budget = p->budget};
        st = ag_exec_new(T->cfg, &ep, &T->ex, e2, sizeof e2);
    }
    if (st) {
        snprintf(err, errlen, "--mcp %s: %s", p->mcp_config, e2);
        srv_tools_free(T);
        return st;
    }
    *out = T;
    return NX_STATUS_OK;
}

int srv_tools_max_steps(const struct srv_tools *T) { return T->p.max_steps; }

int srv_tools_count(const struct srv_tools *T) { return ag_toolset_registry(T->ts)->n; }

static json_t *tool_json(const char *name, const char *description, json_t *parameters) {
    return json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function", "name", name,
                     "description", description, "parameters", parameters);
}

nx_status srv_tools_offer(struct srv_tools *T, const char *query, const char *must,
                          json_t **full, json_t **shown, json_t **route, char *err,
                          size_t errlen) {
    *full = *shown = *route = NULL;
    struct ag_choice c;
    const rt_registry *reg = ag_toolset_registry(T->ts);
    int mi = must ? rt_registry_find(reg, must) : -1;
    if (must && mi < 0) {
        snprintf(err, errlen, "no tool named '%.200s' on this server", must);
        return NX_STATUS_NOT_FOUND;
    }
    pthread_mutex_lock(&T->mu);
    nx_status st = ag_toolset_route(T->ts, query, &c, err, errlen);
    pthread_mutex_unlock(&T->mu);
    if (st) return st;
    int kept = 0; /* the first k offerable hits */
    for (int i = 0; i < c.n && kept < T->p.k; i++)
        if (T->offerable[c.tool[i]]) {
            c.tool[kept] = c.tool[i];
            c.score[kept++] = c.score[i];
        }
    c.n = kept;
    if (mi >= 0 && !T->offerable[mi]) {
        snprintf(err, errlen, "tool '%.200s' is not offered: the grammar compiler refuses its "
                 "schema (see the server's log)", must);
        return NX_STATUS_UNSUPPORTED;
    }
    bool have = mi < 0;
    for (int i = 0; i < c.n && !have; i++) have = c.tool[i] == mi;
    if (!have) { /* the named tool takes the last place */
        if (c.n == T->p.k) c.n--;
        c.tool[c.n] = mi;
        c.score[c.n++] = 0;
    }
    json_t *f = json_array(), *s = json_array(), *hits = json_array();
    bool ok = f && s && hits;
    for (int i = 0; ok && i < c.n; i++) {
        const struct rt_tool *t = &reg->tools[c.tool[i]];
        ok = !json_array_append_new(f, tool_json(t->name, t->description,
                                                 json_deep_copy(t->schema))) &&
             !json_array_append_new(s, tool_json(t->name, ag_toolset_signature(T->ts, c.tool[i]),
                                                 json_pack("{s:s, s:{}}", "type", "object",
                                                           "properties"))) &&
             !json_array_append_new(hits, json_pack("{s:s, s:f}", "name", t->name, "score",
                                                    (double)c.score[i]));
    }
    json_t *r = ok ? json_pack("{s:o, s:f}", "hits", hits, "ms", c.seconds * 1e3) : NULL;
    if (!r) {
        json_decref(f);
        json_decref(s);
        if (!ok) json_decref(hits);
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    *full = f;
    *shown = s;
    *route = r;
    return NX_STATUS_OK;
}

nx_status srv_tools_call(struct srv_tools *T, const char *name, const char *arguments,
                         char **surrogate, json_t **step) {
    *surrogate = NULL;
    *step = NULL;
    const rt_registry *reg = ag_toolset_registry(T->ts);
    int ti = name ? rt_registry_find(reg, name) : -1;
    const struct rt_tool *t = ti >= 0 ? &reg->tools[ti] : NULL;
    struct ag_exec_result r = {0};
    if (!t) {
        char msg[300];
        snprintf(msg, sizeof msg, "error: no tool named '%.200s' on this server",
                 name ? name : "");
        r.is_error = true;
        r.status = NX_STATUS_NOT_FOUND;
        r.surrogate = nx_strdup(msg);
        r.surrogate_len = r.surrogate ? strlen(r.surrogate) : 0;
        r.payload = -1;
        if (!r.surrogate) return NX_STATUS_NOMEM;
    } else {
        pthread_mutex_lock(&T->mu);
        nx_status st = ag_exec_call(T->ex, t, arguments, &r);
        pthread_mutex_unlock(&T->mu);
        if (st) return st;
    }
    bool valid = t && arguments && ag_args_check(t->schema, arguments, NULL, 0);
    json_t *j = json_pack("{s:s, s:s, s:b, s:b, s:s, s:I, s:I, s:s, s:f}", "name",
                          name ? name : "", "arguments", arguments ? arguments : "",
                          "schema_valid", valid, "is_error", r.is_error, "status",
                          nx_status_str(r.status), "bytes", (json_int_t)r.payload_len,
                          "surrogate_bytes", (json_int_t)r.surrogate_len, "id", r.id, "ms",
                          r.seconds * 1e3);
    if (!j) {
        nx_free(r.surrogate);
        return NX_STATUS_NOMEM;
    }
    *surrogate = r.surrogate;
    *step = j;
    return NX_STATUS_OK;
}
