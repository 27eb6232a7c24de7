/*
 * jinja_value.c - the value type of the Jinja interpreter and the arena it lives in.
 *
 * DESIGN. Values (struct jval) are small tagged unions passed by value; strings, lists and
 * dicts point into the render's arena. Dicts keep insertion order (linear lookup: chat
 * messages and tool schemas have a handful of keys). The formatting functions reproduce what
 * Python writes: str() and repr() of every type (float repr is the shortest string that
 * round-trips, in Python's fixed/scientific switch), and json.dumps with the options of
 * Hugging Face's tojson (ensure_ascii, indent, separators, sort_keys). Errors unwind through
 * jerr (see jinja.h); nothing here frees memory. Not thread-safe per arena; arenas are per call.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"
#include "core/alloc.h"

struct jchunk {
    struct jchunk *next;
    size_t cap, used;
    _Alignas(16) unsigned char mem[];
};

void jarena_free(struct jarena *a) {
    struct jchunk *c = a->head;
    while (c) {
        struct jchunk *n = c->next;
        nx_free(c);
        c = n;
    }
    a->head = NULL;
    a->used = 0;
}

_Noreturn void jerr(struct jerr_ctx *e, nx_status st, const char *kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    e->st = st;
    longjmp(e->jmp, 1);
}

void *jalloc(struct jerr_ctx *e, size_t n) {
    struct jarena *a = e->arena;
    n = (n + 15) & ~(size_t)15;
    struct jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 - sizeof *c ? n : 65536 - sizeof *c;
        if (a->limit && a->used + cap > a->limit)
            jerr(e, NX_STATUS_INVALID_ARG, "limit", "template used more than %zu bytes of memory",
                 a->limit);
        c = nx_malloc(sizeof *c + cap);
        if (!c) jerr(e, NX_STATUS_NOMEM, "nomem", "out of memory");
        c->cap = cap;
        c->used = 0;
        c->next = a->head;
        a->head = c;
        a->used += cap;
    }
    void *p = c->mem + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jstrndup(struct jerr_ctx *e, const char *s, size_t n) {
    char *p = jalloc(e, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* ---- buffers ---- */
void jbuf_put(struct jerr_ctx *e, struct jbuf *b, const char *s, size_t n) {
    /* the limit on every put, not only when the buffer grows: a put that ends exactly at the
       limit grows the capacity past it, and later puts would fit without a check (fuzzing) */
    if (b->limit && b->n + n > b->limit)
        jerr(e, NX_STATUS_INVALID_ARG, "limit", "output longer than %zu bytes", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = jalloc(e, cap);
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void jbuf_puts(struct jerr_ctx *e, struct jbuf *b, const char *s) { jbuf_put(e, b, s, strlen(s)); }
void jbuf_putc(struct jerr_ctx *e, struct jbuf *b, char c) { jbuf_put(e, b, &c, 1); }
jval jbuf_val(struct jbuf *b) { return jv_str(b->p ? b->p : "", b->n); }

/* ---- lists and dicts ---- */
struct jlist *jlist_new(struct jerr_ctx *e, size_t cap) {
    struct jlist *l = jalloc(e, sizeof *l);
    if (cap) {
        l->v = jalloc(e, cap * sizeof *l->v);
        l->cap = cap;
    }
    return l;
}
void jlist_push(struct jerr_ctx *e, struct jlist *l, jval v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jval *nv = jalloc(e, cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}
jval jv_list(struct jlist *l, unsigned flags) {
    jval v = {.t = JV_LIST, .flags = (uint8_t)flags};
    v.u.l = l;
    return v;
}
struct jdict *jdict_new(struct jerr_ctx *e, size_t cap) {
    struct jdict *d = jalloc(e, sizeof *d);
    if (cap) {
        d->k = jalloc(e, cap * sizeof *d->k);
        d->v = jalloc(e, cap * sizeof *d->v);
        d->cap = cap;
    }
    return d;
}
jval *jdict_get(struct jdict *d, jval k) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], k)) return &d->v[i];
    return NULL;
}
jval *jdict_get_str(struct jdict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].u.s.n == n && memcmp(d->k[i].u.s.p, k, n) == 0)
            return &d->v[i];
    return NULL;
}
void jdict_set(struct jerr_ctx *e, struct jdict *d, jval k, jval v) {
    jval *old = jdict_get(d, k);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jval *nk = jalloc(e, cap * sizeof *nk), *nv = jalloc(e, cap * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
}
jval jv_dict(struct jdict *d) {
    jval v = {.t = JV_DICT};
    v.u.d = d;
    return v;
}

/* ---- Python semantics ---- */
bool jv_truthy(jval v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return (v.flags & JL_GEN) || v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return true;
    }
}

