/*
 * mcp_config.c - fuzz target: the mcpServers config parser (src/mcp/mcp_config.c) on the input
 * as text (NUL-terminated copy); every parsed server's name is read back.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "mcp/mcp.h"

NX_FUZZ_TARGET(mcp_config) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    mcp_config *cfg = NULL;
    char err[400] = "";
    int st = mcp_config_parse(text, "/nonexistent/base", &cfg, err, sizeof err);
    if (st == NX_STATUS_OK) {
        for (size_t i = 0; i < mcp_config_count(cfg); i++)
            if (!mcp_config_name(cfg, i)) __builtin_trap();
        mcp_config_free(cfg);
    } else if (cfg || !err[0]) {
        __builtin_trap();
    }
    free(text);
    return 0;
}
