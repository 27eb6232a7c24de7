/*
 * tools.h - server-side tools for `nexus serve --mcp CONFIG`: the tools of the configured MCP
 * servers are offered to a chat request through the router, and the calls the model makes are
 * executed through the MCP client, their results fed back as bounded surrogates. This header
 * is its specification.
 *
 * DESIGN
 * - Opening builds an agent tool set (agent/toolset.h: the registry of every server's
 *   tools/list, a BM25 router over it, one ~19-token signature per tool) and an executor
 *   (agent/exec.h: a tool's server is started on its first call and kept open).
 * - A tool whose input schema the grammar compiler refuses (an unsupported keyword, named in
 *   the log at start) is never offered; the router's first k offerable tools are.
 * - srv_tools_offer routes a query (the conversation's last user message) to the top-k tools
 *   and gives them twice, as OpenAI "tools" arrays: `full` with each tool's whole input schema
 *   (the grammar constrains the arguments by it) and `shown` with the signature as the
 *   description and an empty parameters object (what the chat template puts in the prompt:
 *   no schema ever enters the context).
 * - srv_tools_call runs one call. Every outcome is a result, never an error status: a tool
 *   the router did not offer or the registry does not know, arguments that are not a JSON
 *   object, a tool error, a crashed, hung or broken server (closed, restarted on the next
 *   call) give a surrogate "error: ..." with is_error true. The surrogate of a large payload
 *   is its head and tail around a marker (agent/surrogate.h) within the budget.
 * - Thread safety: request threads call these concurrently; one mutex serializes routing and
 *   calls (the router and the MCP clients serve one caller at a time).
 * Errors: nx_status plus a one-line message.
 */
#ifndef NX_SERVER_TOOLS_H
#define NX_SERVER_TOOLS_H

#include <jansson.h>
#include <stddef.h>

#include "nexus.h"

struct srv_tools_params {
    const char *mcp_config; /* path of the MCP config (required) */
    int k;                  /* tools offered per request (0: 5) */
    int max_steps;          /* tool calls the server runs per request at most (0: 4) */
    size_t budget;          /* surrogate bytes (0: 1024) */
    int timeout_ms;         /* per MCP request (0: the config's) */
};

struct srv_tools;

/* Errors: the config's, a server that cannot list its tools (named), NOT_FOUND (no tools),
 * UNSUPPORTED (no tool's schema compiles), NOMEM. */
nx_status srv_tools_open(const struct srv_tools_params *p, struct srv_tools **out, char *err,
                         size_t errlen);
void srv_tools_free(struct srv_tools *T);
int srv_tools_max_steps(const struct srv_tools *T);
/* Tools known (every server's). */
int srv_tools_count(const struct srv_tools *T);

/*
 * The top-k tools for query: *full and *shown as described above (json_decref both), *route
 * = {"hits": [{"name", "score"}], "ms"} (json_decref). must (may be NULL): a tool that is
 * offered whatever the router says (a request's named tool_choice; it takes the last place
 * when the router did not choose it, with score 0). Errors: NOT_FOUND (no tool named must),
 * UNSUPPORTED (must is not offerable), the router's, NOMEM.
 */
nx_status srv_tools_offer(struct srv_tools *T, const char *query, const char *must,
                          json_t **full, json_t **shown, json_t **route, char *err,
                          size_t errlen);

/*
 * Runs tool `name` with `arguments` (JSON text). *surrogate (nx_free) is what enters the
 * conversation as the tool message; *step = {"name", "arguments", "schema_valid" (an
 * independent check of the arguments against the tool's schema, agent/argcheck.h),
 * "is_error", "status", "bytes", "surrogate_bytes", "id", "ms"} (json_decref). NOMEM only.
 */
nx_status srv_tools_call(struct srv_tools *T, const char *name, const char *arguments,
                         char **surrogate, json_t **step);

#endif
