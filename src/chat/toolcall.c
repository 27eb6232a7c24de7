/*
 * toolcall.c - tool calls parsed out of model output, per template family (include/nexus.h).
 *
 * DESIGN. One parser per family, each a scan for the family's markers plus JSON values read
 * with jansson (JSON_DISABLE_EOF_CHECK gives where a value ends, so calls may be followed by
 * more text or calls):
 *   hermes  <tool_call>{"name":..,"arguments":..}</tool_call>, repeated; inside the tags also
 *           the XML form <function=NAME><parameter=KEY>VALUE</parameter></function>
 *           (Qwen3-Coder, Nemotron) and NAME<arg_key>K</arg_key><arg_value>V</arg_value> (GLM-4.x);
 *           a missing closing tag is accepted when the JSON is whole;
 *   llama3  [<|python_tag|>]{"name":..,"parameters":..} separated by ';' or newlines, and
 *           functionary's <function=NAME>{...}</function>;
 *   mistral [TOOL_CALLS][{"name":..,"arguments":..,"id":..}, ...] and
 *           [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...} (repeated);
 *   generic {"tool_call": {...}} / {"tool_calls": [...]} / {"name":..,"arguments":..};
 *   deepseek <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>...
 *           (V3.1) and the R1 form function<｜tool▁sep｜>NAME ```json {...} ```;
 *   and the model-specific families (nexus.h): tagged-json (JSON calls between one of several
 *   tag pairs), xml-invoke (a table of invoke/parameter marker sets), kimi / solar / harmony
 *   (one marker-driven parser: optional id, name, JSON arguments), gemma4 and pythonic (small
 *   readers of their argument syntaxes into JSON), hy (the GLM reader with Hunyuan's tags),
 *   functionary v3.2 (>>>recipient segments).
 * Detection is a table of marker rules over the template text, the model-specific ones first.
 * Arguments given as a JSON string holding an object are decoded; arguments must end up an
 * object, written back compact (key order kept). Text outside calls is the content (trimmed).
 * A call that begins but does not parse is an error naming the byte offset and the problem;
 * nothing here can crash or loop on any input (every scan advances). Results are one
 * allocation-owning struct; strings are nx_malloc'd.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat/chat.h"
#include "core/alloc.h"
#include "core/json.h"
#include "nexus.h"

struct nx_tool_calls {
    char *content;
    struct nx_tool_call *calls;
    int32_t n, cap;
};

struct tcparse {
    const char *s;
    size_t n;
    nx_tool_calls *out;
    char *content;
    size_t clen, ccap;
    char *err;
    size_t errlen;
    nx_status st;
    json_t *tools; /* the request's tools (types of raw-text parameters), or NULL */
};

/* The parameters schema of tool NAME (OpenAI {"type":"function","function":{..}} or bare
 * {"name":..,"parameters":..} entries), or NULL. */
static json_t *tool_params(const struct tcparse *P, const char *name, size_t len) {
    size_t i;
    json_t *t;
    json_array_foreach(P->tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) fn = t;
        json_t *nm = json_object_get(fn, "name");
        if (json_is_string(nm) && json_string_length(nm) == len && !memcmp(json_string_value(nm), name, len))
            return json_object_get(fn, "parameters");
    }
    return NULL;
}

/* the schema of property KEY of an object schema (NULL when unknown) */
static json_t *prop_schema(json_t *obj, const char *key, size_t len) {
    json_t *props = json_object_get(obj, "properties");
    return props ? json_object_getn(props, key, len) : NULL;
}

/* a raw-text parameter value is kept as text when its schema's type is exactly "string" */
static bool string_schema(json_t *s) {
    json_t *ty = json_object_get(s, "type");
    return json_is_string(ty) && !strcmp(json_string_value(ty), "string");
}

static nx_status fail(struct tcparse *P, nx_status st, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static nx_status fail(struct tcparse *P, nx_status st, size_t at, const char *fmt, ...) {
    if (P->err && P->errlen) {
        char m[300];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(m, sizeof m, fmt, ap);
        va_end(ap);
        snprintf(P->err, P->errlen, "tool call at byte %zu: %s", at, m);
    }
    P->st = st;
    return st;
}

static char *dupn(const char *s, size_t n) {
    char *p = nx_malloc(n + 1);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static nx_status add_content(struct tcparse *P, const char *s, size_t n) {
    if (P->clen + n + 1 > P->ccap) {
        size_t cap = P->ccap ? P->ccap * 2 : 256;
        while (cap < P->clen + n + 1) cap *= 2;
        char *c = nx_realloc(P->content, cap);
        if (!c) return fail(P, NX_STATUS_NOMEM, 0, "out of memory");
        P->content = c;
        P->ccap = cap;
    }
    memcpy(P->content + P->clen, s, n);
    P->clen += n;
    P->content[P->clen] = 0;
    return NX_STATUS_OK;
}

/* Compact JSON like json_dumps(JSON_COMPACT), but each real with the fewest digits (15, 16 or
 * 17) that read back to the same double, so a number the model wrote as 0.762327 stays
 * 0.762327 and not 0.76232699999999998. Key order kept. false on out of memory. */
static bool put_compact(json_t *sb, const json_t *v, int depth) {
    char num[40];
    if (depth > 200) return false;
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *k;
        json_t *e;
        bool first = true, ok = !json_array_append_new(sb, json_string("{"));
        json_object_foreach((json_t *)v, k, e) {
            json_t *ks = json_string(k);
            char *kq = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
            json_decref(ks);
            ok = ok && kq && (first || !json_array_append_new(sb, json_string(","))) &&
                 !json_array_append_new(sb, json_string(kq)) && !json_array_append_new(sb, json_string(":")) &&
                 put_compact(sb, e, depth + 1);
            nx_free(kq);
            first = false;
        }
        return ok && !json_array_append_new(sb, json_string("}"));
    }
    case JSON_ARRAY: {
        size_t i;
        json_t *e;
        bool ok = !json_array_append_new(sb, json_string("["));
        json_array_foreach((json_t *)v, i, e) ok = ok && (!i || !json_array_append_new(sb, json_string(","))) &&
                                                   put_compact(sb, e, depth + 1);
        return ok && !json_array_append_new(sb, json_string("]"));
    }
    case JSON_REAL: {
        double x = json_real_value(v);
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(num, sizeof num, "%.*g", prec, x);
            if (strtod(num, NULL) == x) break;
        }
        char *plus = strstr(num, "e+");
        if (plus) memmove(plus + 1, plus + 2, strlen(plus + 2) + 1); /* 1e300, as jansson writes it */
        if (!strpbrk(num, ".eEn")) strcat(num, ".0"); /* still a real when read back */
        return !json_array_append_new(sb, json_string(num));
    }
    default: {
        char *t = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
        bool ok = t && !json_array_append_new(sb, json_string(t));
        nx_free(t);
        return ok;
    }
    }
}

static char *dump_shortest(const json_t *obj) {
    json_t *sb = json_array();
    char *out = NULL;
    if (sb && put_compact(sb, obj, 0)) {
        size_t n = 0, i;
        json_t *p;
        json_array_foreach(sb, i, p) n += json_string_length(p);
        if ((out = nx_malloc(n + 1))) {
            size_t o = 0;
            json_array_foreach(sb, i, p) {
                memcpy(out + o, json_string_value(p), json_string_length(p));
                o += json_string_length(p);
            }
            out[o] = 0;
        }
    }
    json_decref(sb);
    return out;
}

static nx_status add_call(struct tcparse *P, const char *name, size_t name_len, json_t *args, const char *id,
                          size_t at) {
    json_t *obj = args;
    json_t *decoded = NULL;
    if (!args) obj = NULL;
    else if (json_is_string(args)) {
        json_error_t je;
        decoded = json_loadb(json_string_value(args), json_string_length(args), 0, &je);
        if (!decoded || !json_is_object(decoded)) {
            json_decref(decoded);
            return fail(P, NX_STATUS_FORMAT, at, "arguments are a string that is not a JSON object");
        }
        obj = decoded;
    } else if (!json_is_object(args)) {
        return fail(P, NX_STATUS_FORMAT, at, "arguments are not a JSON object");
    }
    if (name_len == 0) {
        json_decref(decoded);
        return fail(P, NX_STATUS_FORMAT, at, "empty tool name");
    }
    char *a = obj ? dump_shortest(obj) : NULL;
    json_decref(decoded);
    if (obj && !a) return fail(P, NX_STATUS_NOMEM, at, "out of memory");
    nx_tool_calls *c = P->out;
    if (c->n == c->cap) {
        int32_t cap = c->cap ? c->cap * 2 : 4;
        struct nx_tool_call *nc = nx_realloc(c->calls, (size_t)cap * sizeof *nc);
        if (!nc) {
            nx_free(a);
            return fail(P, NX_STATUS_NOMEM, at, "out of memory");
        }
        c->calls = nc;
        c->cap = cap;
    }
    struct nx_tool_call *tc = &c->calls[c->n];
    tc->name = dupn(name, name_len);
    tc->arguments = dupn(a ? a : "{}", a ? strlen(a) : 2);
    tc->id = dupn(id ? id : "", id ? strlen(id) : 0);
    nx_free(a);
    c->n++;
    if (!tc->name || !tc->arguments || !tc->id) return fail(P, NX_STATUS_NOMEM, at, "out of memory");
    return NX_STATUS_OK;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static size_t skip_ws(const char *s, size_t n, size_t i) {
    while (i < n && is_ws(s[i])) i++;
    return i;
}
static const char *find(const char *s, size_t n, size_t from, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = from; i + k <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, k)) return s + i;
    return NULL;
}

