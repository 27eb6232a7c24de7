/*
 * test_mcp.c - the MCP client against a fake server written here (good and misbehaving modes)
 * and against three real servers installed from npm.
 *
 * The fake server is this same binary: the client spawns /proc/self/exe with NX_MCP_FAKE=<mode>
 * in its environment, and a constructor runs the server loop before main and _exits. Modes:
 *   good        initialize (answers 2025-11-25), tools/list in 3 pages with a list_changed
 *               notification, a ping and a sampling/createMessage request, and responses with
 *               unknown ids interleaved before page 1; tools for every content type, isError, a
 *               JSON-RPC error, env/cwd echo, big replies, delayed list_changed
 *   modern      2026-07-28: server/discover, refuses initialize, demands _meta on every request
 *   modern-old  server/discover answers -32022 {supported: [2025-06-18]}; initialize works
 *   silent-probe  never answers server/discover; initialize works
 *   oldversion / badversion   initialize answers 2024-11-05 / 1999-01-01
 *   garbage, longline (10 MB), hang, crash (half a reply, exit 3), abort (half a reply,
 *   SIGABRT), flood (notifications forever), floodok (20000 notifications, then the answer),
 *   closeout (closes stdout), stderr (1 MiB of stderr first), loop (cursor loop), manypages,
 *   hanginit, exitafterinit: what tools/list (or initialize) gets in that mode.
 *
 * The real servers come from build-npm/node_modules/.bin (`make test` installs them, or `make
 * npm-servers`; override with
 * NX_MCP_NPM_BIN); their tests FAIL, not skip, when the servers are missing.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "mcp/mcp.h"
#include "support/tmpdir.h"
#include "test.h"

/* ============================== the fake server ======================================= */

static void f_line(const char *s) {
    fputs(s, stdout);
    fputc('\n', stdout);
    fflush(stdout);
}

static void f_send(json_t *m) {
    char *s = json_dumps(m, JSON_COMPACT);
    f_line(s);
    nx_free(s);
    json_decref(m);
}

static void f_result(json_t *id, json_t *result) {
    f_send(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result));
}

static void f_error(json_t *id, int code, const char *msg, json_t *data) {
    json_t *e = json_pack("{s:i, s:s}", "code", code, "message", msg);
    if (data) json_object_set_new(e, "data", data);
    f_send(json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "error", e));
}

static void f_notify(const char *method) {
    f_send(json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", method));
}

static json_t *f_tool(const char *name, const char *desc) {
    return json_pack("{s:s, s:s, s:{s:s, s:{}}}", "name", name, "description", desc, "inputSchema",
                     "type", "object", "properties");
}

static json_t *f_text(const char *t) { return json_pack("{s:s, s:s}", "type", "text", "text", t); }

static json_t *f_content1(json_t *item) { return json_pack("{s:[o]}", "content", item); }

static void f_half_reply(json_t *id) {
    fprintf(stdout, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"tools\":[{\"na",
            (long long)json_integer_value(id));
    fflush(stdout);
}

static void fake_tools_list(const char *mode, json_t *id, json_t *params, bool *first_list) {
    const char *cursor = json_string_value(json_object_get(params, "cursor"));
    if (!strcmp(mode, "garbage")) {
        f_line("this is not json {");
        return;
    }
    if (!strcmp(mode, "longline")) {
        static char chunk[1 << 16];
        memset(chunk, 'x', sizeof chunk);
        fprintf(stdout, "{\"jsonrpc\":\"2.0\",\"id\":%lld,\"result\":{\"tools\":[],\"pad\":\"",
                (long long)json_integer_value(id));
        for (int i = 0; i < 160; i++) fwrite(chunk, 1, sizeof chunk, stdout); /* 10 MiB */
        fputs("\"}}\n", stdout);
        fflush(stdout);
        return;
    }
    if (!strcmp(mode, "hang")) return;
    if (!strcmp(mode, "crash")) {
        f_half_reply(id);
        _exit(3);
    }
    if (!strcmp(mode, "abort")) {
        f_half_reply(id);
        signal(SIGABRT, SIG_DFL);
        abort();
    }
    if (!strcmp(mode, "flood")) {
        for (double t0 = nx_time_s(); nx_time_s() - t0 < 20;)
            f_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":"
                   "{\"level\":\"info\",\"data\":\"flood flood flood flood flood\"}}");
        _exit(0);
    }
    if (!strcmp(mode, "floodok"))
        for (int i = 0; i < 20000; i++)
            f_line("{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":"
                   "{\"progressToken\":1,\"progress\":1}}");
    if (!strcmp(mode, "closeout")) {
        fclose(stdout);
        close(1);
        sleep(30);
        _exit(0);
    }
    if (!strcmp(mode, "stderr")) {
        char buf[1024];
        memset(buf, 'e', sizeof buf - 1);
        buf[sizeof buf - 1] = '\n';
        for (int i = 0; i < 1024; i++) fwrite(buf, 1, sizeof buf, stderr);
        fputs("last words on stderr\n", stderr);
        fflush(stderr);
    }
    if (!strcmp(mode, "loop")) {
        f_result(id, json_pack("{s:[o], s:s}", "tools", f_tool("t", "d"), "nextCursor", "same"));
        return;
    }
    if (!strcmp(mode, "manypages")) {
        static int page;
        char cur[32];
        snprintf(cur, sizeof cur, "c%d", ++page);
        f_result(id, json_pack("{s:[], s:s}", "tools", "nextCursor", cur));
        return;
    }
    /* good (and modern, oldversion, ...): three pages */
    bool modern = !strcmp(mode, "modern");
    if (!cursor) {
        if (*first_list && !modern) {
            *first_list = false;
            f_notify("notifications/tools/list_changed");
            f_send(json_pack("{s:s, s:s, s:s}", "jsonrpc", "2.0", "id", "srv-1", "method", "ping"));
            f_send(json_pack("{s:s, s:i, s:s, s:{s:[], s:i}}", "jsonrpc", "2.0", "id", 77, "method",
                             "sampling/createMessage", "params", "messages", "maxTokens", 10));
            f_send(json_pack("{s:s, s:i, s:{}}", "jsonrpc", "2.0", "id", 9999, "result"));
            f_send(json_pack("{s:s, s:s, s:{}}", "jsonrpc", "2.0", "id", "x", "result"));
            f_notify("notifications/message");
        }
        json_t *r = json_pack("{s:[o,o,o], s:s}", "tools", f_tool("echo", "Echoes text"),
                              f_tool("media", "An image and an audio clip"),
                              f_tool("env", "Reads an environment variable"), "nextCursor", "p2");
        if (modern) json_object_set_new(r, "resultType", json_string("complete"));
        f_result(id, r);
    } else if (!strcmp(cursor, "p2")) {
        f_result(id, json_pack("{s:[o,o,o], s:s}", "tools", f_tool("fail", "Always fails"),
                               f_tool("rpcerr", "Answers a JSON-RPC error"),
                               f_tool("cwd", "The working directory"), "nextCursor", "p3"));
    } else if (!strcmp(cursor, "p3")) {
        f_result(id, json_pack("{s:[o,o,o]}", "tools", f_tool("links", "Resource links"),
                               f_tool("structured", "Structured content"),
                               f_tool("replies", "What the client answered")));
    } else {
        f_error(id, -32602, "Invalid cursor", NULL);
    }
}

