/*
 * mcp_client.c - JSON-RPC 2.0 over the pipes of mcp_proc.c, and the MCP methods on top.
 *
 * DESIGN: the client is synchronous with one request in flight: mcp_request queues a request
 * with a fresh integer id and pumps I/O until the response with that id arrives or its deadline
 * passes. Everything else the server sends meanwhile is handled on the spot by mcp_handle_line:
 * notifications (list_changed sets a flag), server-to-client requests (answered at once: ping
 * with {}, the rest with -32601), responses with other ids (ignored: late replies to requests
 * that timed out, or a confused server). A line that is not a JSON object breaks the client:
 * after garbage on stdout we can no longer trust the stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/json.h"

#include "core/nx_base.h"
#include "mcp/mcp_impl.h"
#include "nexus.h"

static const char *const LEGACY_VERSIONS[] = {"2024-11-05", "2025-03-26", "2025-06-18",
                                              "2025-11-25"};

static bool legacy_version_ok(const char *v) {
    for (size_t i = 0; i < NX_ARRAY_LEN(LEGACY_VERSIONS); i++)
        if (!strcmp(v, LEGACY_VERSIONS[i])) return true;
    return false;
}

/* A short, one-line, printable excerpt of server text for messages. */
static void excerpt(char *dst, size_t n, const char *s, size_t len) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 4 < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[o++] = (ch < 0x20 || ch == 0x7f) ? '?' : (char)ch;
    }
    if (o + 4 >= n && len > o) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
}

static int send_json(mcp_client *c, json_t *msg /* stolen */) {
    char *s = nx_json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    if (!s) return mcp_fail(c, NX_STATUS_NOMEM, "out of memory encoding a message");
    nx_status st = mcp_proc_queue(c, s, strlen(s)); /* compact jansson output has no raw newline */
    nx_free(s);
    return st;
}

/* ---- messages from the server ----------------------------------------------------------- */

static void answer_server_request(mcp_client *c, json_t *id, const char *method) {
    json_t *msg;
    if (!strcmp(method, "ping")) {
        msg = json_pack("{s:s, s:O, s:{}}", "jsonrpc", "2.0", "id", id, "result");
    } else {
        char m[200];
        snprintf(m, sizeof m, "Method not found: this client does not support '%.120s'", method);
        msg = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id, "error", "code",
                        -32601, "message", m);
    }
    if (!msg) {
        mcp_fail(c, NX_STATUS_NOMEM, "out of memory");
        return;
    }
    send_json(c, msg);
}

void mcp_handle_line(mcp_client *c, const char *line, size_t len) {
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
        len--;
    size_t skip = 0;
    while (skip < len && (line[skip] == ' ' || line[skip] == '\t')) skip++;
    if (skip == len) return; /* blank line */
    json_error_t je;
    bool oom;
    json_t *msg = nx_json_loadb(line, len, 0, &je, &oom);
    if (oom) {
        mcp_fail(c, NX_STATUS_NOMEM, "out of memory reading a message from the server");
        return;
    }
    if (!msg || !json_is_object(msg)) {
        char ex[64];
        excerpt(ex, sizeof ex, line + skip, len - skip);
        if (msg)
            mcp_fail(c, NX_STATUS_PROTOCOL, "server wrote a JSON value that is not a JSON-RPC object: '%s'",
                     ex);
        else
            mcp_fail(c, NX_STATUS_PROTOCOL, "server wrote a line that is not JSON (%s at column %d): '%s'",
                     je.text, je.column, ex);
        json_decref(msg);
        return;
    }
    json_t *method = json_object_get(msg, "method");
    json_t *id = json_object_get(msg, "id");
    if (json_is_string(method)) {
        const char *m = json_string_value(method);
        if (id && !json_is_null(id)) {
            answer_server_request(c, id, m);
        } else if (!strcmp(m, "notifications/tools/list_changed")) {
            c->tools_changed = true;
            if (c->changed_cb) c->changed_cb(c, c->changed_user);
        }
        /* other notifications (progress, message, resources/..., cancelled) are ignored */
        json_decref(msg);
        return;
    }
    if (json_is_integer(id) && c->wait_id >= 0 && json_integer_value(id) == c->wait_id &&
        !c->wait_resp && (json_object_get(msg, "result") || json_object_get(msg, "error"))) {
        c->wait_resp = msg;
        return;
    }
    /* a response to nobody we wait for, or an object that is no JSON-RPC message: ignored */
    json_decref(msg);
}

