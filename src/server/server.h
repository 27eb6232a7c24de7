/*
 * server.h - `nexus serve`: an OpenAI-compatible HTTP server (libmicrohttpd) over the engine.
 *
 * Endpoints: POST /v1/chat/completions, POST /v1/completions (both with "stream": true as
 * server-sent events ending in "data: [DONE]"), POST /v1/embeddings (with an encoder model),
 * GET /v1/models, GET /health, GET /metrics (Prometheus text). Every error has OpenAI's shape
 * {"error": {"message", "type", "param", "code"}} and status: 400 bad JSON / bad field /
 * prompt too long (code "context_length_exceeded"), 401 missing or wrong API key, 404
 * unknown path, 405 wrong method, 408 a body that does not arrive in time, 413 body too
 * large, 429 queue full, 500 engine failure, 503 shutting down.
 *
 * DESIGN: libmicrohttpd runs one thread per connection; a connection thread parses and checks
 * the request, submits a job to the engine (server/engine.h) and then only waits: for the job's
 * new text (streaming, in the response's content-reader callback) or for its end. While it
 * waits it polls the socket, so a client that disconnects cancels its job within ~100 ms and
 * frees the slot. Limits: body size, JSON nesting depth (checked before parsing), messages,
 * max_tokens, concurrent connections, per-connection idle timeout, a deadline for the whole
 * body and one for each request. Binds 127.0.0.1 unless told otherwise; with an API key, every
 * endpoint but /health needs "Authorization: Bearer KEY" (compared in constant time); CORS
 * headers only when an origin is configured.
 */
#ifndef NX_SERVER_H
#define NX_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"
#include "server/engine.h"
#include "server/oai.h"
#include "server/tools.h"

struct srv_params {
    const char *host;         /* address to bind ("127.0.0.1") */
    int port;                 /* 0: any free port (srv_port tells which) */
    const char *api_key;      /* NULL: no authentication */
    const char *cors_origin;  /* NULL: no CORS headers */
    const char *model_name;   /* id in /v1/models and responses */
    const char *chat_template; /* NULL: the model's own (ChatML when it has none); else a
                                  built-in name (chatml, llama3, mistral) or a file */
    size_t max_body;          /* bytes (1 MiB) */
    int max_depth;            /* JSON nesting (64) */
    int max_conns;            /* concurrent connections (64) */
    int idle_timeout_s;       /* a connection silent this long is closed (30) */
    double body_timeout_s;    /* the whole body must arrive within this (30) */
    double request_timeout_s; /* a generation ends (finish "length") after this; 0: never */
    struct srv_limits lim;
    struct srv_engine_params engine;
    struct srv_tools_params tools; /* tools.mcp_config NULL: no server-side tools */
};

/* Defaults as documented above (engine: 1 slot, queue 64, n_ctx 0 = model's, 2 threads). */
struct srv_params srv_default_params(void);

struct srv_server;

/*
 * Start serving model (and embed_model for /v1/embeddings when not NULL; an encoder model
 * passed as model serves embeddings only). Both borrowed: they must outlive the server.
 * Errors: INVALID_ARG (bad params, cannot bind: err says why), NOMEM.
 */
nx_status srv_start(const nx_model *model, const nx_model *embed_model,
                    const struct srv_params *p, struct srv_server **out, char *err,
                    size_t errlen);
/* The port the server listens on. */
int srv_port(const struct srv_server *s);
/* Stop accepting, end running requests, free everything. NULL is a no-op. */
void srv_stop(struct srv_server *s);

#endif
