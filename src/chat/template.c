/*
 * template.c - the public chat-template API (include/nexus.h): parse / open / render, the
 * built-in fallback templates, JSON input to interpreter values.
 *
 * DESIGN. A parsed template owns its normalized source (newlines as \n, one trailing newline
 * dropped, as jinja2 does) and the arena of its syntax tree; it is never modified after parse,
 * so renders may run concurrently. A render builds its own arena: the conversation JSON
 * (jansson) is converted into interpreter values, the globals are those Hugging Face passes
 * (messages, tools or None, documents None, add_generation_prompt, bos_token, eos_token, plus
 * the caller's extra variables), and the result is copied out with nx_malloc before the arena
 * goes. Errors come back as "KIND: message" with the interpreter's kind.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "chat/chat.h"
#include "chat/jinja.h"
#include "core/alloc.h"
#include "core/readfile.h"
#include "nexus.h"

#define MAX_SOURCE (4u << 20)

struct nx_chat_template {
    char *src;
    size_t n;
    struct jarena arena;
    struct jtemplate_ast ast;
    enum nx_tool_format fmt;
};

static const char TMPL_CHATML[] =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
    "{%- if message['content'] is string -%}{{- message['content'] -}}{%- endif -%}\n"
    "{%- if message.tool_calls is defined and message.tool_calls -%}\n"
    "{%- for tc in message.tool_calls -%}\n"
    "{%- set f = tc.function if tc.function is defined else tc -%}\n"
    "{{- '\\n<tool_call>\\n' + {'name': f.name, 'arguments': f.arguments} | tojson + '\\n</tool_call>' -}}\n"
    "{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";

static const char TMPL_LLAMA3[] =
    "{{- bos_token -}}\n"
    "{%- for message in messages -%}\n"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' -}}\n"
    "{%- if message.tool_calls is defined and message.tool_calls -%}\n"
    "{%- for tc in message.tool_calls -%}\n"
    "{%- set f = tc.function if tc.function is defined else tc -%}\n"
    "{{- {'name': f.name, 'parameters': f.arguments} | tojson -}}\n"
    "{%- endfor -%}\n"
    "{%- elif message['content'] is string -%}{{- message['content'] | trim -}}{%- endif -%}\n"
    "{{- '<|eot_id|>' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}\n";

static const char TMPL_MISTRAL[] =
    "{{- bos_token -}}\n"
    "{%- set ns = namespace(system='') -%}\n"
    "{%- for message in messages -%}\n"
    "{%- if message['role'] == 'system' -%}{%- set ns.system = message['content'] -%}\n"
    "{%- elif message['role'] == 'user' -%}\n"
    "{{- '[INST] ' + (ns.system + '\\n\\n' if ns.system else '') + message['content'] + '[/INST]' -}}\n"
    "{%- set ns.system = '' -%}\n"
    "{%- elif message['role'] == 'assistant' -%}\n"
    "{%- if message.tool_calls is defined and message.tool_calls -%}\n"
    "{%- set calls = [] -%}\n"
    "{{- '[TOOL_CALLS][' -}}\n"
    "{%- for tc in message.tool_calls -%}\n"
    "{%- set f = tc.function if tc.function is defined else tc -%}\n"
    "{{- {'name': f.name, 'arguments': f.arguments} | tojson -}}{{- ', ' if not loop.last else '' -}}\n"
    "{%- endfor -%}\n"
    "{{- ']' + eos_token -}}\n"
    "{%- else -%}{{- (message['content'] or '') + eos_token -}}{%- endif -%}\n"
    "{%- elif message['role'] == 'tool' -%}\n"
    "{{- '[TOOL_RESULTS]' + (message['content'] | string) + '[/TOOL_RESULTS]' -}}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n";

static void set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...) {
    if (!err || !errlen) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

nx_status nx_chat_template_parse(const char *source, size_t len, nx_chat_template **out, char *err,
                                 size_t errlen) {
    if (!out) return NX_STATUS_INVALID_ARG;
    *out = NULL;
    if (!source || len > MAX_SOURCE) {
        set_err(err, errlen, "template source %s", source ? "longer than 4 MiB" : "is NULL");
        return NX_STATUS_INVALID_ARG;
    }
    nx_chat_template *t = nx_calloc(1, sizeof *t);
    if (!t) goto nomem;
    t->src = nx_malloc(len + 1);
    if (!t->src) goto nomem;
    /* normalize newlines as jinja2's lexer does; drop one trailing newline */
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (source[i] == '\r') {
            t->src[n++] = '\n';
            if (i + 1 < len && source[i + 1] == '\n') i++;
        } else t->src[n++] = source[i];
    }
    if (n && t->src[n - 1] == '\n') n--;
    t->src[n] = 0;
    t->n = n;
    t->arena.limit = 256u << 20;
    struct jerr_ctx *e = nx_calloc(1, sizeof *e);
    if (!e) goto nomem;
    e->arena = &t->arena;
    if (setjmp(e->jmp)) {
        nx_status st = e->st;
        set_err(err, errlen, "%s", e->msg);
        nx_free(e);
        nx_chat_template_free(t);
        return st;
    }
    jinja_parse_src(e, t->src, t->n, &t->ast);
    nx_free(e);
    t->fmt = chat_tool_format_detect(t->src);
    *out = t;
    return NX_STATUS_OK;
