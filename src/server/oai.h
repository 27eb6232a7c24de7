/*
 * oai.h - the OpenAI API's request and response shapes: JSON in, checked request structs out;
 * engine results in, JSON out. No I/O and no engine calls here.
 *
 * DESIGN: every request field is checked for type and range before anything runs; a bad
 * request gets one message naming the parameter (OpenAI's `param`) and HTTP 400. Fields that
 * change sampling or output but are not implemented are refused rather than ignored (`n` other
 * than 1, non-zero presence/frequency penalties, `echo`, `best_of`, `suffix`); fields that
 * only describe the caller (`user`, `metadata`, `store`) are accepted and not used.
 */
#ifndef NX_SERVER_OAI_H
#define NX_SERVER_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "nexus.h"
#include "server/constrain.h"

#define SRV_MAX_STOP 4        /* OpenAI allows up to 4 stop sequences */
#define SRV_STOP_MAX_LEN 256  /* bytes of one stop sequence */

/* Limits a request is held to (srv_params fills them from flags). */
struct srv_limits {
    int32_t max_tokens;     /* cap on max_tokens / max_completion_tokens */
    int32_t max_messages;   /* most messages in one chat request */
    int32_t max_inputs;     /* most inputs in one embeddings request */
};

enum srv_kind { SRV_KIND_CHAT = 0, SRV_KIND_COMPLETION = 1 };

/* What a generation request asks for, after checking. Strings are owned (nx_free). */
struct srv_gen_request {
    enum srv_kind kind;
    char *prompt;            /* completion: the prompt text; chat: NULL (see messages) */
    json_t *messages;        /* chat: the messages array (a reference, json_decref) */
    char *stop[SRV_MAX_STOP];
    int n_stop;
    int32_t max_tokens;      /* <= 0: up to the context */
    float temperature;
    float top_p;
    uint64_t seed;
    bool has_seed;
    bool stream;
    bool include_usage;      /* stream_options.include_usage */
    bool logprobs;           /* chat: logprobs true; completion: logprobs >= 0 */
    int32_t top_logprobs;    /* alternatives per token (0..20 chat, 0..5 completion) */
    char *model;             /* echoed back; NULL: the server's model name */
    char session[65];        /* "session": bind to this session ("" = none; id checked) */
    bool has_kv;             /* "kv_policy" / "kv_density" / "kv_budget" given (sessions only:
                                the policy of a session the request creates) */
    struct nx_kv_params kv;  /* kv.policy points at kv_policy */
    char kv_policy[32];
    json_t *tools;           /* chat: the tools array (a reference) or NULL */
    enum srv_tool_mode tool_mode; /* from tool_choice (auto when tools are given) */
    char tool_name[128];     /* SRV_TOOLS_NAMED: the function */
    bool parallel_tool_calls;
    json_t *response_format; /* chat: a reference, or NULL */
};

/*
 * Parse and check a /v1/chat/completions or /v1/completions body. On failure returns
 * INVALID_ARG (err names the problem, *param the field or NULL) or UNSUPPORTED (a feature this
 * server refuses; same), and *out holds nothing to free.
 */
nx_status srv_parse_gen(json_t *body, enum srv_kind kind, const struct srv_limits *lim,
                        struct srv_gen_request *out, char *err, size_t errlen,
                        const char **param);
void srv_gen_request_free(struct srv_gen_request *r);

/* Embedding inputs: texts (owned) or token lists. */
struct srv_embed_request {
    char **texts;
    int32_t n;
    bool base64;             /* encoding_format "base64" (the openai client's default) */
    char *model;
};
nx_status srv_parse_embed(json_t *body, const struct srv_limits *lim,
                          struct srv_embed_request *out, char *err, size_t errlen,
                          const char **param);
void srv_embed_request_free(struct srv_embed_request *r);

/* {"error": {"message", "type", "param", "code"}} as compact JSON (owned). */
char *srv_error_json(const char *message, const char *type, const char *param,
                     const char *code);

/* Bytes of base64 needed for n bytes, and the encoding (out: that many bytes + NUL). */
size_t srv_base64_len(size_t n);
void srv_base64(const unsigned char *in, size_t n, char *out);

/* Nesting depth of JSON text (arrays and objects, outside strings); stops counting past
   limit + 1. Used to refuse deeply nested bodies before parsing them. */
int srv_json_depth(const char *s, size_t n, int limit);

#endif
