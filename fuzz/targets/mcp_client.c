/*
 * mcp_client.c - fuzz target: the MCP client's JSON-RPC handling (src/mcp/mcp_client.c,
 * mcp_proc.c's line cutting, mcp_content.c) fed arbitrary server output. Byte 0 picks the
 * era (auto, legacy, modern) and a line limit (default or 256 bytes); the rest is everything
 * "the server" writes on stdout, read from an in-memory file (mcp_start_fds), so the client
 * sees it in order and then end of file. Our requests carry ids 1, 2, 3, ... (the seeds answer
 * them). The session: handshake, tools/list, tools/call with every content item read back,
 * a raw request, a poll. Every failure must come with a message.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "mcp/mcp_impl.h"

#define CHECK(c) \
    do { \
        if (!(c)) __builtin_trap(); \
    } while (0)

static void read_result(const json_t *res) {
    size_t n = mcp_result_count(res);
    for (size_t i = 0; i < n; i++) {
        struct mcp_content ct;
        if (mcp_result_content(res, i, &ct) != NX_STATUS_OK) continue;
        if (ct.data) {
            size_t len;
            nx_free(mcp_base64_decode(ct.data, &len));
        }
    }
    (void)mcp_result_structured(res);
    (void)mcp_result_is_error(res);
    nx_free(mcp_result_text(res));
}

static void session(mcp_client *c) {
    char err[700];
    err[0] = 0;
    int st = mcp_handshake(c, err, sizeof err);
    if (st) {
        CHECK(err[0]);
        return;
    }
    (void)mcp_protocol_version(c);
    (void)mcp_instructions(c);
    json_t *tools = NULL;
    err[0] = 0;
    st = mcp_list_tools(c, &tools, err, sizeof err);
    CHECK(st == NX_STATUS_OK ? tools != NULL : err[0] != 0);
    json_decref(tools);
    json_t *args = json_pack("{s:s}", "message", "hi");
    json_t *res = NULL;
    err[0] = 0;
    st = mcp_call_tool(c, "echo", args, &res, err, sizeof err);
    json_decref(args);
    if (st == NX_STATUS_OK || (st == NX_STATUS_REMOTE && res)) { /* REMOTE + res: isError */
        CHECK(res != NULL);
        read_result(res);
    } else {
        CHECK(err[0] && !res);
    }
    json_decref(res);
    res = NULL;
    int code;
    if (mcp_request(c, "resources/list", NULL, &res, &code, err, sizeof err) == NX_STATUS_OK)
        json_decref(res);
    (void)mcp_poll(c, 0, err, sizeof err);
}

NX_FUZZ_TARGET(mcp_client) {
    if (size < 1) return 0;
    int fd_out = memfd_create("nx_fuzz_mcp", MFD_CLOEXEC);
    if (fd_out < 0) return 0;
    if (size > 1 && write(fd_out, data + 1, size - 1) != (ssize_t)(size - 1)) {
        close(fd_out);
        return 0;
    }
    lseek(fd_out, 0, SEEK_SET);
    int fd_in = open("/dev/null", O_WRONLY | O_CLOEXEC | O_NONBLOCK);
    struct mcp_server_params p = {0};
    p.era = (enum mcp_era)((data[0] & 3) % 3);
    p.max_line = (data[0] & 4) ? 256 : 0;
    p.timeout_ms = 1000;
    p.max_pages = 8;
    mcp_client *c = NULL;
    char err[400];
    if (mcp_start_fds(&p, fd_in, fd_out, &c, err, sizeof err) != NX_STATUS_OK) return 0;
    session(c);
    mcp_close(c);
    return 0;
}