static void fake_tools_call(json_t *id, json_t *params, json_t *replies) {
    const char *name = json_string_value(json_object_get(params, "name"));
    json_t *args = json_object_get(params, "arguments");
    if (!name) name = "";
    if (!strcmp(name, "echo")) {
        const char *t = json_string_value(json_object_get(args, "text"));
        f_result(id, f_content1(f_text(t ? t : "")));
    } else if (!strcmp(name, "media")) {
        /* "\x89PNG\r\n" and "RIFF" */
        f_result(id, json_pack("{s:[{s:s, s:s, s:s}, {s:s, s:s, s:s}]}", "content", "type",
                               "image", "data", "iVBORw0K", "mimeType", "image/png", "type",
                               "audio", "data", "UklGRg==", "mimeType", "audio/wav"));
    } else if (!strcmp(name, "links")) {
        f_result(id, json_pack("{s:[{s:s, s:s, s:s, s:s}, {s:s, s:{s:s, s:s, s:s}},"
                               "{s:s, s:{s:s, s:s, s:s}}]}", "content",
                               "type", "resource_link", "uri", "file:///tmp/a.txt", "name",
                               "a.txt", "mimeType", "text/plain",
                               "type", "resource", "resource", "uri", "file:///b.txt", "mimeType",
                               "text/plain", "text", "embedded text",
                               "type", "resource", "resource", "uri", "file:///c.bin", "mimeType",
                               "application/octet-stream", "blob", "AAEC"));
    } else if (!strcmp(name, "structured")) {
        f_result(id, json_pack("{s:[o], s:{s:i}}", "content", f_text("{\"sum\":5}"),
                               "structuredContent", "sum", 5));
    } else if (!strcmp(name, "fail")) {
        f_result(id, json_pack("{s:[o], s:b}", "content", f_text("boom: disk full"), "isError", 1));
    } else if (!strcmp(name, "replies")) {
        char *s = json_dumps(replies, JSON_COMPACT | JSON_SORT_KEYS);
        f_result(id, f_content1(f_text(s)));
        nx_free(s);
    } else if (!strcmp(name, "env")) {
        const char *v = getenv(json_string_value(json_object_get(args, "name")) ?: "");
        f_result(id, f_content1(f_text(v ? v : "(unset)")));
    } else if (!strcmp(name, "cwd")) {
        char buf[4096];
        f_result(id, f_content1(f_text(getcwd(buf, sizeof buf) ? buf : "?")));
    } else if (!strcmp(name, "big")) {
        size_t n = (size_t)json_integer_value(json_object_get(args, "n"));
        char *t = malloc(n + 1);
        memset(t, 'b', n);
        t[n] = '\0';
        f_result(id, f_content1(f_text(t)));
        free(t);
    } else if (!strcmp(name, "changed")) {
        f_notify("notifications/tools/list_changed");
        f_result(id, f_content1(f_text("ok")));
    } else if (!strcmp(name, "later_changed")) {
        f_result(id, f_content1(f_text("ok")));
        struct timespec ts = {0, 150 * 1000 * 1000};
        nanosleep(&ts, NULL);
        f_notify("notifications/tools/list_changed");
    } else if (!strcmp(name, "sleep")) {
        struct timespec ts = {0, (long)json_integer_value(json_object_get(args, "ms")) * 1000000L};
        nanosleep(&ts, NULL);
        f_result(id, f_content1(f_text("slept")));
    } else if (!strcmp(name, "needinput")) { /* 2026-07-28 multi-round-trip request */
        f_result(id, json_pack("{s:s, s:{s:{s:s}}}", "resultType", "input_required",
                               "inputRequests", "confirm", "method", "elicitation/create"));
    } else if (!strcmp(name, "crash")) {
        f_half_reply(id);
        _exit(3);
    } else {
        char m[200];
        snprintf(m, sizeof m, "Unknown tool: %s", name);
        f_error(id, -32602, m, NULL);
    }
}

static void fake_server(const char *mode) {
    signal(SIGPIPE, SIG_DFL);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    json_t *replies = json_array();
    bool modern = !strcmp(mode, "modern"), first_list = true;
    while ((n = getline(&line, &cap, stdin)) > 0) {
        json_t *m = json_loads(line, 0, NULL);
        if (!m) continue;
        const char *method = json_string_value(json_object_get(m, "method"));
        json_t *id = json_object_get(m, "id");
        json_t *params = json_object_get(m, "params");
        if (!method) { /* the client's answer to one of our requests */
            json_array_append(replies, m);
            json_decref(m);
            continue;
        }
        if (!id) { /* notification */
            if (!strcmp(method, "notifications/initialized") && !strcmp(mode, "exitafterinit"))
                _exit(0);
            json_decref(m);
            continue;
        }
        if (modern && strcmp(method, "server/discover") != 0 && strcmp(method, "initialize") != 0) {
            json_t *v = json_object_get(json_object_get(params, "_meta"),
                                        "io.modelcontextprotocol/protocolVersion");
            if (!json_is_string(v) || strcmp(json_string_value(v), "2026-07-28")) {
                f_error(id, -32602, "missing _meta io.modelcontextprotocol/protocolVersion", NULL);
                json_decref(m);
                continue;
            }
        }
        if (!strcmp(method, "server/discover")) {
            if (modern)
                f_result(id, json_pack("{s:[s], s:{s:{}}, s:{s:s, s:s}, s:s}", "supportedVersions",
                                       "2026-07-28", "capabilities", "tools", "serverInfo", "name",
                                       "fake-modern", "version", "1", "resultType", "complete"));
            else if (!strcmp(mode, "modern-old"))
                f_error(id, -32022, "Unsupported protocol version",
                        json_pack("{s:[s], s:s}", "supported", "2025-06-18", "requested",
                                  "2026-07-28"));
            else if (strcmp(mode, "silent-probe") && strcmp(mode, "hanginit"))
                f_error(id, -32601, "Method not found", NULL);
        } else if (!strcmp(method, "initialize")) {
            if (modern) {
                f_error(id, -32601, "Method not found", NULL);
            } else if (!strcmp(mode, "hanginit")) {
            } else {
                const char *v = !strcmp(mode, "oldversion")   ? "2024-11-05"
                                : !strcmp(mode, "badversion") ? "1999-01-01"
                                : !strcmp(mode, "modern-old") ? "2025-06-18"
                                                              : "2025-11-25";
                f_result(id, json_pack("{s:s, s:{s:{s:b}}, s:{s:s, s:s}, s:s}", "protocolVersion",
                                       v, "capabilities", "tools", "listChanged", 1, "serverInfo",
                                       "name", "fake", "version", "1", "instructions",
                                       "fake instructions"));
            }
        } else if (!strcmp(method, "tools/list")) {
            fake_tools_list(mode, id, params, &first_list);
        } else if (!strcmp(method, "tools/call")) {
            fake_tools_call(id, params, replies);
        } else {
            f_error(id, -32601, "Method not found", NULL);
        }
        json_decref(m);
    }
    _exit(0);
}

__attribute__((constructor)) static void fake_entry(void) {
    const char *mode = getenv("NX_MCP_FAKE");
    if (mode) fake_server(mode);
}

/* ============================== helpers ================================================ */

static char g_fake_env[64];
static const char *g_fake_argv[] = {"/proc/self/exe", NULL};

/* Opens the fake server in a mode; extra env entries may follow (NULL-terminated). */
static int open_fake(const char *mode, struct mcp_server_params *p, mcp_client **c, char *err,
                     size_t errlen) {
    static char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return -100;
    exe[n] = '\0';
    g_fake_argv[0] = exe;
    snprintf(g_fake_env, sizeof g_fake_env, "NX_MCP_FAKE=%s", mode);
    static const char *env[4];
    env[0] = g_fake_env;
    env[1] = "NX_MCP_TEST_VAR=hello from the config";
    env[2] = "ASAN_OPTIONS=detect_leaks=0";
    env[3] = NULL;
    p->argv = g_fake_argv;
    p->env = env;
    return mcp_open(p, c, err, errlen);
}

static bool contains(const char *hay, const char *needle) {
    return hay && needle && strstr(hay, needle) != NULL;
}


static bool alive(int pid) { return kill(pid, 0) == 0; }

static void write_text(const char *path, const char *text);

/* ============================== fake-server tests ====================================== */

static int g_changed_calls;
static void on_changed(mcp_client *c, void *user) {
    (void)c;
    *(int *)user += 1;
}

