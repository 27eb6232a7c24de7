/*
 * bm25.c - BM25 index: an open-addressing term dictionary, per-term postings (doc, tf), and
 * document lengths. Scoring walks the postings of each query token (see bm25.h for the formula).
 */
#include "route/bm25.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

struct posting {
    int32_t doc, tf;
};

struct term {
    char *text;
    struct posting *p;
    int32_t n, cap;
};

struct rt_bm25 {
    float k1, b;
    struct term *terms;
    int32_t n_terms, cap_terms;
    int32_t *slots; /* hash table of term indices, -1 = empty; size is a power of two */
    uint32_t n_slots;
    int32_t *doc_len;
    int32_t n_docs, cap_docs;
    int64_t total_len;
};

static uint32_t hash_str(const char *s, size_t n) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

rt_bm25 *rt_bm25_new(float k1, float b) {
    rt_bm25 *bm = nx_calloc(1, sizeof *bm);
    if (!bm) return NULL;
    bm->k1 = k1;
    bm->b = b;
    bm->n_slots = 256;
    bm->slots = nx_malloc(sizeof *bm->slots * bm->n_slots);
    if (!bm->slots) {
        nx_free(bm);
        return NULL;
    }
    memset(bm->slots, 0xff, sizeof *bm->slots * bm->n_slots);
    return bm;
}

void rt_bm25_free(rt_bm25 *bm) {
    if (!bm) return;
    for (int32_t i = 0; i < bm->n_terms; i++) {
        nx_free(bm->terms[i].text);
        nx_free(bm->terms[i].p);
    }
    nx_free(bm->terms);
    nx_free(bm->slots);
    nx_free(bm->doc_len);
    nx_free(bm);
}

int rt_bm25_n_docs(const rt_bm25 *bm) { return bm->n_docs; }

static int32_t lookup(const rt_bm25 *bm, const char *s, size_t n, uint32_t *slot_out) {
    uint32_t mask = bm->n_slots - 1, i = hash_str(s, n) & mask;
    for (;;) {
        int32_t t = bm->slots[i];
        if (t < 0) {
            if (slot_out) *slot_out = i;
            return -1;
        }
        if (strlen(bm->terms[t].text) == n && memcmp(bm->terms[t].text, s, n) == 0) return t;
        i = (i + 1) & mask;
    }
}

static int grow_slots(rt_bm25 *bm) {
    uint32_t ns = bm->n_slots * 2;
    int32_t *nsl = nx_malloc(sizeof *nsl * ns);
    if (!nsl) return -1;
    memset(nsl, 0xff, sizeof *nsl * ns);
    for (int32_t t = 0; t < bm->n_terms; t++) {
        uint32_t i = hash_str(bm->terms[t].text, strlen(bm->terms[t].text)) & (ns - 1);
        while (nsl[i] >= 0) i = (i + 1) & (ns - 1);
        nsl[i] = t;
    }
    nx_free(bm->slots);
    bm->slots = nsl;
    bm->n_slots = ns;
    return 0;
}

/* term id for s, created when missing; -1 on OOM */
static int32_t intern(rt_bm25 *bm, const char *s, size_t n) {
    uint32_t slot;
    int32_t t = lookup(bm, s, n, &slot);
    if (t >= 0) return t;
    if ((uint32_t)(bm->n_terms + 1) * 2 > bm->n_slots) {
        if (grow_slots(bm)) return -1;
        lookup(bm, s, n, &slot);
    }
    if (bm->n_terms == bm->cap_terms) {
        int32_t nc = bm->cap_terms ? bm->cap_terms * 2 : 256;
        struct term *nt = nx_realloc(bm->terms, sizeof *nt * (size_t)nc);
        if (!nt) return -1;
        bm->terms = nt;
        bm->cap_terms = nc;
    }
    char *c = nx_malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    t = bm->n_terms++;
    bm->terms[t] = (struct term){.text = c};
    bm->slots[slot] = t;
    return t;
}

static int is_tok_byte(unsigned char c) { return isalnum(c) || c >= 0x80; }
static int is_up(unsigned char c) { return c >= 'A' && c <= 'Z'; }
static int is_lo(unsigned char c) { return c >= 'a' && c <= 'z'; }

int rt_lex_tokens(const char *text, void (*fn)(const char *tok, size_t len, void *ud), void *ud) {
    const unsigned char *s = (const unsigned char *)text;
    char buf[64];
    size_t n = 0;
    int count = 0;
    for (size_t i = 0;; i++) {
        unsigned char c = s[i];
        int tokc = c && is_tok_byte(c);
        int boundary = 0;
        if (tokc && n > 0) {
            unsigned char p = s[i - 1];
            if (is_lo(p) && is_up(c)) boundary = 1;
            else if (is_up(p) && is_up(c) && is_lo(s[i + 1])) boundary = 1;
        }
        if ((!tokc || boundary) && n > 0) {
            fn(buf, n, ud);
            count++;
            n = 0;
        }
        if (!c) break;
        if (tokc && n < sizeof buf - 1) buf[n++] = (char)(is_up(c) ? c - 'A' + 'a' : c);
    }
    return count;
}

