/*
 * schema_grammar.c - fuzz target: the JSON-schema compiler (src/grammar/schema.c) and the
 * grammar engine behind it. Input: a flag byte (bit 0: BFCL type names, bit 1: caps on
 * strings and arrays), the schema text up to the first NUL, then a script that drives the
 * compiled grammar's matcher (fuzz_grammar.h). A schema is compiled or refused with a status
 * and a message (never both, never neither); the GBNF it compiled to is kept (nx_grammar_source).
 */
#include <string.h>

#include "fuzz.h"
#include "fuzz_grammar.h"

NX_FUZZ_TARGET(schema_grammar) {
    if (size < 1) return 0;
    uint8_t flags = data[0];
    size_t n;
    const uint8_t *script;
    size_t ns;
    fuzz_split_nul(data + 1, size - 1, &n, &script, &ns);
    struct nx_json_schema_params p = nx_json_schema_default_params();
    p.bfcl_types = flags & 1;
    if (flags & 2) {
        p.max_string_chars = 1 + (flags >> 4);
        p.max_items = 1 + (flags >> 5);
    }
    nx_grammar *g = NULL;
    char err[512] = "";
    nx_status st = nx_grammar_from_json_schema((const char *)data + 1, n, &p, &g, err, sizeof err);
    if (st != NX_STATUS_OK) {
        if (g || !err[0]) __builtin_trap();
        return 0;
    }
    if (!g || !nx_grammar_source(g)) __builtin_trap();
    fuzz_grammar_drive(g, script, ns);
    nx_grammar_free(g);
    return 0;
}
