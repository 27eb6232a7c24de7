/* http.c - the HTTP side of `nexus serve`: routing, limits, auth, OpenAI responses, SSE. */
#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <utf8proc.h>

#include "chat/callshape.h"
#include "core/alloc.h"
#include "core/json.h"
#include "core/log.h"
#include "core/nx_base.h"
#include "server/metrics.h"
#include "server/server.h"
#include "server/sessions.h"
#include "server/tools.h"
#include "route/signature.h"

struct srv_server {
    struct srv_params p;
    const nx_model *model;
    const nx_model *embed_model;
    struct srv_engine *engine; /* NULL when only embeddings are served */
    struct srv_tools *tools;   /* --mcp: server-side tools; NULL when off */
    nx_chat_template *tmpl;    /* the model's chat template, or a built-in */
    enum nx_tool_format tool_fmt;
    const char *tool_form; /* the template's call form (chat_template_call_form), or NULL */
    bool shows_tools;          /* the template puts the tools it is given into the prompt */
    char bos[64], eos[64];     /* the model's BOS / EOS token texts for templates */
    struct MHD_Daemon *d;
    int port;
    atomic_llong id_ctr;
    atomic_bool stopping;
};

/* Per-request state, from the first call of the access handler to the completion callback. */
struct conn {
    struct srv_server *S;
    struct MHD_Connection *c;
    enum srv_endpoint ep;
    int status;             /* status of the response queued (for metrics) */
    char *body;
    size_t n_body, cap_body;
    bool too_big, too_slow, refused;
    bool oom; /* the body buffer could not grow: 500 once the body is in */
    double t_start;
    /* streaming */
    struct srv_job *job;
    char id[48];
    long long created;
    char *model;            /* response "model" (owned) */
    enum srv_kind kind;
    bool sent_role, sent_finish, sent_usage, sent_done;
    size_t text_sent;
    int32_t toks_sent;
    char *pend;             /* SSE bytes built but not yet handed to MHD */
    size_t n_pend, off_pend, cap_pend;
};

struct srv_params srv_default_params(void) {
    struct srv_params p = {0};
    p.host = "127.0.0.1";
    p.port = 8080;
    p.model_name = "nexus";
    p.max_body = 1 << 20;
    p.max_depth = 64;
    p.max_conns = 64;
    p.idle_timeout_s = 30;
    p.body_timeout_s = 30;
    p.request_timeout_s = 0;
    p.lim.max_tokens = 4096;
    p.lim.max_messages = 1024;
    p.lim.max_inputs = 256;
    p.engine.n_slots = 1;
    p.engine.queue_max = 64;
    p.engine.n_ctx = 0;
    p.engine.n_threads = 2;
    p.engine.ctx = nx_ctx_default_params();
    return p;
}

/* ---- helpers ---- */

/* Free text from json_dumps with jansson's current allocator (the library may route jansson
   through nx_malloc; see json_set_alloc_funcs). */
static void json_free_text(char *s) {
    json_malloc_t m;
    json_free_t f;
    json_get_alloc_funcs(&m, &f);
    if (s) f(s);
}

/* A copy of s[0..n) with every invalid UTF-8 sequence replaced by U+FFFD (JSON needs valid
   UTF-8). Owned. */
static char *utf8_clean(const char *s, size_t n, size_t *out_n) {
    char *o = nx_malloc(n * 3 + 1);
    if (!o) return NULL;
    size_t k = 0;
    const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s;
    utf8proc_ssize_t left = (utf8proc_ssize_t)n;
    while (left > 0) {
        utf8proc_int32_t cp;
        utf8proc_ssize_t len = utf8proc_iterate(p, left, &cp);
        if (len <= 0) {
            memcpy(o + k, "\xEF\xBF\xBD", 3);
            k += 3;
            p++;
            left--;
        } else {
            memcpy(o + k, p, (size_t)len);
            k += (size_t)len;
            p += len;
            left -= len;
        }
    }
    o[k] = 0;
    if (out_n) *out_n = k;
    return o;
}

static json_t *json_text(const char *s, size_t n) {
    size_t m;
    char *c = utf8_clean(s, n, &m);
    if (!c) return NULL;
    json_t *j = json_stringn(c, m);
    nx_free(c);
    return j;
}

static void add_cors(struct srv_server *S, struct MHD_Response *r) {
    if (!S->p.cors_origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", S->p.cors_origin);
    MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_body(struct conn *cs, int status, const char *type, const char *body,
                                 size_t n) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    add_cors(cs->S, r);
    if (status == 405) MHD_add_response_header(r, "Allow", cs->ep == SRV_EP_MODELS ||
                                                               cs->ep == SRV_EP_HEALTH ||
                                                               cs->ep == SRV_EP_METRICS
                                                           ? "GET"
                                                           : "POST");
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(cs->c, (unsigned)status, r);
    MHD_destroy_response(r);
    cs->status = status;
    return ret;
}

static enum MHD_Result send_json(struct conn *cs, int status, json_t *j) {
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    if (j) json_decref(j);
    if (!s) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":null}}";
        return send_body(cs, 500, "application/json", oom, sizeof oom - 1);
    }
    enum MHD_Result r = send_body(cs, status, "application/json", s, strlen(s));
    json_free_text(s);
    return r;
}

/* The connection of a request whose state could not be allocated: its 500 is queued at once,
   the rest of its body is dropped (never written: shared by every such connection). */
static struct conn k_oom_conn;

static enum MHD_Result send_oom(struct MHD_Connection *c) {
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                              "\"server_error\",\"param\":null,\"code\":null}}";
    struct MHD_Response *r =
        MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "application/json");
    enum MHD_Result ret = MHD_queue_response(c, 500, r);
    MHD_destroy_response(r);
    return ret;
}

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 429: return "rate_limit_error";
    case 500: return "server_error";
    case 503: return "server_error";
    default: return "invalid_request_error";
    }
}

__attribute__((format(printf, 5, 6))) static enum MHD_Result
send_error(struct conn *cs, int status, const char *param, const char *code, const char *fmt,
           ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *m = json_text(msg, strlen(msg));
    json_t *e = json_pack("{s:{s:o?, s:s, s:s?, s:s?}}", "error", "message", m, "type",
                          error_type(status), "param", param, "code", code);
    return send_json(cs, status, e);
}

/* Constant-time comparison of the request's bearer token with the key. */
static bool auth_ok(struct srv_server *S, struct MHD_Connection *c) {
    if (!S->p.api_key) return true;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    const char *tok = h + 7, *key = S->p.api_key;
    size_t nt = strlen(tok), nk = strlen(key);
    unsigned char diff = (unsigned char)(nt != nk);
    for (size_t i = 0; i < nk; i++) diff |= (unsigned char)(key[i] ^ (i < nt ? tok[i] : 0));
    return diff == 0;
}

