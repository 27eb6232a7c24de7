/*
 * test_server.c - `nexus serve` as a black box over real sockets on 127.0.0.1 (stories260K),
 * plus the stop filter the streams use (gen/stopfilter.h).
 *
 * Each case starts a server in-process on a free port, talks HTTP/1.0 to it (responses end
 * when the server closes the connection, so no chunked decoding is needed), and stops it.
 * Expected outputs come from the model itself run through include/nexus.h directly (greedy
 * decode), never from the server.
 */
#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "nexus.h"
#include "server/constrain.h"
#include "server/server.h"
#include "gen/stopfilter.h"
#include "support/http.h"
#include "support/tmpdir.h"
#include "test.h"

#define MODEL "../shared/models/stories260K/stories260K.gguf"

static nx_model *g_model;

static nx_model *model(void) {
    if (!g_model) {
        char err[256];
        if (nx_model_load(MODEL, NULL, &g_model, err, sizeof err)) {
            fprintf(stderr, "cannot load %s: %s\n", MODEL, err);
            exit(1);
        }
    }
    return g_model;
}

static struct srv_params params(void) {
    struct srv_params p = srv_default_params();
    p.port = 0;
    p.engine.n_slots = 2;
    p.engine.n_ctx = 512;
    p.engine.n_threads = 1;
    p.lim.max_tokens = 400;
    return p;
}

static struct srv_server *start(const struct srv_params *p) {
    struct srv_server *s = NULL;
    char err[256];
    nx_status st = srv_start(model(), NULL, p, &s, err, sizeof err);
    if (st) fprintf(stderr, "srv_start: %s\n", err);
    return s;
}

/* The error object's field (borrowed from a static copy), or "" */
static const char *err_field(const struct resp *r, const char *field) {
    static char buf[512];
    buf[0] = 0;
    json_t *j = json_loads(r->body, 0, NULL);
    json_t *v = json_object_get(json_object_get(j, "error"), field);
    if (json_is_string(v)) snprintf(buf, sizeof buf, "%s", json_string_value(v));
    json_decref(j);
    return buf;
}

/* Text of choices[0] (message.content for chat, text for completions); owned. */
static char *resp_text(const struct resp *r) {
    json_t *j = json_loads(r->body, 0, NULL);
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = json_object_get(c, "text");
    if (!t) t = json_object_get(json_object_get(c, "message"), "content");
    char *s = json_is_string(t) ? strdup(json_string_value(t)) : NULL;
    json_decref(j);
    return s;
}

/* Greedy continuation of BOS + prompt for n tokens, straight through the engine. */
static char *greedy_ref(const char *prompt, int n) {
    nx_model *m = model();
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = 512;
    cp.n_threads = cp.n_threads_batch = 1;
    nx_ctx *c;
    char err[256];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) return NULL;
    nx_token toks[512];
    int32_t nt = nx_tokenize(m, prompt, strlen(prompt), toks, 512, true, true);
    nx_decode(c, toks, nt, false);
    char *out = calloc(1, 8192);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        const float *lg = nx_get_logits(c, -1);
        nx_token best = 0;
        for (int32_t v = 1; v < nx_model_n_vocab(m); v++)
            if (lg[v] > lg[best]) best = v;
        if (nx_token_is_eog(m, best)) break;
        char piece[64];
        int32_t k = nx_token_to_piece(m, best, piece, sizeof piece, false);
        if (k > 0 && len + (size_t)k < 8191) {
            memcpy(out + len, piece, (size_t)k);
            len += (size_t)k;
        }
        nx_decode(c, &best, 1, false);
    }
    nx_ctx_free(c);
    return out;
}

/* ---- the stop filter the streams use (gen/stopfilter.h) ---- */

static void take_all(struct gen_stop_filter *t, const char **pieces, int n, char *out) {
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        size_t k = gen_stop_push(t, pieces[i], strlen(pieces[i]));
        memcpy(out + len, gen_stop_text(t), k);
        gen_stop_consume(t, k);
        len += k;
    }
    size_t k = gen_stop_finish(t);
    memcpy(out + len, gen_stop_text(t), k);
    out[len + k] = 0;
}

TEST(stopfilter_stop_across_pieces_and_utf8) {
    struct gen_stop_filter t;
    const char *stops[] = {"END", "\n\n"};
    ASSERT_EQ(gen_stop_init(&t, stops, 2, true), NX_STATUS_OK);
    char out[512];
    /* "é" split over two pieces must not be released half; "EN" + "D" is a stop */
    const char *p1[] = {"ab", "\xC3", "\xA9", "cE", "N", "Dzz"};
    take_all(&t, p1, 6, out);
    ASSERT_TRUE(!strcmp(out, "ab\xC3\xA9" "c"));
    ASSERT_TRUE(t.stopped);
    ASSERT_EQ(t.stop_index, 0);
    gen_stop_free(&t);
    /* a stop prefix that never completes is released at the end */
    ASSERT_EQ(gen_stop_init(&t, stops, 2, true), NX_STATUS_OK);
    const char *p2[] = {"x", "EN", "d\n"};
    take_all(&t, p2, 3, out);
    ASSERT_TRUE(!strcmp(out, "xENd\n"));
    ASSERT_TRUE(!t.stopped);
    gen_stop_free(&t);
    /* held back exactly while it could still be a stop */
    ASSERT_EQ(gen_stop_init(&t, stops, 2, true), NX_STATUS_OK);
    ASSERT_EQ(gen_stop_push(&t, "aE", 2), 1);
    gen_stop_consume(&t, 1);
    ASSERT_EQ(gen_stop_push(&t, "x", 1), 2);
    gen_stop_free(&t);
    /* without whole_utf8 a split character goes out in parts */
    ASSERT_EQ(gen_stop_init(&t, NULL, 0, false), NX_STATUS_OK);
    ASSERT_EQ(gen_stop_push(&t, "\xC3", 1), 1);
    gen_stop_free(&t);
    const char *bad[] = {""};
    ASSERT_EQ(gen_stop_init(&t, bad, 1, true), NX_STATUS_INVALID_ARG);
}

/* ---- black-box ---- */

TEST(server_health_models_metrics) {
    struct srv_params p = params();
    struct srv_server *s = start(&p);
    ASSERT_TRUE(s != NULL);
    int port = srv_port(s);
    struct resp r = req(port, "GET", "/health", "", NULL);
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(strstr(r.body, "\"ok\"") != NULL);
    resp_free(&r);
    r = req(port, "GET", "/v1/models", "", NULL);
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(strstr(r.body, "\"id\":\"nexus\"") != NULL);
    resp_free(&r);
    r = post(port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":4}");
    ASSERT_EQ(r.status, 200);
    resp_free(&r);
    r = req(port, "GET", "/metrics", "", NULL);
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(strstr(r.body, "nexus_requests_total{endpoint=\"completions\",code=\"200\"}") !=
                NULL);
    ASSERT_TRUE(strstr(r.body, "nexus_ttft_seconds_count") != NULL);
    ASSERT_TRUE(strstr(r.body, "nexus_kv_bytes{slot=\"1\"}") != NULL);
    resp_free(&r);
    srv_stop(s);
}

