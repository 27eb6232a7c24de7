/*
 * wpm.c - DESIGN: BERT WordPiece (tokenizer.ggml.model = "bert"), reproducing the Hugging Face
 * BertNormalizer + BertPreTokenizer + WordPiece pipeline of uncased BERT models (bge, MiniLM).
 *
 * Normalization, per code point (invalid UTF-8 decodes as U+FFFD):
 *   - drop NUL, U+FFFD and control characters (general category C*, except \t \n \r);
 *   - whitespace (\t \n \r and the White_Space property) ends the current word;
 *   - CJK ideographs become words of their own;
 *   - otherwise canonical decomposition (NFD, via utf8proc), nonspacing marks (Mn) dropped
 *     ("strip accents"), then lowercase (utf8proc simple case mapping: special casings such as
 *     U+0130 differ from Python's full lowercase);
 *   - punctuation (ASCII punctuation or category P*) becomes a word of its own.
 * WordPiece, per word: a word of more than 100 characters is [UNK]; otherwise greedy longest
 * match from the left, where the first piece must be a word-initial token and the others
 * continuation tokens; if some position matches nothing, the whole word is [UNK].
 * GGUF stores the vocabulary the llama.cpp way: word-initial tokens carry a "▁" prefix and
 * continuation tokens lose their "##", so the lookup is of "▁" + word prefix first and of plain
 * substrings after that. Per-call memory only: thread-safe.
 */
#include <string.h>
#include <utf8proc.h>

#include "core/alloc.h"
#include "tok/tok_impl.h"
#include "tok/unichar.h"

#define MAX_WORD_CHARS 100

/* The CJK Unified Ideographs blocks BERT pads with spaces. */
static bool is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* The current word: "▁" + normalized UTF-8, built in buf. */
struct wpm_word {
    char *buf;
    size_t n, cap;
    size_t chars;
    bool oom;
};

static void word_reset(struct wpm_word *w) {
    memcpy(w->buf, "\xe2\x96\x81", 3);
    w->n = 3;
    w->chars = 0;
}

static void word_add(struct wpm_word *w, uint32_t cp) {
    if (w->n + 4 > w->cap) {
        size_t cap = w->cap * 2;
        char *p = nx_realloc(w->buf, cap);
        if (!p) {
            w->oom = true;
            return;
        }
        w->buf = p;
        w->cap = cap;
    }
    w->n += tok_utf8_encode(cp, w->buf + w->n);
    w->chars++;
}

/* WordPiece over the finished word, then start a new one. */
static void word_flush(const struct nx_vocab *v, struct wpm_word *w, struct tok_out *out) {
    if (w->chars == 0 || w->oom) return;
    const char *s = w->buf;
    size_t n = w->n;
    size_t start = out->n;
    bool bad = w->chars > MAX_WORD_CHARS;
    for (size_t i = 0; i < n && !bad;) {
        size_t j = NX_MIN(n, i + v->max_len);
        nx_token id = -1;
        for (; j > i; j--) {
            if (j < n && ((unsigned char)s[j] & 0xC0) == 0x80) continue; /* inside a char */
            id = tok_find(v, s + i, j - i);
            if (id >= 0) break;
        }
        if (id < 0) {
            bad = true;
            break;
        }
        tok_out_push(out, id);
        i = j;
    }
    if (bad) {
        if (!out->oom) out->n = start;
        if (v->unk >= 0) tok_out_push(out, v->unk);
    }
    word_reset(w);
}

void wpm_tokenize(const struct nx_vocab *v, const char *text, size_t n, struct tok_out *out) {
    if (out->oom || n == 0) return;
    struct wpm_word w = {.cap = 64};
    w.buf = nx_malloc(w.cap);
    if (!w.buf) {
        out->oom = true;
        return;
    }
    word_reset(&w);
    for (size_t i = 0; i < n && !w.oom;) {
        uint32_t cp;
        i += tok_utf8_decode(text + i, n - i, &cp);
        if (cp == 0 || cp == 0xFFFD || uc_is_control(cp)) continue;
        if (uc_is_space(cp)) {
            word_flush(v, &w, out);
            continue;
        }
        if (is_cjk(cp)) {
            word_flush(v, &w, out);
            word_add(&w, cp);
            word_flush(v, &w, out);
            continue;
        }
        utf8proc_int32_t dec[32];
        int last_boundclass = 0;
        utf8proc_ssize_t nd = utf8proc_decompose_char((utf8proc_int32_t)cp, dec, 32,
                                                      UTF8PROC_DECOMPOSE, &last_boundclass);
        if (nd < 0 || nd > 32) {
            dec[0] = (utf8proc_int32_t)cp;
            nd = 1;
        }
        for (utf8proc_ssize_t k = 0; k < nd; k++) {
            if (utf8proc_category(dec[k]) == UTF8PROC_CATEGORY_MN) continue;
            uint32_t c = (uint32_t)utf8proc_tolower(dec[k]);
            if (uc_is_punct(c)) {
                word_flush(v, &w, out);
                word_add(&w, c);
                word_flush(v, &w, out);
            } else {
                word_add(&w, c);
            }
        }
    }
    word_flush(v, &w, out);
    if (w.oom) out->oom = true;
    nx_free(w.buf);
}