/* True when the client has gone (hang-up, reset, or EOF on its side). */
static bool client_gone(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return true;
    struct pollfd pf = {.fd = ci->connect_fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pf, 1, 0) <= 0) return false;
    if (pf.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    if (pf.revents & POLLIN) {
        char b;
        ssize_t k = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (k == 0) return true;
    }
    return false;
}

/* Wait up to ms for the job to change (called with j->mu held). */
static void job_wait(struct srv_job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

static enum srv_endpoint route(const char *url) {
    if (!strcmp(url, "/v1/chat/completions") || !strcmp(url, "/chat/completions"))
        return SRV_EP_CHAT;
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/completions")) return SRV_EP_COMPLETIONS;
    if (!strcmp(url, "/v1/embeddings") || !strcmp(url, "/embeddings")) return SRV_EP_EMBEDDINGS;
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/models")) return SRV_EP_MODELS;
    if (!strcmp(url, "/health")) return SRV_EP_HEALTH;
    if (!strcmp(url, "/metrics")) return SRV_EP_METRICS;
    return SRV_EP_OTHER;
}

/* ---- response bodies ---- */

static json_t *token_lp_json(const nx_model *m, nx_token t, float lp) {
    char piece[256];
    int32_t n = nx_token_to_piece(m, t, piece, sizeof piece, true);
    if (n < 0) n = 0;
    json_t *bytes = json_array();
    for (int32_t i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)piece[i]));
    return json_pack("{s:o, s:f, s:o}", "token", json_text(piece, (size_t)n), "logprob", (double)lp,
                     "bytes", bytes);
}

/* OpenAI chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]} for
   tokens [t0, t1) of the job (held under j->mu by the caller). */
static json_t *chat_logprobs(const nx_model *m, const struct srv_job *j, int32_t t0, int32_t t1) {
    json_t *arr = json_array();
    for (int32_t i = t0; i < t1; i++) {
        const struct srv_tokinfo *ti = &j->toks[i];
        json_t *e = token_lp_json(m, ti->id, ti->logprob);
        json_t *tops = json_array();
        for (int k = 0; k < ti->n_top; k++)
            json_array_append_new(tops, token_lp_json(m, ti->top_id[k], ti->top_lp[k]));
        json_object_set_new(e, "top_logprobs", tops);
        json_array_append_new(arr, e);
    }
    return json_pack("{s:o}", "content", arr);
}

/* Legacy completions logprobs: {tokens, token_logprobs, top_logprobs, text_offset}. */
static json_t *completion_logprobs(const nx_model *m, const struct srv_job *j, int32_t t0,
                                   int32_t t1) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    for (int32_t i = t0; i < t1; i++) {
        const struct srv_tokinfo *ti = &j->toks[i];
        char piece[256];
        int32_t n = nx_token_to_piece(m, ti->id, piece, sizeof piece, true);
        json_array_append_new(toks, json_text(piece, n > 0 ? (size_t)n : 0));
        json_array_append_new(lps, json_real(ti->logprob));
        json_t *top = json_object();
        for (int k = 0; k < ti->n_top; k++) {
            n = nx_token_to_piece(m, ti->top_id[k], piece, sizeof piece, true);
            size_t cn;
            char *c = utf8_clean(piece, n > 0 ? (size_t)n : 0, &cn);
            if (c) json_object_set_new(top, c, json_real(ti->top_lp[k]));
            nx_free(c);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer(0));
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

static json_t *usage_json(const struct srv_job *j) {
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", (int)j->n_prompt,
                     "completion_tokens", (int)j->n_gen, "total_tokens",
                     (int)(j->n_prompt + j->n_gen), "prompt_tokens_details", "cached_tokens",
                     (int)j->n_cached);
}

/* The answer of a job that may hold tool calls: {"content": text or null, "tool_calls": [...]}
   (tool_calls absent when there are none; then content is the whole text). Called with the job
   done. *n_calls gets the number of calls. */
static atomic_llong g_call_ctr;

static json_t *tool_answer(struct srv_job *j, int *n_calls) {
    const struct srv_constraint *c = &j->con;
    size_t pl = strlen(c->prefill), sl = strlen(c->suffix);
    char *full = nx_malloc(pl + j->n_text + sl + 1);
    *n_calls = 0;
    if (!full) return NULL;
    memcpy(full, c->prefill, pl);
    memcpy(full + pl, j->text, j->n_text);
    size_t n = pl + j->n_text;
    full[n] = 0;
    if (sl && strstr(full, "<tool_call>") && !strstr(full, "</tool_call>")) {
        memcpy(full + n, c->suffix, sl + 1); /* the grammar ended the call at its JSON */
        n += sl;
    }
    nx_tool_calls *calls = NULL;
    char err[256];
    json_t *out = json_object();
    if (nx_tool_calls_parse_with_tools(c->format, full, n, c->tools_json, &calls, err, sizeof err) == NX_STATUS_OK &&
        nx_tool_calls_count(calls) > 0) {
        json_t *arr = json_array();
        for (int32_t i = 0; i < nx_tool_calls_count(calls); i++) {
            const struct nx_tool_call *tc = nx_tool_calls_get(calls, i);
            char id[64];
            if (tc->id[0]) snprintf(id, sizeof id, "%s", tc->id);
            else snprintf(id, sizeof id, "call_%llx", (long long)atomic_fetch_add(&g_call_ctr, 1));
            json_array_append_new(arr, json_pack("{s:i, s:s, s:s, s:{s:s, s:s}}", "index", i,
                                                 "id", id, "type", "function", "function",
                                                 "name", tc->name, "arguments", tc->arguments));
        }
        const char *content = nx_tool_calls_content(calls);
        json_object_set_new(out, "content", content[0] ? json_text(content, strlen(content))
                                                       : json_null());
        json_object_set_new(out, "tool_calls", arr);
        *n_calls = (int)nx_tool_calls_count(calls);
    } else {
        json_object_set_new(out, "content", json_text(full, n));
    }
    nx_tool_calls_free(calls);
    nx_free(full);
    return out;
}

