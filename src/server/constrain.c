/* constrain.c - tools / tool_choice / response_format to a grammar (see constrain.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/callshape.h"
#include "core/alloc.h"
#include "core/json.h"
#include "grammar/schema.h"
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

/* What opens a call of a family without a shape (the NAMED prefill's start). */
static const char *plain_open(enum nx_tool_format family) {
    if (family == NX_TOOL_FORMAT_LLAMA3 || family == NX_TOOL_FORMAT_DEEPSEEK) return nx_tool_format_trigger(family);
    return family == NX_TOOL_FORMAT_MISTRAL ? "[TOOL_CALLS]" : "<tool_call>\n";
}

/* A call of `name` after its opening (and its id) up to where the arguments begin; owned. */
static char *call_tail(enum nx_tool_format family, const struct chat_call_shape *sh, const char *name) {
    json_t *js = json_string(name);
    char *q = js ? nx_json_dumps(js, JSON_ENCODE_ANY) : NULL;
    json_decref(js);
    if (!q) return NULL;
    size_t cap = strlen(q) + strlen(name) + (sh ? strlen(sh->name_pre) + strlen(sh->name_post) : 0) + 96;
    char *s = nx_malloc(cap);
    if (s) {
        if (sh) snprintf(s, cap, "%s%s%s", sh->name_pre, sh->json_name ? q : name, sh->name_post);
        else if (family == NX_TOOL_FORMAT_LLAMA3) snprintf(s, cap, ":%s,\"parameters\":", q);
        else if (family == NX_TOOL_FORMAT_DEEPSEEK) snprintf(s, cap, "<｜tool▁call▁begin｜>%s<｜tool▁sep｜>", name);
        else if (family == NX_TOOL_FORMAT_MISTRAL) snprintf(s, cap, "[{\"name\":%s,\"arguments\":", q);
        else snprintf(s, cap, "{\"name\":%s,\"arguments\":", q);
    }
    nx_free(q);
    return s;
}

/* The family's shape (NULL for the families whose grammars are here), family normalized. */
static const struct chat_call_shape *shape_of(enum nx_tool_format *family, const char *form) {
    bool here = *family == NX_TOOL_FORMAT_MISTRAL || *family == NX_TOOL_FORMAT_LLAMA3 ||
                *family == NX_TOOL_FORMAT_DEEPSEEK; /* hermes: its XML forms by name only */
    const struct chat_call_shape *sh = here ? NULL : chat_call_shape(*family, form);
    if (*family == NX_TOOL_FORMAT_NONE || *family == NX_TOOL_FORMAT_GENERIC) *family = NX_TOOL_FORMAT_HERMES;
    return sh;
}

char *srv_call_head(enum nx_tool_format family, const char *form, const char *name) {
    const struct chat_call_shape *sh = shape_of(&family, form);
    char *tail = call_tail(family, sh, name);
    if (!tail) return NULL;
    const char *open = sh ? (sh->open_in_prompt ? "" : sh->open) : plain_open(family);
    const char *id = sh && sh->id_fixed ? sh->id_fixed : "";
    size_t cap = strlen(open) + strlen(id) + strlen(tail) + 1;
    char *s = nx_malloc(cap);
    if (s) snprintf(s, cap, "%s%s%s", open, id, tail);
    nx_free(tail);
    return s;
}