/* One JSON value at s[*i]; *i after it. NULL (and P->st set) on error. */
static json_t *read_json(struct tcparse *P, size_t *i, size_t end) {
    json_error_t je;
    json_t *j = json_loadb(P->s + *i, end - *i, JSON_DISABLE_EOF_CHECK | JSON_DECODE_ANY, &je);
    if (!j) {
        fail(P, NX_STATUS_FORMAT, *i + (size_t)(je.position > 0 ? je.position : 0), "%s JSON: %s",
             je.position >= (int)(end - *i) ? "truncated" : "malformed", je.text);
        return NULL;
    }
    *i += je.position;
    return j;
}

/* {"name": .., "arguments"|"parameters": .., "id"?: ..} */
static nx_status call_from_object(struct tcparse *P, json_t *o, size_t at) {
    if (!json_is_object(o)) return fail(P, NX_STATUS_FORMAT, at, "expected a JSON object");
    json_t *fn = json_object_get(o, "function");
    if (json_is_object(fn) && !json_object_get(o, "name")) o = fn; /* OpenAI shape */
    json_t *name = json_object_get(o, "name");
    if (!name) name = json_object_get(o, "tool_name"); /* Cohere */
    if (!json_is_string(name)) return fail(P, NX_STATUS_FORMAT, at, "the call has no \"name\" string");
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    json_t *id = json_object_get(o, "id");
    if (!id) id = json_object_get(o, "tool_call_id");
    return add_call(P, json_string_value(name), json_string_length(name), args,
                    json_is_string(id) ? json_string_value(id) : NULL, at);
}

/* <function=NAME><parameter=K>V</parameter>...</function> in [i, end) (Qwen3-Coder XML form) */
static nx_status xml_function(struct tcparse *P, size_t i, size_t end) {
    const char *s = P->s;
    size_t at = i;
    i += strlen("<function=");
    const char *gt = find(s, end, i, ">");
    if (!gt) return fail(P, NX_STATUS_FORMAT, at, "truncated <function= tag");
    size_t name_at = i, name_len = (size_t)(gt - s) - i;
    i = (size_t)(gt - s) + 1;
    json_t *args = json_object();
    if (!args) return fail(P, NX_STATUS_NOMEM, at, "out of memory");
    nx_status st = NX_STATUS_OK;
    for (;;) {
        i = skip_ws(s, end, i);
        if (i + 11 <= end && !memcmp(s + i, "</function>", 11)) break;
        if (!(i + 11 <= end && !memcmp(s + i, "<parameter=", 11))) {
            st = fail(P, NX_STATUS_FORMAT, i, "expected <parameter= or </function>");
            break;
        }
        size_t k0 = i + 11;
        const char *kgt = find(s, end, k0, ">");
        const char *close = kgt ? find(s, end, (size_t)(kgt - s), "</parameter>") : NULL;
        if (!close) {
            st = fail(P, NX_STATUS_FORMAT, i, "truncated <parameter> (no </parameter>)");
            break;
        }
        size_t v0 = (size_t)(kgt - s) + 1, v1 = (size_t)(close - s);
        if (v0 < v1 && s[v0] == '\n') v0++;
        if (v1 > v0 && s[v1 - 1] == '\n') v1--;
        char *key = dupn(s + k0, (size_t)(kgt - s) - k0);
        bool as_string = string_schema(prop_schema(tool_params(P, s + name_at, name_len), s + k0, (size_t)(kgt - s) - k0));
        json_error_t je;
        json_t *v = as_string ? NULL : json_loadb(s + v0, v1 - v0, JSON_DECODE_ANY, &je);
        if (!v) v = json_stringn(s + v0, v1 - v0);
        if (!key || !v || json_object_set_new(args, key, v)) {
            nx_free(key);
            st = fail(P, NX_STATUS_NOMEM, i, "out of memory");
            break;
        }
        nx_free(key);
        i = v1 + strlen("</parameter>") + (s[v1] == '\n' ? 1 : 0);
        if (i > end) i = end;
    }
    if (st == NX_STATUS_OK) st = add_call(P, s + name_at, name_len, args, NULL, at);
    json_decref(args);
    return st;
}

/* The tags of GLM's key/value call form; Hunyuan's carry a ":opensource" suffix. */
struct glm_tags {
    const char *key_open, *key_close, *val_open, *val_close, *sep; /* sep: after the name, or NULL */
};
static const struct glm_tags GLM_TAGS = {"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", NULL};
static const struct glm_tags HY_TAGS = {"<arg_key:opensource>", "</arg_key:opensource>", "<arg_value:opensource>",
                                        "</arg_value:opensource>", "<tool_sep:opensource>"};

/* a parameter value: a JSON value when it is one (and not as_string), otherwise the text */
static json_t *param_value(const char *v, size_t n, bool as_string) {
    json_error_t je;
    json_t *j = as_string ? NULL : json_loadb(v, n, JSON_DECODE_ANY, &je);
    return j ? j : json_stringn(v, n);
}

/* NAME then <arg_key>K</arg_key><arg_value>V</arg_value> pairs in [i, end) (GLM-4.x form);
 * a value that is JSON is decoded, otherwise it is a string */
static nx_status glm_call(struct tcparse *P, size_t i, size_t end, const struct glm_tags *T) {
    const char *s = P->s;
    size_t at = i;
    const char *k = find(s, end, i, T->key_open);
    size_t name_end = k ? (size_t)(k - s) : end;
    const char *sep = T->sep ? find(s, name_end, i, T->sep) : NULL;
    if (sep) name_end = (size_t)(sep - s);
    while (name_end > i && is_ws(s[name_end - 1])) name_end--;
    for (size_t q = i; q < name_end; q++)
        if (s[q] == '<' || s[q] == '{' || s[q] == '"')
            return fail(P, NX_STATUS_FORMAT, q, "expected a tool name or a JSON object inside <tool_call>");
    json_t *args = json_object();
    if (!args) return fail(P, NX_STATUS_NOMEM, at, "out of memory");
    nx_status st = NX_STATUS_OK;
    size_t ko = strlen(T->key_open), vo = strlen(T->val_open);
    while (k) {
        size_t k0 = (size_t)(k - s) + ko;
        const char *k1 = find(s, end, k0, T->key_close);
        const char *v = k1 ? find(s, end, (size_t)(k1 - s), T->val_open) : NULL;
        const char *v1 = v ? find(s, end, (size_t)(v - s), T->val_close) : NULL;
        if (!v1) {
            st = fail(P, NX_STATUS_FORMAT, (size_t)(k - s), "truncated %s/%s pair", T->key_open, T->val_open);
            break;
        }
        size_t v0 = (size_t)(v - s) + vo;
        char *key = dupn(s + k0, (size_t)(k1 - s) - k0);
        bool as_string = string_schema(prop_schema(tool_params(P, s + i, name_end - i), s + k0, (size_t)(k1 - s) - k0));
        json_t *val = param_value(s + v0, (size_t)(v1 - s) - v0, as_string);
        if (!key || !val || json_object_set_new(args, key, val)) {
            nx_free(key);
            st = fail(P, NX_STATUS_NOMEM, at, "out of memory");
            break;
        }
        nx_free(key);
        k = find(s, end, (size_t)(v1 - s), T->key_open);
    }
    if (st == NX_STATUS_OK) st = add_call(P, s + i, name_end - i, args, NULL, at);
    json_decref(args);
    return st;
}

static nx_status parse_hermes(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    for (;;) {
        const char *open = find(s, n, i, "<tool_call>");
        if (!open) return add_content(P, s + i, n - i);
        size_t at = (size_t)(open - s);
        nx_status st = add_content(P, s + i, at - i);
        if (st) return st;
        size_t j = skip_ws(s, n, at + strlen("<tool_call>"));
        const char *close = find(s, n, j, "</tool_call>");
        size_t end = close ? (size_t)(close - s) : n;
        if (j >= end) return fail(P, NX_STATUS_FORMAT, at, close ? "empty <tool_call>" : "truncated: <tool_call> with nothing after it");
        if (end - j >= 10 && !memcmp(s + j, "<function=", 10)) {
            if ((st = xml_function(P, j, end))) return st;
        } else if (s[j] != '{') { /* GLM: NAME <arg_key>K</arg_key><arg_value>V</arg_value>... */
            if ((st = glm_call(P, j, end, &GLM_TAGS))) return st;
        } else {
            json_t *o = read_json(P, &j, end);
            if (!o) return P->st;
            st = call_from_object(P, o, at);
            json_decref(o);
            if (st) return st;
            j = skip_ws(s, end, j);
            if (j < end) return fail(P, NX_STATUS_FORMAT, j, "unexpected text after the call's JSON inside <tool_call>");
        }
        i = close ? end + strlen("</tool_call>") : n;
        if (i >= n) return NX_STATUS_OK;
    }
}

