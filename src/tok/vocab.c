/*
 * vocab.c - DESIGN: loads the tokenizer.* metadata of a GGUF file into an immutable nx_vocab and
 * implements the public vocab_* entry points; the three algorithms live in spm.c, bpe.c, wpm.c.
 *
 * Loading copies everything it needs (the gguf_file may be closed afterwards) and validates
 * every key it reads: a key of the wrong type, an array whose length differs from the token
 * count, a token type outside 0..6 or a special-token id outside the vocabulary is
 * NX_STATUS_FORMAT with a message naming the key. The ids 0xFFFFFFFF (u32) and -1 (i32) mean
 * "no such token" (stories260K stores its absent separator/padding ids that way).
 * Deliberately lenient, like llama.cpp: an empty token text is accepted (it is stored but can
 * never be matched), duplicate texts map to the highest id, and a BYTE token whose text is not
 * "<0xNN>" renders as its text.
 *
 * Defaults when a key is absent (llama.cpp's, except where noted):
 *   llama (SPM): bos 1, eos 2, unk 0; add_bos yes, add_eos no, add_space_prefix yes
 *   gpt2 (BPE):  no bos/eos/unk (llama.cpp's placeholder 11 is not used); add_bos only for the
 *                Llama-3 pre-tokenizers; add_eos no
 *   bert (WPM):  cls 101 (also bos), unk 100, sep 102, pad 0, mask 103; add_special gives
 *                [CLS] ... [SEP]
 * Defaults outside the vocabulary are dropped (-1), unlike ids given explicitly.
 * End-of-generation tokens: eos, eot, eom, fim_pad/fim_rep/fim_sep, plus every token whose text
 * is one of the well-known end-of-turn texts ("<|eot_id|>", "<|im_end|>", "<|endoftext|>", ...);
 * those are forced to CONTROL type. eot, when absent, is the first such text found.
 *
 * Tokenizing: the input is first split into raw-text and special-token fragments as
 * llama.cpp's tokenizer_st_partition does: special texts are taken longest first, each one cut
 * out of every raw fragment left to right. USER_DEFINED tokens are always matched; CONTROL and
 * UNKNOWN tokens only with parse_special. Raw fragments go to the algorithm; special fragments
 * are emitted as their id. SPM adds its "▁" prefix to a raw fragment only at the start or
 * right after a special token. LSTRIP/RSTRIP attributes (only some HF models) are not modelled.
 *
 * Pieces (token_to_piece) are rendered once at load: SPM/WPM normal tokens with "▁" as space,
 * byte tokens as their byte, BPE tokens through the GPT-2 byte map; control/unknown tokens give
 * their text only when asked for special; unused/undefined tokens give nothing.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "gguf/gguf.h"
#include "tok/tok_impl.h"

#define KEY_MODEL "tokenizer.ggml.model"
#define KEY_TOKENS "tokenizer.ggml.tokens"
#define KEY_SCORES "tokenizer.ggml.scores"
#define KEY_TYPES "tokenizer.ggml.token_type"

/* ------------------------------------------------------------------------------------------
 * Small shared helpers: hashing, the text->id map, the token list, the heap, UTF-8.
 * ---------------------------------------------------------------------------------------- */

uint32_t tok_hash(const char *s, size_t n) {
    /* FNV-1a, then a final avalanche so the low bits (the slot index) are well mixed */
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    return h;
}

nx_token tok_find(const struct nx_vocab *v, const char *s, size_t n) {
    if (n > v->max_len) return -1;
    uint32_t i = tok_hash(s, n) & v->map.mask;
    for (;;) {
        uint32_t slot = v->map.slots[i];
        if (slot == 0) return -1;
        uint32_t id = slot - 1;
        if (v->len[id] == n && memcmp(v->pool + v->off[id], s, n) == 0) return (nx_token)id;
        i = (i + 1) & v->map.mask;
    }
}

