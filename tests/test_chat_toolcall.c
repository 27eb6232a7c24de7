/*
 * test_chat_toolcall.c - tool-call parsing (src/chat/toolcall.c): calls rendered by each
 * family's real template (../shared/data/chat-templates) parse back to the same name and
 * arguments (round trip, the template's text as the independent source); hand-written outputs
 * of each family with their expected calls; malformed and truncated outputs give FORMAT errors
 * naming the problem and never crash; family detection and triggers.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/nx_base.h"
#include "nexus.h"
#include "test.h"

static nx_chat_template *open_tmpl(const char *name) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/data/chat-templates/%s", test_shared(), name);
    nx_chat_template *t = NULL;
    if (nx_chat_template_open(path, &t, err, sizeof err)) {
        printf("  cannot open %s: %s\n", name, err);
        return NULL;
    }
    return t;
}

static char *render(nx_chat_template *t, const char *msgs, bool agp) {
    struct nx_chat_params p = nx_chat_default_params();
    p.messages_json = msgs;
    p.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather.\","
                   "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"},"
                   "\"days\":{\"type\":\"integer\"}},\"required\":[\"location\"]}}},"
                   "{\"type\":\"function\",\"function\":{\"name\":\"search_docs\",\"description\":\"Search.\","
                   "\"parameters\":{\"type\":\"object\",\"properties\":{\"query\":{\"type\":\"string\"}}}}}]";
    p.add_generation_prompt = agp;
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    p.now = 1768473000;
    char *out = NULL, err[512];
    if (nx_chat_render(t, &p, &out, NULL, err, sizeof err)) return NULL;
    return out;
}

/*
 * The assistant turn a template renders for one call: render(user + assistant) after its
 * longest common prefix with render(user) (so it includes the assistant header).
 */
static char *assistant_turn(nx_chat_template *t, const char *call_json) {
    char user[] = "{\"role\":\"user\",\"content\":\"Weather in Oslo for 3 days?\"}";
    char a[4096], b[4096];
    snprintf(a, sizeof a, "[%s]", user);
    snprintf(b, sizeof b,
             "[%s,{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"abcDEF123\",\"type\":\"function\","
             "\"function\":%s}]}]",
             user, call_json);
    char *ra = render(t, a, false), *rb = render(t, b, false);
    char *res = NULL;
    if (ra && rb) { /* after the longest common prefix (a generation prompt may differ, e.g. "<think>") */
        size_t k = 0;
        while (ra[k] && ra[k] == rb[k]) k++;
        res = strdup(rb + k);
    }
    nx_chat_free_string(ra);
    nx_chat_free_string(rb);
    return res;
}

