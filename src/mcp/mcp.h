/*
 * mcp.h - a Model Context Protocol (MCP) client over stdio. This header is its specification.
 *
 * What it does
 * - Spawns a server (argv + extra environment + working directory) in its own process group,
 *   talks newline-delimited JSON-RPC 2.0 on the server's stdin/stdout, and drains its stderr
 *   into a bounded buffer (the last MCP_STDERR_KEEP bytes, quoted in error messages), so a
 *   chatty stderr never blocks the server.
 * - Handshake, two eras (ROUTING.md §2.4, §2.5):
 *     legacy: `initialize` asking for 2025-11-25; the server's answer is accepted when it is one
 *             of 2024-11-05, 2025-03-26, 2025-06-18, 2025-11-25 and refused otherwise; then the
 *             notification `notifications/initialized`;
 *     modern: 2026-07-28, no handshake: a `server/discover` probe whose result lists
 *             "2026-07-28" in supportedVersions; every later request carries the
 *             `_meta` keys io.modelcontextprotocol/protocolVersion and /clientCapabilities.
 *   MCP_ERA_AUTO (the default) sends the probe first and falls back to `initialize` when the
 *   reply is an error other than a modern one (today's servers answer -32601), when the result
 *   does not list 2026-07-28, or when no reply comes within the probe timeout. -32022
 *   (unsupported version) falls back only when its `supported` list names a legacy version.
 * - tools/list with cursor pagination (a repeated cursor or more than max_pages pages is an
 *   error), tools/call with every content type (text, image, audio, resource_link, embedded
 *   resource) and structuredContent available to the caller.
 * - Messages the server sends on its own: `notifications/tools/list_changed` sets a flag
 *   (mcp_tools_changed) and calls the optional callback; other notifications are ignored;
 *   server-to-client requests get `ping` -> {} and everything else (sampling/createMessage,
 *   elicitation/create, roots/list, ...) -> JSON-RPC error -32601. Responses are matched by id;
 *   responses to unknown or stale ids are ignored.
 *
 * Failure handling: every wait has a deadline (poll(), non-blocking pipes, no blocking read or
 * write anywhere), so a server that never answers costs at most timeout_ms per request. A
 * server that exits, closes its stdout, writes a line that is not JSON, writes a line longer
 * than max_line bytes (the client never buffers more than that), or stops reading its stdin
 * while we have more than MCP_OUT_MAX bytes queued for it, makes the call fail with a message
 * naming the problem (and the server's last stderr output); the client is then "broken": later
 * calls fail at once with the same message. SIGPIPE is blocked around our writes (a closed pipe
 * is an EPIPE error, never a signal), the child is reaped, and mcp_close kills what is left of
 * its process group.
 *
 * Errors: functions return NX_STATUS_OK or a negative nx_status (include/nexus.h) and write a
 * one-line message into err (err may be NULL):
 *   NX_STATUS_INVALID_ARG  bad argument or configuration
 *   NX_STATUS_IO           the server could not be started (not found, not executable, ...), or
 *                          an unexpected system error (poll, read, write)
 *   NX_STATUS_TIMEOUT      no reply within the timeout
 *   NX_STATUS_CLOSED       the server exited or closed its stdout/stdin
 *   NX_STATUS_PROTOCOL     the server broke the protocol: not JSON, bad shape, cursor loop, a
 *                          line longer than max_line
 *   NX_STATUS_UNSUPPORTED  no protocol version both sides support
 *   NX_STATUS_REMOTE       the server answered a JSON-RPC error object (its message in err), or
 *                          tools/call returned isError: true (the tool's text in err; the result
 *                          is still returned)
 *   NX_STATUS_NOMEM        out of memory
 * (Before 2026-12 these were an own enum mcp_status; the mapping is one to one except that
 * ESPAWN/EIO became IO, EPROTO/ETOOLONG PROTOCOL, and ERPC/ETOOL REMOTE.) Thread safety: one mcp_client is used by one thread at a time; distinct
 * clients are independent. Not async-signal-safe. The client forks: call it before starting
 * threads that hold locks the child could need (the child only calls async-signal-safe functions
 * between fork and exec, so this is the usual fork caveat, nothing more).
 */
#ifndef NX_MCP_H
#define NX_MCP_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "nexus.h"