TEST(fake_good_handshake_list_and_server_requests) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("good", &p, &c, err, sizeof err));
    ASSERT_STR_EQ(mcp_protocol_version(c), "2025-11-25");
    ASSERT_TRUE(!mcp_is_modern(c));
    ASSERT_STR_EQ(json_string_value(json_object_get(mcp_server_info(c), "name")), "fake");
    ASSERT_STR_EQ(mcp_instructions(c), "fake instructions");
    ASSERT_TRUE(json_is_true(json_object_get(
        json_object_get(mcp_server_capabilities(c), "tools"), "listChanged")));
    g_changed_calls = 0;
    mcp_on_tools_changed(c, on_changed, &g_changed_calls);

    json_t *tools = NULL;
    int st = mcp_list_tools(c, &tools, err, sizeof err);
    if (st) fprintf(stderr, "  %s\n", err);
    ASSERT_OK(st);
    /* three pages, in order */
    const char *want[] = {"echo", "media", "env", "fail", "rpcerr", "cwd", "links", "structured",
                          "replies"};
    ASSERT_EQ(json_array_size(tools), NX_ARRAY_LEN(want));
    for (size_t i = 0; i < NX_ARRAY_LEN(want); i++)
        ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, i), "name")), want[i]);
    json_decref(tools);
    /* the list_changed notification before page 1 */
    ASSERT_TRUE(mcp_tools_changed(c));
    ASSERT_EQ(g_changed_calls, 1);
    mcp_tools_changed_clear(c);
    ASSERT_TRUE(!mcp_tools_changed(c));

    /* what the client answered to the server's ping and sampling request */
    json_t *r = NULL;
    ASSERT_OK(mcp_call_tool(c, "replies", NULL, &r, err, sizeof err));
    char *text = mcp_result_text(r);
    json_t *rep = json_loads(text, 0, NULL);
    nx_free(text);
    json_decref(r);
    ASSERT_TRUE(json_is_array(rep));
    ASSERT_EQ(json_array_size(rep), 2);
    json_t *ping = json_array_get(rep, 0), *samp = json_array_get(rep, 1);
    ASSERT_STR_EQ(json_string_value(json_object_get(ping, "id")), "srv-1");
    ASSERT_TRUE(json_is_object(json_object_get(ping, "result")));
    ASSERT_EQ(json_object_size(json_object_get(ping, "result")), 0);
    ASSERT_EQ(json_integer_value(json_object_get(samp, "id")), 77);
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(samp, "error"), "code")), -32601);
    ASSERT_CONTAINS(json_string_value(json_object_get(json_object_get(samp, "error"), "message")),
                    "sampling/createMessage");
    json_decref(rep);
    int pid = mcp_pid(c);
    mcp_close(c);
    ASSERT_TRUE(!alive(pid)); /* reaped, not a zombie */
}

TEST(fake_call_content_types) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("good", &p, &c, err, sizeof err));
    json_t *r = NULL, *args = json_pack("{s:s}", "text", "héllo\nworld");
    ASSERT_OK(mcp_call_tool(c, "echo", args, &r, err, sizeof err));
    json_decref(args);
    struct mcp_content ct;
    ASSERT_EQ(mcp_result_count(r), 1);
    ASSERT_OK(mcp_result_content(r, 0, &ct));
    ASSERT_EQ(ct.type, MCP_CONTENT_TEXT);
    ASSERT_STR_EQ(ct.text, "héllo\nworld");
    ASSERT_EQ(mcp_result_content(r, 1, &ct), NX_STATUS_INVALID_ARG);
    json_decref(r);

    ASSERT_OK(mcp_call_tool(c, "media", NULL, &r, err, sizeof err));
    ASSERT_EQ(mcp_result_count(r), 2);
    ASSERT_OK(mcp_result_content(r, 0, &ct));
    ASSERT_EQ(ct.type, MCP_CONTENT_IMAGE);
    ASSERT_STR_EQ(ct.mime_type, "image/png");
    size_t len = 0;
    unsigned char *b = mcp_base64_decode(ct.data, &len);
    ASSERT_TRUE(b != NULL);
    ASSERT_EQ(len, 6);
    ASSERT_TRUE(memcmp(b, "\x89PNG\r\n", 6) == 0);
    nx_free(b);
    ASSERT_OK(mcp_result_content(r, 1, &ct));
    ASSERT_EQ(ct.type, MCP_CONTENT_AUDIO);
    ASSERT_STR_EQ(ct.mime_type, "audio/wav");
    b = mcp_base64_decode(ct.data, &len);
    ASSERT_TRUE(b && len == 4 && !memcmp(b, "RIFF", 4));
    nx_free(b);
    json_decref(r);

    ASSERT_OK(mcp_call_tool(c, "links", NULL, &r, err, sizeof err));
    ASSERT_EQ(mcp_result_count(r), 3);
    ASSERT_OK(mcp_result_content(r, 0, &ct));
    ASSERT_EQ(ct.type, MCP_CONTENT_RESOURCE_LINK);
    ASSERT_STR_EQ(ct.uri, "file:///tmp/a.txt");
    ASSERT_STR_EQ(ct.name, "a.txt");
    ASSERT_OK(mcp_result_content(r, 1, &ct));
    ASSERT_EQ(ct.type, MCP_CONTENT_RESOURCE);
    ASSERT_STR_EQ(ct.uri, "file:///b.txt");
    ASSERT_STR_EQ(ct.text, "embedded text");
    ASSERT_OK(mcp_result_content(r, 2, &ct));
    ASSERT_EQ(ct.type, MCP_CONTENT_RESOURCE);
    ASSERT_TRUE(ct.text == NULL);
    b = mcp_base64_decode(ct.data, &len);
    ASSERT_TRUE(b && len == 3 && b[0] == 0 && b[1] == 1 && b[2] == 2);
    nx_free(b);
    json_decref(r);

    ASSERT_OK(mcp_call_tool(c, "structured", NULL, &r, err, sizeof err));
    ASSERT_EQ(json_integer_value(json_object_get(mcp_result_structured(r), "sum")), 5);
    ASSERT_TRUE(!mcp_result_is_error(r));
    json_decref(r);

    /* isError result: an error carrying the tool's text, and the result for the model */
    ASSERT_EQ(mcp_call_tool(c, "fail", NULL, &r, err, sizeof err), NX_STATUS_REMOTE);
    ASSERT_CONTAINS(err, "boom: disk full");
    ASSERT_CONTAINS(err, "fail");
    ASSERT_TRUE(r != NULL && mcp_result_is_error(r));
    json_decref(r);

    /* JSON-RPC error object */
    ASSERT_EQ(mcp_call_tool(c, "rpcerr", NULL, &r, err, sizeof err), NX_STATUS_REMOTE);
    ASSERT_CONTAINS(err, "-32602");
    ASSERT_CONTAINS(err, "Unknown tool: rpcerr");
    ASSERT_TRUE(r == NULL);

    /* the client still works after both errors */
    ASSERT_OK(mcp_call_tool(c, "structured", NULL, &r, err, sizeof err));
    json_decref(r);
    /* arguments must be an object */
    json_t *arr = json_array();
    ASSERT_EQ(mcp_call_tool(c, "echo", arr, &r, err, sizeof err), NX_STATUS_INVALID_ARG);
    json_decref(arr);
    /* an unknown method through the raw request */
    int code = 0;
    ASSERT_EQ(mcp_request(c, "no/such_method", NULL, &r, &code, err, sizeof err), NX_STATUS_REMOTE);
    ASSERT_EQ(code, -32601);
    mcp_close(c);
}