/* The complete (non-streamed) response of a finished job. */
static json_t *final_json(struct conn *cs, struct srv_job *j) {
    const nx_model *m = cs->S->model;
    json_t *choice;
    json_t *text = json_text(j->text, j->n_text);
    json_t *lp = json_null();
    if (j->req.logprobs) {
        json_decref(lp);
        lp = cs->kind == SRV_KIND_CHAT ? chat_logprobs(m, j, 0, j->n_toks)
                                       : completion_logprobs(m, j, 0, j->n_toks);
    }
    if (cs->kind == SRV_KIND_CHAT && j->con.tools) {
        int n_calls = 0;
        json_t *msg = tool_answer(j, &n_calls);
        json_decref(text);
        if (!msg) return NULL;
        json_object_set_new(msg, "role", json_string("assistant"));
        json_object_set_new(msg, "refusal", json_null());
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "message", msg, "logprobs", lp,
                           "finish_reason", n_calls ? "tool_calls" : j->finish);
    } else if (cs->kind == SRV_KIND_CHAT)
        choice = json_pack("{s:i, s:{s:s, s:o, s:n}, s:o, s:s}", "index", 0, "message", "role",
                           "assistant", "content", text, "refusal", "logprobs", lp,
                           "finish_reason", j->finish);
    else
        choice = json_pack("{s:i, s:o, s:o, s:s}", "index", 0, "text", text, "logprobs", lp,
                           "finish_reason", j->finish);
    return json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o], s:o}", "id", cs->id, "object",
                     cs->kind == SRV_KIND_CHAT ? "chat.completion" : "text_completion",
                     "created", (json_int_t)cs->created, "model", cs->model, "system_fingerprint",
                     "nexus", "choices", choice, "usage", usage_json(j));
}

/* One streamed chunk: delta text (may be NULL), logprobs of tokens [t0, t1), finish reason. */
static json_t *chunk_json(struct conn *cs, struct srv_job *j, const char *text, size_t n,
                          bool role, int32_t t0, int32_t t1, const char *finish) {
    const nx_model *m = cs->S->model;
    json_t *lp = json_null();
    if (j->req.logprobs && t1 > t0) {
        json_decref(lp);
        lp = cs->kind == SRV_KIND_CHAT ? chat_logprobs(m, j, t0, t1)
                                       : completion_logprobs(m, j, t0, t1);
    }
    json_t *choice;
    if (cs->kind == SRV_KIND_CHAT) {
        json_t *delta = json_object();
        if (role) json_object_set_new(delta, "role", json_string("assistant"));
        if (text) json_object_set_new(delta, "content", json_text(text, n));
        choice = json_pack("{s:i, s:o, s:o, s:s?}", "index", 0, "delta", delta, "logprobs", lp,
                           "finish_reason", finish);
    } else {
        choice = json_pack("{s:i, s:o, s:o, s:s?}", "index", 0, "text",
                           json_text(text ? text : "", text ? n : 0), "logprobs", lp,
                           "finish_reason", finish);
    }
    json_t *c = json_pack("{s:s, s:s, s:I, s:s, s:s, s:[o]}", "id", cs->id, "object",
                          cs->kind == SRV_KIND_CHAT ? "chat.completion.chunk" : "text_completion",
                          "created", (json_int_t)cs->created, "model", cs->model, "system_fingerprint",
                          "nexus", "choices", choice);
    if (c && j->req.include_usage) json_object_set_new(c, "usage", json_null());
    return c;
}

/* Append "data: JSON\n\n" to the pending SSE bytes (j may be NULL for a raw line). */
static bool sse_add(struct conn *cs, json_t *obj, const char *raw) {
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    if (obj) json_decref(obj);
    const char *body = obj ? s : raw;
    if (!body) return false;
    size_t n = strlen(body) + 8;
    if (cs->n_pend + n > cs->cap_pend) {
        size_t cap = NX_MAX(cs->cap_pend * 2, cs->n_pend + n + 256);
        char *p = nx_realloc(cs->pend, cap);
        if (!p) {
            json_free_text(s);
            return false;
        }
        cs->pend = p;
        cs->cap_pend = cap;
    }
    cs->n_pend += (size_t)sprintf(cs->pend + cs->n_pend, "data: %s\n\n", body);
    json_free_text(s);
    return true;
}