struct add_ctx {
    rt_bm25 *bm;
    int32_t *ids;
    int32_t n, cap;
    int oom;
};

static void add_tok(const char *tok, size_t len, void *ud) {
    struct add_ctx *a = ud;
    if (a->oom) return;
    int32_t t = intern(a->bm, tok, len);
    if (t < 0) {
        a->oom = 1;
        return;
    }
    if (a->n == a->cap) {
        int32_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *ni = nx_realloc(a->ids, sizeof *ni * (size_t)nc);
        if (!ni) {
            a->oom = 1;
            return;
        }
        a->ids = ni;
        a->cap = nc;
    }
    a->ids[a->n++] = t;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

nx_status rt_bm25_add(rt_bm25 *bm, const char *text) {
    if (bm->n_docs == bm->cap_docs) {
        int32_t nc = bm->cap_docs ? bm->cap_docs * 2 : 64;
        int32_t *nd = nx_realloc(bm->doc_len, sizeof *nd * (size_t)nc);
        if (!nd) return NX_STATUS_NOMEM;
        bm->doc_len = nd;
        bm->cap_docs = nc;
    }
    struct add_ctx a = {.bm = bm};
    rt_lex_tokens(text, add_tok, &a);
    if (a.oom) {
        nx_free(a.ids);
        return NX_STATUS_NOMEM;
    }
    int32_t doc = bm->n_docs;
    if (a.n > 1) qsort(a.ids, (size_t)a.n, sizeof *a.ids, cmp_i32);
    for (int32_t i = 0; i < a.n;) {
        int32_t j = i;
        while (j < a.n && a.ids[j] == a.ids[i]) j++;
        struct term *t = &bm->terms[a.ids[i]];
        if (t->n == t->cap) {
            int32_t nc = t->cap ? t->cap * 2 : 4;
            struct posting *np = nx_realloc(t->p, sizeof *np * (size_t)nc);
            if (!np) { /* roll back this document's postings */
                for (int32_t k = 0; k < i; k++) {
                    struct term *u = &bm->terms[a.ids[k]];
                    if (u->n > 0 && u->p[u->n - 1].doc == doc) u->n--;
                }
                nx_free(a.ids);
                return NX_STATUS_NOMEM;
            }
            t->p = np;
            t->cap = nc;
        }
        t->p[t->n++] = (struct posting){doc, j - i};
        i = j;
    }
    bm->doc_len[doc] = a.n;
    bm->total_len += a.n;
    bm->n_docs++;
    nx_free(a.ids);
    return 0;
}

char *rt_tool_document(const struct rt_tool *t) {
    size_t n = strlen(t->name) + strlen(t->description) + 4;
    json_t *props = json_object_get(t->schema, "properties");
    const char *k;
    json_t *v;
    if (json_is_object(props)) json_object_foreach(props, k, v) n += strlen(k) + 1;
    char *s = nx_malloc(n);
    if (!s) return NULL;
    size_t o = (size_t)snprintf(s, n, "%s %s", t->name, t->description);
    if (json_is_object(props)) json_object_foreach(props, k, v) o += (size_t)snprintf(s + o, n - o, " %s", k);
    return s;
}

nx_status rt_bm25_add_tool(rt_bm25 *bm, const struct rt_tool *t) {
    char *doc = rt_tool_document(t);
    if (!doc) return NX_STATUS_NOMEM;
    nx_status rc = rt_bm25_add(bm, doc);
    nx_free(doc);
    return rc;
}

struct score_ctx {
    const rt_bm25 *bm;
    float *scores;
    double avgdl;
    int found;
};

static void score_tok(const char *tok, size_t len, void *ud) {
    struct score_ctx *c = ud;
    const rt_bm25 *bm = c->bm;
    int32_t t = lookup(bm, tok, len, NULL);
    if (t < 0) return;
    c->found++;
    const struct term *tm = &bm->terms[t];
    double N = bm->n_docs, df = tm->n;
    double idf = log(1.0 + (N - df + 0.5) / (df + 0.5));
    double k1 = bm->k1, b = bm->b;
    for (int32_t i = 0; i < tm->n; i++) {
        double tf = tm->p[i].tf;
        double dl = bm->doc_len[tm->p[i].doc];
        double norm = c->avgdl > 0 ? dl / c->avgdl : 0;
        c->scores[tm->p[i].doc] += (float)(idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * norm)));
    }
}

int rt_bm25_score(const rt_bm25 *bm, const char *query, float *scores) {
    for (int32_t d = 0; d < bm->n_docs; d++) scores[d] = 0;
    if (bm->n_docs == 0) return 0;
    struct score_ctx c = {bm, scores, (double)bm->total_len / bm->n_docs, 0};
    rt_lex_tokens(query, score_tok, &c);
    return c.found;
}
