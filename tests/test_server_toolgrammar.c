/*
 * test_server_toolgrammar.c - the tool-call grammars of the families of chat/callshape.h
 * (server/constrain.c): for every family and form, in auto (trigger, then the grammar),
 * required (the opening in the prefill) and named (the call up to its arguments in the prefill)
 * modes, random constrained generations over stories260K's vocabulary (each step a uniformly
 * random allowed token: a random-weight model) must parse back through the family's parser
 * (nx_tool_calls_parse_with_tools) into one call of an offered tool whose arguments pass
 * agent/argcheck and, in a script, Python's jsonschema against the full schema. The schemas
 * hold enums, bounded strings and integers, nested objects, arrays, anyOf, a $ref, a date and
 * a tool without parameters; raw-text string parameters are given digits-only enums and lengths so a
 * parser that decoded them as JSON would fail.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/argcheck.h"
#include "chat/callshape.h"
#include "core/alloc.h"
#include "core/nx_base.h"
#include "nexus.h"
#include "server/constrain.h"
#include "support/tmpdir.h"
#include "test.h"

#define MODEL "../shared/models/stories260K/stories260K.gguf"

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"location\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":12},"
    "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":14},\"units\":{\"type\":\"string\",\"enum\":[\"c\",\"f\",\"12\"]}},"
    "\"required\":[\"location\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"book_trip\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"dest\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},"
    "\"nights\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":30}},\"required\":[\"city\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"a\",\"b\"]},\"maxItems\":3},"
    "\"flex\":{\"type\":\"boolean\"},\"budget\":{\"type\":\"number\",\"minimum\":0,\"maximum\":5000}},"
    "\"required\":[\"dest\",\"flex\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"set_mode\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"mode\":{\"type\":\"string\",\"enum\":[\"fast\",\"eco mode\",\"7\"]},"
    "\"level\":{\"anyOf\":[{\"type\":\"integer\",\"minimum\":0,\"maximum\":9},{\"type\":\"null\"}]},"
    "\"when\":{\"type\":\"string\",\"format\":\"date\"},\"code\":{\"type\":\"string\",\"minLength\":2,\"maxLength\":4},"
    "\"ref\":{\"$ref\":\"#/$defs/pt\"}},\"required\":[\"mode\",\"code\"],"
    "\"$defs\":{\"pt\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":5}},"
    "\"required\":[\"x\"]}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}}]";

/* every form of every family that has a shape */
static const struct { enum nx_tool_format f; const char *form; } k_forms[] = {
    {NX_TOOL_FORMAT_TAGGED_JSON, "<tool_calls>"},        {NX_TOOL_FORMAT_TAGGED_JSON, "<TOOLCALL>"},
    {NX_TOOL_FORMAT_TAGGED_JSON, "<seed:tool_call>"},    {NX_TOOL_FORMAT_TAGGED_JSON, "<|START_ACTION|>"},
    {NX_TOOL_FORMAT_TAGGED_JSON, "<|function_call|>"},   {NX_TOOL_FORMAT_TAGGED_JSON, "function call<|role_sep|>"},
    {NX_TOOL_FORMAT_TAGGED_JSON, "<|tools_prefix|>"},    {NX_TOOL_FORMAT_XML_INVOKE, "<minimax:tool_call>"},
    {NX_TOOL_FORMAT_XML_INVOKE, "<｜DSML｜function_calls>"}, {NX_TOOL_FORMAT_XML_INVOKE, "<｜DSML｜tool_calls>"},
    {NX_TOOL_FORMAT_XML_INVOKE, "<atem:function_calls>"}, {NX_TOOL_FORMAT_XML_INVOKE, "<|open|>tools<|sep|>"},
    {NX_TOOL_FORMAT_XML_INVOKE, "<function name=\""},    {NX_TOOL_FORMAT_KIMI, NULL},
    {NX_TOOL_FORMAT_SOLAR, NULL},                        {NX_TOOL_FORMAT_HARMONY, NULL},
    {NX_TOOL_FORMAT_HY, NULL},                           {NX_TOOL_FORMAT_FUNCTIONARY, NULL},
    {NX_TOOL_FORMAT_MINIMAX_M3, NULL},                   {NX_TOOL_FORMAT_GEMMA4, NULL},
    {NX_TOOL_FORMAT_PYTHONIC, NULL},
    {NX_TOOL_FORMAT_HERMES, "<tool_call>\n<function="}, {NX_TOOL_FORMAT_HERMES, "<tool_call>"},
};

