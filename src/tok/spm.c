/*
 * spm.c - DESIGN: the SentencePiece-style tokenizer of Llama-1/2 GGUF vocabularies
 * (tokenizer.ggml.model = "llama"), with the same results as llama.cpp's llm_tokenizer_spm.
 *
 *   1. Escape: every ' ' becomes "▁" (U+2581); with_prefix puts one "▁" in front.
 *   2. Split the escaped text into UTF-8 characters; each byte of an invalid sequence is a
 *      symbol of its own (llama.cpp lets a bad lead byte swallow the next bytes, spaces
 *      included; for valid UTF-8 the two agree). Symbols form a doubly linked list over the
 *      text, so merging two symbols is O(1).
 *   3. Every adjacent pair whose concatenation is a vocabulary token is a candidate, keyed by
 *      that token's score. Repeatedly take the highest-scoring candidate (ties: leftmost),
 *      skip it if either side has changed since it was queued (sizes no longer add up), merge,
 *      and queue the two new pairs around the merged symbol. O(n log n) for n characters.
 *   4. Emit each remaining symbol's token; a symbol that is not a token (only single
 *      characters can be) falls back to one <0xNN> token per byte, else the 1-byte token, else
 *      UNK (dropped when the vocabulary has no UNK).
 * Per-call memory only: thread-safe on a shared vocab.
 */
#include <string.h>

#include "core/alloc.h"
#include "tok/tok_impl.h"

struct spm_sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of the escaped text; n == 0 once merged into the left neighbour */
};

/* Queue the pair (left, right) when their concatenation is a token. */
static bool try_add(const struct nx_vocab *v, const char *buf, const struct spm_sym *syms,
                    int32_t left, int32_t right, struct tok_heap *heap) {
    if (left < 0 || right < 0) return true;
    uint32_t n = syms[left].n + syms[right].n;
    nx_token id = tok_find(v, buf + syms[left].off, n);
    if (id < 0) return true;
    struct tok_bigram b = {
        .prio = v->scores[id], .left = left, .right = right, .size = n, .id = id};
    return tok_heap_push(heap, b);
}

static void emit_symbol(const struct nx_vocab *v, const char *s, uint32_t n,
                        struct tok_out *out) {
    nx_token id = tok_find(v, s, n);
    if (id >= 0) {
        tok_out_push(out, id);
        return;
    }
    for (uint32_t i = 0; i < n; i++) {
        nx_token b = v->byte_tok[(unsigned char)s[i]];
        if (b < 0) b = v->unk;
        if (b >= 0) tok_out_push(out, b);
    }
}

void spm_tokenize(const struct nx_vocab *v, const char *text, size_t n, bool with_prefix,
                  struct tok_out *out) {
    static const char k_space[3] = {'\xe2', '\x96', '\x81'};
    if (out->oom) return;
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++) spaces += text[i] == ' ';
    size_t blen = (with_prefix ? 3 : 0) + n + 2 * spaces;
    if (blen == 0) return;
    if (blen > UINT32_MAX / 2) {
        out->oom = true; /* fragments over 2 GiB are not supported */
        return;
    }
    char *buf = nx_malloc(blen);
    struct spm_sym *syms = nx_malloc(blen * sizeof *syms);
    struct tok_heap heap = {0};
    if (!buf || !syms) goto oom;

    size_t p = 0;
    if (with_prefix) {
        memcpy(buf, k_space, 3);
        p = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (text[i] == ' ') {
            memcpy(buf + p, k_space, 3);
            p += 3;
        } else {
            buf[p++] = text[i];
        }
    }

    int32_t n_syms = 0;
    for (size_t off = 0; off < blen;) {
        uint32_t cp;
        size_t len = tok_utf8_decode(buf + off, blen - off, &cp);
        syms[n_syms] = (struct spm_sym){n_syms - 1, off + len == blen ? -1 : n_syms + 1,
                                        (uint32_t)off, (uint32_t)len};
        n_syms++;
        off += len;
    }

    for (int32_t i = 1; i < n_syms; i++)
        if (!try_add(v, buf, syms, i - 1, i, &heap)) goto oom;

    struct tok_bigram b;
    while (tok_heap_pop(&heap, &b)) {
        struct spm_sym *l = &syms[b.left], *r = &syms[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) syms[r->next].prev = b.left;
        if (!try_add(v, buf, syms, l->prev, b.left, &heap) ||
            !try_add(v, buf, syms, b.left, l->next, &heap))
            goto oom;
    }

    for (int32_t i = 0; i >= 0; i = syms[i].next) emit_symbol(v, buf + syms[i].off, syms[i].n, out);

    tok_heap_free(&heap);
    nx_free(syms);
    nx_free(buf);
    return;
oom:
    out->oom = true;
    tok_heap_free(&heap);
    nx_free(syms);
    nx_free(buf);
}
