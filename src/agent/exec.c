/* exec.c - tool calls through MCP with bounded surrogates (exec.h). */
#include "agent/exec.h"

#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"
#include "core/nx_base.h"

struct ag_exec {
    const mcp_config *cfg;
    struct ag_exec_params p;
    mcp_client **cl; /* one per config server, NULL until started */
    ag_payloads *store;
};

nx_status ag_exec_new(const mcp_config *cfg, const struct ag_exec_params *p, ag_exec **out,
                      char *err, size_t errlen) {
    *out = NULL;
    ag_exec *ex = nx_calloc(1, sizeof *ex);
    size_t n = cfg ? mcp_config_count(cfg) : 0;
    if (ex) ex->cl = nx_calloc(n ? n : 1, sizeof *ex->cl);
    if (ex) ex->store = ag_payloads_new();
    if (!ex || !ex->cl || !ex->store) {
        ag_exec_free(ex);
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    ex->cfg = cfg;
    if (p) ex->p = *p;
    if (!ex->p.budget) ex->p.budget = 1024;
    *out = ex;
    return NX_STATUS_OK;
}

void ag_exec_free(ag_exec *ex) {
    if (!ex) return;
    size_t n = ex->cfg ? mcp_config_count(ex->cfg) : 0;
    for (size_t i = 0; ex->cl && i < n; i++) mcp_close(ex->cl[i]);
    nx_free(ex->cl);
    ag_payloads_free(ex->store);
    nx_free(ex);
}

const ag_payloads *ag_exec_payloads(const ag_exec *ex) { return ex->store; }

/* The payload text of a result: its text items, else structuredContent, else "". */
static char *result_payload(const json_t *r) {
    char *text = mcp_result_text(r);
    if (text && !*text && mcp_result_structured(r)) {
        nx_free(text);
        text = nx_json_dumps(mcp_result_structured(r), JSON_COMPACT);
    }
    return text;
}

/* Calls the tool; *payload is a new string; returns whether the call failed. */
static bool do_call(ag_exec *ex, const struct rt_tool *t, const char *arguments, char **payload,
                    nx_status *status) {
    char err[1024];
    *status = NX_STATUS_OK;
    json_error_t je;
    bool oom = false;
    json_t *args = nx_json_loads(arguments, 0, &je, &oom);
    if (!args || !json_is_object(args)) {
        json_decref(args);
        snprintf(err, sizeof err, "error: the arguments are not a JSON object%s%s",
                 args ? "" : ": ", args ? "" : je.text);
        *status = NX_STATUS_INVALID_ARG;
        *payload = nx_strdup(err);
        return true;
    }
    size_t n = ex->cfg ? mcp_config_count(ex->cfg) : 0, i = 0;
    while (i < n && strcmp(mcp_config_name(ex->cfg, i), t->source)) i++;
    if (i == n) {
        json_decref(args);
        snprintf(err, sizeof err, "error: tool '%s' comes from '%s', which is no server of the MCP config",
                 t->name, t->source);
        *status = NX_STATUS_INVALID_ARG;
        *payload = nx_strdup(err);
        return true;
    }
    nx_status st = NX_STATUS_OK;
    if (ex->cl[i] && mcp_poll(ex->cl[i], 0, err, sizeof err) != NX_STATUS_OK) {
        /* the server died (or broke) while idle: start it again rather than fail this call */
        mcp_close(ex->cl[i]);
        ex->cl[i] = NULL;
    }
    if (!ex->cl[i]) st = mcp_config_open(ex->cfg, i, ex->p.timeout_ms, &ex->cl[i], err, sizeof err);
    json_t *r = NULL;
    if (!st) st = mcp_call_tool(ex->cl[i], t->call_name, args, &r, err, sizeof err);
    json_decref(args);
    *status = st;
    if (st == NX_STATUS_OK || (st == NX_STATUS_REMOTE && r)) {
        *payload = result_payload(r);
        json_decref(r);
        return st != NX_STATUS_OK;
    }
    json_decref(r);
    if (st != NX_STATUS_REMOTE) { /* the server broke: restart it on the next call */
        mcp_close(ex->cl[i]);
        ex->cl[i] = NULL;
    }
    char msg[1100];
    snprintf(msg, sizeof msg, "error: %s", err);
    *payload = nx_strdup(msg);
    return true;
}

nx_status ag_exec_call(ag_exec *ex, const struct rt_tool *t, const char *arguments,
                       struct ag_exec_result *out) {
    memset(out, 0, sizeof *out);
    out->payload = -1;
    double t0 = nx_time_s();
    char *payload = NULL;
    out->is_error = do_call(ex, t, arguments, &payload, &out->status);
    out->seconds = nx_time_s() - t0;
    if (!payload) return NX_STATUS_NOMEM;
    out->payload_len = strlen(payload);
    out->payload = ag_payload_put(ex->store, payload, out->payload_len);
    if (out->payload < 0) {
        nx_free(payload);
        return NX_STATUS_NOMEM;
    }
    ag_payload_id(out->payload, out->id, sizeof out->id);
    out->surrogate = ag_surrogate(payload, out->payload_len, out->id, ex->p.budget,
                                  &out->surrogate_len);
    nx_free(payload);
    return out->surrogate ? NX_STATUS_OK : NX_STATUS_NOMEM;
}
