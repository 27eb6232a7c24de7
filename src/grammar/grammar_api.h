/*
 * grammar_api.h - what the sampler needs from the public grammar objects (api.c).
 */
#ifndef NX_GRAMMAR_API_H
#define NX_GRAMMAR_API_H

#include "core/nx_base.h"

/* Token text with special tokens rendered (for trigger detection). */
const char *grammar_vocab_text(const nx_grammar_vocab *v, nx_token t, int32_t *len);
int32_t grammar_vocab_n(const nx_grammar_vocab *v);
nx_token grammar_vocab_first_eog(const nx_grammar_vocab *v);

#endif
