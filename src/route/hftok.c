/*
 * hftok.c - tokenizer.json Unigram tokenizer (contract in hftok.h).
 *
 * DESIGN
 * - Pipeline per text: split on added tokens (raw text) -> for each segment: normalizer steps
 *   on a UTF-8 buffer -> pre-tokenizer steps on a list of pieces -> Viterbi per piece.
 * - Input is made valid UTF-8 first (invalid bytes -> U+FFFD), so every later step can decode
 *   without error paths and every trie match ends on a character boundary.
 * - Pieces live in a byte trie whose edges are one open-addressing hash table keyed by
 *   (node, byte); a common-prefix search walks it from each character start.
 * - Viterbi keeps, for every end position, the best (score, start, id) seen so far and
 *   replaces it only on a strictly better score, visiting starts left to right: the same
 *   tie-break as the Hugging Face implementation.
 */
#include "route/hftok.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/nx_base.h"

#include "tok/unichar.h"

#define UNK_PENALTY 10.0

/* ---- growable byte buffer and id vector ---------------------------------------------- */

struct sbuf {
    char *p;
    size_t n, cap;
};
static bool sb_reserve(struct sbuf *b, size_t add) {
    if (b->n + add + 1 <= b->cap) return true;
    size_t c = b->cap ? b->cap : 64;
    while (c < b->n + add + 1) {
        if (c > SIZE_MAX / 2) return false;
        c *= 2;
    }
    char *q = nx_realloc(b->p, c);
    if (!q) return false;
    b->p = q;
    b->cap = c;
    b->p[b->n] = 0;
    return true;
}
static bool sb_put(struct sbuf *b, const void *s, size_t n) {
    if (!sb_reserve(b, n)) return false;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}
static bool sb_putc32(struct sbuf *b, int32_t c) {
    uint8_t tmp[4];
    utf8proc_ssize_t k = utf8proc_encode_char(c, tmp);
    return sb_put(b, tmp, (size_t)k);
}

struct ivec {
    int32_t *v;
    int n, cap;
};
static bool iv_push(struct ivec *a, int32_t x) {
    if (a->n == a->cap) {
        int c = a->cap ? a->cap * 2 : 32;
        int32_t *q = nx_realloc(a->v, (size_t)c * sizeof(*q));
        if (!q) return false;
        a->v = q;
        a->cap = c;
    }
    a->v[a->n++] = x;
    return true;
}

/* Decode one code point at s[0..n) (n > 0); invalid bytes read as U+FFFD of length 1. */
static int u8_next(const char *s, size_t n, int32_t *cp) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &c);
    if (k <= 0) {
        *cp = 0xFFFD;
        return 1;
    }
    *cp = c;
    return (int)k;
}

/* CJK ideographs, as Hugging Face's BertNormalizer lists them (its last-but-two range starts
 * at U+2B920, where Python BERT and tok/wpm.c start at U+2B820). */
static bool is_cjk(int32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* ---- normalizers ------------------------------------------------------------------------ */

enum norm_kind { N_SEQ, N_BERT, N_REPLACE, N_STRIP, N_LOWER, N_UNF, N_STRIP_ACCENTS, N_PREPEND };

struct norm {
    enum norm_kind k;
    int n_sub;
    struct norm *sub;
    bool clean_text, chinese, strip_acc, lower; /* BertNormalizer */
    bool left, right;                           /* Strip */
    int unf;                                    /* utf8proc options for NF* */
    char *pat, *rep;                            /* Replace (String: pat; Regex: re) */
    size_t pat_len, rep_len;
    pcre2_code *re;
};

static void norm_free(struct norm *n) {
    if (!n) return;
    for (int i = 0; i < n->n_sub; i++) norm_free(&n->sub[i]);
    nx_free(n->sub);
    nx_free(n->pat);
    nx_free(n->rep);
    if (n->re) pcre2_code_free(n->re);
}

static bool jbool(json_t *o, const char *k, bool def) {
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : def;
}

static nx_status norm_parse(struct norm *n, json_t *j, char *err, size_t errlen) {
    memset(n, 0, sizeof(*n));
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!json_is_object(j) || !type) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT,
                       "tokenizer.json: normalizer without a \"type\"");
    }
    if (strcmp(type, "Sequence") == 0) {
        json_t *a = json_object_get(j, "normalizers");
        if (!json_is_array(a)) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer.json: Sequence normalizer without \"normalizers\"");
        }
        n->k = N_SEQ;
        n->sub = nx_calloc(json_array_size(a) + 1, sizeof(*n->sub));
        if (!n->sub) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(a); i++) {
            nx_status st = norm_parse(&n->sub[i], json_array_get(a, i), err, errlen);
            if (st != NX_STATUS_OK) {
                norm_free(&n->sub[i]); /* not counted in n_sub: its partial parse is ours */
                return st;
            }
            n->n_sub++;
        }
    } else if (strcmp(type, "BertNormalizer") == 0) {
        n->k = N_BERT;
        n->clean_text = jbool(j, "clean_text", true);
        n->chinese = jbool(j, "handle_chinese_chars", true);
        n->lower = jbool(j, "lowercase", true);
        json_t *sa = json_object_get(j, "strip_accents");
        n->strip_acc = json_is_boolean(sa) ? json_is_true(sa) : n->lower; /* null: as lowercase */
    } else if (strcmp(type, "Replace") == 0) {
        n->k = N_REPLACE;
        json_t *p = json_object_get(j, "pattern");
        const char *content = json_string_value(json_object_get(j, "content"));
        if (!json_is_object(p) || !content) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer.json: Replace normalizer needs \"pattern\" and \"content\"");
        }
        n->rep = nx_strdup(content);
        n->rep_len = strlen(content);
        const char *s = json_string_value(json_object_get(p, "String"));
        const char *r = json_string_value(json_object_get(p, "Regex"));
        if (s) {
            if (!*s) {
                return nx_errf(err, errlen, NX_STATUS_FORMAT,
                               "tokenizer.json: Replace with an empty String pattern");
            }
            n->pat = nx_strdup(s);
            n->pat_len = strlen(s);
        } else if (r) {
            int ec;
            PCRE2_SIZE eo;
            n->re = pcre2_compile((PCRE2_SPTR)r, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec,
                                  &eo, NULL);
            if (!n->re) {
                PCRE2_UCHAR msg[160];
                pcre2_get_error_message(ec, msg, sizeof msg);
                return nx_errf(err, errlen, NX_STATUS_FORMAT,
                               "tokenizer.json: Replace regex '%s' at offset %zu: %s", r,
                               (size_t)eo, (const char *)msg);
            }
        } else {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer.json: Replace pattern is neither String nor Regex");
        }
        if (!n->rep || (s && !n->pat))
            return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    } else if (strcmp(type, "Strip") == 0) {
        n->k = N_STRIP;
        n->left = jbool(j, "strip_left", true);
        n->right = jbool(j, "strip_right", true);
    } else if (strcmp(type, "Lowercase") == 0) {
        n->k = N_LOWER;
    } else if (strcmp(type, "StripAccents") == 0) {
        n->k = N_STRIP_ACCENTS;
    } else if (strcmp(type, "NFC") == 0 || strcmp(type, "NFD") == 0 || strcmp(type, "NFKC") == 0 ||
               strcmp(type, "NFKD") == 0) {
        n->k = N_UNF;
        n->unf = UTF8PROC_STABLE | (type[2] == 'K' ? UTF8PROC_COMPAT : 0) |
                 (type[strlen(type) - 1] == 'C' ? UTF8PROC_COMPOSE : UTF8PROC_DECOMPOSE);
    } else if (strcmp(type, "Prepend") == 0) {
        n->k = N_PREPEND;
        const char *s = json_string_value(json_object_get(j, "prepend"));
        if (!s) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer.json: Prepend normalizer without \"prepend\"");
        }
        n->rep = nx_strdup(s);
        n->rep_len = strlen(s);
        if (!n->rep) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    } else {
        return nx_errf(err, errlen, NX_STATUS_UNSUPPORTED,
                       "tokenizer.json: normalizer type '%s' is not supported", type);
    }
    return 0;
}