/* The text a NAMED call starts with, up to its arguments (owned by c). */
static nx_status named_prefill(enum nx_tool_format family, const char *form, const char *name,
                               struct srv_constraint *c) {
    c->owned = srv_call_head(family, form, name);
    if (c->owned) c->prefill = c->owned;
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

/* ---- the families of chat/callshape.h ---- */

struct gb {
    char *p;
    size_t n, cap;
    bool oom;
};
static void gb_put(struct gb *b, const char *s, size_t k) {
    if (b->oom) return;
    if (b->n + k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->n + k + 1) cap *= 2;
        char *q = nx_realloc(b->p, cap);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, k);
    b->n += k;
    b->p[b->n] = 0;
}
static void gb_printf(struct gb *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void gb_printf(struct gb *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        gb_put(b, tmp, (size_t)k);
        return;
    }
    char *big = nx_malloc((size_t)k + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)k + 1, fmt, ap);
    va_end(ap);
    gb_put(b, big, (size_t)k);
    nx_free(big);
}
/* the concatenation of s[] as one GBNF literal (nothing when all are empty) */
static void gb_lit(struct gb *b, const char *const *s, int n) {
    size_t len = 0;
    for (int i = 0; i < n; i++) len += s[i] ? strlen(s[i]) : 0;
    if (!len) return;
    gb_put(b, " \"", 2);
    for (int i = 0; i < n; i++)
        for (const char *q = s[i]; q && *q; q++) {
            char e[8];
            if (*q == '"' || *q == '\\') snprintf(e, sizeof e, "\\%c", *q);
            else if (*q == '\n') snprintf(e, sizeof e, "\\n");
            else if (*q == '\r') snprintf(e, sizeof e, "\\r");
            else if (*q == '\t') snprintf(e, sizeof e, "\\t");
            else if ((unsigned char)*q < 0x20) snprintf(e, sizeof e, "\\x%02x", (unsigned char)*q);
            else {
                e[0] = *q;
                e[1] = 0;
            }
            gb_put(b, e, strlen(e));
        }
    gb_put(b, "\"", 1);
}
#define LIT(b, ...) gb_lit(b, (const char *const[]){__VA_ARGS__}, (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)))

/* grammar source src with its rules prefixed, appended to b as a line */
static void put_source(struct gb *b, const char *src, const char *prefix) {
    json_t *tmp = json_array();
    bool ok = tmp && put_prefixed(tmp, src, prefix);
    if (ok) {
        gb_put(b, json_string_value(json_array_get(tmp, 0)), json_string_length(json_array_get(tmp, 0)));
        gb_put(b, "\n", 1);
    }
    json_decref(tmp);
    if (!ok) b->oom = true;
}

/* the grammar source of one JSON Schema, its rules prefixed */
static nx_status put_schema(struct gb *b, json_t *schema, const char *prefix, char *err, size_t errlen) {
    nx_grammar *g = NULL;
    nx_status st = srv_schema_grammar(schema, &g, err, errlen);
    if (st) return st;
    put_source(b, nx_grammar_source(g), prefix);
    nx_grammar_free(g);
    return NX_STATUS_OK;
}

/* the same in a dialect (grammar/schema.h), for the families whose values are not JSON */
static nx_status put_schema_dialect(struct gb *b, json_t *schema, int dialect, const char *prefix, char *err,
                                    size_t errlen) {
    if (dialect == SCHEMA_JSON) return put_schema(b, schema, prefix, err, errlen);
    char *text = nx_json_dumps(schema, JSON_COMPACT), *gbnf = NULL;
    if (!text) {
        b->oom = true;
        return NX_STATUS_OK;
    }
    struct nx_err e = {{0}};
    nx_status st = schema_to_gbnf_dialect(text, strlen(text), NULL, (enum schema_dialect)dialect, &gbnf, &e);
    nx_free(text);
    if (st) {
        snprintf(err, errlen, "%s", e.msg);
        return st;
    }
    put_source(b, gbnf, prefix);
    nx_free(gbnf);
    return NX_STATUS_OK;
}