static bool is_num(jval v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num_f(jval v) {
    return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}
static int64_t num_i(jval v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

#define MAX_NEST 500 /* deepest list/dict nesting compared or printed (the C stack is the limit) */

static bool equal_d(jval a, jval b, int depth);
bool jv_equal(jval a, jval b) { return equal_d(a, b, 0); }

/* deeper than MAX_NEST compares unequal rather than exhausting the stack */
static bool equal_d(jval a, jval b, int depth) {
    if (depth > MAX_NEST) return false;
    if (is_num(a) && is_num(b)) {
        if (a.t == JV_FLOAT || b.t == JV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a.u.s.n == b.u.s.n && memcmp(a.u.s.p, b.u.s.p, a.u.s.n) == 0;
    case JV_LIST:
        if (a.u.l->n != b.u.l->n || (a.flags & JL_TUPLE) != (b.flags & JL_TUPLE)) return false;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!equal_d(a.u.l->v[i], b.u.l->v[i], depth + 1)) return false;
        return true;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return false;
        for (size_t i = 0; i < a.u.d->n; i++) {
            jval *o = jdict_get(b.u.d, a.u.d->k[i]);
            if (!o || !equal_d(a.u.d->v[i], *o, depth + 1)) return false;
        }
        return true;
    case JV_NS: return a.u.d == b.u.d;
    case JV_FUNC: return a.u.fn == b.u.fn;
    case JV_LOOP: return a.u.loop == b.u.loop;
    default: return false;
    }
}

const char *jv_type_name(jval v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return (v.flags & JL_GEN) ? "generator" : (v.flags & JL_TUPLE) ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return v.u.fn->kind == JF_MACRO ? "Macro" : "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    default: return "object";
    }
}

static int compare_d(struct jerr_ctx *e, jval a, jval b, const char *op, int depth);
int jv_compare(struct jerr_ctx *e, jval a, jval b, const char *op) { return compare_d(e, a, b, op, 0); }

static int compare_d(struct jerr_ctx *e, jval a, jval b, const char *op, int depth) {
    if (depth > MAX_NEST) jerr(e, NX_STATUS_INVALID_ARG, "limit", "values nested too deeply to compare");
    if (is_num(a) && is_num(b)) {
        if (a.t == JV_FLOAT || b.t == JV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        int c = memcmp(a.u.s.p, b.u.s.p, n);
        if (c) return c;
        return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n ? 1 : 0;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && !((a.flags | b.flags) & JL_GEN)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jv_equal(a.u.l->v[i], b.u.l->v[i])) continue;
            return compare_d(e, a.u.l->v[i], b.u.l->v[i], op, depth + 1);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) {
        jval u = a.t == JV_UNDEF ? a : b;
        jerr(e, NX_STATUS_INVALID_ARG, "undefined", "%s", u.u.hint ? u.u.hint : "undefined value");
    }
    jerr(e, NX_STATUS_INVALID_ARG, "python",
         "TypeError: '%s' not supported between instances of '%s' and '%s'", op,
         jv_type_name(a), jv_type_name(b));
}

jval jv_html_escape(struct jerr_ctx *e, jval s) {
    if (s.flags & JS_SAFE) return s;
    struct jbuf b = {0};
    for (size_t k = 0; k < s.u.s.n; k++) {
        char c = s.u.s.p[k];
        switch (c) {
        case '&': jbuf_puts(e, &b, "&amp;"); break;
        case '<': jbuf_puts(e, &b, "&lt;"); break;
        case '>': jbuf_puts(e, &b, "&gt;"); break;
        case '"': jbuf_puts(e, &b, "&#34;"); break;
        case '\'': jbuf_puts(e, &b, "&#39;"); break;
        default: jbuf_putc(e, &b, c);
        }
    }
    jval r = jbuf_val(&b);
    r.flags = JS_SAFE;
    return r;
}

/* ---- UTF-8 ---- */
size_t utf8_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}
size_t utf8_offset(const char *s, size_t n, size_t cp) {
    size_t c = 0, i = 0;
    for (; i < n; i++) {
        if (((unsigned char)s[i] & 0xC0) != 0x80) {
            if (c == cp) return i;
            c++;
        }
    }
    return n;
}
/* decode one code point at s[*i] (advances); invalid bytes decode as themselves */
static uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    uint32_t c = u[*i];
    int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    if (*i + (size_t)extra >= n) extra = 0;
    if (extra) c &= 0x3F >> extra;
    (*i)++;
    for (int k = 0; k < extra; k++) c = (c << 6) | (u[(*i)++] & 0x3F);
    return c;
}

