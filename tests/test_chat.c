/*
 * test_chat.c - chat templates (src/chat): every template of ../shared/data/chat-templates
 * rendered on the conversations of tests/fixtures/chat/conversations.json and compared byte for
 * byte with Python jinja2's output (tests/fixtures/chat/expected.json, written by
 * scripts/render_templates.py, the oracle); interpreter details against jinja2 outputs of small
 * snippets (tests/fixtures/chat/snippets.json, same oracle); the live oracle re-run when python3
 * with jinja2 is present; hostile templates (limits, errors naming constructs), allocation
 * failures, the built-in templates, and the time of a typical render.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/readfile.h"
#include "core/nx_base.h"
#include "nexus.h"
#include "test.h"
#include "support/tmpdir.h"

#define FIX "tests/fixtures/chat/"
#define FIXED_NOW 1768473000 /* 2026-01-15 10:30:00 UTC, as the oracle's strftime_now */

/* The whole file (NUL-ended, nx_free), or NULL. */
static char *read_all(const char *path, size_t *n) {
    char err[256];
    return nx_read_file(path, NX_READ_FILE_MAX, n, err, sizeof err);
}

/* kind of a C error message "KIND: message" compared with the oracle's kind */
static bool kind_matches(const char *ckind, const char *pykind) {
    if (!strcmp(pykind, "python")) return !strcmp(ckind, "python");
    if (!strcmp(pykind, "template")) return !strcmp(ckind, "template");
    return !strcmp(ckind, pykind);
}

/* Templates Nexus refuses (by name), with the construct; empty when all match. */
static const char *const REFUSED[] = {NULL};

static bool is_refused(const char *name) {
    for (int i = 0; REFUSED[i]; i++)
        if (!strcmp(REFUSED[i], name)) return true;
    return false;
}

static int g_verbose;