static bool plain_name(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

static const char *const k_annotations[] = {"description", "title", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", NULL};
static bool annotation(const char *k) {
    for (int i = 0; k_annotations[i]; i++)
        if (!strcmp(k, k_annotations[i])) return true;
    return false;
}

/* a raw-text string value (callshape.h): enum / const literals, a date, or text of the length */
static nx_status put_raw_string(struct gb *b, const struct chat_call_shape *sh, json_t *ps, const char *rule,
                                const char *where, char *err, size_t errlen) {
    const char *k;
    json_t *v;
    json_object_foreach(ps, k, v) {
        if (!strcmp(k, "type") || !strcmp(k, "enum") || !strcmp(k, "const") || !strcmp(k, "minLength") ||
            !strcmp(k, "maxLength") || !strcmp(k, "format") || annotation(k))
            continue;
        snprintf(err, errlen, "%s: unsupported keyword '%s' for a %s raw-text string parameter", where, k,
                 nx_tool_format_name(sh->family));
        return NX_STATUS_UNSUPPORTED;
    }
    json_t *en = json_object_get(ps, "enum"), *cn = json_object_get(ps, "const");
    json_t *lits = cn ? json_pack("[O]", cn) : en ? json_incref(en) : NULL;
    if (lits) {
        if (!json_is_array(lits) || !json_array_size(lits)) {
            json_decref(lits);
            snprintf(err, errlen, "%s: enum must be a non-empty array", where);
            return NX_STATUS_INVALID_ARG;
        }
        size_t i;
        bool empty = false;
        int n = 0;
        gb_printf(b, "%s ::= (", rule);
        json_array_foreach(lits, i, v) {
            const char *t = json_string_value(v);
            bool bad = !t;
            for (const char *q = t; q && *q && !bad; q++) bad = (unsigned char)*q < 0x20 || strchr(sh->raw_stop, *q);
            if (bad) {
                json_decref(lits);
                snprintf(err, errlen, "%s: enum value %zu is not a string the %s family can write as raw text", where,
                         i, nx_tool_format_name(sh->family));
                return NX_STATUS_UNSUPPORTED;
            }
            if (!*t) {
                empty = true;
                continue;
            }
            if (n++) gb_put(b, " |", 2);
            LIT(b, t);
        }
        json_decref(lits);
        if (!n) gb_put(b, " \"\"", 3);
        gb_printf(b, " )%s\n", empty && n ? "?" : "");
        return NX_STATUS_OK;
    }
    json_t *fmt = json_object_get(ps, "format");
    if (fmt) {
        if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "date")) {
            snprintf(err, errlen, "%s: unsupported format '%s' (only \"date\")", where,
                     json_is_string(fmt) ? json_string_value(fmt) : "?");
            return NX_STATUS_UNSUPPORTED;
        }
        gb_printf(b, "%s ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] )\n",
                  rule);
        return NX_STATUS_OK;
    }
    json_t *jmn = json_object_get(ps, "minLength"), *jmx = json_object_get(ps, "maxLength");
    long mn = json_is_integer(jmn) ? (long)json_integer_value(jmn) : 0;
    long mx = json_is_integer(jmx) ? (long)json_integer_value(jmx) : -1;
    if ((jmn && !json_is_integer(jmn)) || (jmx && !json_is_integer(jmx)) || mn < 0 || mn > 100000 || mx > 100000 ||
        (jmx && mx < mn)) {
        snprintf(err, errlen, "%s: minLength / maxLength must be integers, 0 <= minLength <= maxLength <= 100000", where);
        return NX_STATUS_INVALID_ARG;
    }
    /* the class: no stop byte, no control character (a value is never trimmed or cut short) */
    char cls[64] = "[^";
    for (const char *q = sh->raw_stop; *q; q++) {
        size_t l = strlen(cls);
        if (*q == ']' || *q == '\\' || *q == '^' || *q == '-') cls[l++] = '\\';
        cls[l++] = *q;
        cls[l] = 0;
    }
    strcat(cls, "\\x00-\\x1f]");
    if (mx < 0 && mn == 0) gb_printf(b, "%s ::= %s*\n", rule, cls);
    else if (mx < 0) gb_printf(b, "%s ::= %s{%ld,}\n", rule, cls, mn);
    else if (mx == 0) gb_printf(b, "%s ::= \"\"\n", rule);
    else gb_printf(b, "%s ::= %s{%ld,%ld}\n", rule, cls, mn, mx);
    return NX_STATUS_OK;
}

/* Rule tI-args of tool i (NULL *none when it has no parameters): its parameters, each a raw
 * text or JSON value (callshape.h). */