static nx_model *g_model;
static nx_grammar_vocab *g_gv;

static void setup(void) {
    if (g_model) return;
    char err[256];
    if (nx_model_load(MODEL, NULL, &g_model, err, sizeof err)) {
        fprintf(stderr, "cannot load %s: %s\n", MODEL, err);
        exit(1);
    }
    if (nx_grammar_vocab_init(g_model, &g_gv)) exit(1);
}

static uint64_t xs(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

/* one generation under g: uniformly random allowed tokens, closed within the budget; the text
   into out (NUL-ended). False when the matcher did not finish. */
static bool generate(const nx_grammar *g, uint64_t *rng, char *out, size_t cap) {
    int32_t n = nx_model_n_vocab(g_model), nw = (n + 63) / 64;
    uint64_t *bits = malloc(sizeof *bits * (size_t)nw);
    int32_t *allowed = malloc(sizeof *allowed * (size_t)n);
    nx_grammar_matcher *m = NULL;
    size_t tn = 0;
    bool ok = bits && allowed && nx_grammar_matcher_init(g, g_gv, &m) == NX_STATUS_OK;
    const int budget = 400;
    for (int step = 0; ok && step < budget; step++) {
        int64_t need = nx_grammar_matcher_completion_bytes(m);
        bool force = need >= 0 && budget - step <= need + 1;
        int32_t k = nx_grammar_matcher_mask(m, bits, force), na = 0;
        if (k <= 0) break;
        for (int32_t w = 0; w < nw; w++)
            for (uint64_t b = bits[w]; b; b &= b - 1) allowed[na++] = w * 64 + __builtin_ctzll(b);
        nx_token t = allowed[xs(rng) % (uint64_t)na];
        if (nx_token_is_eog(g_model, t)) break;
        if (nx_grammar_matcher_accept(m, t) != NX_STATUS_OK) {
            ok = false;
            break;
        }
        /* as the sampler does: a free token that leaves more to close than the budget allows
           is undone and replaced by one that begins the shortest completion */
        int64_t after = nx_grammar_matcher_completion_bytes(m);
        if (!force && after >= 0 && after + 1 > budget - step - 1) {
            nx_grammar_matcher_rollback(m, 1);
            k = nx_grammar_matcher_mask(m, bits, true);
            na = 0;
            for (int32_t w = 0; w < nw; w++)
                for (uint64_t b = bits[w]; b; b &= b - 1) allowed[na++] = w * 64 + __builtin_ctzll(b);
            if (k <= 0 || na == 0) break;
            t = allowed[xs(rng) % (uint64_t)na];
            if (nx_token_is_eog(g_model, t)) break;
            if (nx_grammar_matcher_accept(m, t) != NX_STATUS_OK) {
                ok = false;
                break;
            }
        }
        char piece[256];
        int32_t pn = nx_token_to_piece(g_model, t, piece, sizeof piece, false);
        if (pn > 0 && tn + (size_t)pn < cap) {
            memcpy(out + tn, piece, (size_t)pn);
            tn += (size_t)pn;
        }
    }
    out[tn] = 0;
    ok = ok && nx_grammar_matcher_can_end(m);
    nx_grammar_matcher_free(m);
    free(bits);
    free(allowed);
    return ok;
}

static json_t *params_of(json_t *tools, const char *name) {
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), name)) return json_object_get(fn, "parameters");
    }
    return NULL;
}

