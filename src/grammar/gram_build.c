/*
 * gram_build.c - DESIGN: the grammar builder (rules, alternatives, symbols), code-point classes
 * compiled to UTF-8 byte sequences, repetitions to helper rules, and gram_finish: checks
 * (undefined rules, left recursion), shortest-completion tables, flattening. See gram.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "grammar/gram.h"

#define GINF (INT32_MAX / 4)

void gram_builder_init(struct gbuilder *b) { memset(b, 0, sizeof *b); }

void gram_builder_free(struct gbuilder *b) {
    for (int32_t r = 0; r < b->n_rules; r++) {
        for (int32_t a = 0; a < b->rules[r].n_alts; a++) nx_free(b->rules[r].alts[a].s);
        nx_free(b->rules[r].alts);
        nx_free(b->rules[r].name);
    }
    nx_free(b->rules);
    nx_free(b->sets);
    memset(b, 0, sizeof *b);
}

static bool grow(void **p, int32_t *cap, int32_t need, size_t elem) {
    if (need <= *cap) return true;
    int32_t nc = *cap ? *cap * 2 : 8;
    while (nc < need) nc *= 2;
    size_t bytes;
    if (!nx_mul_size((size_t)nc, elem, &bytes)) return false;
    void *q = nx_realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

static int32_t rule_add(struct gbuilder *b, const char *name, size_t len) {
    if (b->oom) return -1;
    if (!grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        b->oom = true;
        return -1;
    }
    char *nm = nx_malloc(len + 1);
    if (!nm) {
        b->oom = true;
        return -1;
    }
    memcpy(nm, name, len);
    nm[len] = 0;
    struct grule *r = &b->rules[b->n_rules];
    memset(r, 0, sizeof *r);
    r->name = nm;
    return b->n_rules++;
}

int32_t gram_rule(struct gbuilder *b, const char *name, size_t len) {
    for (int32_t r = 0; r < b->n_rules; r++)
        if (strlen(b->rules[r].name) == len && !memcmp(b->rules[r].name, name, len)) return r;
    return rule_add(b, name, len);
}

int32_t gram_rule_helper(struct gbuilder *b, const char *base) {
    char nm[96];
    int n = snprintf(nm, sizeof nm, "%.60s-%d", base, ++b->n_helpers);
    int32_t r = rule_add(b, nm, (size_t)n);
    if (r >= 0) b->rules[r].defined = true;
    return r;
}

int32_t gram_alt_new(struct gbuilder *b, int32_t r) {
    if (b->oom || r < 0) return -1;
    struct grule *ru = &b->rules[r];
    if (!grow((void **)&ru->alts, &ru->cap_alts, ru->n_alts + 1, sizeof *ru->alts)) {
        b->oom = true;
        return -1;
    }
    memset(&ru->alts[ru->n_alts], 0, sizeof ru->alts[0]);
    ru->defined = true;
    return ru->n_alts++;
}

void gram_alt_push(struct gbuilder *b, int32_t r, int32_t alt, struct gsym s) {
    if (b->oom || r < 0 || alt < 0) return;
    struct galt *a = &b->rules[r].alts[alt];
    if (!grow((void **)&a->s, &a->cap, a->n + 1, sizeof *a->s)) {
        b->oom = true;
        return;
    }
    a->s[a->n++] = s;
}

struct gsym gram_ref(int32_t r) { return (struct gsym){.kind = GSYM_REF, .v = r}; }

struct gsym gram_byteset(struct gbuilder *b, const uint64_t set[4]) {
    for (int32_t i = 0; i < b->n_sets; i++)
        if (!memcmp(b->sets[i], set, sizeof b->sets[i])) return (struct gsym){.kind = GSYM_TERM, .v = i};
    if (!grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
        b->oom = true;
        return (struct gsym){.kind = GSYM_TERM, .v = 0};
    }
    memcpy(b->sets[b->n_sets], set, sizeof b->sets[0]);
    return (struct gsym){.kind = GSYM_TERM, .v = b->n_sets++};
}

static void set_range(uint64_t s[4], unsigned lo, unsigned hi) {
    for (unsigned c = lo; c <= hi; c++) s[c >> 6] |= 1ull << (c & 63);
}

struct gsym gram_byte(struct gbuilder *b, unsigned char c) {
    uint64_t s[4] = {0};
    set_range(s, c, c);
    return gram_byteset(b, s);
}

void gram_alt_push_literal(struct gbuilder *b, int32_t r, int32_t alt, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) gram_alt_push(b, r, alt, gram_byte(b, (unsigned char)s[i]));
}

/* ---- code-point classes to UTF-8 ---- */