TEST(round_trip_through_templates) {
    /* every template whose family Nexus parses; the canonical ones must round-trip */
    static const char *must[] = {"Qwen-Qwen2.5-7B-Instruct.jinja", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "Qwen-Qwen3-0.6B.jinja", "Qwen-QwQ-32B.jinja",
        "Qwen3-Coder.jinja", "meta-llama-Llama-3.1-8B-Instruct.jinja", "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja", "meetkai-functionary-medium-v3.1.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja", "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "deepseek-ai-DeepSeek-V3.1.jinja", "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", NULL};
    const char *call = "{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Oslo\",\"days\":3}}";
    const char *want_args = "{\"location\":\"Oslo\",\"days\":3}";
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls %s/data/chat-templates/ | grep 'jinja$'", test_shared());
    FILE *ls = popen(cmd, "r");
    ASSERT_TRUE(ls != NULL);
    char name[512];
    int per[6] = {0}, ok[6] = {0}, must_ok = 0, must_n = 0;
    while (fgets(name, sizeof name, ls)) {
        name[strcspn(name, "\n")] = 0;
        nx_chat_template *t = open_tmpl(name);
        if (!t) continue;
        enum nx_tool_format f = nx_chat_template_tool_format(t);
        bool is_must = false;
        for (int k = 0; must[k]; k++) is_must |= !strcmp(must[k], name);
        must_n += is_must;
        char *turn = f != NX_TOOL_FORMAT_NONE ? assistant_turn(t, call) : NULL;
        bool good = false;
        char err[512] = "";
        if (turn) {
            per[f]++;
            nx_tool_calls *c = NULL;
            if (nx_tool_calls_parse(f, turn, strlen(turn), &c, err, sizeof err) == NX_STATUS_OK) {
                const struct nx_tool_call *tc = nx_tool_calls_get(c, 0);
                good = nx_tool_calls_count(c) == 1 && !strcmp(tc->name, "get_weather") && !strcmp(tc->arguments, want_args);
                if (!good) snprintf(err, sizeof err, "%d calls, first %s %s", nx_tool_calls_count(c), tc ? tc->name : "-", tc ? tc->arguments : "-");
            }
            nx_tool_calls_free(c);
        }
        if (good) ok[f]++;
        if (good && is_must) must_ok++;
        if (!good && turn && (f != NX_TOOL_FORMAT_GENERIC || getenv("NX_TEST_VERBOSE")))
            printf("  %-55s %-8s no round trip (%s)\n", name, nx_tool_format_name(f), err);
        if (is_must && !good) printf("  MUST %s did not round-trip\n", name);
        free(turn);
        nx_chat_template_free(t);
    }
    pclose(ls);
    for (int f = 1; f <= 5; f++)
        printf("  %-8s round trips: %d of %d templates that render a call\n", nx_tool_format_name((enum nx_tool_format)f), ok[f], per[f]);
    ASSERT_EQ(must_ok, must_n);
}

struct want_call { const char *name, *args, *id; };
static void check(enum nx_tool_format f, const char *text, const char *content, int n, const struct want_call *w) {
    nx_tool_calls *c = NULL;
    char err[512];
    nx_status st = nx_tool_calls_parse(f, text, strlen(text), &c, err, sizeof err);
    if (st) FAILF("%s: %.60s: %s", nx_tool_format_name(f), text, err);
    if (nx_tool_calls_count(c) != n) {
        int got = nx_tool_calls_count(c);
        nx_tool_calls_free(c);
        FAILF("%s: %.60s: %d calls, want %d", nx_tool_format_name(f), text, got, n);
    }
    for (int i = 0; i < n; i++) {
        const struct nx_tool_call *tc = nx_tool_calls_get(c, i);
        if (strcmp(tc->name, w[i].name) || strcmp(tc->arguments, w[i].args) || strcmp(tc->id, w[i].id ? w[i].id : "")) {
            printf("  call %d: %s %s [%s], want %s %s [%s]\n", i, tc->name, tc->arguments, tc->id, w[i].name, w[i].args,
                   w[i].id ? w[i].id : "");
            g_test_failed = 1;
        }
    }
    if (strcmp(nx_tool_calls_content(c), content)) {
        printf("  content [%s], want [%s]\n", nx_tool_calls_content(c), content);
        g_test_failed = 1;
    }
    nx_tool_calls_free(c);
}

TEST(families_parse) {
    struct want_call w1[] = {{"get_weather", "{\"location\":\"Oslo\"}", NULL}, {"search_docs", "{\"query\":\"kv\",\"n\":2}", NULL}};
    check(NX_TOOL_FORMAT_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"search_docs\", \"arguments\": \"{\\\"query\\\": \\\"kv\\\", \\\"n\\\": 2}\"}\n</tool_call>", "Let me check.", 2, w1);
    check(NX_TOOL_FORMAT_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}", "", 1, w1);
    struct want_call wx[] = {{"search_docs", "{\"query\":\"kv cache\",\"n\":2}", NULL}};
    check(NX_TOOL_FORMAT_HERMES, "<tool_call>\n<function=search_docs>\n<parameter=query>\nkv cache\n</parameter>\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>", "", 1, wx);
    check(NX_TOOL_FORMAT_HERMES, "Just an answer, no call.", "Just an answer, no call.", 0, NULL);
    struct want_call w2[] = {{"get_weather", "{\"location\":\"Oslo\"}", NULL}, {"search_docs", "{}", NULL}};
    check(NX_TOOL_FORMAT_LLAMA3, "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Oslo\"}}; {\"name\": \"search_docs\"}", "", 2, w2);
    check(NX_TOOL_FORMAT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Oslo\"}}", "", 1, w2);
    check(NX_TOOL_FORMAT_LLAMA3, "Calling it.\n{ \"name\": \"get_weather\", \"parameters\": {\"location\": \"Oslo\"}}\n", "Calling it.", 1, w2);
    check(NX_TOOL_FORMAT_LLAMA3, "<function=get_weather>{\"location\": \"Oslo\"}</function>", "", 1, w2);
    check(NX_TOOL_FORMAT_LLAMA3, "The answer is 4.", "The answer is 4.", 0, NULL);
    struct want_call w3[] = {{"get_weather", "{\"location\":\"Oslo\"}", "abc123XYZ"}, {"search_docs", "{\"query\":\"kv\"}", "def456UVW"}};
    check(NX_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}, \"id\": \"abc123XYZ\"}, "
          "{\"name\": \"search_docs\", \"arguments\": {\"query\": \"kv\"}, \"id\": \"def456UVW\"}]", "", 2, w3);
    check(NX_TOOL_FORMAT_MISTRAL, "Sure.[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]{\"location\": \"Oslo\"}[TOOL_CALLS]search_docs[CALL_ID]def456UVW[ARGS]{\"query\": \"kv\"}", "Sure.", 2, w3);
    struct want_call w4[] = {{"get_weather", "{\"location\":\"Oslo\"}", NULL}};
    check(NX_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Oslo\"}", "", 1, w4);
    check(NX_TOOL_FORMAT_GENERIC, "{\"tool_call\": {\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}}", "", 1, w4);
    check(NX_TOOL_FORMAT_GENERIC, "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}]}", "", 1, w4);
    check(NX_TOOL_FORMAT_GENERIC, "{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}", "", 1, w4);
    check(NX_TOOL_FORMAT_GENERIC, "{\"response\": \"Hello there\"}", "Hello there", 0, NULL);
    check(NX_TOOL_FORMAT_GENERIC, "plain text", "plain text", 0, NULL);
    struct want_call w5[] = {{"get_weather", "{\"location\":\"Oslo\"}", NULL}, {"search_docs", "{\"query\":\"kv\"}", NULL}};
    check(NX_TOOL_FORMAT_DEEPSEEK, "Ok.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"location\": \"Oslo\"}<｜tool▁call▁end｜>"
          "<｜tool▁call▁begin｜>search_docs<｜tool▁sep｜>{\"query\": \"kv\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>", "Ok.", 2, w5);
    check(NX_TOOL_FORMAT_DEEPSEEK, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"location\": \"Oslo\"}\n```<｜tool▁call▁end｜>", "", 1, w5);
    check(NX_TOOL_FORMAT_NONE, " anything <tool_call> ", "anything <tool_call>", 0, NULL);
}

