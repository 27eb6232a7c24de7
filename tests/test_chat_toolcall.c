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

#include "core/alloc.h"
#include "core/nx_base.h"
#include "core/readfile.h"
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
    if (nx_chat_render(t, &p, &out, NULL, err, sizeof err)) {
        if (getenv("NX_TEST_DUMP")) printf("render: %s\n", err);
        return NULL;
    }
    return out;
}

/*
 * The assistant turn a template renders for one call (content: "" or null): render(user +
 * assistant) after its longest common prefix with render(user) (so it includes the assistant
 * header).
 */
static char *assistant_turn(nx_chat_template *t, const char *call_json, const char *content) {
    char user[] = "{\"role\":\"user\",\"content\":\"Weather in Oslo for 3 days?\"}";
    char a[4096], b[4096];
    snprintf(a, sizeof a, "[%s]", user);
    snprintf(b, sizeof b,
             "[%s,{\"role\":\"assistant\",\"content\":%s,\"tool_calls\":[{\"id\":\"abcDEF123\",\"type\":\"function\","
             "\"function\":%s}]}]",
             user, content, call_json);
    char *ra = render(t, a, false), *rb = render(t, b, false);
    if (getenv("NX_TEST_DUMP") && !rb) printf("render failed\n");
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

/* Templates that cannot round-trip, with the reason (the test checks each still fails). */
static const struct { const char *name, *why; } k_cannot[] = {
    {"LFM2-8B-A1B.jinja", "drops past assistant tool calls from the prompt"},
    {"LFM2.5-Instruct.jinja", "drops past assistant tool calls from the prompt"},
    {"ibm-granite-granite-3.3-2B-Instruct.jinja", "drops past assistant tool calls from the prompt"},
    /* these raise on an OpenAI-shaped call (dict or string arguments); jinja2 raises the same */
    {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", "raises on OpenAI-shaped tools: 'dict object' has no attribute 'description'"},
    {"Kimi-K2-Instruct.jinja", "raises: list.append is unsafe in the sandbox (jinja2 too)"},
    {"Kimi-K2-Thinking.jinja", "raises: list.append is unsafe in the sandbox (jinja2 too)"},
    {"fireworks-ai-llama-3-firefunction-v2.jinja", "raises: 'functions' is undefined (wants its own variable)"},
    {"llama-cpp-deepseek-r1.jinja", "raises: TypeError, generator is not JSON serializable (jinja2 too)"},
};

static const char *cannot_why(const char *name) {
    for (size_t k = 0; k < NX_ARRAY_LEN(k_cannot); k++)
        if (!strcmp(k_cannot[k].name, name)) return k_cannot[k].why;
    return NULL;
}

/* one template: "pass", or why not (into why) */
static bool round_trip_one(nx_chat_template *t, enum nx_tool_format f, char *why, size_t whylen) {
    const char *call = "{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Oslo\",\"days\":3}}";
    /* OpenAI's shape, arguments as a JSON string: some templates take only that */
    const char *call_str = "{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\": \\\"Oslo\\\", \\\"days\\\": 3}\"}";
    json_t *want = json_loads("{\"location\":\"Oslo\",\"days\":3}", 0, NULL);
    /* content "" first, then OpenAI's null (some templates render calls only with null content) */
    char *turn = NULL;
    for (int k = 0; k < 4 && !turn; k++) {
        turn = assistant_turn(t, k & 1 ? call_str : call, k & 2 ? "null" : "\"\"");
        if (turn && !strstr(turn, "get_weather")) { /* rendered, but without the call */
            if (k < 3) {
                free(turn);
                turn = NULL;
            }
        }
    }
    bool good = false;
    if (!turn) snprintf(why, whylen, "the template does not render the conversation");
    else {
        nx_tool_calls *c = NULL;
        char err[512];
        if (nx_tool_calls_parse(f, turn, strlen(turn), &c, err, sizeof err) != NX_STATUS_OK)
            snprintf(why, whylen, "parse error: %s", err);
        else {
            const struct nx_tool_call *tc = nx_tool_calls_get(c, 0);
            json_t *got = tc ? json_loads(tc->arguments, 0, NULL) : NULL;
            /* arguments compare as JSON objects: gemma4 renders its keys sorted */
            good = nx_tool_calls_count(c) == 1 && !strcmp(tc->name, "get_weather") && json_equal(got, want);
            if (!good)
                snprintf(why, whylen, "%d calls, first %s %s", nx_tool_calls_count(c), tc ? tc->name : "-",
                         tc ? tc->arguments : "-");
            json_decref(got);
        }
        nx_tool_calls_free(c);
    }
    if (getenv("NX_TEST_DUMP") && turn) printf("=====\n%s\n=====END\n", turn);
    free(turn);
    json_decref(want);
    return good;
}

/*
 * Every template of ../shared/data/chat-templates: detected family, and whether a call it
 * renders parses back to the same name and arguments. A template either round-trips or is in
 * k_cannot with its reason (and then must still fail: the list cannot go stale), or has no
 * tool calls at all. The table must equal the README's copy between its toolcall-roundtrip
 * markers (NX_REGEN=1 rewrites that section).
 */
TEST(round_trip_through_templates) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "ls %s/data/chat-templates/ | grep 'jinja$'", test_shared());
    FILE *ls = popen(cmd, "r");
    ASSERT_TRUE(ls != NULL);
    char name[512], table[32768];
    size_t tn = (size_t)snprintf(table, sizeof table,
                                 "| template | family | round trip | why not |\n|---|---|---|---|\n");
    int n_pass = 0, n_cannot = 0, n_none = 0, n_all = 0;
    while (fgets(name, sizeof name, ls)) {
        name[strcspn(name, "\n")] = 0;
        nx_chat_template *t = open_tmpl(name);
        ASSERT_TRUE(t != NULL);
        n_all++;
        enum nx_tool_format f = nx_chat_template_tool_format(t);
        char why[700] = "";
        bool good = f != NX_TOOL_FORMAT_NONE && round_trip_one(t, f, why, sizeof why);
        const char *known = cannot_why(name);
        const char *res = good ? "pass" : f == NX_TOOL_FORMAT_NONE ? "no tool calls" : "cannot";
        if (good) n_pass++;
        else if (f == NX_TOOL_FORMAT_NONE) n_none++;
        else n_cannot++;
        if ((good && known) || (!good && f != NX_TOOL_FORMAT_NONE && !known)) {
            printf("  %s (%s): %s\n", name, nx_tool_format_name(f), good ? "round-trips now: remove it from k_cannot" : why);
            g_test_failed = 1;
        }
        if (tn < sizeof table)
            tn += (size_t)snprintf(table + tn, sizeof table - tn, "| %s | %s | %s | %s |\n", name, nx_tool_format_name(f),
                                   res, good ? "" : known ? known : "the template has no tool-call markup");
        nx_chat_template_free(t);
    }
    pclose(ls);
    ASSERT_TRUE(tn < sizeof table);
    tn += (size_t)snprintf(table + tn, sizeof table - tn, "\n%d templates: %d round-trip, %d cannot, %d have no tool calls.\n",
                           n_all, n_pass, n_cannot, n_none);
    printf("  %d templates: %d round-trip, %d cannot, %d have no tool calls\n", n_all, n_pass, n_cannot, n_none);
    /* the README's copy, between its markers */
    const char *begin = "<!-- toolcall-roundtrip:begin -->\n", *end = "<!-- toolcall-roundtrip:end -->";
    size_t n = 0;
    char err[256];
    char *readme = nx_read_file("README.md", 8 << 20, &n, err, sizeof err);
    if (!readme) FAILF("README.md: %s", err);
    char *b = strstr(readme, begin), *e = b ? strstr(b, end) : NULL;
    if (!e) {
        nx_free(readme);
        FAILF("README.md has no %s ... %s section", begin, end);
    }
    b += strlen(begin);
    bool same = (size_t)(e - b) == strlen(table) && !memcmp(b, table, (size_t)(e - b));
    if (!same && getenv("NX_REGEN")) {
        FILE *fo = fopen("README.md.tmp", "w");
        ASSERT_TRUE(fo != NULL);
        fwrite(readme, 1, (size_t)(b - readme), fo);
        fputs(table, fo);
        fputs(e, fo);
        ASSERT_TRUE(fclose(fo) == 0);
        ASSERT_TRUE(rename("README.md.tmp", "README.md") == 0);
        same = true;
    }
    nx_free(readme);
    if (!same) FAILF("README.md's round-trip table differs from this run's (NX_REGEN=1 rewrites it)");
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
    /* reals keep the digits written (shortest text that reads back the same double) */
    check(NX_TOOL_FORMAT_HERMES, "<tool_call>{\"name\": \"f\", \"arguments\": {\"b\": 0.762327, \"c\": 0.1, \"d\": 1e300, "
          "\"e\": 0.30000000000000004}}</tool_call>", "", 1,
          (struct want_call[]){{"f", "{\"b\":0.762327,\"c\":0.1,\"d\":1e300,\"e\":0.30000000000000004}", NULL}});
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
    /* the later families: two calls each, text around them */
    check(NX_TOOL_FORMAT_TAGGED_JSON, "Ok.<tool_calls>[{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}, "
          "{\"name\": \"search_docs\", \"arguments\": {\"query\": \"kv\"}}]</tool_calls>", "Ok.", 2, w5);
    check(NX_TOOL_FORMAT_TAGGED_JSON, "<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}\n"
          "{\"name\": \"search_docs\", \"arguments\": {\"query\": \"kv\"}}\n</tool_calls>", "", 2, w5);
    check(NX_TOOL_FORMAT_TAGGED_JSON, "<|START_ACTION|>[{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": "
          "{\"location\": \"Oslo\"}}]<|END_ACTION|>", "", 1, (struct want_call[]){{"get_weather", "{\"location\":\"Oslo\"}", "0"}});
    check(NX_TOOL_FORMAT_TAGGED_JSON, "<|tools_prefix|>[{\"get_weather\": {\"location\": \"Oslo\"}}, {\"search_docs\": {\"query\": \"kv\"}}]<|tools_suffix|>", "", 2, w5);
    check(NX_TOOL_FORMAT_TAGGED_JSON, "<seed:tool_call>\n<function=get_weather>\n<parameter=location>Oslo</parameter>\n</function>\n</seed:tool_call>", "", 1, w5);
    check(NX_TOOL_FORMAT_XML_INVOKE, "Hm.<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"location\">Oslo</parameter>\n</invoke>\n"
          "<invoke name=\"search_docs\">\n<parameter name=\"query\">kv</parameter>\n</invoke>\n</minimax:tool_call>", "Hm.", 2, w5);
    /* DSML string="true" keeps "3" a string; string="false" decodes JSON */
    struct want_call w6[] = {{"get_weather", "{\"location\":\"3\",\"days\":[1,2]}", NULL}};
    check(NX_TOOL_FORMAT_XML_INVOKE, "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"location\" string=\"true\">3</｜DSML｜parameter>\n"
          "<｜DSML｜parameter name=\"days\" string=\"false\">[1,2]</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>", "", 1, w6);
    check(NX_TOOL_FORMAT_XML_INVOKE, "<function name=\"get_weather\"><param name=\"location\">Oslo</param></function>"
          "<function name=\"search_docs\"><param name=\"query\">kv</param></function>", "", 2, w5);
    struct want_call w7[] = {{"get_weather", "{\"location\":\"Oslo\"}", "functions.get_weather:0"}, {"search_docs", "{\"query\":\"kv\"}", "functions.search_docs:1"}};
    check(NX_TOOL_FORMAT_KIMI, "A<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"location\": \"Oslo\"}<|tool_call_end|>"
          "<|tool_call_begin|>functions.search_docs:1<|tool_call_argument_begin|>{\"query\": \"kv\"}<|tool_call_end|><|tool_calls_section_end|>", "A", 2, w7);
    struct want_call w8[] = {{"get_weather", "{\"location\":\"Oslo\"}", "id1"}, {"search_docs", "{\"query\":\"kv\"}", "id2"}};
    check(NX_TOOL_FORMAT_SOLAR, "<|tool_calls|><|tool_call:begin|>id1<|tool_call:name|>get_weather<|tool_call:args|>{\"location\": \"Oslo\"}<|tool_call:end|>"
          "<|tool_call:begin|>id2<|tool_call:name|>search_docs<|tool_call:args|>{\"query\": \"kv\"}<|tool_call:end|><|calls|>", "", 2, w8);
    check(NX_TOOL_FORMAT_HARMONY, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Oslo\"}<|call|>", "<|channel|>commentary", 1, w5);
    struct want_call w9[] = {{"get_weather", "{\"location\":\"Oslo, NO\",\"days\":3,\"opts\":{\"units\":[\"C\",true]}}", NULL}};
    check(NX_TOOL_FORMAT_GEMMA4, "<|tool_call>call:get_weather{location:<|\"|>Oslo, NO<|\"|>,days:3,opts:{units:[<|\"|>C<|\"|>,true]}}<tool_call|>", "", 1, w9);
    check(NX_TOOL_FORMAT_HY, "<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>\n<arg_key:opensource>location</arg_key:opensource>\n"
          "<arg_value:opensource>Oslo</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>", "", 1, w5);
    check(NX_TOOL_FORMAT_PYTHONIC, "<|tool_call_start|>[get_weather(location='Oslo, \\'NO\\'', days=3, opts={'u': [True, None, -1.5]}), search_docs(query=\"kv\")]<|tool_call_end|>",
          "", 2, (struct want_call[]){{"get_weather", "{\"location\":\"Oslo, 'NO'\",\"days\":3,\"opts\":{\"u\":[true,null,-1.5]}}", NULL}, {"search_docs", "{\"query\":\"kv\"}", NULL}});
    check(NX_TOOL_FORMAT_FUNCTIONARY, "get_weather\n{\"location\": \"Oslo\"}>>>search_docs\n{\"query\": \"kv\"}", "", 2, w5);
    check(NX_TOOL_FORMAT_FUNCTIONARY, "all\nLet me look.>>>get_weather\n{\"location\": \"Oslo\"}", "Let me look.", 1, w5);
    check(NX_TOOL_FORMAT_FUNCTIONARY, "The answer is 4.", "The answer is 4.", 0, NULL);
    /* MiniMax-M3: nested values as elements, <item> for list entries, booleans as JSON */
#define NS "]<]minimax[>["
    check(NX_TOOL_FORMAT_MINIMAX_M3, "Ok." NS "<tool_call>\n" NS "<invoke name=\"get_weather\">" NS "<location>Oslo, NO" NS "</location>"
          NS "<days>3" NS "</days>" NS "<opts>" NS "<units>" NS "<item>C" NS "</item>" NS "<item>true" NS "</item>" NS "</units>"
          NS "</opts>" NS "</invoke>\n" NS "<invoke name=\"search_docs\">" NS "<query>kv" NS "</query>" NS "</invoke>\n" NS "</tool_call>",
          "Ok.", 2, (struct want_call[]){{"get_weather", "{\"location\":\"Oslo, NO\",\"days\":3,\"opts\":{\"units\":[\"C\",true]}}", NULL},
                                         {"search_docs", "{\"query\":\"kv\"}", NULL}});
#undef NS
}