/* utf8proc_map with the buffer from nx_malloc (utf8proc_map's own comes from malloc): decompose
 * into code points, then re-encode in place (UTF-8 never takes more than the 4 bytes of a code
 * point). The length, or a negative utf8proc error. */
static utf8proc_ssize_t unf_map_nx(const utf8proc_uint8_t *s, utf8proc_ssize_t n, utf8proc_uint8_t **out,
                                   utf8proc_option_t opts) {
    *out = NULL;
    utf8proc_ssize_t k = utf8proc_decompose(s, n, NULL, 0, opts);
    if (k < 0) return k;
    utf8proc_int32_t *buf = nx_malloc(sizeof *buf * (size_t)k + 1);
    if (!buf) return UTF8PROC_ERROR_NOMEM;
    utf8proc_ssize_t k2 = utf8proc_decompose(s, n, buf, k, opts);
    if (k2 >= 0 && k2 <= k) k2 = utf8proc_reencode(buf, k2, opts);
    else if (k2 >= 0) k2 = UTF8PROC_ERROR_OVERFLOW;
    if (k2 < 0) {
        nx_free(buf);
        return k2;
    }
    *out = (utf8proc_uint8_t *)buf;
    return k2;
}

/* Apply a per-code-point map to b: fn writes 0..n code points for one input. */
static int unf_map(struct sbuf *b, int opts) {
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t k = unf_map_nx((const utf8proc_uint8_t *)b->p, (utf8proc_ssize_t)b->n, &out,
                                    (utf8proc_option_t)opts);
    if (k < 0) return -1;
    struct sbuf r = {0};
    bool ok = sb_put(&r, out, (size_t)k);
    nx_free(out);
    if (!ok) return -1;
    nx_free(b->p);
    *b = r;
    return 0;
}

/* The normalizers may grow a segment to at most NORM_GROWTH times its bytes plus NORM_SLACK
 * (real ones stay far below: NFKC expands a code point up to 18 code points, BERT's CJK spacing
 * 3 bytes to 5). A hostile chain (Replace whose content holds its own pattern, repeated) grows
 * the text exponentially; it fails with a message instead of exhausting memory. */
#define NORM_GROWTH 64
#define NORM_SLACK 65536
static size_t norm_limit(size_t n) {
    return n > (SIZE_MAX - NORM_SLACK) / NORM_GROWTH ? SIZE_MAX : n * NORM_GROWTH + NORM_SLACK;
}
static nx_status norm_too_long(size_t limit, char *err, size_t errlen) {
    return nx_errf(err, errlen, NX_STATUS_FORMAT,
                   "tokenizer: the normalizers grow the text past %zu bytes (%dx its length + %d)",
                   limit, NORM_GROWTH, NORM_SLACK);
}

