/*
 * tok_impl.h - internals shared by the tokenizer files (vocab.c, spm.c, bpe.c, wpm.c).
 *
 * A vocab is built once by vocab_load (vocab.c) and is read-only afterwards. Every tokenizer
 * keeps its per-call state (symbols, heaps, match data) on the caller's side, so concurrent
 * calls on one vocab are safe. The helpers below (string->id map, growable token list, a
 * max-heap of bigram candidates, UTF-8 decoding) are shared by the three algorithms.
 */
#ifndef NX_TOK_IMPL_H
#define NX_TOK_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"
#include "tok/tok.h"

struct gguf_file;

/* GGUF tokenizer.ggml.token_type values (same numbering as llama.cpp / sentencepiece). */
enum tok_type {
    TOK_TYPE_UNDEFINED = 0,
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

enum vocab_kind { VOCAB_SPM, VOCAB_BPE, VOCAB_WPM };

/* Open-addressing hash map from a token's text to its id. Slots hold id+1 (0 = empty). */
struct tok_map {
    uint32_t *slots;
    uint32_t mask; /* capacity - 1, capacity a power of two */
};

/* Byte-level BPE state (bpe.c); opaque to the other files. */
struct bpe_state;

struct nx_vocab {
    enum vocab_kind kind;
    int32_t n_tokens;

    /* token texts, NUL-terminated, in one pool; text i = pool + off[i], len[i] bytes */
    char *pool;
    uint32_t *off;
    uint32_t *len;
    float *scores;       /* per token, 0 when the file has none */
    uint8_t *type;       /* enum tok_type per token (EOG texts forced to CONTROL) */
    uint8_t *eog;        /* 1 for end-of-generation tokens */
    uint32_t max_len;    /* longest token text in bytes */
    struct tok_map map;  /* text -> id; for duplicate texts the highest id wins (as llama.cpp) */

    /* rendered pieces (what token_to_piece gives with special = true) */
    char *piece_pool;
    uint32_t *piece_off;
    uint32_t *piece_len;

    /* special-token matching: ids of CONTROL / USER_DEFINED / UNKNOWN tokens with non-empty
     * text, longest text first (ties: lower id first) */
    int32_t *special;
    int32_t n_special;

    nx_token bos, eos, unk, sep, pad, cls, mask, eot, eom;
    bool add_bos, add_eos, add_sep;
    bool add_space_prefix; /* SPM */

    nx_token byte_tok[256]; /* SPM/WPM byte fallback: <0xNN> (or the 1-byte text), -1 if none */

    struct bpe_state *bpe; /* BPE only */
};

/* ---- vocab.c helpers ---- */

uint32_t tok_hash(const char *s, size_t n);
/* Id of the token whose text is s[0..n), or -1. */
nx_token tok_find(const struct nx_vocab *v, const char *s, size_t n);

/* Growable token list for one tokenize call. oom is sticky: pushes after a failure are dropped
 * and the caller reports INT32_MIN. */
struct tok_out {
    nx_token *ids;
    size_t n, cap;
    bool oom;
};
void tok_out_push(struct tok_out *o, nx_token t);

/* Max-heap of merge candidates: higher prio first, then lower left index (so equal-priority
 * merges apply left to right). size is the merged symbol's byte length (a queued candidate is
 * stale when the two symbols no longer add up to it); id is the merged token (BPE). */
struct tok_bigram {
    double prio;
    int32_t left, right;
    uint32_t size;
    nx_token id;
};
struct tok_heap {
    struct tok_bigram *a;
    size_t n, cap;
};
/* false on allocation failure */
bool tok_heap_push(struct tok_heap *h, struct tok_bigram b);
bool tok_heap_pop(struct tok_heap *h, struct tok_bigram *out);
void tok_heap_free(struct tok_heap *h);

/* Length of the UTF-8 sequence starting with byte c as its lead byte says (1 for continuation
 * and invalid bytes), not checked against the following bytes. */
static inline size_t tok_utf8_len(unsigned char c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}
/* Decode one code point from s[0..n) (n >= 1). Invalid or truncated sequences decode as
 * U+FFFD consuming one byte. Returns the bytes consumed. */
size_t tok_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encode cp as UTF-8 into buf (4 bytes room); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *buf);

/* ---- per-algorithm entry points: tokenize one raw-text fragment, appending to out ---- */

/* SPM: text is the raw fragment; with_prefix adds the "▁" space prefix. */
void spm_tokenize(const struct nx_vocab *v, const char *text, size_t n, bool with_prefix,
                  struct tok_out *out);

/* BPE: build the merge table and the pre-tokenizer from metadata (tokenizer.ggml.merges,
 * tokenizer.ggml.pre). Called by vocab_load after the token texts and map exist. */
nx_status bpe_init(struct nx_vocab *v, const struct gguf_file *f, struct nx_err *err);
void bpe_free(struct bpe_state *b);
/* false on an internal failure (allocation, regex engine error) */
bool bpe_tokenize(const struct nx_vocab *v, const char *text, size_t n, struct tok_out *out);
/* Render a byte-level BPE token text as the bytes it stands for; returns the length written to
 * dst (at most n bytes: decoding never grows the text). */
size_t bpe_decode_text(const char *s, size_t n, char *dst);

/* WPM: BERT BasicTokenizer normalization + WordPiece. */
void wpm_tokenize(const struct nx_vocab *v, const char *text, size_t n, struct tok_out *out);

#endif