/* ---- formatting ---- */
void py_float_repr(double d, char out[32]) {
    if (isnan(d)) { strcpy(out, "nan"); return; }
    if (isinf(d)) { strcpy(out, d < 0 ? "-inf" : "inf"); return; }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, d);
        if (strtod(tmp, NULL) == d) break;
    }
    /* tmp = [-]D[.DDD]e[+-]XX */
    char digits[24];
    int nd = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char *o = out;
    if (neg) *o++ = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -exp - 1; k++) *o++ = '0';
            for (int k = 0; k < nd; k++) *o++ = digits[k];
        } else {
            for (int k = 0; k <= exp; k++) *o++ = k < nd ? digits[k] : '0';
            *o++ = '.';
            if (nd > exp + 1)
                for (int k = exp + 1; k < nd; k++) *o++ = digits[k];
            else
                *o++ = '0';
        }
        *o = 0;
    } else {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            for (int k = 1; k < nd; k++) *o++ = digits[k];
        }
        snprintf(o, (size_t)(out + 32 - o), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
}

static void repr_str(struct jerr_ctx *e, struct jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jbuf_putc(e, b, q);
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        uint32_t c = utf8_next(s, n, &i);
        char esc[12];
        if (c == (uint32_t)q || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            jbuf_put(e, b, esc, 2);
        } else if (c == '\n') jbuf_put(e, b, "\\n", 2);
        else if (c == '\r') jbuf_put(e, b, "\\r", 2);
        else if (c == '\t') jbuf_put(e, b, "\\t", 2);
        else if (c < 0x20 || (c >= 0x7f && c < 0xa0)) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            jbuf_puts(e, b, esc);
        } else if (c == 0xad || (c >= 0x2028 && c <= 0x2029) || (c >= 0xd800 && c < 0xe000)) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            jbuf_puts(e, b, esc);
        } else jbuf_put(e, b, s + st, i - st);
    }
    jbuf_putc(e, b, q);
}

static void repr_d(struct jerr_ctx *e, struct jbuf *b, jval v, int depth);
void jv_repr_into(struct jerr_ctx *e, struct jbuf *b, jval v) { repr_d(e, b, v, 0); }