/* Builds the map; duplicate texts keep the highest id (insertion in id order replaces). */
static bool map_build(struct nx_vocab *v) {
    uint32_t cap = 16;
    while (cap < (uint32_t)v->n_tokens * 2u) cap <<= 1;
    v->map.slots = nx_calloc(cap, sizeof *v->map.slots);
    if (!v->map.slots) return false;
    v->map.mask = cap - 1;
    for (int32_t id = 0; id < v->n_tokens; id++) {
        const char *s = v->pool + v->off[id];
        uint32_t n = v->len[id];
        if (n == 0) continue; /* never matched */
        uint32_t i = tok_hash(s, n) & v->map.mask;
        for (;;) {
            uint32_t slot = v->map.slots[i];
            if (slot == 0) {
                v->map.slots[i] = (uint32_t)id + 1;
                break;
            }
            uint32_t other = slot - 1;
            if (v->len[other] == n && memcmp(v->pool + v->off[other], s, n) == 0) {
                v->map.slots[i] = (uint32_t)id + 1;
                break;
            }
            i = (i + 1) & v->map.mask;
        }
    }
    return true;
}

void tok_out_push(struct tok_out *o, nx_token t) {
    if (o->oom) return;
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        nx_token *p = nx_realloc(o->ids, cap * sizeof *p);
        if (!p) {
            o->oom = true;
            return;
        }
        o->ids = p;
        o->cap = cap;
    }
    o->ids[o->n++] = t;
}

static bool bigram_before(const struct tok_bigram *a, const struct tok_bigram *b) {
    if (a->prio != b->prio) return a->prio > b->prio;
    return a->left < b->left;
}

bool tok_heap_push(struct tok_heap *h, struct tok_bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct tok_bigram *p = nx_realloc(h->a, cap * sizeof *p);
        if (!p) return false;
        h->a = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &h->a[parent])) break;
        h->a[i] = h->a[parent];
        i = parent;
    }
    h->a[i] = b;
    return true;
}

bool tok_heap_pop(struct tok_heap *h, struct tok_bigram *out) {
    if (h->n == 0) return false;
    *out = h->a[0];
    struct tok_bigram last = h->a[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && bigram_before(&h->a[c + 1], &h->a[c])) c++;
        if (!bigram_before(&h->a[c], &last)) break;
        h->a[i] = h->a[c];
        i = c;
    }
    if (n > 0) h->a[i] = last;
    return true;
}

void tok_heap_free(struct tok_heap *h) {
    nx_free(h->a);
    h->a = NULL;
    h->n = h->cap = 0;
}

size_t tok_utf8_decode(const char *str, size_t n, uint32_t *cp) {
    const unsigned char *s = (const unsigned char *)str;
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        *cp = 0xFFFD;
        return 1;
    }
    if (len > n) {
        *cp = 0xFFFD;
        return 1;
    }
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *cp = 0xFFFD;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = v;
    return len;
}

size_t tok_utf8_encode(uint32_t cp, char *buf) {
    unsigned char *b = (unsigned char *)buf;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp;
        return 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | (cp >> 6));
        b[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | (cp >> 12));
        b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    b[0] = (unsigned char)(0xF0 | (cp >> 18));
    b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    b[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ------------------------------------------------------------------------------------------
 * Loading
 * ---------------------------------------------------------------------------------------- */

static const char *text_of(const struct nx_vocab *v, nx_token t) { return v->pool + v->off[t]; }

/* Parses "<0xNN>" (either hex case); -1 when the text is not of that form. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int val = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        val = val * 16 + d;
    }
    return val;
}

/* Optional token-id key: absent leaves *id alone; 0xFFFFFFFF or a negative i32 -1 means none. */
static nx_status read_token_id(const struct gguf_file *f, const char *key, int32_t n_tokens,
                               nx_token *id, struct nx_err *err) {
    if (gguf_find_key(f, key) < 0) return NX_STATUS_OK;
    uint32_t u;
    int32_t i;
    if (gguf_get_u32(f, key, &u)) {
        if (u == UINT32_MAX) {
            *id = -1;
            return NX_STATUS_OK;
        }
        if (u >= (uint32_t)n_tokens)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: token id %u out of range (%d tokens)",
                              key, u, n_tokens);
        *id = (nx_token)u;
        return NX_STATUS_OK;
    }
    if (gguf_get_i32(f, key, &i)) {
        if (i == -1) {
            *id = -1;
            return NX_STATUS_OK;
        }
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: token id %d out of range (%d tokens)", key,
                          i, n_tokens);
    }
    return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected an integer token id", key);
}

static nx_status read_flag(const struct gguf_file *f, const char *key, bool *flag,
                           struct nx_err *err) {
    if (gguf_find_key(f, key) < 0) return NX_STATUS_OK;
    if (!gguf_get_bool(f, key, flag))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected a bool", key);
    return NX_STATUS_OK;
}

