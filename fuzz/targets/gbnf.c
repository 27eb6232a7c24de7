/*
 * gbnf.c - fuzz target: the GBNF parser (src/grammar/gbnf.c) and the grammar engine. Input:
 * the grammar text up to the first NUL (root rule "root"), then a script that drives the
 * compiled grammar's matcher (fuzz_grammar.h). A grammar is compiled or refused with a status
 * and a message naming line:column (never both, never neither).
 */
#include "fuzz.h"
#include "fuzz_grammar.h"

NX_FUZZ_TARGET(gbnf) {
    size_t n;
    const uint8_t *script;
    size_t ns;
    fuzz_split_nul(data, size, &n, &script, &ns);
    nx_grammar *g = NULL;
    char err[512] = "";
    nx_status st = nx_grammar_from_gbnf((const char *)data, n, NULL, &g, err, sizeof err);
    if (st != NX_STATUS_OK) {
        if (g || !err[0]) __builtin_trap();
        return 0;
    }
    if (!g) __builtin_trap();
    fuzz_grammar_drive(g, script, ns);
    nx_grammar_free(g);
    return 0;
}
