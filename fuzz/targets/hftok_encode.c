/*
 * hftok_encode.c - fuzz target: the model2vec fixture's tokenizer.json (BERT normalizer,
 * WordPiece or Unigram as the fixture has it) encodes the input as text; every id must be in
 * range and name a piece, and the pre-tokenizer view must not fail where encoding worked.
 */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "fuzz.h"
#include "route/hftok.h"

NX_FUZZ_TARGET(hftok_encode) {
    static hf_tok *t;
    static int init;
    char err[400];
    if (!init) {
        init = 1;
        char buf[512];
        const char *path =
            fuzz_shared_path("models/model2vec-fixture/tokenizer.json", buf, sizeof buf);
        if (path && hf_tok_load(path, &t, err, sizeof err) != NX_STATUS_OK) abort();
    }
    if (!t) return 0;
    int32_t n_vocab = hf_tok_n_vocab(t);
    int32_t *ids = NULL;
    int n = hf_tok_encode(t, (const char *)data, size, &ids, err, sizeof err);
    for (int k = 0; k < n; k++)
        if (ids[k] < 0 || ids[k] >= n_vocab || !hf_tok_piece(t, ids[k])) __builtin_trap();
    nx_free(ids);
    /* the debug view takes a NUL-terminated string */
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char *pre = hf_tok_debug_pretokenize(t, text, err, sizeof err);
    nx_free(pre);
    free(text);
    return 0;
}