TEST(fake_env_cwd_and_list_changed) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    p.cwd = "/tmp";
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("good", &p, &c, err, sizeof err));
    json_t *r = NULL, *args = json_pack("{s:s}", "name", "NX_MCP_TEST_VAR");
    ASSERT_OK(mcp_call_tool(c, "env", args, &r, err, sizeof err));
    json_decref(args);
    char *t = mcp_result_text(r);
    ASSERT_STR_EQ(t, "hello from the config");
    nx_free(t);
    json_decref(r);
    args = json_pack("{s:s}", "name", "PATH"); /* inherited */
    ASSERT_OK(mcp_call_tool(c, "env", args, &r, err, sizeof err));
    json_decref(args);
    t = mcp_result_text(r);
    ASSERT_TRUE(strcmp(t, "(unset)") != 0);
    nx_free(t);
    json_decref(r);
    ASSERT_OK(mcp_call_tool(c, "cwd", NULL, &r, err, sizeof err));
    t = mcp_result_text(r);
    ASSERT_STR_EQ(t, "/tmp");
    nx_free(t);
    json_decref(r);

    /* list_changed inside a call */
    ASSERT_TRUE(!mcp_tools_changed(c));
    ASSERT_OK(mcp_call_tool(c, "changed", NULL, &r, err, sizeof err));
    json_decref(r);
    ASSERT_TRUE(mcp_tools_changed(c));
    mcp_tools_changed_clear(c);
    /* list_changed while idle: mcp_poll returns as soon as it arrives */
    ASSERT_OK(mcp_call_tool(c, "later_changed", NULL, &r, err, sizeof err));
    json_decref(r);
    double t0 = nx_time_s();
    ASSERT_OK(mcp_poll(c, 20000, err, sizeof err));
    double dt = nx_time_s() - t0;
    ASSERT_TRUE(mcp_tools_changed(c));
    ASSERT_TRUE(dt < 10.0); /* returned on the notification (150 ms), not at the 20 s limit */
    /* poll with nothing coming just waits */
    mcp_tools_changed_clear(c);
    t0 = nx_time_s();
    ASSERT_OK(mcp_poll(c, 100, err, sizeof err));
    ASSERT_TRUE(nx_time_s() - t0 >= 0.09);
    ASSERT_TRUE(!mcp_tools_changed(c));
    mcp_close(c);
}

TEST(fake_line_limit_configurable) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    p.max_line = 4096;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("good", &p, &c, err, sizeof err));
    json_t *r = NULL, *args = json_pack("{s:i}", "n", 1000);
    ASSERT_OK(mcp_call_tool(c, "big", args, &r, err, sizeof err));
    json_decref(args);
    json_decref(r);
    args = json_pack("{s:i}", "n", 5000);
    ASSERT_EQ(mcp_call_tool(c, "big", args, &r, err, sizeof err), NX_STATUS_PROTOCOL);
    json_decref(args);
    ASSERT_CONTAINS(err, "longer than the limit of 4096 bytes");
    /* broken from now on, at once */
    double t0 = nx_time_s();
    ASSERT_EQ(mcp_call_tool(c, "echo", NULL, &r, err, sizeof err), NX_STATUS_PROTOCOL);
    ASSERT_TRUE(nx_time_s() - t0 < 1.0);
    mcp_close(c);

    /* default limit: a 3 MB reply passes */
    struct mcp_server_params q = {0};
    q.timeout_ms = 10000;
    ASSERT_OK(open_fake("good", &q, &c, err, sizeof err));
    args = json_pack("{s:i}", "n", 3 << 20);
    ASSERT_OK(mcp_call_tool(c, "big", args, &r, err, sizeof err));
    json_decref(args);
    char *t = mcp_result_text(r);
    ASSERT_EQ(strlen(t), 3 << 20);
    nx_free(t);
    json_decref(r);
    mcp_close(c);
}

TEST(fake_modern_era) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    mcp_client *c = NULL;
    char err[600];
    /* auto: the probe finds a 2026-07-28 server */
    ASSERT_OK(open_fake("modern", &p, &c, err, sizeof err));
    ASSERT_TRUE(mcp_is_modern(c));
    ASSERT_STR_EQ(mcp_protocol_version(c), "2026-07-28");
    ASSERT_STR_EQ(json_string_value(json_object_get(mcp_server_info(c), "name")), "fake-modern");
    json_t *tools = NULL, *r = NULL;
    /* the fake refuses any request without the _meta protocol version */
    ASSERT_OK(mcp_list_tools(c, &tools, err, sizeof err));
    ASSERT_EQ(json_array_size(tools), 9);
    json_decref(tools);
    ASSERT_OK(mcp_call_tool(c, "structured", NULL, &r, err, sizeof err));
    json_decref(r);
    /* input_required (MRTR) is not something this client can satisfy: a clear error */
    ASSERT_EQ(mcp_call_tool(c, "needinput", NULL, &r, err, sizeof err), NX_STATUS_PROTOCOL);
    ASSERT_CONTAINS(err, "input_required");
    ASSERT_TRUE(r == NULL);
    /* and the client goes on */
    ASSERT_OK(mcp_call_tool(c, "structured", NULL, &r, err, sizeof err));
    json_decref(r);
    mcp_close(c);

    /* era forced modern */
    p.era = MCP_ERA_MODERN;
    ASSERT_OK(open_fake("modern", &p, &c, err, sizeof err));
    ASSERT_TRUE(mcp_is_modern(c));
    mcp_close(c);
    /* ... against a legacy server: refused, naming the reason */
    ASSERT_EQ(open_fake("good", &p, &c, err, sizeof err), NX_STATUS_UNSUPPORTED);
    ASSERT_TRUE(c == NULL);
    ASSERT_CONTAINS(err, "not a 2026-07-28 server");
    ASSERT_CONTAINS(err, "-32601");
    /* era forced legacy against a modern-only server: initialize is refused */
    p.era = MCP_ERA_LEGACY;
    ASSERT_EQ(open_fake("modern", &p, &c, err, sizeof err), NX_STATUS_REMOTE);
    ASSERT_CONTAINS(err, "initialize");
    ASSERT_CONTAINS(err, "Method not found");

    /* -32022 listing a legacy version: auto falls back to initialize */
    p.era = MCP_ERA_AUTO;
    ASSERT_OK(open_fake("modern-old", &p, &c, err, sizeof err));
    ASSERT_TRUE(!mcp_is_modern(c));
    ASSERT_STR_EQ(mcp_protocol_version(c), "2025-06-18");
    mcp_close(c);
    /* a server that ignores the probe: fallback after the probe timeout */
    p.probe_timeout_ms = 300;
    double t0 = nx_time_s();
    ASSERT_OK(open_fake("silent-probe", &p, &c, err, sizeof err));
    ASSERT_TRUE(nx_time_s() - t0 < 4.0); /* 300 ms probe + start-up; well under p.timeout_ms */
    ASSERT_STR_EQ(mcp_protocol_version(c), "2025-11-25");
    mcp_close(c);
}

TEST(fake_protocol_versions) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("oldversion", &p, &c, err, sizeof err));
    ASSERT_STR_EQ(mcp_protocol_version(c), "2024-11-05");
    json_t *tools = NULL;
    ASSERT_OK(mcp_list_tools(c, &tools, err, sizeof err));
    json_decref(tools);
    mcp_close(c);
    ASSERT_EQ(open_fake("badversion", &p, &c, err, sizeof err), NX_STATUS_UNSUPPORTED);
    ASSERT_TRUE(c == NULL);
    ASSERT_CONTAINS(err, "'1999-01-01'");
    ASSERT_CONTAINS(err, "2024-11-05");
}

/* A failure mode: tools/list must fail with code `want`, a message containing `text`, within
 * `max_s` seconds; the client must be broken afterwards (next call fails at once). */