/* Normalize b in place; limit: norm_limit of the segment's original length. */
static nx_status norm_apply(const struct norm *n, struct sbuf *b, size_t limit, char *err,
                            size_t errlen) {
    struct sbuf r = {0};
    if (!sb_reserve(&r, b->n)) goto oom;
    switch (n->k) {
    case N_SEQ:
        nx_free(r.p);
        for (int i = 0; i < n->n_sub; i++) {
            nx_status st = norm_apply(&n->sub[i], b, limit, err, errlen);
            if (st != NX_STATUS_OK) return st;
        }
        return 0;
    case N_BERT: {
        for (size_t i = 0; i < b->n;) {
            int32_t c;
            i += (size_t)u8_next(b->p + i, b->n - i, &c);
            if (n->clean_text) {
                if (c == 0 || c == 0xFFFD || uc_is_control(c)) continue;
                if (uc_is_space(c)) c = ' ';
            }
            bool ok = (n->chinese && is_cjk(c))
                          ? sb_putc32(&r, ' ') && sb_putc32(&r, c) && sb_putc32(&r, ' ')
                          : sb_putc32(&r, c);
            if (!ok) goto oom;
        }
        if (n->strip_acc) {
            if (unf_map(&r, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE) != 0) goto oom;
            struct sbuf s = {0};
            if (!sb_reserve(&s, r.n)) goto oom;
            for (size_t i = 0; i < r.n;) {
                int32_t c;
                i += (size_t)u8_next(r.p + i, r.n - i, &c);
                if (utf8proc_category(c) == UTF8PROC_CATEGORY_MN) continue;
                if (!sb_putc32(&s, c)) {
                    nx_free(s.p);
                    goto oom;
                }
            }
            nx_free(r.p);
            r = s;
        }
        if (n->lower) {
            for (size_t i = 0; i < r.n;) {
                int32_t c;
                int k = u8_next(r.p + i, r.n - i, &c);
                int32_t l = utf8proc_tolower(c);
                uint8_t tmp[4];
                if (utf8proc_encode_char(l, tmp) == k) memcpy(r.p + i, tmp, (size_t)k);
                else {
                    /* length changes (rare): rebuild the rest */
                    struct sbuf s = {0};
                    if (!sb_put(&s, r.p, i)) goto oom;
                    for (size_t j = i; j < r.n;) {
                        int32_t d;
                        j += (size_t)u8_next(r.p + j, r.n - j, &d);
                        if (!sb_putc32(&s, utf8proc_tolower(d))) {
                            nx_free(s.p);
                            goto oom;
                        }
                    }
                    nx_free(r.p);
                    r = s;
                    break;
                }
                i += (size_t)k;
            }
        }
        break;
    }
    case N_REPLACE:
        if (n->pat) {
            for (size_t i = 0; i < b->n;) {
                if (i + n->pat_len <= b->n && memcmp(b->p + i, n->pat, n->pat_len) == 0) {
                    if (r.n + n->rep_len > limit) goto too_long;
                    if (!sb_put(&r, n->rep, n->rep_len)) goto oom;
                    i += n->pat_len;
                } else {
                    if (!sb_put(&r, b->p + i, 1)) goto oom;
                    i++;
                }
            }
        } else {
            PCRE2_SIZE outlen = b->n * 2 + 64;
            for (int tries = 0; tries < 3; tries++) {
                if (!sb_reserve(&r, outlen)) goto oom;
                PCRE2_SIZE ol = r.cap;
                int rc = pcre2_substitute(n->re, (PCRE2_SPTR)b->p, b->n, 0,
                                          PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_LITERAL |
                                              PCRE2_SUBSTITUTE_OVERFLOW_LENGTH | PCRE2_NO_UTF_CHECK,
                                          NULL, NULL, (PCRE2_SPTR)n->rep, n->rep_len,
                                          (PCRE2_UCHAR *)r.p, &ol);
                if (rc >= 0) {
                    r.n = ol;
                    r.p[r.n] = 0;
                    break;
                }
                if (rc == PCRE2_ERROR_NOMEMORY) {
                    if (ol > limit) goto too_long;
                    outlen = ol + 1;
                    continue;
                }
                nx_free(r.p);
                return nx_errf(err, errlen, NX_STATUS_FORMAT,
                               "tokenizer: Replace regex failed (pcre2 error %d)", rc);
            }
        }
        break;
    case N_STRIP: {
        size_t s = 0, e = b->n;
        if (n->left)
            while (s < e) {
                int32_t c;
                int k = u8_next(b->p + s, e - s, &c);
                if (!uc_is_space(c)) break;
                s += (size_t)k;
            }
        if (n->right)
            while (e > s) {
                size_t q = e - 1;
                while (q > s && ((uint8_t)b->p[q] & 0xC0) == 0x80) q--;
                int32_t c;
                u8_next(b->p + q, e - q, &c);
                if (!uc_is_space(c)) break;
                e = q;
            }
        if (!sb_put(&r, b->p + s, e - s)) goto oom;
        break;
    }
    case N_LOWER:
        for (size_t i = 0; i < b->n;) {
            int32_t c;
            i += (size_t)u8_next(b->p + i, b->n - i, &c);
            if (!sb_putc32(&r, utf8proc_tolower(c))) goto oom;
        }
        break;
    case N_STRIP_ACCENTS:
        for (size_t i = 0; i < b->n;) {
            int32_t c;
            i += (size_t)u8_next(b->p + i, b->n - i, &c);
            utf8proc_category_t k = utf8proc_category(c);
            if (k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME)
                continue;
            if (!sb_putc32(&r, c)) goto oom;
        }
        break;
    case N_UNF:
        nx_free(r.p);
        if (b->n && unf_map(b, n->unf) != 0) goto oom2;
        return b->n > limit ? norm_too_long(limit, err, errlen) : NX_STATUS_OK;
    case N_PREPEND:
        if (b->n && (!sb_put(&r, n->rep, n->rep_len) || !sb_put(&r, b->p, b->n))) goto oom;
        break;
    }
    if (r.n > limit) goto too_long;
    nx_free(b->p);
    *b = r;
    if (!b->p && !sb_reserve(b, 0)) goto oom2;
    return 0;
too_long:
    nx_free(r.p);
    return norm_too_long(limit, err, errlen);
oom:
    nx_free(r.p);
oom2:
    return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (normalizer)");
}

/* ---- pre-tokenizers --------------------------------------------------------------------- */

enum pre_kind { P_SEQ, P_METASPACE, P_WSSPLIT, P_BERT };
enum { SCHEME_ALWAYS, SCHEME_FIRST, SCHEME_NEVER };

struct pre {
    enum pre_kind k;
    int n_sub;
    struct pre *sub;
    char *repl;
    size_t repl_len;
    int scheme;
    bool split;
};

