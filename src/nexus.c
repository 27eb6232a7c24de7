/* nexus.c - public entry points that only forward to a module: tokenizer, version. */
#include "model/model.h"
#include "tok/tok.h"

const char *nx_version(void) {
#define NX_STR2(x) #x
#define NX_STR(x) NX_STR2(x)
    return NX_STR(NX_VERSION_MAJOR) "." NX_STR(NX_VERSION_MINOR) "." NX_STR(NX_VERSION_PATCH);
}

nx_token nx_token_bos(const nx_model *m) { return vocab_bos(m->vocab); }
nx_token nx_token_eos(const nx_model *m) { return vocab_eos(m->vocab); }
bool nx_token_is_eog(const nx_model *m, nx_token t) { return vocab_is_eog(m->vocab, t); }

int32_t nx_tokenize(const nx_model *m, const char *text, size_t text_len, nx_token *tokens,
                    int32_t n_max, bool add_special, bool parse_special) {
    return vocab_tokenize(m->vocab, text, text_len, tokens, n_max, add_special, parse_special);
}

int32_t nx_token_to_piece(const nx_model *m, nx_token t, char *buf, int32_t len, bool special) {
    return vocab_token_to_piece(m->vocab, t, buf, len, special);
}
