/* oai.c - checking OpenAI request bodies and building error bodies. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "server/oai.h"
#include "server/sessions.h"

static nx_status fail(nx_status st, char *err, size_t errlen, const char **param,
                      const char *name, const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static nx_status fail(nx_status st, char *err, size_t errlen, const char **param,
                      const char *name, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    *param = name;
    return st;
}

#define BAD(name, ...) fail(NX_STATUS_INVALID_ARG, err, errlen, param, name, __VA_ARGS__)
#define UNSUP(name, ...) fail(NX_STATUS_UNSUPPORTED, err, errlen, param, name, __VA_ARGS__)

/* A number field in [lo, hi]; absent or null leaves *v. */
static nx_status get_number(json_t *body, const char *name, double lo, double hi, double *v,
                            char *err, size_t errlen, const char **param) {
    json_t *j = json_object_get(body, name);
    if (!j || json_is_null(j)) return NX_STATUS_OK;
    if (!json_is_number(j)) return BAD(name, "'%s' must be a number", name);
    double x = json_number_value(j);
    if (!isfinite(x) || x < lo || x > hi)
        return BAD(name, "'%s' must be between %g and %g, got %g", name, lo, hi, x);
    *v = x;
    return NX_STATUS_OK;
}

static nx_status get_int(json_t *body, const char *name, long long lo, long long hi,
                         long long *v, bool *present, char *err, size_t errlen,
                         const char **param) {
    json_t *j = json_object_get(body, name);
    if (!j || json_is_null(j)) return NX_STATUS_OK;
    if (!json_is_integer(j)) return BAD(name, "'%s' must be an integer", name);
    long long x = json_integer_value(j);
    if (x < lo || x > hi)
        return BAD(name, "'%s' must be between %lld and %lld, got %lld", name, lo, hi, x);
    *v = x;
    if (present) *present = true;
    return NX_STATUS_OK;
}

static nx_status get_bool(json_t *body, const char *name, bool *v, char *err, size_t errlen,
                          const char **param) {
    json_t *j = json_object_get(body, name);
    if (!j || json_is_null(j)) return NX_STATUS_OK;
    if (!json_is_boolean(j)) return BAD(name, "'%s' must be a boolean", name);
    *v = json_is_true(j);
    return NX_STATUS_OK;
}

static nx_status get_model(json_t *body, char **model, char *err, size_t errlen,
                           const char **param) {
    json_t *j = json_object_get(body, "model");
    if (!j || json_is_null(j)) return NX_STATUS_OK;
    if (!json_is_string(j)) return BAD("model", "'model' must be a string");
    *model = nx_strdup(json_string_value(j));
    return *model ? NX_STATUS_OK : NX_STATUS_NOMEM;
}

static nx_status get_stop(json_t *body, struct srv_gen_request *r, char *err, size_t errlen,
                          const char **param) {
    json_t *j = json_object_get(body, "stop");
    if (!j || json_is_null(j)) return NX_STATUS_OK;
    json_t *one[1] = {j};
    json_t **items = one;
    size_t n = 1;
    if (json_is_array(j)) {
        n = json_array_size(j);
        if (n > SRV_MAX_STOP) return BAD("stop", "'stop' takes at most %d strings", SRV_MAX_STOP);
        items = NULL;
    } else if (!json_is_string(j)) {
        return BAD("stop", "'stop' must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(j, i);
        if (!json_is_string(s)) return BAD("stop", "'stop' must contain only strings");
        size_t len = json_string_length(s);
        if (len == 0) return BAD("stop", "'stop' strings must not be empty");
        if (len > SRV_STOP_MAX_LEN)
            return BAD("stop", "'stop' strings are limited to %d bytes", SRV_STOP_MAX_LEN);
        r->stop[r->n_stop] = nx_strdup(json_string_value(s));
        if (!r->stop[r->n_stop]) return NX_STATUS_NOMEM;
        r->n_stop++;
    }
    return NX_STATUS_OK;
}

/* Text of a message's content: a string, null, or an array of text parts. Borrowed pieces are
   appended to buf by the caller; here only checked. */
static bool content_ok(json_t *c) {
    if (!c || json_is_null(c) || json_is_string(c)) return true;
    if (!json_is_array(c)) return false;
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        json_t *type = json_object_get(part, "type");
        if (!json_is_object(part) || !json_is_string(type) ||
            strcmp(json_string_value(type), "text") || !json_is_string(json_object_get(part, "text")))
            return false;
    }
    return true;
}

