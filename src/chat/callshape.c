/*
 * callshape.c - each family's call shapes (callshape.h), written after the forms its parser
 * reads (toolcall.c) and its templates render (../shared/data/chat-templates), and the form a
 * template uses, found by rendering one call with it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/callshape.h"
#include "core/alloc.h"

#define TJ(o, c) \
    {.family = NX_TOOL_FORMAT_TAGGED_JSON, .open = o, .name_pre = "{\"name\":", .name_post = ",\"arguments\":", \
     .json_name = true, .close = "}" c}
/* xml-invoke: WRAP\n CALL"NAME"HEAD (\nPARAM"KEY"PHEAD VALUE PCLOSE)* \nCCLOSE\nWRAPCLOSE */
#define XI(w, wc, call, head, param, phead, pclose, cclose) \
    {.family = NX_TOOL_FORMAT_XML_INVOKE, .open = w, .name_pre = "\n" call, .name_post = "\"" head, .params = true, \
     .param_pre = "\n" param, .param_mid = "\"" phead, .param_post = pclose, .raw_stop = "<", \
     .close = "\n" cclose "\n" wc}
#define DSML(w, wc) \
    {.family = NX_TOOL_FORMAT_XML_INVOKE, .open = w, .name_pre = "\n<｜DSML｜invoke name=\"", .name_post = "\">", \
     .params = true, .param_pre = "\n<｜DSML｜parameter name=\"", .param_mid = "\" string=\"false\">", \
     .param_mid_str = "\" string=\"true\">", .param_post = "</｜DSML｜parameter>", .raw_stop = "<", \
     .close = "\n</｜DSML｜invoke>\n" wc}
#define MM3 "]<]minimax[>["

static const struct chat_call_shape SHAPES[] = {
    TJ("<tool_calls>", "</tool_calls>"),
    TJ("<TOOLCALL>", "</TOOLCALL>"),
    TJ("<seed:tool_call>", "</seed:tool_call>"),
    TJ("<|START_ACTION|>", "<|END_ACTION|>"),
    TJ("<|function_call|>", "<|message_sep|>"),
    TJ("function call<|role_sep|>", "<|message_sep|>"),
    TJ("<|tools_prefix|>", "<|tools_suffix|>"),
    XI("<minimax:tool_call>", "</minimax:tool_call>", "<invoke name=\"", ">", "<parameter name=\"", ">", "</parameter>",
       "</invoke>"),
    DSML("<｜DSML｜function_calls>", "</｜DSML｜function_calls>"),
    DSML("<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>"),
    XI("<atem:function_calls>", "</atem:function_calls>", "<atem:invoke name=\"", ">", "<atem:parameter name=\"", ">",
       "</atem:parameter>", "</atem:invoke>"),
    XI("<|open|>tools<|sep|>", "<|close|>tools<|sep|>", "<|open|>call tool=\"", "<|sep|>", "<|open|>argument key=\"",
       "<|sep|>", "<|close|>argument<|sep|>", "<|close|>call<|sep|>"),
    /* MiniCPM: no wrapper, the call's own tag opens it */
    {.family = NX_TOOL_FORMAT_XML_INVOKE, .open = "<function name=\"", .name_pre = "", .name_post = "\">", .params = true,
     .param_pre = "<param name=\"", .param_mid = "\">", .param_post = "</param>", .raw_stop = "<", .close = "</function>"},
    {.family = NX_TOOL_FORMAT_KIMI, .open = "<|tool_calls_section_begin|>", .name_pre = "<|tool_call_begin|>functions.",
     .name_post = ":0<|tool_call_argument_begin|>", .close = "<|tool_call_end|><|tool_calls_section_end|>"},
    {.family = NX_TOOL_FORMAT_SOLAR, .open = "<|tool_call:begin|>", .id_gbnf = "[a-zA-Z0-9]{9}", .id_fixed = "call00000",
     .name_pre = "<|tool_call:name|>", .name_post = "<|tool_call:args|>", .close = "<|tool_call:end|>"},
    {.family = NX_TOOL_FORMAT_HARMONY, .open = "to=functions.", .name_pre = "",
     .name_post = "<|channel|>commentary json<|message|>", .close = "<|call|>"},
    {.family = NX_TOOL_FORMAT_HY, .open = "<tool_call:opensource>", .name_pre = "", .name_post = "<tool_sep:opensource>",
     .params = true, .param_pre = "\n<arg_key:opensource>", .param_mid = "</arg_key:opensource>\n<arg_value:opensource>",
     .param_post = "</arg_value:opensource>", .raw_stop = "<", .close = "\n</tool_call:opensource>"},
    {.family = NX_TOOL_FORMAT_FUNCTIONARY, .open = ">>>", .open_in_prompt = true, .name_pre = "", .name_post = "\n",
     .close = ""},
    {.family = NX_TOOL_FORMAT_MINIMAX_M3, .open = MM3 "<tool_call>", .name_pre = "\n" MM3 "<invoke name=\"",
     .name_post = "\">", .params = true, .param_pre = MM3 "<", .param_mid = ">", .param_post = MM3 "</",
     .param_post_end = ">", .raw_stop = "]", .close = MM3 "</invoke>\n" MM3 "</tool_call>"},
    /* hermes with XML inside <tool_call>: Qwen3-Coder's <function=NAME><parameter=KEY> and GLM's
       NAME<arg_key>KEY</arg_key><arg_value>VALUE</arg_value>, each value on lines of its own */
    {.family = NX_TOOL_FORMAT_HERMES, .open = "<tool_call>\n<function=", .by_form = true, .name_pre = "",
     .name_post = ">\n", .params = true, .param_pre = "<parameter=", .param_mid = ">\n",
     .param_post = "\n</parameter>\n", .raw_stop = "<", .close = "</function>\n</tool_call>"},
    {.family = NX_TOOL_FORMAT_HERMES, .open = "<tool_call>", .mark = "<arg_key>", .by_form = true, .name_pre = "",
     .name_post = "", .params = true, .param_pre = "\n<arg_key>", .param_mid = "</arg_key>\n<arg_value>",
     .param_post = "</arg_value>", .raw_stop = "<", .close = "\n</tool_call>"},
    /* gemma4: the arguments object in its own syntax (dialect 1) */
    {.family = NX_TOOL_FORMAT_GEMMA4, .open = "<|tool_call>", .name_pre = "call:", .name_post = "", .close = "<tool_call|>",
     .dialect = 1},
    /* pythonic: NAME(key=value,) with Python literals (dialect 2); a comma after each value */
    {.family = NX_TOOL_FORMAT_PYTHONIC, .open = "<|tool_call_start|>", .name_pre = "[", .name_post = "(", .params = true,
     .param_pre = "", .param_mid = "=", .param_post = ",", .raw_stop = "", .close = ")]<|tool_call_end|>", .dialect = 2},
};
#define N_SHAPES (sizeof SHAPES / sizeof SHAPES[0])