/* ---- requests --------------------------------------------------------------------------- */

static json_t *modern_meta(void) {
    return json_pack("{s:s, s:{}, s:{s:s, s:s}}", "io.modelcontextprotocol/protocolVersion",
                     MCP_PROTOCOL_MODERN, "io.modelcontextprotocol/clientCapabilities",
                     "io.modelcontextprotocol/clientInfo", "name", "nexus", "version",
                     nx_version());
}

/*
 * One request. On NX_STATUS_REMOTE, *error_out (may be NULL) gets the error object (new reference).
 * The message in err names the method.
 */
static int request(mcp_client *c, const char *method, const json_t *params, bool modern_meta_on,
                   int timeout_ms, json_t **result_out, json_t **error_out, char *err,
                   size_t errlen) {
    *result_out = NULL;
    if (error_out) *error_out = NULL;
    if (c->broken) return mcp_seterr(err, errlen, c->broken, "%s", c->broken_msg);
    if (params && !json_is_object(params))
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "%s: params must be a JSON object", method);
    /* jansson may drop a member whose allocation failed (json_copy, json_pack): any failure
       while the message is built means it is not the message we meant */
    size_t fails = nx_alloc_failures();
    json_t *p = params ? json_copy((json_t *)params) : json_object();
    if (!p) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "%s: out of memory", method);
    if (modern_meta_on) {
        json_t *meta = json_object_get(p, "_meta");
        json_t *mm = modern_meta();
        if (mm && json_is_object(meta)) {
            json_t *merged = json_copy(meta);
            if (!merged || json_object_update(merged, mm)) {
                json_decref(merged);
                merged = NULL;
            }
            json_decref(mm);
            mm = merged;
        }
        if (!mm || json_object_set_new(p, "_meta", mm)) {
            json_decref(p);
            return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "%s: out of memory", method);
        }
    }
    long long id = ++c->next_id;
    json_t *msg = json_pack("{s:s, s:I, s:s, s:o}", "jsonrpc", "2.0", "id", (json_int_t)id,
                            "method", method, "params", p);
    if (msg && nx_alloc_failures() != fails) {
        json_decref(msg);
        msg = NULL;
    }
    if (!msg) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "%s: out of memory", method);
    int st = send_json(c, msg);
    if (st) return mcp_seterr(err, errlen, st, "%s: %s", method, c->broken_msg);

    c->wait_id = id;
    c->wait_resp = NULL;
    st = mcp_proc_pump(c, mcp_now() + timeout_ms / 1000.0, false);
    json_t *resp = c->wait_resp;
    c->wait_id = -1;
    c->wait_resp = NULL;
    if (!resp) {
        if (st == NX_STATUS_TIMEOUT) {
            /* tell the server we gave up (best effort: it goes out with the next write) */
            if (!c->modern) {
                json_t *cn = json_pack("{s:s, s:s, s:{s:I, s:s}}", "jsonrpc", "2.0", "method",
                                       "notifications/cancelled", "params", "requestId",
                                       (json_int_t)id, "reason", "timeout");
                if (cn) send_json(c, cn);
            }
            const char *tail = mcp_stderr_tail(c);
            size_t tl = strlen(tail);
            char ex[104] = "";
            if (tl) {
                size_t from = tl > 100 ? tl - 100 : 0;
                excerpt(ex, sizeof ex, tail + from, tl - from);
            }
            return mcp_seterr(err, errlen, NX_STATUS_TIMEOUT,
                              "%s: no reply from the server within %d ms%s%s%s", method,
                              timeout_ms, *ex ? " (server stderr: ..." : "", ex, *ex ? ")" : "");
        }
        return mcp_seterr(err, errlen, st ? st : NX_STATUS_PROTOCOL, "%s: %s", method,
                          c->broken ? c->broken_msg : "no reply");
    }

    json_t *e = json_object_get(resp, "error");
    if (e) {
        json_t *code = json_object_get(e, "code"), *m = json_object_get(e, "message");
        const char *ms = json_is_string(m) ? json_string_value(m) : "(no message)";
        st = mcp_seterr(err, errlen, NX_STATUS_REMOTE, "%s: server error %lld: %s", method,
                        json_is_integer(code) ? (long long)json_integer_value(code) : 0LL, ms);
        if (error_out) *error_out = json_incref(e);
        json_decref(resp);
        return st;
    }
    json_t *r = json_object_get(resp, "result");
    if (!json_is_object(r)) {
        json_decref(resp);
        return mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "%s: the server's result is not an object",
                          method);
    }
    json_t *rt = json_object_get(r, "resultType");
    if (json_is_string(rt) && strcmp(json_string_value(rt), "complete") != 0) {
        st = mcp_seterr(err, errlen, NX_STATUS_PROTOCOL,
                        "%s: the server answered resultType '%s' (it needs input this client "
                        "cannot give)", method, json_string_value(rt));
        json_decref(resp);
        return st;
    }
    *result_out = json_incref(r);
    json_decref(resp);
    return NX_STATUS_OK;
}