static int utf8_enc(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        o[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 63));
    o[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

/* Emit the byte-sequence alternatives covering [lo, hi] (no surrogates inside) into rule r.
 * Splits at encoded-length boundaries, then until each piece is a product of byte ranges. */
static void utf8_split(struct gbuilder *b, int32_t r, uint64_t ascii[4], uint32_t lo, uint32_t hi) {
    if (lo > hi || b->oom) return;
    static const uint32_t bounds[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i]) {
            utf8_split(b, r, ascii, lo, bounds[i]);
            utf8_split(b, r, ascii, bounds[i] + 1, hi);
            return;
        }
    if (hi < 0x80) {
        set_range(ascii, lo, hi);
        return;
    }
    for (int i = 1; i < 4; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(b, r, ascii, lo, lo | m);
                utf8_split(b, r, ascii, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(b, r, ascii, lo, (hi & ~m) - 1);
                utf8_split(b, r, ascii, hi & ~m, hi);
                return;
            }
        }
    }
    unsigned char a[4], z[4];
    int n = utf8_enc(lo, a);
    utf8_enc(hi, z);
    int32_t alt = gram_alt_new(b, r);
    for (int k = 0; k < n; k++) {
        uint64_t s[4] = {0};
        set_range(s, a[k], z[k]);
        gram_alt_push(b, r, alt, gram_byteset(b, s));
    }
}

static int cmp_range(const void *x, const void *y) {
    const uint32_t *a = x, *c = y;
    return (a[0] > c[0]) - (a[0] < c[0]);
}

struct gsym gram_class(struct gbuilder *b, const uint32_t (*ranges)[2], int32_t n, bool negated) {
    struct gsym fail = gram_ref(0);
    uint32_t(*rg)[2] = nx_malloc(sizeof *rg * (size_t)(n + 2) * 2);
    if (!rg) {
        b->oom = true;
        return fail;
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        uint32_t lo = ranges[i][0], hi = ranges[i][1] > 0x10FFFF ? 0x10FFFF : ranges[i][1];
        if (lo > hi) continue;
        rg[m][0] = lo;
        rg[m][1] = hi;
        m++;
    }
    qsort(rg, (size_t)m, sizeof *rg, cmp_range);
    int32_t k = 0; /* merge */
    for (int32_t i = 0; i < m; i++) {
        if (k > 0 && rg[i][0] <= rg[k - 1][1] + 1) {
            if (rg[i][1] > rg[k - 1][1]) rg[k - 1][1] = rg[i][1];
        } else {
            rg[k][0] = rg[i][0];
            rg[k][1] = rg[i][1];
            k++;
        }
    }
    m = k;
    if (negated) { /* complement in place into the upper half of the buffer */
        uint32_t(*cp)[2] = rg + n + 2;
        int32_t c = 0;
        uint32_t next = 0;
        for (int32_t i = 0; i < m; i++) {
            if (rg[i][0] > next) {
                cp[c][0] = next;
                cp[c][1] = rg[i][0] - 1;
                c++;
            }
            next = rg[i][1] + 1;
        }
        if (next <= 0x10FFFF) {
            cp[c][0] = next;
            cp[c][1] = 0x10FFFF;
            c++;
        }
        memmove(rg, cp, sizeof *rg * (size_t)c);
        m = c;
    }
    uint64_t ascii[4] = {0};
    bool multi = false;
    for (int32_t i = 0; i < m; i++) multi |= rg[i][1] >= 0x80;
    if (!multi) {
        for (int32_t i = 0; i < m; i++) set_range(ascii, rg[i][0], rg[i][1]);
        nx_free(rg);
        if (m == 0) { /* matches nothing: a rule without alternatives */
            int32_t r = gram_rule_helper(b, "empty-class");
            return r < 0 ? fail : gram_ref(r);
        }
        return gram_byteset(b, ascii);
    }
    int32_t r = gram_rule_helper(b, "class");
    if (r < 0) {
        nx_free(rg);
        return fail;
    }
    for (int32_t i = 0; i < m; i++) {
        uint32_t lo = rg[i][0], hi = rg[i][1];
        if (lo <= 0xDFFF && hi >= 0xD800) { /* drop surrogates */
            if (lo < 0xD800) utf8_split(b, r, ascii, lo, 0xD7FF);
            if (hi > 0xDFFF) utf8_split(b, r, ascii, 0xE000, hi);
        } else {
            utf8_split(b, r, ascii, lo, hi);
        }
    }
    nx_free(rg);
    if (ascii[0] | ascii[1] | ascii[2] | ascii[3]) {
        int32_t alt = gram_alt_new(b, r);
        gram_alt_push(b, r, alt, gram_byteset(b, ascii));
    }
    return gram_ref(r);
}

