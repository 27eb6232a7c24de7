/* constrain.c - tools / tool_choice / response_format to a grammar (see constrain.h). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"
#include "server/constrain.h"

/* Any JSON object, compact or not (response_format json_object). */
static const char k_json_object_gbnf[] =
    "root ::= object\n"
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) )* \"\\\"\"\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?\n"
    "ws ::= [ \\t\\n]{0,2}\n";

nx_status srv_schema_grammar(json_t *schema, nx_grammar **g, char *err, size_t errlen) {
    char *text = nx_json_dumps(schema, JSON_COMPACT);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    nx_status st = nx_grammar_from_json_schema(text, strlen(text), NULL, g, err, errlen);
    nx_free(text);
    return st;
}

/* The anyOf schema of one call body over the tools (only `name` when NAMED). */
static nx_status call_schema(enum nx_tool_format family, json_t *tools, enum srv_tool_mode mode,
                             const char *name, json_t **out, char *err, size_t errlen) {
    const char *args_key = family == NX_TOOL_FORMAT_LLAMA3 ? "parameters" : "arguments";
    json_t *any = json_array();
    size_t i;
    json_t *t;
    bool found = false;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *type = json_string_value(json_object_get(t, "type"));
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (!json_is_object(t) || (type && strcmp(type, "function")) || !json_is_object(fn) ||
            !fname || !fname[0]) {
            json_decref(any);
            snprintf(err, errlen, "tools[%zu] must be {\"type\": \"function\", \"function\": "
                     "{\"name\": ..., \"parameters\": ...}}", i);
            return NX_STATUS_INVALID_ARG;
        }
        if (mode == SRV_TOOLS_NAMED && strcmp(fname, name)) continue;
        found = true;
        json_t *params = json_object_get(fn, "parameters");
        if (params && !json_is_object(params)) {
            json_decref(any);
            snprintf(err, errlen, "tools[%zu] (%s): parameters must be a JSON Schema object", i,
                     fname);
            return NX_STATUS_INVALID_ARG;
        }
        json_t *args = params ? json_deep_copy(params)
                              : json_pack("{s:s, s:{}}", "type", "object", "properties");
        json_t *one = json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s, s]}", "type", "object",
                                "properties", "name", "const", fname, args_key, args, "required",
                                "name", args_key);
        if (!one) {
            json_decref(any);
            snprintf(err, errlen, "out of memory");
            return NX_STATUS_NOMEM;
        }
        json_array_append_new(any, one);
    }
    if (!found) {
        json_decref(any);
        snprintf(err, errlen, mode == SRV_TOOLS_NAMED ? "tool_choice names '%s', which is not "
                 "among the tools" : "no tools given%s", mode == SRV_TOOLS_NAMED ? name : "");
        return NX_STATUS_INVALID_ARG;
    }
    json_t *body = json_array_size(any) == 1 ? json_incref(json_array_get(any, 0))
                                             : json_pack("{s:O}", "anyOf", any);
    json_decref(any);
    if (family == NX_TOOL_FORMAT_MISTRAL) {
        json_t *arr = json_pack("{s:s, s:o, s:i, s:i}", "type", "array", "items", body,
                                "minItems", 1, "maxItems", 1);
        body = arr;
    }
    *out = body;
    return body ? NX_STATUS_OK : NX_STATUS_NOMEM;
}

/* Copy GBNF text with every rule name prefixed (string literals, classes, repetition counts
 * comments and %elements copied as they are), so grammars compiled apart can share one file. */
static bool gbnf_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}
static bool put_prefixed(json_t *sb, const char *src, const char *prefix) {
    size_t n = strlen(src), i = 0;
    char *out = nx_malloc(n + (n / 2 + 1) * strlen(prefix) + 1); /* at most n/2+1 names */
    if (!out) return false;
    size_t o = 0, pl = strlen(prefix);
    while (i < n) {
        char c = src[i];
        if (c == '"' || c == '[') {
            char end = c == '"' ? '"' : ']';
            out[o++] = src[i++];
            while (i < n && src[i] != end) {
                if (src[i] == '\\' && i + 1 < n) out[o++] = src[i++];
                out[o++] = src[i++];
            }
            if (i < n) out[o++] = src[i++];
        } else if (c == '%') { /* %jstr: the compiler's string-body element, not a rule */
            out[o++] = src[i++];
            while (i < n && gbnf_word(src[i])) out[o++] = src[i++];
        } else if (c == '{' || c == '#') {
            char end = c == '{' ? '}' : '\n';
            while (i < n && src[i] != end) out[o++] = src[i++];
            if (i < n) out[o++] = src[i++];
        } else if (gbnf_word(c)) {
            memcpy(out + o, prefix, pl);
            o += pl;
            while (i < n && gbnf_word(src[i])) out[o++] = src[i++];
        } else out[o++] = src[i++];
    }
    out[o] = 0;
    bool ok = json_array_append_new(sb, json_string(out)) == 0;
    nx_free(out);
    return ok;
}

/* s as the body of a GBNF string literal (quotes and backslashes escaped) */
static void put_literal(char *dst, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '"' || *s == '\\') dst[o++] = '\\';
        dst[o++] = *s;
    }
    dst[o] = 0;
}

