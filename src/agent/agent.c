/* agent.c - one `nexus agent` turn from paths and flags (agent.h). */
#include "agent/agent.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"
#include "eval/outfile.h"

static nx_status write_trace(const json_t *trace, const char *path, char *err, size_t errlen) {
    struct nx_outfile o;
    nx_status st = nx_outfile_open(&o, path, err, errlen);
    if (st) return st;
    char *s = nx_json_dumps(trace, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    if (!s) {
        nx_outfile_abort(&o);
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    fputs(s, o.f);
    fputc('\n', o.f);
    nx_free(s);
    return nx_outfile_commit(&o, err, errlen);
}

nx_status ag_agent_run(const struct ag_agent_params *p, json_t **trace_out, char *err,
                       size_t errlen) {
    *trace_out = NULL;
    nx_model *m = NULL;
    nx_chat_template *tmpl = NULL;
    ag_toolset *ts = NULL;
    mcp_config *cfg = NULL;
    ag_exec *ex = NULL;
    ag_sidecar *sc = NULL;
    nx_ctx *ctx = NULL;
    char e2[512];
    nx_status st = nx_model_load(p->model, NULL, &m, e2, sizeof e2);
    if (st) snprintf(err, errlen, "model: %s", e2);
    if (!st) {
        st = p->tmpl ? nx_chat_template_open(p->tmpl, &tmpl, e2, sizeof e2)
                     : nx_chat_template_from_model(m, &tmpl, e2, sizeof e2);
        if (st == NX_STATUS_NOT_FOUND && !p->tmpl) st = nx_chat_template_open("chatml", &tmpl, e2, sizeof e2);
        if (st) snprintf(err, errlen, "chat template: %s", e2);
    }
    if (!st) {
        struct rt_router_params rp = rt_router_default_params();
        if (p->k > 0) rp.k = p->k;
        st = ag_toolset_open(NULL, 0, p->mcp_config, &rp, &ts, err, errlen);
    }
    if (!st) st = mcp_config_load(p->mcp_config, &cfg, err, errlen);
    if (!st) {
        struct ag_exec_params ep = {.timeout_ms = p->timeout_ms, .budget = p->budget};
        st = ag_exec_new(cfg, &ep, &ex, err, errlen);
    }
    if (!st) { /* the arguments in the template's own call form */
        struct ag_sidecar_params sp = p->sidecar;
        sp.tmpl = tmpl;
        st = ag_sidecar_new(m, ag_toolset_registry(ts), &sp, &sc, err, errlen);
    }
    if (!st) {
        struct nx_ctx_params cp = nx_ctx_default_params();
        cp.n_ctx = p->n_ctx > 0 ? p->n_ctx : 4096;
        cp.n_seq_max = 2;
        cp.n_threads = cp.n_threads_batch = p->threads > 0 ? p->threads : 2;
        st = nx_ctx_init(m, &cp, &ctx, e2, sizeof e2);
        if (st) snprintf(err, errlen, "context: %s", e2);
    }
    json_t *trace = NULL;
    if (!st) st = ag_turn_run(m, ctx, tmpl, ts, ex, sc, p->task, &p->turn, &trace, err, errlen);
    if (!st) {
        json_object_set_new(trace, "model", json_string(p->model));
        json_object_set_new(trace, "mcp_config", json_string(p->mcp_config));
        if (p->trace_path) st = write_trace(trace, p->trace_path, err, errlen);
    }
    if (!st) *trace_out = trace;
    else json_decref(trace);
    nx_ctx_free(ctx);
    ag_sidecar_free(sc);
    ag_exec_free(ex);
    mcp_config_free(cfg);
    ag_toolset_free(ts);
    nx_chat_template_free(tmpl);
    nx_model_free(m);
    return st;
}