TEST(server_greedy_matches_engine_and_prefix_is_reused) {
    struct srv_params p = params();
    struct srv_server *s = start(&p);
    ASSERT_TRUE(s != NULL);
    char *want = greedy_ref("Once upon a time", 40);
    struct resp r = post(srv_port(s), "/v1/completions",
                         "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0}");
    ASSERT_EQ(r.status, 200);
    char *got = resp_text(&r);
    ASSERT_TRUE(got && want && !strcmp(got, want));
    resp_free(&r);
    free(got);
    /* the same prompt again: its prefix comes from the slot's cache, output unchanged */
    r = post(srv_port(s), "/v1/completions",
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0}");
    got = resp_text(&r);
    ASSERT_TRUE(got && !strcmp(got, want));
    ASSERT_TRUE(strstr(r.body, "\"cached_tokens\":4") != NULL);
    resp_free(&r);
    free(got);
    free(want);
    srv_stop(s);
}

TEST(server_stop_string_cuts_before_it) {
    struct srv_params p = params();
    struct srv_server *s = start(&p);
    char *full = greedy_ref("Once upon a time", 40);
    ASSERT_TRUE(full && strlen(full) > 20);
    /* stop at a word taken from the reference continuation */
    char stop[8];
    memcpy(stop, full + 12, 5);
    stop[5] = 0;
    char *first = strstr(full, stop);
    char body[256];
    json_t *st = json_string(stop);
    char *stop_json = json_dumps(st, JSON_ENCODE_ANY);
    snprintf(body, sizeof body,
             "{\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,\"stop\":[%s]}",
             stop_json);
    struct resp r = post(srv_port(s), "/v1/completions", body);
    ASSERT_EQ(r.status, 200);
    char *got = resp_text(&r);
    ASSERT_TRUE(got != NULL);
    ASSERT_EQ(strlen(got), (size_t)(first - full));
    ASSERT_TRUE(!strncmp(got, full, strlen(got)));
    ASSERT_TRUE(strstr(r.body, "\"finish_reason\":\"stop\"") != NULL);
    resp_free(&r);
    free(got);
    free(full);
    nx_free(stop_json);
    json_decref(st);
    srv_stop(s);
}

/* SSE: the deltas put together equal the non-streamed text of the same seeded request. */
TEST(server_stream_equals_nonstream) {
    struct srv_params p = params();
    struct srv_server *s = start(&p);
    const char *q = "{\"messages\":[{\"role\":\"user\",\"content\":\"Tell a story\"}],"
                    "\"max_tokens\":30,\"seed\":7,\"temperature\":1.0%s}";
    char body[512];
    snprintf(body, sizeof body, q, "");
    struct resp r1 = post(srv_port(s), "/v1/chat/completions", body);
    ASSERT_EQ(r1.status, 200);
    char *want = resp_text(&r1);
    snprintf(body, sizeof body, q, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    struct resp r2 = post(srv_port(s), "/v1/chat/completions", body);
    ASSERT_EQ(r2.status, 200);
    ASSERT_TRUE(strstr(r2.head, "text/event-stream") != NULL);
    char got[8192] = "";
    int n_chunks = 0, usage = 0, done = 0;
    for (char *line = strtok(r2.body, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "data: ", 6)) continue;
        if (!strcmp(line + 6, "[DONE]")) {
            done++;
            continue;
        }
        json_t *j = json_loads(line + 6, 0, NULL);
        ASSERT_TRUE(j != NULL);
        n_chunks++;
        json_t *c = json_array_get(json_object_get(j, "choices"), 0);
        json_t *t = json_object_get(json_object_get(c, "delta"), "content");
        if (json_is_string(t)) strncat(got, json_string_value(t), sizeof got - strlen(got) - 1);
        if (json_is_object(json_object_get(j, "usage"))) usage++;
        json_decref(j);
    }
    ASSERT_TRUE(want != NULL);
    ASSERT_TRUE(!strcmp(got, want));
    ASSERT_EQ(usage, 1);
    ASSERT_EQ(done, 1);
    ASSERT_TRUE(n_chunks >= 3);
    free(want);
    resp_free(&r1);
    resp_free(&r2);
    srv_stop(s);
}

struct load_arg {
    int port;
    int seed;
    char *text;
};

static void *load_thread(void *a) {
    struct load_arg *la = a;
    char body[256];
    snprintf(body, sizeof body,
             "{\"prompt\":\"The little dog\",\"max_tokens\":24,\"seed\":%d,\"temperature\":1.0}",
             la->seed);
    struct resp r = post(la->port, "/v1/completions", body);
    la->text = r.status == 200 ? resp_text(&r) : NULL;
    resp_free(&r);
    return NULL;
}