/* The text a NAMED call starts with, up to its arguments (owned by c). */
static nx_status named_prefill(enum nx_tool_format family, const char *name, struct srv_constraint *c) {
    json_t *js = json_string(name);
    char *q = js ? nx_json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    if (!q) return NX_STATUS_NOMEM;
    size_t cap = strlen(q) + strlen(name) + 96;
    c->owned = nx_malloc(cap);
    if (c->owned) {
        if (family == NX_TOOL_FORMAT_LLAMA3) snprintf(c->owned, cap, "{\"name\":%s,\"parameters\":", q);
        else if (family == NX_TOOL_FORMAT_DEEPSEEK)
            snprintf(c->owned, cap, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>%s<｜tool▁sep｜>", name);
        else if (family == NX_TOOL_FORMAT_MISTRAL) snprintf(c->owned, cap, "[TOOL_CALLS][{\"name\":%s,\"arguments\":", q);
        else snprintf(c->owned, cap, "<tool_call>\n{\"name\":%s,\"arguments\":", q);
        c->prefill = c->owned;
    }
    nx_free(q);
    return c->owned ? NX_STATUS_OK : NX_STATUS_NOMEM;
}

/*
 * The grammar of what follows the family's trigger (nx_tool_format_trigger) in one call, for
 * the families whose trigger is not a separate tag: llama3 after {"name": the rest of
 * {"name":"N","parameters":ARGS} (compact), deepseek after <｜tool▁calls▁begin｜>: one
 * <｜tool▁call▁begin｜>N<｜tool▁sep｜>ARGS<｜tool▁call▁end｜> and <｜tool▁calls▁end｜> (V3.1's
 * form). ARGS is each tool's full parameters schema (its rules prefixed tN-). NAMED (any
 * family): only the tool's ARGS and what closes the call, the rest being in the prefill.
 */
static nx_status after_trigger_grammar(enum nx_tool_format family, json_t *tools, enum srv_tool_mode mode,
                                       const char *name, nx_grammar **g, char *err, size_t errlen) {
    json_t *parts = json_array(); /* strings joined at the end */
    json_t *alts = json_array();
    size_t i;
    json_t *t;
    nx_status st = NX_STATUS_OK;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (mode == SRV_TOOLS_NAMED && strcmp(fname, name)) continue;
        json_t *params = json_object_get(fn, "parameters");
        json_t *own = params ? NULL : json_pack("{s:s, s:{}}", "type", "object", "properties");
        nx_grammar *tg = NULL;
        st = srv_schema_grammar(params ? params : own, &tg, err, errlen);
        json_decref(own);
        if (st) break;
        char prefix[32], lit[600], alt[900];
        snprintf(prefix, sizeof prefix, "t%zu-", i);
        bool put = put_prefixed(parts, nx_grammar_source(tg), prefix);
        json_array_append_new(parts, json_string("\n"));
        nx_grammar_free(tg);
        if (!put) {
            st = NX_STATUS_NOMEM;
            snprintf(err, errlen, "out of memory");
            break;
        }
        if (mode == SRV_TOOLS_NAMED) {
            snprintf(alt, sizeof alt, "t%zu-root", i);
        } else if (family == NX_TOOL_FORMAT_LLAMA3) {
            char *q = nx_json_dumps(json_object_get(fn, "name"), JSON_ENCODE_ANY);
            put_literal(lit, sizeof lit, q ? q : "\"\"");
            nx_free(q);
            snprintf(alt, sizeof alt, "\"%s,\\\"parameters\\\":\" t%zu-root", lit, i);
        } else {
            put_literal(lit, sizeof lit, fname);
            snprintf(alt, sizeof alt, "\"<｜tool▁call▁begin｜>%s<｜tool▁sep｜>\" t%zu-root", lit, i);
        }
        json_array_append_new(alts, json_string(alt));
    }
    if (st == NX_STATUS_OK) {
        /* NAMED: the prefill ends where the arguments begin (named_prefill) */
        const char *root = mode != SRV_TOOLS_NAMED && family == NX_TOOL_FORMAT_LLAMA3 ? "root ::= \":\" call \"}\"\n"
                           : family == NX_TOOL_FORMAT_DEEPSEEK ? "root ::= call \"<｜tool▁call▁end｜><｜tool▁calls▁end｜>\"\n"
                           : family == NX_TOOL_FORMAT_MISTRAL  ? "root ::= call \"}]\"\n"
                                                               : "root ::= call \"}\"\n";
        json_array_append_new(parts, json_string(root));
        json_array_append_new(parts, json_string("call ::= "));
        json_array_foreach(alts, i, t) {
            if (i) json_array_append_new(parts, json_string(" | "));
            json_array_append(parts, t);
        }
        json_array_append_new(parts, json_string("\n"));
        size_t len = 0;
        json_array_foreach(parts, i, t) len += json_string_length(t);
        char *text = nx_malloc(len + 1);
        if (!text) st = NX_STATUS_NOMEM;
        else {
            size_t o = 0;
            json_array_foreach(parts, i, t) {
                memcpy(text + o, json_string_value(t), json_string_length(t));
                o += json_string_length(t);
            }
            text[o] = 0;
            st = nx_grammar_from_schema_gbnf(text, o, NULL, g, err, errlen);
            nx_free(text);
        }
    }
    json_decref(alts);
    json_decref(parts);
    return st;
}