#ifdef __cplusplus
extern "C" {
#endif

enum mcp_era {
    MCP_ERA_AUTO = 0,   /* probe server/discover, fall back to initialize */
    MCP_ERA_LEGACY = 1, /* initialize only (2024-11-05 .. 2025-11-25) */
    MCP_ERA_MODERN = 2, /* server/discover only (2026-07-28) */
};

#define MCP_DEFAULT_TIMEOUT_MS 10000
#define MCP_DEFAULT_MAX_LINE (4u << 20) /* 4 MiB */
#define MCP_DEFAULT_MAX_PAGES 1000
#define MCP_STDERR_KEEP 8192            /* bytes of the server's stderr kept (the newest) */
#define MCP_OUT_MAX (64u << 20)         /* bytes queued for a server that does not read */

/* The newest protocol version of each era, and the oldest legacy one accepted. */
#define MCP_PROTOCOL_LEGACY "2025-11-25"
#define MCP_PROTOCOL_OLDEST "2024-11-05"
#define MCP_PROTOCOL_MODERN "2026-07-28"

struct mcp_server_params {
    const char *const *argv; /* NULL-terminated; argv[0] is looked up in PATH when it has no '/'
                                (a path with '/' is relative to cwd) */
    const char *const *env;  /* NULL-terminated "NAME=VALUE" entries set on top of this process's
                                environment (override same names); NULL: none */
    const char *cwd;         /* the server's working directory; NULL: ours */
    int timeout_ms;          /* each request's deadline; 0: MCP_DEFAULT_TIMEOUT_MS */
    int probe_timeout_ms;    /* MCP_ERA_AUTO's server/discover probe; 0: min(timeout, 2000) */
    size_t max_line;         /* longest line accepted from the server; 0: MCP_DEFAULT_MAX_LINE */
    int max_pages;           /* tools/list pages followed; 0: MCP_DEFAULT_MAX_PAGES */
    enum mcp_era era;        /* 0: MCP_ERA_AUTO */
};

typedef struct mcp_client mcp_client;

/*
 * Starts the server and performs the handshake. On success *out is a ready client; on failure
 * *out is NULL, the server (if started) is killed and reaped, and err says why.
 */
nx_status mcp_open(const struct mcp_server_params *p, mcp_client **out, char *err, size_t errlen);

/*
 * Closes the server's stdin, gives it a moment to exit, then SIGTERM and SIGKILL to its process
 * group; reaps it. NULL does nothing.
 */
void mcp_close(mcp_client *c);

/* The negotiated protocol version ("2025-11-25", "2026-07-28", ...). */
const char *mcp_protocol_version(const mcp_client *c);
/* True when the modern (2026-07-28, server/discover) era is in use. */
bool mcp_is_modern(const mcp_client *c);
/* The server's serverInfo / capabilities / instructions from the handshake (borrowed; the
 * JSON values may be NULL when the server sent none). */
const json_t *mcp_server_info(const mcp_client *c);
const json_t *mcp_server_capabilities(const mcp_client *c);
const char *mcp_instructions(const mcp_client *c);
/* The newest bytes the server wrote to stderr (up to MCP_STDERR_KEEP; borrowed, NUL-ended). */
const char *mcp_stderr_tail(mcp_client *c);
/* The process id of the server (for tests). */
int mcp_pid(const mcp_client *c);

/*
 * All tools of the server: follows nextCursor until the last page. *tools_out is a new array
 * of the tool objects as the server sent them (caller json_decref's it). Each tool must be an
 * object with a string name, else NX_STATUS_PROTOCOL. Clears the list_changed flag before the first
 * page, so a change announced during the listing is still seen.
 */
nx_status mcp_list_tools(mcp_client *c, json_t **tools_out, char *err, size_t errlen);

/*
 * Calls a tool. arguments may be NULL (sent as {}); it is not stolen. On NX_STATUS_OK and NX_STATUS_REMOTE
 * *result_out is the whole CallToolResult object (caller json_decref's it); read it with the
 * mcp_result_* helpers. NX_STATUS_REMOTE (isError: true) puts the tool's text in err; NX_STATUS_REMOTE (a
 * JSON-RPC error, e.g. unknown tool) puts "server error CODE: MESSAGE" in err and leaves
 * *result_out NULL.
 */
nx_status mcp_call_tool(mcp_client *c, const char *name, const json_t *arguments, json_t **result_out,
                  char *err, size_t errlen);

/*
 * A raw request: method + params (borrowed, may be NULL) -> *result_out (new reference). The
 * modern era adds the _meta keys itself. JSON-RPC errors give NX_STATUS_REMOTE and their code in
 * *rpc_code (may be NULL; 0 when the error was not a JSON-RPC one).
 */
nx_status mcp_request(mcp_client *c, const char *method, const json_t *params, json_t **result_out,
                int *rpc_code, char *err, size_t errlen);

/* Reads and handles whatever the server sends for up to timeout_ms (notifications, requests);
 * returns early once list_changed is set. 0, or an error if the server broke. */
nx_status mcp_poll(mcp_client *c, int timeout_ms, char *err, size_t errlen);

/* True once the server sent notifications/tools/list_changed since the last mcp_list_tools or
 * mcp_tools_changed_clear. The callback (may be NULL) is called from inside whichever client
 * call read the notification; it must not call back into this client. */
bool mcp_tools_changed(const mcp_client *c);
void mcp_tools_changed_clear(mcp_client *c);
void mcp_on_tools_changed(mcp_client *c, void (*cb)(mcp_client *c, void *user), void *user);

/* ---- tools/call results ---------------------------------------------------------------- */

enum mcp_content_type {
    MCP_CONTENT_TEXT,
    MCP_CONTENT_IMAGE,
    MCP_CONTENT_AUDIO,
    MCP_CONTENT_RESOURCE_LINK,
    MCP_CONTENT_RESOURCE, /* embedded resource: text or blob */
    MCP_CONTENT_UNKNOWN,  /* a type this client does not know; raw has it */
};

/* One content item; every pointer is borrowed from the result and NULL when absent. */
struct mcp_content {
    enum mcp_content_type type;
    const char *type_name; /* the "type" string as sent */
    const char *text;      /* text; resource: resource.text */
    const char *data;      /* image, audio: base64 "data"; resource: base64 resource.blob */
    const char *mime_type; /* image, audio, resource_link, resource */
    const char *uri;       /* resource_link, resource */
    const char *name;      /* resource_link */
    const json_t *raw;     /* the whole item (annotations, _meta, ...) */
};

/* Number of content items (0 when there is no content array). */
size_t mcp_result_count(const json_t *result);
/* Item i; NX_STATUS_PROTOCOL when it is not an object with a string type, NX_STATUS_INVALID_ARG when out of range. */
nx_status mcp_result_content(const json_t *result, size_t i, struct mcp_content *out);
/* structuredContent, or NULL (borrowed). */
const json_t *mcp_result_structured(const json_t *result);
/* isError: true? */
bool mcp_result_is_error(const json_t *result);
/* The text items joined by newlines, allocated (nx_free); "" when none; NULL on OOM. */
char *mcp_result_text(const json_t *result);
/* Decodes standard base64 (padding optional, no whitespace) into a buffer allocated with nx_malloc (nx_free); NULL when
 * the input is not base64. */
unsigned char *mcp_base64_decode(const char *s, size_t *len_out);

/* ---- configuration: several servers ------------------------------------------------------ */

/*
 * A config file in the shape Claude Desktop uses:
 *   {"mcpServers": {"NAME": {"command": "node", "args": ["server.js"], "env": {"K": "V"},
 *                            "cwd": "dir", "timeoutMs": 10000, "disabled": false}, ...}}
 * command is required; args, env, cwd (relative to the config file's directory), timeoutMs and
 * disabled are optional. Servers over HTTP ("url") are refused with a message saying so.
 * Server names are 1-64 characters of [A-Za-z0-9_.-].
 */
typedef struct mcp_config mcp_config;

nx_status mcp_config_load(const char *path, mcp_config **out, char *err, size_t errlen);
/* Same from JSON text; base_dir (may be NULL: ".") resolves relative cwd entries. */
nx_status mcp_config_parse(const char *text, const char *base_dir, mcp_config **out, char *err,
                     size_t errlen);
void mcp_config_free(mcp_config *cfg);
/* Enabled servers, sorted by name. */
size_t mcp_config_count(const mcp_config *cfg);
const char *mcp_config_name(const mcp_config *cfg, size_t i);
/* Starts server i; timeout_ms overrides the config's timeoutMs when > 0. Errors name it. */
nx_status mcp_config_open(const mcp_config *cfg, size_t i, int timeout_ms, mcp_client **out, char *err,
                    size_t errlen);

/*
 * THE ROUTER'S ENTRY POINT. Starts every enabled server of the config at config_path (all at
 * once, so their start-up times overlap), lists all their tools, stops them, and returns in *tools_out a new JSON array in MCP tools/list shape
 * (tool objects as the servers sent them) where each tool has one added member,
 * "server": "<config name of its server>". Order is deterministic: by server name, then tool
 * name (bytewise). timeout_ms (0: each server's timeoutMs or MCP_DEFAULT_TIMEOUT_MS) bounds each
 * request. Any server that fails to start or list makes the whole call fail, naming the server
 * ("server 'fs': ..."); *tools_out is then NULL. The same tool name on two servers is kept
 * twice (the "server" member tells them apart). Caller json_decref's the array.
 */
nx_status mcp_config_list_tools(const char *config_path, int timeout_ms, json_t **tools_out, char *err,
                          size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