static void repr_d(struct jerr_ctx *e, struct jbuf *b, jval v, int depth) {
    if (depth > MAX_NEST) jerr(e, NX_STATUS_INVALID_ARG, "limit", "value nested too deeply to print");
    switch (v.t) {
    case JV_STR: repr_str(e, b, v.u.s.p, v.u.s.n); return;
    case JV_UNDEF: return; /* jinja2's Undefined repr is "Undefined"; str is "" */
    case JV_LIST: {
        if (v.flags & JL_GEN) {
            jerr(e, NX_STATUS_UNSUPPORTED, "unsupported",
                 "printing a generator (the result of map/select without |list)");
        }
        bool tup = v.flags & JL_TUPLE;
        jbuf_putc(e, b, tup ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jbuf_put(e, b, ", ", 2);
            repr_d(e, b, v.u.l->v[i], depth + 1);
        }
        if (tup && v.u.l->n == 1) jbuf_putc(e, b, ',');
        jbuf_putc(e, b, tup ? ')' : ']');
        return;
    }
    case JV_DICT: {
        jbuf_putc(e, b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jbuf_put(e, b, ", ", 2);
            repr_d(e, b, v.u.d->k[i], depth + 1);
            jbuf_put(e, b, ": ", 2);
            repr_d(e, b, v.u.d->v[i], depth + 1);
        }
        jbuf_putc(e, b, '}');
        return;
    }
    default: jv_str_into(e, b, v); return;
    }
}

void jv_str_into(struct jerr_ctx *e, struct jbuf *b, jval v) {
    char tmp[40];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: jbuf_put(e, b, "None", 4); return;
    case JV_BOOL: jbuf_puts(e, b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jbuf_puts(e, b, tmp); return;
    case JV_FLOAT: py_float_repr(v.u.f, tmp); jbuf_puts(e, b, tmp); return;
    case JV_STR: jbuf_put(e, b, v.u.s.p, v.u.s.n); return;
    case JV_LIST: case JV_DICT: jv_repr_into(e, b, v); return;
    case JV_NS: jbuf_puts(e, b, "<Namespace>"); return;
    case JV_LOOP: jbuf_puts(e, b, "<LoopContext>"); return;
    case JV_FUNC:
        jerr(e, NX_STATUS_UNSUPPORTED, "unsupported", "printing the function '%s'", v.u.fn->name);
    default: return;
    }
}

jval jv_to_str(struct jerr_ctx *e, jval v) {
    if (v.t == JV_STR) return v;
    struct jbuf b = {0};
    jv_str_into(e, &b, v);
    return jbuf_val(&b);
}

static void json_str(struct jerr_ctx *e, struct jbuf *b, const char *s, size_t n, bool ascii) {
    jbuf_putc(e, b, '"');
    size_t i = 0;
    while (i < n) {
        size_t st = i;
        unsigned char c0 = (unsigned char)s[i];
        char esc[16];
        if (c0 < 0x80) {
            i++;
            switch (c0) {
            case '"': jbuf_put(e, b, "\\\"", 2); break;
            case '\\': jbuf_put(e, b, "\\\\", 2); break;
            case '\n': jbuf_put(e, b, "\\n", 2); break;
            case '\r': jbuf_put(e, b, "\\r", 2); break;
            case '\t': jbuf_put(e, b, "\\t", 2); break;
            case '\b': jbuf_put(e, b, "\\b", 2); break;
            case '\f': jbuf_put(e, b, "\\f", 2); break;
            default:
                if (c0 < 0x20) {
                    snprintf(esc, sizeof esc, "\\u%04x", c0);
                    jbuf_puts(e, b, esc);
                } else jbuf_putc(e, b, (char)c0);
            }
            continue;
        }
        uint32_t c = utf8_next(s, n, &i);
        if (!ascii) {
            jbuf_put(e, b, s + st, i - st);
        } else if (c >= 0x10000) {
            c -= 0x10000;
            snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (c >> 10), 0xDC00 + (c & 0x3FF));
            jbuf_puts(e, b, esc);
        } else {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            jbuf_puts(e, b, esc);
        }
    }
    jbuf_putc(e, b, '"');
}

static void json_newline(struct jerr_ctx *e, struct jbuf *b, const struct jjson_opts *o, int depth) {
    jbuf_putc(e, b, '\n');
    for (int i = 0; i < depth; i++) jbuf_puts(e, b, o->indent);
}