/* Same seed, same output: alone, and while 16 other clients are served. */
TEST(server_seeded_output_independent_of_load) {
    struct srv_params p = params();
    p.engine.n_slots = 4;
    struct srv_server *s = start(&p);
    enum { N = 17 };
    struct load_arg solo[N], busy[N];
    for (int i = 0; i < N; i++) {
        solo[i] = (struct load_arg){srv_port(s), 100 + i % 5, NULL};
        load_thread(&solo[i]);
    }
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        busy[i] = (struct load_arg){srv_port(s), 100 + i % 5, NULL};
        pthread_create(&th[i], NULL, load_thread, &busy[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    int same = 0, differ_by_seed = 0;
    for (int i = 0; i < N; i++) {
        ASSERT_TRUE(solo[i].text && busy[i].text);
        same += !strcmp(solo[i].text, busy[i].text);
        differ_by_seed += strcmp(solo[i].text, solo[(i + 1) % 5].text) != 0;
    }
    ASSERT_EQ(same, N);
    ASSERT_TRUE(differ_by_seed > 0); /* the seed matters: the test could fail */
    for (int i = 0; i < N; i++) {
        free(solo[i].text);
        free(busy[i].text);
    }
    srv_stop(s);
}

/* The KV pool holds exactly what the slots' and sessions' sequences hold (no leaked block):
   the /metrics gauges after the last step. */
static bool pool_matches_sequences(int port) {
    struct resp r = req(port, "GET", "/metrics", "", NULL);
    long long in_use = -1, held = 0;
    const char *g = strstr(r.body, "\nnexus_kv_pool_bytes_in_use ");
    if (g) in_use = atoll(g + strlen("\nnexus_kv_pool_bytes_in_use "));
    for (const char *q = r.body; (q = strstr(q, "\nnexus_kv_bytes{slot=")) != NULL; q++)
        held += atoll(strchr(q, '}') + 2);
    g = strstr(r.body, "\nnexus_session_kv_bytes ");
    if (g) held += atoll(g + strlen("\nnexus_session_kv_bytes "));
    if (in_use != held) fprintf(stderr, "  pool in use %lld, sequences hold %lld\n", in_use, held);
    resp_free(&r);
    return in_use >= 0 && in_use == held;
}

TEST(server_bad_requests_get_4xx_and_server_keeps_serving) {
    struct srv_params p = params();
    p.max_body = 4096;
    p.max_depth = 16;
    struct srv_server *s = start(&p);
    int port = srv_port(s);
    struct {
        const char *method, *path, *body;
        int status;
        const char *param;
    } cases[] = {
        {"POST", "/v1/completions", "{bad", 400, ""},
        {"POST", "/v1/completions", "[1,2]", 400, ""},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, ""},
        {"POST", "/v1/completions", "{\"prompt\":5}", 400, "prompt"},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"9\"}", 400, "max_tokens"},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":100000}", 400, "max_tokens"},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"temperature\":3}", 400, "temperature"},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"n\":2}", 400, "n"},
        {"POST", "/v1/completions", "{\"prompt\":\"a\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}",
         400, "stop"},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}",
         400, "messages"},
        {"POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":7}]}", 400,
         "messages"},
        {"POST", "/v1/chat/completions", "{\"messages\":\"hi\"}", 400, "messages"},
        {"POST", "/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":2}", 400,
         "top_logprobs"},
        {"POST", "/v1/embeddings", "{\"input\":\"x\"}", 400, "model"},
        {"GET", "/v1/completions", NULL, 405, ""},
        {"POST", "/health", "{}", 405, ""},
        {"GET", "/v1/nothing", NULL, 404, ""},
        {"GET", "/../../etc/passwd", NULL, 404, ""},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        struct resp r = req(port, cases[i].method, cases[i].path, "", cases[i].body);
        if (r.status != cases[i].status)
            fprintf(stderr, "  case %zu (%s %s %s): %d %s\n", i, cases[i].method, cases[i].path,
                    cases[i].body ? cases[i].body : "", r.status, r.body);
        ASSERT_EQ(r.status, cases[i].status);
        ASSERT_TRUE(strstr(r.body, "\"error\"") != NULL);
        ASSERT_TRUE(!strcmp(err_field(&r, "param"), cases[i].param));
        ASSERT_TRUE(err_field(&r, "message")[0] != 0);
        resp_free(&r);
    }
    /* deep nesting */
    char deep[200];
    memset(deep, '[', 40);
    snprintf(deep + 40, sizeof deep - 40, "%s", "");
    char body[300];
    snprintf(body, sizeof body, "{\"prompt\":%s}", deep);
    struct resp r = post(port, "/v1/completions", body);
    ASSERT_EQ(r.status, 400);
    ASSERT_TRUE(!strcmp(err_field(&r, "code"), "json_too_deep"));
    resp_free(&r);
    /* a body over the limit */
    char *big = malloc(10000);
    memset(big, 'a', 9999);
    big[9999] = 0;
    memcpy(big, "{\"prompt\":\"", 11);
    big[9997] = '"';
    big[9998] = '}';
    r = post(port, "/v1/completions", big);
    ASSERT_EQ(r.status, 413);
    resp_free(&r);
    free(big);
    /* a prompt longer than the context */
    big = malloc(3800);
    memcpy(big, "{\"prompt\":\"", 11);
    for (int i = 11; i < 3790; i++) big[i] = (char)('a' + i % 26);
    memcpy(big + 3790, "\"}", 3);
    r = post(port, "/v1/completions", big);
    ASSERT_EQ(r.status, 400);
    ASSERT_TRUE(!strcmp(err_field(&r, "code"), "context_length_exceeded"));
    resp_free(&r);
    free(big);
    /* still serving */
    r = post(port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":3}");
    ASSERT_EQ(r.status, 200);
    resp_free(&r);
    ASSERT_TRUE(pool_matches_sequences(port));
    srv_stop(s);
}

TEST(server_api_key) {
    struct srv_params p = params();
    p.api_key = "sekret-123";
    struct srv_server *s = start(&p);
    int port = srv_port(s);
    struct resp r = req(port, "GET", "/v1/models", "", NULL);
    ASSERT_EQ(r.status, 401);
    ASSERT_TRUE(!strcmp(err_field(&r, "code"), "invalid_api_key"));
    resp_free(&r);
    r = req(port, "GET", "/v1/models", "Authorization: Bearer sekret-12\r\n", NULL);
    ASSERT_EQ(r.status, 401);
    resp_free(&r);
    r = req(port, "GET", "/v1/models", "Authorization: Bearer sekret-1234\r\n", NULL);
    ASSERT_EQ(r.status, 401);
    resp_free(&r);
    r = req(port, "GET", "/v1/models", "Authorization: Bearer sekret-123\r\n", NULL);
    ASSERT_EQ(r.status, 200);
    resp_free(&r);
    r = req(port, "GET", "/health", "", NULL);
    ASSERT_EQ(r.status, 200);
    resp_free(&r);
    srv_stop(s);
}

/* A client that disconnects mid-stream cancels its generation and frees its slot. */
TEST(server_disconnect_frees_slot) {
    struct srv_params p = params();
    p.engine.n_slots = 1;
    p.engine.n_ctx = 4096;
    p.lim.max_tokens = 4000;
    struct srv_server *s = start(&p);
    int port = srv_port(s);
    int fd = http_dial(port);
    const char *body = "{\"prompt\":\"Once\",\"max_tokens\":4000,\"stream\":true,"
                       "\"temperature\":1,\"seed\":3}";
    char head[256];
    int n = snprintf(head, sizeof head,
                     "POST /v1/completions HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s",
                     strlen(body), body);
    http_send_all(fd, head, (size_t)n);
    char buf[512];
    ASSERT_TRUE(recv(fd, buf, sizeof buf, 0) > 0); /* the stream has started */
    close(fd);
    /* the only slot must come free long before 400 tokens could have been generated at the
       pace of a slow client; a follow-up request then gets served */
    double t0 = nx_time_s();
    struct resp r = post(port, "/v1/completions", "{\"prompt\":\"Once\",\"max_tokens\":2}");
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(nx_time_s() - t0 < 10);
    resp_free(&r);
    r = req(port, "GET", "/metrics", "", NULL);
    ASSERT_TRUE(strstr(r.body, "nexus_slots_busy 0") != NULL);
    /* the cancelled stream stopped well short of its 4000 tokens */
    long long gen = -1;
    const char *g = strstr(r.body, "\nnexus_generated_tokens_total ");
    if (g) gen = atoll(g + strlen("\nnexus_generated_tokens_total "));
    fprintf(stderr, "  tokens generated before and after the disconnect: %lld\n", gen);
    ASSERT_TRUE(gen >= 2 && gen < 4000);
    resp_free(&r);
    ASSERT_TRUE(pool_matches_sequences(port));
    srv_stop(s);
}