static void expect_list_failure(const char *mode, int timeout_ms, int want, const char *text,
                                double max_s) {
    struct mcp_server_params p = {0};
    p.timeout_ms = timeout_ms;
    mcp_client *c = NULL;
    char err[600];
    int st = open_fake(mode, &p, &c, err, sizeof err);
    if (st) FAILF("%s: open failed: %s", mode, err);
    json_t *tools = NULL;
    double t0 = nx_time_s();
    st = mcp_list_tools(c, &tools, err, sizeof err);
    double dt = nx_time_s() - t0;
    if (st != want) {
        mcp_close(c);
        FAILF("%s: status %d (%s), want %d", mode, st, err, want);
    }
    if (!contains(err, text)) {
        mcp_close(c);
        FAILF("%s: message \"%s\" lacks \"%s\"", mode, err, text);
    }
    if (dt > max_s) {
        mcp_close(c);
        FAILF("%s: took %.2f s > %.2f s", mode, dt, max_s);
    }
    ASSERT_TRUE(tools == NULL);
    int pid = mcp_pid(c);
    double t1 = nx_time_s();
    mcp_close(c);
    if (nx_time_s() - t1 > 5.0) FAILF("%s: close took %.2f s", mode, nx_time_s() - t1);
    ASSERT_TRUE(!alive(pid));
}

TEST(fake_garbage) { expect_list_failure("garbage", 10000, NX_STATUS_PROTOCOL, "not JSON", 5.0); }
TEST(fake_garbage_quotes_line) {
    expect_list_failure("garbage", 10000, NX_STATUS_PROTOCOL, "'this is not json {'", 5.0);
}
TEST(fake_10mb_line) {
    expect_list_failure("longline", 20000, NX_STATUS_PROTOCOL, "longer than the limit of 4194304", 10.0);
}
TEST(fake_never_answers) {
    expect_list_failure("hang", 400, NX_STATUS_TIMEOUT, "no reply from the server within 400 ms", 3.0);
}
TEST(fake_crash_mid_reply) {
    expect_list_failure("crash", 10000, NX_STATUS_CLOSED, "exited with status 3", 5.0);
}
TEST(fake_crash_mid_reply_says_mid_message) {
    expect_list_failure("crash", 10000, NX_STATUS_CLOSED, "in the middle of a message", 5.0);
}
TEST(fake_abort_mid_reply) {
    expect_list_failure("abort", 10000, NX_STATUS_CLOSED, "killed by signal 6", 5.0);
}
TEST(fake_flood_never_answers) {
    expect_list_failure("flood", 500, NX_STATUS_TIMEOUT, "no reply", 3.0);
}
TEST(fake_closes_stdout) {
    expect_list_failure("closeout", 10000, NX_STATUS_CLOSED, "closed its stdout", 5.0);
}
TEST(fake_cursor_loop) {
    expect_list_failure("loop", 10000, NX_STATUS_PROTOCOL, "cursor 'same' a second time", 5.0);
}

TEST(fake_page_limit) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 3000;
    p.max_pages = 20;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("manypages", &p, &c, err, sizeof err));
    json_t *tools = NULL;
    ASSERT_EQ(mcp_list_tools(c, &tools, err, sizeof err), NX_STATUS_PROTOCOL);
    ASSERT_CONTAINS(err, "more than 20 pages");
    mcp_close(c);
}

TEST(fake_flood_then_answer) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 10000;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("floodok", &p, &c, err, sizeof err));
    json_t *tools = NULL;
    int st = mcp_list_tools(c, &tools, err, sizeof err);
    if (st) fprintf(stderr, "  %s\n", err);
    ASSERT_OK(st);
    ASSERT_EQ(json_array_size(tools), 9);
    json_decref(tools);
    mcp_close(c);
}

TEST(fake_chatty_stderr) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("stderr", &p, &c, err, sizeof err));
    json_t *tools = NULL;
    double t0 = nx_time_s();
    ASSERT_OK(mcp_list_tools(c, &tools, err, sizeof err)); /* 1 MiB of stderr first */
    ASSERT_TRUE(nx_time_s() - t0 < 4.0);
    json_decref(tools);
    const char *tail = mcp_stderr_tail(c);
    ASSERT_TRUE(strlen(tail) <= MCP_STDERR_KEEP);
    ASSERT_CONTAINS(tail, "last words on stderr");
    mcp_close(c);
}

TEST(fake_timeouts_on_handshake) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 300;
    mcp_client *c = NULL;
    char err[600];
    double t0 = nx_time_s();
    ASSERT_EQ(open_fake("hanginit", &p, &c, err, sizeof err), NX_STATUS_TIMEOUT);
    ASSERT_TRUE(nx_time_s() - t0 < 4.0); /* 300 ms probe + 300 ms initialize + start-up */
    ASSERT_CONTAINS(err, "initialize: no reply from the server within 300 ms");
    ASSERT_TRUE(c == NULL);
}

TEST(fake_server_exits_then_call) {
    /* SIGPIPE must not kill us when the server is gone and we write a request */
    struct mcp_server_params p = {0};
    p.timeout_ms = 10000;
    mcp_client *c = NULL;
    char err[600];
    ASSERT_OK(open_fake("exitafterinit", &p, &c, err, sizeof err));
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    json_t *r = NULL, *args = json_object();
    char *big = malloc(1 << 20); /* more than a pipe holds */
    memset(big, 'a', 1 << 20);
    big[(1 << 20) - 1] = '\0';
    json_object_set_new(args, "text", json_string(big));
    free(big);
    double t0 = nx_time_s();
    int st = mcp_call_tool(c, "echo", args, &r, err, sizeof err);
    json_decref(args);
    ASSERT_EQ(st, NX_STATUS_CLOSED);
    ASSERT_TRUE(nx_time_s() - t0 < 5.0); /* timeout 10 s: closed is seen, not waited out */
    ASSERT_CONTAINS(err, "tools/call echo");
    mcp_close(c);
}