TEST(templates_match_jinja2) {
    json_error_t je;
    json_t *conv = json_load_file(FIX "conversations.json", 0, &je);
    json_t *exp = json_load_file(FIX "expected.json", 0, &je);
    ASSERT_TRUE(conv && exp);
    json_t *tools = json_object_get(conv, "tools");
    char *tools_s = json_dumps(tools, JSON_COMPACT);
    int n_tmpl = 0, n_match = 0, n_refused = 0, n_cases = 0, n_ok = 0, n_msg_diff = 0;
    const char *tname;
    json_t *cases;
    char path[1024], err[1024];
    json_object_foreach(exp, tname, cases) {
        n_tmpl++;
        snprintf(path, sizeof path, "%s/data/chat-templates/%s", test_shared(), tname);
        size_t n;
        char *src = read_all(path, &n);
        if (!src) FAILF("cannot read %s", path);
        nx_chat_template *t = NULL;
        nx_status st = nx_chat_template_parse(src, n, &t, err, sizeof err);
        nx_free(src);
        if (st != NX_STATUS_OK) {
            n_refused++;
            printf("  refused %s: %s\n", tname, err);
            if (!is_refused(tname)) g_test_failed = 1;
            continue;
        }
        bool all = true;
        size_t ci;
        json_t *c;
        json_array_foreach(json_object_get(conv, "conversations"), ci, c) {
            for (int agp = 0; agp < 2; agp++) {
                char key[128];
                snprintf(key, sizeof key, "%s/%s", json_string_value(json_object_get(c, "name")), agp ? "gen" : "nogen");
                json_t *want = json_object_get(cases, key);
                if (!want) FAILF("%s: no expected case %s", tname, key);
                char *msgs = json_dumps(json_object_get(c, "messages"), JSON_COMPACT);
                struct nx_chat_params p = nx_chat_default_params();
                p.messages_json = msgs;
                p.tools_json = json_is_true(json_object_get(c, "tools")) ? tools_s : NULL;
                p.add_generation_prompt = agp;
                p.bos_token = "<|bos|>";
                p.eos_token = "<|eos|>";
                p.now = FIXED_NOW;
                char *out = NULL;
                size_t out_len = 0;
                st = nx_chat_render(t, &p, &out, &out_len, err, sizeof err);
                nx_free(msgs);
                n_cases++;
                json_t *wo = json_object_get(want, "out");
                bool ok;
                if (wo) {
                    ok = st == NX_STATUS_OK && out_len == json_string_length(wo) &&
                         memcmp(out, json_string_value(wo), out_len) == 0;
                    if (!ok && (g_verbose || n_cases - n_ok < 40)) {
                        if (st != NX_STATUS_OK) printf("  MISMATCH %s %s: error %s\n", tname, key, err);
                        else {
                            const char *w = json_string_value(wo);
                            size_t k = 0;
                            while (k < out_len && w[k] && out[k] == w[k]) k++;
                            size_t from = k > 60 ? k - 60 : 0;
                            printf("  MISMATCH %s %s at byte %zu:\n    want: %.120s\n    got:  %.120s\n", tname, key, k,
                                   w + from, out + from);
                        }
                    }
                } else {
                    const char *kind = json_string_value(json_object_get(want, "error"));
                    const char *msg = json_string_value(json_object_get(want, "message"));
                    ok = st != NX_STATUS_OK;
                    char ckind[32] = "";
                    const char *colon = ok ? strstr(err, ": ") : NULL;
                    if (colon && (size_t)(colon - err) < sizeof ckind) {
                        memcpy(ckind, err, (size_t)(colon - err));
                        ckind[colon - err] = 0;
                    }
                    const char *cmsg = colon ? colon + 2 : err;
                    if (ok && !strcmp(kind, "raise")) ok = !strcmp(ckind, "raise") && !strcmp(cmsg, msg);
                    if (ok && (!kind_matches(ckind, kind) || strcmp(cmsg, msg))) {
                        n_msg_diff++;
                        printf("  note: %s %s: jinja2 %s \"%s\", nexus \"%s\"\n", tname, key, kind, msg, err);
                    }
                    if (!ok)
                        printf("  MISMATCH %s %s: jinja2 raises %s \"%s\", nexus %s\n", tname, key, kind, msg,
                               st == NX_STATUS_OK ? "rendered" : err);
                }
                nx_chat_free_string(out);
                if (ok) n_ok++;
                else all = false;
            }
        }
        if (all) n_match++;
        nx_chat_template_free(t);
    }
    printf("  templates: %d, all cases identical: %d, refused: %d; cases %d/%d identical, %d error messages differ\n",
           n_tmpl, n_match, n_refused, n_ok, n_cases, n_msg_diff);
    nx_free(tools_s);
    json_decref(conv);
    json_decref(exp);
    ASSERT_EQ(n_tmpl, 70);
    ASSERT_EQ(n_match + n_refused, n_tmpl);
    ASSERT_EQ(n_msg_diff, 0);
}

TEST(snippets_match_jinja2) {
    json_error_t je;
    json_t *sn = json_load_file(FIX "snippets.json", 0, &je);
    ASSERT_TRUE(sn != NULL);
    size_t i;
    json_t *s;
    int bad = 0;
    json_array_foreach(sn, i, s) {
        const char *src = json_string_value(json_object_get(s, "template"));
        json_t *vars = json_object_get(s, "vars");
        char err[1024];
        nx_chat_template *t = NULL;
        nx_status st = nx_chat_template_parse(src, strlen(src), &t, err, sizeof err);
        char *out = NULL;
        size_t out_len = 0;
        if (st == NX_STATUS_OK) {
            json_t *msgs = json_object_get(vars, "messages");
            char *m = msgs ? json_dumps(msgs, JSON_COMPACT) : nx_strdup("[]");
            char *x = json_dumps(vars, JSON_COMPACT);
            struct nx_chat_params p = nx_chat_default_params();
            p.messages_json = m;
            p.extra_json = x;
            p.now = FIXED_NOW;
            st = nx_chat_render(t, &p, &out, &out_len, err, sizeof err);
            nx_free(m);
            nx_free(x);
        }
        json_t *wo = json_object_get(s, "out");
        if (wo) {
            if (st != NX_STATUS_OK || out_len != json_string_length(wo) || memcmp(out, json_string_value(wo), out_len)) {
                bad++;
                printf("  snippet %zu %s\n    want: [%s]\n    got:  [%s]\n", i, src, json_string_value(wo),
                       st == NX_STATUS_OK ? out : err);
            }
        } else if (st == NX_STATUS_OK) {
            bad++;
            printf("  snippet %zu %s: jinja2 raises \"%s\", nexus rendered [%s]\n", i, src,
                   json_string_value(json_object_get(s, "message")), out);
        } else {
            const char *kind = json_string_value(json_object_get(s, "error"));
            const char *msg = json_string_value(json_object_get(s, "message"));
            const char *colon = strstr(err, ": ");
            if (!strcmp(kind, "raise") && (!colon || strcmp(colon + 2, msg))) {
                bad++;
                printf("  snippet %zu %s: want raise \"%s\", got \"%s\"\n", i, src, msg, err);
            }
        }
        nx_chat_free_string(out);
        nx_chat_template_free(t);
    }
    printf("  %zu snippets, %d differ\n", json_array_size(sn), bad);
    json_decref(sn);
    ASSERT_EQ(bad, 0);
}

