/*
 * turn.h - the agent turn driver for a single conversation (`nexus agent`): route -> top-k
 * signatures in the main prompt -> the model picks a tool name (or answers) -> the arguments
 * in the sidecar (agent/sidecar.h) -> MCP tools/call (agent/exec.h) -> the call and the
 * result's bounded surrogate enter the main session -> repeat until the model answers or the
 * step limit; a JSON trace of every step. This header is its specification.
 *
 * One step:
 *   1. route the task (ag_toolset_route; the query is the task text at every step). An
 *      abstaining router ends the turn with an answer.
 *   2. the main prompt is rendered with the chat template: a system message listing the top-k
 *      signatures (never a schema) and how to call, the user's task, and every earlier call
 *      (an assistant message with tool_calls) and result (a tool message holding the surrogate).
 *      The rendered tokens reuse the main session's longest common prefix (the rest is
 *      decoded; nothing is decoded twice).
 *   3. the model continues under a grammar of a call of one of the top-k tools, in the
 *      template's own call form (chat_template_call_form of its family), up to where the
 *      arguments begin (srv_pick_build, server/constrain.h: the server's code; Hermes's
 *      <tool_call>\n{"name":"N","arguments": for templates without calls): tool_choice "auto"
 *      leaves the text free until the form's opening (lazy), and text without it is the
 *      answer; "required" puts the opening in the prompt, so a tool is always chosen. The
 *      system message shows the form (srv_call_head of "TOOL").
 *   4. the arguments come from the sidecar (in the same form when it was made with the
 *      template, ag_sidecar_params.tmpl, as ag_agent_run does), whose window is the turn so far as text ("User:
 *      TASK", then "Call: NAME ARGS" / "Result: SURROGATE" per step), pruned to the sidecar's
 *      window_tokens.
 *   5. the call is executed; its surrogate (never the full payload) enters the next prompt.
 * At the step limit one more generation without the grammar gives the answer (answer_tokens).
 *
 * Trace (the JSON object ag_turn_run returns): {"task", "tool_choice", "call_family",
 * "call_form" (the opening of the form, chat/callshape.h; absent for the forms constrain.c
 * writes itself: hermes JSON, llama3, mistral, deepseek), "steps": [{"step",
 * "route": {"hits": [{"name", "score"}], "chosen", "margin", "gate", "abstain", "ms"},
 * "prompt_tokens", "prefilled_tokens", "decide_ms", "call": {"name", "arguments", "text" (the
 * sidecar's generated text in the call form),
 * "json_object", "schema_valid" (agent/argcheck.h), "grammar_complete", "grammar_fallback"}, "sidecar": {"block_tokens",
 * "window_tokens", "prefix_tokens", "generated_tokens", "compiled_now", "ttfa_ms",
 * "total_ms"}, "result": {"is_error", "status", "bytes", "surrogate_bytes", "id", "ms",
 * "surrogate"}}], "answer", "stop": "answered" | "step_limit" | "abstained", "main_tokens"}.
 * Errors: the decode's, the template's, NOMEM (a failing tool is a result, not an error).
 */
#ifndef NX_AGENT_TURN_H
#define NX_AGENT_TURN_H

#include <jansson.h>

#include "agent/exec.h"
#include "agent/sidecar.h"
#include "agent/toolset.h"
#include "nexus.h"

enum ag_tool_choice { AG_TOOL_AUTO = 0, AG_TOOL_REQUIRED = 1 };

struct ag_turn_params {
    int steps;                 /* tool calls at most (0: 4) */
    enum ag_tool_choice choice;
    int32_t answer_tokens;     /* tokens of the answer (0: 64) */
    int32_t decide_tokens;     /* tokens of the choice, free text before the trigger included
                                  (0: 128) */
};

/*
 * Runs one turn of task on ctx (a context of m with n_seq_max >= 2; sequence 0 is the main
 * session, reset first). tmpl: the chat template. *trace_out: the trace (json_decref).
 * Errors: message in err.
 */
nx_status ag_turn_run(const nx_model *m, nx_ctx *ctx, const nx_chat_template *tmpl,
                      ag_toolset *ts, ag_exec *ex, ag_sidecar *sc, const char *task,
                      const struct ag_turn_params *p, json_t **trace_out, char *err,
                      size_t errlen);

#endif