static nx_status check_messages(json_t *msgs, const struct srv_limits *lim, char *err,
                                size_t errlen, const char **param) {
    if (!msgs) return BAD("messages", "'messages' is required");
    if (!json_is_array(msgs)) return BAD("messages", "'messages' must be an array");
    size_t n = json_array_size(msgs);
    if (n == 0) return BAD("messages", "'messages' must not be empty");
    if ((long long)n > lim->max_messages)
        return BAD("messages", "'messages' has %zu entries; this server takes at most %d", n,
                   (int)lim->max_messages);
    static const char *roles[] = {"system", "developer", "user", "assistant", "tool"};
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) return BAD("messages", "messages[%zu] must be an object", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) return BAD("messages", "messages[%zu].role must be a string", i);
        bool known = false;
        for (size_t k = 0; k < NX_ARRAY_LEN(roles); k++)
            if (!strcmp(json_string_value(role), roles[k])) known = true;
        if (!known)
            return BAD("messages", "messages[%zu].role '%s' is not one of system, developer, "
                       "user, assistant, tool", i, json_string_value(role));
        if (!content_ok(json_object_get(m, "content")))
            return BAD("messages", "messages[%zu].content must be a string, null or an array "
                       "of text parts", i);
    }
    return NX_STATUS_OK;
}