static int key_cmp(const void *a, const void *b) {
    const jval *x = *(const jval *const *)a, *y = *(const jval *const *)b;
    size_t n = x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n;
    int c = memcmp(x->u.s.p, y->u.s.p, n);
    if (c) return c;
    return x->u.s.n < y->u.s.n ? -1 : x->u.s.n > y->u.s.n;
}

void jv_json_into(struct jerr_ctx *e, struct jbuf *b, jval v, const struct jjson_opts *o, int depth) {
    char tmp[40];
    if (depth > 200) jerr(e, NX_STATUS_INVALID_ARG, "limit", "tojson: value nested too deeply");
    switch (v.t) {
    case JV_NONE: jbuf_puts(e, b, "null"); return;
    case JV_BOOL: jbuf_puts(e, b, v.u.b ? "true" : "false"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); jbuf_puts(e, b, tmp); return;
    case JV_FLOAT:
        if (isnan(v.u.f)) jbuf_puts(e, b, "NaN");
        else if (isinf(v.u.f)) jbuf_puts(e, b, v.u.f < 0 ? "-Infinity" : "Infinity");
        else {
            py_float_repr(v.u.f, tmp);
            jbuf_puts(e, b, tmp);
        }
        return;
    case JV_STR: json_str(e, b, v.u.s.p, v.u.s.n, o->ensure_ascii); return;
    case JV_LIST:
        if (!(v.flags & JL_GEN)) {
            if (v.u.l->n == 0) { jbuf_puts(e, b, "[]"); return; }
            jbuf_putc(e, b, '[');
            for (size_t i = 0; i < v.u.l->n; i++) {
                if (i) jbuf_puts(e, b, o->item_sep);
                if (o->indent) json_newline(e, b, o, depth + 1);
                jv_json_into(e, b, v.u.l->v[i], o, depth + 1);
            }
            if (o->indent) json_newline(e, b, o, depth);
            jbuf_putc(e, b, ']');
            return;
        }
        break;
    case JV_DICT: {
        struct jdict *d = v.u.d;
        if (d->n == 0) { jbuf_puts(e, b, "{}"); return; }
        const jval **order = jalloc(e, d->n * sizeof *order);
        const jval *vals = d->v;
        for (size_t i = 0; i < d->n; i++) {
            order[i] = &d->k[i];
            if (d->k[i].t != JV_STR && d->k[i].t != JV_INT && d->k[i].t != JV_FLOAT &&
                d->k[i].t != JV_BOOL && d->k[i].t != JV_NONE)
                jerr(e, NX_STATUS_INVALID_ARG, "python",
                     "TypeError: keys must be str, int, float, bool or None, not %s",
                     jv_type_name(d->k[i]));
        }
        if (o->sort_keys) {
            for (size_t i = 0; i < d->n; i++)
                if (d->k[i].t != JV_STR)
                    jerr(e, NX_STATUS_UNSUPPORTED, "unsupported", "tojson sort_keys with non-string keys");
            qsort(order, d->n, sizeof *order, key_cmp);
        }
        jbuf_putc(e, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t idx = (size_t)(order[i] - d->k);
            if (i) jbuf_puts(e, b, o->item_sep);
            if (o->indent) json_newline(e, b, o, depth + 1);
            jval k = d->k[idx];
            if (k.t == JV_STR) json_str(e, b, k.u.s.p, k.u.s.n, o->ensure_ascii);
            else {
                jbuf_putc(e, b, '"');
                if (k.t == JV_NONE) jbuf_puts(e, b, "null");
                else if (k.t == JV_BOOL) jbuf_puts(e, b, k.u.b ? "true" : "false");
                else jv_str_into(e, b, k);
                jbuf_putc(e, b, '"');
            }
            jbuf_puts(e, b, o->key_sep);
            jv_json_into(e, b, vals[idx], o, depth + 1);
        }
        if (o->indent) json_newline(e, b, o, depth);
        jbuf_putc(e, b, '}');
        return;
    }
    default: break;
    }
    jerr(e, NX_STATUS_INVALID_ARG, "python", "TypeError: Object of type %s is not JSON serializable",
         jv_type_name(v));
}
