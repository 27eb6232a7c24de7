/*
 * test_agent.c - src/agent: surrogates and the payload store, the tool set (registry + router +
 * signatures) over a real MCP server, tool execution against the npm server-filesystem (write
 * then read a file) and against a server that crashes or hangs (a tool error, never a crash).
 * The real server comes from build-npm/node_modules/.bin (NX_MCP_NPM_BIN overrides); the test
 * FAILS when it is missing (`make npm-servers`).
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/exec.h"
#include "agent/surrogate.h"
#include "agent/toolset.h"
#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/readfile.h"
#include "support/tmpdir.h"
#include "test.h"

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fputs(text, f);
    fclose(f);
}

/* ---- surrogates ---- */

TEST(surrogate_small_is_verbatim) {
    size_t n = 0;
    char *s = ag_surrogate("hello", 5, "result-1", 200, &n);
    ASSERT_STR_EQ(s, "hello");
    ASSERT_EQ(n, 5);
    nx_free(s);
}

TEST(surrogate_large_is_bounded_with_head_tail_and_id) {
    size_t len = 100000;
    char *p = nx_malloc(len + 1);
    for (size_t i = 0; i < len; i++) p[i] = (i % 61 == 60) ? '\n' : (char)('a' + i % 26);
    memcpy(p, "HEAD", 4);
    memcpy(p + len - 4, "TAIL", 4);
    p[len] = 0;
    for (size_t budget = 96; budget <= 4096; budget *= 2) {
        size_t n = 0;
        char *s = ag_surrogate(p, len, "result-7", budget, &n);
        ASSERT_TRUE(s != NULL);
        ASSERT_EQ(n, strlen(s));
        ASSERT_TRUE(n <= budget);
        ASSERT_TRUE(n >= budget - 8); /* the budget is used, not wasted */
        ASSERT_TRUE(!strncmp(s, "HEAD", 4));
        ASSERT_TRUE(!strcmp(s + n - 4, "TAIL"));
        ASSERT_CONTAINS(s, "elided; full result: result-7");
        /* the elided count is exact: head + tail + elided = len */
        const char *m = strstr(s, "\n[... ");
        ASSERT_TRUE(m != NULL);
        size_t elided = strtoul(m + 6, NULL, 10);
        const char *after = strstr(m, "...]\n") + 5;
        ASSERT_EQ((size_t)(m - s) + elided + (size_t)(s + n - after), len);
        nx_free(s);
    }
    nx_free(p);
}

TEST(surrogate_never_cuts_a_character) {
    /* 3-byte characters only: every cut must fall on a multiple of 3 from either end */
    size_t len = 3 * 1000;
    char *p = nx_malloc(len + 1);
    for (size_t i = 0; i < len; i += 3) memcpy(p + i, "\xe2\x82\xac", 3); /* EURO SIGN */
    p[len] = 0;
    for (size_t budget = 96; budget < 400; budget += 7) {
        char *s = ag_surrogate(p, len, "result-1", budget, NULL);
        const char *m = strstr(s, "\n[... ");
        ASSERT_TRUE(m != NULL);
        ASSERT_EQ((size_t)(m - s) % 3, 0);
        const char *after = strstr(m, "...]\n") + 5;
        ASSERT_EQ(strlen(after) % 3, 0);
        nx_free(s);
    }
    nx_free(p);
}

TEST(payload_store_by_id) {
    ag_payloads *ps = ag_payloads_new();
    ASSERT_EQ(ag_payload_put(ps, "one", 3), 0);
    ASSERT_EQ(ag_payload_put(ps, "two\0x", 5), 1);
    char id[32];
    ag_payload_id(1, id, sizeof id);
    ASSERT_STR_EQ(id, "result-2");
    size_t n = 0;
    const char *t = ag_payload_get(ps, id, &n);
    ASSERT_EQ(n, 5);
    ASSERT_TRUE(!memcmp(t, "two\0x", 5));
    ASSERT_STR_EQ(ag_payload_get(ps, "result-1", NULL), "one");
    ASSERT_TRUE(ag_payload_get(ps, "result-3", NULL) == NULL);
    ASSERT_TRUE(ag_payload_get(ps, "result-0", NULL) == NULL);
    ASSERT_TRUE(ag_payload_get(ps, "result-1x", NULL) == NULL);
    ASSERT_TRUE(ag_payload_get(ps, "x", NULL) == NULL);
    ASSERT_EQ(ag_payloads_count(ps), 2);
    ag_payloads_free(ps);
}