TEST(spawn_errors) {
    char err[600];
    mcp_client *c = NULL;
    struct mcp_server_params p = {0};
    const char *a1[] = {"nx-no-such-server-xyz", NULL};
    p.argv = a1;
    ASSERT_EQ(mcp_open(&p, &c, err, sizeof err), NX_STATUS_IO);
    ASSERT_CONTAINS(err, "'nx-no-such-server-xyz' not found in PATH");
    const char *d = test_tmpdir();
    ASSERT_TRUE(d != NULL);
    char noexec[512];
    snprintf(noexec, sizeof noexec, "%s/not-executable", d);
    write_text(noexec, "#!/bin/sh\n");
    chmod(noexec, 0644);
    const char *a2[] = {noexec, NULL}; /* no execute permission */
    p.argv = a2;
    ASSERT_EQ(mcp_open(&p, &c, err, sizeof err), NX_STATUS_IO);
    ASSERT_CONTAINS(err, "Permission denied");
    unlink(noexec);
    const char *a3[] = {"/bin/true", NULL};
    p.argv = a3;
    p.cwd = "/nonexistent/dir/xyz";
    ASSERT_EQ(mcp_open(&p, &c, err, sizeof err), NX_STATUS_IO);
    ASSERT_CONTAINS(err, "cannot enter directory '/nonexistent/dir/xyz'");
    p.cwd = NULL;
    const char *bad_env[] = {"NOEQUALS", NULL};
    p.env = bad_env;
    ASSERT_EQ(mcp_open(&p, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_CONTAINS(err, "NOEQUALS");
    p.env = NULL;
    /* a program that exits at once: closed, with its status */
    const char *a4[] = {"/bin/sh", "-c", "echo dying >&2; exit 7", NULL};
    p.argv = a4;
    p.timeout_ms = 3000;
    ASSERT_EQ(mcp_open(&p, &c, err, sizeof err), NX_STATUS_CLOSED);
    ASSERT_CONTAINS(err, "exited with status 7");
    ASSERT_CONTAINS(err, "dying");
    ASSERT_TRUE(c == NULL);
    mcp_close(NULL);
    p.argv = NULL;
    ASSERT_EQ(mcp_open(&p, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
}

TEST(base64_and_result_helpers) {
    size_t n;
    unsigned char *b = mcp_base64_decode("aGVsbG8=", &n);
    ASSERT_TRUE(b && n == 5 && !memcmp(b, "hello", 5));
    nx_free(b);
    b = mcp_base64_decode("aGVsbG8", &n); /* no padding */
    ASSERT_TRUE(b && n == 5 && !memcmp(b, "hello", 5));
    nx_free(b);
    ASSERT_TRUE(mcp_base64_decode("a*b=", &n) == NULL);
    ASSERT_TRUE(mcp_base64_decode("a", &n) == NULL);
    b = mcp_base64_decode("", &n);
    ASSERT_TRUE(b && n == 0);
    nx_free(b);
    json_t *r = json_loads("{\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"x-new\"},"
                           "5,{\"type\":\"text\",\"text\":\"b\"}]}", 0, NULL);
    ASSERT_EQ(mcp_result_count(r), 4);
    struct mcp_content ct;
    ASSERT_OK(mcp_result_content(r, 1, &ct));
    ASSERT_EQ(ct.type, MCP_CONTENT_UNKNOWN);
    ASSERT_STR_EQ(ct.type_name, "x-new");
    ASSERT_EQ(mcp_result_content(r, 2, &ct), NX_STATUS_PROTOCOL);
    char *t = mcp_result_text(r);
    ASSERT_STR_EQ(t, "a\nb");
    nx_free(t);
    json_decref(r);
    ASSERT_STR_EQ(nx_status_str(NX_STATUS_TIMEOUT), "timed out");
}

/* ============================== config ================================================= */


static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

TEST(config_parse_errors) {
    mcp_config *cfg = NULL;
    char err[600];
    struct {
        const char *text, *want;
    } cases[] = {
        {"{", "config: line 1"},
        {"[]", "no \"mcpServers\" object"},
        {"{\"mcpServers\": {\"a\": {}}}", "mcpServers.a has no \"command\""},
        {"{\"mcpServers\": {\"a\": {\"url\": \"http://x\"}}}", "not a stdio server"},
        {"{\"mcpServers\": {\"a\": {\"command\": 5}}}", "command is not a non-empty string"},
        {"{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": \"y\"}}}", "args is not an array"},
        {"{\"mcpServers\": {\"a\": {\"command\": \"x\", \"args\": [1]}}}", "args[0] is not a string"},
        {"{\"mcpServers\": {\"a\": {\"command\": \"x\", \"env\": {\"K\": 1}}}}", "env.K is not a string"},
        {"{\"mcpServers\": {\"a b\": {\"command\": \"x\"}}}", "server name 'a b'"},
        {"{\"mcpServers\": {\"a\": {\"command\": \"x\", \"timeoutMs\": -1}}}", "timeoutMs"},
        {"{\"mcpServers\": {\"a\": {\"command\": \"x\"}, \"a\": {\"command\": \"y\"}}}", "duplicate"},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        int st = mcp_config_parse(cases[i].text, NULL, &cfg, err, sizeof err);
        if (st != NX_STATUS_INVALID_ARG) FAILF("case %zu: status %d", i, st);
        if (!contains(err, cases[i].want)) FAILF("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].want);
        ASSERT_TRUE(cfg == NULL);
    }
    ASSERT_OK(mcp_config_parse("{\"mcpServers\": {\"z\": {\"command\": \"x\"}, \"off\": {\"command\": "
                               "\"y\", \"disabled\": true}, \"a\": {\"command\": \"y\", \"cwd\": "
                               "\"sub\"}}}", "/base", &cfg, err, sizeof err));
    ASSERT_EQ(mcp_config_count(cfg), 2);
    ASSERT_STR_EQ(mcp_config_name(cfg, 0), "a");
    ASSERT_STR_EQ(mcp_config_name(cfg, 1), "z");
    mcp_config_free(cfg);
    ASSERT_EQ(mcp_config_load("/nonexistent/cfg.json", &cfg, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_CONTAINS(err, "No such file");
    json_t *tools = NULL;
    ASSERT_EQ(mcp_config_list_tools("/nonexistent/cfg.json", 1000, &tools, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(tools == NULL);
}

TEST(config_fixture_parses) {
    /* the example config for the real servers (README), run from the project root */
    mcp_config *cfg = NULL;
    char err[600];
    int st = mcp_config_load("tests/fixtures/mcp/servers.json", &cfg, err, sizeof err);
    if (st) FAILF("%s", err);
    ASSERT_EQ(mcp_config_count(cfg), 3);
    ASSERT_STR_EQ(mcp_config_name(cfg, 0), "everything");
    ASSERT_STR_EQ(mcp_config_name(cfg, 1), "fs");
    ASSERT_STR_EQ(mcp_config_name(cfg, 2), "memory");
    mcp_config_free(cfg);
}

TEST(config_list_tools_fake_servers) {
    const char *d = test_tmpdir();
    ASSERT_TRUE(d != NULL);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ASSERT_TRUE(n > 0);
    exe[n] = '\0';
    char path[512], text[9000];
    snprintf(path, sizeof path, "%s/fake.json", d);
    /* "b" is listed first in the file; the result is ordered by server name, then tool name */
    snprintf(text, sizeof text,
             "{\"mcpServers\": {"
             "\"b\": {\"command\": \"%s\", \"env\": {\"NX_MCP_FAKE\": \"good\", \"ASAN_OPTIONS\": "
             "\"detect_leaks=0\"}, \"cwd\": \".\"},"
             "\"a\": {\"command\": \"%s\", \"env\": {\"NX_MCP_FAKE\": \"modern\", \"ASAN_OPTIONS\": "
             "\"detect_leaks=0\"}},"
             "\"off\": {\"command\": \"/nonexistent\", \"disabled\": true}}}", exe, exe);
    write_text(path, text);
    json_t *tools = NULL;
    char err[600];
    int st = mcp_config_list_tools(path, 5000, &tools, err, sizeof err);
    if (st) fprintf(stderr, "  %s\n", err);
    ASSERT_OK(st);
    ASSERT_EQ(json_array_size(tools), 18);
    const char *prev_s = "", *prev_n = "";
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *s = json_string_value(json_object_get(t, "server"));
        const char *nm = json_string_value(json_object_get(t, "name"));
        ASSERT_TRUE(s && nm);
        int c = strcmp(prev_s, s);
        ASSERT_TRUE(c < 0 || (c == 0 && strcmp(prev_n, nm) < 0));
        prev_s = s, prev_n = nm;
        ASSERT_TRUE(json_is_object(json_object_get(t, "inputSchema")));
    }
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, 0), "server")), "a");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, 0), "name")), "cwd");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, 17), "server")), "b");
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, 17), "name")), "structured");
    json_decref(tools);

    /* a broken server makes the whole call fail, naming it */
    snprintf(text, sizeof text,
             "{\"mcpServers\": {\"ok\": {\"command\": \"%s\", \"env\": {\"NX_MCP_FAKE\": \"good\"}},"
             "\"bad\": {\"command\": \"%s\", \"env\": {\"NX_MCP_FAKE\": \"garbage\"}}}}", exe, exe);
    write_text(path, text);
    ASSERT_EQ(mcp_config_list_tools(path, 3000, &tools, err, sizeof err), NX_STATUS_PROTOCOL);
    ASSERT_CONTAINS(err, "server 'bad'");
    ASSERT_CONTAINS(err, "not JSON");
    ASSERT_TRUE(tools == NULL);
    unlink(path);
}

/* ============================== allocation failures ==================================== */

/* One session against the fake server: open (spawn + handshake), list the tools (three pages),
 * call echo, close. 0 on success, else the failing call's status (err says why). */
static int oom_session(char *err, size_t errlen) {
    struct mcp_server_params p = {0};
    p.timeout_ms = 5000;
    mcp_client *c = NULL;
    int st = open_fake("good", &p, &c, err, errlen);
    json_t *tools = NULL, *r = NULL, *args = NULL;
    if (st) goto out;
    if ((st = mcp_list_tools(c, &tools, err, errlen))) goto out;
    args = json_pack("{s:s}", "text", "hello");
    if (!args) {
        st = NX_STATUS_NOMEM;
        snprintf(err, errlen, "out of memory (test arguments)");
        goto out;
    }
    if ((st = mcp_call_tool(c, "echo", args, &r, err, errlen))) goto out;
    char *text = mcp_result_text(r);
    if (!text) {
        st = NX_STATUS_NOMEM;
        snprintf(err, errlen, "out of memory (result text)");
    } else if (!strstr(text, "hello")) {
        fprintf(stderr, "  a successful call with the wrong text: %s\n", text);
        abort();
    }
    nx_free(text);
out:
    json_decref(r);
    json_decref(args);
    json_decref(tools);
    mcp_close(c);
    return st;
}