static nx_status put_params(struct gb *b, const struct chat_call_shape *sh, json_t *params, size_t ti,
                            const char *fname, bool *none, char *err, size_t errlen) {
    char where[300];
    snprintf(where, sizeof where, "tools[%zu] (%s)", ti, fname);
    const char *k;
    json_t *v;
    json_object_foreach(params, k, v) {
        if (!strcmp(k, "properties") || !strcmp(k, "required") || !strcmp(k, "additionalProperties") ||
            !strcmp(k, "$defs") || !strcmp(k, "definitions") || annotation(k))
            continue;
        if (!strcmp(k, "type") && json_is_string(v) && !strcmp(json_string_value(v), "object")) continue;
        snprintf(err, errlen, "%s: the %s family writes parameters one by one, so the parameters schema must be "
                 "an object with properties; keyword '%s' at its top is not supported", where,
                 nx_tool_format_name(sh->family), k);
        return NX_STATUS_UNSUPPORTED;
    }
    json_t *props = json_object_get(params, "properties"), *req = json_object_get(params, "required");
    if ((props && !json_is_object(props)) || (req && !json_is_array(req))) {
        snprintf(err, errlen, "%s: properties must be an object and required an array", where);
        return NX_STATUS_INVALID_ARG;
    }
    size_t i;
    json_array_foreach(req, i, v) {
        if (!json_is_string(v) || !json_object_get(props, json_string_value(v))) {
            snprintf(err, errlen, "%s: required parameter %s has no schema in properties", where,
                     json_is_string(v) ? json_string_value(v) : "(not a string)");
            return NX_STATUS_UNSUPPORTED;
        }
    }
    /* required first, then optional, each in the schema's order */
    json_t *order = json_array();
    json_object_foreach(props, k, v) {
        bool r = false;
        json_t *x;
        json_array_foreach(req, i, x) r = r || !strcmp(json_string_value(x), k);
        if (r) json_array_append_new(order, json_string(k));
    }
    size_t n_req = json_array_size(order);
    json_object_foreach(props, k, v) {
        bool r = false;
        json_t *x;
        json_array_foreach(req, i, x) r = r || !strcmp(json_string_value(x), k);
        if (!r) json_array_append_new(order, json_string(k));
    }
    nx_status st = NX_STATUS_OK;
    json_t *kj;
    json_array_foreach(order, i, kj) {
        const char *key = json_string_value(kj);
        json_t *ps = json_object_get(props, key);
        char pw[600], rule[64], prefix[96];
        snprintf(pw, sizeof pw, "%s parameter %s", where, key);
        if (!plain_name(key) || (sh->family == NX_TOOL_FORMAT_MINIMAX_M3 && !strcmp(key, "item"))) {
            snprintf(err, errlen, "%s: the name cannot be written as a %s parameter tag", pw,
                     nx_tool_format_name(sh->family));
            st = NX_STATUS_UNSUPPORTED;
            break;
        }
        if (!json_is_object(ps)) {
            snprintf(err, errlen, "%s: its schema must be an object", pw);
            st = NX_STATUS_INVALID_ARG;
            break;
        }
        bool str = sh->dialect == SCHEMA_JSON && json_is_string(json_object_get(ps, "type")) &&
                   !strcmp(json_string_value(json_object_get(ps, "type")), "string");
        snprintf(rule, sizeof rule, "t%zu-p%zu", ti, i);
        gb_printf(b, "%s ::=", rule);
        LIT(b, sh->param_pre, key, str && sh->param_mid_str ? sh->param_mid_str : sh->param_mid);
        gb_printf(b, " %s-v", rule);
        if (sh->param_post_end) LIT(b, sh->param_post, key, sh->param_post_end);
        else LIT(b, sh->param_post);
        gb_put(b, "\n", 1);
        char vrule[80];
        snprintf(vrule, sizeof vrule, "%s-v", rule);
        if (str) {
            st = put_raw_string(b, sh, ps, vrule, pw, err, errlen);
        } else {
            /* JSON under the property's schema, the definitions it may refer to carried along */
            json_t *sub = json_copy(ps);
            const char *defs[] = {"$defs", "definitions"};
            for (int d = 0; d < 2 && sub; d++)
                if (json_object_get(params, defs[d]) && !json_object_get(sub, defs[d]))
                    json_object_set(sub, defs[d], json_object_get(params, defs[d]));
            snprintf(prefix, sizeof prefix, "%s-j-", rule);
            /* JSON inside an element: its strings hold no '<', so never a closing tag */
            int dia = sh->dialect == SCHEMA_JSON ? SCHEMA_JSON_NO_LT : sh->dialect;
            st = sub ? put_schema_dialect(b, sub, dia, prefix, err, errlen) : NX_STATUS_NOMEM;
            json_decref(sub);
            gb_printf(b, "%s ::= %sroot\n", vrule, prefix);
            if (st && err[0] && !strstr(err, "parameter")) {
                char inner[400];
                snprintf(inner, sizeof inner, "%s", err);
                snprintf(err, errlen, "%s: %s", pw, inner);
            }
        }
        if (st) break;
    }
    if (st == NX_STATUS_OK) {
        *none = json_array_size(order) == 0;
        if (!*none) {
            gb_printf(b, "t%zu-args ::=", ti);
            for (size_t q = 0; q < json_array_size(order); q++) gb_printf(b, " t%zu-p%zu%s", ti, q, q >= n_req ? "?" : "");
            gb_put(b, "\n", 1);
        }
    }
    json_decref(order);
    return st;
}

