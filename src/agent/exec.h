/*
 * exec.h - tool execution for an agent: a call (tool + arguments JSON) -> MCP tools/call on the
 * tool's server -> the result as a bounded surrogate (agent/surrogate.h), the full payload kept
 * in the executor's payload store. This header is its specification.
 *
 * DESIGN
 * - The executor borrows an MCP config; a tool's server is the config entry named by its
 *   rt_tool.source (as ag_toolset / rt_registry_build tag them), started on its first call and
 *   kept open for later calls (mcp_config_open), the request timeout timeout_ms.
 * - Every outcome of a call is a result, never a crash: the payload is the tool's text items
 *   joined by newlines (mcp_result_text; structuredContent as compact JSON when there is no
 *   text); isError: true, a JSON-RPC error, a server that cannot start, exits, breaks the
 *   protocol or times out give is_error = true with payload "error: <message>" (a broken
 *   server is closed and restarted on the next call; one found dead before a call, having
 *   exited while idle, is started again for that call). Arguments that are not a JSON object give
 *   an error result without contacting the server.
 * - The surrogate is ag_surrogate(payload, id, budget); the payload is kept under its id.
 * Errors of the functions themselves: NOMEM, INVALID_ARG (a tool with no server in the config)
 * reported as results too; only OOM makes ag_exec_call return an error status.
 */
#ifndef NX_AGENT_EXEC_H
#define NX_AGENT_EXEC_H

#include <stdbool.h>
#include <stddef.h>

#include "agent/surrogate.h"
#include "mcp/mcp.h"
#include "nexus.h"
#include "route/registry.h"

typedef struct ag_exec ag_exec;

struct ag_exec_params {
    int timeout_ms;      /* per request (0: the config's timeoutMs, else MCP_DEFAULT_TIMEOUT_MS) */
    size_t budget;       /* surrogate budget in bytes (0: 1024) */
};

/* cfg is borrowed and must outlive the executor. */
nx_status ag_exec_new(const mcp_config *cfg, const struct ag_exec_params *p, ag_exec **out,
                      char *err, size_t errlen);
/* Closes every server it started. */
void ag_exec_free(ag_exec *ex);

struct ag_exec_result {
    bool is_error;      /* the call failed (tool error, server error, bad arguments) */
    nx_status status;   /* what the MCP client said (OK, REMOTE, TIMEOUT, CLOSED, ...) */
    char *surrogate;    /* what enters the context (nx_free) */
    size_t surrogate_len;
    size_t payload_len; /* bytes of the full payload */
    int payload;        /* index in the store; id "result-<payload+1>" */
    char id[32];
    double seconds;     /* wall time of the call (server start included) */
};

/* Runs tool t with arguments (JSON text of an object). NOMEM only; *out holds the outcome.
 * Free out->surrogate with nx_free. */
nx_status ag_exec_call(ag_exec *ex, const struct rt_tool *t, const char *arguments,
                       struct ag_exec_result *out);

/* The executor's payload store (full results by id; borrowed). */
const ag_payloads *ag_exec_payloads(const ag_exec *ex);

#endif
