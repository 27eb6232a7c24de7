/*
 * test_server_oom.c - allocation-failure injection through one server request: a chat
 * completion posted to `srv_start`'s server on loopback while the n-th allocation from then on
 * fails (nx_alloc_fail_after, every thread: the HTTP handler, the JSON parser, the request
 * check, the chat template, the tokenizer, the engine), for n = 1, 2, ... until a request
 * completes with no failure injected. Each time: the answer is either the reference answer
 * (the failure was absorbed) or an error response with a JSON error object and a message
 * (never a dropped connection or a hang), the server answers the next request normally, and
 * after srv_stop every byte allocated through nx_malloc is back (nothing leaked).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "nexus.h"
#include "server/server.h"
#include "support/http.h"
#include "support/tmpdir.h"
#include "test.h"

static nx_model *g_model;

static nx_model *model(void) {
    if (!g_model) {
        char p[512], err[256];
        snprintf(p, sizeof p, "%s/models/stories260K/stories260K.gguf", test_shared());
        if (nx_model_load(p, NULL, &g_model, err, sizeof err)) {
            fprintf(stderr, "cannot load %s: %s\n", p, err);
            exit(1);
        }
    }
    return g_model;
}

static struct srv_server *start(void) {
    struct srv_params p = srv_default_params();
    p.port = 0;
    p.engine.n_slots = 1;
    p.engine.n_ctx = 256;
    p.engine.n_threads = 1;
    p.lim.max_tokens = 64;
    struct srv_server *s = NULL;
    char err[256];
    if (srv_start(model(), NULL, &p, &s, err, sizeof err)) fprintf(stderr, "srv_start: %s\n", err);
    return s;
}

static const char *k_body =
    "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Once upon a time\"}],\"max_tokens\":6,\"temperature\":0}";

/* The answer's message text (owned), or NULL. */
static char *answer(const struct resp *r) {
    json_t *j = json_loads(r->body, 0, NULL);
    json_t *c = json_object_get(
        json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message"), "content");
    char *s = json_is_string(c) ? strdup(json_string_value(c)) : NULL;
    json_decref(j);
    return s;
}

/* An error response: 4xx / 5xx with {"error": {"message": "..."}}. */
static bool clean_error(const struct resp *r) {
    if (r->status < 400 || r->status > 599) return false;
    json_t *j = json_loads(r->body, 0, NULL);
    json_t *m = json_object_get(json_object_get(j, "error"), "message");
    bool ok = json_is_string(m) && json_string_length(m) > 0;
    json_decref(j);
    return ok;
}

TEST(chat_request_fails_cleanly_at_every_allocation) {
    model();
    size_t base = nx_alloc_bytes();
    struct srv_server *s = start();
    ASSERT_TRUE(s != NULL);
    struct resp r = post(srv_port(s), "/v1/chat/completions", k_body);
    ASSERT_EQ(r.status, 200);
    char *ref = answer(&r);
    ASSERT_TRUE(ref != NULL);
    resp_free(&r);
    srv_stop(s);
    ASSERT_EQ(nx_alloc_bytes(), base);
    int absorbed = 0, errors = 0, n;
    int by_status[6] = {0}; /* 4xx / 5xx counted by their first digit */
    for (n = 1; n <= 20000; n++) {
        s = start();
        ASSERT_TRUE(s != NULL);
        size_t fails = nx_alloc_failures();
        nx_alloc_fail_after(n);
        r = post(srv_port(s), "/v1/chat/completions", k_body);
        nx_alloc_fail_after(0);
        bool injected = nx_alloc_failures() != fails;
        char *got = r.status == 200 ? answer(&r) : NULL;
        if (r.status == 200) {
            if (!got || strcmp(got, ref) != 0)
                FAILF("n=%d: 200 with a different answer: %s", n, r.body);
            absorbed += injected;
        } else if (clean_error(&r)) {
            errors++;
            by_status[r.status / 100]++;
            if (getenv("NX_TEST_VERBOSE")) printf("  n=%d: %d %s\n", n, r.status, r.body);
        } else {
            FAILF("n=%d: not a clean error (status %d): %.300s", n, r.status, r.body);
        }
        free(got);
        resp_free(&r);
        /* the server serves the next request normally */
        r = post(srv_port(s), "/v1/chat/completions", k_body);
        got = answer(&r);
        if (r.status != 200 || !got || strcmp(got, ref) != 0)
            FAILF("n=%d: the next request got %d: %.300s", n, r.status, r.body);
        free(got);
        resp_free(&r);
        srv_stop(s);
        if (nx_alloc_bytes() != base) FAILF("n=%d: %zu bytes leaked", n, nx_alloc_bytes() - base);
        if (!injected) break;
    }
    printf("  a failure injected at each of the first %d allocations of the request: %d error "
           "responses (%d 4xx, %d 5xx), %d absorbed (same answer)\n",
           n - 1, errors, by_status[4], by_status[5], absorbed);
    ASSERT_TRUE(n > 20); /* the request makes some 30 allocations through nx_malloc */
    ASSERT_TRUE(n <= 20000);
    free(ref);
}

TEST(zz_free_model) { nx_model_free(g_model); }

TEST_MAIN