/* Copies the token texts into one pool and reads scores and types. */
static nx_status load_tokens(struct nx_vocab *v, const struct gguf_file *f, struct nx_err *err) {
    enum gguf_vtype et;
    uint64_t n;
    const void *data;
    if (gguf_find_key(f, KEY_TOKENS) < 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: missing", KEY_TOKENS);
    if (!gguf_get_arr(f, KEY_TOKENS, &et, &n, &data) || et != GGUF_VTYPE_STRING)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected an array of strings", KEY_TOKENS);
    if (n == 0 || n >= (uint64_t)INT32_MAX)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: bad token count %llu", KEY_TOKENS,
                          (unsigned long long)n);
    v->n_tokens = (int32_t)n;

    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        if (!gguf_arr_str(f, KEY_TOKENS, i, &s, &len))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s[%llu]: unreadable", KEY_TOKENS,
                              (unsigned long long)i);
        total += (uint64_t)len + 1;
        if (total > UINT32_MAX)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: token texts exceed 4 GiB", KEY_TOKENS);
    }
    v->pool = nx_malloc((size_t)total);
    v->off = nx_malloc((size_t)n * sizeof *v->off);
    v->len = nx_malloc((size_t)n * sizeof *v->len);
    v->scores = nx_calloc((size_t)n, sizeof *v->scores);
    v->type = nx_malloc((size_t)n);
    v->eog = nx_calloc((size_t)n, 1);
    if (!v->pool || !v->off || !v->len || !v->scores || !v->type || !v->eog)
        return nx_err_set(err, NX_STATUS_NOMEM, "tokenizer: out of memory for %llu tokens",
                          (unsigned long long)n);
    uint32_t pos = 0, n_empty = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        gguf_arr_str(f, KEY_TOKENS, i, &s, &len);
        if (len) memcpy(v->pool + pos, s, len);
        v->pool[pos + len] = '\0';
        v->off[i] = pos;
        v->len[i] = (uint32_t)len;
        if (len > v->max_len) v->max_len = (uint32_t)len;
        if (len == 0) n_empty++;
        v->type[i] = TOK_TYPE_NORMAL;
        pos += (uint32_t)len + 1;
    }
    if (n_empty) NX_LOGW("tokenizer: %u empty token text(s) in %s", n_empty, KEY_TOKENS);

    if (gguf_find_key(f, KEY_SCORES) >= 0) {
        uint64_t ns;
        if (!gguf_get_arr(f, KEY_SCORES, &et, &ns, &data) || et == GGUF_VTYPE_STRING ||
            et == GGUF_VTYPE_ARRAY || et == GGUF_VTYPE_BOOL)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected a numeric array", KEY_SCORES);
        if (ns != n)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: %llu entries for %llu tokens",
                              KEY_SCORES, (unsigned long long)ns, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            double d;
            if (!gguf_arr_f64(f, KEY_SCORES, i, &d) || isnan(d))
                return nx_err_set(err, NX_STATUS_FORMAT, "%s[%llu]: not a number", KEY_SCORES,
                                  (unsigned long long)i);
            v->scores[i] = (float)d;
        }
    }
    if (gguf_find_key(f, KEY_TYPES) >= 0) {
        uint64_t nt;
        if (!gguf_get_arr(f, KEY_TYPES, &et, &nt, &data) || et == GGUF_VTYPE_STRING ||
            et == GGUF_VTYPE_ARRAY || et == GGUF_VTYPE_F32 || et == GGUF_VTYPE_F64 ||
            et == GGUF_VTYPE_BOOL)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected an integer array", KEY_TYPES);
        if (nt != n)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: %llu entries for %llu tokens",
                              KEY_TYPES, (unsigned long long)nt, (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            int64_t t;
            if (!gguf_arr_i64(f, KEY_TYPES, i, &t) || t < 0 || t > TOK_TYPE_BYTE)
                return nx_err_set(err, NX_STATUS_FORMAT, "%s[%llu]: bad token type", KEY_TYPES,
                                  (unsigned long long)i);
            v->type[i] = (uint8_t)t;
        }
    }
    return NX_STATUS_OK;
}

/* End-of-turn texts that mark a token as end-of-generation (checked in this order for eot). */
static const char *const k_eog_texts[] = {
    "<|eot_id|>",    "<|im_end|>", "<|end|>", "<end_of_turn>",   "<|endoftext|>",
    "<|end_of_text|>", "<EOT>",    "_<EOT>",  "<end_of_utterance>", "<|return|>",
    "<|call|>",      "<|eom_id|>",
};