/* A sender that trickles its body past the deadline gets 408. */
TEST(server_slow_sender_408) {
    struct srv_params p = params();
    p.body_timeout_s = 0.5;
    struct srv_server *s = start(&p);
    int fd = http_dial(srv_port(s));
    const char *h = "POST /v1/completions HTTP/1.0\r\nContent-Length: 40\r\n\r\n{\"prompt\":";
    http_send_all(fd, h, strlen(h));
    usleep(800 * 1000);
    http_send_all(fd, "\"Once upon a time\", \"max_tokens\": 2}  ", 30);
    struct resp r = read_resp(fd);
    close(fd);
    ASSERT_EQ(r.status, 408);
    resp_free(&r);
    srv_stop(s);
}

struct q_arg {
    int port, status;
};
static void *q_thread(void *a) {
    struct q_arg *q = a;
    struct resp r = post(q->port, "/v1/completions",
                         "{\"prompt\":\"Once\",\"max_tokens\":300,\"temperature\":1,\"seed\":1}");
    q->status = r.status;
    resp_free(&r);
    return NULL;
}

TEST(server_queue_full_429) {
    struct srv_params p = params();
    p.engine.n_slots = 1;
    p.engine.queue_max = 1;
    struct srv_server *s = start(&p);
    enum { N = 4 };
    struct q_arg q[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        q[i] = (struct q_arg){srv_port(s), 0};
        pthread_create(&th[i], NULL, q_thread, &q[i]);
    }
    for (int i = 0; i < N; i++) pthread_join(th[i], NULL);
    int ok = 0, full = 0;
    for (int i = 0; i < N; i++) {
        ok += q[i].status == 200;
        full += q[i].status == 429;
    }
    ASSERT_TRUE(ok >= 1);
    ASSERT_TRUE(full >= 1);
    ASSERT_EQ(ok + full, N);
    srv_stop(s);
}

/* Everything the server allocates through nx_malloc is returned by srv_stop. */
TEST(server_no_leak_after_stop) {
    model();
    size_t before = nx_alloc_bytes();
    struct srv_params p = params();
    struct srv_server *s = start(&p);
    struct resp r = post(srv_port(s), "/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":8,"
                         "\"logprobs\":true,\"top_logprobs\":3}");
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(strstr(r.body, "\"top_logprobs\":[{") != NULL);
    resp_free(&r);
    srv_stop(s);
    ASSERT_EQ(nx_alloc_bytes(), before);
}


/* ---- sessions ---- */

static long long metric(int port, const char *name) {
    struct resp r = req(port, "GET", "/metrics", "", NULL);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *g = strstr(r.body, key);
    long long v = g ? atoll(g + strlen(key)) : -1;
    resp_free(&r);
    return v;
}

static char *turn(int port, const char *session, const char *prompt, int n, const char *extra,
                  int *cached) {
    json_t *b = json_pack("{s:s, s:i, s:i}", "prompt", prompt, "max_tokens", n, "temperature", 0);
    if (session) json_object_set_new(b, "session", json_string(session));
    if (extra) {
        json_t *x = json_loads(extra, 0, NULL);
        json_object_update(b, x);
        json_decref(x);
    }
    char *body = json_dumps(b, 0);
    json_decref(b);
    struct resp r = post(port, "/v1/completions", body);
    nx_free(body);
    char *t = r.status == 200 ? resp_text(&r) : NULL;
    if (r.status != 200) fprintf(stderr, "  turn: %d %s\n", r.status, r.body);
    const char *c = strstr(r.body, "\"cached_tokens\":");
    if (cached) *cached = c ? atoi(c + 16) : -1;
    resp_free(&r);
    return t;
}

/* A new conversation goes to the least recently used free slot (sharing only BOS with the
   others), so the previous conversation's prefix is still there for its next turn. */
TEST(server_new_conversation_spares_the_last_ones_cache) {
    struct srv_params p = params();
    struct srv_server *s = start(&p); /* 2 slots */
    int port = srv_port(s);
    const char *a = "Once upon a time, there was a little girl named Lily. She loved to play.";
    const char *b = "Tom had a big red ball and a small blue car in the garden.";
    char a2[512];
    snprintf(a2, sizeof a2, "%s She went to the park.", a);
    int cached = -1;
    char *x = turn(port, NULL, a, 4, NULL, NULL);
    char *y = turn(port, NULL, b, 4, NULL, NULL);
    char *z = turn(port, NULL, a2, 4, NULL, &cached);
    ASSERT_TRUE(x && y && z);
    int32_t na = nx_tokenize(model(), a, strlen(a), NULL, 0, true, true);
    ASSERT_TRUE(cached >= -na - 2);
    free(x);
    free(y);
    free(z);
    srv_stop(s);
}

/* A conversation bound to a session reuses its KV across turns; dense, its answers equal the
   same prompts run without a session. */
TEST(session_turns_reuse_kv_and_match_plain_runs) {
    struct srv_params p = params();
    p.engine.sessions.max_resident = 2;
    struct srv_server *s = start(&p);
    int port = srv_port(s);
    char convo[4096] = "Once upon a time, there was a little dog.";
    int cached_total = 0;
    for (int k = 0; k < 4; k++) {
        int cached;
        char *a = turn(port, "conv-1", convo, 12, NULL, &cached);
        char *ref = turn(port, NULL, convo, 12, NULL, NULL);
        ASSERT_TRUE(a && ref && !strcmp(a, ref));
        if (k > 0) ASSERT_TRUE(cached > 10);
        cached_total += cached;
        strncat(convo, a, sizeof convo - strlen(convo) - 1);
        strncat(convo, " Then the dog ran to the park.", sizeof convo - strlen(convo) - 1);
        free(a);
        free(ref);
    }
    ASSERT_EQ(metric(port, "nexus_sessions{state=\"resident\"}"), 1);
    srv_stop(s);
}

static void rm_dir(const char *dir) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "  cannot remove %s\n", dir);
}

static int count_nxs(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls %s 2>/dev/null | grep -c '\\.nxs$'", dir);
    FILE *f = popen(cmd, "r");
    int n = 0;
    if (fscanf(f, "%d", &n) != 1) n = -1;
    pclose(f);
    return n;
}

/* With one resident session, a second one parks the first on disk; its next turn restores it
   and answers exactly as a server that never parked it. */
