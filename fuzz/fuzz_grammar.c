/*
 * fuzz_grammar.c - DESIGN: the grammar fuzz body (fuzz_grammar.h). The model and its grammar
 * vocabulary are loaded once and kept for the life of the process (reachable: no leak report).
 * Contract violations trap, so libFuzzer reports them as crashes.
 */
#include "fuzz_grammar.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c)) __builtin_trap();                                                                \
    } while (0)

static nx_model *g_model;
static nx_grammar_vocab *g_vocab;
static int g_loaded;

static const nx_grammar_vocab *vocab(void) {
    if (!g_loaded) {
        g_loaded = 1;
        fuzz_quiet();
        char buf[512], err[256];
        const char *path = fuzz_shared_path("models/stories260K/stories260K.gguf", buf, sizeof buf);
        struct nx_model_params p = nx_model_default_params();
        if (path) {
            if (nx_model_load(path, &p, &g_model, err, sizeof err) != NX_STATUS_OK) abort();
            if (nx_grammar_vocab_init(g_model, &g_vocab) != NX_STATUS_OK) abort();
        }
    }
    return g_vocab;
}

void fuzz_split_nul(const uint8_t *data, size_t size, size_t *a_len, const uint8_t **rest,
                    size_t *rest_len) {
    const uint8_t *z = size ? memchr(data, 0, size) : NULL;
    *a_len = z ? (size_t)(z - data) : size;
    *rest = z ? z + 1 : data + size;
    *rest_len = z ? size - *a_len - 1 : 0;
}

/* nx_grammar_print: -(length + 1) when the buffer is too small, then exactly the length (the
   text has no NUL: rule names and printed byte sets are escaped). */
static void check_print(const nx_grammar *g) {
    int32_t need = -nx_grammar_print(g, NULL, 0);
    CHECK(need >= 1);
    char *buf = malloc((size_t)need);
    CHECK(buf != NULL);
    CHECK(nx_grammar_print(g, buf, need) == need - 1);
    CHECK(strlen(buf) == (size_t)need - 1);
    free(buf);
}

void fuzz_grammar_drive(const nx_grammar *g, const uint8_t *script, size_t n) {
    check_print(g);
    const nx_grammar_vocab *v = vocab();
    if (!v) return;
    nx_grammar_matcher *m = NULL;
    nx_status st = nx_grammar_matcher_init(g, v, &m);
    if (st == NX_STATUS_NOMEM) return;
    CHECK(st == NX_STATUS_OK && m);
    enum { NV = 512 };
    uint64_t bits[(NV + 63) / 64];
    int steps = 0;
    for (size_t i = 0; i < n && steps < 96; i++, steps++) {
        uint8_t b = script[i];
        int op = b & 3, arg = b >> 2;
        if (op <= 1) {
            memset(bits, 0, sizeof bits);
            int32_t cnt = nx_grammar_matcher_mask(m, bits, op == 1);
            if (cnt == NX_STATUS_NOMEM) break;
            CHECK(cnt >= 0 && cnt <= NV);
            int32_t seen = 0;
            for (int t = 0; t < NV; t++) seen += (int32_t)((bits[t / 64] >> (t % 64)) & 1);
            CHECK(seen == cnt);
            if (cnt == 0) break;
            int32_t k = arg % cnt, pick = -1, bad = -1;
            for (int t = 0; t < NV; t++) {
                bool on = (bits[t / 64] >> (t % 64)) & 1;
                if (on && k-- == 0 && pick < 0) pick = t;
                if (!on && bad < 0) bad = t;
            }
            CHECK(pick >= 0);
            /* a partial mask (the work bound) may leave out allowed tokens */
            if (bad >= 0 && op == 0 && !nx_grammar_matcher_mask_partial(m)) {
                int64_t before = nx_grammar_matcher_completion_bytes(m);
                bool end = nx_grammar_matcher_can_end(m);
                CHECK(nx_grammar_matcher_accept(m, bad) == NX_STATUS_INVALID_ARG);
                CHECK(nx_grammar_matcher_completion_bytes(m) == before);
                CHECK(nx_grammar_matcher_can_end(m) == end);
            }
            st = nx_grammar_matcher_accept(m, pick);
            if (st == NX_STATUS_NOMEM) break;
            if (st == NX_STATUS_INVALID_ARG) {
                /* past 128 parses a mask may hold a refused token; the refusal makes the matcher
                   check tokens through the automaton: the next mask leaves it out */
                memset(bits, 0, sizeof bits);
                cnt = nx_grammar_matcher_mask(m, bits, op == 1);
                if (cnt == NX_STATUS_NOMEM) break;
                CHECK(cnt >= 0 && !((bits[pick / 64] >> (pick % 64)) & 1));
                continue;
            }
            CHECK(st == NX_STATUS_OK);
            if (nx_grammar_matcher_is_finished(m)) break;
        } else if (op == 2) {
            size_t k = (size_t)(arg % 8);
            if (k > n - i - 1) k = n - i - 1;
            st = nx_grammar_matcher_accept_text(m, (const char *)script + i + 1, k);
            CHECK(st == NX_STATUS_OK || st == NX_STATUS_INVALID_ARG || st == NX_STATUS_NOMEM);
            i += k;
        } else {
            int32_t r = nx_grammar_matcher_rollback(m, arg % 4);
            CHECK(r >= 0 && r <= arg % 4);
        }
        CHECK(nx_grammar_matcher_completion_bytes(m) >= -1);
    }
    nx_grammar_matcher_free(m);
}