struct gsym gram_repeat(struct gbuilder *b, struct gsym s, int32_t min, int32_t max) {
    if (min == 1 && max == 1) return s;
    int32_t h = gram_rule_helper(b, "rep");
    if (h < 0) return s;
    int32_t tail = -1;
    if (max < 0) { /* T ::= s T | empty */
        tail = gram_rule_helper(b, "star");
        int32_t a = gram_alt_new(b, tail);
        gram_alt_push(b, tail, a, s);
        gram_alt_push(b, tail, a, gram_ref(tail));
        gram_alt_new(b, tail);
    } else {
        /* T_k ::= s T_{k-1} | empty, built from k = 1 up */
        for (int32_t k = 1; k <= max - min; k++) {
            int32_t t = gram_rule_helper(b, "opt");
            int32_t a = gram_alt_new(b, t);
            gram_alt_push(b, t, a, s);
            if (tail >= 0) gram_alt_push(b, t, a, gram_ref(tail));
            gram_alt_new(b, t);
            tail = t;
        }
    }
    int32_t a = gram_alt_new(b, h);
    for (int32_t i = 0; i < min; i++) gram_alt_push(b, h, a, s);
    if (tail >= 0) gram_alt_push(b, h, a, gram_ref(tail));
    return gram_ref(h);
}

/* ---- finish ---- */

static int32_t sym_min(const struct gsym *s, const int32_t *min_rule) {
    if (s->kind == GSYM_TERM) return 1;
    if (s->kind == GSYM_JSTR) return s->min + 1;
    return min_rule[s->v];
}

/* DFS colouring for left-recursion: 0 new, 1 on stack, 2 done. */
static int32_t left_cycle(const struct gbuilder *b, const bool *nullable, int32_t r, uint8_t *col) {
    col[r] = 1;
    const struct grule *ru = &b->rules[r];
    for (int32_t a = 0; a < ru->n_alts; a++) {
        for (int32_t i = 0; i < ru->alts[a].n; i++) {
            const struct gsym *s = &ru->alts[a].s[i];
            if (s->kind != GSYM_REF) break;
            if (col[s->v] == 1) return s->v;
            if (col[s->v] == 0) {
                int32_t c = left_cycle(b, nullable, s->v, col);
                if (c >= 0) return c;
            }
            if (!nullable[s->v]) break;
        }
    }
    col[r] = 2;
    return -1;
}