/* the first '{' followed (after spaces) by "name" */
static const char *find_name_object(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '{') continue;
        size_t j = skip_ws(s, n, i + 1);
        if (j + 6 <= n && !memcmp(s + j, "\"name\"", 6)) return s + i;
    }
    return NULL;
}

static nx_status parse_llama3(struct tcparse *P) {
    const char *s = P->s;
    size_t n = P->n;
    const char *tag = find(s, n, 0, "<|python_tag|>");
    const char *fx = find(s, n, 0, "<function=");
    const char *js = find_name_object(s, n);
    nx_status st;
    if (fx && (!tag || fx < tag) && (!js || fx < js)) { /* functionary: <function=NAME>{json}</function> */
        size_t i = 0;
        for (;;) {
            const char *f = find(s, n, i, "<function=");
            if (!f) return add_content(P, s + i, n - i);
            size_t at = (size_t)(f - s);
            if ((st = add_content(P, s + i, at - i))) return st;
            const char *gt = find(s, n, at, ">");
            if (!gt) return fail(P, NX_STATUS_FORMAT, at, "truncated <function= tag");
            size_t j = (size_t)(gt - s) + 1;
            const char *close = find(s, n, j, "</function>");
            size_t end = close ? (size_t)(close - s) : n;
            json_t *args = read_json(P, &j, end);
            if (!args) return P->st;
            st = add_call(P, s + at + 10, (size_t)(gt - s) - at - 10, args, NULL, at);
            json_decref(args);
            if (st) return st;
            i = close ? end + strlen("</function>") : n;
            if (i >= n) return NX_STATUS_OK;
        }
    }
    size_t start;
    if (tag && (!js || tag < js)) start = (size_t)(tag - s);
    else if (js) start = (size_t)(js - s);
    else return add_content(P, s, n);
    if ((st = add_content(P, s, start))) return st;
    size_t i = start;
    if (tag && start == (size_t)(tag - s)) i += strlen("<|python_tag|>");
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n) return NX_STATUS_OK;
        if (s[i] != '{') return add_content(P, s + i, n - i);
        size_t at = i;
        json_t *o = read_json(P, &i, n);
        if (!o) return P->st;
        st = call_from_object(P, o, at);
        json_decref(o);
        if (st) return st;
        i = skip_ws(s, n, i);
        if (i < n && s[i] == ';') i++;
    }
}

static nx_status parse_mistral(struct tcparse *P) {
    const char *s = P->s;
    size_t n = P->n;
    const char *tc = find(s, n, 0, "[TOOL_CALLS]");
    if (!tc) return add_content(P, s, n);
    size_t i = (size_t)(tc - s);
    nx_status st = add_content(P, s, i);
    if (st) return st;
    while (i < n) {
        if (!(i + 12 <= n && !memcmp(s + i, "[TOOL_CALLS]", 12))) return add_content(P, s + i, n - i);
        size_t at = i;
        i = skip_ws(s, n, i + 12);
        if (i >= n) return fail(P, NX_STATUS_FORMAT, at, "truncated: [TOOL_CALLS] with nothing after it");
        if (s[i] == '[') { /* [TOOL_CALLS][{...}, ...] */
            json_t *arr = read_json(P, &i, n);
            if (!arr) return P->st;
            if (!json_is_array(arr)) {
                json_decref(arr);
                return fail(P, NX_STATUS_FORMAT, at, "[TOOL_CALLS] is not followed by a JSON array");
            }
            size_t k;
            json_t *o;
            json_array_foreach(arr, k, o) {
                if ((st = call_from_object(P, o, at))) break;
            }
            json_decref(arr);
            if (st) return st;
        } else { /* NAME[CALL_ID]ID[ARGS]{...} */
            const char *args_tag = find(s, n, i, "[ARGS]");
            if (!args_tag) return fail(P, NX_STATUS_FORMAT, at, "truncated: no [ARGS] after the tool name");
            size_t name_end = (size_t)(args_tag - s);
            const char *cid = find(s, name_end, i, "[CALL_ID]");
            char id[128] = "";
            size_t name_stop = name_end;
            if (cid) {
                name_stop = (size_t)(cid - s);
                size_t id0 = name_stop + 9, idn = name_end - id0;
                if (idn >= sizeof id) idn = sizeof id - 1;
                memcpy(id, s + id0, idn);
                id[idn] = 0;
            }
            size_t j = name_end + 6;
            json_t *args = read_json(P, &j, n);
            if (!args) return P->st;
            size_t nl = name_stop - i;
            while (nl && is_ws(s[i + nl - 1])) nl--;
            st = add_call(P, s + i, nl, args, id, at);
            json_decref(args);
            if (st) return st;
            i = j;
        }
        i = skip_ws(s, n, i);
    }
    return NX_STATUS_OK;
}

#define DS_CALLS_BEGIN "<｜tool▁calls▁begin｜>"
#define DS_CALLS_END "<｜tool▁calls▁end｜>"
#define DS_CALL_BEGIN "<｜tool▁call▁begin｜>"
#define DS_CALL_END "<｜tool▁call▁end｜>"
#define DS_SEP "<｜tool▁sep｜>"

/* DeepSeek: <｜tool▁calls▁begin｜>(<｜tool▁call▁begin｜>CALL<｜tool▁call▁end｜>)+<｜tool▁calls▁end｜>
 * with CALL = NAME<｜tool▁sep｜>{json} (V3.1) or function<｜tool▁sep｜>NAME\n```json\n{json}\n``` (R1) */
static nx_status parse_deepseek(struct tcparse *P) {
    const char *s = P->s;
    size_t n = P->n;
    const char *b = find(s, n, 0, DS_CALLS_BEGIN);
    if (!b) return add_content(P, s, n);
    size_t i = (size_t)(b - s);
    nx_status st = add_content(P, s, i);
    if (st) return st;
    i += strlen(DS_CALLS_BEGIN);
    for (;;) {
        i = skip_ws(s, n, i);
        if (i >= n) return NX_STATUS_OK; /* generation stopped after the last call */
        if (i + strlen(DS_CALLS_END) <= n && !memcmp(s + i, DS_CALLS_END, strlen(DS_CALLS_END)))
            return add_content(P, s + i + strlen(DS_CALLS_END), n - i - strlen(DS_CALLS_END));
        if (!(i + strlen(DS_CALL_BEGIN) <= n && !memcmp(s + i, DS_CALL_BEGIN, strlen(DS_CALL_BEGIN))))
            return fail(P, NX_STATUS_FORMAT, i, "expected a tool call begin marker");
        size_t at = i;
        i += strlen(DS_CALL_BEGIN);
        const char *sep = find(s, n, i, DS_SEP);
        if (!sep) return fail(P, NX_STATUS_FORMAT, at, "truncated: no tool separator after the call begins");
        size_t name0 = i, name1 = (size_t)(sep - s);
        size_t j = name1 + strlen(DS_SEP);
        if (name1 - name0 == 8 && !memcmp(s + name0, "function", 8)) { /* R1: NAME then a ```json block */
            const char *fence = find(s, n, j, "```json");
            if (!fence) return fail(P, NX_STATUS_FORMAT, j, "truncated: no ```json block after the tool name");
            name0 = j;
            name1 = (size_t)(fence - s);
            j = name1 + 7;
        }
        while (name1 > name0 && is_ws(s[name1 - 1])) name1--;
        j = skip_ws(s, n, j);
        json_t *args = read_json(P, &j, n);
        if (!args) return P->st;
        st = add_call(P, s + name0, name1 - name0, args, NULL, at);
        json_decref(args);
        if (st) return st;
        j = skip_ws(s, n, j);
        if (j + 3 <= n && !memcmp(s + j, "```", 3)) j += 3;
        j = skip_ws(s, n, j);
        if (j < n) {
            if (!(j + strlen(DS_CALL_END) <= n && !memcmp(s + j, DS_CALL_END, strlen(DS_CALL_END))))
                return fail(P, NX_STATUS_FORMAT, j, "expected the tool call end marker");
            j += strlen(DS_CALL_END);
        }
        i = j;
    }
}

