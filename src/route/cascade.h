/*
 * cascade.h - the whole routing decision for one query, as `nexus route` makes it: the router
 * (BM25 / dense / hybrid, the margin gate, the reranker when the gate fires), then constrained
 * name decoding by a chat model among the candidates (the reranked top when a reranker ran,
 * else the first-stage top) when the chat reranker could not separate its top two
 * (top-two gap < chat_tau) or always (name_decode). The name-decoding prompt is
 * rt_namedec_prompt's (names and descriptions). Also the registry of a routing session: tool
 * files plus the tools of an MCP config's servers.
 *
 * Ownership: everything is borrowed; the result holds no pointers. Errors: nx_status plus a
 * message in err (errlen bytes); on failure *out says nothing.
 */
#ifndef NX_ROUTE_CASCADE_H
#define NX_ROUTE_CASCADE_H

#include <stdbool.h>
#include <stddef.h>

#include "nexus.h"
#include "route/registry.h"
#include "route/router.h"

/*
 * Initializes reg, loads every file (rt_registry_load_file), then the tools of the servers of
 * the MCP config at mcp_config_path (may be NULL; each tool tagged with its server's name), and sorts.
 * NX_STATUS_NOT_FOUND when no tool was loaded; a file's or server's error otherwise (the
 * message names it). reg is always left initialized: free it with rt_registry_free.
 */
nx_status rt_registry_build(rt_registry *reg, const char *const *files, int n_files,
                            const char *mcp_config_path, char *err, size_t errlen);

struct rt_cascade_params {
    const nx_model *chat;    /* chat model for name decoding; NULL: the router's answer stands */
    bool name_decode;        /* with chat: decode the name whatever the reranker said */
    double chat_tau;         /* the chat reranker is undecided below this top-two gap (0.05) */
    size_t desc_max;         /* description bytes per candidate in the prompt (200; 0: all) */
};
struct rt_cascade_params rt_cascade_default_params(void);

struct rt_cascade_result {
    struct rt_route route;   /* the router's answer */
    int chosen;              /* the final tool (registry index) */
    bool name_decoded;       /* name decoding ran and chose `chosen` */
    bool chat_undecided;     /* it ran because the chat reranker was undecided */
};

/*
 * Routes query with rt (a router over reg built with reranker rr, which may be NULL) and, per
 * p, decodes the name with p->chat. Errors: the router's, name decoding's (a context for the
 * chat model cannot be made, the prompt does not fit; the message then starts "name decoding
 * failed: "), NX_STATUS_NOMEM.
 */
nx_status rt_cascade_route(rt_router *rt, const rt_registry *reg, const rt_reranker *rr,
                           const struct rt_cascade_params *p, const char *query,
                           struct rt_cascade_result *out, char *err, size_t errlen);

#endif