TEST(session_parked_on_disk_and_restored) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/sessions", test_tmpdir());
    mkdir(dir, 0755);
    struct srv_params p = params();
    p.engine.sessions.max_resident = 1;
    p.engine.sessions.dir = dir;
    struct srv_server *s = start(&p);
    struct srv_params p2 = params();
    p2.engine.sessions.max_resident = 4;
    struct srv_server *ref = start(&p2);
    const char *a1 = "Tom had a red ball.", *b1 = "Lily saw a big bird.";
    char *x = turn(srv_port(s), "A", a1, 10, NULL, NULL);
    char *y = turn(srv_port(ref), "A", a1, 10, NULL, NULL);
    ASSERT_TRUE(x && y && !strcmp(x, y));
    char *u = turn(srv_port(s), "B", b1, 10, NULL, NULL); /* parks A */
    free(u);
    ASSERT_EQ(count_nxs(dir), 1);
    ASSERT_EQ(metric(srv_port(s), "nexus_sessions{state=\"parked\"}"), 1);
    char a2[512];
    snprintf(a2, sizeof a2, "%s%s He played all day.", a1, x);
    int cached;
    char *x2 = turn(srv_port(s), "A", a2, 10, NULL, &cached); /* restores A, parks B */
    char *y2 = turn(srv_port(ref), "A", a2, 10, NULL, NULL);
    ASSERT_TRUE(x2 && y2 && !strcmp(x2, y2));
    ASSERT_TRUE(cached > 5);
    ASSERT_EQ(metric(srv_port(s), "nexus_session_events_total{event=\"restore\"}"), 1);
    free(x);
    free(y);
    free(x2);
    free(y2);
    srv_stop(ref);
    srv_stop(s);
    rm_dir(dir);
}

/* Under an eviction budget a session's KV stops growing while its conversation does. */
TEST(session_kv_stays_bounded_under_eviction) {
    struct srv_params p = params();
    p.engine.sessions.max_resident = 2;
    p.engine.n_ctx = 2048;
    struct srv_server *s = start(&p);
    int port = srv_port(s);
    char convo[16384] = "Once upon a time";
    long long bytes[2][8];
    const char *extra[2] = {NULL, "{\"kv_policy\":\"nexus\",\"kv_budget\":96}"};
    for (int v = 0; v < 2; v++) {
        convo[16] = 0;
        for (int k = 0; k < 8; k++) {
            char *a = turn(port, v ? "evict" : "dense", convo, 4, extra[v], NULL);
            ASSERT_TRUE(a != NULL);
            free(a);
            for (int w = 0; w < 12; w++)
                strncat(convo, " the little girl went to the park with her dog",
                        sizeof convo - strlen(convo) - 1);
            bytes[v][k] = metric(port, "nexus_session_kv_bytes");
        }
    }
    /* dense grows by every turn; the evicting session's own bytes (total minus the dense
       session's final size) stop near its budget */
    ASSERT_TRUE(bytes[0][7] > 4 * bytes[0][1]);
    long long ev_last = bytes[1][7] - bytes[0][7], ev_mid = bytes[1][3] - bytes[0][7];
    fprintf(stderr, "  session KV bytes: dense %lld -> %lld; nexus(96) %lld -> %lld\n",
            bytes[0][1], bytes[0][7], ev_mid, ev_last);
    ASSERT_TRUE(ev_last < bytes[0][7] / 3);
    ASSERT_TRUE(ev_last <= ev_mid * 2);
    srv_stop(s);
}

/* Past n_ctx: an evicting session is compacted (nx_kv_seq_compact) and goes on, each turn
   reusing what the session holds, through a park on disk and a restore; a dense session whose
   conversation outgrows n_ctx gets a 400 that names the limit. */
TEST(session_grows_past_n_ctx_under_eviction) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/sessions-long", test_tmpdir());
    mkdir(dir, 0755);
    struct srv_params p = params();
    p.engine.n_ctx = 256;
    p.engine.sessions.max_resident = 1;
    p.engine.sessions.dir = dir;
    struct srv_server *s = start(&p);
    int port = srv_port(s);
    static char convo[65536];
    snprintf(convo, sizeof convo, "Once upon a time");
    const char *ev = "{\"kv_policy\":\"nexus\",\"kv_budget\":96}";
    long long kv_max = 0;
    for (int k = 0; k < 12; k++) {
        int cached = -1;
        char *a = turn(port, "long", convo, 4, ev, &cached);
        ASSERT_TRUE(a != NULL);
        if (k > 0) ASSERT_TRUE(cached > 0);
        strncat(convo, a, sizeof convo - strlen(convo) - 1);
        free(a);
        if (k == 6) { /* another session takes the one resident place: "long" is parked */
            char *o = turn(port, "other", "Tom had a red ball.", 4, NULL, NULL);
            ASSERT_TRUE(o != NULL);
            free(o);
            ASSERT_EQ(metric(port, "nexus_sessions{state=\"parked\"}"), 1);
        }
        for (int w = 0; w < 10; w++)
            strncat(convo, " the little girl went to the park with her dog",
                    sizeof convo - strlen(convo) - 1);
        long long b = metric(port, "nexus_session_kv_bytes_max");
        if (b > kv_max) kv_max = b;
    }
    int32_t n = nx_tokenize(model(), convo, strlen(convo), NULL, 0, true, true);
    fprintf(stderr, "  conversation %d tokens past n_ctx 256: %lld compactions, session KV "
            "at most %lld bytes\n", -n, metric(port, "nexus_kv_compactions_total"), kv_max);
    ASSERT_TRUE(-n > 4 * 256);
    ASSERT_TRUE(metric(port, "nexus_kv_compactions_total") >= 3);
    ASSERT_EQ(metric(port, "nexus_session_events_total{event=\"restore\"}"), 1);
    /* dense: the same conversation does not fit */
    json_t *b = json_pack("{s:s, s:i, s:s}", "prompt", convo, "max_tokens", 4, "session", "dense");
    char *body = json_dumps(b, 0);
    json_decref(b);
    struct resp r = post(port, "/v1/completions", body);
    nx_free(body);
    ASSERT_EQ(r.status, 400);
    ASSERT_CONTAINS(r.body, "does not fit");
    resp_free(&r);
    srv_stop(s);
    rm_dir(dir);
}