static void pre_free(struct pre *p) {
    if (!p) return;
    for (int i = 0; i < p->n_sub; i++) pre_free(&p->sub[i]);
    nx_free(p->sub);
    nx_free(p->repl);
}

static nx_status pre_parse(struct pre *p, json_t *j, char *err, size_t errlen) {
    memset(p, 0, sizeof(*p));
    const char *type = json_string_value(json_object_get(j, "type"));
    if (!type) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT,
                       "tokenizer.json: pre_tokenizer without a \"type\"");
    }
    if (strcmp(type, "Sequence") == 0) {
        json_t *a = json_object_get(j, "pretokenizers");
        if (!json_is_array(a)) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer.json: Sequence pre_tokenizer without \"pretokenizers\"");
        }
        p->k = P_SEQ;
        p->sub = nx_calloc(json_array_size(a) + 1, sizeof(*p->sub));
        if (!p->sub) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        for (size_t i = 0; i < json_array_size(a); i++) {
            nx_status st = pre_parse(&p->sub[i], json_array_get(a, i), err, errlen);
            if (st != NX_STATUS_OK) {
                pre_free(&p->sub[i]); /* not counted in n_sub: its partial parse is ours */
                return st;
            }
            p->n_sub++;
        }
    } else if (strcmp(type, "Metaspace") == 0) {
        p->k = P_METASPACE;
        const char *r = json_string_value(json_object_get(j, "replacement"));
        if (!r || !*r) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer.json: Metaspace without a \"replacement\"");
        }
        int32_t c;
        if ((size_t)u8_next(r, strlen(r), &c) != strlen(r)) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer.json: Metaspace replacement '%s' is not one character", r);
        }
        p->repl = nx_strdup(r);
        if (!p->repl) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        p->repl_len = strlen(r);
        p->split = jbool(j, "split", true);
        const char *sch = json_string_value(json_object_get(j, "prepend_scheme"));
        if (sch) {
            if (strcmp(sch, "always") == 0) p->scheme = SCHEME_ALWAYS;
            else if (strcmp(sch, "first") == 0) p->scheme = SCHEME_FIRST;
            else if (strcmp(sch, "never") == 0) p->scheme = SCHEME_NEVER;
            else {
                return nx_errf(err, errlen, NX_STATUS_FORMAT,
                               "tokenizer.json: Metaspace prepend_scheme '%s' unknown", sch);
            }
        } else {
            p->scheme = jbool(j, "add_prefix_space", true) ? SCHEME_ALWAYS : SCHEME_NEVER;
        }
    } else if (strcmp(type, "WhitespaceSplit") == 0) {
        p->k = P_WSSPLIT;
    } else if (strcmp(type, "BertPreTokenizer") == 0) {
        p->k = P_BERT;
    } else {
        return nx_errf(err, errlen, NX_STATUS_UNSUPPORTED,
                       "tokenizer.json: pre_tokenizer type '%s' is not supported", type);
    }
    return 0;
}

struct piece {
    char *p;
    size_t n;
    bool first; /* starts at offset 0 of the original text */
};
struct plist {
    struct piece *v;
    int n, cap;
};
static void pl_clear(struct plist *l) {
    for (int i = 0; i < l->n; i++) nx_free(l->v[i].p);
    nx_free(l->v);
    memset(l, 0, sizeof(*l));
}
/* Append a copy of s[0..n); empty pieces are dropped (as Hugging Face does). */
static bool pl_push(struct plist *l, const char *s, size_t n, bool first) {
    if (n == 0) return true;
    if (l->n == l->cap) {
        int c = l->cap ? l->cap * 2 : 8;
        struct piece *q = nx_realloc(l->v, (size_t)c * sizeof(*q));
        if (!q) return false;
        l->v = q;
        l->cap = c;
    }
    char *d = nx_malloc(n + 1);
    if (!d) return false;
    memcpy(d, s, n);
    d[n] = 0;
    l->v[l->n++] = (struct piece){d, n, first};
    return true;
}

static nx_status pre_apply(const struct pre *p, struct plist *l, char *err, size_t errlen) {
    if (p->k == P_SEQ) {
        for (int i = 0; i < p->n_sub; i++) {
            nx_status st = pre_apply(&p->sub[i], l, err, errlen);
            if (st != NX_STATUS_OK) return st;
        }
        return 0;
    }
    struct plist out = {0};
    for (int i = 0; i < l->n; i++) {
        const struct piece *pc = &l->v[i];
        if (p->k == P_WSSPLIT || p->k == P_BERT) {
            /* split on whitespace (dropped); Bert: each punctuation character on its own */
            size_t s = 0;
            bool first = pc->first;
            for (size_t j = 0; j <= pc->n;) {
                int32_t c = 0;
                int k = 1;
                if (j < pc->n) k = u8_next(pc->p + j, pc->n - j, &c);
                if (j == pc->n || uc_is_space(c)) {
                    if (!pl_push(&out, pc->p + s, j - s, first && s == 0)) goto oom;
                    s = j + (size_t)k;
                } else if (p->k == P_BERT && uc_is_punct(c)) {
                    if (!pl_push(&out, pc->p + s, j - s, first && s == 0) ||
                        !pl_push(&out, pc->p + j, (size_t)k, first && j == 0))
                        goto oom;
                    s = j + (size_t)k;
                }
                j += (size_t)k;
            }
            continue;
        }
        /* Metaspace: ' ' -> replacement, prepend, optionally split before each replacement */
        struct sbuf b = {0};
        if (!sb_reserve(&b, pc->n * p->repl_len)) goto oom;
        bool prepend = (p->scheme == SCHEME_ALWAYS || (p->scheme == SCHEME_FIRST && pc->first)) &&
                       !(pc->n >= p->repl_len && memcmp(pc->p, p->repl, p->repl_len) == 0);
        if (prepend && !sb_put(&b, p->repl, p->repl_len)) goto oomb;
        for (size_t j = 0; j < pc->n; j++) {
            bool ok = pc->p[j] == ' ' ? sb_put(&b, p->repl, p->repl_len) : sb_put(&b, pc->p + j, 1);
            if (!ok) goto oomb;
        }
        if (!p->split) {
            if (!pl_push(&out, b.p, b.n, pc->first)) goto oomb;
        } else {
            size_t s = 0;
            for (size_t j = 1; j <= b.n; j++) {
                if (j == b.n || (j + p->repl_len <= b.n && memcmp(b.p + j, p->repl, p->repl_len) == 0)) {
                    if (!pl_push(&out, b.p + s, j - s, pc->first && s == 0)) goto oomb;
                    s = j;
                }
            }
        }
        nx_free(b.p);
        continue;
    oomb:
        nx_free(b.p);
        goto oom;
    }
    pl_clear(l);
    *l = out;
    return 0;
oom:
    pl_clear(&out);
    return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (pre-tokenizer)");
}