TEST(malformed_outputs) {
    struct { enum nx_tool_format f; const char *text, *needle; } cases[] = {
        {NX_TOOL_FORMAT_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"loc", "truncated JSON"},
        {NX_TOOL_FORMAT_HERMES, "<tool_call>", "truncated"},
        {NX_TOOL_FORMAT_HERMES, "<tool_call>{\"arguments\": {}}</tool_call>", "no \"name\""},
        {NX_TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>", "not a JSON object"},
        {NX_TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": \"oops\"}</tool_call>", "string that is not a JSON object"},
        {NX_TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\"} trailing</tool_call>", "unexpected text"},
        {NX_TOOL_FORMAT_HERMES, "<tool_call><function=f><parameter=a>1</tool_call>", "truncated <parameter>"},
        {NX_TOOL_FORMAT_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {", "truncated JSON"},
        {NX_TOOL_FORMAT_LLAMA3, "{\"name\": 5}", "no \"name\""},
        {NX_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {}}", "truncated JSON"},
        {NX_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]get_weather", "no [ARGS]"},
        {NX_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]{\"x\": 1}", "no [ARGS]"},
        {NX_TOOL_FORMAT_MISTRAL, "[TOOL_CALLS]", "nothing after"},
        {NX_TOOL_FORMAT_GENERIC, "{\"foo\": 1}", "neither"},
        {NX_TOOL_FORMAT_DEEPSEEK, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather", "no tool separator"},
        {NX_TOOL_FORMAT_DEEPSEEK, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"a\": ", "truncated JSON"},
        {NX_TOOL_FORMAT_DEEPSEEK, "<｜tool▁calls▁begin｜>junk", "begin marker"},
        {NX_TOOL_FORMAT_GENERIC, "{\"tool_call\": {\"name\": \"f\", \"arguments\": {}", "truncated JSON"},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        nx_tool_calls *c = NULL;
        char err[512] = "";
        nx_status st = nx_tool_calls_parse(cases[i].f, cases[i].text, strlen(cases[i].text), &c, err, sizeof err);
        if (st != NX_STATUS_FORMAT || !strstr(err, cases[i].needle) || !strstr(err, "tool call at byte"))
            FAILF("case %zu (%s): status %d, message \"%s\" lacks \"%s\"", i, cases[i].text, st, err, cases[i].needle);
        ASSERT_TRUE(c == NULL);
    }
    nx_tool_calls *c = NULL;
    char err[128];
    ASSERT_EQ(nx_tool_calls_parse(NX_TOOL_FORMAT_HERMES, NULL, 0, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_EQ(nx_tool_calls_parse((enum nx_tool_format)99, "x", 1, &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    /* every prefix and random corruption of valid outputs: any status, no crash, no leak */
    const char *valid[] = {
        "a<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": [1, {\"y\": \"z\"}]}}\n</tool_call><tool_call><function=g><parameter=k>\nv\n</parameter></function></tool_call>",
        "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}; {\"name\": \"g\", \"parameters\": {}}",
        "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}, \"id\": \"abcdefghi\"}][TOOL_CALLS]g[CALL_ID]id1[ARGS]{\"y\": 2}",
        "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]}"};
    enum nx_tool_format fam[] = {NX_TOOL_FORMAT_HERMES, NX_TOOL_FORMAT_LLAMA3, NX_TOOL_FORMAT_MISTRAL, NX_TOOL_FORMAT_GENERIC};
    srand(11);
    for (int v = 0; v < 4; v++) {
        size_t n = strlen(valid[v]);
        for (int f = 0; f < 4; f++)
            for (size_t k = 0; k <= n; k++) {
                c = NULL;
                nx_status st = nx_tool_calls_parse(fam[f], valid[v], k, &c, err, sizeof err);
                if (f == v && k == n && st != NX_STATUS_OK) FAILF("valid output %d does not parse: %s", v, err);
                nx_tool_calls_free(c);
            }
        char buf[512];
        for (int r = 0; r < 300; r++) {
            memcpy(buf, valid[v], n + 1);
            for (int q = 0; q < 3; q++) buf[rand() % (int)n] = "{}[]\":,<>/ x"[rand() % 12];
            c = NULL;
            nx_tool_calls_parse(fam[v], buf, n, &c, err, sizeof err);
            nx_tool_calls_free(c);
        }
    }
}

TEST(detection_and_triggers) {
    struct { const char *name; enum nx_tool_format f; } cases[] = {
        {"Qwen-Qwen2.5-7B-Instruct.jinja", NX_TOOL_FORMAT_HERMES},
        {"meta-llama-Llama-3.1-8B-Instruct.jinja", NX_TOOL_FORMAT_LLAMA3},
        {"mistralai-Mistral-Nemo-Instruct-2407.jinja", NX_TOOL_FORMAT_MISTRAL},
        {"deepseek-ai-DeepSeek-V3.1.jinja", NX_TOOL_FORMAT_DEEPSEEK},
        {"openai-gpt-oss-120b.jinja", NX_TOOL_FORMAT_GENERIC},
        {"google-gemma-2-2b-it.jinja", NX_TOOL_FORMAT_NONE},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        nx_chat_template *t = open_tmpl(cases[i].name);
        ASSERT_TRUE(t != NULL);
        ASSERT_EQ(nx_chat_template_tool_format(t), cases[i].f);
        nx_chat_template_free(t);
    }
    ASSERT_STR_EQ(nx_tool_format_trigger(NX_TOOL_FORMAT_HERMES), "<tool_call>");
    ASSERT_STR_EQ(nx_tool_format_trigger(NX_TOOL_FORMAT_MISTRAL), "[TOOL_CALLS]");
    ASSERT_STR_EQ(nx_tool_format_trigger(NX_TOOL_FORMAT_LLAMA3), "{\"name\"");
    ASSERT_STR_EQ(nx_tool_format_name(NX_TOOL_FORMAT_GENERIC), "generic");
    ASSERT_STR_EQ(nx_tool_format_trigger(NX_TOOL_FORMAT_DEEPSEEK), "<｜tool▁calls▁begin｜>");
    nx_chat_template *t = NULL;
    char err[256];
    ASSERT_OK(nx_chat_template_open("chatml", &t, err, sizeof err));
    ASSERT_EQ(nx_chat_template_tool_format(t), NX_TOOL_FORMAT_HERMES);
    nx_chat_template_free(t);
    ASSERT_OK(nx_chat_template_open("mistral", &t, err, sizeof err));
    ASSERT_EQ(nx_chat_template_tool_format(t), NX_TOOL_FORMAT_MISTRAL);
    nx_chat_template_free(t);
}

TEST_MAIN
