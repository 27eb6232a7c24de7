/*
 * test_server_openai.c - `nexus serve` against the official openai npm client: starts a server
 * (stories260K for chat and completions, a small random BERT encoder written by mkmodel for
 * embeddings, an API key) on 127.0.0.1 and runs tests/server/openai_client.mjs with node.
 * `make test` installs the pinned client into build-npm/ (see the Makefile).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "model/mkmodel.h"
#include "nexus.h"
#include "server/server.h"
#include "support/tmpdir.h"
#include "test.h"

TEST(openai_client_against_server) {
    ASSERT_TRUE(access("build-npm/node_modules/openai/package.json", R_OK) == 0);
    char err[512];
    nx_model *m = NULL, *em = NULL;
    ASSERT_EQ(nx_model_load("../shared/models/stories260K/stories260K.gguf", NULL, &m, err,
                            sizeof err), NX_STATUS_OK);
    struct mkmodel_params mp;
    mkmodel_default_params(&mp);
    mp.arch = "bert";
    mp.n_layer = 2;
    mp.n_embd = 64;
    mp.n_head = 4;
    mp.n_ff = 128;
    mp.n_vocab = 300;
    mp.n_ctx_train = 64;
    mp.n_threads = 1;
    char path[512];
    struct nx_err e;
    ASSERT_EQ(mkmodel_write(&mp, test_tmp_path("bert.gguf", path, sizeof path), &e),
              NX_STATUS_OK);
    ASSERT_EQ(nx_model_load(path, NULL, &em, err, sizeof err), NX_STATUS_OK);

    struct srv_params p = srv_default_params();
    p.port = 0;
    p.api_key = "test-key-0123";
    p.engine.n_slots = 2;
    p.engine.n_ctx = 512;
    p.engine.n_threads = 1;
    struct srv_server *s = NULL;
    ASSERT_EQ(srv_start(m, em, &p, &s, err, sizeof err), NX_STATUS_OK);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "timeout 120 node tests/server/openai_client.mjs %d %s %d "
             "build-npm/node_modules/openai 2>&1",
             srv_port(s), p.api_key, nx_model_n_embd(em));
    FILE *f = popen(cmd, "r");
    ASSERT_TRUE(f != NULL);
    char line[1024];
    bool all_ok = false;
    while (fgets(line, sizeof line, f)) {
        fprintf(stderr, "  node: %s", line);
        if (!strncmp(line, "ALL OK", 6)) all_ok = true;
    }
    int rc = pclose(f);
    srv_stop(s);
    nx_model_free(em);
    nx_model_free(m);
    ASSERT_EQ(rc, 0);
    ASSERT_TRUE(all_ok);
}

/* Runs a node script that prints "ok ..." lines and "ALL OK"; true when it did and exited 0. */
static bool run_node(const char *cmd) {
    FILE *f = popen(cmd, "r");
    if (!f) return false;
    char line[1024];
    bool all_ok = false;
    while (fgets(line, sizeof line, f)) {
        fprintf(stderr, "  node: %s", line);
        if (!strncmp(line, "ALL OK", 6)) all_ok = true;
    }
    return pclose(f) == 0 && all_ok;
}

/* --mcp: server-side tools of real MCP servers (server-everything from npm, and a server that
   crashes in the middle of a call), through the openai client. */
TEST(openai_client_with_server_side_mcp_tools) {
    ASSERT_TRUE(access("build-npm/node_modules/.bin/mcp-server-everything", X_OK) == 0);
    char err[512], cfg[512], cwd[512];
    ASSERT_TRUE(getcwd(cwd, sizeof cwd) != NULL);
    test_tmp_path("mcp.json", cfg, sizeof cfg);
    FILE *f = fopen(cfg, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(f, "{\"mcpServers\": {\"everything\": {\"command\": "
               "\"%s/build-npm/node_modules/.bin/mcp-server-everything\"}, \"crashing\": "
               "{\"command\": \"/usr/bin/python3\", \"args\": [\"%s/tests/server/crashing_mcp.py\"]}}}",
            cwd, cwd);
    fclose(f);
    nx_model *m = NULL;
    ASSERT_EQ(nx_model_load("../shared/models/stories260K/stories260K.gguf", NULL, &m, err,
                            sizeof err), NX_STATUS_OK);
    struct srv_params p = srv_default_params();
    p.port = 0;
    p.engine.n_slots = 2;
    p.engine.n_ctx = 1024; /* five signatures are ~560 of stories260K's byte-level tokens */
    p.engine.n_threads = 1;
    p.tools.mcp_config = cfg;
    p.tools.budget = 256;
    p.tools.max_steps = 2;
    struct srv_server *s = NULL;
    nx_status st = srv_start(m, NULL, &p, &s, err, sizeof err);
    if (st) FAILF("srv_start: %s", err);
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "timeout 180 node tests/server/openai_mcp.mjs %d build-npm/node_modules/openai 2>&1",
             srv_port(s));
    bool ok = run_node(cmd);
    srv_stop(s);
    nx_model_free(m);
    ASSERT_TRUE(ok);
}

TEST_MAIN
