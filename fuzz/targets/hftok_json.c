/*
 * hftok_json.c - fuzz target: a Hugging Face tokenizer.json (src/route/hftok.c: model,
 * normalizers, pre-tokenizers, added tokens) given as the whole input; a tokenizer that loads
 * encodes a few fixed strings, its pre-tokenizer output is taken, and every id is checked in
 * range.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "route/hftok.h"

static const char *const texts[] = {
    "Hello, world! Tokenize THIS: caf\xc3\xa9 123 [UNK] <s>",
    "  \t\n  ",
    "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c unaffable",
    "a",
    "",
};

NX_FUZZ_TARGET(hftok_json) {
    int fd;
    char path[64], err[400] = "";
    if (fuzz_memfile(data, size, &fd, path, sizeof path) != 0) return 0;
    hf_tok *t = NULL;
    hf_tok_load(path, &t, err, sizeof err);
    close(fd);
    if (!t) {
        if (!err[0]) __builtin_trap();
        return 0;
    }
    int32_t n_vocab = hf_tok_n_vocab(t);
    (void)hf_tok_median_token_chars(t);
    (void)hf_tok_piece(t, hf_tok_unk_id(t));
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t *ids = NULL;
        int n = hf_tok_encode(t, texts[i], strlen(texts[i]), &ids, err, sizeof err);
        for (int k = 0; k < n; k++)
            if (ids[k] < 0 || ids[k] >= n_vocab || !hf_tok_piece(t, ids[k])) __builtin_trap();
        nx_free(ids);
        char *pre = hf_tok_debug_pretokenize(t, texts[i], err, sizeof err);
        nx_free(pre);
    }
    hf_tok_free(t);
    return 0;
}