TEST(session_ids_are_checked) {
    struct srv_params p = params();
    p.engine.sessions.max_resident = 1;
    struct srv_server *s = start(&p);
    int port = srv_port(s);
    const char *bad[] = {"\"../etc/passwd\"", "\"a/b\"", "\"\"", "5", "\"a b\"",
                         "\"0123456789012345678901234567890123456789012345678901234567890123x\""};
    for (size_t i = 0; i < NX_ARRAY_LEN(bad); i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\":\"x\",\"session\":%s}", bad[i]);
        struct resp r = post(port, "/v1/completions", body);
        ASSERT_EQ(r.status, 400);
        ASSERT_TRUE(!strcmp(err_field(&r, "param"), "session"));
        resp_free(&r);
    }
    struct resp r = req(port, "POST", "/v1/completions", "X-Session-Id: ../../x\r\n",
                        "{\"prompt\":\"x\"}");
    ASSERT_EQ(r.status, 400);
    resp_free(&r);
    r = post(port, "/v1/completions", "{\"prompt\":\"x\",\"kv_policy\":\"nexus\"}");
    ASSERT_EQ(r.status, 400);
    ASSERT_TRUE(!strcmp(err_field(&r, "param"), "kv_policy"));
    resp_free(&r);
    r = post(port, "/v1/completions", "{\"prompt\":\"x\",\"session\":\"s1\",\"kv_policy\":\"bogus\"}");
    ASSERT_EQ(r.status, 400);
    resp_free(&r);
    r = req(port, "POST", "/v1/completions", "X-Session-Id: hdr-1\r\n",
            "{\"prompt\":\"Once\",\"max_tokens\":2}");
    ASSERT_EQ(r.status, 200);
    resp_free(&r);
    srv_stop(s);
    /* a server without sessions says so */
    struct srv_params q = params();
    s = start(&q);
    r = post(srv_port(s), "/v1/completions", "{\"prompt\":\"x\",\"session\":\"s1\"}");
    ASSERT_EQ(r.status, 400);
    ASSERT_TRUE(strstr(r.body, "--sessions") != NULL);
    resp_free(&r);
    srv_stop(s);
}

TEST(session_idle_parked_after_timeout) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/idle", test_tmpdir());
    mkdir(dir, 0755);
    struct srv_params p = params();
    p.engine.sessions.max_resident = 2;
    p.engine.sessions.dir = dir;
    p.engine.sessions.idle_s = 0.3;
    struct srv_server *s = start(&p);
    char *a = turn(srv_port(s), "idle-1", "Once upon a time", 4, NULL, NULL);
    free(a);
    usleep(1600 * 1000);
    ASSERT_EQ(metric(srv_port(s), "nexus_sessions{state=\"parked\"}"), 1);
    ASSERT_EQ(count_nxs(dir), 1);
    srv_stop(s);
    rm_dir(dir);
}


/* ---- constrained output ---- */

static json_t *chat_json(int port, const char *body, int *status) {
    struct resp r = post(port, "/v1/chat/completions", body);
    *status = r.status;
    json_t *j = json_loads(r.body, 0, NULL);
    if (r.status != 200) fprintf(stderr, "  %d %s\n", r.status, r.body);
    resp_free(&r);
    return j;
}

static json_t *first_message(json_t *resp) {
    return json_object_get(json_array_get(json_object_get(resp, "choices"), 0), "message");
}

TEST(server_json_schema_output_validates) {
    struct srv_params p = params();
    struct srv_server *s = start(&p);
    int valid = 0;
    for (int seed = 1; seed <= 6; seed++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"messages\":[{\"role\":\"user\",\"content\":\"Give a name and a digit.\"}],"
                 "\"temperature\":1.0,\"seed\":%d,\"max_tokens\":60,\"response_format\":{\"type\":"
                 "\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\","
                 "\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":12},\"n\":{\"type\":"
                 "\"integer\",\"minimum\":0,\"maximum\":9},\"ok\":{\"type\":\"boolean\"}},"
                 "\"required\":[\"name\",\"n\",\"ok\"]}}}}", seed);
        int st;
        json_t *r = chat_json(srv_port(s), body, &st);
        ASSERT_EQ(st, 200);
        const char *content = json_string_value(json_object_get(first_message(r), "content"));
        json_t *v = content ? json_loads(content, 0, NULL) : NULL;
        if (!v) fprintf(stderr, "  not JSON: %s\n", content ? content : "(null)");
        ASSERT_TRUE(json_is_object(v));
        json_t *name = json_object_get(v, "name"), *n = json_object_get(v, "n");
        ASSERT_TRUE(json_is_string(name) && json_is_integer(n) &&
                    json_is_boolean(json_object_get(v, "ok")));
        ASSERT_TRUE(json_integer_value(n) >= 0 && json_integer_value(n) <= 9);
        ASSERT_TRUE(json_object_size(v) == 3);
        valid++;
        json_decref(v);
        json_decref(r);
    }
    ASSERT_EQ(valid, 6);
    /* json_object: any object */
    int st;
    json_t *r = chat_json(srv_port(s), "{\"messages\":[{\"role\":\"user\",\"content\":\"JSON\"}],"
                          "\"seed\":2,\"max_tokens\":40,\"response_format\":{\"type\":\"json_object\"}}",
                          &st);
    ASSERT_EQ(st, 200);
    const char *content = json_string_value(json_object_get(first_message(r), "content"));
    json_t *v = content ? json_loads(content, 0, NULL) : NULL;
    ASSERT_TRUE(json_is_object(v));
    json_decref(v);
    json_decref(r);
    /* a keyword the compiler does not support is refused by name */
    struct resp e = post(srv_port(s), "/v1/chat/completions",
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":"
                         "{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"object\","
                         "\"patternProperties\":{\"a\":{}}}}}}");
    ASSERT_EQ(e.status, 400);
    ASSERT_TRUE(strstr(e.body, "patternProperties") != NULL);
    resp_free(&e);
    srv_stop(s);
}

static const char *k_tools =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\","
    "\"maxLength\":16},\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7}},"
    "\"required\":[\"location\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"q\":{\"type\":\"string\",\"maxLength\":10}},\"required\":[\"q\"]}}}]";

/* A response holding one call of k_tools (named: that tool) with arguments under its schema,
   finish_reason "tool_calls". */
static bool tool_call_ok(json_t *r, const char *named) {
    json_t *ch = json_array_get(json_object_get(r, "choices"), 0);
    const char *fr = json_string_value(json_object_get(ch, "finish_reason"));
    json_t *tc = json_array_get(json_object_get(first_message(r), "tool_calls"), 0);
    json_t *fn = json_object_get(tc, "function");
    const char *name = json_string_value(json_object_get(fn, "name"));
    const char *type = json_string_value(json_object_get(tc, "type"));
    const char *as = json_string_value(json_object_get(fn, "arguments"));
    json_t *args = as ? json_loads(as, 0, NULL) : NULL;
    bool ok = fr && !strcmp(fr, "tool_calls") && type && !strcmp(type, "function") &&
              json_is_string(json_object_get(tc, "id")) && name && json_is_object(args) &&
              (!named || !strcmp(name, named));
    if (ok && !strcmp(name, "get_weather")) {
        json_t *d = json_object_get(args, "days");
        ok = json_is_string(json_object_get(args, "location")) && json_is_integer(d) &&
             json_integer_value(d) >= 1 && json_integer_value(d) <= 7;
    } else if (ok) {
        ok = !strcmp(name, "search") && json_is_string(json_object_get(args, "q"));
    }
    if (!ok) fprintf(stderr, "  not a valid call: %s %s\n", name ? name : "-", fr ? fr : "-");
    json_decref(args);
    return ok;
}