/* The constraint of a family of chat/callshape.h: each tool's call in the family's own form. */
static nx_status shape_constraint(const struct chat_call_shape *sh, json_t *tools, enum srv_tool_mode mode,
                                  const char *name, struct srv_constraint *c, char *err, size_t errlen) {
    struct gb b = {0};
    nx_status st = NX_STATUS_OK;
    size_t i, n_alt = 0;
    json_t *t;
    char named_rule[64] = "";
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *fname = json_string_value(json_object_get(fn, "name"));
        if (mode == SRV_TOOLS_NAMED && strcmp(fname, name)) continue;
        if (!plain_name(fname)) {
            snprintf(err, errlen, "tools[%zu]: the name '%s' has characters the %s family cannot write (want "
                     "letters, digits, '_', '-', '.')", i, fname, nx_tool_format_name(sh->family));
            st = NX_STATUS_UNSUPPORTED;
            break;
        }
        json_t *params = json_object_get(fn, "parameters");
        json_t *own = params ? NULL : json_pack("{s:s, s:{}}", "type", "object", "properties");
        bool none = false;
        if (sh->params) {
            st = put_params(&b, sh, params ? params : own, i, fname, &none, err, errlen);
        } else {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "t%zu-", i);
            st = put_schema_dialect(&b, params ? params : own, sh->dialect, prefix, err, errlen);
            if (st && !strstr(err, "tools[")) {
                char inner[400];
                snprintf(inner, sizeof inner, "%s", err);
                snprintf(err, errlen, "tools[%zu] (%s): %s", i, fname, inner);
            }
            gb_printf(&b, "t%zu-args ::= t%zu-root\n", i, i);
        }
        json_decref(own);
        if (st) break;
        /* tI-call: the whole call after the trigger; tI-rest: after the name (the NAMED grammar) */
        gb_printf(&b, "t%zu-rest ::=", i);
        if (!none) gb_printf(&b, " t%zu-args", i);
        LIT(&b, sh->close);
        if (none && !sh->close[0]) gb_put(&b, " \"\"", 3);
        gb_printf(&b, "\nt%zu-call ::=", i);
        if (sh->id_gbnf) gb_printf(&b, " %s", sh->id_gbnf);
        json_t *jn = json_string(fname);
        char *qn = sh->json_name && jn ? nx_json_dumps(jn, JSON_ENCODE_ANY) : NULL;
        json_decref(jn);
        LIT(&b, sh->name_pre, qn ? qn : fname, sh->name_post);
        gb_printf(&b, " t%zu-rest\n", i);
        if (mode == SRV_TOOLS_NAMED) {
            snprintf(named_rule, sizeof named_rule, "t%zu-rest", i);
            if (named_prefill(sh->family, sh->open, fname, c)) b.oom = true;
        }
        nx_free(qn);
        n_alt++;
    }
    if (st == NX_STATUS_OK && !b.oom) {
        if (mode == SRV_TOOLS_NAMED) gb_printf(&b, "root ::= %s\n", named_rule);
        else {
            gb_printf(&b, "calls ::=");
            size_t k = 0;
            json_array_foreach(tools, i, t) gb_printf(&b, "%s t%zu-call", k++ ? " |" : "", i);
            gb_put(&b, "\n", 1);
            /* functionary in auto: the prompt ends with ">>>", so the answer is a call or
               "all\n" text (no '>'), then maybe a call */
            if (sh->open_in_prompt && mode == SRV_TOOLS_AUTO)
                gb_printf(&b, "root ::= calls | \"all\\n\" [^>]* ( \">>>\" calls )?\n");
            else gb_printf(&b, "root ::= calls\n");
        }
    }
    if (st == NX_STATUS_OK && b.oom) {
        snprintf(err, errlen, "out of memory");
        st = NX_STATUS_NOMEM;
    }
    if (st == NX_STATUS_OK) {
        if (getenv("NX_DUMP_TOOL_GRAMMAR")) fprintf(stderr, "%s\n", b.p);
        st = nx_grammar_from_schema_gbnf(b.p, b.n, NULL, &c->grammar, err, errlen);
    }
    nx_free(b.p);
    if (st) {
        srv_constraint_free(c);
        return st;
    }
    if (mode == SRV_TOOLS_AUTO && !sh->open_in_prompt) c->trigger = sh->open;
    else if (mode == SRV_TOOLS_REQUIRED && !sh->open_in_prompt) c->prefill = sh->open;
    return NX_STATUS_OK;
}

