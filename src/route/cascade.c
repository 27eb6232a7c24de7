/*
 * cascade.c - router, then constrained name decoding when the chat reranker is undecided (see
 * cascade.h), and the registry of files plus MCP servers.
 *
 * DESIGN
 * - The chat reranker is recognised by its name ("chat-relevance", chat_rerank.c); a
 *   cross-encoder's scores are on another scale and never trigger name decoding by themselves.
 * - Name decoding gets a fresh context with the default parameters for each query (the chat
 *   model's trained context); rt_namedec_decode resets it anyway.
 */
#include "route/cascade.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "mcp/mcp.h"
#include "route/namedec.h"

/* Adds the tools of an MCP config's servers (mcp_config_list_tools) with their server names. */
static nx_status add_mcp_tools(rt_registry *reg, const char *config, char *err, size_t errlen) {
    json_t *arr = NULL;
    nx_status mst = mcp_config_list_tools(config, 0, &arr, err, errlen);
    if (mst) return mst;
    size_t i;
    json_t *t;
    nx_status st = NX_STATUS_OK;
    json_array_foreach(arr, i, t) {
        json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description");
        json_t *server = json_object_get(t, "server");
        char sub[512];
        if (!json_is_string(name)) {
            snprintf(err, errlen, "%s: tool %zu has no name", config, i);
            st = NX_STATUS_FORMAT;
            break;
        }
        int rc = rt_registry_add(reg, json_string_value(name), json_is_string(desc) ? json_string_value(desc) : "",
                                 json_object_get(t, "inputSchema"), t,
                                 json_is_string(server) ? json_string_value(server) : "mcp", sub,
                                 sizeof sub);
        if (rc < 0) {
            snprintf(err, errlen, "%s: %s", config, sub);
            st = (nx_status)rc;
            break;
        }
    }
    json_decref(arr);
    return st;
}

nx_status rt_registry_build(rt_registry *reg, const char *const *files, int n_files,
                            const char *mcp_config_path, char *err, size_t errlen) {
    rt_registry_init(reg);
    for (int i = 0; i < n_files; i++) {
        int rc = rt_registry_load_file(reg, files[i], err, errlen);
        if (rc < 0) return (nx_status)rc;
    }
    if (mcp_config_path) {
        nx_status st = add_mcp_tools(reg, mcp_config_path, err, errlen);
        if (st) return st;
    }
    if (reg->n == 0) {
        snprintf(err, errlen, "no tools loaded");
        return NX_STATUS_NOT_FOUND;
    }
    rt_registry_sort(reg);
    return NX_STATUS_OK;
}

struct rt_cascade_params rt_cascade_default_params(void) {
    return (struct rt_cascade_params){.chat_tau = 0.05, .desc_max = 200};
}

/* Name decoding among the n candidates ids[]: *pick = the index into ids. */
static nx_status decode_name(const nx_model *chat, const rt_registry *reg, const int *ids, int n,
                             const char *query, size_t desc_max, int *pick, char *err,
                             size_t errlen) {
    const char *names[RT_SLB_KMAX], *descs[RT_SLB_KMAX];
    for (int i = 0; i < n; i++) {
        names[i] = reg->tools[ids[i]].name;
        descs[i] = reg->tools[ids[i]].description;
    }
    char *prompt = rt_namedec_prompt(query, names, descs, n, desc_max);
    if (!prompt) {
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    rt_namedec *nd = rt_namedec_build(chat, prompt, names, n, NULL, err, errlen);
    nx_free(prompt);
    if (!nd) return strstr(err, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG;
    struct nx_ctx_params cp = nx_ctx_default_params();
    nx_ctx *ctx = NULL;
    nx_status st = nx_ctx_init(chat, &cp, &ctx, err, errlen);
    if (st == NX_STATUS_OK && rt_namedec_decode(nd, ctx, pick, NULL, err, errlen) != 0)
        st = strstr(err, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG;
    nx_ctx_free(ctx);
    rt_namedec_free(nd);
    return st;
}

nx_status rt_cascade_route(rt_router *rt, const rt_registry *reg, const rt_reranker *rr,
                           const struct rt_cascade_params *p, const char *query,
                           struct rt_cascade_result *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    if (rt_router_route(rt, query, NULL, &out->route, err, errlen))
        return strstr(err, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG;
    const struct rt_route *r = &out->route;
    out->chosen = r->chosen;
    out->chat_undecided = r->reranked && rr && p->chat && !strcmp(rr->name, "chat-relevance") &&
                          r->n_rerank >= 2 && r->rerank[0].score - r->rerank[1].score < p->chat_tau;
    if (!p->chat || !(p->name_decode || out->chat_undecided)) return NX_STATUS_OK;
    int ids[RT_SLB_KMAX], n = r->reranked ? r->n_rerank : r->n;
    for (int i = 0; i < n; i++) ids[i] = r->reranked ? r->rerank[i].id : r->hit[i].id;
    int pick = -1;
    nx_status st = decode_name(p->chat, reg, ids, n, query, p->desc_max, &pick, err, errlen);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", errlen ? err : "");
        snprintf(err, errlen, "name decoding failed: %s", why);
        return st;
    }
    out->chosen = ids[pick];
    out->name_decoded = true;
    return NX_STATUS_OK;
}