/* Build every chunk the job's progress allows (j->mu held). False on out of memory. */
static bool sse_build(struct conn *cs, struct srv_job *j) {
    bool ok = true;
    if (!cs->sent_role) {
        ok &= sse_add(cs, chunk_json(cs, j, cs->kind == SRV_KIND_CHAT ? "" : NULL, 0,
                                     cs->kind == SRV_KIND_CHAT, 0, 0, NULL), NULL);
        cs->sent_role = true;
    }
    bool hold = j->con.tools; /* tool calls go out whole, once the answer is complete */
    if (!hold && (j->n_text > cs->text_sent || j->n_toks > cs->toks_sent)) {
        ok &= sse_add(cs, chunk_json(cs, j, j->text + cs->text_sent, j->n_text - cs->text_sent,
                                     false, cs->toks_sent, j->n_toks, NULL), NULL);
        cs->text_sent = j->n_text;
        cs->toks_sent = j->n_toks;
    }
    if (j->state == SRV_JOB_DONE && !cs->sent_finish) {
        cs->sent_finish = true;
        if (j->error) {
            char *e = srv_error_json(j->errmsg, "server_error", NULL, NULL);
            ok &= e && sse_add(cs, NULL, e);
            json_free_text(e);
        } else {
            const char *finish = j->finish;
            if (hold) {
                int n_calls = 0;
                json_t *msg = tool_answer(j, &n_calls);
                json_t *c = chunk_json(cs, j, NULL, 0, false, cs->toks_sent, j->n_toks, NULL);
                json_t *delta = c ? json_object_get(json_array_get(json_object_get(c, "choices"),
                                                                   0), "delta") : NULL;
                if (msg && delta) json_object_update(delta, msg);
                if (msg) json_decref(msg);
                ok &= c && sse_add(cs, c, NULL);
                cs->toks_sent = j->n_toks;
                if (n_calls) finish = "tool_calls";
            }
            ok &= sse_add(cs, chunk_json(cs, j, NULL, 0, false, 0, 0, finish), NULL);
            if (j->req.include_usage) {
                json_t *u = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", cs->id, "object",
                                      cs->kind == SRV_KIND_CHAT ? "chat.completion.chunk"
                                                                : "text_completion",
                                      "created", (json_int_t)cs->created, "model", cs->model, "choices",
                                      "usage", usage_json(j));
                ok &= sse_add(cs, u, NULL);
            }
        }
        ok &= sse_add(cs, NULL, "[DONE]");
        cs->sent_done = true;
    }
    return ok;
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    struct conn *cs = cls;
    struct srv_job *j = cs->job;
    for (;;) {
        if (cs->off_pend < cs->n_pend) {
            size_t n = NX_MIN(max, cs->n_pend - cs->off_pend);
            memcpy(buf, cs->pend + cs->off_pend, n);
            cs->off_pend += n;
            if (cs->off_pend == cs->n_pend) cs->off_pend = cs->n_pend = 0;
            return (ssize_t)n;
        }
        if (cs->sent_done) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        bool news = j->n_text > cs->text_sent || j->n_toks > cs->toks_sent ||
                    j->state == SRV_JOB_DONE || !cs->sent_role;
        if (!news) job_wait(j, 100);
        bool ok = sse_build(cs, j);
        pthread_mutex_unlock(&j->mu);
        if (!ok) {
            srv_job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (cs->n_pend == 0 && client_gone(cs->c)) {
            srv_job_cancel(j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* ---- handlers ---- */

/* The messages as templates expect them: an assistant's tool_calls[].function.arguments as a
   JSON object (the API sends a string), and text parts joined into one string. */
static json_t *messages_for_template(json_t *msgs) {
    json_t *out = json_deep_copy(msgs);
    size_t i;
    json_t *m;
    json_array_foreach(out, i, m) {
        json_t *c = json_object_get(m, "content");
        if (json_is_array(c)) {
            size_t k, n = 0;
            json_t *part;
            json_array_foreach(c, k, part) n += json_string_length(json_object_get(part, "text"));
            char *buf = nx_malloc(n + 1);
            if (!buf) {
                json_decref(out);
                return NULL;
            }
            n = 0;
            json_array_foreach(c, k, part) {
                json_t *t = json_object_get(part, "text");
                memcpy(buf + n, json_string_value(t), json_string_length(t));
                n += json_string_length(t);
            }
            json_object_set_new(m, "content", json_stringn(buf, n));
            nx_free(buf);
        }
        size_t k;
        json_t *tc;
        json_array_foreach(json_object_get(m, "tool_calls"), k, tc) {
            json_t *fn = json_object_get(tc, "function");
            json_t *args = json_object_get(fn, "arguments");
            if (json_is_string(args)) {
                json_t *parsed = json_loads(json_string_value(args), 0, NULL);
                if (json_is_object(parsed)) json_object_set_new(fn, "arguments", parsed);
                else json_decref(parsed);
            }
        }
    }
    return out;
}

/* Whether template t puts the tools it is given into the prompt: a probe conversation
   rendered with one tool and without differ. */
static bool template_shows_tools(const nx_chat_template *t) {
    struct nx_chat_params cp = nx_chat_default_params();
    cp.messages_json = "[{\"role\":\"user\",\"content\":\"hi\"}]";
    cp.add_generation_prompt = true;
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    char err[200];
    bool shows = false;
    if (nx_chat_render(t, &cp, &a, &la, err, sizeof err) == NX_STATUS_OK) {
        cp.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"probe_tool_x\","
                        "\"description\":\"d\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{}}}}]";
        /* a template that refuses tools shows none */
        if (nx_chat_render(t, &cp, &b, &lb, err, sizeof err) == NX_STATUS_OK)
            shows = la != lb || memcmp(a, b, la);
    }
    nx_chat_free_string(a);
    nx_chat_free_string(b);
    return shows;
}

/* For templates that show no tools: a system message listing each tool as its signature
   (its description when that is a signature already, as for the server's routed tools) and
   how a call is written, merged into the first system message or put before the others. */
static bool add_tools_message(json_t *msgs, json_t *tools, bool described) {
    size_t cap = 256, n = 0;
    char *txt = nx_malloc(cap);
    if (!txt) return false;
    n = (size_t)snprintf(txt, cap, "You can call these tools:\n");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        char *sig = described ? nx_strdup(json_string_value(json_object_get(fn, "description")))
                              : rt_signature_of(name, json_object_get(fn, "parameters"));
        if (!sig) {
            nx_free(txt);
            return false;
        }
        size_t need = n + strlen(sig) + 8;
        if (need > cap) {
            char *q = nx_realloc(txt, cap = need * 2);
            if (!q) {
                nx_free(sig);
                nx_free(txt);
                return false;
            }
            txt = q;
        }
        n += (size_t)snprintf(txt + n, cap - n, "- %s\n", sig);
        nx_free(sig);
    }
    const char *how = "To call one, answer with <tool_call>{\"name\": NAME, \"arguments\": "
                      "{...}}</tool_call>.";
    json_t *first = json_array_get(msgs, 0);
    const char *role = json_string_value(json_object_get(first, "role"));
    bool ok;
    if (role && !strcmp(role, "system") && json_is_string(json_object_get(first, "content"))) {
        const char *c = json_string_value(json_object_get(first, "content"));
        size_t lc = strlen(c), lh = strlen(how);
        char *all = nx_malloc(lc + n + lh + 2);
        ok = all != NULL;
        if (ok) {
            sprintf(all, "%s\n%s%s", c, txt, how);
            ok = !json_object_set_new(first, "content", json_string(all));
            nx_free(all);
        }
    } else {
        char *all = nx_malloc(n + strlen(how) + 1);
        ok = all != NULL;
        if (ok) {
            sprintf(all, "%s%s", txt, how);
            ok = !json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system",
                                                           "content", all));
            nx_free(all);
        }
    }
    nx_free(txt);
    return ok;
}

/* The chat prompt: the template over the messages (and the tools when they are offered: shown
   when given, else the request's), with the generation prompt, then the constraint's prefill.
   Owned, or NULL with err (left empty when memory ran out). */
static char *render_chat(struct srv_server *S, const struct srv_gen_request *req,
                         const struct srv_constraint *con, json_t *shown, char *err,
                         size_t errlen) {
    json_t *msgs = messages_for_template(req->messages);
    json_t *offered = shown ? shown : req->tools;
    if (msgs && offered && req->tool_mode != SRV_TOOLS_NONE &&
        !S->shows_tools && !add_tools_message(msgs, offered, shown != NULL)) {
        json_decref(msgs);
        msgs = NULL;
    }
    char *mj = msgs ? nx_json_dumps(msgs, JSON_COMPACT) : NULL;
    char *tj = offered && req->tool_mode != SRV_TOOLS_NONE ? nx_json_dumps(offered, JSON_COMPACT)
                                                           : NULL;
    if (msgs) json_decref(msgs);
    char *out = NULL;
    bool tools_lost = offered && req->tool_mode != SRV_TOOLS_NONE && !tj; /* out of memory */
    if (mj && !tools_lost) {
        struct nx_chat_params cp = nx_chat_default_params();
        cp.messages_json = mj;
        cp.tools_json = tj;
        cp.add_generation_prompt = true;
        cp.bos_token = S->bos;
        cp.eos_token = S->eos;
        char *text = NULL;
        size_t len = 0;
        char rerr[400];
        nx_status st = nx_chat_render(S->tmpl, &cp, &text, &len, rerr, sizeof rerr);
        if (st == NX_STATUS_OK) {
            size_t pl = strlen(con->prefill);
            out = nx_malloc(len + pl + 1);
            if (out) {
                memcpy(out, text, len);
                memcpy(out + len, con->prefill, pl + 1);
            }
            nx_chat_free_string(text);
        } else if (st != NX_STATUS_NOMEM) {
            snprintf(err, errlen, "the chat template cannot render these messages: %s", rerr);
        }
    }
    nx_free(mj);
    nx_free(tj);
    return out;
}

/* The request body as JSON, nested at most max_depth deep (checked before parsing); NULL after
   queueing the error response into *ret. */
static json_t *load_body(struct conn *cs, enum MHD_Result *ret) {
    struct srv_server *S = cs->S;
    if (srv_json_depth(cs->body, cs->n_body, S->p.max_depth) > S->p.max_depth) {
        *ret = send_error(cs, 400, NULL, "json_too_deep",
                          "the JSON body nests deeper than %d levels", S->p.max_depth);
        return NULL;
    }
    json_error_t je;
    bool oom = false;
    json_t *body = nx_json_loadb(cs->body ? cs->body : "", cs->n_body, JSON_REJECT_DUPLICATES,
                                 &je, &oom);
    if (!body)
        *ret = oom ? send_error(cs, 500, NULL, NULL, "out of memory")
                   : send_error(cs, 400, NULL, "invalid_json",
                                "invalid JSON at line %d column %d: %s", je.line, je.column,
                                je.text);
    return body;
}

/* Parse body as a generation request, build its constraint and prompt (chat: the template,
   with the tools `shown` in the prompt when given), create its job and queue it. Returns the
   job, or NULL after queueing the error response into *ret. */
static struct srv_job *start_job(struct conn *cs, json_t *body, json_t *shown,
                                 enum MHD_Result *ret) {
    struct srv_server *S = cs->S;
    char err[512] = "";
    struct srv_gen_request req;
    const char *param = NULL;
    nx_status st = srv_parse_gen(body, cs->kind, &S->p.lim, &req, err, sizeof err, &param);
    const char *hsid = MHD_lookup_connection_value(cs->c, MHD_HEADER_KIND, "X-Session-Id");
    if (!st && hsid && !req.session[0]) {
        if (!srv_session_id_valid(hsid)) {
            srv_gen_request_free(&req);
            *ret = send_error(cs, 400, "X-Session-Id", NULL,
                              "X-Session-Id must be 1-64 characters of A-Z a-z 0-9 - _");
            return NULL;
        }
        snprintf(req.session, sizeof req.session, "%s", hsid);
    }
    if (st == NX_STATUS_NOMEM) {
        *ret = send_error(cs, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    if (st) {
        *ret = send_error(cs, 400, param, st == NX_STATUS_UNSUPPORTED ? "unsupported" : NULL,
                          "%s", err);
        return NULL;
    }
    struct srv_constraint con = {0};
    char *prompt = NULL;
    if (cs->kind == SRV_KIND_CHAT) {
        st = srv_constraint_build(S->tool_fmt, S->tool_form, req.tools, req.tool_mode, req.tool_name,
                                  req.response_format, &con, err, sizeof err);
        if (st) {
            const char *what = req.response_format ? "response_format" : "tools";
            srv_gen_request_free(&req);
            *ret = st == NX_STATUS_NOMEM
                       ? send_error(cs, 500, NULL, NULL, "out of memory")
                       : send_error(cs, 400, what,
                                    st == NX_STATUS_UNSUPPORTED ? "unsupported" : NULL, "%s",
                                    err);
            return NULL;
        }
        err[0] = 0;
        prompt = render_chat(S, &req, &con, shown, err, sizeof err);
    } else {
        prompt = nx_strdup(req.prompt);
    }
    if (!prompt) {
        srv_gen_request_free(&req);
        srv_constraint_free(&con);
        *ret = err[0] ? send_error(cs, 400, "messages", NULL, "%s", err)
                      : send_error(cs, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    if (!cs->model) cs->model = nx_strdup(req.model ? req.model : S->p.model_name);
    struct srv_job *j;
    st = srv_job_create(S->engine, &req, &con, prompt, S->p.request_timeout_s, &j, err,
                        sizeof err);
    nx_free(prompt);
    srv_gen_request_free(&req);
    srv_constraint_free(&con);
    if (st == NX_STATUS_INVALID_ARG) {
        *ret = send_error(cs, 400, "messages", "context_length_exceeded", "%s", err);
        return NULL;
    }
    if (st || !cs->model) {
        if (!st) srv_job_unref(j);
        *ret = send_error(cs, 500, NULL, NULL, "out of memory");
        return NULL;
    }
    if (!cs->id[0]) {
        snprintf(cs->id, sizeof cs->id, "%s-%llx%08lx",
                 cs->kind == SRV_KIND_CHAT ? "chatcmpl" : "cmpl",
                 (long long)atomic_fetch_add(&S->id_ctr, 1), (unsigned long)(nx_time_s() * 1e6));
        cs->created = (long long)time(NULL);
    }
    if (srv_engine_submit(S->engine, j)) {
        srv_job_unref(j);
        *ret = send_error(cs, 429, NULL, "queue_full",
                          "the server's queue is full (%d requests waiting); retry later",
                          S->p.engine.queue_max);
        return NULL;
    }
    return j;
}

/* Wait for job j to finish; false (the job cancelled) when the client went away first. */
static bool wait_job(struct conn *cs, struct srv_job *j) {
    pthread_mutex_lock(&j->mu);
    while (j->state != SRV_JOB_DONE) {
        job_wait(j, 100);
        if (j->state != SRV_JOB_DONE && client_gone(cs->c)) {
            srv_job_cancel(j);
            pthread_mutex_unlock(&j->mu);
            cs->status = 499; /* nginx's "client closed request", for metrics only */
            return false;
        }
    }
    pthread_mutex_unlock(&j->mu);
    return true;
}

/* The error response of a finished job that failed. */
static enum MHD_Result job_error(struct conn *cs, struct srv_job *j) {
    if (j->error == NX_STATUS_ABORTED) return send_error(cs, 503, NULL, NULL, "%s", j->errmsg);
    if (j->error == NX_STATUS_INVALID_ARG)
        return send_error(cs, 400, "session", NULL, "%s", j->errmsg);
    if (j->error == NX_STATUS_KV_FULL)
        return send_error(cs, 429, NULL, "too_many_sessions", "%s", j->errmsg);
    return send_error(cs, 500, NULL, NULL, "%s", j->errmsg);
}

/* A finished job's chunks as one complete SSE body (the answer after server-side tool steps
   is known whole before the first byte goes out). */
static enum MHD_Result send_sse_whole(struct conn *cs, struct srv_job *j) {
    pthread_mutex_lock(&j->mu);
    bool ok = sse_build(cs, j);
    pthread_mutex_unlock(&j->mu);
    if (!ok) return send_error(cs, 500, NULL, NULL, "out of memory");
    struct MHD_Response *r = MHD_create_response_from_buffer(cs->n_pend, cs->pend,
                                                             MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    add_cors(cs->S, r);
    enum MHD_Result ret = MHD_queue_response(cs->c, 200, r);
    MHD_destroy_response(r);
    cs->status = 200;
    return ret;
}

/* The text of the conversation's last user message ("" when there is none). */
static const char *last_user_text(json_t *msgs, char *buf, size_t cap) {
    buf[0] = 0;
    for (size_t i = json_array_size(msgs); i-- > 0;) {
        json_t *m = json_array_get(msgs, i);
        if (strcmp(json_string_value(json_object_get(m, "role")) ?: "", "user")) continue;
        json_t *c = json_object_get(m, "content");
        if (json_is_string(c)) return json_string_value(c);
        size_t k, n = 0;
        json_t *part;
        json_array_foreach(c, k, part) {
            const char *t = json_string_value(json_object_get(part, "text"));
            if (t) n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? " " : "", t);
            if (n >= cap) break;
        }
        return buf;
    }
    return buf;
}

/* Whether a chat request gets the server's tools: --mcp is on, the request brings no tools of
   its own (those go back to the client) and does not turn tools off. */
static bool wants_server_tools(struct srv_server *S, json_t *body) {
    if (!S->tools) return false;
    json_t *t = json_object_get(body, "tools");
    if (t && !json_is_null(t) && !(json_is_array(t) && json_array_size(t) == 0)) return false;
    json_t *c = json_object_get(body, "tool_choice");
    return !(json_is_string(c) && !strcmp(json_string_value(c), "none"));
}

/*
 * A chat request served with the server's tools: each step routes the last user message to
 * the top-k tools (their signatures in the prompt, their full schemas in the grammar), runs
 * the model, and when it calls tools, executes them and appends the call and the results'
 * surrogates to the conversation; the answer of the first step without a call (or the step
 * after the limit, run without tools) is the response, with the steps under "nexus" and the
 * usage summed over the steps. A named or required tool_choice applies to the first step.
 */
static enum MHD_Result chat_with_tools(struct conn *cs, json_t *body) {
    struct srv_server *S = cs->S;
    enum MHD_Result ret = MHD_NO;
    json_t *msgs = json_deep_copy(json_object_get(body, "messages"));
    json_t *steps = json_array(), *routes = json_array();
    bool stream = json_is_true(json_object_get(body, "stream"));
    long long used_prompt = 0, used_gen = 0, used_cached = 0;
    char qbuf[2048];
    if (!msgs || !steps || !routes) {
        ret = send_error(cs, 500, NULL, NULL, "out of memory");
        goto out;
    }
    for (int step = 0;; step++) {
        bool last = step == srv_tools_max_steps(S->tools);
        json_t *b = json_copy(body), *full = NULL, *shown = NULL, *route = NULL;
        if (!b || json_object_set(b, "messages", msgs) ||
            json_object_set_new(b, "stream", json_false())) {
            json_decref(b);
            ret = send_error(cs, 500, NULL, NULL, "out of memory");
            goto out;
        }
        if (!json_is_array(msgs) || !json_array_size(msgs)) {
            json_decref(b);
            ret = send_error(cs, 400, "messages", NULL, "'messages' must be a non-empty array");
            goto out;
        }
        if (step > 0) json_object_del(b, "tool_choice");
        if (last) {
            json_object_del(b, "tools");
            json_object_del(b, "tool_choice");
        } else {
            char err[300];
            json_t *tc = step == 0 ? json_object_get(body, "tool_choice") : NULL;
            const char *must = json_string_value(
                json_object_get(json_object_get(tc, "function"), "name"));
            nx_status st = srv_tools_offer(S->tools, last_user_text(msgs, qbuf, sizeof qbuf),
                                           must, &full, &shown, &route, err, sizeof err);
            if (st) {
                json_decref(b);
                ret = st == NX_STATUS_NOT_FOUND || st == NX_STATUS_UNSUPPORTED
                          ? send_error(cs, 400, "tool_choice", NULL, "%s", err)
                          : send_error(cs, 500, NULL, NULL, "routing the tools failed: %s", err);
                goto out;
            }
            json_object_set_new(b, "tools", full);
            json_array_append_new(routes, route);
        }
        struct srv_job *j = start_job(cs, b, shown, &ret);
        json_decref(b);
        json_decref(shown);
        if (!j) goto out;
        cs->job = j;
        if (!wait_job(cs, j)) {
            ret = MHD_NO;
            goto out;
        }
        if (j->error) {
            ret = job_error(cs, j);
            goto out;
        }
        used_prompt += j->n_prompt;
        used_gen += j->n_gen;
        used_cached += j->n_cached;
        int n_calls = 0;
        json_t *msg = last ? NULL : tool_answer(j, &n_calls);
        if (!last && !msg) {
            ret = send_error(cs, 500, NULL, NULL, "out of memory");
            goto out;
        }
        if (n_calls == 0) {
            json_decref(msg);
            /* the response of the final job, with the steps and the usage of them all */
            j->n_prompt = (int32_t)used_prompt;
            j->n_gen = (int32_t)used_gen;
            j->n_cached = (int32_t)used_cached;
            if (stream) {
                ret = send_sse_whole(cs, j);
                goto out;
            }
            json_t *resp = final_json(cs, j);
            if (resp)
                json_object_set_new(resp, "nexus", json_pack("{s:O, s:O}", "tool_steps", steps,
                                                             "routes", routes));
            ret = send_json(cs, 200, resp);
            goto out;
        }
        /* the call enters the conversation as the assistant's message, each result as a tool
           message holding its surrogate */
        json_object_set_new(msg, "role", json_string("assistant"));
        json_t *calls = json_object_get(msg, "tool_calls");
        json_array_append(msgs, msg);
        size_t k;
        json_t *tc;
        json_array_foreach(calls, k, tc) {
            json_t *fn = json_object_get(tc, "function");
            char *sur = NULL;
            json_t *info = NULL;
            if (srv_tools_call(S->tools, json_string_value(json_object_get(fn, "name")),
                               json_string_value(json_object_get(fn, "arguments")), &sur,
                               &info)) {
                json_decref(msg);
                ret = send_error(cs, 500, NULL, NULL, "out of memory");
                goto out;
            }
            json_object_set_new(info, "step", json_integer(step));
            json_array_append_new(steps, info);
            json_array_append_new(msgs, json_pack("{s:s, s:O, s:s}", "role", "tool",
                                                  "tool_call_id", json_object_get(tc, "id"),
                                                  "content", sur));
            nx_free(sur);
        }
        json_decref(msg);
        srv_job_unref(j);
        cs->job = NULL;
    }
out:
    json_decref(msgs);
    json_decref(steps);
    json_decref(routes);
    return ret;
}

static enum MHD_Result handle_gen(struct conn *cs) {
    struct srv_server *S = cs->S;
    if (!S->engine) return send_error(cs, 400, "model", "model_not_found",
                                      "this server runs an embedding model only");
    enum MHD_Result ret;
    json_t *body = load_body(cs, &ret);
    if (!body) return ret;
    cs->kind = cs->ep == SRV_EP_CHAT ? SRV_KIND_CHAT : SRV_KIND_COMPLETION;
    if (cs->kind == SRV_KIND_CHAT && json_is_object(body) && wants_server_tools(S, body)) {
        ret = chat_with_tools(cs, body);
        json_decref(body);
        return ret;
    }
    bool stream = json_is_object(body) && json_is_true(json_object_get(body, "stream"));
    struct srv_job *j = start_job(cs, body, NULL, &ret);
    json_decref(body);
    if (!j) return ret;
    cs->job = j;
    if (stream) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, cs, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        add_cors(S, r);
        ret = MHD_queue_response(cs->c, 200, r);
        MHD_destroy_response(r);
        cs->status = 200;
        return ret;
    }
    if (!wait_job(cs, j)) return MHD_NO;
    if (j->error) return job_error(cs, j);
    return send_json(cs, 200, final_json(cs, j));
}

static enum MHD_Result handle_embed(struct conn *cs) {
    struct srv_server *S = cs->S;
    if (!S->embed_model)
        return send_error(cs, 400, "model", "model_not_found",
                          "this server has no embedding model (start it with --embed-model)");
    char err[512] = "";
    enum MHD_Result bad;
    json_t *body = load_body(cs, &bad);
    if (!body) return bad;
    struct srv_embed_request req;
    const char *param = NULL;
    nx_status st = srv_parse_embed(body, &S->p.lim, &req, err, sizeof err, &param);
    json_decref(body);
    if (st == NX_STATUS_NOMEM) return send_error(cs, 500, NULL, NULL, "out of memory");
    if (st) return send_error(cs, 400, param, NULL, "%s", err);
    int32_t dim = nx_model_n_embd(S->embed_model);
    float *v = nx_malloc(sizeof(float) * (size_t)dim);
    char *b64 = nx_malloc(srv_base64_len(sizeof(float) * (size_t)dim) + 1);
    json_t *data = json_array();
    int64_t n_tok = 0;
    enum MHD_Result ret;
    if (!v || !b64 || !data) {
        ret = send_error(cs, 500, NULL, NULL, "out of memory");
        goto done;
    }
    struct nx_embed_params ep = nx_embed_default_params();
    ep.n_threads = S->p.engine.n_threads;
    for (int32_t i = 0; i < req.n; i++) {
        st = nx_embed(S->embed_model, req.texts[i], &ep, v, dim, err, sizeof err);
        if (st) {
            ret = send_error(cs, st == NX_STATUS_NOMEM ? 500 : 400, "input", NULL,
                             "input[%d]: %s", (int)i, err);
            goto done;
        }
        n_tok += nx_tokenize(S->embed_model, req.texts[i], strlen(req.texts[i]), NULL, 0, true,
                             false) * -1;
        json_t *emb;
        if (req.base64) {
            srv_base64((const unsigned char *)v, sizeof(float) * (size_t)dim, b64);
            emb = json_string(b64);
        } else {
            emb = json_array();
            for (int32_t k = 0; k < dim; k++) json_array_append_new(emb, json_real(v[k]));
        }
        json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index",
                                              (int)i, "embedding", emb));
    }
    ret = send_json(cs, 200,
                    json_pack("{s:s, s:O, s:s, s:{s:I, s:I}}", "object", "list", "data", data,
                              "model", req.model ? req.model : S->p.model_name, "usage",
                              "prompt_tokens", (json_int_t)n_tok, "total_tokens",
                              (json_int_t)n_tok));
done:
    if (data) json_decref(data);
    nx_free(v);
    nx_free(b64);
    srv_embed_request_free(&req);
    return ret;
}

static enum MHD_Result handle_get(struct conn *cs) {
    struct srv_server *S = cs->S;
    if (cs->ep == SRV_EP_HEALTH)
        return send_json(cs, 200, json_pack("{s:s}", "status", "ok"));
    if (cs->ep == SRV_EP_MODELS) {
        json_t *list = json_array();
        json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:s, s:{s:s, s:i}}", "id",
                                              S->p.model_name, "object", "model", "created",
                                              (json_int_t)0, "owned_by", "nexus", "meta", "desc",
                                              nx_model_desc(S->engine ? S->model : S->embed_model),
                                              "n_ctx",
                                              S->engine ? (int)srv_engine_n_ctx(S->engine) : 0));
        return send_json(cs, 200, json_pack("{s:s, s:o}", "object", "list", "data", list));
    }
    struct srv_engine_stats es;
    if (S->engine) srv_engine_stats(S->engine, &es);
    char *text = srv_metrics_render(S->engine ? &es : NULL);
    if (!text) return send_error(cs, 500, NULL, NULL, "out of memory");
    enum MHD_Result r = send_body(cs, 200, "text/plain; version=0.0.4", text, strlen(text));
    nx_free(text);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    struct srv_server *S = cls;
    struct conn *cs = *con_cls;
    if (cs == &k_oom_conn) {
        *upload_size = 0;
        return MHD_YES;
    }
    if (!cs) {
        cs = nx_calloc(1, sizeof *cs);
        if (!cs) {
            *con_cls = &k_oom_conn;
            return send_oom(c);
        }
        cs->S = S;
        cs->c = c;
        cs->ep = route(url);
        cs->t_start = nx_time_s();
        *con_cls = cs;
        bool is_get = cs->ep == SRV_EP_MODELS || cs->ep == SRV_EP_HEALTH ||
                      cs->ep == SRV_EP_METRICS;
        if (S->p.cors_origin && !strcmp(method, "OPTIONS")) {
            struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
            add_cors(S, r);
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                    "Authorization, Content-Type");
            enum MHD_Result ret = MHD_queue_response(c, 204, r);
            MHD_destroy_response(r);
            cs->status = 204;
            cs->refused = true;
            return ret;
        }
        if (atomic_load(&S->stopping)) {
            cs->refused = true;
            return send_error(cs, 503, NULL, NULL, "the server is shutting down");
        }
        if (cs->ep == SRV_EP_OTHER) {
            cs->refused = true;
            return send_error(cs, 404, NULL, "unknown_url", "unknown path: %s %s", method, url);
        }
        if (strcmp(method, is_get ? "GET" : "POST")) {
            cs->refused = true;
            return send_error(cs, 405, NULL, "method_not_allowed", "%s %s: use %s", method, url,
                              is_get ? "GET" : "POST");
        }
        if (cs->ep != SRV_EP_HEALTH && !auth_ok(S, c)) {
            cs->refused = true;
            return send_error(cs, 401, NULL, "invalid_api_key",
                              "missing or invalid API key (send \"Authorization: Bearer KEY\")");
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > S->p.max_body) {
            cs->refused = true;
            return send_error(cs, 413, NULL, "body_too_large",
                              "the request body is larger than %zu bytes", S->p.max_body);
        }
        return MHD_YES;
    }
    if (cs->refused) {
        *upload_size = 0; /* discard what a refused request still sends */
        return MHD_YES;
    }
    if (*upload_size) {
        /* libmicrohttpd takes a response only once the body is in: past a limit, the rest is
           read and dropped, and the error goes out at the end (a sender that never finishes
           is closed by the idle timeout) */
        size_t n = *upload_size;
        *upload_size = 0;
        if (cs->too_big || cs->too_slow || cs->oom) return MHD_YES;
        if (nx_time_s() - cs->t_start > S->p.body_timeout_s) {
            cs->too_slow = true;
            return MHD_YES;
        }
        if (cs->n_body + n > S->p.max_body) {
            cs->too_big = true;
            return MHD_YES;
        }
        if (cs->n_body + n + 1 > cs->cap_body) {
            size_t cap = NX_MAX(cs->cap_body * 2, cs->n_body + n + 1);
            char *p = nx_realloc(cs->body, cap);
            if (!p) {
                cs->oom = true; /* answered once the body is in */
                return MHD_YES;
            }
            cs->body = p;
            cs->cap_body = cap;
        }
        memcpy(cs->body + cs->n_body, upload, n);
        cs->n_body += n;
        cs->body[cs->n_body] = 0;
        return MHD_YES;
    }
    (void)version;
    if (cs->oom) return send_json(cs, 500, NULL);
    if (cs->too_slow)
        return send_error(cs, 408, NULL, "body_timeout",
                          "the request body did not arrive within %g s", S->p.body_timeout_s);
    if (cs->too_big)
        return send_error(cs, 413, NULL, "body_too_large",
                          "the request body is larger than %zu bytes", S->p.max_body);
    switch (cs->ep) {
    case SRV_EP_CHAT:
    case SRV_EP_COMPLETIONS: return handle_gen(cs);
    case SRV_EP_EMBEDDINGS: return handle_embed(cs);
    default: return handle_get(cs);
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    struct conn *cs = *con_cls;
    (void)cls;
    (void)c;
    if (cs == &k_oom_conn) {
        srv_metrics_request(SRV_EP_OTHER, 500);
        *con_cls = NULL;
        return;
    }
    if (!cs) return;
    if (cs->job) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) srv_job_cancel(cs->job);
        srv_job_unref(cs->job);
    }
    srv_metrics_request(cs->ep, cs->status ? cs->status : 500);
    nx_free(cs->body);
    nx_free(cs->pend);
    nx_free(cs->model);
    nx_free(cs);
    *con_cls = NULL;
}


