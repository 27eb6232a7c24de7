/*
 * constrain.h - what a chat request's `tools`, `tool_choice` and `response_format` ask of the
 * output, turned into a grammar for the sampler (src/grammar), the text that starts the
 * assistant's answer, and how to read tool calls back out.
 *
 * DESIGN: the shape of a call is the template family's (nx_chat_template_tool_format): Hermes /
 * Qwen and templates that show no calls: <tool_call>{"name": N, "arguments": A}</tool_call>;
 * Llama 3: {"name": N, "parameters": A}; Mistral: [TOOL_CALLS][{"name": N, "arguments": A}];
 * DeepSeek: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>N<｜tool▁sep｜>A<｜tool▁call▁end｜>
 * <｜tool▁calls▁end｜>. The other families that have a shape in chat/callshape.h (tagged-json,
 * xml-invoke, each in the template's own form; kimi, solar, harmony, hy, functionary,
 * minimax-m3) get a grammar of their own form: each tool's call with its name, then its
 * arguments (one JSON object, or for the XML-style families one element per parameter whose
 * value is raw text for a "type": "string" property and compact JSON under the property's
 * schema otherwise; what a form cannot write is refused by name), then what closes the call.
 * gemma4 and pythonic (arguments in their own non-JSON syntaxes) have no grammar: a request
 * with tools is refused with the family named, never left unconstrained. A is
 * always the tool's full parameters schema (a keyword the schema compiler does not support is
 * refused by name: fail closed); Hermes / Mistral compile one JSON Schema, an anyOf over the
 * tools of {"name": {"const": N}, "arguments": A}; Llama 3 / DeepSeek and the shaped families
 * combine each tool's compiled schema source into one GBNF (nx_grammar_from_schema_gbnf).
 *  - tool_choice "required": the family's opening text is put at the start of the answer
 *    (part of the prompt) and the grammar applies from the first token, so the output is
 *    always one valid call.
 *  - a named function (the router chose it): the answer starts with the call up to its
 *    arguments (name included), and only the arguments are generated, then what closes the call.
 *  - "auto": the grammar is lazy: text is free until the family's trigger appears, then the
 *    call must be valid. Hermes "<tool_call>\n" (as Hermes-trained models write it), Mistral
 *    "[TOOL_CALLS]": the grammar applies after the tag. Llama 3 and DeepSeek have no separate
 *    tag: the trigger is the call's own beginning ({"name" / <｜tool▁calls▁begin｜>, from
 *    nx_tool_format_trigger) and the grammar matches the rest of the call after it. The shaped
 *    families' trigger is their form's opening marker; functionary's (">>>") ends the prompt,
 *    so its auto grammar applies from the start: a call, or "all\n" and text without '>'
 *    then maybe a call.
 *  - response_format json_schema: the schema's grammar from the first token; json_object: any
 *    JSON object.
 * One call per answer under a grammar (parallel_tool_calls is honoured by producing one).
 */
#ifndef NX_SERVER_CONSTRAIN_H
#define NX_SERVER_CONSTRAIN_H

#include <jansson.h>
#include <stdbool.h>

#include "nexus.h"

enum srv_tool_mode { SRV_TOOLS_NONE = 0, SRV_TOOLS_AUTO, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED };

struct srv_constraint {
    nx_grammar *grammar;   /* owned; NULL: free output */
    const char *trigger;   /* static; NULL: the grammar applies from the start */
    const char *prefill;   /* text the answer starts with (already in the prompt): static, or owned */
    char *owned;           /* the prefill when built for the request (NAMED), else NULL */
    const char *suffix;    /* static text a finished call is closed with before parsing */
    enum nx_tool_format format; /* how to parse tool calls out of the answer */
    char *tools_json;      /* owned: the request's tools (compact JSON), for
                              nx_tool_calls_parse_with_tools; NULL without tools */
    bool tools;            /* tool calls may appear in the answer */
};

/*
 * Build the constraint. form: the opening marker of the template's own call form, from
 * chat_template_call_form (NULL: the family's first form; it matters for the families with
 * several, tagged-json and xml-invoke). tools: the request's tools array (may be NULL), mode and name (for
 * NAMED) from tool_choice; rf: response_format (may be NULL). Errors (err names the tool or
 * keyword): INVALID_ARG (a malformed tool, an unknown named tool, tools together with a JSON
 * response format), UNSUPPORTED (a schema keyword the compiler refuses; a family without a grammar, gemma4 and
 * pythonic, named in err; a tool or parameter name or schema the family's form cannot write), NOMEM.
 * On error *out holds nothing (srv_constraint_free is not needed, and harmless).
 */
nx_status srv_constraint_build(enum nx_tool_format family, const char *form, json_t *tools,
                               enum srv_tool_mode mode, const char *name, json_t *rf,
                               struct srv_constraint *out, char *err, size_t errlen);
void srv_constraint_free(struct srv_constraint *c);

/* The grammar of one JSON Schema (the compiler of src/grammar, its refusals by keyword name):
 * NX_STATUS_OK, UNSUPPORTED, FORMAT, NOMEM, with err. */
nx_status srv_schema_grammar(json_t *schema, nx_grammar **g, char *err, size_t errlen);

/* The text a call of tool `name` starts with in the family's form `form` (as for
 * srv_constraint_build), up to where its arguments begin: the NAMED prefill (nx_free; NULL: out
 * of memory). */
char *srv_call_head(enum nx_tool_format family, const char *form, const char *name);

/*
 * The choice of a tool without its arguments (the agent's, agent/turn.h): a grammar that writes
 * a call of one of tools (each {"type": "function", "function": {"name": N}}; parameters are not
 * read) from after its opening up to where its arguments begin (what srv_call_head gives, less
 * the opening; solar's id by its pattern). mode AUTO: trigger is the opening (lazy; functionary,
 * whose prompt ends with it: from the start, a call or "all\n" text then maybe a call);
 * REQUIRED: prefill is the opening. Errors as srv_constraint_build's (a family without a
 * grammar, a name the form cannot write: UNSUPPORTED).
 */
nx_status srv_pick_build(enum nx_tool_format family, const char *form, json_t *tools, enum srv_tool_mode mode,
                         struct srv_constraint *out, char *err, size_t errlen);

/* Which of tools a text written under srv_pick_build's grammar calls (index into tools; the
 * longest head found in text), or -1. */
int srv_pick_find(enum nx_tool_format family, const char *form, json_t *tools, const char *text);

#endif