/* The committed fixtures are what the oracle writes now (when python3 + jinja2 are here). */
TEST(live_oracle) {
    if (system("python3 -c 'import jinja2' >/dev/null 2>&1") != 0) {
        printf("  SKIP: python3 with jinja2 not available\n");
        return;
    }
    char out1[512], out2[512], cmd[2048];
    test_tmp_path("expected.json", out1, sizeof out1);
    test_tmp_path("snippets.json", out2, sizeof out2);
    snprintf(cmd, sizeof cmd,
             "python3 scripts/render_templates.py %s/data/chat-templates " FIX "conversations.json %s && "
             "python3 scripts/render_templates.py --snippets " FIX "snippets.in.json %s",
             test_shared(), out1, out2);
    ASSERT_EQ(system(cmd), 0);
    size_t na, nb;
    char *a = read_all(out1, &na), *b = read_all(FIX "expected.json", &nb);
    ASSERT_TRUE(a && b);
    bool same = na == nb && !memcmp(a, b, na);
    nx_free(a);
    nx_free(b);
    if (!same) FAILF("live jinja2 output differs from " FIX "expected.json: regenerate it");
    a = read_all(out2, &na);
    b = read_all(FIX "snippets.json", &nb);
    ASSERT_TRUE(a && b);
    same = na == nb && !memcmp(a, b, na);
    nx_free(a);
    nx_free(b);
    if (!same) FAILF("live jinja2 output differs from " FIX "snippets.json: regenerate it");
}

static nx_status render_src(const char *src, const char *msgs, char **out, char *err, size_t errlen) {
    nx_chat_template *t = NULL;
    *out = NULL;
    nx_status st = nx_chat_template_parse(src, strlen(src), &t, err, errlen);
    if (st) return st;
    struct nx_chat_params p = nx_chat_default_params();
    p.messages_json = msgs ? msgs : "[]";
    p.now = FIXED_NOW;
    p.max_output = 1 << 20;
    p.max_steps = 100000;
    st = nx_chat_render(t, &p, out, NULL, err, errlen);
    nx_chat_template_free(t);
    return st;
}

static char g_deep[1200], g_deep_if[8000];