/* ---- piece trie ------------------------------------------------------------------------ */

struct trie {
    int32_t *id;      /* per node: piece id or -1 */
    int n_nodes, cap_nodes;
    uint64_t *keys;   /* (node << 8 | byte) + 1, 0 = empty slot */
    int32_t *vals;    /* child node */
    size_t cap;       /* power of two */
    size_t used;
};

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}
static int32_t trie_child(const struct trie *t, int32_t node, uint8_t byte) {
    uint64_t key = (((uint64_t)node << 8) | byte) + 1;
    size_t m = t->cap - 1;
    for (size_t h = mix64(key) & m;; h = (h + 1) & m) {
        if (t->keys[h] == key) return t->vals[h];
        if (t->keys[h] == 0) return -1;
    }
}
static bool trie_grow(struct trie *t) {
    size_t nc = t->cap ? t->cap * 2 : 1024;
    uint64_t *k = nx_calloc(nc, sizeof(*k));
    int32_t *v = nx_malloc(nc * sizeof(*v));
    if (!k || !v) {
        nx_free(k);
        nx_free(v);
        return false;
    }
    for (size_t i = 0; i < t->cap; i++) {
        if (!t->keys[i]) continue;
        size_t h = mix64(t->keys[i]) & (nc - 1);
        while (k[h]) h = (h + 1) & (nc - 1);
        k[h] = t->keys[i];
        v[h] = t->vals[i];
    }
    nx_free(t->keys);
    nx_free(t->vals);
    t->keys = k;
    t->vals = v;
    t->cap = nc;
    return true;
}
static int32_t trie_new_node(struct trie *t) {
    if (t->n_nodes == t->cap_nodes) {
        int c = t->cap_nodes ? t->cap_nodes * 2 : 1024;
        int32_t *q = nx_realloc(t->id, (size_t)c * sizeof(*q));
        if (!q) return -1;
        t->id = q;
        t->cap_nodes = c;
    }
    t->id[t->n_nodes] = -1;
    return t->n_nodes++;
}
/* Insert s -> id (a later duplicate replaces the earlier id). */
static bool trie_insert(struct trie *t, const char *s, size_t n, int32_t id) {
    if (t->n_nodes == 0 && trie_new_node(t) < 0) return false;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = t->cap ? trie_child(t, node, (uint8_t)s[i]) : -1;
        if (c < 0) {
            if ((t->used + 1) * 2 > t->cap && !trie_grow(t)) return false;
            c = trie_new_node(t);
            if (c < 0) return false;
            uint64_t key = (((uint64_t)node << 8) | (uint8_t)s[i]) + 1;
            size_t h = mix64(key) & (t->cap - 1);
            while (t->keys[h]) h = (h + 1) & (t->cap - 1);
            t->keys[h] = key;
            t->vals[h] = c;
            t->used++;
        }
        node = c;
    }
    t->id[node] = id;
    return true;
}
static int32_t trie_lookup(const struct trie *t, const char *s, size_t n) {
    if (t->n_nodes == 0) return -1;
    int32_t node = 0;
    for (size_t i = 0; i < n && node >= 0; i++) node = trie_child(t, node, (uint8_t)s[i]);
    return node >= 0 ? t->id[node] : -1;
}
static void trie_free(struct trie *t) {
    nx_free(t->id);
    nx_free(t->keys);
    nx_free(t->vals);
}

/* ---- the tokenizer ---------------------------------------------------------------------- */

struct added {
    char *s;
    size_t n;
    int32_t id;
};

struct hf_tok {
    int32_t n_vocab;
    char **piece;   /* [n_vocab], NULL for unused ids */
    double *score;  /* [n_vocab] */
    int32_t unk_id;
    bool byte_fallback;
    bool wordpiece;     /* WordPiece model (else Unigram) */
    char *wp_prefix;    /* continuing-subword prefix ("##") */
    int wp_max_chars;   /* longer words are [UNK] */
    double unk_score;
    struct trie trie;
    struct norm *norm; /* NULL: none */
    struct pre *pre;   /* NULL: none */
    struct added *added;
    int n_added;
    int median_chars;
};

void hf_tok_free(hf_tok *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_vocab; i++) nx_free(t->piece[i]);
    nx_free(t->piece);
    nx_free(t->score);
    nx_free(t->wp_prefix);
    trie_free(&t->trie);
    if (t->norm) norm_free(t->norm);
    nx_free(t->norm);
    if (t->pre) pre_free(t->pre);
    nx_free(t->pre);
    for (int i = 0; i < t->n_added; i++) nx_free(t->added[i].s);
    nx_free(t->added);
    nx_free(t);
}

int32_t hf_tok_n_vocab(const hf_tok *t) { return t->n_vocab; }
int32_t hf_tok_unk_id(const hf_tok *t) { return t->unk_id; }
const char *hf_tok_piece(const hf_tok *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->piece[id] : NULL;
}
int hf_tok_median_token_chars(const hf_tok *t) { return t->median_chars; }

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static size_t u8_count(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((uint8_t)s[i] & 0xC0) != 0x80;
    return c;
}