static nx_status parse_generic(struct tcparse *P) {
    const char *s = P->s;
    size_t n = P->n, i = skip_ws(s, n, 0);
    if (i >= n || s[i] != '{') return add_content(P, s, n);
    size_t at = i;
    json_t *o = read_json(P, &i, n);
    if (!o) return P->st;
    nx_status st = NX_STATUS_OK;
    json_t *one = json_object_get(o, "tool_call"), *many = json_object_get(o, "tool_calls");
    json_t *resp = json_object_get(o, "response");
    if (one) st = call_from_object(P, one, at);
    else if (json_is_array(many)) {
        size_t k;
        json_t *c;
        json_array_foreach(many, k, c) {
            if ((st = call_from_object(P, c, at))) break;
        }
    } else if (json_object_get(o, "name")) st = call_from_object(P, o, at);
    else if (json_is_string(resp)) st = add_content(P, json_string_value(resp), json_string_length(resp));
    else st = fail(P, NX_STATUS_FORMAT, at, "a JSON object with neither \"tool_call\", \"tool_calls\", \"name\" nor \"response\"");
    json_decref(o);
    if (st) return st;
    return add_content(P, s + i, n - i);
}

static bool at_str(const char *s, size_t n, size_t i, const char *t) {
    size_t k = strlen(t);
    return i + k <= n && !memcmp(s + i, t, k);
}

/* the earliest of the NULL-terminated markers m[] in s[from, n): its index, or -1; *pos its offset */
static int find_first(const char *s, size_t n, size_t from, const char *const *m, size_t *pos) {
    int best = -1;
    for (int k = 0; m[k]; k++) {
        const char *p = find(s, best < 0 ? n : *pos + strlen(m[best]), from, m[k]);
        if (p && (best < 0 || (size_t)(p - s) < *pos)) {
            best = k;
            *pos = (size_t)(p - s);
        }
    }
    return best;
}

/* A call object of a JSON list: {"name"|"tool_name", "arguments"|"parameters"} or Apertus'
 * {NAME: {..}} (one key, an object value). */
static nx_status call_or_named_object(struct tcparse *P, json_t *o, size_t at) {
    if (json_is_object(o) && json_object_size(o) == 1 && !json_object_get(o, "name") &&
        !json_object_get(o, "tool_name") && !json_object_get(o, "function")) {
        const char *k = json_object_iter_key(json_object_iter(o));
        json_t *v = json_object_iter_value(json_object_iter(o));
        if (json_is_object(v)) return add_call(P, k, strlen(k), v, NULL, at);
    }
    return call_from_object(P, o, at);
}

/* tagged-json: calls between a model's own tags (the closing tag may be missing at the end) */
static const char *const TJ_OPEN[] = {"<tool_calls>", "<TOOLCALL>", "<seed:tool_call>", "<|START_ACTION|>",
                                      "<|function_call|>", "function call<|role_sep|>", "<|tools_prefix|>", NULL};
static const char *const TJ_CLOSE[] = {"</tool_calls>", "</TOOLCALL>", "</seed:tool_call>", "<|END_ACTION|>",
                                       "<|message_sep|>", "<|message_sep|>", "<|tools_suffix|>"};

static nx_status parse_tagged_json(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n, at = 0;
    nx_status st;
    for (;;) {
        int k = find_first(s, n, i, TJ_OPEN, &at);
        if (k < 0) return add_content(P, s + i, n - i);
        if ((st = add_content(P, s + i, at - i))) return st;
        size_t j = at + strlen(TJ_OPEN[k]);
        const char *close = find(s, n, j, TJ_CLOSE[k]);
        size_t end = close ? (size_t)(close - s) : n;
        int ncalls = 0;
        for (;;) {
            while (j < end && (is_ws(s[j]) || s[j] == ',')) j++;
            if (j >= end) break;
            if (at_str(s, end, j, "<function=")) { /* Seed-OSS: the Qwen3-Coder XML form */
                const char *fe = find(s, end, j, "</function>");
                if (!fe) return fail(P, NX_STATUS_FORMAT, j, "truncated: <function= without </function>");
                if ((st = xml_function(P, j, end))) return st;
                j = (size_t)(fe - s) + strlen("</function>");
            } else if (s[j] == '[' || s[j] == '{') {
                size_t c0 = j;
                json_t *v = read_json(P, &j, end);
                if (!v) return P->st;
                if (json_is_array(v)) {
                    size_t q;
                    json_t *o;
                    json_array_foreach(v, q, o) {
                        if ((st = call_or_named_object(P, o, c0))) break;
                    }
                } else st = call_or_named_object(P, v, c0);
                json_decref(v);
                if (st) return st;
            } else return fail(P, NX_STATUS_FORMAT, j, "unexpected text after %s (want JSON calls)", TJ_OPEN[k]);
            ncalls++;
        }
        if (!ncalls) return fail(P, NX_STATUS_FORMAT, at, "%s with no call after it", TJ_OPEN[k]);
        i = close ? end + strlen(TJ_CLOSE[k]) : n;
        if (i >= n) return NX_STATUS_OK;
    }
}

/* xml-invoke: one form's markers; the name and parameter keys are quoted attributes */
struct invoke_form {
    const char *wrap_open, *wrap_close; /* around a group of calls, or NULL */
    const char *call_open;              /* up to the name's opening quote */
    const char *head_end;               /* ends the call's opening tag */
    const char *param_open, *param_head_end, *param_close, *call_close;
};
static const struct invoke_form INVOKE_FORMS[] = {
    {"<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=\"", ">", "<parameter name=\"", ">", "</parameter>",
     "</invoke>"},
    {"<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "<｜DSML｜invoke name=\"", ">", "<｜DSML｜parameter name=\"",
     ">", "</｜DSML｜parameter>", "</｜DSML｜invoke>"},
    {"<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>", "<｜DSML｜invoke name=\"", ">", "<｜DSML｜parameter name=\"", ">",
     "</｜DSML｜parameter>", "</｜DSML｜invoke>"},
    {"<atem:function_calls>", "</atem:function_calls>", "<atem:invoke name=\"", ">", "<atem:parameter name=\"", ">",
     "</atem:parameter>", "</atem:invoke>"},
    {"<|open|>tools<|sep|>", "<|close|>tools<|sep|>", "<|open|>call tool=\"", "<|sep|>", "<|open|>argument key=\"",
     "<|sep|>", "<|close|>argument<|sep|>", "<|close|>call<|sep|>"},
    {NULL, NULL, "<function name=\"", ">", "<param name=\"", ">", "</param>", "</function>"}, /* MiniCPM */
};
#define N_INVOKE_FORMS (sizeof INVOKE_FORMS / sizeof INVOKE_FORMS[0])

/* one call of form F at s[*i] (at its call_open) up to end; *i after it */
static nx_status invoke_call(struct tcparse *P, const struct invoke_form *F, size_t *i, size_t end) {
    const char *s = P->s;
    size_t at = *i, j = *i + strlen(F->call_open);
    const char *q = find(s, end, j, "\"");
    const char *he = q ? find(s, end, (size_t)(q - s), F->head_end) : NULL;
    if (!he) return fail(P, NX_STATUS_FORMAT, at, "truncated %s tag", F->call_open);
    size_t name0 = j, name1 = (size_t)(q - s);
    j = (size_t)(he - s) + strlen(F->head_end);
    json_t *args = json_object();
    if (!args) return fail(P, NX_STATUS_NOMEM, at, "out of memory");
    nx_status st = NX_STATUS_OK;
    for (;;) {
        j = skip_ws(s, end, j);
        if (at_str(s, end, j, F->call_close)) {
            j += strlen(F->call_close);
            break;
        }
        if (!at_str(s, end, j, F->param_open)) {
            st = fail(P, NX_STATUS_FORMAT, j, j >= end ? "truncated: no %s" : "expected %s", j >= end ? F->call_close : F->param_open);
            break;
        }
        size_t k0 = j + strlen(F->param_open);
        const char *kq = find(s, end, k0, "\"");
        const char *ph = kq ? find(s, end, (size_t)(kq - s), F->param_head_end) : NULL;
        const char *pc = ph ? find(s, end, (size_t)(ph - s), F->param_close) : NULL;
        if (!pc) {
            st = fail(P, NX_STATUS_FORMAT, j, "truncated parameter (no %s)", F->param_close);
            break;
        }
        /* DSML marks string="true", Kimi-K3 type="string": the value is text, not JSON */
        size_t h0 = (size_t)(kq - s), h1 = (size_t)(ph - s);
        bool as_string = find(s, h1, h0, "string=\"true\"") || find(s, h1, h0, "type=\"string\"") ||
                         string_schema(prop_schema(tool_params(P, s + name0, name1 - name0), s + k0, h0 - k0));
        size_t v0 = h1 + strlen(F->param_head_end), v1 = (size_t)(pc - s);
        char *key = dupn(s + k0, h0 - k0);
        json_t *v = param_value(s + v0, v1 - v0, as_string);
        if (!key || !v || json_object_set_new(args, key, v)) {
            nx_free(key);
            st = fail(P, NX_STATUS_NOMEM, j, "out of memory");
            break;
        }
        nx_free(key);
        j = v1 + strlen(F->param_close);
    }
    if (st == NX_STATUS_OK) st = add_call(P, s + name0, name1 - name0, args, NULL, at);
    json_decref(args);
    *i = j;
    return st;
}