/* With the tools, raw-text values of string parameters stay text ("3" is not the number 3),
 * in every family that writes raw values; without them JSON-looking text decodes. */
TEST(typed_raw_values) {
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},"
                        "\"o\":{\"type\":\"object\",\"properties\":{\"t\":{\"type\":\"string\"}}}}}}}]";
    struct { enum nx_tool_format f; const char *text; } cases[] = {
        {NX_TOOL_FORMAT_HERMES, "<tool_call>\n<function=f>\n<parameter=s>\n3\n</parameter>\n<parameter=n>\n3\n</parameter>\n"
                                "<parameter=o>\n{\"t\":\"3\"}\n</parameter>\n</function>\n</tool_call>"},
        {NX_TOOL_FORMAT_HERMES, "<tool_call>f<arg_key>s</arg_key><arg_value>3</arg_value><arg_key>n</arg_key><arg_value>3</arg_value>"
                                "<arg_key>o</arg_key><arg_value>{\"t\":\"3\"}</arg_value></tool_call>"},
        {NX_TOOL_FORMAT_XML_INVOKE, "<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"s\">3</parameter>\n"
                                    "<parameter name=\"n\">3</parameter>\n<parameter name=\"o\">{\"t\":\"3\"}</parameter>\n</invoke>\n</minimax:tool_call>"},
        {NX_TOOL_FORMAT_HY, "<tool_call:opensource>f<tool_sep:opensource><arg_key:opensource>s</arg_key:opensource><arg_value:opensource>3"
                            "</arg_value:opensource><arg_key:opensource>n</arg_key:opensource><arg_value:opensource>3</arg_value:opensource>"
                            "<arg_key:opensource>o</arg_key:opensource><arg_value:opensource>{\"t\":\"3\"}</arg_value:opensource></tool_call:opensource>"},
        {NX_TOOL_FORMAT_MINIMAX_M3, "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"f\">]<]minimax[>[<s>3]<]minimax[>[</s>"
                                    "]<]minimax[>[<n>3]<]minimax[>[</n>]<]minimax[>[<o>]<]minimax[>[<t>3]<]minimax[>[</t>]<]minimax[>[</o>"
                                    "]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(cases); i++) {
        nx_tool_calls *c = NULL;
        char err[512];
        if (nx_tool_calls_parse_with_tools(cases[i].f, cases[i].text, strlen(cases[i].text), tools, &c, err, sizeof err))
            FAILF("case %zu: %s", i, err);
        ASSERT_EQ(nx_tool_calls_count(c), 1);
        if (strcmp(nx_tool_calls_get(c, 0)->arguments, "{\"s\":\"3\",\"n\":3,\"o\":{\"t\":\"3\"}}"))
            FAILF("case %zu: typed arguments %s", i, nx_tool_calls_get(c, 0)->arguments);
        nx_tool_calls_free(c);
        ASSERT_OK(nx_tool_calls_parse(cases[i].f, cases[i].text, strlen(cases[i].text), &c, err, sizeof err));
        if (!strstr(nx_tool_calls_get(c, 0)->arguments, "\"s\":3"))
            FAILF("case %zu: untyped arguments %s", i, nx_tool_calls_get(c, 0)->arguments);
        nx_tool_calls_free(c);
    }
    nx_tool_calls *c = NULL;
    char err[256];
    ASSERT_EQ(nx_tool_calls_parse_with_tools(NX_TOOL_FORMAT_HERMES, "x", 1, "{}", &c, err, sizeof err), NX_STATUS_INVALID_ARG);
    ASSERT_TRUE(strstr(err, "tools") != NULL);
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
        {NX_TOOL_FORMAT_TAGGED_JSON, "<tool_calls>[{\"name\": \"f\", \"arguments\": {", "truncated JSON"},
        {NX_TOOL_FORMAT_TAGGED_JSON, "<TOOLCALL>oops</TOOLCALL>", "unexpected text"},
        {NX_TOOL_FORMAT_TAGGED_JSON, "<tool_calls></tool_calls>", "no call"},
        {NX_TOOL_FORMAT_XML_INVOKE, "<minimax:tool_call><invoke name=\"f\"><parameter name=\"a\">1", "truncated parameter"},
        {NX_TOOL_FORMAT_XML_INVOKE, "<minimax:tool_call><invoke name=\"f\">", "truncated: no </invoke>"},
        {NX_TOOL_FORMAT_XML_INVOKE, "<minimax:tool_call>junk</minimax:tool_call>", "expected <invoke name="},
        {NX_TOOL_FORMAT_KIMI, "<|tool_call_begin|>functions.f:0", "truncated"},
        {NX_TOOL_FORMAT_KIMI, "<|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"a\": 1} x", "expected <|tool_call_end|>"},
        {NX_TOOL_FORMAT_SOLAR, "<|tool_call:begin|>id<|tool_call:name|>f<|tool_call:args|>{\"a\"", "truncated JSON"},
        {NX_TOOL_FORMAT_HARMONY, "to=functions.f<|channel|>commentary", "truncated"},
        {NX_TOOL_FORMAT_GEMMA4, "<|tool_call>call:f{a:<|\"|>x}", "truncated string"},
        {NX_TOOL_FORMAT_GEMMA4, "<|tool_call>call:f{a:1", "truncated arguments"},
        {NX_TOOL_FORMAT_GEMMA4, "<|tool_call>f{}", "expected call:"},
        {NX_TOOL_FORMAT_HY, "<tool_call:opensource>f<arg_key:opensource>a</arg_key:opensource>", "truncated"},
        {NX_TOOL_FORMAT_PYTHONIC, "<|tool_call_start|>[f(a='x)]", "truncated string"},
        {NX_TOOL_FORMAT_PYTHONIC, "<|tool_call_start|>[f(a=undefined_name)]", "Python literal"},
        {NX_TOOL_FORMAT_PYTHONIC, "<|tool_call_start|>[f a]", "expected '('"},
        {NX_TOOL_FORMAT_FUNCTIONARY, "f\n{\"a\": ", "truncated JSON"},
        {NX_TOOL_FORMAT_MINIMAX_M3, "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"f\">]<]minimax[>[<a>1", "truncated value"},
        {NX_TOOL_FORMAT_MINIMAX_M3, "]<]minimax[>[<tool_call>]<]minimax[>[<invoke name=\"f\">]<]minimax[>[<a>1]<]minimax[>[</b>", "closing tag of <a>"},
        {NX_TOOL_FORMAT_MINIMAX_M3, "]<]minimax[>[<tool_call>]<]minimax[>[<invoke name=\"f\">", "truncated: no"},
        {NX_TOOL_FORMAT_MINIMAX_M3, "]<]minimax[>[<tool_call>junk", "expected ]<]minimax[>[<invoke"},
        {NX_TOOL_FORMAT_MINIMAX_M3, "]<]minimax[>[<tool_call>]<]minimax[>[</tool_call>", "no call"},
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
        "{\"tool_calls\": [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]}",
        "<tool_calls>[{\"name\": \"f\", \"arguments\": {\"x\": 1}}]</tool_calls><|START_ACTION|>[{\"tool_name\": \"g\", \"parameters\": {}}]<|END_ACTION|>",
        "<｜DSML｜tool_calls><｜DSML｜invoke name=\"f\"><｜DSML｜parameter name=\"k\" string=\"false\">[1]</｜DSML｜parameter></｜DSML｜invoke></｜DSML｜tool_calls>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{\"x\": [1]}<|tool_call_end|><|tool_calls_section_end|>",
        "<|tool_call:begin|>i<|tool_call:name|>f<|tool_call:args|>{\"x\": 1}<|tool_call:end|>",
        "to=functions.f<|channel|>commentary json<|message|>{\"x\": {\"y\": 1}}<|call|>",
        "<|tool_call>call:f{a:<|\"|>x<|\"|>,b:[1,{c:2}]}<tool_call|>",
        "<tool_call:opensource>f<tool_sep:opensource><arg_key:opensource>a</arg_key:opensource><arg_value:opensource>1</arg_value:opensource></tool_call:opensource>",
        "<|tool_call_start|>[f(a='x', b=[1, {'c': 2}]), g()]<|tool_call_end|>",
        ">>>f\n{\"x\": 1}>>>all\nhi",
        "]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name=\"f\">]<]minimax[>[<a>x]<]minimax[>[</a>]<]minimax[>[<b>]<]minimax[>[<item>1"
        "]<]minimax[>[</item>]<]minimax[>[</b>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"};
    enum nx_tool_format fam[] = {NX_TOOL_FORMAT_HERMES, NX_TOOL_FORMAT_LLAMA3, NX_TOOL_FORMAT_MISTRAL, NX_TOOL_FORMAT_GENERIC,
                                 NX_TOOL_FORMAT_TAGGED_JSON, NX_TOOL_FORMAT_XML_INVOKE, NX_TOOL_FORMAT_KIMI, NX_TOOL_FORMAT_SOLAR,
                                 NX_TOOL_FORMAT_HARMONY, NX_TOOL_FORMAT_GEMMA4, NX_TOOL_FORMAT_HY, NX_TOOL_FORMAT_PYTHONIC,
                                 NX_TOOL_FORMAT_FUNCTIONARY, NX_TOOL_FORMAT_MINIMAX_M3};
    int nv = (int)NX_ARRAY_LEN(valid);
    ASSERT_EQ(nv, (int)NX_ARRAY_LEN(fam));
    srand(11);
    for (int v = 0; v < nv; v++) {
        size_t n = strlen(valid[v]);
        for (int f = 0; f < nv; f++)
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
        {"openai-gpt-oss-120b.jinja", NX_TOOL_FORMAT_HARMONY},
        {"deepseek-ai-DeepSeek-V3.2.jinja", NX_TOOL_FORMAT_XML_INVOKE},
        {"MiniMax-M2.jinja", NX_TOOL_FORMAT_XML_INVOKE},
        {"Kimi-K3.jinja", NX_TOOL_FORMAT_XML_INVOKE},
        {"moonshotai-Kimi-K2.jinja", NX_TOOL_FORMAT_KIMI},
        {"unsloth-Apriel-1.5.jinja", NX_TOOL_FORMAT_TAGGED_JSON},
        {"Cohere2MoE.jinja", NX_TOOL_FORMAT_TAGGED_JSON},
        {"upstage-Solar-Open-100B.jinja", NX_TOOL_FORMAT_SOLAR},
        {"google-gemma-4-31B-it.jinja", NX_TOOL_FORMAT_GEMMA4},
        {"tencent-Hy3.jinja", NX_TOOL_FORMAT_HY},
        {"LFM2.5-8B-A1B.jinja", NX_TOOL_FORMAT_PYTHONIC},
        {"MiniMax-M3.jinja", NX_TOOL_FORMAT_MINIMAX_M3},
        {"GLM-4.6.jinja", NX_TOOL_FORMAT_HERMES},
        {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", NX_TOOL_FORMAT_GENERIC},
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
    ASSERT_OK(nx_chat_template_open("llama3", &t, err, sizeof err));
    ASSERT_EQ(nx_chat_template_tool_format(t), NX_TOOL_FORMAT_LLAMA3);
    nx_chat_template_free(t);
    ASSERT_OK(nx_chat_template_open("mistral", &t, err, sizeof err));
    ASSERT_EQ(nx_chat_template_tool_format(t), NX_TOOL_FORMAT_MISTRAL);
    nx_chat_template_free(t);
}

TEST_MAIN