TEST(every_family_generates_calls_that_parse_and_validate) {
    setup();
    json_t *tools = json_loads(k_tools, 0, NULL);
    ASSERT_TRUE(tools != NULL);
    char out_path[512];
    test_tmp_path("toolgrammar.jsonl", out_path, sizeof out_path);
    FILE *out = fopen(out_path, "w");
    ASSERT_TRUE(out != NULL);
    const char *names[] = {"get_weather", "book_trip", "set_mode", "ping"};
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    int n_calls = 0, n_forms = 0;
    bool seen_tool[4] = {false};
    for (size_t fi = 0; fi < NX_ARRAY_LEN(k_forms); fi++) {
        const struct chat_call_shape *sh = chat_call_shape(k_forms[fi].f, k_forms[fi].form);
        ASSERT_TRUE(sh != NULL);
        if (k_forms[fi].form) ASSERT_STR_EQ(sh->open, k_forms[fi].form);
        n_forms++;
        /* modes: auto, required, then named for each tool */
        for (int mi = 0; mi < 2 + 4; mi++) {
            enum srv_tool_mode mode = mi == 0 ? SRV_TOOLS_AUTO : mi == 1 ? SRV_TOOLS_REQUIRED : SRV_TOOLS_NAMED;
            const char *named = mode == SRV_TOOLS_NAMED ? names[mi - 2] : NULL;
            struct srv_constraint c;
            char err[600];
            nx_status st = srv_constraint_build(k_forms[fi].f, k_forms[fi].form, tools, mode, named, NULL, &c, err, sizeof err);
            if (st) FAILF("%s %s mode %d: %s", nx_tool_format_name(k_forms[fi].f), sh->open, mi, err);
            ASSERT_TRUE(c.grammar != NULL && c.tools && c.format == k_forms[fi].f && c.tools_json != NULL);
            if (mode == SRV_TOOLS_AUTO) ASSERT_TRUE(sh->open_in_prompt ? c.trigger == NULL : !strcmp(c.trigger, sh->open));
            for (int seed = 0; seed < 3; seed++) {
                char gen[8192], text[9000];
                if (!generate(c.grammar, &rng, gen, sizeof gen))
                    FAILF("%s %s mode %d: the generation did not finish: %s", nx_tool_format_name(k_forms[fi].f), sh->open, mi, gen);
                /* auto: free text, then the trigger (the sampler's lazy mode), then the grammar */
                snprintf(text, sizeof text, "%s%s%s", mode == SRV_TOOLS_AUTO && !sh->open_in_prompt ? "Let me see. " : "",
                         mode == SRV_TOOLS_AUTO && c.trigger ? c.trigger : c.prefill, gen);
                nx_tool_calls *calls = NULL;
                st = nx_tool_calls_parse_with_tools(c.format, text, strlen(text), c.tools_json, &calls, err, sizeof err);
                if (st == NX_STATUS_OK && sh->open_in_prompt && mode == SRV_TOOLS_AUTO && nx_tool_calls_count(calls) == 0) {
                    nx_tool_calls_free(calls); /* functionary's "all\n" answer: text, no call */
                    continue;
                }
                if (st || nx_tool_calls_count(calls) != 1) {
                    nx_tool_calls_free(calls);
                    FAILF("%s %s mode %d: [%s] does not parse to one call: %s", nx_tool_format_name(k_forms[fi].f), sh->open,
                          mi, text, st ? err : "count");
                }
                const struct nx_tool_call *tc = nx_tool_calls_get(calls, 0);
                json_t *ps = params_of(tools, tc->name);
                if (!ps || (named && strcmp(tc->name, named))) {
                    nx_tool_calls_free(calls);
                    FAILF("%s: [%s]: tool %s not offered", nx_tool_format_name(k_forms[fi].f), text, tc->name);
                }
                for (int q = 0; q < 4; q++) seen_tool[q] = seen_tool[q] || !strcmp(tc->name, names[q]);
                char why[300];
                if (!ag_args_check(ps, tc->arguments, why, sizeof why)) {
                    printf("  %s %s: [%s] -> %s: %s\n", nx_tool_format_name(k_forms[fi].f), sh->open, text, tc->arguments, why);
                    g_test_failed = 1;
                }
                json_t *args = json_loads(tc->arguments, 0, NULL);
                json_t *rec = json_pack("{s:s,s:s,s:O,s:s,s:s}", "family", nx_tool_format_name(k_forms[fi].f), "form", sh->open,
                                        "schema", ps, "output", tc->arguments, "text", text);
                char *line = rec ? json_dumps(rec, JSON_COMPACT) : NULL;
                if (line) fprintf(out, "%s\n", line);
                if (line && getenv("NX_TEST_DUMP")) printf("%s\n", line);
                nx_free(line);
                json_decref(rec);
                json_decref(args);
                nx_tool_calls_free(calls);
                n_calls++;
            }
            srv_constraint_free(&c);
        }
    }
    fclose(out);
    printf("  %d forms, %d calls parsed and checked\n", n_forms, n_calls);
    for (int q = 0; q < 4; q++) ASSERT_TRUE(seen_tool[q]);
    ASSERT_TRUE(n_calls >= (int)NX_ARRAY_LEN(k_forms) * 15);
    json_decref(tools);
    if (system("python3 -c 'import jsonschema' >/dev/null 2>&1") != 0) {
        printf("  SKIP the jsonschema check (python3-jsonschema missing)\n");
        return;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "python3 scripts/check_grammar_outputs.py %s", out_path);
    ASSERT_EQ(system(cmd), 0);
}

