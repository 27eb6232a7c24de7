/*
 * agent.h - `nexus agent` as one library call: load the model and its chat template, build the
 * tool set (agent/toolset.h) from the MCP config and/or tool files, open the executor
 * (agent/exec.h) and the sidecar (agent/sidecar.h) on one two-sequence context, run one turn
 * (agent/turn.h) and write its JSON trace atomically. This header is its specification.
 */
#ifndef NX_AGENT_AGENT_H
#define NX_AGENT_AGENT_H

#include <jansson.h>
#include <stddef.h>

#include "agent/turn.h"
#include "nexus.h"

struct ag_agent_params {
    const char *model;           /* GGUF path (required) */
    const char *mcp_config;      /* MCP config (required: the tools are executed there) */
    const char *task;            /* the user's request (required) */
    const char *tmpl;            /* chat template spec (nx_chat_template_open); NULL: the
                                    model's own, else "chatml" */
    const char *trace_path;      /* NULL: no file */
    int k;                       /* signatures in the prompt (0: 5) */
    int threads;                 /* 0: 2 */
    int32_t n_ctx;               /* 0: 4096 */
    int timeout_ms;              /* per MCP request (0: the config's) */
    size_t budget;               /* surrogate bytes (0: 1024) */
    struct ag_turn_params turn;
    struct ag_sidecar_params sidecar;
};

/* Runs the turn. *trace_out (json_decref) holds the trace, also written to trace_path.
 * Errors: every stage's, with a message naming it. */
nx_status ag_agent_run(const struct ag_agent_params *p, json_t **trace_out, char *err,
                       size_t errlen);

#endif
