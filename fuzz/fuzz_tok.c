/*
 * fuzz_tok.c - DESIGN: the tokenizer fuzz body (fuzz_tok.h). Keeps one loaded model per
 * vocabulary path for the life of the process (static table, never freed: reachable, so no
 * leak report). Contract violations trap, so libFuzzer reports them as crashes.
 */
#include "fuzz_tok.h"

#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "nexus.h"

#define CHECK(c) \
    do { \
        if (!(c)) __builtin_trap(); \
    } while (0)

struct loaded {
    const char *rel;
    nx_model *m;
};
static struct loaded g_models[16];

static nx_model *model_for(const char *rel) {
    for (int i = 0; i < 16; i++) {
        if (g_models[i].rel == rel) return g_models[i].m;
        if (!g_models[i].rel) {
            char buf[512];
            const char *path = fuzz_shared_path(rel, buf, sizeof buf);
            nx_model *m = NULL;
            struct nx_model_params p = nx_model_default_params();
            fuzz_quiet();
            if (path) {
                char err[256];
                if (nx_model_load(path, &p, &m, err, sizeof err) != NX_STATUS_OK) abort();
            }
            g_models[i] = (struct loaded){rel, m};
            return m;
        }
    }
    abort();
}

/* Decodes t into *buf (grown as needed); returns the length. Checks the size contract. */
static int32_t piece(const nx_model *m, nx_token t, char **buf, int32_t *cap, bool special) {
    int32_t n = nx_token_to_piece(m, t, *buf, *cap, special);
    if (n < 0) {
        int32_t need = -n;
        CHECK(need > *cap);
        char *nb = realloc(*buf, (size_t)need);
        CHECK(nb != NULL);
        *buf = nb;
        *cap = need;
        n = nx_token_to_piece(m, t, *buf, *cap, special);
        CHECK(n == need);
    }
    CHECK(n <= *cap);
    return n;
}

static bool valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07;
        } else {
            return false;
        }
        for (size_t j = 1; j <= k; j++) {
            if (i + j >= n || (s[i + j] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += k + 1;
    }
    return true;
}

int fuzz_tok_one(const char *vocab_rel, bool roundtrip, const uint8_t *data, size_t size) {
    nx_model *m = model_for(vocab_rel);
    if (!m || size < 1) return 0;
    uint8_t flags = data[0];
    bool add_special = flags & 1, parse_special = flags & 2, render = flags & 4;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int32_t n_vocab = nx_model_n_vocab(m);

    int32_t cap = (int32_t)(len < 4 ? 8 : 2 * len + 8);
    nx_token *toks = malloc(sizeof *toks * (size_t)cap);
    CHECK(toks != NULL);
    int32_t n = nx_tokenize(m, text, len, toks, cap, add_special, parse_special);
    CHECK(n != INT32_MIN);
    if (n < 0) { /* more tokens than 2 per byte: possible only with added BOS/EOS */
        cap = -n;
        nx_token *nt = realloc(toks, sizeof *toks * (size_t)cap);
        CHECK(nt != NULL);
        toks = nt;
        n = nx_tokenize(m, text, len, toks, cap, add_special, parse_special);
        CHECK(n == cap);
    }
    if (n > 0) { /* a buffer one short must report the count needed */
        nx_token *small = malloc(sizeof *small * (size_t)n);
        CHECK(small != NULL);
        int32_t r = nx_tokenize(m, text, len, small, n - 1, add_special, parse_special);
        CHECK(r == -n);
        free(small);
    }
    int32_t pcap = 4;
    char *pbuf = malloc((size_t)pcap);
    CHECK(pbuf != NULL);
    char *out = malloc(len * 8 + 64);
    size_t olen = 0;
    bool fits = true;
    for (int32_t i = 0; i < n; i++) {
        CHECK(toks[i] >= 0 && toks[i] < n_vocab);
        int32_t k = piece(m, toks[i], &pbuf, &pcap, render);
        if (olen + (size_t)k <= len * 8 + 64) {
            memcpy(out + olen, pbuf, (size_t)k);
            olen += (size_t)k;
        } else {
            fits = false;
        }
    }
    if (roundtrip && (flags & 8) && !add_special && !parse_special && fits &&
        valid_utf8(data + 1, len)) {
        CHECK(olen == len && memcmp(out, text, len) == 0);
    }
    /* the bytes as arbitrary token ids */
    for (size_t i = 0; i + 4 <= len && i < 4096; i += 4) {
        int32_t t;
        memcpy(&t, text + i, 4);
        (void)piece(m, t, &pbuf, &pcap, render);
        (void)piece(m, t % (n_vocab + 1), &pbuf, &pcap, !render);
        (void)nx_token_is_eog(m, t);
    }
    free(out);
    free(pbuf);
    free(toks);
    return 0;
}