static nx_status parse_gen(json_t *body, enum srv_kind kind, const struct srv_limits *lim,
                           struct srv_gen_request *r, char *err, size_t errlen,
                           const char **param) {
    nx_status st;
    if (!json_is_object(body)) return BAD(NULL, "the request body must be a JSON object");
    if ((st = get_model(body, &r->model, err, errlen, param))) return st;
    if (kind == SRV_KIND_CHAT) {
        json_t *msgs = json_object_get(body, "messages");
        if ((st = check_messages(msgs, lim, err, errlen, param))) return st;
        r->messages = json_incref(msgs);
        json_t *tools = json_object_get(body, "tools");
        if (tools && !json_is_null(tools)) {
            if (!json_is_array(tools)) return BAD("tools", "'tools' must be an array");
            if (json_array_size(tools) > 512) return BAD("tools", "at most 512 tools");
            size_t i;
            json_t *t;
            json_array_foreach(tools, i, t) {
                json_t *fn = json_object_get(t, "function");
                if (!json_is_object(t) || !json_is_object(fn) ||
                    !json_is_string(json_object_get(fn, "name")))
                    return BAD("tools", "tools[%zu] must be {\"type\": \"function\", "
                               "\"function\": {\"name\": ...}}", i);
            }
            if (json_array_size(tools)) r->tools = json_incref(tools);
        }
        r->tool_mode = r->tools ? SRV_TOOLS_AUTO : SRV_TOOLS_NONE;
        json_t *choice = json_object_get(body, "tool_choice");
        if (choice && !json_is_null(choice)) {
            const char *c = json_string_value(choice);
            if (c && !strcmp(c, "none")) r->tool_mode = SRV_TOOLS_NONE;
            else if (c && !strcmp(c, "auto")) r->tool_mode = r->tools ? SRV_TOOLS_AUTO : SRV_TOOLS_NONE;
            else if (c && !strcmp(c, "required")) r->tool_mode = SRV_TOOLS_REQUIRED;
            else if (json_is_object(choice) &&
                     json_is_string(json_object_get(json_object_get(choice, "function"), "name"))) {
                r->tool_mode = SRV_TOOLS_NAMED;
                snprintf(r->tool_name, sizeof r->tool_name, "%s",
                         json_string_value(json_object_get(json_object_get(choice, "function"),
                                                           "name")));
            } else {
                return BAD("tool_choice", "'tool_choice' must be \"none\", \"auto\", "
                           "\"required\" or {\"type\": \"function\", \"function\": "
                           "{\"name\": ...}}");
            }
            if (r->tool_mode >= SRV_TOOLS_REQUIRED && !r->tools)
                return BAD("tool_choice", "'tool_choice' asks for a tool but 'tools' is empty");
        }
        r->parallel_tool_calls = true;
        if ((st = get_bool(body, "parallel_tool_calls", &r->parallel_tool_calls, err, errlen,
                           param)))
            return st;
        json_t *rf = json_object_get(body, "response_format");
        if (rf && !json_is_null(rf)) {
            json_t *type = json_object_get(rf, "type");
            if (!json_is_object(rf) || !json_is_string(type))
                return BAD("response_format", "'response_format' must be an object with a type");
            const char *t = json_string_value(type);
            if (strcmp(t, "text") && strcmp(t, "json_object") && strcmp(t, "json_schema"))
                return BAD("response_format", "response_format type '%s' is not one of text, "
                           "json_object, json_schema", t);
            if (!strcmp(t, "json_schema") &&
                !json_is_object(json_object_get(json_object_get(rf, "json_schema"), "schema")))
                return BAD("response_format", "response_format json_schema needs "
                           "json_schema.schema (an object)");
            r->response_format = json_incref(rf);
        }
    } else {
        json_t *p = json_object_get(body, "prompt");
        if (json_is_array(p) && json_array_size(p) == 1 && json_is_string(json_array_get(p, 0)))
            p = json_array_get(p, 0);
        if (!p) return BAD("prompt", "'prompt' is required");
        if (!json_is_string(p))
            return BAD("prompt", "'prompt' must be a string (or an array of one string)");
        r->prompt = nx_strdup(json_string_value(p));
        if (!r->prompt) return NX_STATUS_NOMEM;
        bool echo = false;
        if ((st = get_bool(body, "echo", &echo, err, errlen, param))) return st;
        if (echo) return UNSUP("echo", "'echo' is not supported");
        if (json_object_get(body, "suffix") && !json_is_null(json_object_get(body, "suffix")))
            return UNSUP("suffix", "'suffix' is not supported");
        long long best_of = 1;
        if ((st = get_int(body, "best_of", 1, 1, &best_of, NULL, err, errlen, param))) return st;
    }
    long long n = 1;
    if ((st = get_int(body, "n", 1, 1, &n, NULL, err, errlen, param))) return st;
    double pen = 0;
    if ((st = get_number(body, "presence_penalty", 0, 0, &pen, err, errlen, param))) return st;
    if ((st = get_number(body, "frequency_penalty", 0, 0, &pen, err, errlen, param))) return st;
    if ((st = get_stop(body, r, err, errlen, param))) return st;

    long long mt = kind == SRV_KIND_COMPLETION ? 16 : 0; /* OpenAI's completions default */
    bool has_mt = false;
    if ((st = get_int(body, "max_tokens", 1, lim->max_tokens, &mt, &has_mt, err, errlen, param)))
        return st;
    if ((st = get_int(body, "max_completion_tokens", 1, lim->max_tokens, &mt, &has_mt, err,
                      errlen, param)))
        return st;
    r->max_tokens = mt > 0 ? (int32_t)mt : lim->max_tokens;

    double temp = 1.0, top_p = 1.0;
    if ((st = get_number(body, "temperature", 0, 2, &temp, err, errlen, param))) return st;
    if ((st = get_number(body, "top_p", 0, 1, &top_p, err, errlen, param))) return st;
    if (top_p <= 0) return BAD("top_p", "'top_p' must be greater than 0");
    r->temperature = (float)temp;
    r->top_p = (float)top_p;
    long long seed = 0;
    if ((st = get_int(body, "seed", INT64_MIN, INT64_MAX, &seed, &r->has_seed, err, errlen,
                      param)))
        return st;
    r->seed = (uint64_t)seed;
    if ((st = get_bool(body, "stream", &r->stream, err, errlen, param))) return st;
    json_t *so = json_object_get(body, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) return BAD("stream_options", "'stream_options' must be an object");
        if ((st = get_bool(so, "include_usage", &r->include_usage, err, errlen, param))) return st;
    }
    json_t *sid = json_object_get(body, "session");
    if (sid && !json_is_null(sid)) {
        if (!json_is_string(sid) || !srv_session_id_valid(json_string_value(sid)))
            return BAD("session", "'session' must be 1-64 characters of A-Z a-z 0-9 - _");
        snprintf(r->session, sizeof r->session, "%s", json_string_value(sid));
    }
    r->kv = nx_kv_default_params();
    json_t *pol = json_object_get(body, "kv_policy");
    if (pol && !json_is_null(pol)) {
        if (!json_is_string(pol) || json_string_length(pol) >= sizeof r->kv_policy)
            return BAD("kv_policy", "'kv_policy' must be a policy name");
        snprintf(r->kv_policy, sizeof r->kv_policy, "%s", json_string_value(pol));
        r->has_kv = true;
    }
    double dens = -1;
    long long budget = 0;
    bool has_budget = false;
    if ((st = get_number(body, "kv_density", 0, 1, &dens, err, errlen, param))) return st;
    if ((st = get_int(body, "kv_budget", 1, INT32_MAX, &budget, &has_budget, err, errlen, param)))
        return st;
    if (dens >= 0 || has_budget) r->has_kv = true;
    if (r->has_kv) {
        if (!r->session[0])
            return BAD(r->kv_policy[0] ? "kv_policy" : dens >= 0 ? "kv_density" : "kv_budget",
                       "KV policy fields apply to sessions only (add 'session')");
        r->kv.policy = r->kv_policy[0] ? r->kv_policy : "full";
        if (dens >= 0) r->kv.density = (float)dens;
        if (has_budget) r->kv.budget = (int32_t)budget;
        r->kv.regime = NX_KV_REGIME_STREAM;
    }
    if (kind == SRV_KIND_CHAT) {
        if ((st = get_bool(body, "logprobs", &r->logprobs, err, errlen, param))) return st;
        long long tl = 0;
        bool has_tl = false;
        if ((st = get_int(body, "top_logprobs", 0, 20, &tl, &has_tl, err, errlen, param)))
            return st;
        if (has_tl && !r->logprobs)
            return BAD("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
        r->top_logprobs = (int32_t)tl;
    } else {
        long long lp = -1;
        bool has_lp = false;
        if ((st = get_int(body, "logprobs", 0, 5, &lp, &has_lp, err, errlen, param))) return st;
        r->logprobs = has_lp;
        r->top_logprobs = has_lp ? (int32_t)lp : 0;
    }
    return NX_STATUS_OK;
}

