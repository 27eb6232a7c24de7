/*
 * server_request.c - fuzz target: the server's request handling short of the engine, in
 * process (no sockets): what src/server/http.c does with a POST body before a job is queued.
 * Input: byte 0 picks the endpoint (bits 0-1: chat completions, completions, embeddings) and
 * the template's tool-call family (bits 2-4: none, hermes, llama3, mistral, generic, deepseek,
 * then xml-invoke and pythonic for the shaped families of chat/callshape.h), the rest is the body. Steps, as
 * the handler: the nesting check (srv_json_depth, limit 64), the JSON parse (nx_json_loadb,
 * duplicate keys refused), the request check (src/server/oai.c: srv_parse_gen /
 * srv_parse_embed), for chat the output constraint from tools / tool_choice /
 * response_format (src/server/constrain.c: the JSON-schema compiler) and the prompt (the
 * messages rendered with the built-in chatml template), and the error body a refusal gets
 * (srv_error_json). A refusal must carry a message and leave nothing to free.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"
#include "fuzz.h"
#include "server/oai.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static nx_chat_template *chatml(void) {
    static nx_chat_template *t;
    if (!t) {
        char err[256];
        if (nx_chat_template_open("chatml", &t, err, sizeof err) != NX_STATUS_OK) abort();
    }
    return t;
}

static void refusal(const char *err, const char *param) {
    CHECK(err[0]);
    char *body = srv_error_json(err, "invalid_request_error", param, NULL);
    if (body) {
        json_error_t je;
        json_t *j = json_loads(body, 0, &je);
        CHECK(j != NULL); /* the error body is JSON, whatever the message holds */
        json_decref(j);
        nx_free(body);
    }
}

static void chat_prompt(const struct srv_gen_request *r) {
    char *mj = nx_json_dumps(r->messages, JSON_COMPACT);
    char *tj = r->tools ? nx_json_dumps(r->tools, JSON_COMPACT) : NULL;
    if (mj) {
        struct nx_chat_params cp = nx_chat_default_params();
        cp.messages_json = mj;
        cp.tools_json = tj;
        cp.add_generation_prompt = true;
        cp.max_output = 1 << 20;
        cp.max_steps = 100000;
        char *text = NULL, err[400] = "";
        if (nx_chat_render(chatml(), &cp, &text, NULL, err, sizeof err) == NX_STATUS_OK)
            nx_chat_free_string(text);
        else
            CHECK(!text && err[0]);
    }
    nx_free(mj);
    nx_free(tj);
}

NX_FUZZ_TARGET(server_request) {
    if (size < 1) return 0;
    fuzz_quiet();
    (void)chatml();
    int ep = data[0] & 3;
    static const enum nx_tool_format fams[8] = {NX_TOOL_FORMAT_NONE, NX_TOOL_FORMAT_HERMES, NX_TOOL_FORMAT_LLAMA3,
                                                NX_TOOL_FORMAT_MISTRAL, NX_TOOL_FORMAT_GENERIC, NX_TOOL_FORMAT_DEEPSEEK,
                                                NX_TOOL_FORMAT_XML_INVOKE, NX_TOOL_FORMAT_PYTHONIC};
    enum nx_tool_format fam = fams[(data[0] >> 2) & 7];
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    if (srv_json_depth(body, n, 64) > 64) return 0;
    json_error_t je;
    bool oom = false;
    json_t *j = nx_json_loadb(n ? body : "", n, JSON_REJECT_DUPLICATES, &je, &oom);
    if (!j) return 0;
    struct srv_limits lim = {.max_tokens = 4096, .max_messages = 64, .max_inputs = 16};
    char err[512] = "";
    const char *param = NULL;
    if (ep == 2 || ep == 3) {
        struct srv_embed_request er;
        nx_status st = srv_parse_embed(j, &lim, &er, err, sizeof err, &param);
        if (st == NX_STATUS_OK) {
            CHECK(er.n >= 1 && er.n <= lim.max_inputs && er.texts);
            for (int32_t i = 0; i < er.n; i++) CHECK(er.texts[i] != NULL);
            srv_embed_request_free(&er);
        } else {
            refusal(err, param);
        }
        json_decref(j);
        return 0;
    }
    enum srv_kind kind = ep == 0 ? SRV_KIND_CHAT : SRV_KIND_COMPLETION;
    struct srv_gen_request r;
    nx_status st = srv_parse_gen(j, kind, &lim, &r, err, sizeof err, &param);
    json_decref(j);
    if (st != NX_STATUS_OK) {
        CHECK(st == NX_STATUS_INVALID_ARG || st == NX_STATUS_UNSUPPORTED || st == NX_STATUS_NOMEM);
        refusal(err, param);
        return 0;
    }
    CHECK(r.max_tokens <= lim.max_tokens && r.n_stop >= 0 && r.n_stop <= SRV_MAX_STOP);
    if (kind == SRV_KIND_COMPLETION) {
        CHECK(r.prompt != NULL);
    } else {
        CHECK(json_is_array(r.messages));
        struct srv_constraint con;
        memset(&con, 0, sizeof con);
        st = srv_constraint_build(fam, NULL, r.tools, r.tool_mode, r.tool_name, r.response_format, &con,
                                  err, sizeof err);
        if (st == NX_STATUS_OK) {
            CHECK(con.prefill != NULL);
            chat_prompt(&r);
        } else {
            refusal(err, NULL);
        }
        srv_constraint_free(&con);
    }
    srv_gen_request_free(&r);
    return 0;
}