nx_status hf_tok_load(const char *path, hf_tok **out, char *err, size_t errlen) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) {
        nx_status st = json_error_code(&je) == json_error_cannot_open_file
                           ? (access(path, F_OK) != 0 ? NX_STATUS_NOT_FOUND : NX_STATUS_IO)
                       : json_error_code(&je) == json_error_out_of_memory ? NX_STATUS_NOMEM
                                                                          : NX_STATUS_FORMAT;
        return nx_errf(err, errlen, st, "tokenizer '%s': %s (line %d column %d)", path, je.text,
                       je.line, je.column);
    }
    hf_tok *t = nx_calloc(1, sizeof(*t));
    char e2[400] = "";
    nx_status st = NX_STATUS_FORMAT;
    if (!t) {
        st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
        goto fail;
    }
    t->unk_id = -1;
    json_t *model = json_object_get(root, "model");
    const char *mtype = json_string_value(json_object_get(model, "type"));
    if (!json_is_object(model) || !mtype) {
        st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT, "no \"model\" object with a \"type\"");
        goto fail;
    }
    t->wordpiece = strcmp(mtype, "WordPiece") == 0;
    if (strcmp(mtype, "Unigram") != 0 && !t->wordpiece) {
        st = nx_errf(e2, sizeof e2, NX_STATUS_UNSUPPORTED,
                     "model type '%s' is not supported (only Unigram and WordPiece)", mtype);
        goto fail;
    }
    json_t *vocab = json_object_get(model, "vocab");
    int32_t n_vocab = 0;
    if (t->wordpiece) {
        if (!json_is_object(vocab) || json_object_size(vocab) == 0 || json_object_size(vocab) > (1u << 24)) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                         "model.vocab must be a non-empty object {token: id}");
            goto fail;
        }
        const char *k;
        json_t *v;
        json_object_foreach(vocab, k, v) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= (1 << 24)) {
                st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                             "model.vocab['%.100s'] is not an id in [0, 2^24)", k);
                goto fail;
            }
            if (json_integer_value(v) >= n_vocab) n_vocab = (int32_t)json_integer_value(v) + 1;
        }
    } else {
        if (!json_is_array(vocab) || json_array_size(vocab) == 0 || json_array_size(vocab) > (1u << 24)) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                         "model.vocab must be a non-empty array of [piece, score]");
            goto fail;
        }
        n_vocab = (int32_t)json_array_size(vocab);
    }
    json_t *added = json_object_get(root, "added_tokens");
    if (json_is_array(added)) {
        for (size_t i = 0; i < json_array_size(added); i++) {
            json_t *a = json_array_get(added, i);
            json_t *id = json_object_get(a, "id");
            if (!json_is_integer(id) || json_integer_value(id) < 0 ||
                json_integer_value(id) >= (1 << 24) || !json_is_string(json_object_get(a, "content"))) {
                st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                             "added_tokens[%zu] needs an id (0..2^24) and a content", i);
                goto fail;
            }
            if (json_integer_value(id) >= n_vocab) n_vocab = (int32_t)json_integer_value(id) + 1;
        }
    }
    t->n_vocab = n_vocab;
    t->piece = nx_calloc((size_t)n_vocab, sizeof(*t->piece));
    t->score = nx_calloc((size_t)n_vocab, sizeof(*t->score));
    if (!t->piece || !t->score) {
        st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
        goto fail;
    }
    if (t->wordpiece) {
        const char *k;
        json_t *v;
        json_object_foreach(vocab, k, v) {
            int32_t id = (int32_t)json_integer_value(v);
            if (t->piece[id]) {
                st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                             "model.vocab: id %d used twice ('%.80s', '%.80s')", id, t->piece[id],
                             k);
                goto fail;
            }
            if (!(t->piece[id] = nx_strdup(k)) || (*k && !trie_insert(&t->trie, k, strlen(k), id))) {
                st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
                goto fail;
            }
        }
        const char *pfx = json_string_value(json_object_get(model, "continuing_subword_prefix"));
        t->wp_prefix = nx_strdup(pfx ? pfx : "##");
        json_t *mx = json_object_get(model, "max_input_chars_per_word");
        t->wp_max_chars = json_is_integer(mx) && json_integer_value(mx) > 0 &&
                                  json_integer_value(mx) < (1 << 24)
                              ? (int)json_integer_value(mx)
                              : 100;
        const char *unk_tok = json_string_value(json_object_get(model, "unk_token"));
        if (!t->wp_prefix) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        if (unk_tok) {
            t->unk_id = trie_lookup(&t->trie, unk_tok, strlen(unk_tok));
            if (t->unk_id < 0) {
                st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                             "model.unk_token '%.80s' is not in the vocab", unk_tok);
                goto fail;
            }
        }
    }
    double min_score = 0;
    for (size_t i = 0; !t->wordpiece && i < json_array_size(vocab); i++) {
        json_t *e = json_array_get(vocab, i);
        const char *s = json_string_value(json_array_get(e, 0));
        json_t *sc = json_array_get(e, 1);
        if (!json_is_array(e) || json_array_size(e) != 2 || !s || !json_is_number(sc)) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                         "model.vocab[%zu] is not [string, number]", i);
            goto fail;
        }
        t->piece[i] = nx_strdup(s);
        t->score[i] = json_number_value(sc);
        if (!t->piece[i]) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        if (i == 0 || t->score[i] < min_score) min_score = t->score[i];
        if (*s && !trie_insert(&t->trie, s, strlen(s), (int32_t)i)) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
    }
    t->unk_score = min_score - UNK_PENALTY;
    json_t *unk = t->wordpiece ? NULL : json_object_get(model, "unk_id");
    if (json_is_integer(unk)) {
        if (json_integer_value(unk) < 0 || json_integer_value(unk) >= (json_int_t)json_array_size(vocab)) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT, "model.unk_id %lld outside the vocab",
                         (long long)json_integer_value(unk));
            goto fail;
        }
        t->unk_id = (int32_t)json_integer_value(unk);
    } else if (!json_is_null(unk) && unk) {
        st = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT, "model.unk_id is not an integer");
        goto fail;
    }
    t->byte_fallback = jbool(model, "byte_fallback", false);
    if (json_is_array(added) && json_array_size(added) > 0) {
        t->added = nx_calloc(json_array_size(added), sizeof(*t->added));
        if (!t->added) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < json_array_size(added); i++) {
            json_t *a = json_array_get(added, i);
            const char *c = json_string_value(json_object_get(a, "content"));
            int32_t id = (int32_t)json_integer_value(json_object_get(a, "id"));
            if (!*c) continue;
            struct added *ad = &t->added[t->n_added++];
            ad->s = nx_strdup(c);
            ad->n = strlen(c);
            ad->id = id;
            if (!ad->s) {
                st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
                goto fail;
            }
            if (!t->piece[id] && !(t->piece[id] = nx_strdup(c))) {
                st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
                goto fail;
            }
        }
    }
    json_t *nj = json_object_get(root, "normalizer");
    if (nj && !json_is_null(nj)) {
        t->norm = nx_calloc(1, sizeof(*t->norm));
        if (!t->norm) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        if ((st = norm_parse(t->norm, nj, e2, sizeof e2)) != NX_STATUS_OK) goto fail;
    }
    json_t *pj = json_object_get(root, "pre_tokenizer");
    if (pj && !json_is_null(pj)) {
        t->pre = nx_calloc(1, sizeof(*t->pre));
        if (!t->pre) {
            st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        if ((st = pre_parse(t->pre, pj, e2, sizeof e2)) != NX_STATUS_OK) goto fail;
    }
    /* median token length in code points over the ids that have a token */
    int *lens = nx_malloc((size_t)n_vocab * sizeof(*lens));
    if (!lens) {
        st = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
        goto fail;
    }
    int nl = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (t->piece[i]) lens[nl++] = (int)u8_count(t->piece[i], strlen(t->piece[i]));
    qsort(lens, (size_t)nl, sizeof(int), cmp_int);
    t->median_chars = nl == 0 ? 1 : (nl % 2 ? lens[nl / 2] : (lens[nl / 2 - 1] + lens[nl / 2]) / 2);
    nx_free(lens);
    json_decref(root);
    *out = t;
    return NX_STATUS_OK;
fail:
    nx_errf(err, errlen, st, "tokenizer '%s': %s", path, e2);
    json_decref(root);
    hf_tok_free(t);
    return st;
}