/* What a family's form cannot write is refused with the family named: a top-level anyOf in
 * the parameters, a parameter name that is not a plain word, a raw enum value holding the stop
 * byte; in gemma4's and Python's syntaxes, enum strings they cannot quote. */
TEST(refusals_name_the_family) {
    const char *bad[] = {
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"anyOf\":[{\"type\":\"object\"}]}}}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"a b\":{\"type\":\"integer\"}}}}}]",
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"a\":{\"type\":\"string\",\"enum\":[\"x<y\"]}}}}}]",
    };
    for (size_t k = 0; k < NX_ARRAY_LEN(bad); k++) {
        json_t *tools = json_loads(bad[k], 0, NULL);
        struct srv_constraint c;
        char err[600];
        ASSERT_EQ(srv_constraint_build(NX_TOOL_FORMAT_XML_INVOKE, NULL, tools, SRV_TOOLS_REQUIRED, NULL, NULL, &c, err, sizeof err),
                  NX_STATUS_UNSUPPORTED);
        ASSERT_TRUE(strstr(err, "xml-invoke") != NULL && strstr(err, "tools[0] (f)") != NULL);
        ASSERT_TRUE(c.grammar == NULL);
        /* the JSON families take the same tools */
        ASSERT_OK(srv_constraint_build(NX_TOOL_FORMAT_KIMI, NULL, tools, SRV_TOOLS_REQUIRED, NULL, NULL, &c, err, sizeof err));
        srv_constraint_free(&c);
        json_decref(tools);
    }
    struct { enum nx_tool_format f; const char *tools, *needle; } dia[] = {
        {NX_TOOL_FORMAT_GEMMA4, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                                "\"properties\":{\"a\":{\"enum\":[\"x<y\"]}}}}}]", "gemma4"},
        {NX_TOOL_FORMAT_GEMMA4, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                                "\"properties\":{\"a b\":{\"type\":\"integer\"}}}}}]", "property name 'a b'"},
        {NX_TOOL_FORMAT_PYTHONIC, "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
                                  "\"properties\":{\"a\":{\"type\":\"string\",\"enum\":[\"it's\"]}}}}}]", "python"},
    };
    for (size_t k = 0; k < NX_ARRAY_LEN(dia); k++) {
        json_t *tools = json_loads(dia[k].tools, 0, NULL);
        struct srv_constraint c;
        char err[600];
        ASSERT_EQ(srv_constraint_build(dia[k].f, NULL, tools, SRV_TOOLS_AUTO, NULL, NULL, &c, err, sizeof err), NX_STATUS_UNSUPPORTED);
        if (!strstr(err, dia[k].needle) || !strstr(err, "tools[0] (f)")) FAILF("case %zu: %s", k, err);
        json_decref(tools);
    }
}

/* A JSON value inside an XML element never holds '<' in its strings (so never the element's
 * closing tag); raw string values neither. */