nx_status mcp_request(mcp_client *c, const char *method, const json_t *params, json_t **result_out,
                int *rpc_code, char *err, size_t errlen) {
    if (rpc_code) *rpc_code = 0;
    if (!c || !method || !result_out) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "bad argument");
    json_t *eobj = NULL;
    int st = request(c, method, params, c->modern, c->timeout_ms, result_out, &eobj, err, errlen);
    if (eobj && rpc_code) {
        json_t *code = json_object_get(eobj, "code");
        *rpc_code = json_is_integer(code) ? (int)json_integer_value(code) : 0;
    }
    json_decref(eobj);
    return st;
}

/* ---- handshake -------------------------------------------------------------------------- */

static void keep_server_info(mcp_client *c, const json_t *r, const json_t *info) {
    json_decref(c->server_info);
    json_decref(c->server_caps);
    nx_free(c->instructions);
    c->server_info = json_is_object(info) ? json_deep_copy(info) : NULL;
    json_t *caps = json_object_get(r, "capabilities");
    c->server_caps = json_is_object(caps) ? json_deep_copy(caps) : NULL;
    json_t *ins = json_object_get(r, "instructions");
    c->instructions = json_is_string(ins) ? nx_strdup(json_string_value(ins)) : NULL;
}

/* Does an array of version strings contain v (or, v NULL, any accepted legacy version)? */
static bool versions_have(const json_t *arr, const char *v) {
    size_t i;
    json_t *x;
    if (!json_is_array(arr)) return false;
    json_array_foreach(arr, i, x) {
        if (!json_is_string(x)) continue;
        if (v ? !strcmp(json_string_value(x), v) : legacy_version_ok(json_string_value(x)))
            return true;
    }
    return false;
}

static void versions_str(const json_t *arr, char *buf, size_t n) {
    size_t i, o = 0;
    json_t *x;
    buf[0] = '\0';
    if (!json_is_array(arr)) {
        snprintf(buf, n, "none");
        return;
    }
    json_array_foreach(arr, i, x) {
        if (!json_is_string(x) || o + 2 >= n) continue;
        int w = snprintf(buf + o, n - o, "%s%s", o ? ", " : "", json_string_value(x));
        if (w < 0 || (size_t)w >= n - o) break;
        o += (size_t)w;
    }
    if (!o) snprintf(buf, n, "none");
}

/*
 * The modern probe. Returns NX_STATUS_OK (modern in use), 1 (fall back to initialize; only in AUTO)
 * or an error.
 */