static nx_status load_specials(struct nx_vocab *v, const struct gguf_file *f,
                               struct nx_err *err) {
    int32_t n = v->n_tokens;
    nx_token fim_pad = -1, fim_rep = -1, fim_sep = -1;
    v->bos = v->eos = v->unk = v->sep = v->pad = v->cls = v->mask = v->eot = v->eom = -1;
    switch (v->kind) {
    case VOCAB_SPM:
        v->bos = 1, v->eos = 2, v->unk = 0;
        v->add_bos = true, v->add_eos = false, v->add_space_prefix = true;
        break;
    case VOCAB_BPE:
        v->add_bos = false, v->add_eos = false; /* bpe_init sets add_bos for Llama-3 */
        break;
    case VOCAB_WPM:
        v->cls = 101, v->unk = 100, v->sep = 102, v->pad = 0, v->mask = 103;
        v->add_bos = true, v->add_eos = false, v->add_sep = true;
        break;
    }
    nx_token *defaults[] = {&v->bos, &v->eos, &v->unk, &v->sep, &v->pad, &v->cls, &v->mask};
    for (size_t i = 0; i < NX_ARRAY_LEN(defaults); i++)
        if (*defaults[i] >= n) *defaults[i] = -1;

    struct {
        const char *key;
        nx_token *id;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos},
        {"tokenizer.ggml.eos_token_id", &v->eos},
        {"tokenizer.ggml.unknown_token_id", &v->unk},
        {"tokenizer.ggml.seperator_token_id", &v->sep}, /* sic: the GGUF key is misspelt */
        {"tokenizer.ggml.padding_token_id", &v->pad},
        {"tokenizer.ggml.cls_token_id", &v->cls},
        {"tokenizer.ggml.mask_token_id", &v->mask},
        {"tokenizer.ggml.eot_token_id", &v->eot},
        {"tokenizer.ggml.eom_token_id", &v->eom},
        {"tokenizer.ggml.fim_pad_token_id", &fim_pad},
        {"tokenizer.ggml.fim_rep_token_id", &fim_rep},
        {"tokenizer.ggml.fim_sep_token_id", &fim_sep},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(ids); i++) {
        nx_status st = read_token_id(f, ids[i].key, n, ids[i].id, err);
        if (st != NX_STATUS_OK) return st;
    }
    if (v->kind == VOCAB_WPM && gguf_find_key(f, "tokenizer.ggml.bos_token_id") < 0)
        v->bos = v->cls;
    if (v->kind == VOCAB_WPM && v->cls < 0) v->cls = v->bos;

    nx_status st;
    if ((st = read_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err)) != NX_STATUS_OK ||
        (st = read_flag(f, "tokenizer.ggml.add_eos_token", &v->add_eos, err)) != NX_STATUS_OK ||
        (st = read_flag(f, "tokenizer.ggml.add_sep_token", &v->add_sep, err)) != NX_STATUS_OK ||
        (st = read_flag(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, err)) !=
            NX_STATUS_OK)
        return st;

    /* end of generation */
    for (size_t i = 0; i < NX_ARRAY_LEN(k_eog_texts); i++) {
        nx_token t = tok_find(v, k_eog_texts[i], strlen(k_eog_texts[i]));
        if (t < 0) continue;
        bool is_eom = strcmp(k_eog_texts[i], "<|eom_id|>") == 0;
        if (is_eom && v->eom < 0) v->eom = t;
        if (!is_eom && v->eot < 0) v->eot = t;
        v->eog[t] = 1;
        v->type[t] = TOK_TYPE_CONTROL;
    }
    nx_token eogs[] = {v->eos, v->eot, v->eom, fim_pad, fim_rep, fim_sep};
    for (size_t i = 0; i < NX_ARRAY_LEN(eogs); i++)
        if (eogs[i] >= 0) v->eog[eogs[i]] = 1;
    return NX_STATUS_OK;
}

