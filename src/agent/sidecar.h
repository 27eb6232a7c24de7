/*
 * sidecar.h - the paper's execution sidecar: the arguments of a chosen tool generated in a
 * second sequence of the main session's context, so the main session never holds schemas
 * and never pays an off-anchor splice. This header is its specification.
 *
 * One argument generation (ag_sidecar_args), on a context with n_seq_max >= 2:
 *   1. park the main session: its sequence 0 is shared into sequence `park` (nx_kv_seq_cp
 *      into an empty sequence shares blocks by reference count: no row is copied) and sequence
 *      0 is emptied (the splice and generation APIs act on sequence 0);
 *   2. the sidecar sequence starts at position 0 with the chosen tool's compiled KV block
 *      spliced at its own anchor m0 = 0 (delta 0: the rows are copied bit for bit, so the splice
 *      is output-exact; no repair). The block is the text
 *          BOS "Tool: NAME\nDescription: DESCRIPTION\nParameters: SCHEMA_JSON\n"
 *      compiled once per tool on its first use (nx_kv_block_compile, which leaves it in
 *      sequence 0, so the first use needs no splice) and kept by the sidecar;
 *   3. then the pruned window: the last window_tokens tokens of the caller's recent turns
 *      (verbatim text, cut on a token boundary from the front), "\nCall: " and the forced call
 *      up to its arguments in the template's own form (params.tmpl: srv_call_head of its
 *      family and chat_template_call_form; without a template Hermes's
 *      <tool_call>\n{"name":"NAME","arguments":);
 *   4. the arguments are generated greedily under the grammar of a NAMED call of the tool in
 *      that form (srv_constraint_build, the server's code: the tool's full input schema, as
 *      one JSON object or one element per parameter, then what closes the call; a schema it
 *      refuses falls back to {"type": "object"}, reported in grammar_fallback), at most
 *      max_tokens tokens (the grammar's budget closes the call in time); the call is read back
 *      with the family's parser (nx_tool_calls_parse_with_tools) into JSON arguments;
 *   5. the sidecar sequence is ended and the main session restored into sequence 0 (shared
 *      back, the parked sequence ended): afterwards sequence 0 holds exactly what it held
 *      before, and the sequences other than 0 are empty.
 * Timing: t_first is the time from the start of step 2 to the pick of the first argument token
 * (the time to first argument, TTFA), t_total to the end of the arguments.
 * Ownership: the sidecar borrows the model; it owns the compiled blocks and grammars per tool
 * (keyed by registry index, up to n_tools) and the grammar vocabulary. One thread at a time.
 */
#ifndef NX_AGENT_SIDECAR_H
#define NX_AGENT_SIDECAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"
#include "route/registry.h"

struct ag_sidecar_params {
    int32_t window_tokens; /* recent-turn tokens kept (0: 256) */
    int32_t max_tokens;    /* argument tokens at most (0: 256) */
    nx_seq_id park;        /* where the main session waits (0: 1) */
    const nx_chat_template *tmpl; /* whose call form the arguments are written in (borrowed,
                                     outlives the sidecar; NULL: Hermes's) */
};

typedef struct ag_sidecar ag_sidecar;

/* A sidecar for the tools reg->tools[0..reg->n) (reg borrowed, must outlive it). Errors:
 * INVALID_ARG, NOMEM. */
nx_status ag_sidecar_new(const nx_model *m, const rt_registry *reg,
                         const struct ag_sidecar_params *p, ag_sidecar **out, char *err,
                         size_t errlen);
void ag_sidecar_free(ag_sidecar *sc);

/* Compiles tool i's block now (if not yet) on ctx (sequence 0 must be empty: it is cleared). */
nx_status ag_sidecar_compile(ag_sidecar *sc, nx_ctx *ctx, int tool, char *err, size_t errlen);

/* The block text of a tool (nx_free), as compiled in step 2. */
char *ag_sidecar_block_text(const struct rt_tool *t);

struct ag_sidecar_result {
    char *arguments;       /* the arguments as JSON text, read back from the call (nx_free) */
    char *raw;             /* the generated text, in the call form (nx_free) */
    bool json_object;      /* it parses as a JSON object (jansson) */
    bool schema_valid;     /* it passes ag_args_check against the tool's schema */
    bool grammar_complete; /* the grammar reached its end (the object is closed) */
    bool grammar_fallback; /* the schema was refused; "any JSON object" was used */
    bool compiled_now;     /* the block was compiled in this call */
    int32_t n_block, n_window, n_prefix, n_generated;
    double t_first, t_total, t_splice;
};

/* Step 4 alone, for callers that build their own prompt (the evaluation's arms): decodes
 * prompt[0..n) onto sequence 0 as it stands and generates tool i's arguments under its grammar;
 * t_first and t_total count from t0 (nx_time_s). Fills arguments, json_object, schema_valid,
 * grammar_complete, grammar_fallback, n_generated, t_first, t_total. Errors as below. */
nx_status ag_sidecar_generate(ag_sidecar *sc, nx_ctx *ctx, int tool, const nx_token *prompt,
                              int32_t n, double t0, struct ag_sidecar_result *out, char *err,
                              size_t errlen);

/* Generates tool i's arguments (steps 1-5 above); window: the recent turns' text (may be "").
 * Errors: INVALID_ARG (bad tool index, context without a second sequence), the decode's
 * (KV_FULL...), NOMEM; message in err. On error sequence 0 is restored when it can be. */
nx_status ag_sidecar_args(ag_sidecar *sc, nx_ctx *ctx, int tool, const char *window,
                          struct ag_sidecar_result *out, char *err, size_t errlen);

#endif
