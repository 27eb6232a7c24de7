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
 *           (V3.1) and the R1 form function<｜tool▁sep｜>NAME ```json {...} ```.
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

#include "core/alloc.h"
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
};

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
    char *a = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
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
    if (!json_is_string(name)) return fail(P, NX_STATUS_FORMAT, at, "the call has no \"name\" string");
    json_t *args = json_object_get(o, "arguments");
    if (!args) args = json_object_get(o, "parameters");
    json_t *id = json_object_get(o, "id");
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
        json_error_t je;
        json_t *v = json_loadb(s + v0, v1 - v0, JSON_DECODE_ANY, &je);
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

/* NAME then <arg_key>K</arg_key><arg_value>V</arg_value> pairs in [i, end) (GLM-4.x form);
 * a value that is JSON is decoded, otherwise it is a string */
static nx_status glm_call(struct tcparse *P, size_t i, size_t end) {
    const char *s = P->s;
    size_t at = i;
    const char *k = find(s, end, i, "<arg_key>");
    size_t name_end = k ? (size_t)(k - s) : end;
    while (name_end > i && is_ws(s[name_end - 1])) name_end--;
    for (size_t q = i; q < name_end; q++)
        if (s[q] == '<' || s[q] == '{' || s[q] == '"')
            return fail(P, NX_STATUS_FORMAT, q, "expected a tool name or a JSON object inside <tool_call>");
    json_t *args = json_object();
    if (!args) return fail(P, NX_STATUS_NOMEM, at, "out of memory");
    nx_status st = NX_STATUS_OK;
    while (k) {
        size_t k0 = (size_t)(k - s) + 9;
        const char *k1 = find(s, end, k0, "</arg_key>");
        const char *v = k1 ? find(s, end, (size_t)(k1 - s), "<arg_value>") : NULL;
        const char *v1 = v ? find(s, end, (size_t)(v - s), "</arg_value>") : NULL;
        if (!v1) {
            st = fail(P, NX_STATUS_FORMAT, (size_t)(k - s), "truncated <arg_key>/<arg_value> pair");
            break;
        }
        size_t v0 = (size_t)(v - s) + 11;
        char *key = dupn(s + k0, (size_t)(k1 - s) - k0);
        json_error_t je;
        json_t *val = json_loadb(s + v0, (size_t)(v1 - s) - v0, JSON_DECODE_ANY, &je);
        if (!val) val = json_stringn(s + v0, (size_t)(v1 - s) - v0);
        if (!key || !val || json_object_set_new(args, key, val)) {
            nx_free(key);
            st = fail(P, NX_STATUS_NOMEM, at, "out of memory");
            break;
        }
        nx_free(key);
        k = find(s, end, (size_t)(v1 - s), "<arg_key>");
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
            if ((st = glm_call(P, j, end))) return st;
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
    if (!out) return NX_STATUS_INVALID_ARG;
    *out = NULL;
    if (!text || f < NX_TOOL_FORMAT_NONE || f > NX_TOOL_FORMAT_DEEPSEEK) {
        if (err && errlen) snprintf(err, errlen, "%s", !text ? "text is NULL" : "unknown tool-call format");
        return NX_STATUS_INVALID_ARG;
    }
    nx_tool_calls *c = nx_calloc(1, sizeof *c);
    if (!c) {
        if (err && errlen) snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    struct tcparse P = {.s = text, .n = len, .out = c, .err = err, .errlen = errlen};
    nx_status st;
    switch (f) {
    case NX_TOOL_FORMAT_HERMES: st = parse_hermes(&P); break;
    case NX_TOOL_FORMAT_LLAMA3: st = parse_llama3(&P); break;
    case NX_TOOL_FORMAT_MISTRAL: st = parse_mistral(&P); break;
    case NX_TOOL_FORMAT_GENERIC: st = parse_generic(&P); break;
    case NX_TOOL_FORMAT_DEEPSEEK: st = parse_deepseek(&P); break;
    default: st = add_content(&P, text, len); break;
    }
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
    default: return "";
    }
}