const struct chat_call_shape *chat_call_shape(enum nx_tool_format f, const char *form) {
    const struct chat_call_shape *first = NULL;
    for (size_t i = 0; i < N_SHAPES; i++) {
        if (SHAPES[i].family != f) continue;
        if (!first && !SHAPES[i].by_form) first = &SHAPES[i];
        if (form && !strcmp(form, SHAPES[i].open)) return &SHAPES[i];
    }
    return first;
}

/* render messages with one tool, no generation prompt; NULL when the template raises */
static char *render_msgs(const nx_chat_template *t, const char *msgs) {
    struct nx_chat_params p = nx_chat_default_params();
    p.messages_json = msgs;
    p.tools_json = "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather.\","
                   "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\"}},"
                   "\"required\":[\"location\"]}}}]";
    p.bos_token = "";
    p.eos_token = "";
    char *out = NULL, err[256];
    return nx_chat_render(t, &p, &out, NULL, err, sizeof err) == NX_STATUS_OK ? out : NULL;
}

const char *chat_template_call_form(const nx_chat_template *t) {
    enum nx_tool_format f = nx_chat_template_tool_format(t);
    bool any = false;
    for (size_t i = 0; i < N_SHAPES; i++) any = any || SHAPES[i].family == f;
    if (!any) return NULL;
    static const char *const user = "{\"role\":\"user\",\"content\":\"Weather in Oslo?\"}";
    static const char *const args[2] = {"{\"location\":\"Oslo\"}", "\"{\\\"location\\\": \\\"Oslo\\\"}\""};
    char a[256], b[1024];
    snprintf(a, sizeof a, "[%s]", user);
    char *ra = render_msgs(t, a);
    const char *form = NULL;
    for (int k = 0; k < 2 && ra && !form; k++) { /* some templates take only string arguments */
        snprintf(b, sizeof b,
                 "[%s,{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":\"abcDEF123\",\"type\":"
                 "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":%s}}]}]",
                 user, args[k]);
        char *rb = render_msgs(t, b);
        if (!rb) continue;
        size_t p = 0;
        while (ra[p] && ra[p] == rb[p]) p++;
        const char *best = NULL;
        for (size_t i = 0; i < N_SHAPES; i++) {
            if (SHAPES[i].family != f) continue;
            const char *q = strstr(rb + p, SHAPES[i].mark ? SHAPES[i].mark : SHAPES[i].open);
            if (q && (!best || q < best)) {
                best = q;
                form = SHAPES[i].open;
            }
        }
        nx_chat_free_string(rb);
    }
    nx_chat_free_string(ra);
    return form;
}
