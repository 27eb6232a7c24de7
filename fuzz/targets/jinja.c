/*
 * jinja.c - fuzz target: the Jinja parser and renderer (src/chat/jinja_*.c, template.c).
 * Input: the template source up to the first NUL, then a conversation: the JSON messages
 * array up to the next NUL, then optionally a tools array. The template is parsed or refused
 * with a status and a message; a parsed one is rendered with the conversation (and again
 * with the built-in chatml conversation when the given one is not valid JSON), with caps on
 * output (64 KiB) and steps (20,000) so a hostile template ends quickly; a render either
 * gives a NUL-terminated string of the reported length or a status and a message.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "fuzz_grammar.h"
#include "nexus.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static void render(const nx_chat_template *t, const char *msgs, const char *tools, bool gen) {
    struct nx_chat_params p = nx_chat_default_params();
    p.messages_json = msgs;
    p.tools_json = tools;
    p.add_generation_prompt = gen;
    p.bos_token = "<s>";
    p.eos_token = "</s>";
    p.now = 1700000000;
    p.max_output = 65536;
    p.max_steps = 20000;
    char *out = NULL, err[512] = "";
    size_t len = 0;
    nx_status st = nx_chat_render(t, &p, &out, &len, err, sizeof err);
    if (st == NX_STATUS_OK) {
        CHECK(out && strlen(out) <= len && len <= p.max_output);
        nx_chat_free_string(out);
    } else {
        CHECK(!out && err[0]);
    }
}

NX_FUZZ_TARGET(jinja) {
    size_t n;
    const uint8_t *conv;
    size_t nc;
    fuzz_split_nul(data, size, &n, &conv, &nc);
    nx_chat_template *t = NULL;
    char err[512] = "";
    nx_status st = nx_chat_template_parse((const char *)data, n, &t, err, sizeof err);
    if (st != NX_STATUS_OK) {
        CHECK(!t && err[0]);
        return 0;
    }
    CHECK(t != NULL);
    (void)nx_chat_template_tool_format(t);
    /* messages, NUL, tools (each NUL-terminated copies) */
    size_t nm;
    const uint8_t *tools;
    size_t nt;
    fuzz_split_nul(conv, nc, &nm, &tools, &nt);
    char *m = malloc(nm + 1), *tl = malloc(nt + 1);
    CHECK(m && tl);
    memcpy(m, conv, nm);
    m[nm] = 0;
    memcpy(tl, tools, nt);
    tl[nt] = 0;
    render(t, nm ? m : "[]", nt ? tl : NULL, nm & 1);
    render(t,
           "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":"
           "\"Hi\"},{\"role\":\"assistant\",\"content\":\"Hello\",\"tool_calls\":[{\"type\":"
           "\"function\",\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1}}}]},"
           "{\"role\":\"tool\",\"content\":\"42\"}]",
           "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
           "\"object\"}}}]",
           true);
    free(m);
    free(tl);
    nx_chat_template_free(t);
    return 0;
}