static nx_status constraint_build(enum nx_tool_format family, const char *form, json_t *tools,
                                  enum srv_tool_mode mode, const char *name, json_t *rf,
                                  struct srv_constraint *c, char *err, size_t errlen);

nx_status srv_constraint_build(enum nx_tool_format family, const char *form, json_t *tools,
                               enum srv_tool_mode mode, const char *name, json_t *rf,
                               struct srv_constraint *c, char *err, size_t errlen) {
    nx_status st = constraint_build(family, form, tools, mode, name, rf, c, err, errlen);
    if (st) srv_constraint_free(c); /* a failed build holds nothing */
    return st;
}

static nx_status constraint_build(enum nx_tool_format family, const char *form, json_t *tools,
                                  enum srv_tool_mode mode, const char *name, json_t *rf,
                                  struct srv_constraint *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->prefill = "";
    c->suffix = "";
    /* a template that shows no tool calls (or the generic form) gets the Hermes shape; the
       families of chat/callshape.h their own; any other is refused below, never left free */
    bool has_grammar = family == NX_TOOL_FORMAT_HERMES || family == NX_TOOL_FORMAT_MISTRAL ||
                       family == NX_TOOL_FORMAT_LLAMA3 || family == NX_TOOL_FORMAT_DEEPSEEK;
    const struct chat_call_shape *shape = shape_of(&family, form);
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
    c->tools_json = nx_json_dumps(tools, JSON_COMPACT);
    if (!c->tools_json) {
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    if (family != NX_TOOL_FORMAT_HERMES && !has_grammar && !shape) {
        srv_constraint_free(c);
        snprintf(err, errlen, "this model's chat template writes tool calls in the %s family, for which there "
                 "is no tool-call grammar: tools cannot be constrained (send tool_choice \"none\", or serve with "
                 "a --chat-template of another family)", nx_tool_format_name(family));
        return NX_STATUS_UNSUPPORTED;
    }
    if (shape) {
        /* validate the tools as the other families do (call_schema), then build the shape */
        json_t *body;
        nx_status vs = call_schema(family, tools, mode, name, &body, err, errlen);
        if (vs) {
            srv_constraint_free(c);
            return vs;
        }
        json_decref(body);
        return shape_constraint(shape, tools, mode, name, c, err, errlen);
    }
    json_t *body;
    nx_status st = call_schema(family, tools, mode, name, &body, err, errlen);
    if (st) return st;
    if (mode == SRV_TOOLS_NAMED) {
        /* the router chose the tool: the answer starts with the call up to its arguments,
           and only those are generated, under the tool's full schema */
        json_decref(body);
        st = named_prefill(family, form, name, c);
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
    nx_free(c->tools_json);
    c->tools_json = NULL;
    nx_free(c->owned);
    c->owned = NULL;
    c->prefill = "";
}

/* the names of the tools, checked as a request's (call_schema) */
static nx_status pick_tools_check(enum nx_tool_format family, const struct chat_call_shape *sh, json_t *tools,
                                  char *err, size_t errlen) {
    json_t *body = NULL;
    nx_status st = call_schema(family, tools, SRV_TOOLS_AUTO, NULL, &body, err, errlen);
    json_decref(body);
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *fname = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (!st && sh && !plain_name(fname)) {
            snprintf(err, errlen, "tools[%zu]: the name '%s' has characters the %s family cannot write (want "
                     "letters, digits, '_', '-', '.')", i, fname, nx_tool_format_name(sh->family));
            st = NX_STATUS_UNSUPPORTED;
        }
    }
    return st;
}

nx_status srv_pick_build(enum nx_tool_format family, const char *form, json_t *tools, enum srv_tool_mode mode,
                         struct srv_constraint *c, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    c->prefill = "";
    c->suffix = "";
    const struct chat_call_shape *sh = shape_of(&family, form);
    c->format = family;
    c->tools = true;
    if (family != NX_TOOL_FORMAT_HERMES && family != NX_TOOL_FORMAT_MISTRAL && family != NX_TOOL_FORMAT_LLAMA3 &&
        family != NX_TOOL_FORMAT_DEEPSEEK && !sh) {
        snprintf(err, errlen, "the %s family has no tool-call grammar", nx_tool_format_name(family));
        return NX_STATUS_UNSUPPORTED;
    }
    nx_status st = pick_tools_check(family, sh, tools, err, errlen);
    if (st) return st;
    struct gb b = {0};
    gb_printf(&b, "calls ::=");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char *tail = call_tail(family, sh, json_string_value(json_object_get(json_object_get(t, "function"), "name")));
        if (!tail) b.oom = true;
        gb_printf(&b, "%s%s%s", i ? " |" : "", sh && sh->id_gbnf ? " " : "", sh && sh->id_gbnf ? sh->id_gbnf : "");
        LIT(&b, tail);
        nx_free(tail);
    }
    gb_put(&b, "\n", 1);
    bool from_start = sh && sh->open_in_prompt;
    if (from_start && mode == SRV_TOOLS_AUTO) gb_printf(&b, "root ::= calls | \"all\\n\" [^>]* ( \">>>\" calls )?\n");
    else gb_printf(&b, "root ::= calls\n");
    if (b.oom) {
        snprintf(err, errlen, "out of memory");
        st = NX_STATUS_NOMEM;
    } else st = nx_grammar_from_gbnf(b.p, b.n, NULL, &c->grammar, err, errlen);
    nx_free(b.p);
    if (st) return st;
    const char *open = sh ? (from_start ? NULL : sh->open) : plain_open(family);
    if (mode == SRV_TOOLS_AUTO) c->trigger = open;
    else c->prefill = open ? open : "";
    return NX_STATUS_OK;
}

int srv_pick_find(enum nx_tool_format family, const char *form, json_t *tools, const char *text) {
    const struct chat_call_shape *sh = shape_of(&family, form);
    int best = -1;
    size_t best_len = 0, i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char *tail = call_tail(family, sh, json_string_value(json_object_get(json_object_get(t, "function"), "name")));
        if (tail && strstr(text, tail) && strlen(tail) > best_len) {
            best = (int)i;
            best_len = strlen(tail);
        }
        nx_free(tail);
    }
    return best;
}