/* The n-th allocation of the session fails, for every n until a session makes fewer than n:
 * each time NX_STATUS_NOMEM with an "out of memory" message, or success where the failed block was
 * optional; never a crash, never a leak (nx_alloc_bytes; the ASan build checks the rest). */
TEST(allocation_failures_session) {
    char err[600];
    size_t before = nx_alloc_bytes();
    int clean = 0;
    long n;
    for (n = 1; n < 5000; n++) {
        size_t fails = nx_alloc_failures();
        nx_alloc_fail_after(n);
        int st = oom_session(err, sizeof err);
        nx_alloc_fail_after(0);
        ASSERT_EQ(nx_alloc_bytes(), before);
        if (nx_alloc_failures() == fails) {
            if (st) FAILF("no failure injected, yet: %s", err);
            break;
        }
        if (st) {
            if (st != NX_STATUS_NOMEM || !strstr(err, "out of memory"))
                FAILF("allocation %ld: status %d, '%s'", n, st, err);
            clean++;
        }
    }
    printf("  a failure injected at each of the first %ld allocations (%d clean failures)\n", n - 1,
           clean);
    ASSERT_TRUE(n > 6);      /* the client's own allocations (jansson's are exempt: alloc.c) */
    ASSERT_TRUE(clean >= 5);
}

/* ============================== the CLI ================================================ */

#include "support/cli.h"

/* Runs `nexus mcp ARGS...` as a process (tests/support/cli.h) with stdout and stderr captured
 * into out (NUL-ended). */
static int run_cli(char **argv, int argc, char *out, size_t outlen) {
    const char *args[16];
    int n = 0;
    for (; n < argc && n < 15; n++) args[n] = argv[n];
    args[n] = NULL;
    char *text = NULL;
    int rc = test_cli(args, true, &text);
    snprintf(out, outlen, "%s", text ? text : "");
    free(text);
    return rc;
}

TEST(cli_list_and_call) {
    const char *d = test_tmpdir();
    ASSERT_TRUE(d != NULL);
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ASSERT_TRUE(n > 0);
    exe[n] = '\0';
    char path[512], text[9000], out[16384];
    snprintf(path, sizeof path, "%s/cli.json", d);
    snprintf(text, sizeof text,
             "{\"mcpServers\": {\"one\": {\"command\": \"%s\", \"env\": {\"NX_MCP_FAKE\": \"good\", "
             "\"ASAN_OPTIONS\": \"detect_leaks=0\"}}}}", exe);
    write_text(path, text);
    char *a1[] = {"mcp", "list", "--config", path};
    ASSERT_EQ(run_cli(a1, 4, out, sizeof out), 0);
    ASSERT_CONTAINS(out, "structured");
    ASSERT_CONTAINS(out, "one");
    ASSERT_CONTAINS(out, "9 tools");
    char *a2[] = {"mcp", "call", "--config", path, "echo", "{\"text\": \"cli says hi\"}"};
    ASSERT_EQ(run_cli(a2, 6, out, sizeof out), 0);
    ASSERT_CONTAINS(out, "cli says hi");
    char *a3[] = {"mcp", "call", "--config", path, "fail"};
    ASSERT_EQ(run_cli(a3, 5, out, sizeof out), 1);
    ASSERT_CONTAINS(out, "boom: disk full");
    char *a4[] = {"mcp", "call", "--config", path, "media", "--json"};
    ASSERT_EQ(run_cli(a4, 6, out, sizeof out), 0);
    ASSERT_CONTAINS(out, "\"mimeType\": \"image/png\"");
    char *a5[] = {"mcp", "call", "--config", path, "nope"};
    ASSERT_EQ(run_cli(a5, 5, out, sizeof out), 1);
    ASSERT_CONTAINS(out, "no server in");
    char *a6[] = {"mcp", "call", "--config", path, "echo", "[1]"};
    ASSERT_EQ(run_cli(a6, 6, out, sizeof out), 1);
    ASSERT_CONTAINS(out, "must be a JSON object");
    char *a7[] = {"mcp", "list"};
    ASSERT_EQ(run_cli(a7, 2, out, sizeof out), 1);
    ASSERT_CONTAINS(out, "exactly one of --config");
    char *a8[] = {"mcp", "list", "--server", "/bin/sh -c 'exit 4'"};
    ASSERT_EQ(run_cli(a8, 4, out, sizeof out), 1);
    ASSERT_CONTAINS(out, "exited with status 4");
    unlink(path);
}

/* ============================== real servers from npm ================================== */

static const char *npm_bin(void) {
    const char *e = getenv("NX_MCP_NPM_BIN");
    return e ? e : "build-npm/node_modules/.bin";
}

/* Full path of an installed server, or NULL (and a FAIL message) when missing. */
static bool real_server(const char *name, char *out, size_t n) {
    snprintf(out, n, "%s/%s", npm_bin(), name);
    if (access(out, X_OK) == 0) return true;
    fprintf(stderr, "  %s is missing: the real-server tests need the npm packages. Install them "
                    "with `make npm-servers` (npm install --prefix build-npm ..., part of `make test`), or point "
                    "NX_MCP_NPM_BIN at a node_modules/.bin that has them.\n", out);
    return false;
}

TEST(real_everything) {
    char exe[512], err[600];
    if (!real_server("mcp-server-everything", exe, sizeof exe)) FAILF("server-everything missing");
    const char *argv[] = {exe, "stdio", NULL};
    struct mcp_server_params p = {0};
    p.argv = argv;
    p.timeout_ms = 10000;
    mcp_client *c = NULL;
    int st = mcp_open(&p, &c, err, sizeof err);
    if (st) FAILF("open: %s", err);
    ASSERT_STR_EQ(mcp_protocol_version(c), "2025-11-25");
    ASSERT_TRUE(mcp_instructions(c) != NULL);
    json_t *tools = NULL;
    st = mcp_list_tools(c, &tools, err, sizeof err);
    if (st) {
        mcp_close(c);
        FAILF("list: %s", err);
    }
    ASSERT_TRUE(json_array_size(tools) >= 10);
    bool has_echo = false, has_sum = false;
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *nm = json_string_value(json_object_get(t, "name"));
        has_echo |= !strcmp(nm, "echo");
        has_sum |= !strcmp(nm, "get-sum");
    }
    json_decref(tools);
    ASSERT_TRUE(has_echo && has_sum);

    json_t *r = NULL, *args = json_pack("{s:s}", "message", "hi from nexus");
    st = mcp_call_tool(c, "echo", args, &r, err, sizeof err);
    json_decref(args);
    if (st) FAILF("echo: %s", err);
    char *text = mcp_result_text(r);
    ASSERT_CONTAINS(text, "hi from nexus");
    nx_free(text);
    json_decref(r);

    args = json_pack("{s:i, s:i}", "a", 2, "b", 40);
    ASSERT_OK(mcp_call_tool(c, "get-sum", args, &r, err, sizeof err));
    json_decref(args);
    text = mcp_result_text(r);
    ASSERT_CONTAINS(text, "42");
    nx_free(text);
    json_decref(r);

    /* an image */
    ASSERT_OK(mcp_call_tool(c, "get-tiny-image", NULL, &r, err, sizeof err));
    bool got_png = false;
    for (size_t k = 0; k < mcp_result_count(r); k++) {
        struct mcp_content ct;
        if (mcp_result_content(r, k, &ct) || ct.type != MCP_CONTENT_IMAGE) continue;
        size_t len = 0;
        unsigned char *b = mcp_base64_decode(ct.data, &len);
        got_png = b && len > 8 && !memcmp(b, "\x89PNG", 4) && !strcmp(ct.mime_type, "image/png");
        nx_free(b);
    }
    json_decref(r);
    ASSERT_TRUE(got_png);

    /* resource links */
    args = json_pack("{s:i}", "count", 2);
    ASSERT_OK(mcp_call_tool(c, "get-resource-links", args, &r, err, sizeof err));
    json_decref(args);
    int links = 0;
    for (size_t k = 0; k < mcp_result_count(r); k++) {
        struct mcp_content ct;
        if (!mcp_result_content(r, k, &ct) && ct.type == MCP_CONTENT_RESOURCE_LINK && ct.uri) links++;
    }
    json_decref(r);
    ASSERT_EQ(links, 2);

    /* structured content */
    args = json_pack("{s:s}", "location", "Chicago");
    ASSERT_OK(mcp_call_tool(c, "get-structured-content", args, &r, err, sizeof err));
    json_decref(args);
    ASSERT_TRUE(json_is_object(mcp_result_structured(r)));
    json_decref(r);

    /* unknown tool: the TS SDK answers isError (ROUTING.md §2.7); either form is an error that
     * carries the server's message */
    st = mcp_call_tool(c, "no_such_tool", NULL, &r, err, sizeof err);
    ASSERT_TRUE(st == NX_STATUS_REMOTE || st == NX_STATUS_REMOTE);
    ASSERT_CONTAINS(err, "no_such_tool");
    json_decref(r);
    int pid = mcp_pid(c);
    mcp_close(c);
    ASSERT_TRUE(!alive(pid));
}