/* Viterbi segmentation of one pre-tokenized piece into out. */
static nx_status unigram_piece(const hf_tok *t, const char *s, size_t n, struct ivec *out,
                               char *err, size_t errlen) {
    if (n >= (size_t)INT32_MAX) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT, "tokenizer: a piece of %zu bytes is too long",
                       n);
    }
    double *best = nx_malloc((n + 1) * sizeof(*best));
    int32_t *from = nx_malloc((n + 1) * sizeof(*from));
    int32_t *tid = nx_malloc((n + 1) * sizeof(*tid));
    int32_t *stack = NULL;
    nx_status rc = NX_STATUS_FORMAT;
    if (!best || !from || !tid) goto oom;
    for (size_t i = 0; i <= n; i++) from[i] = -1;
    best[0] = 0;
    from[0] = 0;
    const int32_t UNK = -2; /* an unknown character (t->unk_id may be -1) */
    for (size_t pos = 0; pos < n;) {
        int32_t c;
        size_t mblen = (size_t)u8_next(s + pos, n - pos, &c);
        bool single = false;
        int32_t node = 0;
        for (size_t j = pos; j < n && t->trie.n_nodes > 0;) {
            node = trie_child(&t->trie, node, (uint8_t)s[j]);
            if (node < 0) break;
            j++;
            int32_t id = t->trie.id[node];
            if (id < 0) continue;
            double cand = best[pos] + t->score[id];
            if (from[j] < 0 || cand > best[j]) {
                best[j] = cand;
                from[j] = (int32_t)pos;
                tid[j] = id;
            }
            if (j - pos == mblen) single = true;
        }
        if (!single) {
            size_t j = pos + mblen;
            double cand = best[pos] + t->unk_score;
            if (from[j] < 0 || cand > best[j]) {
                best[j] = cand;
                from[j] = (int32_t)pos;
                tid[j] = UNK;
            }
        }
        pos += mblen;
    }
    /* backtrack (reversed), then emit with unknowns fused */
    int ns = 0;
    stack = nx_malloc((n + 1) * sizeof(*stack));
    if (!stack) goto oom;
    for (size_t e = n; e > 0; e = (size_t)from[e]) stack[ns++] = (int32_t)e;
    for (int k = ns - 1; k >= 0;) {
        size_t e = (size_t)stack[k];
        int32_t id = tid[e];
        bool is_unk = id == UNK || (t->unk_id >= 0 && id == t->unk_id);
        if (!is_unk) {
            if (!iv_push(out, id)) goto oom;
            k--;
            continue;
        }
        size_t b = (size_t)from[e];
        while (k - 1 >= 0) {
            int32_t nid = tid[stack[k - 1]];
            if (!(nid == UNK || (t->unk_id >= 0 && nid == t->unk_id))) break;
            k--;
        }
        e = (size_t)stack[k];
        k--;
        /* fused unknown run s[b..e) */
        if (t->byte_fallback) {
            bool all = true;
            for (size_t q = b; q < e && all; q++) {
                char bs[8];
                snprintf(bs, sizeof bs, "<0x%02X>", (uint8_t)s[q]);
                all = trie_lookup(&t->trie, bs, strlen(bs)) >= 0;
            }
            if (all) {
                for (size_t q = b; q < e; q++) {
                    char bs[8];
                    snprintf(bs, sizeof bs, "<0x%02X>", (uint8_t)s[q]);
                    if (!iv_push(out, trie_lookup(&t->trie, bs, strlen(bs)))) goto oom;
                }
                continue;
            }
        }
        if (t->unk_id < 0) {
            rc = nx_errf(
                err, errlen, NX_STATUS_FORMAT,
                "tokenizer: text not covered by the vocabulary and the model has no unk_id");
            goto done;
        }
        if (!iv_push(out, t->unk_id)) goto oom;
    }
    rc = NX_STATUS_OK;
    goto done;