/* qsort has no context argument: sort (len, id) pairs, longest first, then lower id */
struct len_id {
    uint32_t len;
    int32_t id;
};
static int cmp_len_id(const void *a, const void *b) {
    const struct len_id *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static bool build_special_list(struct nx_vocab *v) {
    int32_t count = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint8_t t = v->type[i];
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) &&
            v->len[i] > 0)
            count++;
    }
    if (count == 0) return true;
    struct len_id *tmp = nx_malloc((size_t)count * sizeof *tmp);
    v->special = nx_malloc((size_t)count * sizeof *v->special);
    if (!tmp || !v->special) {
        nx_free(tmp);
        return false;
    }
    int32_t k = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        uint8_t t = v->type[i];
        if ((t == TOK_TYPE_CONTROL || t == TOK_TYPE_USER_DEFINED || t == TOK_TYPE_UNKNOWN) &&
            v->len[i] > 0)
            tmp[k++] = (struct len_id){v->len[i], i};
    }
    qsort(tmp, (size_t)count, sizeof *tmp, cmp_len_id);
    for (int32_t i = 0; i < count; i++) v->special[i] = tmp[i].id;
    v->n_special = count;
    nx_free(tmp);
    return true;
}

static void build_byte_tokens(struct nx_vocab *v) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char buf[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
        nx_token t = tok_find(v, buf, 6);
        if (t < 0) {
            char c = (char)b;
            t = tok_find(v, &c, 1);
        }
        v->byte_tok[b] = t;
    }
}

/* A normal token's bytes: byte-level decoding (BPE) or "▁" as space (SPM, WPM). */
static uint32_t render_normal(const struct nx_vocab *v, const char *s, uint32_t n, char *dst) {
    if (v->kind == VOCAB_BPE) return (uint32_t)bpe_decode_text(s, n, dst);
    uint32_t out = 0;
    for (uint32_t j = 0; j < n;) {
        if (j + 3 <= n && memcmp(s + j, "\xe2\x96\x81", 3) == 0) {
            dst[out++] = ' ';
            j += 3;
        } else {
            dst[out++] = s[j++];
        }
    }
    return out;
}

/* Renders every token's piece (as for special = true) into one pool. */
static bool build_pieces(struct nx_vocab *v) {
    size_t total = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) total += v->len[i];
    v->piece_pool = nx_malloc(total ? total : 1);
    v->piece_off = nx_malloc((size_t)v->n_tokens * sizeof *v->piece_off);
    v->piece_len = nx_malloc((size_t)v->n_tokens * sizeof *v->piece_len);
    if (!v->piece_pool || !v->piece_off || !v->piece_len) return false;
    uint32_t pos = 0;
    for (int32_t i = 0; i < v->n_tokens; i++) {
        const char *s = text_of(v, i);
        uint32_t n = v->len[i];
        char *dst = v->piece_pool + pos;
        uint32_t out = 0;
        switch (v->type[i]) {
        case TOK_TYPE_CONTROL:
        case TOK_TYPE_UNKNOWN:
        case TOK_TYPE_USER_DEFINED:
            memcpy(dst, s, n);
            out = n;
            break;
        case TOK_TYPE_BYTE:
            if (v->kind != VOCAB_BPE && parse_byte_token(s, n) >= 0) {
                dst[0] = (char)parse_byte_token(s, n);
                out = 1;
                break;
            }
            out = render_normal(v, s, n, dst); /* not <0xNN>: render as a normal token */
            break;
        case TOK_TYPE_NORMAL:
            out = render_normal(v, s, n, dst);
            break;
        default: /* unused, undefined: nothing */
            break;
        }
        v->piece_off[i] = pos;
        v->piece_len[i] = out;
        pos += out;
    }
    return true;
}

nx_status vocab_load(const struct gguf_file *f, struct nx_vocab **out, struct nx_err *err) {
    *out = NULL;
    const char *model;
    size_t model_len;
    if (gguf_find_key(f, KEY_MODEL) < 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: missing", KEY_MODEL);
    if (!gguf_get_str(f, KEY_MODEL, &model, &model_len))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: expected a string", KEY_MODEL);

    enum vocab_kind kind;
    if (model_len == 5 && memcmp(model, "llama", 5) == 0) {
        kind = VOCAB_SPM;
    } else if (model_len == 4 && memcmp(model, "gpt2", 4) == 0) {
        kind = VOCAB_BPE;
    } else if (model_len == 4 && memcmp(model, "bert", 4) == 0) {
        kind = VOCAB_WPM;
    } else {
        return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                          "%s: tokenizer '%.*s' is not supported (llama, gpt2, bert are)",
                          KEY_MODEL, (int)NX_MIN(model_len, 64), model);
    }

    struct nx_vocab *v = nx_calloc(1, sizeof *v);
    if (!v) return nx_err_set(err, NX_STATUS_NOMEM, "tokenizer: out of memory");
    v->kind = kind;
    nx_status st = load_tokens(v, f, err);
    if (st != NX_STATUS_OK) goto fail;
    if (!map_build(v)) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    st = load_specials(v, f, err);
    if (st != NX_STATUS_OK) goto fail;
    if (kind == VOCAB_BPE) {
        st = bpe_init(v, f, err);
        if (st != NX_STATUS_OK) goto fail;
        /* the add_bos default depends on the pre-tokenizer: read the key again to override */
        st = read_flag(f, "tokenizer.ggml.add_bos_token", &v->add_bos, err);
        if (st != NX_STATUS_OK) goto fail;
    }
    build_byte_tokens(v);
    if (!build_special_list(v) || !build_pieces(v)) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "tokenizer: out of memory");
        goto fail;
    }
    *out = v;
    return NX_STATUS_OK;