nx_status srv_parse_gen(json_t *body, enum srv_kind kind, const struct srv_limits *lim,
                        struct srv_gen_request *out, char *err, size_t errlen,
                        const char **param) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    *param = NULL;
    nx_status st = parse_gen(body, kind, lim, out, err, errlen, param);
    if (st == NX_STATUS_NOMEM) snprintf(err, errlen, "out of memory");
    if (st) srv_gen_request_free(out);
    return st;
}

void srv_gen_request_free(struct srv_gen_request *r) {
    nx_free(r->prompt);
    nx_free(r->model);
    for (int i = 0; i < r->n_stop; i++) nx_free(r->stop[i]);
    if (r->messages) json_decref(r->messages);
    if (r->tools) json_decref(r->tools);
    if (r->response_format) json_decref(r->response_format);
    memset(r, 0, sizeof *r);
}

nx_status srv_parse_embed(json_t *body, const struct srv_limits *lim,
                          struct srv_embed_request *out, char *err, size_t errlen,
                          const char **param) {
    memset(out, 0, sizeof *out);
    *param = NULL;
    nx_status st;
    if (!json_is_object(body)) return BAD(NULL, "the request body must be a JSON object");
    if ((st = get_model(body, &out->model, err, errlen, param))) goto fail;
    json_t *fmt = json_object_get(body, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        if (json_is_string(fmt) && !strcmp(json_string_value(fmt), "base64"))
            out->base64 = true;
        else if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "float")) {
            st = BAD("encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
            goto fail;
        }
    }
    if (json_object_get(body, "dimensions")) {
        st = UNSUP("dimensions", "'dimensions' is not supported");
        goto fail;
    }
    json_t *in = json_object_get(body, "input");
    if (!in) {
        st = BAD("input", "'input' is required");
        goto fail;
    }
    size_t n = json_is_array(in) ? json_array_size(in) : 1;
    if (!json_is_array(in) && !json_is_string(in)) {
        st = BAD("input", "'input' must be a string or an array of strings");
        goto fail;
    }
    if (n == 0 || (long long)n > lim->max_inputs) {
        st = BAD("input", "'input' must have 1 to %d entries", (int)lim->max_inputs);
        goto fail;
    }
    out->texts = nx_calloc(n, sizeof *out->texts);
    if (!out->texts) {
        st = NX_STATUS_NOMEM;
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(in) ? json_array_get(in, i) : in;
        if (!json_is_string(s)) {
            st = UNSUP("input", "'input' entries must be strings (token arrays are not "
                       "supported)");
            goto fail;
        }
        if (!json_string_length(s)) {
            st = BAD("input", "'input' strings must not be empty");
            goto fail;
        }
        out->texts[i] = nx_strdup(json_string_value(s));
        out->n = (int32_t)i + 1;
        if (!out->texts[i]) {
            st = NX_STATUS_NOMEM;
            goto fail;
        }
    }
    return NX_STATUS_OK;