nx_status srv_constraint_build(enum nx_tool_format family, json_t *tools,
                               enum srv_tool_mode mode, const char *name, json_t *rf,
                               struct srv_constraint *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->prefill = "";
    c->suffix = "";
    /* a template that shows no tool calls gets the Hermes shape; so do, when a call is
       required, the families this file has no grammar for (in auto mode their own format is
       free and parsed after) */
    bool has_grammar = family == NX_TOOL_FORMAT_HERMES || family == NX_TOOL_FORMAT_MISTRAL ||
                       family == NX_TOOL_FORMAT_LLAMA3 || family == NX_TOOL_FORMAT_DEEPSEEK;
    if (family == NX_TOOL_FORMAT_NONE || family == NX_TOOL_FORMAT_GENERIC ||
        (!has_grammar && mode != SRV_TOOLS_AUTO))
        family = NX_TOOL_FORMAT_HERMES;
    c->format = family;
    const char *rft = rf ? json_string_value(json_object_get(rf, "type")) : NULL;
    bool json_rf = rft && strcmp(rft, "text");
    bool with_tools = tools && json_array_size(tools) > 0 && mode != SRV_TOOLS_NONE;
    if (with_tools && json_rf) {
        snprintf(err, errlen, "tools and a JSON response_format cannot be combined");
        return NX_STATUS_INVALID_ARG;
    }
    if (json_rf) {
        if (!strcmp(rft, "json_object"))
            return nx_grammar_from_gbnf(k_json_object_gbnf, sizeof k_json_object_gbnf - 1, NULL,
                                        &c->grammar, err, errlen);
        if (strcmp(rft, "json_schema")) {
            snprintf(err, errlen, "response_format type '%s' is not one of text, json_object, "
                     "json_schema", rft);
            return NX_STATUS_INVALID_ARG;
        }
        json_t *js = json_object_get(rf, "json_schema");
        json_t *schema = json_object_get(js, "schema");
        if (!json_is_object(schema)) {
            snprintf(err, errlen, "response_format.json_schema.schema must be a JSON Schema "
                     "object");
            return NX_STATUS_INVALID_ARG;
        }
        return srv_schema_grammar(schema, &c->grammar, err, errlen);
    }
    if (!with_tools) return NX_STATUS_OK;
    c->tools = true;
    if (!has_grammar && family != NX_TOOL_FORMAT_HERMES) return NX_STATUS_OK; /* free, parsed after */
    json_t *body;
    nx_status st = call_schema(family, tools, mode, name, &body, err, errlen);
    if (st) return st;
    if (mode == SRV_TOOLS_NAMED) {
        /* the router chose the tool: the answer starts with the call up to its arguments,
           and only those are generated, under the tool's full schema */
        json_decref(body);
        st = named_prefill(family, name, c);
        if (st == NX_STATUS_OK) st = after_trigger_grammar(family, tools, mode, name, &c->grammar, err, errlen);
        if (st == NX_STATUS_NOMEM) snprintf(err, errlen, "out of memory");
        if (st) srv_constraint_free(c);
        else if (family == NX_TOOL_FORMAT_HERMES) c->suffix = "\n</tool_call>";
        return st;
    }
    if (family == NX_TOOL_FORMAT_LLAMA3 || family == NX_TOOL_FORMAT_DEEPSEEK) {
        /* no separate opening tag: the trigger is the call's own beginning; auto waits for it,
           required starts the answer with it */
        json_decref(body);
        st = after_trigger_grammar(family, tools, mode, name, &c->grammar, err, errlen);
        if (st) return st;
        if (mode == SRV_TOOLS_AUTO) c->trigger = nx_tool_format_trigger(family);
        else c->prefill = nx_tool_format_trigger(family);
        return NX_STATUS_OK;
    }
    st = srv_schema_grammar(body, &c->grammar, err, errlen);
    json_decref(body);
    if (st) return st;
    const char *open = family == NX_TOOL_FORMAT_HERMES    ? "<tool_call>\n"
                       : family == NX_TOOL_FORMAT_MISTRAL ? "[TOOL_CALLS]"
                                                          : "";
    if (family == NX_TOOL_FORMAT_HERMES) c->suffix = "\n</tool_call>";
    if (mode == SRV_TOOLS_AUTO)
        /* Hermes-trained models open a call with "<tool_call>\n": the grammar (compact JSON)
           applies after that */
        c->trigger = family == NX_TOOL_FORMAT_HERMES ? "<tool_call>\n" : "[TOOL_CALLS]";
    else
        c->prefill = open;
    return NX_STATUS_OK;
}

void srv_constraint_free(struct srv_constraint *c) {
    nx_grammar_free(c->grammar);
    c->grammar = NULL;
    nx_free(c->owned);
    c->owned = NULL;
    c->prefill = "";
}