fail:
    vocab_free(v);
    return st;
}

void vocab_free(struct nx_vocab *v) {
    if (!v) return;
    if (v->bpe) bpe_free(v->bpe);
    nx_free(v->pool);
    nx_free(v->off);
    nx_free(v->len);
    nx_free(v->scores);
    nx_free(v->type);
    nx_free(v->eog);
    nx_free(v->map.slots);
    nx_free(v->piece_pool);
    nx_free(v->piece_off);
    nx_free(v->piece_len);
    nx_free(v->special);
    nx_free(v);
}

/* ------------------------------------------------------------------------------------------
 * Queries
 * ---------------------------------------------------------------------------------------- */

int32_t vocab_n_tokens(const struct nx_vocab *v) { return v ? v->n_tokens : 0; }
nx_token vocab_bos(const struct nx_vocab *v) { return v ? v->bos : -1; }
nx_token vocab_eos(const struct nx_vocab *v) { return v ? v->eos : -1; }
nx_token vocab_cls(const struct nx_vocab *v) { return v ? v->cls : -1; }
nx_token vocab_sep(const struct nx_vocab *v) { return v ? v->sep : -1; }

bool vocab_is_eog(const struct nx_vocab *v, nx_token t) {
    return v && t >= 0 && t < v->n_tokens && v->eog[t];
}

bool vocab_is_control(const struct nx_vocab *v, nx_token t) {
    return v && t >= 0 && t < v->n_tokens && v->type[t] == TOK_TYPE_CONTROL;
}

const char *vocab_token_text(const struct nx_vocab *v, nx_token t) {
    if (!v || t < 0 || t >= v->n_tokens) return NULL;
    return text_of(v, t);
}

int32_t vocab_token_to_piece(const struct nx_vocab *v, nx_token t, char *buf, int32_t len,
                             bool special) {
    if (!v || t < 0 || t >= v->n_tokens) return 0;
    uint8_t type = v->type[t];
    if (!special && (type == TOK_TYPE_CONTROL || type == TOK_TYPE_UNKNOWN)) return 0;
    uint32_t n = v->piece_len[t];
    if (n > (uint32_t)INT32_MAX) return INT32_MIN;
    if (len < 0 || (uint32_t)len < n) return -(int32_t)n;
    if (n) memcpy(buf, v->piece_pool + v->piece_off[t], n);
    return (int32_t)n;
}

/* ------------------------------------------------------------------------------------------
 * Tokenizing
 * ---------------------------------------------------------------------------------------- */

/* A piece of the input: raw text (tok < 0) or one special token. */
struct frag {
    nx_token tok;
    size_t off, len;
};
struct frag_list {
    struct frag *a;
    size_t n, cap;
};

static bool frag_push(struct frag_list *l, struct frag fr) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct frag *p = nx_realloc(l->a, cap * sizeof *p);
        if (!p) return false;
        l->a = p;
        l->cap = cap;
    }
    l->a[l->n++] = fr;
    return true;
}