nomem:
    nx_chat_template_free(t);
    set_err(err, errlen, "out of memory");
    return NX_STATUS_NOMEM;
}

const char *chat_builtin_source(const char *name) {
    if (!strcmp(name, "chatml")) return TMPL_CHATML;
    if (!strcmp(name, "llama3")) return TMPL_LLAMA3;
    if (!strcmp(name, "mistral")) return TMPL_MISTRAL;
    return NULL;
}

nx_status nx_chat_template_open(const char *spec, nx_chat_template **out, char *err, size_t errlen) {
    if (!out) return NX_STATUS_INVALID_ARG;
    *out = NULL;
    if (!spec) {
        set_err(err, errlen, "template spec is NULL");
        return NX_STATUS_INVALID_ARG;
    }
    const char *b = chat_builtin_source(spec);
    if (b) return nx_chat_template_parse(b, strlen(b), out, err, errlen);
    size_t n = 0;
    char msg[300];
    char *data = nx_read_file(spec, MAX_SOURCE, &n, msg, sizeof msg);
    if (!data) {
        set_err(err, errlen, "'%s' is neither a built-in template (chatml, llama3, mistral) nor a readable file: %s",
                spec, msg);
        return NX_STATUS_NOT_FOUND;
    }
    nx_status     st = nx_chat_template_parse(data, n, out, err, errlen);
    nx_free(data);
    return st;
}

nx_status nx_chat_template_from_model(const nx_model *model, nx_chat_template **out, char *err,
                                      size_t errlen) {
    if (!out) return NX_STATUS_INVALID_ARG;
    *out = NULL;
    const char *s = nx_model_chat_template(model);
    if (!s) {
        set_err(err, errlen, "the model has no tokenizer.chat_template");
        return NX_STATUS_NOT_FOUND;
    }
    return nx_chat_template_parse(s, strlen(s), out, err, errlen);
}

void nx_chat_template_free(nx_chat_template *t) {
    if (!t) return;
    jarena_free(&t->arena);
    nx_free(t->src);
    nx_free(t);
}

enum nx_tool_format nx_chat_template_tool_format(const nx_chat_template *t) {
    return t ? t->fmt : NX_TOOL_FORMAT_NONE;
}

struct nx_chat_params nx_chat_default_params(void) {
    struct nx_chat_params p = {0};
    return p;
}

void nx_chat_free_string(char *s) { nx_free(s); }

/* ---- JSON to values ---- */
static jval from_json(struct jerr_ctx *e, json_t *j, int depth) {
    if (depth > 128) jerr(e, NX_STATUS_INVALID_ARG, "json", "input nested too deeply");
    switch (json_typeof(j)) {
    case JSON_NULL: return jv_none();
    case JSON_TRUE: return jv_bool(true);
    case JSON_FALSE: return jv_bool(false);
    case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_STRING: {
        size_t n = json_string_length(j);
        return jv_str(jstrndup(e, json_string_value(j), n), n);
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        struct jlist *l = jlist_new(e, n);
        for (size_t i = 0; i < n; i++) jlist_push(e, l, from_json(e, json_array_get(j, i), depth + 1));
        return jv_list(l, 0);
    }
    case JSON_OBJECT: {
        struct jdict *d = jdict_new(e, json_object_size(j));
        const char *k;
        json_t *v;
        json_object_foreach(j, k, v) {
            size_t kn = strlen(k);
            jval key = jv_str(jstrndup(e, k, kn), kn);
            jval val = from_json(e, v, depth + 1);
            /* keys are unique in a jansson object: append without the lookup */
            if (d->n == d->cap) jdict_set(e, d, key, val);
            else {
                d->k[d->n] = key;
                d->v[d->n++] = val;
            }
        }
        return jv_dict(d);
    }
    }
    return jv_none();
}