static nx_status parse_xml_invoke(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    const char *starts[N_INVOKE_FORMS + 1];
    for (size_t k = 0; k < N_INVOKE_FORMS; k++)
        starts[k] = INVOKE_FORMS[k].wrap_open ? INVOKE_FORMS[k].wrap_open : INVOKE_FORMS[k].call_open;
    starts[N_INVOKE_FORMS] = NULL;
    nx_status st;
    for (;;) {
        size_t at = 0;
        int k = find_first(s, n, i, starts, &at);
        if (k < 0) return add_content(P, s + i, n - i);
        if ((st = add_content(P, s + i, at - i))) return st;
        const struct invoke_form *F = &INVOKE_FORMS[k];
        size_t j = at;
        if (!F->wrap_open) {
            if ((st = invoke_call(P, F, &j, n))) return st;
            i = j;
            continue;
        }
        j += strlen(F->wrap_open);
        const char *close = find(s, n, j, F->wrap_close);
        size_t end = close ? (size_t)(close - s) : n;
        int ncalls = 0;
        for (;;) {
            j = skip_ws(s, end, j);
            if (j >= end) break;
            if (!at_str(s, end, j, F->call_open)) return fail(P, NX_STATUS_FORMAT, j, "expected %s", F->call_open);
            if ((st = invoke_call(P, F, &j, end))) return st;
            ncalls++;
        }
        if (!ncalls) return fail(P, NX_STATUS_FORMAT, at, "%s with no call after it", F->wrap_open);
        i = close ? end + strlen(F->wrap_close) : n;
    }
}

/* kimi / solar / harmony: a call is markers around an optional id, the name and JSON arguments */
struct marker_form {
    const char *const *skip; /* markers dropped from the content (sections), NULL-terminated */
    const char *call_open, *id_end, *name_end, *args_open, *call_close;
};
static const char *const KIMI_SKIP[] = {"<|tool_calls_section_begin|>", "<|tool_calls_section_end|>", NULL};
static const char *const SOLAR_SKIP[] = {"<|tool_calls|>", "<|calls|>", NULL};
static const char *const NO_SKIP[] = {NULL};
static const struct marker_form KIMI_FORM = {KIMI_SKIP, "<|tool_call_begin|>", NULL, "<|tool_call_argument_begin|>",
                                             "<|tool_call_argument_begin|>", "<|tool_call_end|>"};
static const struct marker_form SOLAR_FORM = {SOLAR_SKIP, "<|tool_call:begin|>", "<|tool_call:name|>", "<|tool_call:args|>",
                                              "<|tool_call:args|>", "<|tool_call:end|>"};
/* harmony: the name ends at the first character that cannot be in one */
static const struct marker_form HARMONY_FORM = {NO_SKIP, "to=functions.", NULL, NULL, "<|message|>", "<|call|>"};

static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

static nx_status parse_markers(struct tcparse *P, const struct marker_form *F) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    const char *starts[8];
    int ns = 0;
    starts[ns++] = F->call_open;
    for (int k = 0; F->skip[k] && ns < 7; k++) starts[ns++] = F->skip[k];
    starts[ns] = NULL;
    nx_status st;
    for (;;) {
        size_t at = 0;
        int k = find_first(s, n, i, starts, &at);
        if (k < 0) return add_content(P, s + i, n - i);
        if ((st = add_content(P, s + i, at - i))) return st;
        size_t j = at + strlen(starts[k]);
        if (k > 0) {
            i = j;
            continue;
        }
        char id[128] = "";
        if (F->id_end) {
            const char *ie = find(s, n, j, F->id_end);
            if (!ie) return fail(P, NX_STATUS_FORMAT, at, "truncated: no %s", F->id_end);
            size_t idn = (size_t)(ie - s) - j;
            if (idn >= sizeof id) return fail(P, NX_STATUS_FORMAT, j, "call id longer than %zu bytes", sizeof id - 1);
            memcpy(id, s + j, idn);
            id[idn] = 0;
            j = (size_t)(ie - s) + strlen(F->id_end);
        }
        size_t name0 = j, name1;
        if (F->name_end) {
            const char *ne = find(s, n, j, F->name_end);
            if (!ne) return fail(P, NX_STATUS_FORMAT, at, "truncated: no %s after the tool name", F->name_end);
            name1 = (size_t)(ne - s);
        } else {
            name1 = j;
            while (name1 < n && name_char(s[name1])) name1++;
        }
        const char *ao = find(s, n, name1, F->args_open);
        if (!ao) return fail(P, NX_STATUS_FORMAT, at, "truncated: no %s after the tool name", F->args_open);
        j = skip_ws(s, n, (size_t)(ao - s) + strlen(F->args_open));
        /* Kimi: functions.NAME:INDEX, the whole of it being the call id */
        if (F == &KIMI_FORM && name1 - name0 < sizeof id) {
            memcpy(id, s + name0, name1 - name0);
            id[name1 - name0] = 0;
            if (at_str(s, name1, name0, "functions.")) name0 += strlen("functions.");
            for (size_t q = name1; q > name0; q--)
                if (s[q - 1] == ':') {
                    name1 = q - 1;
                    break;
                }
        }
        json_t *args = read_json(P, &j, n);
        if (!args) return P->st;
        st = add_call(P, s + name0, name1 - name0, args, id, at);
        json_decref(args);
        if (st) return st;
        j = skip_ws(s, n, j);
        if (at_str(s, n, j, F->call_close)) j += strlen(F->call_close);
        else if (j < n) return fail(P, NX_STATUS_FORMAT, j, "expected %s after the arguments", F->call_close);
        i = j;
    }
}

/* hy: <tool_calls:opensource>(<tool_call:opensource>CALL</tool_call:opensource>)+</tool_calls:opensource> */
static nx_status parse_hy(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    static const char *const starts[] = {"<tool_call:opensource>", "<tool_calls:opensource>", "</tool_calls:opensource>", NULL};
    nx_status st;
    for (;;) {
        size_t at = 0;
        int k = find_first(s, n, i, starts, &at);
        if (k < 0) return add_content(P, s + i, n - i);
        if ((st = add_content(P, s + i, at - i))) return st;
        size_t j = at + strlen(starts[k]);
        if (k > 0) {
            i = j;
            continue;
        }
        const char *close = find(s, n, j, "</tool_call:opensource>");
        size_t end = close ? (size_t)(close - s) : n;
        j = skip_ws(s, end, j);
        if (j >= end) return fail(P, NX_STATUS_FORMAT, at, "empty <tool_call:opensource>");
        if ((st = glm_call(P, j, end, &HY_TAGS))) return st;
        i = close ? end + strlen("</tool_call:opensource>") : n;
    }
}

/* Values of the non-JSON argument syntaxes (gemma4, pythonic): a reader of one value, and of
 * an object key up to and past its ':' (nx_malloc'd). */
typedef json_t *(*value_reader)(struct tcparse *P, size_t *i, size_t end, int depth);
typedef char *(*key_reader)(struct tcparse *P, size_t *i, size_t end, int depth);

/* {KEY: VALUE, ..} or [VALUE, ..] at s[*i] (after spaces); *i after it */
static json_t *container(struct tcparse *P, size_t *i, size_t end, int depth, value_reader val, key_reader key) {
    const char *s = P->s;
    size_t j = skip_ws(s, end, *i);
    bool obj = s[j] == '{';
    json_t *c = obj ? json_object() : json_array();
    j++;
    for (;;) {
        j = skip_ws(s, end, j);
        if (j < end && s[j] == (obj ? '}' : ']')) {
            *i = j + 1;
            return c;
        }
        char *k = NULL;
        if (obj && !(k = key(P, &j, end, depth))) break;
        json_t *v = val(P, &j, end, depth + 1);
        int bad = !c || !v || (obj ? json_object_set_new(c, k, v) : json_array_append_new(c, v));
        nx_free(k);
        if (bad) {
            if (!v && P->st == NX_STATUS_OK) fail(P, NX_STATUS_NOMEM, j, "out of memory");
            json_decref(c);
            return NULL;
        }
        j = skip_ws(s, end, j);
        if (j < end && s[j] == ',') j++;
        else if (!(j < end && s[j] == (obj ? '}' : ']'))) break;
    }
    json_decref(c);
    if (P->st == NX_STATUS_OK) fail(P, NX_STATUS_FORMAT, j, j >= end ? "truncated arguments" : "expected ',' or a closing bracket");
    return NULL;
}

static json_t *gemma_value(struct tcparse *P, size_t *i, size_t end, int depth);
static json_t *py_value(struct tcparse *P, size_t *i, size_t end, int depth);

/* gemma4 keys are bare: up to the ':' */
static char *gemma_key(struct tcparse *P, size_t *i, size_t end, int depth) {
    size_t j = skip_ws(P->s, end, *i), k0 = j;
    while (j < end && P->s[j] != ':') j++;
    if (j >= end) return NULL;
    *i = j + 1;
    return dupn(P->s + k0, j - k0);
}

