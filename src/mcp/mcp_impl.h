/*
 * mcp_impl.h - internals of the MCP client shared by its files (not API).
 *
 *   mcp_proc.c    the child process and its pipes: spawn, the poll() pump that writes queued
 *                 output, drains stderr into a ring and cuts stdout into lines, close/kill/reap
 *   mcp_client.c  JSON-RPC: requests and replies by id, server-initiated messages, the
 *                 handshake (both eras), tools/list, tools/call
 *   mcp_content.c tools/call result helpers, base64
 *   mcp_config.c  the mcpServers config file and mcp_config_list_tools
 */
#ifndef NX_MCP_IMPL_H
#define NX_MCP_IMPL_H

#include <stdarg.h>
#include <sys/types.h>

#include "mcp/mcp.h"

#define MCP_READ_CHUNK 65536

struct mcp_client {
    /* process and pipes; fds are -1 once closed */
    pid_t pid;
    bool reaped;
    int wstatus;
    int fd_in, fd_out, fd_err;

    /* bytes queued for the server's stdin: obuf[opos, olen) */
    char *obuf;
    size_t opos, olen, ocap;

    /* the current, incomplete line from stdout (never longer than max_line) */
    char *lbuf;
    size_t llen, lcap, max_line;
    char rbuf[MCP_READ_CHUNK];

    /* newest stderr bytes: a ring, and a linear copy made on demand */
    char ering[MCP_STDERR_KEEP];
    size_t epos;
    bool efull;
    char etail[MCP_STDERR_KEEP + 1];

    /* sticky failure: once set, every call fails with it */
    int broken;
    char broken_msg[512];

    /* the one request in flight */
    long long next_id;
    long long wait_id; /* -1: none */
    json_t *wait_resp; /* its response once read */

    int timeout_ms, probe_timeout_ms, max_pages;
    enum mcp_era era; /* asked for */
    bool modern;      /* in use */
    char version[32];
    json_t *server_info, *server_caps;
    char *instructions;

    bool tools_changed;
    void (*changed_cb)(mcp_client *c, void *user);
    void *changed_user;
};

/* snprintf into err when err is not NULL; returns st. */
nx_status mcp_seterr(char *err, size_t errlen, nx_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Marks the client broken with a message (the stderr tail is appended); returns st. */
nx_status mcp_fail(mcp_client *c, nx_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Seconds on the monotonic clock. */
double mcp_now(void);

/* Spawns the server process with pipes; fills c's process fields. */
nx_status mcp_proc_spawn(mcp_client *c, const struct mcp_server_params *p, char *err, size_t errlen);

/* Queues one line (a '\n' is added) for the server's stdin. */
nx_status mcp_proc_queue(mcp_client *c, const char *line, size_t len);

/*
 * Runs the I/O loop until the awaited response (c->wait_id) has arrived, or (stop_on_changed)
 * the tools_changed flag is set, or the deadline passes (NX_STATUS_TIMEOUT), or the client breaks
 * (its code). Each complete line goes to mcp_handle_line.
 */
nx_status mcp_proc_pump(mcp_client *c, double deadline, bool stop_on_changed);

/* Closes stdin, waits, TERM, KILL, reaps; closes every fd. */
void mcp_proc_close(mcp_client *c);

/* Closes the server's stdin only (the first step of closing; lets several servers shut down
 * at the same time). */
void mcp_proc_eof(mcp_client *c);

/* mcp_open in two steps, so several servers can boot at the same time: mcp_start spawns (no
 * I/O), mcp_handshake negotiates (on failure the caller still mcp_close's the client). */
nx_status mcp_start(const struct mcp_server_params *p, mcp_client **out, char *err, size_t errlen);
nx_status mcp_handshake(mcp_client *c, char *err, size_t errlen);

/* mcp_start without a process, for tests and fuzzing: the server's output is read from fd_out
 * (a pipe or a file), the client's messages go to fd_in; the client owns both descriptors from
 * here on (closed by mcp_close; also on failure). pid stays 0, so nothing is ever signalled. */
nx_status mcp_start_fds(const struct mcp_server_params *p, int fd_in, int fd_out, mcp_client **out,
                  char *err, size_t errlen);

/* Handles one line from the server (mcp_client.c). */
void mcp_handle_line(mcp_client *c, const char *line, size_t len);

#endif