TEST(server_tool_calls_under_the_full_schema) {
    struct srv_params p = params();
    struct srv_server *s = start(&p);
    const char *choices[] = {"\"required\"",
                             "{\"type\":\"function\",\"function\":{\"name\":\"search\"}}"};
    for (int c = 0; c < 2; c++)
        for (int seed = 1; seed <= 4; seed++) {
            char body[2048];
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}],"
                     "\"temperature\":1.0,\"seed\":%d,\"max_tokens\":60,\"tools\":%s,"
                     "\"tool_choice\":%s}", seed, k_tools, choices[c]);
            int st;
            json_t *r = chat_json(srv_port(s), body, &st);
            ASSERT_EQ(st, 200);
            json_t *ch = json_array_get(json_object_get(r, "choices"), 0);
            ASSERT_TRUE(!strcmp(json_string_value(json_object_get(ch, "finish_reason")),
                                "tool_calls"));
            ASSERT_TRUE(tool_call_ok(r, c == 1 ? "search" : NULL));
            json_decref(r);
        }
    /* streamed: the call arrives whole in one delta before the finish chunk */
    char body[2048];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"seed\":3,"
             "\"max_tokens\":60,\"stream\":true,\"tools\":%s,\"tool_choice\":\"required\"}",
             k_tools);
    struct resp r = post(srv_port(s), "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200);
    ASSERT_TRUE(strstr(r.body, "\"tool_calls\":[{\"index\":0") != NULL);
    ASSERT_TRUE(strstr(r.body, "\"finish_reason\":\"tool_calls\"") != NULL);
    resp_free(&r);
    /* auto: the model may answer in text; either way a well-formed response */
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"seed\":3,\"max_tokens\":20,"
             "\"tools\":%s}", k_tools);
    int st;
    json_t *a = chat_json(srv_port(s), body, &st);
    ASSERT_EQ(st, 200);
    ASSERT_TRUE(first_message(a) != NULL);
    json_decref(a);
    /* bad tool requests */
    const char *bad[] = {
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":{}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\"}]}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tool_choice\":\"required\"}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}}",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"patternProperties\":{}}}}],"
        "\"tool_choice\":\"required\"}",
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(bad); i++) {
        struct resp b = post(srv_port(s), "/v1/chat/completions", bad[i]);
        if (b.status != 400) fprintf(stderr, "  case %zu: %d %s\n", i, b.status, b.body);
        ASSERT_EQ(b.status, 400);
        resp_free(&b);
    }
    srv_stop(s);
}

/*
 * Each family's constraint, byte for byte: the text a call is made of after the trigger (auto)
 * or the prefill (required / named) is accepted by the grammar and complete; a name outside
 * the choice or arguments outside the schema are rejected; and trigger/prefill + that text
 * (+ the suffix) parses back, with the family's parser, to the same call.
 */
TEST(constraint_grammars_round_trip_through_the_parsers) {
    nx_grammar_vocab *v = NULL;
    ASSERT_OK(nx_grammar_vocab_init(model(), &v));
    json_t *tools = json_loads(k_tools, 0, NULL);
    const char *args = "{\"location\":\"Oslo\",\"days\":3}";
    struct { enum nx_tool_format f; const char *body, *bad_days; } fam[] = {
        {NX_TOOL_FORMAT_HERMES, "{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Oslo\",\"days\":3}}",
         "{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Oslo\",\"days\":9"},
        {NX_TOOL_FORMAT_MISTRAL, "[{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Oslo\",\"days\":3}}]",
         "[{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Oslo\",\"days\":9"},
        {NX_TOOL_FORMAT_LLAMA3, ":\"get_weather\",\"parameters\":{\"location\":\"Oslo\",\"days\":3}}",
         ":\"get_weather\",\"parameters\":{\"location\":\"Oslo\",\"days\":9"},
        {NX_TOOL_FORMAT_DEEPSEEK, "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\":\"Oslo\",\"days\":3}"
         "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\":\"Oslo\",\"days\":9"},
    };
    enum srv_tool_mode modes[] = {SRV_TOOLS_AUTO, SRV_TOOLS_REQUIRED, SRV_TOOLS_NAMED};
    for (size_t k = 0; k < NX_ARRAY_LEN(fam); k++)
        for (int m = 0; m < 3; m++) {
            /* NAMED: only "search" may be called, so get_weather is refused */
            const char *named = m == 2 ? "search" : NULL;
            struct srv_constraint c;
            char err[256];
            nx_status bst = srv_constraint_build(fam[k].f, NULL, tools, modes[m], named, NULL, &c, err, sizeof err);
            if (bst) fprintf(stderr, "  %s mode %d: %s\n", nx_tool_format_name(fam[k].f), m, err);
            ASSERT_OK(bst);
            ASSERT_TRUE(c.grammar != NULL && c.tools && c.format == fam[k].f);
            const char *lead = modes[m] == SRV_TOOLS_AUTO ? c.trigger : c.prefill;
            ASSERT_TRUE(lead != NULL && lead[0]);
            if (modes[m] == SRV_TOOLS_AUTO) ASSERT_TRUE(!c.prefill[0]);
            else ASSERT_TRUE(c.trigger == NULL);
            nx_grammar_matcher *gm = NULL;
            ASSERT_OK(nx_grammar_matcher_init(c.grammar, v, &gm));
            nx_status st = nx_grammar_matcher_accept_text(gm, fam[k].body, strlen(fam[k].body));
            if (named) {
                /* the prefill holds the call up to its arguments; only those are generated */
                ASSERT_TRUE(st != NX_STATUS_OK);
                ASSERT_TRUE(strstr(c.prefill, "search") != NULL);
                const char *close = fam[k].f == NX_TOOL_FORMAT_MISTRAL ? "}]" : fam[k].f == NX_TOOL_FORMAT_DEEPSEEK
                                    ? "<｜tool▁call▁end｜><｜tool▁calls▁end｜>" : "}";
                char body[256], text[1024];
                snprintf(body, sizeof body, "{\"q\":\"kv\"}%s", close);
                ASSERT_OK(nx_grammar_matcher_accept_text(gm, body, strlen(body)));
                ASSERT_TRUE(nx_grammar_matcher_can_end(gm));
                nx_grammar_matcher_reset(gm);
                const char *bad = "{\"q\":\"longer than ten\"}";
                ASSERT_TRUE(nx_grammar_matcher_accept_text(gm, bad, strlen(bad)) != NX_STATUS_OK);
                snprintf(text, sizeof text, "%s%s%s", c.prefill, body, c.suffix);
                nx_tool_calls *calls = NULL;
                ASSERT_OK(nx_tool_calls_parse(c.format, text, strlen(text), &calls, err, sizeof err));
                ASSERT_EQ(nx_tool_calls_count(calls), 1);
                ASSERT_STR_EQ(nx_tool_calls_get(calls, 0)->name, "search");
                ASSERT_STR_EQ(nx_tool_calls_get(calls, 0)->arguments, "{\"q\":\"kv\"}");
                nx_tool_calls_free(calls);
            } else {
                if (st != NX_STATUS_OK) fprintf(stderr, "  %s mode %d: grammar rejects %s\n", nx_tool_format_name(fam[k].f), m, fam[k].body);
                ASSERT_OK(st);
                ASSERT_TRUE(nx_grammar_matcher_can_end(gm));
                nx_grammar_matcher_reset(gm);
                ASSERT_TRUE(nx_grammar_matcher_accept_text(gm, fam[k].bad_days, strlen(fam[k].bad_days)) != NX_STATUS_OK);
                char text[1024];
                snprintf(text, sizeof text, "%s%s%s%s", modes[m] == SRV_TOOLS_AUTO ? "Let me see. " : "", lead, fam[k].body, c.suffix);
                nx_tool_calls *calls = NULL;
                ASSERT_OK(nx_tool_calls_parse(c.format, text, strlen(text), &calls, err, sizeof err));
                ASSERT_EQ(nx_tool_calls_count(calls), 1);
                ASSERT_STR_EQ(nx_tool_calls_get(calls, 0)->name, "get_weather");
                ASSERT_STR_EQ(nx_tool_calls_get(calls, 0)->arguments, args);
                ASSERT_STR_EQ(nx_tool_calls_content(calls), modes[m] == SRV_TOOLS_AUTO ? "Let me see." : "");
                nx_tool_calls_free(calls);
            }
            nx_grammar_matcher_free(gm);
            srv_constraint_free(&c);
        }
    /* the families of chat/callshape.h have their own grammar (test_server_toolgrammar),
       gemma4 and pythonic in their own argument syntaxes */
    struct srv_constraint c;
    char err[512];
    ASSERT_OK(srv_constraint_build(NX_TOOL_FORMAT_XML_INVOKE, NULL, tools, SRV_TOOLS_AUTO, NULL, NULL, &c, err, sizeof err));
    ASSERT_TRUE(c.grammar != NULL && c.format == NX_TOOL_FORMAT_XML_INVOKE);
    ASSERT_STR_EQ(c.trigger, "<minimax:tool_call>");
    srv_constraint_free(&c);
    enum nx_tool_format own[] = {NX_TOOL_FORMAT_GEMMA4, NX_TOOL_FORMAT_PYTHONIC};
    for (int k = 0; k < 2; k++)
        for (int m = 0; m < 3; m++) {
            ASSERT_OK(srv_constraint_build(own[k], NULL, tools, modes[m], m == 2 ? "search" : NULL, NULL, &c, err, sizeof err));
            ASSERT_TRUE(c.grammar != NULL && c.format == own[k]);
            srv_constraint_free(&c);
        }
    /* without tools they are plain chat */
    ASSERT_OK(srv_constraint_build(NX_TOOL_FORMAT_GEMMA4, NULL, NULL, SRV_TOOLS_AUTO, NULL, NULL, &c, err, sizeof err));
    ASSERT_TRUE(c.grammar == NULL && !c.tools);
    srv_constraint_free(&c);
    json_decref(tools);
    nx_grammar_vocab_free(v);
}