/* pythonic keys are string literals */
static char *py_key(struct tcparse *P, size_t *i, size_t end, int depth) {
    json_t *k = py_value(P, i, end, depth + 1);
    size_t j = skip_ws(P->s, end, *i);
    char *r = NULL;
    if (json_is_string(k) && j < end && P->s[j] == ':') {
        r = dupn(json_string_value(k), json_string_length(k));
        *i = j + 1;
    }
    json_decref(k);
    return r;
}

/* gemma4 values: {key:value,..}, [..], <|"|>text<|"|>, or a bare JSON scalar */
#define GQ "<|\"|>"
static json_t *gemma_value(struct tcparse *P, size_t *i, size_t end, int depth) {
    const char *s = P->s;
    size_t j = skip_ws(s, end, *i);
    if (depth > 64) {
        fail(P, NX_STATUS_FORMAT, j, "arguments nested deeper than 64");
        return NULL;
    }
    if (at_str(s, end, j, GQ)) {
        const char *e = find(s, end, j + 5, GQ);
        if (!e) {
            fail(P, NX_STATUS_FORMAT, j, "truncated string (no closing <|\"|>)");
            return NULL;
        }
        *i = (size_t)(e - s) + 5;
        return json_stringn(s + j + 5, (size_t)(e - s) - j - 5);
    }
    if (j < end && (s[j] == '{' || s[j] == '[')) return container(P, i, end, depth, gemma_value, gemma_key);
    size_t v0 = j;
    while (j < end && s[j] != ',' && s[j] != '}' && s[j] != ']') j++;
    size_t v1 = j;
    while (v1 > v0 && is_ws(s[v1 - 1])) v1--;
    json_error_t je;
    json_t *v = v1 > v0 ? json_loadb(s + v0, v1 - v0, JSON_DECODE_ANY, &je) : NULL;
    if (!v) {
        fail(P, NX_STATUS_FORMAT, v0, "expected a value");
        return NULL;
    }
    *i = j;
    return v;
}

static nx_status parse_gemma4(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    nx_status st;
    for (;;) {
        const char *o = find(s, n, i, "<|tool_call>");
        if (!o) return add_content(P, s + i, n - i);
        size_t at = (size_t)(o - s);
        if ((st = add_content(P, s + i, at - i))) return st;
        size_t j = at + strlen("<|tool_call>");
        if (!at_str(s, n, j, "call:")) return fail(P, NX_STATUS_FORMAT, j, "expected call:NAME after <|tool_call>");
        j += 5;
        size_t name0 = j;
        while (j < n && s[j] != '{') j++;
        if (j >= n) return fail(P, NX_STATUS_FORMAT, at, "truncated: no arguments after the tool name");
        size_t name1 = j;
        json_t *args = gemma_value(P, &j, n, 0);
        if (!args) return P->st;
        st = add_call(P, s + name0, name1 - name0, args, NULL, at);
        json_decref(args);
        if (st) return st;
        if (at_str(s, n, j, "<tool_call|>")) j += strlen("<tool_call|>");
        i = j;
    }
}

/* pythonic values: 'text' / "text" (backslash escapes), numbers, True / False / None, [..], {k: v} */
static json_t *py_value(struct tcparse *P, size_t *i, size_t end, int depth) {
    const char *s = P->s;
    size_t j = skip_ws(s, end, *i);
    if (depth > 64) {
        fail(P, NX_STATUS_FORMAT, j, "arguments nested deeper than 64");
        return NULL;
    }
    if (j < end && (s[j] == '\'' || s[j] == '"')) {
        char q = s[j];
        char *buf = nx_malloc(end - j + 1);
        if (!buf) {
            fail(P, NX_STATUS_NOMEM, j, "out of memory");
            return NULL;
        }
        size_t b = 0, k = j + 1;
        while (k < end && s[k] != q) {
            if (s[k] == '\\' && k + 1 < end) {
                k++;
                buf[b++] = s[k] == 'n' ? '\n' : s[k] == 't' ? '\t' : s[k];
            } else buf[b++] = s[k];
            k++;
        }
        if (k >= end) {
            nx_free(buf);
            fail(P, NX_STATUS_FORMAT, j, "truncated string");
            return NULL;
        }
        json_t *v = json_stringn(buf, b);
        nx_free(buf);
        *i = k + 1;
        return v;
    }
    if (j < end && (s[j] == '[' || s[j] == '{')) return container(P, i, end, depth, py_value, py_key);
    size_t v0 = j;
    while (j < end && (name_char(s[j]) || s[j] == '+')) j++;
    size_t len = j - v0;
    if (len == 4 && !memcmp(s + v0, "True", 4)) return *i = j, json_true();
    if (len == 5 && !memcmp(s + v0, "False", 5)) return *i = j, json_false();
    if (len == 4 && !memcmp(s + v0, "None", 4)) return *i = j, json_null();
    json_error_t je;
    json_t *v = len ? json_loadb(s + v0, len, JSON_DECODE_ANY, &je) : NULL;
    if (!json_is_number(v)) {
        json_decref(v);
        fail(P, NX_STATUS_FORMAT, v0, "expected a Python literal");
        return NULL;
    }
    *i = j;
    return v;
}

/* pythonic: <|tool_call_start|>[NAME(key=value, ..), ..]<|tool_call_end|> */
static nx_status parse_pythonic(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    nx_status st;
    for (;;) {
        const char *o = find(s, n, i, "<|tool_call_start|>");
        if (!o) return add_content(P, s + i, n - i);
        size_t at = (size_t)(o - s);
        if ((st = add_content(P, s + i, at - i))) return st;
        const char *close = find(s, n, at, "<|tool_call_end|>");
        size_t end = close ? (size_t)(close - s) : n;
        size_t j = skip_ws(s, end, at + strlen("<|tool_call_start|>"));
        if (!(j < end && s[j] == '[')) return fail(P, NX_STATUS_FORMAT, j, "expected '[' after <|tool_call_start|>");
        j++;
        for (;;) {
            j = skip_ws(s, end, j);
            if (j < end && s[j] == ']') break;
            size_t name0 = j;
            while (j < end && name_char(s[j])) j++;
            size_t name1 = j;
            if (!(j < end && s[j] == '(')) return fail(P, NX_STATUS_FORMAT, j, j >= end ? "truncated call" : "expected '(' after the tool name");
            j++;
            json_t *args = json_object();
            if (!args) return fail(P, NX_STATUS_NOMEM, j, "out of memory");
            for (;;) {
                j = skip_ws(s, end, j);
                if (j < end && s[j] == ')') break;
                size_t k0 = j;
                while (j < end && name_char(s[j])) j++;
                size_t k1 = j;
                j = skip_ws(s, end, j);
                if (k1 == k0 || !(j < end && s[j] == '=')) {
                    json_decref(args);
                    return fail(P, NX_STATUS_FORMAT, j, j >= end ? "truncated call" : "expected key=value");
                }
                j++;
                json_t *v = py_value(P, &j, end, 0);
                char *key = v ? dupn(s + k0, k1 - k0) : NULL;
                if (!v || !key || json_object_set_new(args, key, v)) {
                    nx_free(key);
                    json_decref(args);
                    return v ? fail(P, NX_STATUS_NOMEM, j, "out of memory") : P->st;
                }
                nx_free(key);
                j = skip_ws(s, end, j);
                if (j < end && s[j] == ',') j++;
            }
            j++;
            st = add_call(P, s + name0, name1 - name0, args, NULL, name0);
            json_decref(args);
            if (st) return st;
            j = skip_ws(s, end, j);
            if (j < end && s[j] == ',') j++;
            else if (!(j < end && s[j] == ']')) return fail(P, NX_STATUS_FORMAT, j, j >= end ? "truncated: no ']'" : "expected ',' or ']'");
        }
        i = close ? end + strlen("<|tool_call_end|>") : n;
    }
}

/* functionary v3.2: segments >>>RECIPIENT\nBODY; recipient "all" is text, otherwise a tool name
 * and its JSON arguments. The generation prompt ends with ">>>", so the output may begin with
 * a recipient directly; a first segment that is not "NAME\n{" is content. */
static nx_status parse_functionary(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    nx_status st;
    while (i < n) {
        size_t seg = i;
        if (at_str(s, n, i, ">>>")) i += 3;
        size_t r1 = i;
        while (r1 < n && name_char(s[r1])) r1++;
        bool recipient = r1 > i && r1 < n && s[r1] == '\n';
        bool all = recipient && r1 - i == 3 && !memcmp(s + i, "all", 3);
        const char *next = find(s, n, i, ">>>");
        size_t end = next ? (size_t)(next - s) : n;
        size_t j = recipient ? skip_ws(s, end, r1 + 1) : end;
        if (!recipient || all || (seg == 0 && i == 0 && !(j < end && s[j] == '{'))) {
            size_t c0 = all ? r1 + 1 : seg;
            if ((st = add_content(P, s + c0, end - c0))) return st;
            i = end;
            continue;
        }
        json_t *args = read_json(P, &j, n);
        if (!args) return P->st;
        st = add_call(P, s + i, r1 - i, args, NULL, seg);
        json_decref(args);
        if (st) return st;
        next = find(s, n, j, ">>>");
        end = next ? (size_t)(next - s) : n;
        if ((st = add_content(P, s + j, end - j))) return st;
        i = end;
    }
    return NX_STATUS_OK;
}