/* ---- real server-filesystem ---- */

static bool fs_server(char *out, size_t n) {
    const char *e = getenv("NX_MCP_NPM_BIN");
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/mcp-server-filesystem", e ? e : "build-npm/node_modules/.bin");
    if (!realpath(rel, out) || access(out, X_OK)) {
        fprintf(stderr, "  %s is missing: install the npm servers with `make npm-servers`\n", rel);
        return false;
    }
    (void)n;
    return true;
}

/* A config with server "fs" rooted at ROOT (made), into cfg_path. */
static bool fs_config(char *cfg_path, size_t n, char *root, size_t rn) {
    char exe[PATH_MAX];
    if (!fs_server(exe, sizeof exe)) return false;
    test_tmp_path("fsroot", root, rn);
    mkdir(root, 0700);
    test_tmp_path("mcp.json", cfg_path, n);
    char text[4 * PATH_MAX];
    snprintf(text, sizeof text,
             "{\"mcpServers\": {\"fs\": {\"command\": \"%s\", \"args\": [\"%s\"], \"cwd\": \"%s\"}}}",
             exe, root, root);
    write_text(cfg_path, text);
    return true;
}

TEST(toolset_routes_mcp_tools_with_signatures) {
    char cfg[PATH_MAX], root[PATH_MAX], err[600];
    if (!fs_config(cfg, sizeof cfg, root, sizeof root)) FAILF("server-filesystem missing");
    ag_toolset *ts = NULL;
    struct rt_router_params rp = rt_router_default_params();
    rp.k = 3;
    if (ag_toolset_open(NULL, 0, cfg, &rp, &ts, err, sizeof err)) FAILF("open: %s", err);
    const rt_registry *reg = ag_toolset_registry(ts);
    ASSERT_TRUE(reg->n >= 10);
    int w = rt_registry_find(reg, "write_file");
    ASSERT_TRUE(w >= 0);
    ASSERT_STR_EQ(reg->tools[w].source, "fs");
    ASSERT_CONTAINS(ag_toolset_signature(ts, w), "write_file(path: string, content: string");
    struct ag_choice c;
    ASSERT_OK(ag_toolset_route(ts, "write a new file with this content", &c, err, sizeof err));
    ASSERT_EQ(c.n, 3);
    bool found = false;
    for (int i = 0; i < c.n; i++) found |= c.tool[i] == w;
    ASSERT_TRUE(found);
    ASSERT_EQ(c.chosen, c.tool[0]);
    ASSERT_TRUE(c.score[0] >= c.score[1] && c.score[1] >= c.score[2]);
    char *pr = ag_toolset_prompt(ts, &c);
    int lines = 0;
    for (const char *q = pr; *q; q++) lines += *q == '\n';
    ASSERT_EQ(lines, 3);
    ASSERT_CONTAINS(pr, ag_toolset_signature(ts, c.tool[2]));
    nx_free(pr);
    ag_toolset_free(ts);
}

