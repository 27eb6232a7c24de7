/*
 * kvblock.c - fuzz target: the KV block file reader (src/kv/kvblock.c: header, shape, section
 * offsets, padding, checksum, fingerprint against a model, token range) with the input as the
 * whole file, verified once without a model and once against stories260K. The fuzz build
 * (FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION) skips only the checksum comparison, so mutations
 * get past it to the checks behind it.
 */
#include <stdlib.h>
#include <unistd.h>

#include "fuzz.h"
#include "nexus.h"

static volatile int64_t g_sink;

NX_FUZZ_TARGET(kvblock) {
    static nx_model *model;
    static int init;
    char err[600];
    if (!init) {
        init = 1;
        fuzz_quiet();
        char buf[512];
        const char *path = fuzz_shared_path("models/stories260K/stories260K.gguf", buf, sizeof buf);
        struct nx_model_params p = nx_model_default_params();
        if (path && nx_model_load(path, &p, &model, err, sizeof err) != NX_STATUS_OK) abort();
    }
    int fd;
    char path[64];
    if (fuzz_memfile(data, size, &fd, path, sizeof path) != 0) return 0;
    for (int with_model = 0; with_model < 2; with_model++) {
        if (with_model && !model) break;
        nx_kv_block *b = NULL;
        err[0] = 0;
        nx_status st = nx_kv_block_load(with_model ? model : NULL, path, &b, err, sizeof err);
        if (st != NX_STATUS_OK) {
            if (!err[0] || b) __builtin_trap();
            continue;
        }
        char desc[256];
        (void)nx_kv_block_desc(b, desc, sizeof desc);
        int32_t n = nx_kv_block_n_tokens(b);
        const nx_token *t = nx_kv_block_tokens(b);
        if (n < 1 || !t) __builtin_trap();
        for (int32_t i = 0; i < n; i++) g_sink += t[i]; /* every token readable */
        (void)nx_kv_block_m0(b);
        (void)nx_kv_block_type(b);
        nx_kv_block_free(b);
    }
    close(fd);
    return 0;
}