static int probe_modern(mcp_client *c, enum mcp_era era, char *err, size_t errlen) {
    json_t *r = NULL, *e = NULL;
    char msg[512];
    int timeout = era == MCP_ERA_MODERN ? c->timeout_ms : c->probe_timeout_ms;
    int st = request(c, "server/discover", NULL, true, timeout, &r, &e, msg, sizeof msg);
    if (st == NX_STATUS_OK) {
        json_t *sv = json_object_get(r, "supportedVersions");
        if (versions_have(sv, MCP_PROTOCOL_MODERN)) {
            c->modern = true;
            snprintf(c->version, sizeof c->version, "%s", MCP_PROTOCOL_MODERN);
            json_t *info = json_object_get(r, "serverInfo");
            if (!info) info = json_object_get(json_object_get(r, "_meta"),
                                              "io.modelcontextprotocol/serverInfo");
            keep_server_info(c, r, info);
            json_decref(r);
            return NX_STATUS_OK;
        }
        char vs[200];
        versions_str(sv, vs, sizeof vs);
        json_decref(r);
        if (era == MCP_ERA_MODERN)
            return mcp_seterr(err, errlen, NX_STATUS_UNSUPPORTED, "server/discover lists versions [%s], "
                              "not %s", vs, MCP_PROTOCOL_MODERN);
        return 1;
    }
    if (st == NX_STATUS_REMOTE) {
        json_t *code = json_object_get(e, "code");
        long long cv = json_is_integer(code) ? (long long)json_integer_value(code) : 0;
        json_t *sup = json_object_get(json_object_get(e, "data"), "supported");
        char vs[200];
        versions_str(sup, vs, sizeof vs);
        bool legacy_listed = versions_have(sup, NULL);
        json_decref(e);
        if (cv == -32022) { /* modern error: unsupported protocol version */
            if (era == MCP_ERA_AUTO && legacy_listed) return 1;
            return mcp_seterr(err, errlen, NX_STATUS_UNSUPPORTED, "server supports protocol versions [%s], "
                              "none of which this client speaks (%s; %s .. %s)", vs,
                              MCP_PROTOCOL_MODERN, MCP_PROTOCOL_OLDEST, MCP_PROTOCOL_LEGACY);
        }
        if (era == MCP_ERA_AUTO) return 1;
        return mcp_seterr(err, errlen, NX_STATUS_UNSUPPORTED, "not a %s server: %s", MCP_PROTOCOL_MODERN,
                          msg);
    }
    if (st == NX_STATUS_TIMEOUT && era == MCP_ERA_AUTO) return 1;
    return mcp_seterr(err, errlen, st, "%s", msg);
}

static int initialize(mcp_client *c, char *err, size_t errlen) {
    json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion",
                               MCP_PROTOCOL_LEGACY, "capabilities", "clientInfo", "name", "nexus",
                               "version", nx_version());
    if (!params) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    json_t *r = NULL;
    int st = request(c, "initialize", params, false, c->timeout_ms, &r, NULL, err, errlen);
    json_decref(params);
    if (st) return st;
    json_t *v = json_object_get(r, "protocolVersion");
    if (!json_is_string(v)) {
        json_decref(r);
        return mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "initialize: the result has no protocolVersion");
    }
    if (!legacy_version_ok(json_string_value(v))) {
        char ex[40];
        excerpt(ex, sizeof ex, json_string_value(v), strlen(json_string_value(v)));
        json_decref(r);
        return mcp_seterr(err, errlen, NX_STATUS_UNSUPPORTED,
                          "server answered protocol version '%s', which this client does not "
                          "support (it supports %s through %s, and %s)", ex, MCP_PROTOCOL_OLDEST,
                          MCP_PROTOCOL_LEGACY, MCP_PROTOCOL_MODERN);
    }
    snprintf(c->version, sizeof c->version, "%s", json_string_value(v));
    keep_server_info(c, r, json_object_get(r, "serverInfo"));
    json_decref(r);
    json_t *note = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
                             "notifications/initialized");
    if (!note) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    st = send_json(c, note);
    if (st) return mcp_seterr(err, errlen, st, "%s", c->broken_msg);
    return NX_STATUS_OK;
}

/* A client with p's settings and no process or pipes yet. */
static nx_status client_new(const struct mcp_server_params *p, mcp_client **out, char *err,
                            size_t errlen) {
    if (out) *out = NULL;
    if (!p || !out) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "bad argument");
    if (p->era != MCP_ERA_AUTO && p->era != MCP_ERA_LEGACY && p->era != MCP_ERA_MODERN)
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "unknown era %d", (int)p->era);
    if (p->timeout_ms < 0 || p->probe_timeout_ms < 0 || p->max_pages < 0)
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "negative timeout or page limit");
    mcp_client *c = nx_calloc(1, sizeof *c);
    if (!c) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    c->fd_in = c->fd_out = c->fd_err = -1;
    c->wait_id = -1;
    c->era = p->era;
    c->timeout_ms = p->timeout_ms ? p->timeout_ms : MCP_DEFAULT_TIMEOUT_MS;
    c->probe_timeout_ms = p->probe_timeout_ms ? p->probe_timeout_ms
                                              : (c->timeout_ms < 2000 ? c->timeout_ms : 2000);
    c->max_line = p->max_line ? p->max_line : MCP_DEFAULT_MAX_LINE;
    c->max_pages = p->max_pages ? p->max_pages : MCP_DEFAULT_MAX_PAGES;
    *out = c;
    return NX_STATUS_OK;
}