static jval parse_json_arg(struct jerr_ctx *e, const char *text, const char *what, json_t **keep) {
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!j) jerr(e, NX_STATUS_INVALID_ARG, "json", "%s: line %d column %d: %s", what, je.line, je.column, je.text);
    *keep = j;
    return from_json(e, j, 0);
}

nx_status nx_chat_render(const nx_chat_template *t, const struct nx_chat_params *p, char **out,
                         size_t *out_len, char *err, size_t errlen) {
    if (!out) return NX_STATUS_INVALID_ARG;
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!t || !p || !p->messages_json) {
        set_err(err, errlen, "json: %s is NULL", !t ? "template" : !p ? "params" : "messages_json");
        return NX_STATUS_INVALID_ARG;
    }
    /* the error context and the arena live on the heap: longjmp leaves them intact */
    struct render_state { struct jerr_ctx e; struct jarena arena; } *rs = nx_calloc(1, sizeof *rs);
    if (!rs) {
        set_err(err, errlen, "nomem: out of memory");
        return NX_STATUS_NOMEM;
    }
    struct jerr_ctx *e = &rs->e;
    rs->arena.limit = 512u << 20;
    e->arena = &rs->arena;
    json_t *volatile jm = NULL, *volatile jt = NULL, *volatile jx = NULL;
    if (setjmp(e->jmp)) {
        nx_status st = e->st;
        set_err(err, errlen, "%s: %s", e->kind, e->msg);
        json_decref(jm);
        json_decref(jt);
        json_decref(jx);
        jarena_free(&rs->arena);
        nx_free(rs);
        return st;
    }
    struct jrender_opts o = {
        .now = p->now ? p->now : (int64_t)time(NULL),
        .max_output = p->max_output ? p->max_output : (4u << 20),
        .max_steps = p->max_steps ? p->max_steps : 1000000,
        .max_depth = 64,
    };
    struct jdict *g = jdict_new(e, 16);
    json_t *tmp;
    jval msgs = parse_json_arg(e, p->messages_json, "messages", &tmp);
    jm = tmp;
    if (msgs.t != JV_LIST) jerr(e, NX_STATUS_INVALID_ARG, "json", "messages must be a JSON array");
    jdict_set(e, g, jv_str("messages", 8), msgs);
    jval tools = jv_none();
    if (p->tools_json) {
        tools = parse_json_arg(e, p->tools_json, "tools", &tmp);
        jt = tmp;
    }
    jdict_set(e, g, jv_str("tools", 5), tools);
    jdict_set(e, g, jv_str("documents", 9), jv_none());
    jdict_set(e, g, jv_str("add_generation_prompt", 21), jv_bool(p->add_generation_prompt));
    if (p->bos_token) jdict_set(e, g, jv_str("bos_token", 9), jv_str(p->bos_token, strlen(p->bos_token)));
    if (p->eos_token) jdict_set(e, g, jv_str("eos_token", 9), jv_str(p->eos_token, strlen(p->eos_token)));
    if (p->extra_json) {
        jval x = parse_json_arg(e, p->extra_json, "extra", &tmp);
        jx = tmp;
        if (x.t != JV_DICT) jerr(e, NX_STATUS_INVALID_ARG, "json", "extra variables must be a JSON object");
        for (size_t i = 0; i < x.u.d->n; i++) jdict_set(e, g, x.u.d->k[i], x.u.d->v[i]);
    }
    o.globals = g;
    struct jbuf ob = {0};
    jinja_render_ast(e, &t->ast, &o, &ob);
    char *res = nx_malloc(ob.n + 1);
    if (!res) jerr(e, NX_STATUS_NOMEM, "nomem", "out of memory");
    if (ob.n) memcpy(res, ob.p, ob.n);
    res[ob.n] = 0;
    *out = res;
    if (out_len) *out_len = ob.n;
    json_decref(jm);
    json_decref(jt);
    json_decref(jx);
    jarena_free(&rs->arena);
    nx_free(rs);
    return NX_STATUS_OK;
}