oom:
    rc = nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (tokenizer)");
done:
    nx_free(best);
    nx_free(from);
    nx_free(tid);
    nx_free(stack);
    return rc;
}

/* WordPiece: greedy longest match from the left, later pieces with the continuing prefix; a
 * word that cannot be covered (or is longer than max_input_chars_per_word) is one [UNK]. */
static nx_status wordpiece_piece(const hf_tok *t, const char *s, size_t n, struct ivec *out,
                                 char *err, size_t errlen) {
    size_t pl = strlen(t->wp_prefix);
    int first_out = out->n;
    bool bad = u8_count(s, n) > (size_t)t->wp_max_chars;
    char *buf = NULL;
    if (!bad) {
        buf = nx_malloc(pl + n + 1);
        if (!buf) goto oom;
        memcpy(buf, t->wp_prefix, pl);
    }
    for (size_t start = 0; !bad && start < n;) {
        size_t end = n;
        int32_t id = -1;
        while (end > start) {
            memcpy(buf + pl, s + start, end - start);
            id = start ? trie_lookup(&t->trie, buf, pl + end - start)
                       : trie_lookup(&t->trie, s, end - start);
            if (id >= 0) break;
            end--;
            while (end > start && ((uint8_t)s[end] & 0xC0) == 0x80) end--;
        }
        if (id < 0) {
            bad = true;
            break;
        }
        if (!iv_push(out, id)) goto oom;
        start = end;
    }
    nx_free(buf);
    if (bad) {
        out->n = first_out;
        if (t->unk_id < 0) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tokenizer: word not covered by the vocabulary and no unk_token");
        }
        if (!iv_push(out, t->unk_id)) goto oom2;
    }
    return 0;
oom:
    nx_free(buf);
oom2:
    return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (tokenizer)");
}

/* Normalize + pre-tokenize one segment (no added tokens in it) into l. */
static nx_status segment_pieces(const hf_tok *t, const char *s, size_t n, bool first,
                                struct plist *l, char *err, size_t errlen) {
    struct sbuf b = {0};
    /* valid UTF-8 only from here on */
    if (!sb_reserve(&b, n)) goto oom;
    for (size_t i = 0; i < n;) {
        int32_t c;
        int k = u8_next(s + i, n - i, &c);
        bool ok = c == 0xFFFD ? sb_putc32(&b, c) : sb_put(&b, s + i, (size_t)k);
        if (!ok) goto oom;
        i += (size_t)k;
    }
    if (t->norm) {
        nx_status st = norm_apply(t->norm, &b, norm_limit(n), err, errlen);
        if (st != NX_STATUS_OK) {
            nx_free(b.p);
            return st;
        }
    }
    if (!pl_push(l, b.p, b.n, first)) goto oom;
    nx_free(b.p);
    return t->pre ? pre_apply(t->pre, l, err, errlen) : NX_STATUS_OK;
oom:
    nx_free(b.p);
    return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (tokenizer)");
}

int hf_tok_encode(const hf_tok *t, const char *text, size_t len, int32_t **ids, char *err,
                  size_t errlen) {
    struct ivec out = {0};
    *ids = NULL;
    size_t seg = 0;
    nx_status st = NX_STATUS_OK;
    for (size_t i = 0; i <= len;) {
        /* the longest added token starting at i */
        const struct added *hit = NULL;
        if (i < len)
            for (int a = 0; a < t->n_added; a++) {
                const struct added *ad = &t->added[a];
                if (ad->n <= len - i && memcmp(text + i, ad->s, ad->n) == 0 && (!hit || ad->n > hit->n))
                    hit = ad;
            }
        if (hit || i == len) {
            if (i > seg) {
                struct plist l = {0};
                st = segment_pieces(t, text + seg, i - seg, seg == 0, &l, err, errlen);
                if (st != NX_STATUS_OK) {
                    pl_clear(&l);
                    goto fail;
                }
                for (int p = 0; p < l.n; p++) {
                    st = t->wordpiece ? wordpiece_piece(t, l.v[p].p, l.v[p].n, &out, err, errlen)
                                      : unigram_piece(t, l.v[p].p, l.v[p].n, &out, err, errlen);
                    if (st != NX_STATUS_OK) {
                        pl_clear(&l);
                        goto fail;
                    }
                }
                pl_clear(&l);
            }
            if (i == len) break;
            if (!iv_push(&out, hit->id)) {
                st = nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (tokenizer)");
                goto fail;
            }
            i += hit->n;
            seg = i;
            continue;
        }
        i++;
    }
    *ids = out.v;
    return out.n;
fail:
    nx_free(out.v);
    return st;
}

char *hf_tok_debug_pretokenize(const hf_tok *t, const char *text, char *err, size_t errlen) {
    struct plist l = {0};
    if (segment_pieces(t, text, strlen(text), true, &l, err, errlen) != 0) {
        pl_clear(&l);
        return NULL;
    }
    struct sbuf b = {0};
    bool ok = sb_reserve(&b, 0);
    for (int i = 0; i < l.n && ok; i++) ok = (i == 0 || sb_put(&b, "|", 1)) && sb_put(&b, l.v[i].p, l.v[i].n);
    pl_clear(&l);
    if (!ok) {
        nx_free(b.p);
        nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        return NULL;
    }
    return b.p;
}