TEST(exec_write_then_read_through_server_filesystem) {
    char cfg_path[PATH_MAX], root[PATH_MAX], err[600];
    if (!fs_config(cfg_path, sizeof cfg_path, root, sizeof root)) FAILF("server-filesystem missing");
    ag_toolset *ts = NULL;
    if (ag_toolset_open(NULL, 0, cfg_path, NULL, &ts, err, sizeof err)) FAILF("open: %s", err);
    mcp_config *cfg = NULL;
    ASSERT_OK(mcp_config_load(cfg_path, &cfg, err, sizeof err));
    ag_exec *ex = NULL;
    struct ag_exec_params ep = {.timeout_ms = 20000, .budget = 256};
    ASSERT_OK(ag_exec_new(cfg, &ep, &ex, err, sizeof err));
    const rt_registry *reg = ag_toolset_registry(ts);
    const struct rt_tool *wt = &reg->tools[rt_registry_find(reg, "write_file")];
    const struct rt_tool *rd = &reg->tools[rt_registry_find(reg, "read_text_file")];

    char file[PATH_MAX + 32], args[2 * PATH_MAX];
    snprintf(file, sizeof file, "%s/notes.txt", root);
    snprintf(args, sizeof args, "{\"path\": \"%s\", \"content\": \"hello from the agent\"}", file);
    struct ag_exec_result r;
    ASSERT_OK(ag_exec_call(ex, wt, args, &r));
    if (r.is_error) FAILF("write_file: %s", r.surrogate);
    nx_free(r.surrogate);
    size_t dlen = 0;
    char *disk = nx_read_file(file, 1 << 20, &dlen, err, sizeof err);
    ASSERT_STR_EQ(disk, "hello from the agent"); /* an independent check: the file itself */
    nx_free(disk);

    snprintf(args, sizeof args, "{\"path\": \"%s\"}", file);
    ASSERT_OK(ag_exec_call(ex, rd, args, &r));
    ASSERT_TRUE(!r.is_error);
    ASSERT_STR_EQ(r.surrogate, "hello from the agent");
    nx_free(r.surrogate);

    /* a large file: the surrogate is bounded, the full payload is kept by id */
    char big[PATH_MAX + 32];
    snprintf(big, sizeof big, "%s/big.txt", root);
    FILE *f = fopen(big, "w");
    for (int i = 0; i < 5000; i++) fprintf(f, "line %d of a long tool result\n", i);
    fclose(f);
    snprintf(args, sizeof args, "{\"path\": \"%s\"}", big);
    ASSERT_OK(ag_exec_call(ex, rd, args, &r));
    ASSERT_TRUE(!r.is_error);
    ASSERT_TRUE(r.surrogate_len <= 256);
    ASSERT_CONTAINS(r.surrogate, "line 0 of a long");
    ASSERT_CONTAINS(r.surrogate, "line 4999 of a long tool result");
    ASSERT_CONTAINS(r.surrogate, r.id);
    size_t plen = 0;
    const char *full = ag_payload_get(ag_exec_payloads(ex), r.id, &plen);
    size_t wlen = 0;
    char *want = nx_read_file(big, 1 << 20, &wlen, err, sizeof err);
    ASSERT_EQ(plen, r.payload_len);
    ASSERT_STR_EQ(full, want);
    nx_free(want);
    nx_free(r.surrogate);

    /* a path outside the allowed directory: the tool's own error, as a result */
    ASSERT_OK(ag_exec_call(ex, rd, "{\"path\": \"/etc/passwd\"}", &r));
    ASSERT_TRUE(r.is_error);
    ASSERT_EQ(r.status, NX_STATUS_REMOTE);
    nx_free(r.surrogate);
    /* arguments that are not an object never reach the server */
    ASSERT_OK(ag_exec_call(ex, rd, "[1]", &r));
    ASSERT_TRUE(r.is_error);
    ASSERT_CONTAINS(r.surrogate, "not a JSON object");
    nx_free(r.surrogate);

    ag_exec_free(ex);
    mcp_config_free(cfg);
    ag_toolset_free(ts);
}

/* ---- a server that crashes or hangs ---- */