/* Splits text into raw and special fragments (see DESIGN). false on allocation failure. */
static bool partition(const struct nx_vocab *v, const char *text, size_t len, bool parse_special,
                      struct frag_list *out) {
    out->n = 0;
    if (len == 0) return true;
    if (!frag_push(out, (struct frag){-1, 0, len})) return false;
    bool present[256] = {false};
    for (size_t i = 0; i < len; i++) present[(unsigned char)text[i]] = true;

    struct frag_list tmp = {0};
    bool ok = true;
    for (int32_t k = 0; k < v->n_special && ok; k++) {
        nx_token id = v->special[k];
        uint8_t type = v->type[id];
        if (!parse_special && type != TOK_TYPE_USER_DEFINED) continue;
        const char *s = text_of(v, id);
        size_t n = v->len[id];
        if (n > len || !present[(unsigned char)s[0]]) continue;

        bool found = false;
        for (size_t i = 0; i < out->n && !found; i++)
            found = out->a[i].tok < 0 && out->a[i].len >= n &&
                    memmem(text + out->a[i].off, out->a[i].len, s, n) != NULL;
        if (!found) continue;

        tmp.n = 0;
        for (size_t i = 0; i < out->n && ok; i++) {
            struct frag fr = out->a[i];
            if (fr.tok >= 0) {
                ok = frag_push(&tmp, fr);
                continue;
            }
            size_t pos = fr.off, end = fr.off + fr.len;
            while (ok && pos < end) {
                const char *hit = end - pos >= n ? memmem(text + pos, end - pos, s, n) : NULL;
                if (!hit) {
                    ok = frag_push(&tmp, (struct frag){-1, pos, end - pos});
                    break;
                }
                size_t at = (size_t)(hit - text);
                if (at > pos) ok = frag_push(&tmp, (struct frag){-1, pos, at - pos});
                if (ok) ok = frag_push(&tmp, (struct frag){id, at, n});
                pos = at + n;
            }
        }
        struct frag_list swap = *out;
        *out = tmp;
        tmp = swap;
    }
    nx_free(tmp.a);
    return ok;
}

int32_t vocab_tokenize(const struct nx_vocab *v, const char *text, size_t len, nx_token *out,
                       int32_t n_max, bool add_special, bool parse_special) {
    if (!v || (!text && len > 0)) return INT32_MIN;
    struct frag_list frags = {0};
    struct tok_out o = {0};
    bool ok = partition(v, text, len, parse_special, &frags);
    if (!ok) goto done;

    switch (v->kind) {
    case VOCAB_SPM: {
        bool prev_special = true; /* the space prefix goes on the first fragment */
        if (add_special && v->add_bos && v->bos >= 0) tok_out_push(&o, v->bos);
        for (size_t i = 0; i < frags.n; i++) {
            const struct frag *fr = &frags.a[i];
            if (fr->tok >= 0) {
                tok_out_push(&o, fr->tok);
                prev_special = true;
            } else {
                spm_tokenize(v, text + fr->off, fr->len, v->add_space_prefix && prev_special,
                             &o);
                prev_special = false;
            }
        }
        if (add_special && v->add_eos && v->eos >= 0) tok_out_push(&o, v->eos);
        break;
    }
    case VOCAB_BPE:
        if (add_special && v->add_bos && v->bos >= 0) tok_out_push(&o, v->bos);
        for (size_t i = 0; i < frags.n && ok; i++) {
            const struct frag *fr = &frags.a[i];
            if (fr->tok >= 0)
                tok_out_push(&o, fr->tok);
            else
                ok = bpe_tokenize(v, text + fr->off, fr->len, &o);
        }
        if (add_special && v->add_eos && v->eos >= 0) tok_out_push(&o, v->eos);
        break;
    case VOCAB_WPM:
        if (add_special && v->add_bos && v->cls >= 0) tok_out_push(&o, v->cls);
        for (size_t i = 0; i < frags.n; i++) {
            const struct frag *fr = &frags.a[i];
            if (fr->tok >= 0)
                tok_out_push(&o, fr->tok);
            else
                wpm_tokenize(v, text + fr->off, fr->len, &o);
        }
        if (add_special && v->add_sep && v->sep >= 0)
            tok_out_push(&o, v->sep);
        else if (add_special && v->add_eos && v->eos >= 0)
            tok_out_push(&o, v->eos);
        break;
    }

done:;
    int32_t ret;
    if (!ok || o.oom || o.n > (size_t)INT32_MAX) {
        ret = INT32_MIN;
    } else if (o.n > (size_t)NX_MAX(n_max, 0)) {
        ret = -(int32_t)o.n;
    } else {
        if (o.n) memcpy(out, o.ids, o.n * sizeof *out);
        ret = (int32_t)o.n;
    }
    nx_free(o.ids);
    nx_free(frags.a);
    return ret;
}