nx_status mcp_start_fds(const struct mcp_server_params *p, int fd_in, int fd_out,
                        mcp_client **out, char *err, size_t errlen) {
    nx_status st = client_new(p, out, err, errlen);
    if (st) {
        if (fd_in >= 0) close(fd_in);
        if (fd_out >= 0) close(fd_out);
        return st;
    }
    (*out)->fd_in = fd_in;
    (*out)->fd_out = fd_out;
    (*out)->reaped = true; /* no process: nothing to wait for or signal */
    return NX_STATUS_OK;
}

nx_status mcp_start(const struct mcp_server_params *p, mcp_client **out, char *err,
                    size_t errlen) {
    if (out) *out = NULL;
    if (!out) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "bad argument");
    mcp_client *c;
    nx_status st = client_new(p, &c, err, errlen);
    if (st) return st;
    st = mcp_proc_spawn(c, p, err, errlen);
    if (st) {
        nx_free(c);
        return st;
    }
    *out = c;
    return NX_STATUS_OK;
}

nx_status mcp_handshake(mcp_client *c, char *err, size_t errlen) {
    int st;
    if (c->era != MCP_ERA_LEGACY) {
        st = probe_modern(c, c->era, err, errlen);
        if (st == 1) st = initialize(c, err, errlen);
    } else {
        st = initialize(c, err, errlen);
    }
    return st;
}

nx_status mcp_open(const struct mcp_server_params *p, mcp_client **out, char *err, size_t errlen) {
    if (out) *out = NULL;
    if (!out) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "bad argument");
    mcp_client *c;
    nx_status st = mcp_start(p, &c, err, errlen);
    if (st) return st;
    st = mcp_handshake(c, err, errlen);
    if (st) {
        mcp_close(c);
        return st;
    }
    *out = c;
    return NX_STATUS_OK;
}

void mcp_close(mcp_client *c) {
    if (!c) return;
    mcp_proc_close(c);
    json_decref(c->wait_resp);
    json_decref(c->server_info);
    json_decref(c->server_caps);
    nx_free(c->instructions);
    nx_free(c->obuf);
    nx_free(c->lbuf);
    nx_free(c);
}

const char *mcp_protocol_version(const mcp_client *c) { return c->version; }
bool mcp_is_modern(const mcp_client *c) { return c->modern; }
const json_t *mcp_server_info(const mcp_client *c) { return c->server_info; }
const json_t *mcp_server_capabilities(const mcp_client *c) { return c->server_caps; }
const char *mcp_instructions(const mcp_client *c) { return c->instructions; }
int mcp_pid(const mcp_client *c) { return (int)c->pid; }
bool mcp_tools_changed(const mcp_client *c) { return c->tools_changed; }
void mcp_tools_changed_clear(mcp_client *c) { c->tools_changed = false; }
void mcp_on_tools_changed(mcp_client *c, void (*cb)(mcp_client *, void *), void *user) {
    c->changed_cb = cb;
    c->changed_user = user;
}

nx_status mcp_poll(mcp_client *c, int timeout_ms, char *err, size_t errlen) {
    if (c->broken) return mcp_seterr(err, errlen, c->broken, "%s", c->broken_msg);
    nx_status st = mcp_proc_pump(c, mcp_now() + timeout_ms / 1000.0, true);
    if (st == NX_STATUS_TIMEOUT) st = NX_STATUS_OK;
    if (st) return mcp_seterr(err, errlen, st, "%s", c->broken_msg);
    return NX_STATUS_OK;
}

/* ---- tools ------------------------------------------------------------------------------ */