TEST(hostile_templates_fail_cleanly) {
    strcpy(g_deep, "{{ ");
    for (int i = 0; i < 500; i++) strcat(g_deep, "(");
    strcat(g_deep, "1");
    for (int i = 0; i < 500; i++) strcat(g_deep, ")");
    strcat(g_deep, " }}");
    g_deep_if[0] = 0;
    for (int i = 0; i < 400; i++) strcat(g_deep_if, "{% if 1 %}");
    struct { const char *src; nx_status st; const char *needle; } cases[] = {
        {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", NX_STATUS_INVALID_ARG, "limit: line 1"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", NX_STATUS_INVALID_ARG, "nested deeper"},
        {"{% set s = 'x' * 1000 %}{% for i in range(99999) %}{{ s }}{% endfor %}", NX_STATUS_INVALID_ARG, "output longer"},
        {"{% if x %}", NX_STATUS_FORMAT, "line 1"},
        {"a\n{% for x in y %}\n{% endif %}", NX_STATUS_FORMAT, "line 3: unexpected 'endif' inside 'for' (opened on line 2)"},
        {"{{ x + }}", NX_STATUS_FORMAT, "line 1"},
        {"line1\n{% call foo() %}x{% endcall %}", NX_STATUS_UNSUPPORTED, "line 2: unsupported construct: the 'call' tag"},
        {"{% include 'x.j2' %}", NX_STATUS_UNSUPPORTED, "the 'include' tag"},
        {"{% raw %}{{ x }}{% endraw %}", NX_STATUS_UNSUPPORTED, "the 'raw' tag"},
        {"{% for x in y recursive %}{% endfor %}", NX_STATUS_UNSUPPORTED, "recursive for loops"},
        {"\n\n{{ x | from_json }}", NX_STATUS_INVALID_ARG, "template: No filter named 'from_json' found."},
        {"\n\n{{ x | wordwrap }}", NX_STATUS_UNSUPPORTED, "unsupported: line 3: unsupported construct: the filter 'wordwrap'"},
        {"{{ x is foo }}", NX_STATUS_INVALID_ARG, "template: No test named 'foo' found."},
        {"{{ 'a' % 3 }}", NX_STATUS_UNSUPPORTED, "printf-style"},
        {"{{ 9223372036854775807 + 1 }}", NX_STATUS_UNSUPPORTED, "64 bits"},
        {"{{ raise_exception('bad role') }}", NX_STATUS_INVALID_ARG, "raise: bad role"},
        {"{{ messages[0].content.foo.bar }}", NX_STATUS_INVALID_ARG, "undefined: 'str object' has no attribute 'foo'"},
        {"{% set l = [] %}{{ l.append(1) }}", NX_STATUS_INVALID_ARG, "security: access to attribute 'append' of 'list' object is unsafe."},
        {g_deep, NX_STATUS_INVALID_ARG, "nested too deeply"},
        {g_deep_if, NX_STATUS_INVALID_ARG, "blocks nested deeper than 200"},
        {"{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}", NX_STATUS_INVALID_ARG, "nested too deeply to print"},
        {"{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x < ns.x }}", NX_STATUS_INVALID_ARG, "nested too deeply to compare"},
        {"{% set ns = namespace(x=[]) %}{% for i in range(2000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x|tojson }}", NX_STATUS_INVALID_ARG, "nested too deeply"},
        {"{{ 'unterminated }}", NX_STATUS_FORMAT, "unterminated string"},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        char *out = NULL, err[512] = "";
        nx_status st = render_src(cases[i].src, "[{\"role\":\"user\",\"content\":\"hi\"}]", &out, err, sizeof err);
        if (st != cases[i].st || !strstr(err, cases[i].needle))
            FAILF("case %zu (%.40s): status %d (want %d), message \"%s\" lacks \"%s\"", i, cases[i].src, st,
                  cases[i].st, err, cases[i].needle);
        ASSERT_TRUE(out == NULL);
    }
    /* garbage bytes never crash */
    srand(7);
    for (int k = 0; k < 300; k++) {
        char src[200];
        const char alphabet[] = "{}%#-+()[]|.,:'\"=<>!~*/ abcxyz019\n";
        int n = rand() % 199;
        for (int q = 0; q < n; q++) src[q] = alphabet[rand() % (int)(sizeof alphabet - 1)];
        src[n] = 0;
        char *out = NULL, err[256];
        render_src(src, NULL, &out, err, sizeof err);
        nx_chat_free_string(out);
    }
}

/* The output cap holds for every byte: a write that ends exactly at the cap, then more output
   (the fuzzer's find: the check ran only when the buffer grew, and a buffer grown at the cap
   took later writes unchecked, 121 KB past a 64 KiB cap). */
