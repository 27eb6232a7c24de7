/*
 * test_agent.c - src/agent: surrogates and the payload store, the tool set (registry + router +
 * signatures) over a real MCP server, tool execution against the npm server-filesystem (write
 * then read a file) and against a server that crashes or hangs (a tool error, never a crash).
 * The real server comes from build-npm/node_modules/.bin (NX_MCP_NPM_BIN overrides); the test
 * FAILS when it is missing (`make npm-servers`).
 */
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/exec.h"
#include "agent/sidecar.h"
#include "agent/surrogate.h"
#include "agent/toolset.h"
#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/json.h"
#include "core/readfile.h"
#include "support/cli.h"
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

static char g_fsroot[PATH_MAX];
static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}
/* The files the servers wrote under fsroot (the temporary directory's cleanup is one level). */
static void rm_fsroot(void) {
    if (g_fsroot[0]) nftw(g_fsroot, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* A config with server "fs" rooted at ROOT (made), into cfg_path. */
static bool fs_config(char *cfg_path, size_t n, char *root, size_t rn) {
    char exe[PATH_MAX];
    if (!fs_server(exe, sizeof exe)) return false;
    test_tmp_path("fsroot", root, rn);
    mkdir(root, 0700);
    if (!g_fsroot[0]) {
        snprintf(g_fsroot, sizeof g_fsroot, "%s", root);
        atexit(rm_fsroot);
    }
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

/* A config with server "bad" (the script above, 1.5 s timeout) into cfg_path. */
static void bad_config(char *cfg_path, size_t n) {
    char py[PATH_MAX], text[2 * PATH_MAX];
    test_tmp_path("bad_server.py", py, sizeof py);
    write_text(py, k_bad_server);
    test_tmp_path("bad.json", cfg_path, n);
    snprintf(text, sizeof text,
             "{\"mcpServers\": {\"bad\": {\"command\": \"/usr/bin/python3\", \"args\": [\"%s\"], "
             "\"timeoutMs\": 1500}}}", py);
    write_text(cfg_path, text);
}

TEST(exec_crashing_and_hanging_server_are_tool_errors) {
    char cfg_path[PATH_MAX], err[600];
    bad_config(cfg_path, sizeof cfg_path);
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

/* ---- the sidecar on stories260K ---- */

static const char *k_model = "../shared/models/stories260K/stories260K.gguf";

/* Next-token logits after prompt + X on sequence 0, with or without a sidecar in between. */
TEST(sidecar_restores_the_main_session_bit_for_bit_and_splices_exactly) {
    char cfg[PATH_MAX], root[PATH_MAX], err[600];
    if (!fs_config(cfg, sizeof cfg, root, sizeof root)) FAILF("server-filesystem missing");
    ag_toolset *ts = NULL;
    if (ag_toolset_open(NULL, 0, cfg, NULL, &ts, err, sizeof err)) FAILF("open: %s", err);
    const rt_registry *reg = ag_toolset_registry(ts);
    int w = rt_registry_find(reg, "write_file");
    nx_model *m = NULL;
    ASSERT_OK(nx_model_load(k_model, NULL, &m, err, sizeof err));
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 1024;
    cp.n_seq_max = 2;
    nx_ctx *ctx = NULL;
    ASSERT_OK(nx_ctx_init(m, &cp, &ctx, err, sizeof err));
    ag_sidecar *sc = NULL;
    struct ag_sidecar_params sp = {.window_tokens = 64, .max_tokens = 96};
    ASSERT_OK(ag_sidecar_new(m, reg, &sp, &sc, err, sizeof err));
    nx_token prompt[40], x = 300;
    for (int i = 0; i < 40; i++) prompt[i] = 1 + (i * 37) % 500;
    int nv = nx_model_n_vocab(m);
    float *ref = nx_malloc((size_t)nv * sizeof *ref);
    ASSERT_OK(nx_decode(ctx, prompt, 40, false));
    ASSERT_OK(nx_decode(ctx, &x, 1, false));
    memcpy(ref, nx_get_logits(ctx, -1), (size_t)nv * sizeof *ref);

    nx_ctx_reset(ctx);
    ASSERT_OK(nx_decode(ctx, prompt, 40, false));
    struct ag_sidecar_result r1, r2;
    ASSERT_OK(ag_sidecar_args(sc, ctx, w, "User: write hello to notes.txt", &r1, err, sizeof err));
    ASSERT_TRUE(r1.compiled_now);
    ASSERT_EQ(nx_seq_n_past(ctx, 0), 40);
    ASSERT_EQ(nx_seq_n_past(ctx, 1), 0);
    /* the second use splices the block at its anchor: the same arguments, token for token */
    ASSERT_OK(ag_sidecar_args(sc, ctx, w, "User: write hello to notes.txt", &r2, err, sizeof err));
    ASSERT_TRUE(!r2.compiled_now);
    ASSERT_STR_EQ(r1.arguments, r2.arguments);
    ASSERT_TRUE(r2.json_object && r2.schema_valid && r2.grammar_complete && !r2.grammar_fallback);
    ASSERT_TRUE(r2.t_first > 0 && r2.t_first <= r2.t_total);
    char *bt = ag_sidecar_block_text(&reg->tools[w]);
    ASSERT_CONTAINS(bt, "Tool: write_file\n");
    nx_free(bt);
    ASSERT_TRUE(r2.n_block > 20 && r2.n_window > 0 && r2.n_prefix > 0);
    ASSERT_OK(nx_decode(ctx, &x, 1, false));
    ASSERT_TRUE(!memcmp(ref, nx_get_logits(ctx, -1), (size_t)nv * sizeof *ref));
    nx_free(r1.arguments);
    nx_free(r1.raw);
    nx_free(r2.arguments);
    nx_free(r2.raw);
    /* a context with one sequence is refused with a message */
    nx_ctx *one = NULL;
    cp.n_seq_max = 1;
    ASSERT_OK(nx_ctx_init(m, &cp, &one, err, sizeof err));
    ASSERT_EQ(ag_sidecar_args(sc, one, w, "", &r1, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_CONTAINS(err, "second sequence");
    nx_ctx_free(one);
    nx_free(ref);
    ag_sidecar_free(sc);
    nx_ctx_free(ctx);
    nx_model_free(m);
    ag_toolset_free(ts);
}

/* ---- `nexus agent` end to end ---- */

/* Validates arguments (JSON text) against tool's input schema with python3-jsonschema. */
static bool schema_valid(const struct rt_tool *t, const char *arguments) {
    char sp[PATH_MAX], ap[PATH_MAX];
    test_tmp_path("schema.json", sp, sizeof sp);
    test_tmp_path("args.json", ap, sizeof ap);
    char *schema = nx_json_dumps(t->schema, JSON_COMPACT);
    write_text(sp, schema);
    nx_free(schema);
    write_text(ap, arguments);
    char cmd[3 * PATH_MAX];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import json, sys, jsonschema; "
             "jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))' %s %s",
             sp, ap);
    return system(cmd) == 0;
}

/* Runs one `nexus agent` turn (with template tmpl, or the model's when NULL); returns its
 * parsed trace (NULL on failure). */
static json_t *agent_turn_with(const char *cfg, const char *trace, const char *k, const char *task,
                               const char *tmpl) {
    const char *args[] = {"agent", "-m", k_model, "--mcp", cfg, "--steps", "1", "--tool-choice",
                          "required", "-k", k, "--budget", "200", "--trace", trace, task,
                          tmpl ? "--template" : NULL, tmpl, NULL};
    char *out = NULL;
    int rc = test_cli(args, true, &out);
    if (rc != 0) fprintf(stderr, "  nexus agent exited %d: %s\n", rc, out ? out : "");
    free(out);
    if (rc != 0) return NULL;
    return json_load_file(trace, 0, NULL);
}
static json_t *agent_turn(const char *cfg, const char *trace, const char *k, const char *task) {
    return agent_turn_with(cfg, trace, k, task, NULL);
}

TEST(agent_turn_writes_then_reads_through_server_filesystem) {
    char cfg[PATH_MAX], root[PATH_MAX], err[600], tr[PATH_MAX];
    if (!fs_config(cfg, sizeof cfg, root, sizeof root)) FAILF("server-filesystem missing");
    ag_toolset *ts = NULL;
    if (ag_toolset_open(NULL, 0, cfg, NULL, &ts, err, sizeof err)) FAILF("open: %s", err);
    const rt_registry *reg = ag_toolset_registry(ts);
    test_tmp_path("trace1.json", tr, sizeof tr);
    json_t *t = agent_turn(cfg, tr, "1", "write_file: create a new file with some content");
    ASSERT_TRUE(t != NULL);
    json_t *s1 = json_array_get(json_object_get(t, "steps"), 0);
    json_t *call = json_object_get(s1, "call"), *res = json_object_get(s1, "result");
    ASSERT_STR_EQ(json_string_value(json_object_get(call, "name")), "write_file");
    const char *a = json_string_value(json_object_get(call, "arguments"));
    ASSERT_TRUE(schema_valid(&reg->tools[rt_registry_find(reg, "write_file")], a));
    ASSERT_TRUE(json_real_value(json_object_get(json_object_get(s1, "sidecar"), "ttfa_ms")) > 0);
    ASSERT_TRUE(json_integer_value(json_object_get(s1, "prompt_tokens")) > 0);
    ASSERT_STR_EQ(json_string_value(json_object_get(t, "stop")), "step_limit");
    /* independent check: what the server did on disk is what the arguments asked */
    json_t *aj = json_loads(a, 0, NULL);
    const char *path = json_string_value(json_object_get(aj, "path"));
    const char *content = json_string_value(json_object_get(aj, "content"));
    char full[2 * PATH_MAX];
    snprintf(full, sizeof full, path[0] == '/' ? "%.0s%s" : "%s/%s", root, path);
    size_t n = 0;
    char *disk = nx_read_file(full, 1 << 20, &n, err, sizeof err);
    if (json_is_true(json_object_get(res, "is_error"))) {
        ASSERT_TRUE(disk == NULL); /* a refused write wrote nothing */
        fprintf(stderr, "  note: the write was refused: %s\n",
                json_string_value(json_object_get(res, "surrogate")));
    } else {
        ASSERT_TRUE(disk != NULL);
        ASSERT_STR_EQ(disk, content);
    }
    json_decref(t);

    /* a second turn reads the written file back: the task names it, and reading it must
     * return exactly its bytes (or, when the model names another path, a tool error) */
    char task[2 * PATH_MAX];
    snprintf(task, sizeof task, "read_text_file: read the file %s", path);
    test_tmp_path("trace2.json", tr, sizeof tr);
    t = agent_turn(cfg, tr, "1", task);
    ASSERT_TRUE(t != NULL);
    s1 = json_array_get(json_object_get(t, "steps"), 0);
    call = json_object_get(s1, "call");
    res = json_object_get(s1, "result");
    const char *rname = json_string_value(json_object_get(call, "name"));
    ASSERT_TRUE(!strcmp(rname, "read_text_file") || !strcmp(rname, "read_file")); /* read_file: the
                                                                   server's deprecated alias */
    const char *a2 = json_string_value(json_object_get(call, "arguments"));
    ASSERT_TRUE(schema_valid(&reg->tools[rt_registry_find(reg, rname)], a2));
    json_t *a2j = json_loads(a2, 0, NULL);
    const char *p2 = json_string_value(json_object_get(a2j, "path"));
    if (disk && !strcmp(p2, path)) {
        ASSERT_TRUE(!json_is_true(json_object_get(res, "is_error")));
        if (strlen(disk) <= 200) ASSERT_STR_EQ(json_string_value(json_object_get(res, "surrogate")), disk);
    } else {
        fprintf(stderr, "  note: the read asked for '%s' (written: '%s')\n", p2, path);
        ASSERT_TRUE(json_integer_value(json_object_get(res, "surrogate_bytes")) <= 200);
    }
    json_decref(a2j);
    nx_free(disk);
    json_decref(aj);
    json_decref(t);
    ag_toolset_free(ts);
}

/* The agent's call in each template family's own form: the pick and the sidecar's arguments are
 * written as the template writes calls, the arguments read back pass the schema (python
 * jsonschema, independent of argcheck), and the generated text holds them in that form. */
TEST(agent_turn_writes_calls_in_each_family_form) {
    char cfg[PATH_MAX], root[PATH_MAX], err[600], tr[PATH_MAX];
    if (!fs_config(cfg, sizeof cfg, root, sizeof root)) FAILF("server-filesystem missing");
    ag_toolset *ts = NULL;
    if (ag_toolset_open(NULL, 0, cfg, NULL, &ts, err, sizeof err)) FAILF("open: %s", err);
    const rt_registry *reg = ag_toolset_registry(ts);
    static const struct {
        const char *tmpl, *family, *form;
        const char *elem, *close; /* the path parameter's element (printf of the path), or the
                                     JSON arguments object's closing text */
    } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct", "hermes", NULL, NULL, "}"},
        {"MiniMax-M2", "xml-invoke", "<minimax:tool_call>", "<parameter name=\"path\">%s</parameter>",
         "</invoke>\n</minimax:tool_call>"},
        {"openai-gpt-oss-120b", "harmony", "to=functions.", NULL, "<|call|>"},
        {"Qwen3-Coder", "hermes", "<tool_call>\n<function=", "<parameter=path>\n%s\n</parameter>\n",
         "</function>\n</tool_call>"},
        {"GLM-4.6", "hermes", "<tool_call>", "\n<arg_key>path</arg_key>\n<arg_value>%s</arg_value>", "\n</tool_call>"},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        char tp[PATH_MAX];
        snprintf(tp, sizeof tp, "../shared/data/chat-templates/%s.jinja", cases[ci].tmpl);
        test_tmp_path("trace_family.json", tr, sizeof tr);
        unlink(tr);
        json_t *t = agent_turn_with(cfg, tr, "1", "write_file: create a new file with some content", tp);
        if (!t) FAILF("%s: no trace", cases[ci].tmpl);
        ASSERT_STR_EQ(json_string_value(json_object_get(t, "call_family")), cases[ci].family);
        const char *form = json_string_value(json_object_get(t, "call_form"));
        ASSERT_STR_EQ(form ? form : "(none)", cases[ci].form ? cases[ci].form : "(none)");
        json_t *s1 = json_array_get(json_object_get(t, "steps"), 0);
        json_t *call = json_object_get(s1, "call");
        ASSERT_STR_EQ(json_string_value(json_object_get(call, "name")), "write_file");
        ASSERT_TRUE(json_is_true(json_object_get(call, "json_object")));
        ASSERT_TRUE(json_is_true(json_object_get(call, "schema_valid")));
        ASSERT_TRUE(json_is_true(json_object_get(call, "grammar_complete")));
        const char *a = json_string_value(json_object_get(call, "arguments"));
        ASSERT_TRUE(schema_valid(&reg->tools[rt_registry_find(reg, "write_file")], a));
        json_t *aj = json_loads(a, 0, NULL);
        const char *path = json_string_value(json_object_get(aj, "path"));
        const char *text = json_string_value(json_object_get(call, "text"));
        ASSERT_TRUE(path && text);
        size_t tl = strlen(text), cl = strlen(cases[ci].close);
        ASSERT_TRUE(tl > cl && !strcmp(text + tl - cl, cases[ci].close));
        if (cases[ci].elem) { /* each parameter its own element, the string raw */
            char want[PATH_MAX + 64];
            snprintf(want, sizeof want, cases[ci].elem, path);
            ASSERT_CONTAINS(text, want);
        } else { /* one JSON object, then what closes the call */
            json_t *tj = json_loadb(text, tl - cl, 0, NULL);
            ASSERT_TRUE(tj && json_equal(tj, aj));
            json_decref(tj);
        }
        ASSERT_TRUE(json_object_get(s1, "result") != NULL);
        json_decref(aj);
        json_decref(t);
    }
    ag_toolset_free(ts);
}

TEST(agent_turn_survives_a_crashing_server) {
    char cfg[PATH_MAX], tr[PATH_MAX];
    bad_config(cfg, sizeof cfg);
    test_tmp_path("trace3.json", tr, sizeof tr);
    json_t *t = agent_turn(cfg, tr, "1", "boom: make it explode");
    ASSERT_TRUE(t != NULL);
    json_t *s1 = json_array_get(json_object_get(t, "steps"), 0);
    ASSERT_STR_EQ(json_string_value(json_object_get(json_object_get(s1, "call"), "name")), "boom");
    json_t *res = json_object_get(s1, "result");
    ASSERT_TRUE(json_is_true(json_object_get(res, "is_error")));
    ASSERT_STR_EQ(json_string_value(json_object_get(res, "status")), "NX_STATUS_CLOSED");
    ASSERT_TRUE(json_object_get(t, "answer") != NULL);
    json_decref(t);
}

TEST(agent_cli_errors) {
    const char *a1[] = {"agent", "--mcp", "x.json", "task", NULL};
    char *out = NULL;
    ASSERT_EQ(test_cli(a1, true, &out), 2);
    ASSERT_CONTAINS(out, "no model");
    free(out);
    const char *a2[] = {"agent", "-m", k_model, "--mcp", "/nonexistent.json", "task", NULL};
    ASSERT_EQ(test_cli(a2, true, &out), 1);
    ASSERT_CONTAINS(out, "nonexistent.json");
    free(out);
}

/* ---- `nexus eval-toolpath` on a small registry ---- */

TEST(eval_toolpath_small_run_is_consistent) {
    char js[PATH_MAX], svg[PATH_MAX];
    test_tmp_path("tp.json", js, sizeof js);
    test_tmp_path("tp.svg", svg, sizeof svg);
    const char *args[] = {"eval-toolpath", "-m", k_model, "--sizes", "3,6", "--queries", "2", "-k", "2",
                          "--arg-tokens", "96", "--ctx-limit", "1500", "--max-prompt", "6000", "-t", "1",
                          "--json", js, "--svg", svg, NULL};
    char *out = NULL;
    int rc = test_cli(args, false, &out);
    if (rc) FAILF("eval-toolpath exited %d", rc);
    ASSERT_CONTAINS(out, "| nexus |");
    free(out);
    json_t *j = json_load_file(js, 0, NULL);
    ASSERT_TRUE(j != NULL);
    json_t *sizes = json_object_get(j, "sizes");
    ASSERT_EQ(json_array_size(sizes), 2);
    for (size_t si = 0; si < 2; si++) {
        json_t *s = json_array_get(sizes, si);
        json_t *qs = json_object_get(s, "per_query");
        ASSERT_EQ(json_array_size(qs), 2);
        for (size_t qi = 0; qi < 2; qi++) {
            json_t *q = json_array_get(qs, qi);
            long long pt[4];
            const char *arms[4] = {"all", "topk", "splice", "nexus"};
            for (int a = 0; a < 4; a++) {
                json_t *x = json_object_get(q, arms[a]);
                ASSERT_TRUE(json_is_true(json_object_get(x, "run")));
                ASSERT_TRUE(json_is_true(json_object_get(x, "valid")));
                pt[a] = json_integer_value(json_object_get(x, "prompt_tokens"));
                ASSERT_EQ(json_is_true(json_object_get(x, "fits")), pt[a] + 96 <= 1500);
                double cold = json_real_value(json_object_get(x, "ttfa_cold_ms"));
                double cached = json_real_value(json_object_get(x, "ttfa_cached_ms"));
                ASSERT_TRUE(cold > 0 && cached > 0);
            }
            /* k = 2 of 3 or 6 tools: fewer schemas than all; signatures fewer tokens still */
            ASSERT_TRUE(pt[0] > pt[1]);
            ASSERT_EQ(pt[1], pt[2]);
            ASSERT_TRUE(pt[3] < pt[1]);
        }
        ASSERT_TRUE(json_object_get(s, "all_over_nexus") != NULL);
    }
    json_decref(j);
    size_t n = 0;
    char err[256];
    char *sv = nx_read_file(svg, 1 << 20, &n, err, sizeof err);
    ASSERT_TRUE(sv != NULL);
    ASSERT_CONTAINS(sv, "<svg");
    nx_free(sv);
}

/* --static-once: the all arm's static prompt prefilled once per size; its cold TTFA is that
 * prefill plus the query's cached TTFA (with --reps, the median of the repeats), and the other
 * arms are unchanged in kind */
TEST(eval_toolpath_static_once_reports_its_prefill) {
    char js[PATH_MAX];
    test_tmp_path("tp_once.json", js, sizeof js);
    const char *args[] = {"eval-toolpath", "-m", k_model, "--sizes", "4", "--queries", "2", "-k", "2",
                          "--arg-tokens", "96", "--max-prompt", "6000", "-t", "1", "--static-once",
                          "--reps", "3", "--json", js, NULL};
    char *out = NULL;
    int rc = test_cli(args, false, &out);
    if (rc) FAILF("eval-toolpath exited %d", rc);
    ASSERT_CONTAINS(out, "--static-once");
    free(out);
    json_t *j = json_load_file(js, 0, NULL);
    ASSERT_TRUE(j != NULL);
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "params"), "reps")), 3);
    json_t *s = json_array_get(json_object_get(j, "sizes"), 0);
    double st = json_real_value(json_object_get(s, "static_prefill_ms"));
    ASSERT_TRUE(st > 0);
    json_t *qs = json_object_get(s, "per_query");
    ASSERT_EQ(json_array_size(qs), 2);
    for (size_t qi = 0; qi < 2; qi++) {
        json_t *x = json_object_get(json_array_get(qs, qi), "all");
        ASSERT_TRUE(json_is_true(json_object_get(x, "run")));
        ASSERT_TRUE(json_is_true(json_object_get(x, "valid")));
        double cold = json_real_value(json_object_get(x, "ttfa_cold_ms"));
        double cached = json_real_value(json_object_get(x, "ttfa_cached_ms"));
        ASSERT_TRUE(cached > 0 && fabs(cold - (st + cached)) < 1e-6 * cold);
        json_t *n = json_object_get(json_array_get(qs, qi), "nexus");
        ASSERT_TRUE(json_is_true(json_object_get(n, "valid")));
    }
    json_decref(j);
}

TEST_MAIN