static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char msg[512];
    (void)cls;
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    if (n && msg[n - 1] == '\n') msg[n - 1] = 0;
    NX_LOGD("http: %s", msg);
}

nx_status srv_start(const nx_model *model, const nx_model *embed_model,
                    const struct srv_params *p, struct srv_server **out, char *err,
                    size_t errlen) {
    *out = NULL;
    err[0] = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    if (p->port < 0 || p->port > 65535 || inet_pton(AF_INET, p->host, &sa.sin_addr) != 1) {
        snprintf(err, errlen, "cannot bind '%s' port %d: give an IPv4 address and a port 0-65535",
                 p->host, p->port);
        return NX_STATUS_INVALID_ARG;
    }
    if (p->max_body < 16 || p->max_depth < 2 || p->max_conns < 1 || p->idle_timeout_s < 1) {
        snprintf(err, errlen, "body limit, JSON depth, connections and idle timeout must be "
                 "positive");
        return NX_STATUS_INVALID_ARG;
    }
    struct srv_server *S = nx_calloc(1, sizeof *S);
    if (!S) return NX_STATUS_NOMEM;
    srv_metrics_reset(); /* counters cover this server's life */
    S->p = *p;
    S->model = model;
    S->embed_model = embed_model;
    if (nx_model_is_encoder(model)) {
        S->embed_model = model;
    } else {
        nx_status ts = p->chat_template
                           ? nx_chat_template_open(p->chat_template, &S->tmpl, err, errlen)
                           : nx_chat_template_from_model(model, &S->tmpl, err, errlen);
        if (ts == NX_STATUS_NOT_FOUND && !p->chat_template)
            ts = nx_chat_template_open("chatml", &S->tmpl, err, errlen);
        if (ts) {
            nx_free(S);
            return ts;
        }
        S->tool_fmt = nx_chat_template_tool_format(S->tmpl);
        S->tool_form = chat_template_call_form(S->tmpl);
        S->shows_tools = template_shows_tools(S->tmpl);
        nx_token bos = nx_token_bos(model), eos = nx_token_eos(model);
        int32_t k = bos >= 0 ? nx_token_to_piece(model, bos, S->bos, sizeof S->bos - 1, true) : 0;
        S->bos[k > 0 ? k : 0] = 0;
        k = eos >= 0 ? nx_token_to_piece(model, eos, S->eos, sizeof S->eos - 1, true) : 0;
        S->eos[k > 0 ? k : 0] = 0;
        nx_status st = srv_engine_init(model, &p->engine, &S->engine, err, errlen);
        if (!st && p->tools.mcp_config)
            st = srv_tools_open(&p->tools, &S->tools, err, errlen);
        if (st) {
            srv_engine_free(S->engine);
            nx_chat_template_free(S->tmpl);
            nx_free(S);
            return st;
        }
    }
    S->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                                MHD_USE_ERROR_LOG,
                            0, NULL, NULL, on_request, S, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)p->max_conns, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)p->idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED,
                            on_completed, S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_END);
    if (!S->d) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", p->host, p->port, strerror(errno));
        srv_tools_free(S->tools);
        srv_engine_free(S->engine);
        nx_chat_template_free(S->tmpl);
        nx_free(S);
        return NX_STATUS_INVALID_ARG;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->d, MHD_DAEMON_INFO_BIND_PORT);
    S->port = di ? di->port : p->port;
    *out = S;
    return NX_STATUS_OK;
}

int srv_port(const struct srv_server *s) { return s->port; }

void srv_stop(struct srv_server *S) {
    if (!S) return;
    atomic_store(&S->stopping, true);
    /* end generations first so connection threads blocked on their jobs finish, then join the
       connection threads, then free the engine nobody can reach any more */
    if (S->engine) srv_engine_halt(S->engine);
    MHD_stop_daemon(S->d);
    srv_tools_free(S->tools);
    srv_engine_free(S->engine);
    nx_chat_template_free(S->tmpl);
    nx_free(S);
}