TEST(output_cap_holds_after_an_exact_fill) {
    struct { const char *src; size_t cap; bool ok; } cases[] = {
        {"{{ 'aaaaaaaaaa' }}", 10, true},          /* exactly the cap */
        {"{{ 'aaaaaaaaaa' }}{{ 'bb' }}", 10, false}, /* then two more bytes */
        {"{{ 'aaaaaaaaaa' }}x", 10, false},          /* then template text */
        {"{{ 'a' * 300 }}{{ 'b' }}", 300, false},    /* past the first growth */
        {"{{ 'a' * 256 }}{{ 'b' * 44 }}", 300, true},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        nx_chat_template *t = NULL;
        char err[256] = "", *out = NULL;
        size_t len = 0;
        ASSERT_OK(nx_chat_template_parse(cases[i].src, strlen(cases[i].src), &t, err, sizeof err));
        struct nx_chat_params p = nx_chat_default_params();
        p.messages_json = "[]";
        p.max_output = cases[i].cap;
        nx_status st = nx_chat_render(t, &p, &out, &len, err, sizeof err);
        if (cases[i].ok) {
            if (st != NX_STATUS_OK || len != cases[i].cap)
                FAILF("case %zu: status %d, %zu bytes (want %zu)", i, st, len, cases[i].cap);
        } else if (st != NX_STATUS_INVALID_ARG || out || !strstr(err, "output longer than")) {
            FAILF("case %zu: status %d, %zu bytes past a cap of %zu, message \"%s\"", i, st, len,
                  cases[i].cap, err);
        }
        nx_chat_free_string(out);
        nx_chat_template_free(t);
    }
}