/* MiniMax-M3: ]<]minimax[>[<tool_call>\n(]<]minimax[>[<invoke name="N">MEMBERS]<]minimax[>[</invoke>\n)+
 * ]<]minimax[>[</tool_call>, MEMBERS being ]<]minimax[>[<KEY>VALUE]<]minimax[>[</KEY> elements. A VALUE
 * is nested elements (an object; an array when every element is <item>) or text: kept as text
 * when its schema (from the tools, followed down) says string, else JSON when it decodes. */
#define MM3_NS "]<]minimax[>["
#define MM3_OPEN MM3_NS "<tool_call>"
#define MM3_CLOSE MM3_NS "</tool_call>"
#define MM3_NSL (sizeof MM3_NS - 1)

static json_t *mm3_value(struct tcparse *P, size_t *i, size_t end, const char *key, size_t klen, json_t *sch, int depth);

/* elements at s[*i] until NS</ (not consumed); into an object, or an array when all are <item> */
static json_t *mm3_elements(struct tcparse *P, size_t *i, size_t end, json_t *sch, int depth) {
    const char *s = P->s;
    json_t *obj = json_object(), *arr = json_array();
    bool all_items = true;
    size_t j = *i;
    if (!obj || !arr) goto nomem;
    while (at_str(s, end, j, MM3_NS "<") && !at_str(s, end, j, MM3_NS "</")) {
        size_t k0 = j + MM3_NSL + 1;
        const char *gt = find(s, end, k0, ">");
        if (!gt) {
            fail(P, NX_STATUS_FORMAT, j, "truncated element tag");
            goto bad;
        }
        size_t k1 = (size_t)(gt - s);
        for (size_t q = k0; q < k1; q++)
            if (s[q] == '<' || s[q] == '[' || s[q] == ']') {
                fail(P, NX_STATUS_FORMAT, j, "malformed element tag");
                goto bad;
            }
        bool item = k1 - k0 == 4 && !memcmp(s + k0, "item", 4);
        json_t *sub = item ? json_object_get(sch, "items") : prop_schema(sch, s + k0, k1 - k0);
        j = k1 + 1;
        json_t *v = mm3_value(P, &j, end, s + k0, k1 - k0, sub, depth + 1);
        if (!v) goto bad;
        char *key = dupn(s + k0, k1 - k0);
        if (!key || json_array_append(arr, v) || json_object_set_new(obj, key, v)) {
            nx_free(key);
            goto nomem;
        }
        nx_free(key);
        all_items = all_items && item;
    }
    *i = j;
    if (all_items && json_array_size(arr) > 0) {
        json_decref(obj);
        return arr;
    }
    json_decref(arr);
    return obj;
nomem:
    fail(P, NX_STATUS_NOMEM, j, "out of memory");
bad:
    json_decref(obj);
    json_decref(arr);
    return NULL;
}

/* the value of element KEY at s[*i] (after its opening tag) through its closing tag */
static json_t *mm3_value(struct tcparse *P, size_t *i, size_t end, const char *key, size_t klen, json_t *sch, int depth) {
    const char *s = P->s;
    size_t j = *i;
    if (depth > 64) {
        fail(P, NX_STATUS_FORMAT, j, "arguments nested deeper than 64");
        return NULL;
    }
    json_t *v;
    if (at_str(s, end, j, MM3_NS "<") && !at_str(s, end, j, MM3_NS "</")) {
        if (!(v = mm3_elements(P, &j, end, sch, depth))) return NULL;
    } else {
        const char *e = find(s, end, j, MM3_NS);
        if (!e) {
            fail(P, NX_STATUS_FORMAT, j, "truncated value of <%.*s>", (int)(klen > 64 ? 64 : klen), key);
            return NULL;
        }
        v = param_value(s + j, (size_t)(e - s) - j, string_schema(sch));
        if (!v) {
            fail(P, NX_STATUS_NOMEM, j, "out of memory");
            return NULL;
        }
        j = (size_t)(e - s);
    }
    /* NS</KEY> */
    if (!(at_str(s, end, j, MM3_NS "</") && j + MM3_NSL + 2 + klen < end && !memcmp(s + j + MM3_NSL + 2, key, klen) &&
          s[j + MM3_NSL + 2 + klen] == '>')) {
        json_decref(v);
        fail(P, NX_STATUS_FORMAT, j, j >= end ? "truncated: no closing tag of <%.*s>" : "expected the closing tag of <%.*s>",
             (int)(klen > 64 ? 64 : klen), key);
        return NULL;
    }
    *i = j + MM3_NSL + 3 + klen;
    return v;
}

static nx_status parse_minimax3(struct tcparse *P) {
    const char *s = P->s;
    size_t i = 0, n = P->n;
    nx_status st;
    for (;;) {
        const char *o = find(s, n, i, MM3_OPEN);
        if (!o) return add_content(P, s + i, n - i);
        size_t at = (size_t)(o - s);
        if ((st = add_content(P, s + i, at - i))) return st;
        const char *close = find(s, n, at, MM3_CLOSE);
        size_t end = close ? (size_t)(close - s) : n;
        size_t j = at + strlen(MM3_OPEN);
        int ncalls = 0;
        for (;;) {
            j = skip_ws(s, end, j);
            if (j >= end) break;
            if (!at_str(s, end, j, MM3_NS "<invoke name=\""))
                return fail(P, NX_STATUS_FORMAT, j, "expected " MM3_NS "<invoke name=\"");
            size_t name0 = j + MM3_NSL + strlen("<invoke name=\"");
            const char *q = find(s, end, name0, "\">");
            if (!q) return fail(P, NX_STATUS_FORMAT, j, "truncated <invoke name=\" tag");
            size_t name1 = (size_t)(q - s);
            size_t call_at = j;
            j = name1 + 2;
            json_t *params = tool_params(P, s + name0, name1 - name0);
            json_t *args = mm3_elements(P, &j, end, params, 0);
            if (!args) return P->st;
            if (!json_is_object(args)) { /* top-level <item> elements: keys, not a list */
                json_decref(args);
                return fail(P, NX_STATUS_FORMAT, call_at, "arguments are a list of <item> elements, not named parameters");
            }
            if (!at_str(s, end, j, MM3_NS "</invoke>")) {
                json_decref(args);
                return fail(P, NX_STATUS_FORMAT, j, j >= end ? "truncated: no " MM3_NS "</invoke>" : "expected " MM3_NS "</invoke>");
            }
            j += MM3_NSL + strlen("</invoke>");
            st = add_call(P, s + name0, name1 - name0, args, NULL, call_at);
            json_decref(args);
            if (st) return st;
            ncalls++;
        }
        if (!ncalls) return fail(P, NX_STATUS_FORMAT, at, MM3_OPEN " with no call after it");
        i = close ? end + strlen(MM3_CLOSE) : n;
        if (i >= n) return NX_STATUS_OK;
    }
}

static void trim_content(char *c) {
    if (!c) return;
    size_t n = strlen(c), a = 0;
    while (a < n && is_ws(c[a])) a++;
    while (n > a && is_ws(c[n - 1])) n--;
    memmove(c, c + a, n - a);
    c[n - a] = 0;
}

nx_status nx_tool_calls_parse(enum nx_tool_format f, const char *text, size_t len, nx_tool_calls **out,
                              char *err, size_t errlen) {
    return nx_tool_calls_parse_with_tools(f, text, len, NULL, out, err, errlen);
}

