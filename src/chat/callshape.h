/*
 * callshape.h - how one tool call is written in each template family's own form, for the
 * grammars that make a model write it (server/constrain.c). The parsers (toolcall.c) accept
 * every text a shape describes; test_chat_callshape generates calls under these grammars with a
 * random-weight model and parses them back.
 *
 * A call is: open, [an id: id_gbnf], name_pre, NAME (JSON-quoted when json_name), name_post,
 * the arguments, close. The arguments are one JSON object (the tool's parameters schema), or,
 * when params is set, one element per property (required ones first, then the optional ones,
 * each in the schema's order; each optional one may be left out):
 *     param_pre KEY (param_mid_str when the property is a string and that is set, else
 *     param_mid) VALUE param_post [KEY param_post_end, when param_post_end is set]
 * where VALUE is raw text for a property whose schema has "type": "string" (no byte of
 * raw_stop, no control character), and compact JSON under the property's schema otherwise (its
 * strings without '<', so no value holds a closing tag).
 * A family whose values are not JSON has a dialect (grammar/schema.h): gemma4's
 * {key:<|"|>text<|"|>,..} for its whole arguments object, Python literals for each of
 * pythonic's key=value parameters (strings quoted, never raw).
 */
#ifndef NX_CHAT_CALLSHAPE_H
#define NX_CHAT_CALLSHAPE_H

#include <stdbool.h>

#include "nexus.h"

struct chat_call_shape {
    enum nx_tool_format family;
    const char *open;              /* begins the call: the lazy grammar's trigger */
    bool open_in_prompt;           /* the generation prompt already ends with `open` (functionary's
                                      ">>>"): the first call is written without it */
    const char *id_gbnf, *id_fixed; /* an id before name_pre (GBNF; text for a prefill), or NULL */
    const char *name_pre, *name_post;
    bool json_name;
    bool params;
    const char *param_pre, *param_mid, *param_mid_str, *param_post, *param_post_end;
    const char *raw_stop;
    const char *close;
    int dialect; /* enum schema_dialect: 0 JSON, 1 gemma4, 2 Python literals */
    const char *mark; /* text a rendered call holds in this form only (NULL: open) */
    bool by_form;     /* a form of a family whose first form has its grammar in constrain.c
                         (hermes: Qwen3-Coder's and GLM's XML inside <tool_call>): only when
                         the template's form names it */
};

/* The shape of family f in the form that opens with `form` (NULL or unknown: the family's
 * first form), or NULL when the family has no shape here (llama3, mistral, deepseek, generic,
 * and hermes's JSON form have their grammars in constrain.c; hermes's XML forms,
 * "<tool_call>\n<function=" (Qwen3-Coder: <function=NAME>\n<parameter=KEY>\nVALUE\n
 * </parameter>\n...</function>) and "<tool_call>" (GLM: NAME\n<arg_key>KEY</arg_key>\n
 * <arg_value>VALUE</arg_value>...), only by their form). Static. */
const struct chat_call_shape *chat_call_shape(enum nx_tool_format f, const char *form);

/* The opening marker of the form template t writes a call in (a one-call conversation rendered
 * and searched for its family's shapes' marks), or NULL (no shapes, none found, or the template
 * does not render a call: a hermes template writing JSON gives NULL). Static. */
const char *chat_template_call_form(const nx_chat_template *t);

#endif
