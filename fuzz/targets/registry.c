/*
 * registry.c - fuzz target: the tool registry loader (src/route/registry.c): the input as one
 * file (JSON or JSON Lines; MCP tools/list, OpenAI tools, plain functions, BFCL lines), loaded
 * twice into one registry (the second load meets every name again: the duplicate rules), then
 * sorted and every tool found again by name. A failed load must leave the registry as it was.
 */
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "route/registry.h"

NX_FUZZ_TARGET(registry) {
    int fd;
    char path[64], err[600];
    if (fuzz_memfile(data, size, &fd, path, sizeof path) != 0) return 0;
    for (int policy = 0; policy < 2; policy++) {
        rt_registry r;
        rt_registry_init(&r);
        r.dup = policy ? RT_DUP_KEEP_FIRST : RT_DUP_ERROR;
        for (int pass = 0; pass < 2; pass++) {
            int n0 = r.n;
            err[0] = 0;
            int rc = rt_registry_load_file(&r, path, err, sizeof err);
            if (rc < 0 && (r.n != n0 || !err[0])) __builtin_trap();
        }
        rt_registry_sort(&r);
        for (int i = 0; i < r.n; i++)
            if (!r.tools[i].name || rt_registry_find(&r, r.tools[i].name) < 0) __builtin_trap();
        rt_registry_free(&r);
    }
    close(fd);
    return 0;
}