TEST(real_filesystem) {
    char exe[512], err[600];
    if (!real_server("mcp-server-filesystem", exe, sizeof exe)) FAILF("server-filesystem missing");
    const char *d = test_tmpdir();
    ASSERT_TRUE(d != NULL);
    char root[512], file[600];
    snprintf(root, sizeof root, "%s/fsroot", d);
    mkdir(root, 0700);
    snprintf(file, sizeof file, "%s/hello.txt", root);
    write_text(file, "hello, nexus\nsecond line\n");
    const char *argv[] = {exe, root, NULL};
    struct mcp_server_params p = {0};
    p.argv = argv;
    p.timeout_ms = 10000;
    mcp_client *c = NULL;
    int st = mcp_open(&p, &c, err, sizeof err);
    if (st) FAILF("open: %s", err);
    json_t *tools = NULL;
    ASSERT_OK(mcp_list_tools(c, &tools, err, sizeof err));
    ASSERT_TRUE(json_array_size(tools) >= 10);
    json_decref(tools);

    json_t *r = NULL, *args = json_pack("{s:s}", "path", file);
    st = mcp_call_tool(c, "read_text_file", args, &r, err, sizeof err);
    json_decref(args);
    if (st) FAILF("read_text_file: %s", err);
    char *text = mcp_result_text(r);
    ASSERT_STR_EQ(text, "hello, nexus\nsecond line\n");
    nx_free(text);
    json_decref(r);

    args = json_pack("{s:s}", "path", root);
    ASSERT_OK(mcp_call_tool(c, "list_directory", args, &r, err, sizeof err));
    json_decref(args);
    text = mcp_result_text(r);
    ASSERT_CONTAINS(text, "hello.txt");
    nx_free(text);
    json_decref(r);

    /* outside the allowed directory: an error carrying the server's words */
    args = json_pack("{s:s}", "path", "/etc/hostname");
    st = mcp_call_tool(c, "read_text_file", args, &r, err, sizeof err);
    json_decref(args);
    json_decref(r);
    ASSERT_TRUE(st == NX_STATUS_REMOTE || st == NX_STATUS_REMOTE);
    ASSERT_CONTAINS(err, "ccess denied");
    mcp_close(c);
    unlink(file);
    rmdir(root);
}

TEST(real_memory) {
    char exe[512], err[600];
    if (!real_server("mcp-server-memory", exe, sizeof exe)) FAILF("server-memory missing");
    const char *d = test_tmpdir();
    ASSERT_TRUE(d != NULL);
    char envv[600], mem[560];
    snprintf(mem, sizeof mem, "%s/memory.jsonl", d);
    snprintf(envv, sizeof envv, "MEMORY_FILE_PATH=%s", mem);
    const char *argv[] = {exe, NULL};
    const char *env[] = {envv, NULL};
    struct mcp_server_params p = {0};
    p.argv = argv;
    p.env = env;
    p.timeout_ms = 10000;
    mcp_client *c = NULL;
    int st = mcp_open(&p, &c, err, sizeof err);
    if (st) FAILF("open: %s", err);
    json_t *tools = NULL;
    ASSERT_OK(mcp_list_tools(c, &tools, err, sizeof err));
    ASSERT_EQ(json_array_size(tools), 9);
    json_decref(tools);
    json_t *r = NULL;
    json_t *args = json_pack("{s:[{s:s, s:s, s:[s]}]}", "entities", "name", "nexus_runtime",
                             "entityType", "project", "observations", "written in C11");
    st = mcp_call_tool(c, "create_entities", args, &r, err, sizeof err);
    json_decref(args);
    if (st) FAILF("create_entities: %s", err);
    json_decref(r);
    args = json_pack("{s:s}", "query", "nexus_runtime");
    ASSERT_OK(mcp_call_tool(c, "search_nodes", args, &r, err, sizeof err));
    json_decref(args);
    char *text = mcp_result_text(r);
    ASSERT_CONTAINS(text, "written in C11");
    nx_free(text);
    json_decref(r);
    mcp_close(c);
    /* the server wrote its file through the env we passed */
    struct stat sb;
    ASSERT_OK(stat(mem, &sb));
    unlink(mem);
}

TEST(real_config_three_servers) {
    char ev[512], fs[512], mm[512], err[600];
    if (!real_server("mcp-server-everything", ev, sizeof ev) ||
        !real_server("mcp-server-filesystem", fs, sizeof fs) ||
        !real_server("mcp-server-memory", mm, sizeof mm))
        FAILF("real servers missing");
    const char *d = test_tmpdir();
    ASSERT_TRUE(d != NULL);
    char path[512], text[20000], cwd[4096];
    ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
    snprintf(path, sizeof path, "%s/real.json", d);
    /* paths in the config are absolute: npm_bin() is relative to our cwd */
    snprintf(text, sizeof text,
             "{\"mcpServers\": {"
             "\"memory\": {\"command\": \"%s%s%s\", \"env\": {\"MEMORY_FILE_PATH\": \"%s/m.jsonl\"}},"
             "\"everything\": {\"command\": \"%s%s%s\", \"args\": [\"stdio\"]},"
             "\"fs\": {\"command\": \"%s%s%s\", \"args\": [\"%s\"]}}}",
             mm[0] == '/' ? "" : cwd, mm[0] == '/' ? "" : "/", mm, d,
             ev[0] == '/' ? "" : cwd, ev[0] == '/' ? "" : "/", ev,
             fs[0] == '/' ? "" : cwd, fs[0] == '/' ? "" : "/", fs, d);
    write_text(path, text);
    json_t *tools = NULL;
    double t0 = nx_time_s();
    int st = mcp_config_list_tools(path, 10000, &tools, err, sizeof err);
    if (st) FAILF("%s", err);
    fprintf(stderr, "  3 real servers listed in %.2f s: %zu tools\n", nx_time_s() - t0,
            json_array_size(tools));
    ASSERT_TRUE(json_array_size(tools) >= 30);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_array_get(tools, 0), "server")),
                  "everything");
    ASSERT_STR_EQ(json_string_value(json_object_get(
                      json_array_get(tools, json_array_size(tools) - 1), "server")), "memory");
    json_decref(tools);
    unlink(path);
    char m[600];
    snprintf(m, sizeof m, "%s/m.jsonl", d);
    unlink(m);
}

TEST_MAIN