TEST(values_inside_elements_hold_no_closing_tag) {
    setup();
    json_t *tools = json_loads(k_tools, 0, NULL);
    struct srv_constraint c;
    char err[600];
    ASSERT_OK(srv_constraint_build(NX_TOOL_FORMAT_XML_INVOKE, "<minimax:tool_call>", tools, SRV_TOOLS_NAMED, "book_trip", NULL,
                                   &c, err, sizeof err));
    nx_grammar_matcher *m = NULL;
    ASSERT_OK(nx_grammar_matcher_init(c.grammar, g_gv, &m));
    const char *good = "\n<parameter name=\"dest\">{\"city\":\"a\\/b\"}</parameter>\n<parameter name=\"flex\">true</parameter>"
                       "\n</invoke>\n</minimax:tool_call>";
    ASSERT_OK(nx_grammar_matcher_accept_text(m, good, strlen(good)));
    ASSERT_TRUE(nx_grammar_matcher_can_end(m));
    nx_grammar_matcher_reset(m);
    const char *bad = "\n<parameter name=\"dest\">{\"city\":\"</parameter>";
    ASSERT_TRUE(nx_grammar_matcher_accept_text(m, bad, strlen(bad)) != NX_STATUS_OK);
    nx_grammar_matcher_free(m);
    srv_constraint_free(&c);
    ASSERT_OK(srv_constraint_build(NX_TOOL_FORMAT_XML_INVOKE, "<minimax:tool_call>", tools, SRV_TOOLS_NAMED, "get_weather", NULL,
                                   &c, err, sizeof err));
    ASSERT_OK(nx_grammar_matcher_init(c.grammar, g_gv, &m));
    const char *raw = "\n<parameter name=\"location\">a<b";
    ASSERT_TRUE(nx_grammar_matcher_accept_text(m, raw, strlen(raw)) != NX_STATUS_OK);
    nx_grammar_matcher_free(m);
    srv_constraint_free(&c);
    ASSERT_OK(srv_constraint_build(NX_TOOL_FORMAT_PYTHONIC, NULL, tools, SRV_TOOLS_NAMED, "get_weather", NULL, &c, err, sizeof err));
    ASSERT_OK(nx_grammar_matcher_init(c.grammar, g_gv, &m));
    const char *py = "location='x<";
    ASSERT_TRUE(nx_grammar_matcher_accept_text(m, py, strlen(py)) != NX_STATUS_OK);
    nx_grammar_matcher_reset(m);
    py = "location='x y',)]<|tool_call_end|>";
    ASSERT_OK(nx_grammar_matcher_accept_text(m, py, strlen(py)));
    ASSERT_TRUE(nx_grammar_matcher_can_end(m));
    nx_grammar_matcher_free(m);
    srv_constraint_free(&c);
    json_decref(tools);
}

/* Each real template of a shaped family is found writing one of its family's forms. */
TEST(template_forms_detected) {
    struct { const char *file, *form; } cases[] = {
        {"MiniMax-M2.jinja", "<minimax:tool_call>"},
        {"deepseek-ai-DeepSeek-V3.2.jinja", "<｜DSML｜function_calls>"},
        {"muse-glimmer.jinja", "<atem:function_calls>"},
        {"Kimi-K3.jinja", "<|open|>tools<|sep|>"},
        {"openbmb-MiniCPM5-1B.jinja", "<function name=\""},
        {"MiniMax-M1.jinja", "<tool_calls>"},
        {"NVIDIA-Nemotron-Nano-v2.jinja", "<TOOLCALL>"},
        {"Cohere2MoE.jinja", "<|START_ACTION|>"},
        {"Apertus-8B-Instruct.jinja", "<|tools_prefix|>"},
        {"ByteDance-Seed-OSS.jinja", "<seed:tool_call>"},
        {"moonshotai-Kimi-K2.jinja", "<|tool_calls_section_begin|>"},
        {"upstage-Solar-Open-100B.jinja", "<|tool_call:begin|>"},
        {"openai-gpt-oss-120b.jinja", "to=functions."},
        {"tencent-Hy3.jinja", "<tool_call:opensource>"},
        {"meetkai-functionary-medium-v3.2.jinja", ">>>"},
        {"MiniMax-M3.jinja", "]<]minimax[>[<tool_call>"},
        {"google-gemma-4-31B-it.jinja", "<|tool_call>"},
        {"LFM2.5-8B-A1B.jinja", "<|tool_call_start|>"},
        /* hermes: XML inside <tool_call> has its forms; JSON inside it none (constrain.c's) */
        {"Qwen3-Coder.jinja", "<tool_call>\n<function="},
        {"GLM-4.6.jinja", "<tool_call>"},
        {"GLM-4.7-Flash.jinja", "<tool_call>"},
        {"Qwen-Qwen2.5-7B-Instruct.jinja", NULL},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", NULL},
    };
    for (size_t k = 0; k < NX_ARRAY_LEN(cases); k++) {
        char path[1024], err[512];
        snprintf(path, sizeof path, "%s/data/chat-templates/%s", test_shared(), cases[k].file);
        nx_chat_template *t = NULL;
        ASSERT_OK(nx_chat_template_open(path, &t, err, sizeof err));
        const char *form = chat_template_call_form(t);
        if (cases[k].form ? !form || strcmp(form, cases[k].form) : form != NULL) {
            printf("  %s: form %s, want %s\n", cases[k].file, form ? form : "(none)",
                   cases[k].form ? cases[k].form : "(none)");
            g_test_failed = 1;
        }
        nx_chat_template_free(t);
    }
}

TEST(zz_free_model) {
    nx_grammar_vocab_free(g_gv);
    nx_model_free(g_model);
    g_gv = NULL;
    g_model = NULL;
}

TEST_MAIN