nx_status mcp_list_tools(mcp_client *c, json_t **tools_out, char *err, size_t errlen) {
    if (tools_out) *tools_out = NULL;
    if (!c || !tools_out) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "bad argument");
    json_t *all = json_array(), *seen = json_object();
    if (!all || !seen) {
        json_decref(all);
        json_decref(seen);
        return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    c->tools_changed = false;
    char *cursor = NULL;
    int st = NX_STATUS_OK;
    for (int page = 1;; page++) {
        if (page > c->max_pages) {
            st = mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "tools/list: more than %d pages (the "
                            "server keeps returning a nextCursor)", c->max_pages);
            break;
        }
        json_t *params = cursor ? json_pack("{s:s}", "cursor", cursor) : json_object();
        if (!params) {
            st = mcp_seterr(err, errlen, NX_STATUS_NOMEM, "tools/list: out of memory");
            break;
        }
        json_t *r = NULL;
        st = request(c, "tools/list", params, c->modern, c->timeout_ms, &r, NULL, err, errlen);
        json_decref(params);
        if (st) break;
        json_t *tools = json_object_get(r, "tools");
        if (!json_is_array(tools)) {
            json_decref(r);
            st = mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "tools/list: page %d has no 'tools' array",
                            page);
            break;
        }
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *name = json_object_get(t, "name");
            if (!json_is_object(t) || !json_is_string(name) || !json_string_value(name)[0]) {
                st = mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "tools/list: tool %zu on page %d is not "
                                "an object with a non-empty string 'name'", i, page);
                break;
            }
            if (json_array_append(all, t)) {
                st = mcp_seterr(err, errlen, NX_STATUS_NOMEM, "tools/list: out of memory");
                break;
            }
        }
        json_t *nc = json_object_get(r, "nextCursor");
        nx_free(cursor);
        cursor = NULL;
        if (!st && nc && !json_is_null(nc)) {
            if (!json_is_string(nc)) {
                st = mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "tools/list: nextCursor on page %d is "
                                "not a string", page);
            } else if (json_object_get(seen, json_string_value(nc))) {
                char ex[64];
                excerpt(ex, sizeof ex, json_string_value(nc), strlen(json_string_value(nc)));
                st = mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "tools/list: the server returned cursor "
                                "'%s' a second time (page %d): a pagination loop", ex, page);
            } else {
                cursor = nx_strdup(json_string_value(nc));
                if (!cursor || json_object_set_new(seen, json_string_value(nc), json_true()))
                    st = mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
            }
        }
        json_decref(r);
        if (st || !cursor) break;
    }
    nx_free(cursor);
    json_decref(seen);
    if (st) {
        json_decref(all);
        return st;
    }
    *tools_out = all;
    return NX_STATUS_OK;
}

nx_status mcp_call_tool(mcp_client *c, const char *name, const json_t *arguments, json_t **result_out,
                  char *err, size_t errlen) {
    if (result_out) *result_out = NULL;
    if (!c || !name || !result_out) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "bad argument");
    if (arguments && !json_is_object(arguments))
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "tools/call %s: arguments must be a JSON object",
                          name);
    json_t *args = arguments ? json_incref((json_t *)arguments) : json_object();
    json_t *params = json_pack("{s:s, s:o}", "name", name, "arguments", args);
    if (!params) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    json_t *r = NULL;
    char msg[512];
    int st = request(c, "tools/call", params, c->modern, c->timeout_ms, &r, NULL, msg, sizeof msg);
    json_decref(params);
    if (st) {
        /* name the tool */
        const char *m = msg;
        if (!strncmp(m, "tools/call: ", 12)) m += 12;
        return mcp_seterr(err, errlen, st, "tools/call %s: %s", name, m);
    }
    json_t *content = json_object_get(r, "content");
    if (content && !json_is_array(content)) {
        json_decref(r);
        return mcp_seterr(err, errlen, NX_STATUS_PROTOCOL, "tools/call %s: 'content' is not an array",
                          name);
    }
    *result_out = r;
    if (mcp_result_is_error(r)) {
        char *text = mcp_result_text(r);
        char ex[400];
        if (text) excerpt(ex, sizeof ex, text, strlen(text));
        st = mcp_seterr(err, errlen, NX_STATUS_REMOTE, "tool %s failed: %s", name,
                        text && *text ? ex : "(no text)");
        nx_free(text);
        return st;
    }
    return NX_STATUS_OK;
}