fail:
    if (st == NX_STATUS_NOMEM) snprintf(err, errlen, "out of memory");
    srv_embed_request_free(out);
    return st;
}

void srv_embed_request_free(struct srv_embed_request *r) {
    for (int32_t i = 0; i < r->n; i++) nx_free(r->texts[i]);
    nx_free(r->texts);
    nx_free(r->model);
    memset(r, 0, sizeof *r);
}

char *srv_error_json(const char *message, const char *type, const char *param,
                     const char *code) {
    json_t *e = json_pack("{s:{s:s, s:s, s:s?, s:s?}}", "error", "message", message, "type", type,
                          "param", param, "code", code);
    if (!e) return NULL;
    char *s = json_dumps(e, JSON_COMPACT);
    json_decref(e);
    return s; /* jansson's allocator: the server sets it to nx_malloc/nx_free */
}

size_t srv_base64_len(size_t n) { return (n + 2) / 3 * 4; }

void srv_base64(const unsigned char *in, size_t n, char *out) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16;
        if (i + 1 < n) v |= (uint32_t)in[i + 1] << 8;
        if (i + 2 < n) v |= in[i + 2];
        out[o++] = tab[(v >> 18) & 63];
        out[o++] = tab[(v >> 12) & 63];
        out[o++] = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tab[v & 63] : '=';
    }
    out[o] = 0;
}

int srv_json_depth(const char *s, size_t n, int limit) {
    int depth = 0, max = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
            continue;
        }
        if (c == '"') in_str = true;
        else if (c == '[' || c == '{') {
            if (++depth > max) max = depth;
            if (max > limit) return max;
        } else if (c == ']' || c == '}') depth--;
    }
    return max;
}