static const char k_bad_server[] =
    "import json, sys, time\n"
    "for line in sys.stdin:\n"
    "    m = json.loads(line)\n"
    "    if 'id' not in m: continue\n"
    "    meth, i = m.get('method'), m['id']\n"
    "    if meth == 'initialize':\n"
    "        r = {'protocolVersion': '2025-06-18', 'capabilities': {'tools': {}}, 'serverInfo': {'name': 'bad', 'version': '1'}}\n"
    "    elif meth == 'tools/list':\n"
    "        r = {'tools': [{'name': n, 'description': n + ' tool', 'inputSchema': {'type': 'object'}} for n in ('boom', 'hang', 'echo')]}\n"
    "    elif meth == 'tools/call':\n"
    "        n = m['params']['name']\n"
    "        if n == 'boom': sys.stdout.write('{\"jsonrpc\": \"2.0\", \"id\": '); sys.stdout.flush(); sys.exit(3)\n"
    "        if n == 'hang': time.sleep(60)\n"
    "        r = {'content': [{'type': 'text', 'text': 'echo ok'}]}\n"
    "    else:\n"
    "        print(json.dumps({'jsonrpc': '2.0', 'id': i, 'error': {'code': -32601, 'message': 'no'}}), flush=True); continue\n"
    "    print(json.dumps({'jsonrpc': '2.0', 'id': i, 'result': r}), flush=True)\n";

TEST(exec_crashing_and_hanging_server_are_tool_errors) {
    char py[PATH_MAX], cfg_path[PATH_MAX], err[600];
    test_tmp_path("bad_server.py", py, sizeof py);
    write_text(py, k_bad_server);
    test_tmp_path("bad.json", cfg_path, sizeof cfg_path);
    char text[2 * PATH_MAX];
    snprintf(text, sizeof text,
             "{\"mcpServers\": {\"bad\": {\"command\": \"/usr/bin/python3\", \"args\": [\"%s\"], "
             "\"timeoutMs\": 1500}}}", py);
    write_text(cfg_path, text);
    ag_toolset *ts = NULL;
    if (ag_toolset_open(NULL, 0, cfg_path, NULL, &ts, err, sizeof err)) FAILF("open: %s", err);
    mcp_config *cfg = NULL;
    ASSERT_OK(mcp_config_load(cfg_path, &cfg, err, sizeof err));
    ag_exec *ex = NULL;
    ASSERT_OK(ag_exec_new(cfg, NULL, &ex, err, sizeof err));
    const rt_registry *reg = ag_toolset_registry(ts);
    struct ag_exec_result r;
    ASSERT_OK(ag_exec_call(ex, &reg->tools[rt_registry_find(reg, "boom")], "{}", &r));
    ASSERT_TRUE(r.is_error);
    ASSERT_EQ(r.status, NX_STATUS_CLOSED);
    ASSERT_CONTAINS(r.surrogate, "exited with status 3");
    nx_free(r.surrogate);
    /* the next call starts the server again */
    ASSERT_OK(ag_exec_call(ex, &reg->tools[rt_registry_find(reg, "echo")], "{}", &r));
    ASSERT_TRUE(!r.is_error);
    ASSERT_STR_EQ(r.surrogate, "echo ok");
    nx_free(r.surrogate);
    double t0 = nx_time_s();
    ASSERT_OK(ag_exec_call(ex, &reg->tools[rt_registry_find(reg, "hang")], "{}", &r));
    ASSERT_TRUE(nx_time_s() - t0 < 10);
    ASSERT_TRUE(r.is_error);
    ASSERT_EQ(r.status, NX_STATUS_TIMEOUT);
    nx_free(r.surrogate);
    ASSERT_OK(ag_exec_call(ex, &reg->tools[rt_registry_find(reg, "echo")], "{}", &r));
    ASSERT_TRUE(!r.is_error);
    nx_free(r.surrogate);
    /* a tool whose source is not a server of the config */
    struct rt_tool fake = reg->tools[0];
    fake.source = "nowhere";
    ASSERT_OK(ag_exec_call(ex, &fake, "{}", &r));
    ASSERT_TRUE(r.is_error);
    ASSERT_CONTAINS(r.surrogate, "no server of the MCP config");
    nx_free(r.surrogate);
    ag_exec_free(ex);
    mcp_config_free(cfg);
    ag_toolset_free(ts);
}

TEST_MAIN