/* The built-in llama3 template: required / named calls come out whole under the schema, and
   auto answers are well formed (the grammar waits for {"name"). */
TEST(server_llama3_tool_calls) {
    struct srv_params p = params();
    p.chat_template = "llama3";
    struct srv_server *s = start(&p);
    ASSERT_TRUE(s != NULL);
    const char *choices[] = {"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"search\"}}", "\"auto\""};
    for (int c = 0; c < 3; c++)
        for (int seed = 1; seed <= 3; seed++) {
            char body[2048];
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}],"
                     "\"temperature\":1.0,\"seed\":%d,\"max_tokens\":60,\"tools\":%s,"
                     "\"tool_choice\":%s}", seed, k_tools, choices[c]);
            int st;
            json_t *r = chat_json(srv_port(s), body, &st);
            ASSERT_EQ(st, 200);
            if (c < 2) ASSERT_TRUE(tool_call_ok(r, c == 1 ? "search" : NULL));
            else ASSERT_TRUE(first_message(r) != NULL);
            json_decref(r);
        }
    srv_stop(s);
}

/* Templates of the families with a shape (chat/callshape.h), served for real: the server finds
   each template's call form, required / named calls come out whole in that form and parse
   (with the tools: string parameters stay text) into calls under the schema. */
TEST(server_tool_calls_in_each_familys_form) {
    const char *tmpls[] = {"MiniMax-M2.jinja", "deepseek-ai-DeepSeek-V3.2.jinja", "NVIDIA-Nemotron-Nano-v2.jinja",
                           "moonshotai-Kimi-K2.jinja", "upstage-Solar-Open-100B.jinja", "openai-gpt-oss-120b.jinja",
                           "tencent-Hy3.jinja", "meetkai-functionary-medium-v3.2.jinja", "MiniMax-M3.jinja",
                           "google-gemma-4-31B-it.jinja", "LFM2.5-8B-A1B.jinja"};
    const char *choices[] = {"\"required\"", "{\"type\":\"function\",\"function\":{\"name\":\"search\"}}"};
    /* k_tools with a description for each tool (some templates print it unconditionally) */
    char tools[1024];
    const char *at = strstr(k_tools, "{\"name\":\"search\"");
    snprintf(tools, sizeof tools, "%.*s{\"name\":\"search\",\"description\":\"Search\"%s", (int)(at - k_tools), k_tools,
             at + strlen("{\"name\":\"search\""));
    for (size_t k = 0; k < NX_ARRAY_LEN(tmpls); k++) {
        char path[1024];
        snprintf(path, sizeof path, "../shared/data/chat-templates/%s", tmpls[k]);
        struct srv_params p = params();
        p.chat_template = path;
        p.engine.n_slots = 1;
        p.engine.n_ctx = 4096; /* the templates' tool instructions are long */
        struct srv_server *s = start(&p);
        ASSERT_TRUE(s != NULL);
        for (int c = 0; c < 2; c++)
            for (int seed = 1; seed <= 2; seed++) {
                char body[2048];
                snprintf(body, sizeof body,
                         /* 300: DSML's shortest call is 124 bytes, one token a byte at worst */
                         "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}],"
                         "\"temperature\":1.0,\"seed\":%d,\"max_tokens\":300,\"tools\":%s,"
                         "\"tool_choice\":%s}", seed, tools, choices[c]);
                int st;
                json_t *r = chat_json(srv_port(s), body, &st);
                if (st != 200) FAILF("%s: status %d", tmpls[k], st);
                if (!tool_call_ok(r, c == 1 ? "search" : NULL)) FAILF("%s: %s", tmpls[k], json_dumps(r, 0));
                json_decref(r);
            }
        srv_stop(s);
    }
}

TEST(zz_free_model) {
    nx_model_free(g_model);
    g_model = NULL;
}

TEST_MAIN
