/*
 * gbnf.h - llama.cpp's GBNF grammar text into the grammar builder (gram.h).
 */
#ifndef NX_GBNF_H
#define NX_GBNF_H

#include "grammar/gram.h"

/* Parse text into b. internal: also accept %jstr{m,n} (used by the JSON-schema compiler).
 * Errors: FORMAT with "gbnf: LINE:COL: what" in err. Undefined rules are found by
 * gram_finish. */
nx_status gbnf_parse(struct gbuilder *b, const char *text, size_t len, bool internal,
                     struct nx_err *err);

#endif