nx_status nx_tool_calls_parse_with_tools(enum nx_tool_format f, const char *text, size_t len, const char *tools_json,
                                         nx_tool_calls **out, char *err, size_t errlen) {
    if (!out) return NX_STATUS_INVALID_ARG;
    *out = NULL;
    if (!text || f < NX_TOOL_FORMAT_NONE || f > NX_TOOL_FORMAT_MINIMAX_M3) {
        if (err && errlen) snprintf(err, errlen, "%s", !text ? "text is NULL" : "unknown tool-call format");
        return NX_STATUS_INVALID_ARG;
    }
    json_t *tools = NULL;
    if (tools_json) {
        json_error_t je;
        bool oom = false;
        tools = nx_json_loadb(tools_json, strlen(tools_json), 0, &je, &oom);
        if (!json_is_array(tools)) {
            json_decref(tools);
            if (err && errlen)
                snprintf(err, errlen, "%s", oom ? "out of memory" : "tools: not a JSON array of tool definitions");
            return oom ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG;
        }
    }
    nx_tool_calls *c = nx_calloc(1, sizeof *c);
    if (!c) {
        json_decref(tools);
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    struct tcparse P = {.s = text, .n = len, .out = c, .err = err, .errlen = errlen, .tools = tools};
    nx_status st;
    switch (f) {
    case NX_TOOL_FORMAT_HERMES: st = parse_hermes(&P); break;
    case NX_TOOL_FORMAT_LLAMA3: st = parse_llama3(&P); break;
    case NX_TOOL_FORMAT_MISTRAL: st = parse_mistral(&P); break;
    case NX_TOOL_FORMAT_GENERIC: st = parse_generic(&P); break;
    case NX_TOOL_FORMAT_DEEPSEEK: st = parse_deepseek(&P); break;
    case NX_TOOL_FORMAT_TAGGED_JSON: st = parse_tagged_json(&P); break;
    case NX_TOOL_FORMAT_XML_INVOKE: st = parse_xml_invoke(&P); break;
    case NX_TOOL_FORMAT_KIMI: st = parse_markers(&P, &KIMI_FORM); break;
    case NX_TOOL_FORMAT_SOLAR: st = parse_markers(&P, &SOLAR_FORM); break;
    case NX_TOOL_FORMAT_HARMONY: st = parse_markers(&P, &HARMONY_FORM); break;
    case NX_TOOL_FORMAT_GEMMA4: st = parse_gemma4(&P); break;
    case NX_TOOL_FORMAT_HY: st = parse_hy(&P); break;
    case NX_TOOL_FORMAT_PYTHONIC: st = parse_pythonic(&P); break;
    case NX_TOOL_FORMAT_FUNCTIONARY: st = parse_functionary(&P); break;
    case NX_TOOL_FORMAT_MINIMAX_M3: st = parse_minimax3(&P); break;
    default: st = add_content(&P, text, len); break;
    }
    json_decref(tools);
    if (st == NX_STATUS_OK && !P.content) st = add_content(&P, "", 0);
    c->content = P.content;
    if (st != NX_STATUS_OK) {
        nx_tool_calls_free(c);
        return st;
    }
    trim_content(c->content);
    *out = c;
    return NX_STATUS_OK;
}

int32_t nx_tool_calls_count(const nx_tool_calls *c) { return c ? c->n : 0; }
const struct nx_tool_call *nx_tool_calls_get(const nx_tool_calls *c, int32_t i) {
    return (c && i >= 0 && i < c->n) ? &c->calls[i] : NULL;
}
const char *nx_tool_calls_content(const nx_tool_calls *c) { return c && c->content ? c->content : ""; }

void nx_tool_calls_free(nx_tool_calls *c) {
    if (!c) return;
    for (int32_t i = 0; i < c->n; i++) {
        nx_free((char *)c->calls[i].name);
        nx_free((char *)c->calls[i].arguments);
        nx_free((char *)c->calls[i].id);
    }
    nx_free(c->calls);
    nx_free(c->content);
    nx_free(c);
}

const char *nx_tool_format_name(enum nx_tool_format f) {
    switch (f) {
    case NX_TOOL_FORMAT_HERMES: return "hermes";
    case NX_TOOL_FORMAT_LLAMA3: return "llama3";
    case NX_TOOL_FORMAT_MISTRAL: return "mistral";
    case NX_TOOL_FORMAT_GENERIC: return "generic";
    case NX_TOOL_FORMAT_DEEPSEEK: return "deepseek";
    case NX_TOOL_FORMAT_TAGGED_JSON: return "tagged-json";
    case NX_TOOL_FORMAT_XML_INVOKE: return "xml-invoke";
    case NX_TOOL_FORMAT_KIMI: return "kimi";
    case NX_TOOL_FORMAT_SOLAR: return "solar";
    case NX_TOOL_FORMAT_HARMONY: return "harmony";
    case NX_TOOL_FORMAT_GEMMA4: return "gemma4";
    case NX_TOOL_FORMAT_HY: return "hy";
    case NX_TOOL_FORMAT_PYTHONIC: return "pythonic";
    case NX_TOOL_FORMAT_FUNCTIONARY: return "functionary";
    case NX_TOOL_FORMAT_MINIMAX_M3: return "minimax-m3";
    default: return "none";
    }
}

const char *nx_tool_format_trigger(enum nx_tool_format f) {
    switch (f) {
    case NX_TOOL_FORMAT_HERMES: return "<tool_call>";
    case NX_TOOL_FORMAT_LLAMA3: return "{\"name\"";
    case NX_TOOL_FORMAT_MISTRAL: return "[TOOL_CALLS]";
    case NX_TOOL_FORMAT_GENERIC: return "{\"";
    case NX_TOOL_FORMAT_DEEPSEEK: return DS_CALLS_BEGIN;
    case NX_TOOL_FORMAT_TAGGED_JSON: return "<tool_calls>";
    case NX_TOOL_FORMAT_XML_INVOKE: return "<invoke name=\"";
    case NX_TOOL_FORMAT_KIMI: return "<|tool_calls_section_begin|>";
    case NX_TOOL_FORMAT_SOLAR: return "<|tool_call:begin|>";
    case NX_TOOL_FORMAT_HARMONY: return "to=functions.";
    case NX_TOOL_FORMAT_GEMMA4: return "<|tool_call>";
    case NX_TOOL_FORMAT_HY: return "<tool_call:opensource>";
    case NX_TOOL_FORMAT_PYTHONIC: return "<|tool_call_start|>";
    case NX_TOOL_FORMAT_FUNCTIONARY: return ">>>";
    case NX_TOOL_FORMAT_MINIMAX_M3: return MM3_OPEN;
    default: return "";
    }
}

/* Detection: the first rule whose markers all occur in the template text. The model-specific
 * forms come before hermes (MiniMax and Apriel templates also mention <tool_call>). */
static const struct {
    enum nx_tool_format f;
    const char *m[3];
} DETECT[] = {
    {NX_TOOL_FORMAT_MINIMAX_M3, {MM3_NS, "<invoke name=", NULL}},
    {NX_TOOL_FORMAT_XML_INVOKE, {"｜DSML｜", NULL}},
    {NX_TOOL_FORMAT_XML_INVOKE, {"<minimax:tool_call>", NULL}},
    {NX_TOOL_FORMAT_XML_INVOKE, {"<atem:invoke", NULL}},
    {NX_TOOL_FORMAT_XML_INVOKE, {"<|open|>", "open_tag('call'", NULL}},
    {NX_TOOL_FORMAT_XML_INVOKE, {"<function name=", "<param name=", NULL}},
    {NX_TOOL_FORMAT_KIMI, {"<|tool_calls_section_begin|>", NULL}},
    {NX_TOOL_FORMAT_FUNCTIONARY, {">>>${recipient}", NULL}},
    {NX_TOOL_FORMAT_SOLAR, {"<|tool_call:begin|>", NULL}},
    {NX_TOOL_FORMAT_HARMONY, {"<|channel|>", " to=", NULL}},
    {NX_TOOL_FORMAT_GEMMA4, {"<|tool_call>", NULL}},
    {NX_TOOL_FORMAT_HY, {":opensource", "tool_call", NULL}},
    {NX_TOOL_FORMAT_PYTHONIC, {"<|tool_call_start|>", NULL}},
    {NX_TOOL_FORMAT_TAGGED_JSON, {"<tool_calls>", NULL}},
    {NX_TOOL_FORMAT_TAGGED_JSON, {"<TOOLCALL>", NULL}},
    {NX_TOOL_FORMAT_TAGGED_JSON, {"<seed:tool_call>", NULL}},
    {NX_TOOL_FORMAT_TAGGED_JSON, {"<|START_ACTION|>", NULL}},
    {NX_TOOL_FORMAT_TAGGED_JSON, {"<|function_call|>", NULL}},
    {NX_TOOL_FORMAT_TAGGED_JSON, {"'function call'", "<|role_sep|>", NULL}},
    {NX_TOOL_FORMAT_TAGGED_JSON, {"<|tools_prefix|>", NULL}},
    {NX_TOOL_FORMAT_HERMES, {"<tool_call>", NULL}},
    {NX_TOOL_FORMAT_DEEPSEEK, {"<｜tool▁calls▁begin｜>", NULL}},
    {NX_TOOL_FORMAT_MISTRAL, {"[TOOL_CALLS]", NULL}},
    {NX_TOOL_FORMAT_LLAMA3, {"<|python_tag|>", NULL}},
    {NX_TOOL_FORMAT_LLAMA3, {"<|start_header_id|>", "\"parameters\"", NULL}},
    {NX_TOOL_FORMAT_LLAMA3, {"<|start_header_id|>", "'parameters'", NULL}}, /* the built-in */
    {NX_TOOL_FORMAT_GENERIC, {"tool_calls", NULL}},
    {NX_TOOL_FORMAT_GENERIC, {"tools", NULL}},
};

enum nx_tool_format chat_tool_format_detect(const char *src) {
    for (size_t r = 0; r < sizeof DETECT / sizeof DETECT[0]; r++) {
        bool all = true;
        for (int k = 0; DETECT[r].m[k] && all; k++) all = strstr(src, DETECT[r].m[k]) != NULL;
        if (all) return DETECT[r].f;
    }
    return NX_TOOL_FORMAT_NONE;
}
