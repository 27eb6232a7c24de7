/*
 * toolset.h - the tools an agent may call: a registry (tool files and/or the servers of an MCP
 * config) with its router, and per query the top-k chosen tools with their compressed
 * signatures (route/signature.h, ~19 tokens each) and full input schemas. This header is its
 * specification.
 *
 * DESIGN
 * - Building: rt_registry_build (files, then the tools of every server of the MCP config, each
 *   tagged with its server's name in rt_tool.source), sorted by name; then an rt_router over
 *   all of it with the caller's router parameters (BM25 by default; dense / hybrid with an
 *   embedder, margin gate, reranker, abstention: route/router.h). The signature of every tool is
 *   computed once at build time (signatures do not depend on the query).
 * - Routing: ag_toolset_route gives the router's first-stage top-k (or the reranked order when
 *   the gate fired and a reranker ran), each with its score, plus the margin, gate and abstain
 *   flags as the router reports them. The chosen tool is the router's `chosen`.
 * - The prompt text of the choice (ag_toolset_prompt): one signature per line, in the routed
 *   order, so only the top-k signatures ever enter a prompt.
 * Ownership: the toolset owns its registry, router and signatures; the embedder and reranker in
 * the params are borrowed. One query at a time per toolset (the router's rule).
 * Errors: nx_status plus a one-line message in err.
 */
#ifndef NX_AGENT_TOOLSET_H
#define NX_AGENT_TOOLSET_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "nexus.h"
#include "route/registry.h"
#include "route/router.h"

typedef struct ag_toolset ag_toolset;

/*
 * Builds the registry from files[0..n_files) and the MCP config (may be NULL) and indexes it
 * with rp (NULL: rt_router_default_params(), BM25, k = 5). Errors: rt_registry_build's (a file
 * or server that fails is named; NOT_FOUND when no tool was loaded), the router's, NOMEM.
 */
nx_status ag_toolset_open(const char *const *files, int n_files, const char *mcp_config,
                          const struct rt_router_params *rp, ag_toolset **out, char *err,
                          size_t errlen);
void ag_toolset_free(ag_toolset *ts);

/* The registry (sorted by name; borrowed). */
const rt_registry *ag_toolset_registry(const ag_toolset *ts);
/* Tool i's signature, e.g. `write_file(path: string, content: string)` (borrowed). */
const char *ag_toolset_signature(const ag_toolset *ts, int i);

/* The routed top-k of one query. */
struct ag_choice {
    int n;                       /* tools chosen (<= RT_SLB_KMAX) */
    int tool[RT_SLB_KMAX];       /* registry indices, best first */
    float score[RT_SLB_KMAX];    /* their scores (the reranker's when it reordered them) */
    int chosen;                  /* the router's chosen tool (registry index), -1: none */
    float margin;                /* top-two margin of the first stage */
    bool gate, reranked, abstain, undecided;
    double seconds;              /* time spent routing */
};

/* Routes query. Errors: the router's (an embedder or reranker failure), NOMEM. */
nx_status ag_toolset_route(ag_toolset *ts, const char *query, struct ag_choice *out, char *err,
                           size_t errlen);

/* The choice's signatures, one per line ("- SIGNATURE\n"), as a new string (nx_free); NULL on
 * OOM. */
char *ag_toolset_prompt(const ag_toolset *ts, const struct ag_choice *c);

#endif