nx_status gram_finish(struct gbuilder *b, const char *root, struct gram **out, struct nx_err *err) {
    *out = NULL;
    if (b->oom) return nx_err_set(err, NX_STATUS_NOMEM, "grammar: out of memory");
    int32_t nr = b->n_rules;
    int32_t root_id = -1;
    for (int32_t r = 0; r < nr; r++)
        if (!strcmp(b->rules[r].name, root)) root_id = r;
    if (root_id < 0 || !b->rules[root_id].defined)
        return nx_err_set(err, NX_STATUS_FORMAT, "grammar: no rule '%s' (the root)", root);
    for (int32_t r = 0; r < nr; r++)
        if (!b->rules[r].defined)
            return nx_err_set(err, NX_STATUS_FORMAT, "grammar: %d:%d: undefined rule '%s'",
                              b->rules[r].line, b->rules[r].col, b->rules[r].name);
    nx_status st = NX_STATUS_NOMEM;
    bool *nullable = nx_calloc((size_t)nr, sizeof *nullable);
    uint8_t *col = nx_calloc((size_t)nr, 1);
    struct gram *g = nx_calloc(1, sizeof *g);
    if (!nullable || !col || !g) goto fail;
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < nr; r++) {
            if (nullable[r]) continue;
            for (int32_t a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                bool all = true;
                for (int32_t i = 0; i < b->rules[r].alts[a].n && all; i++) {
                    const struct gsym *s = &b->rules[r].alts[a].s[i];
                    all = s->kind == GSYM_REF && nullable[s->v];
                }
                if (all) nullable[r] = changed = true;
            }
        }
    }
    for (int32_t r = 0; r < nr; r++) {
        if (col[r]) continue;
        int32_t c = left_cycle(b, nullable, r, col);
        if (c >= 0) {
            st = nx_err_set(err, NX_STATUS_FORMAT,
                            "grammar: left recursion through rule '%s' (a rule reaches itself "
                            "before consuming input)", b->rules[c].name);
            goto fail;
        }
    }
    /* flatten */
    int64_t n_el = 0, n_alt = 0;
    for (int32_t r = 0; r < nr; r++) {
        n_alt += b->rules[r].n_alts;
        for (int32_t a = 0; a < b->rules[r].n_alts; a++) n_el += b->rules[r].alts[a].n + 1;
    }
    if (n_el > INT32_MAX / 2 || n_alt > INT32_MAX / 2) {
        st = nx_err_set(err, NX_STATUS_FORMAT, "grammar: too large");
        goto fail;
    }
    g->el = nx_calloc((size_t)n_el + 1, sizeof *g->el);
    g->rule_alt_off = nx_calloc((size_t)nr + 1, sizeof *g->rule_alt_off);
    g->alt_start = nx_calloc((size_t)n_alt + 1, sizeof *g->alt_start);
    g->rule_names = nx_calloc((size_t)nr, sizeof *g->rule_names);
    g->min_rule = nx_calloc((size_t)nr, sizeof *g->min_rule);
    g->min_alt = nx_calloc((size_t)nr, sizeof *g->min_alt);
    g->min_rest = nx_calloc((size_t)n_el + 1, sizeof *g->min_rest);
    g->sets = nx_malloc(sizeof *g->sets * (size_t)(b->n_sets + 1));
    if (!g->el || !g->rule_alt_off || !g->alt_start || !g->rule_names || !g->min_rule ||
        !g->min_alt || !g->min_rest || !g->sets)
        goto fail;
    g->n_rules = nr;
    g->n_sets = b->n_sets;
    if (b->n_sets) memcpy(g->sets, b->sets, sizeof *g->sets * (size_t)b->n_sets);
    g->root = root_id;
    int32_t e = 0, ai = 0;
    for (int32_t r = 0; r < nr; r++) {
        g->rule_names[r] = nx_strdup(b->rules[r].name);
        if (!g->rule_names[r]) goto fail;
        g->rule_alt_off[r] = ai;
        for (int32_t a = 0; a < b->rules[r].n_alts; a++) {
            g->alt_start[ai++] = e;
            for (int32_t i = 0; i < b->rules[r].alts[a].n; i++) {
                const struct gsym *s = &b->rules[r].alts[a].s[i];
                g->el[e++] = (struct gel){.type = s->kind == GSYM_TERM  ? GEL_TERM
                                                  : s->kind == GSYM_REF ? GEL_REF
                                                                        : GEL_JSTR,
                                          .v = s->v, .min = s->min, .max = s->max};
            }
            g->el[e++] = (struct gel){.type = GEL_END};
        }
    }
    g->rule_alt_off[nr] = ai;
    g->n_el = e;
    /* shortest completions (fixpoint) */
    for (int32_t r = 0; r < nr; r++) g->min_rule[r] = GINF;
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t r = 0; r < nr; r++) {
            for (int32_t a = 0; a < b->rules[r].n_alts; a++) {
                int64_t sum = 0;
                for (int32_t i = 0; i < b->rules[r].alts[a].n; i++)
                    sum += sym_min(&b->rules[r].alts[a].s[i], g->min_rule);
                if (sum < g->min_rule[r]) {
                    g->min_rule[r] = (int32_t)sum;
                    g->min_alt[r] = a;
                    changed = true;
                }
            }
        }
    }
    if (g->min_rule[root_id] >= GINF) {
        st = nx_err_set(err, NX_STATUS_FORMAT, "grammar: rule '%s' derives no finite string", root);
        goto fail;
    }
    for (int32_t i = e - 1; i >= 0; i--) {
        const struct gel *x = &g->el[i];
        int64_t v = x->type == GEL_END    ? 0
                    : x->type == GEL_TERM ? 1 + (int64_t)g->min_rest[i + 1]
                    : x->type == GEL_JSTR ? (int64_t)x->min + 1 + g->min_rest[i + 1]
                                          : (int64_t)g->min_rule[x->v] + g->min_rest[i + 1];
        g->min_rest[i] = v > GINF ? GINF : (int32_t)v;
    }
    nx_free(nullable);
    nx_free(col);
    *out = g;
    return NX_STATUS_OK;
