/*
 * gguf_model.c - fuzz target: the GGUF reader through nx_model_load (header, metadata, tensor
 * infos, hyperparameters, tokenizer metadata, weight binding). The input is the whole file,
 * loaded from an in-memory file once copied into memory and once memory-mapped; a model that
 * loads is asked its description and tokenizes a few bytes, then freed.
 */
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "nexus.h"

static void use_model(nx_model *m) {
    char buf[64];
    nx_token toks[32];
    (void)nx_model_desc(m);
    int32_t n = nx_tokenize(m, "Hello world, <s> 123", 20, toks, 32, true, true);
    for (int32_t i = 0; i < n; i++) (void)nx_token_to_piece(m, toks[i], buf, sizeof buf, true);
    (void)nx_token_to_piece(m, nx_token_bos(m), buf, sizeof buf, true);
    (void)nx_token_is_eog(m, nx_token_eos(m));
}

NX_FUZZ_TARGET(gguf_model) {
    static int init;
    if (!init) {
        fuzz_quiet();
        init = 1;
    }
    int fd;
    char path[64];
    if (fuzz_memfile(data, size, &fd, path, sizeof path) != 0) return 0;
    for (int mmap_mode = 0; mmap_mode < 2; mmap_mode++) {
        struct nx_model_params p = nx_model_default_params();
        p.use_mmap = mmap_mode;
        nx_model *m = NULL;
        char err[256] = "";
        nx_status st = nx_model_load(path, &p, &m, err, sizeof err);
        if (st == NX_STATUS_OK) {
            use_model(m);
            nx_model_free(m);
        } else if (!err[0]) {
            __builtin_trap(); /* every failure must name its problem */
        }
    }
    close(fd);
    return 0;
}