TEST(bad_json_input) {
    nx_chat_template *t = NULL;
    char err[256];
    ASSERT_OK(nx_chat_template_open("chatml", &t, err, sizeof err));
    struct nx_chat_params p = nx_chat_default_params();
    char *out = NULL;
    p.messages_json = "[{\"role\": \"user\", \"content\": ";
    ASSERT_EQ(nx_chat_render(t, &p, &out, NULL, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_CONTAINS(err, "json: messages");
    p.messages_json = "{}";
    ASSERT_EQ(nx_chat_render(t, &p, &out, NULL, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_CONTAINS(err, "must be a JSON array");
    p.messages_json = NULL;
    ASSERT_EQ(nx_chat_render(t, &p, &out, NULL, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(out == NULL);
    nx_chat_template_free(t);
    ASSERT_EQ(nx_chat_template_open("/nonexistent/x.jinja", &t, err, sizeof err), NX_STATUS_NOT_FOUND);
    ASSERT_CONTAINS(err, "neither a built-in");
}

TEST(builtin_templates) {
    const char *msgs = "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
                       "{\"role\":\"assistant\",\"content\":\"Hello.\"},{\"role\":\"user\",\"content\":\"Bye\"}]";
    struct { const char *name, *want; } cases[] = {
        {"chatml", "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
                   "Hello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"},
        {"llama3", "<s><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
                   "Hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|><|start_header_id|>user"
                   "<|end_header_id|>\n\nBye<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
        {"mistral", "<s>[INST] Be brief.\n\nHi[/INST]Hello.</s>[INST] Bye[/INST]"},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        nx_chat_template *t = NULL;
        char err[256], *out = NULL;
        ASSERT_OK(nx_chat_template_open(cases[i].name, &t, err, sizeof err));
        struct nx_chat_params p = nx_chat_default_params();
        p.messages_json = msgs;
        p.add_generation_prompt = true;
        p.bos_token = "<s>";
        p.eos_token = "</s>";
        ASSERT_OK(nx_chat_render(t, &p, &out, NULL, err, sizeof err));
        ASSERT_STR_EQ(out, cases[i].want);
        nx_chat_free_string(out);
        nx_chat_template_free(t);
    }
}

TEST(alloc_failures) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja", test_shared());
    const char *msgs = "[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":"
                       "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"a\":1}}}]}]";
    size_t src_len;
    char *src = read_all(path, &src_len);
    ASSERT_TRUE(src != NULL);
    size_t base = nx_alloc_bytes();
    int fails = 0;
    for (long n = 1; n < 60; n++) {
        nx_chat_template *t = NULL;
        char *out = NULL;
        nx_alloc_fail_after(n);
        nx_status st = nx_chat_template_parse(src, src_len, &t, err, sizeof err);
        if (st == NX_STATUS_OK) {
            struct nx_chat_params p = nx_chat_default_params();
            p.messages_json = msgs;
            st = nx_chat_render(t, &p, &out, NULL, err, sizeof err);
        }
        nx_alloc_fail_after(0);
        if (st != NX_STATUS_OK) {
            fails++;
            if (st != NX_STATUS_NOMEM) FAILF("n=%ld: status %d (%s), want NOMEM", n, st, err);
        }
        nx_chat_free_string(out);
        nx_chat_template_free(t);
        ASSERT_EQ(nx_alloc_bytes(), base);
    }
    nx_free(src);
    ASSERT_TRUE(fails > 3);
}

TEST(render_speed) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja", test_shared());
    nx_chat_template *t = NULL;
    ASSERT_OK(nx_chat_template_open(path, &t, err, sizeof err));
    json_error_t je;
    json_t *conv = json_load_file(FIX "conversations.json", 0, &je);
    ASSERT_TRUE(conv != NULL);
    char *tools = json_dumps(json_object_get(conv, "tools"), JSON_COMPACT);
    char *msgs = json_dumps(json_object_get(json_array_get(json_object_get(conv, "conversations"), 4), "messages"), JSON_COMPACT);
    struct nx_chat_params p = nx_chat_default_params();
    p.messages_json = msgs;
    p.tools_json = tools;
    p.add_generation_prompt = true;
    int iters = 300;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < iters; i++) {
        char *out = NULL;
        ASSERT_OK(nx_chat_render(t, &p, &out, NULL, err, sizeof err));
        nx_chat_free_string(out);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double us = ((double)(b.tv_sec - a.tv_sec) * 1e6 + (double)(b.tv_nsec - a.tv_nsec) / 1e3) / iters;
    printf("  Qwen2.5 template, 5-message conversation with 2 tools: %.1f us per render\n", us);
    nx_free(tools);
    nx_free(msgs);
    json_decref(conv);
    nx_chat_template_free(t);
}

TEST(model_template_accessor) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-qwen2.gguf", test_shared());
    nx_model *m = NULL;
    ASSERT_OK(nx_model_load(path, NULL, &m, err, sizeof err));
    const char *src = nx_model_chat_template(m);
    ASSERT_TRUE(src != NULL);
    ASSERT_TRUE(strncmp(src, "{% for message in messages %}", 29) == 0);
    nx_chat_template *t = NULL;
    ASSERT_OK(nx_chat_template_from_model(m, &t, err, sizeof err));
    struct nx_chat_params p = nx_chat_default_params();
    p.messages_json = "[{\"role\":\"user\",\"content\":\"Hi\"}]";
    p.add_generation_prompt = true;
    char *out = NULL;
    ASSERT_OK(nx_chat_render(t, &p, &out, NULL, err, sizeof err));
    /* that template: a default system turn when the first message is not a system one */
    ASSERT_STR_EQ(out, "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                       "<|im_start|>assistant\n");
    nx_chat_free_string(out);
    nx_chat_template_free(t);
    nx_model_free(m);
    snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", test_shared());
    ASSERT_OK(nx_model_load(path, NULL, &m, err, sizeof err));
    ASSERT_TRUE(nx_model_chat_template(m) == NULL);
    ASSERT_EQ(nx_chat_template_from_model(m, &t, err, sizeof err), NX_STATUS_NOT_FOUND);
    ASSERT_TRUE(t == NULL);
    nx_model_free(m);
}

/* `nexus chat -i`: one turn per line, the history re-rendered into each prompt, /reset */
TEST(cli_chat_keeps_history) {
    const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "printf 'Hi\\nAgain\\n/reset\\nNew\\n/exit\\n' | %s/nexus chat -m %s/models/stories260K/stories260K.gguf "
             "-i -n 4 --temp 0 --system Sys --print-prompt 2>/dev/null",
             build, test_shared());
    FILE *f = popen(cmd, "r");
    ASSERT_TRUE(f != NULL);
    char buf[16384];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    int rc = pclose(f);
    ASSERT_EQ(rc, 0);
    const char *turn1 = "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n\n----";
    ASSERT_CONTAINS(buf, turn1);
    /* the second prompt holds the first turn and the model's reply, then the new user turn */
    const char *second = strstr(buf, "----");
    ASSERT_TRUE(second != NULL);
    ASSERT_CONTAINS(second + 4, "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    ASSERT_CONTAINS(second + 4, "<|im_end|>\n<|im_start|>user\nAgain<|im_end|>\n<|im_start|>assistant\n\n----");
    /* after /reset only the system prompt remains */
    ASSERT_CONTAINS(buf, "<|im_start|>system\nSys<|im_end|>\n<|im_start|>user\nNew<|im_end|>\n<|im_start|>assistant\n\n----");
}

TEST_MAIN