fail:
    if (st == NX_STATUS_NOMEM) nx_err_set(err, NX_STATUS_NOMEM, "grammar: out of memory");
    nx_free(nullable);
    nx_free(col);
    gram_free(g);
    return st;
}

void gram_free(struct gram *g) {
    if (!g) return;
    if (g->rule_names)
        for (int32_t r = 0; r < g->n_rules; r++) nx_free(g->rule_names[r]);
    nx_free(g->rule_names);
    nx_free(g->el);
    nx_free(g->rule_alt_off);
    nx_free(g->alt_start);
    nx_free(g->sets);
    nx_free(g->min_rule);
    nx_free(g->min_alt);
    nx_free(g->min_rest);
    nx_free(g);
}

/* ---- printing ---- */

struct pbuf {
    char *b;
    int32_t len, n;
};
static void pb_put(struct pbuf *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void pb_put(struct pbuf *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int32_t room = p->n < p->len ? p->len - p->n : 0;
    int k = vsnprintf(room ? p->b + p->n : NULL, (size_t)room, fmt, ap);
    va_end(ap);
    if (k > 0) p->n += k;
}

static void print_set(struct pbuf *p, const uint64_t s[4]) {
    pb_put(p, "[");
    for (int c = 0; c < 256; c++) {
        if (!(s[c >> 6] >> (c & 63) & 1)) continue;
        int d = c;
        while (d + 1 < 256 && (s[(d + 1) >> 6] >> ((d + 1) & 63) & 1)) d++;
        if (c >= 0x21 && c < 0x7F && c != '\\' && c != ']' && c != '[' && c != '-' && c != '^')
            pb_put(p, "%c", c);
        else
            pb_put(p, "\\x%02X", c);
        if (d > c) {
            pb_put(p, "-");
            if (d >= 0x21 && d < 0x7F && d != '\\' && d != ']' && d != '[' && d != '-' && d != '^')
                pb_put(p, "%c", d);
            else
                pb_put(p, "\\x%02X", d);
        }
        c = d;
    }
    pb_put(p, "]");
}

int32_t gram_print(const struct gram *g, char *buf, int32_t len) {
    struct pbuf p = {buf, len, 0};
    for (int32_t r = 0; r < g->n_rules; r++) {
        pb_put(&p, "%s ::=", g->rule_names[r]);
        for (int32_t a = g->rule_alt_off[r]; a < g->rule_alt_off[r + 1]; a++) {
            if (a > g->rule_alt_off[r]) pb_put(&p, " |");
            for (int32_t e = g->alt_start[a]; g->el[e].type != GEL_END; e++) {
                const struct gel *x = &g->el[e];
                if (x->type == GEL_TERM) {
                    pb_put(&p, " ");
                    print_set(&p, g->sets[x->v]);
                } else if (x->type == GEL_REF) {
                    pb_put(&p, " %s", g->rule_names[x->v]);
                } else {
                    pb_put(&p, " %%json-string-body{%d,%d}", x->min, x->max);
                }
            }
            if (g->el[g->alt_start[a]].type == GEL_END) pb_put(&p, " \"\"");
        }
        pb_put(&p, "\n");
    }
    if (p.n < len) buf[p.n] = 0;
    return p.n < len ? p.n : -(p.n + 1);
}
