/*
 * jinja_builtins.c - filters, tests, attribute lookup, methods of str / dict / list, and the
 * global functions of the Jinja interpreter.
 *
 * DESIGN. Each builtin mirrors what jinja2 3.1 does under Hugging Face's
 * ImmutableSandboxedEnvironment: filters that are generators in jinja2 (map, select, reject,
 * selectattr, rejectattr, unique, items, reverse) return lists flagged JL_GEN so that len()
 * and tojson fail as they do in Python; methods that mutate dicts or lists (except list.pop,
 * which jinja2's sandbox allows) give jinja2's SecurityError; attribute lookup tries
 * Python attributes (methods) before items for `.`, items before attributes for `[]`, and
 * missing ones give Undefined with jinja2's messages. tojson is Hugging Face's json.dumps
 * wrapper (ensure_ascii=False by default). strftime_now formats the render's fixed time in
 * UTC. Unknown filters and tests are errors naming them. Case mapping uses utf8proc.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "chat/jinja_eval.h"

const jval *jarg(const struct jargs *a, int i, const char *name) {
    if (i >= 0 && i < a->npos) return &a->pos[i];
    if (name)
        for (int k = 0; k < a->nkw; k++)
            if (!strcmp(a->kwn[k], name)) return &a->kwv[k];
    return NULL;
}
jval jarg_or(const struct jargs *a, int i, const char *name, jval dflt) {
    const jval *v = jarg(a, i, name);
    return v ? *v : dflt;
}
/* a without its first n positional arguments (keywords kept): what select and map pass on to
 * the test or filter they call; never offsets a NULL pos (a call without arguments) */
static struct jargs jargs_after(const struct jargs *a, int n) {
    int k = n < a->npos ? n : a->npos;
    return (struct jargs){.pos = k ? a->pos + k : a->pos, .npos = a->npos - k,
                          .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw};
}

static char *hint(struct jrender *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *hint(struct jrender *R, const char *fmt, ...) {
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return jstrndup(R->e, m, strlen(m));
}

/* jinja2.utils.object_type_repr */
static const char *obj_type_repr(jval o) {
    switch (o.t) {
    case JV_NONE: return "None";
    case JV_NS: return "jinja2.utils.Namespace object";
    case JV_LOOP: return "jinja2.runtime.LoopContext object";
    case JV_STR: return "str object";
    case JV_LIST: return (o.flags & JL_GEN) ? "generator object" : (o.flags & JL_TUPLE) ? "tuple object" : "list object";
    case JV_DICT: return "dict object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_BOOL: return "bool object";
    default: return "object";
    }
}
static jval no_attr(struct jrender *R, jval o, const char *name, size_t n) {
    return jv_undef(hint(R, "'%s' has no attribute '%.*s'", obj_type_repr(o), (int)n, name));
}

static bool str_eq(jval v, const char *s) { return v.t == JV_STR && v.u.s.n == strlen(s) && !memcmp(v.u.s.p, s, v.u.s.n); }
static jval cstr(const char *s) { return jv_str(s, strlen(s)); }
static const char *cz(struct jrender *R, jval v) { return jstrndup(R->e, v.u.s.p, v.u.s.n); }

static jval need_str(struct jrender *R, jval v, const char *what) {
    if (v.t != JV_STR)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: %s must be str, not %s", what, jv_type_name(v));
    return v;
}
static jval soft_str(struct jrender *R, jval v) {
    if (v.t == JV_LIST && (v.flags & JL_GEN))
        jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: converting a generator to a string", R->line);
    return jv_to_str(R->e, v);
}

/* ---- methods ---- */
enum {
    M_STRIP = 1, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH, M_REPLACE,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FIND, M_RFIND, M_INDEX, M_COUNT, M_JOIN, M_FORMAT,
    M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_REMOVEPREFIX, M_REMOVESUFFIX,
    M_ITEMS, M_KEYS, M_VALUES, M_GET, M_COPY, M_LPOP, M_LINDEX, M_LCOUNT, M_CYCLE
};
struct mdef { const char *name; int id; };
static const struct mdef str_methods[] = {
    {"strip", M_STRIP}, {"lstrip", M_LSTRIP}, {"rstrip", M_RSTRIP}, {"split", M_SPLIT},
    {"rsplit", M_RSPLIT}, {"splitlines", M_SPLITLINES}, {"startswith", M_STARTSWITH},
    {"endswith", M_ENDSWITH}, {"replace", M_REPLACE}, {"upper", M_UPPER}, {"lower", M_LOWER},
    {"title", M_TITLE}, {"capitalize", M_CAPITALIZE}, {"find", M_FIND}, {"rfind", M_RFIND},
    {"index", M_INDEX}, {"count", M_COUNT}, {"join", M_JOIN}, {"format", M_FORMAT},
    {"isdigit", M_ISDIGIT}, {"isalpha", M_ISALPHA}, {"isalnum", M_ISALNUM}, {"isspace", M_ISSPACE},
    {"isupper", M_ISUPPER}, {"islower", M_ISLOWER}, {"removeprefix", M_REMOVEPREFIX},
    {"removesuffix", M_REMOVESUFFIX}};
static const struct mdef dict_methods[] = {
    {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}, {"get", M_GET}, {"copy", M_COPY}};
static const char *const dict_unsafe[] = {"clear", "pop", "popitem", "setdefault", "update"};
static const struct mdef list_methods[] = {{"index", M_LINDEX}, {"count", M_LCOUNT}, {"copy", M_COPY}};
static const char *const list_unsafe[] = {"append", "clear", "extend", "insert", "pop", "remove", "reverse", "sort"};
static const char *const str_other[] = {"casefold", "center", "encode", "expandtabs", "format_map",
    "isascii", "isdecimal", "isidentifier", "isnumeric", "isprintable", "istitle", "ljust", "maketrans",
    "partition", "rindex", "rjust", "rpartition", "swapcase", "translate", "zfill"};

static bool name_is(const char *a, const char *b, size_t n) { return strlen(a) == n && !memcmp(a, b, n); }

static jval method(struct jrender *R, jval self, int id, const char *name) {
    struct jfunc *f = jalloc(R->e, sizeof *f);
    f->kind = JF_METHOD;
    f->id = id;
    f->name = name;
    f->self = self;
    jval v = {.t = JV_FUNC};
    v.u.fn = f;
    return v;
}

static jval loop_attr(struct jrender *R, struct jloop *L, const char *name, size_t n) {
    int64_t len = (int64_t)L->items->n, i = (int64_t)L->idx;
    if (name_is("index", name, n)) return jv_int(i + 1);
    if (name_is("index0", name, n)) return jv_int(i);
    if (name_is("revindex", name, n)) return jv_int(len - i);
    if (name_is("revindex0", name, n)) return jv_int(len - i - 1);
    if (name_is("first", name, n)) return jv_bool(i == 0);
    if (name_is("last", name, n)) return jv_bool(i == len - 1);
    if (name_is("length", name, n)) return jv_int(len);
    if (name_is("depth", name, n)) return jv_int(L->depth);
    if (name_is("depth0", name, n)) return jv_int(L->depth - 1);
    if (name_is("previtem", name, n))
        return i > 0 ? L->items->v[i - 1] : jv_undef("there is no previous item");
    if (name_is("nextitem", name, n))
        return i + 1 < len ? L->items->v[i + 1] : jv_undef("there is no next item");
    if (name_is("cycle", name, n)) {
        jval lv = {.t = JV_LOOP};
        lv.u.loop = L;
        return method(R, lv, M_CYCLE, "cycle");
    }
    if (name_is("changed", name, n))
        jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: loop.changed", R->line);
    jval lv = {.t = JV_LOOP};
    lv.u.loop = L;
    return no_attr(R, lv, name, n);
}

jval jr_getattr(struct jrender *R, jval o, const char *name, size_t n) {
    switch (o.t) {
    case JV_DICT:
        for (size_t k = 0; k < NX_ARRAY_LEN(dict_methods); k++)
            if (name_is(dict_methods[k].name, name, n)) return method(R, o, dict_methods[k].id, dict_methods[k].name);
        for (size_t k = 0; k < NX_ARRAY_LEN(dict_unsafe); k++)
            if (name_is(dict_unsafe[k], name, n)) {
                jval u = jv_undef(hint(R, "access to attribute '%s' of 'dict' object is unsafe.", dict_unsafe[k]));
                u.flags = JU_SECURITY;
                return u;
            }
        {
            jval *v = jdict_get_str(o.u.d, name, n);
            if (v) return *v;
        }
        return no_attr(R, o, name, n);
    case JV_NS: {
        jval *v = jdict_get_str(o.u.d, name, n);
        if (v) return *v;
        return no_attr(R, o, name, n);
    }
    case JV_STR:
        for (size_t k = 0; k < NX_ARRAY_LEN(str_methods); k++)
            if (name_is(str_methods[k].name, name, n)) return method(R, o, str_methods[k].id, str_methods[k].name);
        for (size_t k = 0; k < NX_ARRAY_LEN(str_other); k++)
            if (name_is(str_other[k], name, n))
                jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: str.%s", R->line, str_other[k]);
        return no_attr(R, o, name, n);
    case JV_LIST:
        if (!(o.flags & JL_GEN)) {
            for (size_t k = 0; k < NX_ARRAY_LEN(list_methods); k++)
                if (name_is(list_methods[k].name, name, n)) {
                    return method(R, o, list_methods[k].id, list_methods[k].name);
                }
            for (size_t k = 0; k < NX_ARRAY_LEN(list_unsafe); k++)
                if (name_is(list_unsafe[k], name, n) && !(o.flags & JL_TUPLE)) {
                    jval u = jv_undef(hint(R, "access to attribute '%s' of 'list' object is unsafe.", list_unsafe[k]));
                    u.flags = JU_SECURITY;
                    return u;
                }
        }
        return no_attr(R, o, name, n);
    case JV_LOOP: return loop_attr(R, o.u.loop, name, n);
    case JV_UNDEF: jr_undefined(R, o);
    default: return no_attr(R, o, name, n);
    }
}

jval jr_getitem(struct jrender *R, jval o, jval k) {
    switch (o.t) {
    case JV_DICT: {
        jval *v = jdict_get(o.u.d, k);
        if (v) return *v;
        break;
    }
    case JV_LIST:
        if ((k.t == JV_INT || k.t == JV_BOOL) && !(o.flags & JL_GEN)) {
            int64_t i = k.t == JV_INT ? k.u.i : k.u.b, n = (int64_t)o.u.l->n;
            if (i < 0) i += n;
            if (i >= 0 && i < n) return o.u.l->v[i];
        }
        break;
    case JV_STR:
        if (k.t == JV_INT || k.t == JV_BOOL) {
            int64_t i = k.t == JV_INT ? k.u.i : k.u.b, n = (int64_t)utf8_len(o.u.s.p, o.u.s.n);
            if (i < 0) i += n;
            if (i >= 0 && i < n) {
                size_t a = utf8_offset(o.u.s.p, o.u.s.n, (size_t)i), b = utf8_offset(o.u.s.p, o.u.s.n, (size_t)i + 1);
                return jv_str(o.u.s.p + a, b - a);
            }
        }
        break;
    case JV_UNDEF: jr_undefined(R, o);
    default: break;
    }
    if (k.t == JV_STR) {
        if (o.t == JV_DICT) return no_attr(R, o, k.u.s.p, k.u.s.n);
        return jr_getattr(R, o, k.u.s.p, k.u.s.n);
    }
    struct jbuf b = {0};
    jv_repr_into(R->e, &b, k);
    return jv_undef(hint(R, "%s has no element %s", obj_type_repr(o), b.p ? b.p : ""));
}

/* ---- string helpers ---- */
static bool py_space(uint32_t c) {
    return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
           c == 0x205f || c == 0x3000;
}
static uint32_t dec(const char *s, size_t n, size_t *i) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(n - *i), &c);
    if (k <= 0) { c = (unsigned char)s[*i]; k = 1; }
    *i += (size_t)k;
    return (uint32_t)c;
}
static void enc(struct jrender *R, struct jbuf *b, uint32_t c) {
    utf8proc_uint8_t u[4];
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)c, u);
    jbuf_put(R->e, b, (const char *)u, (size_t)k);
}
static bool in_chars(uint32_t c, jval chars) {
    size_t i = 0;
    while (i < chars.u.s.n)
        if (dec(chars.u.s.p, chars.u.s.n, &i) == c) return true;
    return false;
}
/* which: 1 left, 2 right, 3 both */
static jval do_strip(struct jrender *R, jval s, jval chars, int which) {
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, a = 0, b = n;
    bool ws = chars.t != JV_STR;
    if (which & 1)
        while (a < b) {
            size_t i = a;
            uint32_t c = dec(p, n, &i);
            if (ws ? !py_space(c) : !in_chars(c, chars)) break;
            a = i;
        }
    if (which & 2)
        while (b > a) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
            size_t i = st;
            uint32_t c = dec(p, n, &i);
            if (ws ? !py_space(c) : !in_chars(c, chars)) break;
            b = st;
        }
    (void)R;
    jval r = jv_str(p + a, b - a);
    r.flags = s.flags & JS_SAFE;
    return r;
}
static const char *find_sub(const char *h, size_t hn, const char *nd, size_t nn) {
    if (nn == 0) return h;
    if (nn > hn) return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == nd[0] && !memcmp(h + i, nd, nn)) return h + i;
    return NULL;
}
static jval do_split(struct jrender *R, jval s, jval sep, int64_t maxsplit) {
    struct jlist *l = jlist_new(R->e, 0);
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    if (sep.t != JV_STR) {
        while (i < n) {
            size_t j = i;
            while (i < n) { j = i; if (!py_space(dec(p, n, &j))) break; i = j; }
            if (i >= n) break;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                size_t e2 = n;
                while (e2 > i) { /* rstrip the remainder */
                    size_t st = e2 - 1;
                    while (st > i && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
                    size_t q = st;
                    if (!py_space(dec(p, n, &q))) break;
                    e2 = st;
                }
                jlist_push(R->e, l, jv_str(p + i, e2 - i));
                break;
            }
            size_t st = i;
            while (i < n) { j = i; if (py_space(dec(p, n, &j))) break; i = j; }
            jlist_push(R->e, l, jv_str(p + st, i - st));
        }
        return jv_list(l, 0);
    }
    if (sep.u.s.n == 0) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: empty separator");
    for (;;) {
        const char *f = (maxsplit < 0 || (int64_t)l->n < maxsplit) ? find_sub(p + i, n - i, sep.u.s.p, sep.u.s.n) : NULL;
        if (!f) {
            jlist_push(R->e, l, jv_str(p + i, n - i));
            break;
        }
        jlist_push(R->e, l, jv_str(p + i, (size_t)(f - (p + i))));
        i = (size_t)(f - p) + sep.u.s.n;
    }
    return jv_list(l, 0);
}
static jval do_rsplit(struct jrender *R, jval s, jval sep, int64_t maxsplit) {
    if (maxsplit < 0 || sep.t != JV_STR) {
        if (maxsplit >= 0) jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: rsplit() with maxsplit and no separator", R->line);
        return do_split(R, s, sep, -1);
    }
    if (sep.u.s.n == 0) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: empty separator");
    struct jlist *rev = jlist_new(R->e, 0);
    const char *p = s.u.s.p;
    size_t end = s.u.s.n;
    while ((int64_t)rev->n < maxsplit) {
        const char *f = NULL;
        for (size_t i = end; i >= sep.u.s.n; i--) {
            if (!memcmp(p + i - sep.u.s.n, sep.u.s.p, sep.u.s.n)) { f = p + i - sep.u.s.n; break; }
        }
        if (!f) break;
        size_t at = (size_t)(f - p);
        jlist_push(R->e, rev, jv_str(p + at + sep.u.s.n, end - at - sep.u.s.n));
        end = at;
    }
    struct jlist *l = jlist_new(R->e, rev->n + 1);
    jlist_push(R->e, l, jv_str(p, end));
    for (size_t k = rev->n; k-- > 0;) jlist_push(R->e, l, rev->v[k]);
    return jv_list(l, 0);
}
static jval do_replace(struct jrender *R, jval s, jval old, jval nw, int64_t count) {
    struct jbuf b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int64_t done = 0;
    if (old.u.s.n == 0) { /* Python inserts new between every character */
        while (count < 0 || done < count) {
            jbuf_put(R->e, &b, nw.u.s.p, nw.u.s.n);
            done++;
            if (i >= n) break;
            size_t j = i;
            dec(p, n, &j);
            jbuf_put(R->e, &b, p + i, j - i);
            i = j;
        }
        jbuf_put(R->e, &b, p + i, n - i);
        return jbuf_val(&b);
    }
    for (;;) {
        const char *f = (count < 0 || done < count) ? find_sub(p + i, n - i, old.u.s.p, old.u.s.n) : NULL;
        if (!f) break;
        jbuf_put(R->e, &b, p + i, (size_t)(f - (p + i)));
        jbuf_put(R->e, &b, nw.u.s.p, nw.u.s.n);
        i = (size_t)(f - p) + old.u.s.n;
        done++;
    }
    jbuf_put(R->e, &b, p + i, n - i);
    return jbuf_val(&b);
}
/* mode: 0 lower, 1 upper, 2 title, 3 capitalize */
static jval do_case(struct jrender *R, jval s, int mode) {
    struct jbuf b = {0};
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < s.u.s.n) {
        uint32_t c = dec(s.u.s.p, s.u.s.n, &i), o;
        if (mode == 0) o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
        else if (mode == 1) o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)c);
        else if (mode == 3) o = (uint32_t)(first ? utf8proc_totitle((utf8proc_int32_t)c) : utf8proc_tolower((utf8proc_int32_t)c));
        else {
            o = (uint32_t)(prev_cased ? utf8proc_tolower((utf8proc_int32_t)c) : utf8proc_totitle((utf8proc_int32_t)c));
            utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
            prev_cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
        }
        first = false;
        enc(R, &b, o);
    }
    jval r = jbuf_val(&b);
    r.flags = s.flags & JS_SAFE;
    return r;
}
static bool str_pred(jval s, int id) {
    if (s.u.s.n == 0) return false;
    size_t i = 0;
    bool cased = false;
    while (i < s.u.s.n) {
        uint32_t c = dec(s.u.s.p, s.u.s.n, &i);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)c);
        bool alpha = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        switch (id) {
        case M_ISDIGIT: if (!digit) return false; break;
        case M_ISALPHA: if (!alpha) return false; break;
        case M_ISALNUM: if (!alpha && !digit && cat != UTF8PROC_CATEGORY_NL && cat != UTF8PROC_CATEGORY_NO) return false; break;
        case M_ISSPACE: if (!py_space(c)) return false; break;
        case M_ISUPPER:
            if (cat == UTF8PROC_CATEGORY_LL) return false;
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) cased = true;
            break;
        case M_ISLOWER:
            if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LT) return false;
            if (cat == UTF8PROC_CATEGORY_LL) cased = true;
            break;
        }
    }
    return (id == M_ISUPPER || id == M_ISLOWER) ? cased : true;
}
static bool starts_or_ends(struct jrender *R, jval s, jval pre, bool ends, const char *mname) {
    if (pre.t == JV_LIST && (pre.flags & JL_TUPLE)) {
        for (size_t k = 0; k < pre.u.l->n; k++)
            if (starts_or_ends(R, s, pre.u.l->v[k], ends, mname)) return true;
        return false;
    }
    if (pre.t != JV_STR)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python",
                "TypeError: %s first arg must be str or a tuple of str, not %s", mname, jv_type_name(pre));
    if (pre.u.s.n > s.u.s.n) return false;
    return !memcmp(s.u.s.p + (ends ? s.u.s.n - pre.u.s.n : 0), pre.u.s.p, pre.u.s.n);
}
static int64_t cp_index(jval s, const char *at) { return (int64_t)utf8_len(s.u.s.p, (size_t)(at - s.u.s.p)); }

static jval do_format(struct jrender *R, jval s, const struct jargs *a) {
    struct jbuf b = {0};
    const char *p = s.u.s.p;
    size_t n = s.u.s.n, i = 0;
    int auto_idx = 0;
    while (i < n) {
        char c = p[i];
        if (c == '{' && i + 1 < n && p[i + 1] == '{') { jbuf_putc(R->e, &b, '{'); i += 2; continue; }
        if (c == '}' && i + 1 < n && p[i + 1] == '}') { jbuf_putc(R->e, &b, '}'); i += 2; continue; }
        if (c == '}') jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: Single '}' encountered in format string");
        if (c != '{') { jbuf_putc(R->e, &b, c); i++; continue; }
        size_t j = i + 1;
        while (j < n && p[j] != '}') j++;
        if (j >= n) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: Single '{' encountered in format string");
        const char *f = p + i + 1;
        size_t fn = j - i - 1;
        if (memchr(f, ':', fn) || memchr(f, '!', fn) || memchr(f, '.', fn) || memchr(f, '[', fn))
            jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: str.format field '{%.*s}'", R->line, (int)fn, f);
        const jval *v = NULL;
        if (fn == 0) v = jarg(a, auto_idx++, NULL);
        else if (f[0] >= '0' && f[0] <= '9') v = jarg(a, atoi(f), NULL);
        else {
            for (int k = 0; k < a->nkw; k++)
                if (strlen(a->kwn[k]) == fn && !memcmp(a->kwn[k], f, fn)) v = &a->kwv[k];
            if (!v) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "KeyError: '%.*s'", (int)fn, f);
        }
        if (!v) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "IndexError: Replacement index %d out of range for positional args tuple", auto_idx - 1);
        jv_str_into(R->e, &b, *v);
        i = j + 1;
    }
    return jbuf_val(&b);
}

static jval join_items(struct jrender *R, jval sep, struct jlist *l, bool strict) {
    struct jbuf b = {0};
    for (size_t k = 0; k < l->n; k++) {
        if (k) jbuf_put(R->e, &b, sep.u.s.p, sep.u.s.n);
        if (strict && l->v[k].t != JV_STR)
            jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: sequence item %zu: expected str instance, %s found",
                    k, jv_type_name(l->v[k]));
        jv_str_into(R->e, &b, soft_str(R, l->v[k]));
    }
    return jbuf_val(&b);
}

static jval call_method(struct jrender *R, struct jfunc *f, const struct jargs *a) {
    jval s = f->self;
    jval none = jv_none();
    switch (f->id) {
    case M_STRIP: case M_LSTRIP: case M_RSTRIP: {
        jval ch = jarg_or(a, 0, NULL, none);
        if (ch.t != JV_NONE) need_str(R, ch, "strip arg");
        return do_strip(R, s, ch, f->id == M_STRIP ? 3 : f->id == M_LSTRIP ? 1 : 2);
    }
    case M_SPLIT: case M_RSPLIT: {
        jval sep = jarg_or(a, 0, "sep", none), ms = jarg_or(a, 1, "maxsplit", jv_int(-1));
        if (sep.t != JV_NONE) need_str(R, sep, "must be str or None; separator");
        int64_t m = ms.t == JV_INT ? ms.u.i : -1;
        return f->id == M_SPLIT ? do_split(R, s, sep, m) : do_rsplit(R, s, sep, m);
    }
    case M_SPLITLINES: {
        struct jlist *l = jlist_new(R->e, 0);
        bool keep = jv_truthy(jarg_or(a, 0, "keepends", jv_bool(false)));
        size_t i = 0, st = 0, n = s.u.s.n;
        const char *p = s.u.s.p;
        while (i < n) {
            size_t j = i;
            uint32_t c = dec(p, n, &j);
            bool br = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                      c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
            if (br) {
                if (c == '\r' && j < n && p[j] == '\n') j++;
                jlist_push(R->e, l, jv_str(p + st, (keep ? j : i) - st));
                st = j;
            }
            i = j;
        }
        if (st < n) jlist_push(R->e, l, jv_str(p + st, n - st));
        return jv_list(l, 0);
    }
    case M_STARTSWITH: case M_ENDSWITH: {
        const jval *pre = jarg(a, 0, NULL);
        if (!pre || a->npos > 1)
            jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: %s() with %d arguments", R->line, f->name, a->npos);
        return jv_bool(starts_or_ends(R, s, *pre, f->id == M_ENDSWITH, f->name));
    }
    case M_REPLACE: {
        const jval *o = jarg(a, 0, NULL), *nw = jarg(a, 1, NULL);
        if (!o || !nw) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: replace expected at least 2 arguments");
        need_str(R, *o, "replace() argument 1");
        need_str(R, *nw, "replace() argument 2");
        jval c = jarg_or(a, 2, "count", jv_int(-1));
        if (s.flags & JS_SAFE) { /* Markup.replace escapes its arguments */
            jval r = do_replace(R, s, jv_html_escape(R->e, *o), jv_html_escape(R->e, *nw), c.t == JV_INT ? c.u.i : -1);
            r.flags = JS_SAFE;
            return r;
        }
        return do_replace(R, s, *o, *nw, c.t == JV_INT ? c.u.i : -1);
    }
    case M_UPPER: return do_case(R, s, 1);
    case M_LOWER: return do_case(R, s, 0);
    case M_TITLE: return do_case(R, s, 2);
    case M_CAPITALIZE: return do_case(R, s, 3);
    case M_FIND: case M_RFIND: case M_INDEX: case M_COUNT: {
        const jval *sub = jarg(a, 0, NULL);
        if (!sub || a->npos > 1) jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: %s() with start/end", R->line, f->name);
        need_str(R, *sub, "must be str; argument");
        if (f->id == M_COUNT) {
            if (sub->u.s.n == 0) return jv_int((int64_t)utf8_len(s.u.s.p, s.u.s.n) + 1);
            int64_t c = 0;
            size_t i = 0;
            const char *h;
            while ((h = find_sub(s.u.s.p + i, s.u.s.n - i, sub->u.s.p, sub->u.s.n))) {
                c++;
                i = (size_t)(h - s.u.s.p) + sub->u.s.n;
            }
            return jv_int(c);
        }
        const char *h = NULL;
        if (f->id == M_RFIND) {
            for (size_t i = s.u.s.n + 1; i-- > 0;)
                if (i + sub->u.s.n <= s.u.s.n && !memcmp(s.u.s.p + i, sub->u.s.p, sub->u.s.n)) { h = s.u.s.p + i; break; }
        } else h = find_sub(s.u.s.p, s.u.s.n, sub->u.s.p, sub->u.s.n);
        if (!h) {
            if (f->id == M_INDEX) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: substring not found");
            return jv_int(-1);
        }
        return jv_int(cp_index(s, h));
    }
    case M_JOIN: {
        const jval *it = jarg(a, 0, NULL);
        if (!it) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: str.join() takes exactly one argument (0 given)");
        return join_items(R, s, jr_iter(R, *it), true);
    }
    case M_FORMAT: return do_format(R, s, a);
    case M_ISDIGIT: case M_ISALPHA: case M_ISALNUM: case M_ISSPACE: case M_ISUPPER: case M_ISLOWER:
        return jv_bool(str_pred(s, f->id));
    case M_REMOVEPREFIX: case M_REMOVESUFFIX: {
        const jval *x = jarg(a, 0, NULL);
        if (!x) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: %s() takes exactly one argument (0 given)", f->name);
        need_str(R, *x, "argument");
        if (x->u.s.n <= s.u.s.n) {
            if (f->id == M_REMOVEPREFIX && !memcmp(s.u.s.p, x->u.s.p, x->u.s.n))
                return jv_str(s.u.s.p + x->u.s.n, s.u.s.n - x->u.s.n);
            if (f->id == M_REMOVESUFFIX && !memcmp(s.u.s.p + s.u.s.n - x->u.s.n, x->u.s.p, x->u.s.n))
                return jv_str(s.u.s.p, s.u.s.n - x->u.s.n);
        }
        return s;
    }
    case M_ITEMS: {
        struct jlist *l = jlist_new(R->e, s.u.d->n);
        for (size_t k = 0; k < s.u.d->n; k++) {
            struct jlist *pr = jlist_new(R->e, 2);
            jlist_push(R->e, pr, s.u.d->k[k]);
            jlist_push(R->e, pr, s.u.d->v[k]);
            jlist_push(R->e, l, jv_list(pr, JL_TUPLE));
        }
        return jv_list(l, 0);
    }
    case M_KEYS: case M_VALUES: {
        struct jlist *l = jlist_new(R->e, s.u.d->n);
        for (size_t k = 0; k < s.u.d->n; k++) jlist_push(R->e, l, f->id == M_KEYS ? s.u.d->k[k] : s.u.d->v[k]);
        return jv_list(l, 0);
    }
    case M_GET: {
        const jval *k = jarg(a, 0, NULL);
        if (!k) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: get expected at least 1 argument, got 0");
        jval *v = jdict_get(s.u.d, *k);
        return v ? *v : jarg_or(a, 1, NULL, none);
    }
    case M_COPY:
        if (s.t == JV_DICT) {
            struct jdict *d = jdict_new(R->e, s.u.d->n);
            for (size_t k = 0; k < s.u.d->n; k++) jdict_set(R->e, d, s.u.d->k[k], s.u.d->v[k]);
            return jv_dict(d);
        } else {
            struct jlist *l = jlist_new(R->e, s.u.l->n);
            for (size_t k = 0; k < s.u.l->n; k++) jlist_push(R->e, l, s.u.l->v[k]);
            return jv_list(l, 0);
        }
    case M_LPOP: {
        struct jlist *l = s.u.l;
        jval iv = jarg_or(a, 0, NULL, jv_int(-1));
        if (iv.t != JV_INT) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: '%s' object cannot be interpreted as an integer", jv_type_name(iv));
        if (l->n == 0) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "IndexError: pop from empty list");
        int64_t i = iv.u.i;
        if (i < 0) i += (int64_t)l->n;
        if (i < 0 || i >= (int64_t)l->n) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "IndexError: pop index out of range");
        jval v = l->v[i];
        memmove(l->v + i, l->v + i + 1, (l->n - (size_t)i - 1) * sizeof *l->v);
        l->n--;
        return v;
    }
    case M_LINDEX: case M_LCOUNT: {
        const jval *x = jarg(a, 0, NULL);
        if (!x) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: %s() takes exactly one argument (0 given)", f->name);
        int64_t c = 0;
        for (size_t k = 0; k < s.u.l->n; k++)
            if (jv_equal(s.u.l->v[k], *x)) {
                if (f->id == M_LINDEX) return jv_int((int64_t)k);
                c++;
            }
        if (f->id == M_LINDEX) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: value is not in list");
        return jv_int(c);
    }
    case M_CYCLE:
        if (a->npos == 0) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: no items for cycling given");
        return a->pos[s.u.loop->idx % (size_t)a->npos];
    default: jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported method %s", R->line, f->name);
    }
}

/* ---- globals ---- */
enum { G_RANGE = 1, G_NAMESPACE, G_RAISE, G_STRFTIME, G_DICT };
static const struct mdef globals[] = {{"range", G_RANGE}, {"namespace", G_NAMESPACE},
    {"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME}, {"dict", G_DICT}};

jval jr_global(struct jrender *R, const char *name) {
    for (size_t k = 0; k < NX_ARRAY_LEN(globals); k++)
        if (!strcmp(globals[k].name, name)) {
            struct jfunc *f = jalloc(R->e, sizeof *f);
            f->kind = JF_BUILTIN;
            f->id = globals[k].id;
            f->name = globals[k].name;
            jval v = {.t = JV_FUNC};
            v.u.fn = f;
            return v;
        }
    if (!strcmp(name, "cycler") || !strcmp(name, "joiner") || !strcmp(name, "lipsum"))
        jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: the global '%s'", R->line, name);
    return jv_undef(NULL);
}

static int64_t need_int(struct jrender *R, jval v) {
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    if (v.t == JV_UNDEF) jr_undefined(R, v);
    jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: '%s' object cannot be interpreted as an integer", jv_type_name(v));
}

static jval call_builtin(struct jrender *R, struct jfunc *f, const struct jargs *a) {
    switch (f->id) {
    case G_RANGE: {
        int64_t start = 0, stop, step = 1;
        if (a->npos == 1) stop = need_int(R, a->pos[0]);
        else if (a->npos == 2 || a->npos == 3) {
            start = need_int(R, a->pos[0]);
            stop = need_int(R, a->pos[1]);
            if (a->npos == 3) step = need_int(R, a->pos[2]);
        } else jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: range expected at most 3 arguments, got %d", a->npos);
        if (step == 0) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: range() arg 3 must not be zero");
        double cnt = step > 0 ? ((double)stop - (double)start) / (double)step : ((double)start - (double)stop) / -(double)step;
        if (cnt > 100000)
            jr_fail(R, NX_STATUS_INVALID_ARG, "python", "OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        struct jlist *l = jlist_new(R->e, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jlist_push(R->e, l, jv_int(i));
        return jv_list(l, 0);
    }
    case G_NAMESPACE: case G_DICT: {
        struct jdict *d = jdict_new(R->e, 0);
        if (a->npos > 1) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: %s expected at most 1 argument, got %d", f->name, a->npos);
        if (a->npos == 1) {
            jval src = a->pos[0];
            if (src.t == JV_DICT || src.t == JV_NS) {
                for (size_t k = 0; k < src.u.d->n; k++) jdict_set(R->e, d, src.u.d->k[k], src.u.d->v[k]);
            } else {
                struct jlist *l = jr_iter(R, src);
                for (size_t k = 0; k < l->n; k++) {
                    struct jlist *pr = jr_iter(R, l->v[k]);
                    if (pr->n != 2) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: dictionary update sequence element #%zu has length %zu; 2 is required", k, pr->n);
                    jdict_set(R->e, d, pr->v[0], pr->v[1]);
                }
            }
        }
        for (int k = 0; k < a->nkw; k++) jdict_set(R->e, d, cstr(a->kwn[k]), a->kwv[k]);
        jval v = jv_dict(d);
        if (f->id == G_NAMESPACE) v.t = JV_NS;
        return v;
    }
    case G_RAISE: {
        jval m = jarg_or(a, 0, NULL, jv_str("", 0));
        m = soft_str(R, m);
        jr_fail(R, NX_STATUS_INVALID_ARG, "raise", "%.*s", (int)m.u.s.n, m.u.s.p);
    }
    case G_STRFTIME: {
        const jval *fm = jarg(a, 0, NULL);
        if (!fm || fm->t != JV_STR) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: strftime() argument 1 must be str");
        time_t t = (time_t)R->o->now;
        struct tm tm;
        gmtime_r(&t, &tm);
        char out[512];
        size_t n = strftime(out, sizeof out, cz(R, *fm), &tm);
        return jv_str(jstrndup(R->e, out, n), n);
    }
    default: jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported function %s", R->line, f->name);
    }
}

jval jr_call(struct jrender *R, jval fn, const struct jargs *a) {
    if (fn.t == JV_UNDEF) jr_undefined(R, fn);
    if (fn.t != JV_FUNC)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: '%s' object is not callable", jv_type_name(fn));
    struct jfunc *f = fn.u.fn;
    if (f->kind == JF_MACRO) return jr_call_macro(R, f, a);
    if (f->kind == JF_BUILTIN) return call_builtin(R, f, a);
    return call_method(R, f, a);
}

/* ---- sorting (stable merge sort; the comparator may unwind) ---- */
struct sortctx {
    struct jrender *R;
    const char *attr;
    bool case_sensitive;
    int by_value; /* -1: whole item; 0 / 1: key / value of a pair (dictsort) */
};
static jval sort_key(struct sortctx *c, jval v) {
    if (c->attr) {
        /* dotted attribute path, ints as indexes */
        const char *p = c->attr;
        while (*p) {
            const char *d = strchr(p, '.');
            size_t n = d ? (size_t)(d - p) : strlen(p);
            char *endp;
            long long idx = strtoll(p, &endp, 10);
            if (endp == p + n && n) v = jr_getitem(c->R, v, jv_int(idx));
            else v = jr_getitem(c->R, v, jv_str(p, n));
            p += n;
            if (*p == '.') p++;
        }
    }
    if (c->by_value >= 0 && v.t == JV_LIST && (v.flags & JL_TUPLE) && v.u.l->n == 2 && !c->attr)
        v = v.u.l->v[c->by_value ? 1 : 0];
    if (!c->case_sensitive && v.t == JV_STR) v = do_case(c->R, v, 0);
    return v;
}
static void merge_sort(struct sortctx *c, jval *v, jval *keys, size_t n, jval *tv, jval *tk, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(c, v, keys, h, tv, tk, reverse);
    merge_sort(c, v + h, keys + h, n - h, tv, tk, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int cmp = jv_compare(c->R->e, keys[j], keys[i], "<");
        bool take_right = reverse ? cmp > 0 : cmp < 0;
        if (take_right) { tv[k] = v[j]; tk[k++] = keys[j++]; }
        else { tv[k] = v[i]; tk[k++] = keys[i++]; }
    }
    while (i < h) { tv[k] = v[i]; tk[k++] = keys[i++]; }
    while (j < n) { tv[k] = v[j]; tk[k++] = keys[j++]; }
    memcpy(v, tv, n * sizeof *v);
    memcpy(keys, tk, n * sizeof *keys);
}
static struct jlist *sorted(struct jrender *R, struct jlist *in, struct sortctx *c, bool reverse) {
    size_t n = in->n;
    struct jlist *out = jlist_new(R->e, n ? n : 1);
    jval *keys = jalloc(R->e, (n ? n : 1) * sizeof *keys), *tv = jalloc(R->e, (n ? n : 1) * sizeof *tv),
         *tk = jalloc(R->e, (n ? n : 1) * sizeof *tk);
    for (size_t k = 0; k < n; k++) {
        out->v[k] = in->v[k];
        keys[k] = sort_key(c, in->v[k]);
    }
    out->n = n;
    merge_sort(c, out->v, keys, n, tv, tk, reverse);
    return out;
}

/* ---- filters ---- */
static jval dotted_attr(struct jrender *R, jval v, jval attr) {
    struct sortctx c = {.R = R, .attr = cz(R, soft_str(R, attr)), .case_sensitive = true};
    c.by_value = -1;
    return sort_key(&c, v);
}

static jval filter_tojson(struct jrender *R, jval in, const struct jargs *a) {
    jval ea = jarg_or(a, 0, "ensure_ascii", jv_bool(false)), ind = jarg_or(a, 1, "indent", jv_none());
    jval seps = jarg_or(a, 2, "separators", jv_none()), sk = jarg_or(a, 3, "sort_keys", jv_bool(false));
    struct jjson_opts o = {.ensure_ascii = jv_truthy(ea), .sort_keys = jv_truthy(sk)};
    if (ind.t == JV_INT) {
        int64_t k = ind.u.i < 0 ? 0 : ind.u.i > 64 ? 64 : ind.u.i;
        char *sp = jalloc(R->e, (size_t)k + 1);
        memset(sp, ' ', (size_t)k);
        o.indent = sp;
    } else if (ind.t == JV_STR) o.indent = cz(R, ind);
    else if (ind.t != JV_NONE) jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: tojson indent of type %s", R->line, jv_type_name(ind));
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (seps.t == JV_LIST && seps.u.l->n == 2 && seps.u.l->v[0].t == JV_STR && seps.u.l->v[1].t == JV_STR) {
        o.item_sep = cz(R, seps.u.l->v[0]);
        o.key_sep = cz(R, seps.u.l->v[1]);
    } else if (seps.t != JV_NONE) jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: tojson separators", R->line);
    struct jbuf b = {0};
    jv_json_into(R->e, &b, in, &o, 0);
    return jbuf_val(&b);
}

static int64_t py_len(struct jrender *R, jval v) {
    switch (v.t) {
    case JV_STR: return (int64_t)utf8_len(v.u.s.p, v.u.s.n);
    case JV_LIST:
        if (!(v.flags & JL_GEN)) return (int64_t)v.u.l->n;
        break;
    case JV_DICT: return (int64_t)v.u.d->n;
    case JV_UNDEF: return 0;
    default: break;
    }
    jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: object of type '%s' has no len()", jv_type_name(v));
}

static jval filter_indent(struct jrender *R, jval s, const struct jargs *a) {
    jval w = jarg_or(a, 0, "width", jv_int(4));
    bool first = jv_truthy(jarg_or(a, 1, "first", jv_bool(false)));
    bool blank = jv_truthy(jarg_or(a, 2, "blank", jv_bool(false)));
    struct jbuf ind = {0};
    if (w.t == JV_STR) jbuf_put(R->e, &ind, w.u.s.p, w.u.s.n);
    else for (int64_t k = 0; k < need_int(R, w) && k < 256; k++) jbuf_putc(R->e, &ind, ' ');
    /* s += "\n"; lines = s.splitlines() */
    struct jbuf sb = {0};
    jbuf_put(R->e, &sb, s.u.s.p, s.u.s.n);
    jbuf_putc(R->e, &sb, '\n');
    struct jfunc fsl = {.kind = JF_METHOD, .id = M_SPLITLINES, .name = "splitlines", .self = jbuf_val(&sb)};
    struct jargs none = {0};
    struct jlist *lines = call_method(R, &fsl, &none).u.l;
    struct jbuf out = {0};
    if (first) jbuf_put(R->e, &out, ind.p ? ind.p : "", ind.n);
    for (size_t k = 0; k < lines->n; k++) {
        jval ln = lines->v[k];
        if (k) {
            jbuf_putc(R->e, &out, '\n');
            if (blank || ln.u.s.n) jbuf_put(R->e, &out, ind.p ? ind.p : "", ind.n);
        }
        jbuf_put(R->e, &out, ln.u.s.p, ln.u.s.n);
    }
    return jbuf_val(&out);
}

static bool test_call(struct jrender *R, jval test_name, jval item, const struct jargs *rest) {
    if (test_name.t != JV_STR) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: test name must be a string");
    return jr_test(R, cz(R, test_name), item, rest);
}

/* select / reject / selectattr / rejectattr: args after the test name go to the test */
static jval filter_select(struct jrender *R, jval in, const struct jargs *a, bool attr, bool keep) {
    if (!jv_truthy(in)) return jv_list(jlist_new(R->e, 0), JL_GEN); /* jinja2: `if value:` */
    struct jlist *items = jr_iter(R, in), *out = jlist_new(R->e, 0);
    int off = attr ? 1 : 0;
    const jval *attrv = attr ? jarg(a, 0, NULL) : NULL;
    if (attr && !attrv) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: selectattr needs an attribute name");
    const jval *tn = jarg(a, off, NULL);
    struct jargs rest = jargs_after(a, off + 1);
    for (size_t k = 0; k < items->n; k++) {
        jr_step(R);
        jval v = attr ? dotted_attr(R, items->v[k], *attrv) : items->v[k];
        bool ok = tn ? test_call(R, *tn, v, &rest) : jv_truthy(v);
        if (ok == keep) jlist_push(R->e, out, items->v[k]);
    }
    return jv_list(out, JL_GEN);
}

static jval filter_map(struct jrender *R, jval in, const struct jargs *a) {
    if (!jv_truthy(in)) return jv_list(jlist_new(R->e, 0), JL_GEN); /* jinja2: `if value:` */
    struct jlist *items = jr_iter(R, in), *out = jlist_new(R->e, items->n);
    const jval *attr = jarg(a, -1, "attribute");
    if (attr) {
        const jval *dflt = jarg(a, -1, "default");
        for (size_t k = 0; k < items->n; k++) {
            jval v = dotted_attr(R, items->v[k], *attr);
            if (v.t == JV_UNDEF && dflt) v = *dflt;
            jlist_push(R->e, out, v);
        }
        return jv_list(out, JL_GEN);
    }
    const jval *fname = jarg(a, 0, NULL);
    if (!fname || fname->t != JV_STR) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "map requires a filter argument");
    struct jargs rest = jargs_after(a, 1);
    const char *fn = cz(R, *fname);
    for (size_t k = 0; k < items->n; k++) {
        jr_step(R);
        jlist_push(R->e, out, jr_filter(R, fn, items->v[k], &rest));
    }
    return jv_list(out, JL_GEN);
}

static jval to_int(struct jrender *R, jval v, jval dflt) {
    switch (v.t) {
    case JV_INT: return v;
    case JV_BOOL: return jv_int(v.u.b);
    case JV_FLOAT:
        if (v.u.f != v.u.f || v.u.f > 9.2e18 || v.u.f < -9.2e18) return dflt;
        return jv_int((int64_t)v.u.f);
    case JV_STR: {
        const char *s = cz(R, do_strip(R, v, jv_none(), 3));
        char *end;
        if (!*s) return dflt;
        long long x = strtoll(s, &end, 10);
        if (!*end) return jv_int(x);
        double d = strtod(s, &end);
        if (!*end && d == d && d < 9.2e18 && d > -9.2e18) return jv_int((int64_t)d);
        return dflt;
    }
    default: return dflt;
    }
}

jval jr_filter(struct jrender *R, const char *name, jval in, const struct jargs *a) {
    jval none = jv_none();
#define IS(x) (!strcmp(name, x))
    if (IS("tojson")) return filter_tojson(R, in, a);
    if (IS("length") || IS("count")) return jv_int(py_len(R, in));
    if (IS("string")) return soft_str(R, in);
    if (IS("safe")) {
        jval r = soft_str(R, in);
        r.flags = JS_SAFE;
        return r;
    }
    if (IS("trim")) {
        jval ch = jarg_or(a, 0, "chars", none);
        return do_strip(R, soft_str(R, in), ch.t == JV_STR ? ch : none, 3);
    }
    if (IS("default") || IS("d")) {
        jval dv = jarg_or(a, 0, "default_value", jv_str("", 0));
        bool boolean = jv_truthy(jarg_or(a, 1, "boolean", jv_bool(false)));
        if (in.t == JV_UNDEF || (boolean && !jv_truthy(in))) return dv;
        return in;
    }
    if (IS("lower")) return do_case(R, soft_str(R, in), 0);
    if (IS("upper")) return do_case(R, soft_str(R, in), 1);
    if (IS("title")) return do_case(R, soft_str(R, in), 2);
    if (IS("capitalize")) return do_case(R, soft_str(R, in), 3);
    if (IS("join")) {
        jval sep = soft_str(R, jarg_or(a, 0, "d", jv_str("", 0)));
        const jval *attr = jarg(a, 1, "attribute");
        struct jlist *l = jr_iter(R, in);
        if (attr) {
            struct jlist *m = jlist_new(R->e, l->n);
            for (size_t k = 0; k < l->n; k++) jlist_push(R->e, m, dotted_attr(R, l->v[k], *attr));
            l = m;
        }
        return join_items(R, sep, l, false);
    }
    if (IS("items")) {
        if (in.t == JV_UNDEF) return jv_list(jlist_new(R->e, 0), JL_GEN);
        if (in.t != JV_DICT) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: Can only get item pairs from a mapping.");
        struct jfunc f = {.kind = JF_METHOD, .id = M_ITEMS, .self = in};
        struct jargs none_a = {0};
        jval r = call_method(R, &f, &none_a);
        r.flags = JL_GEN;
        return r;
    }
    if (IS("list")) {
        struct jlist *l = jr_iter(R, in), *c = jlist_new(R->e, l->n);
        for (size_t k = 0; k < l->n; k++) jlist_push(R->e, c, l->v[k]);
        return jv_list(c, 0);
    }
    if (IS("first")) {
        struct jlist *l = jr_iter(R, in);
        return l->n ? l->v[0] : jv_undef("No first item, sequence was empty.");
    }
    if (IS("last")) {
        if (in.t == JV_LIST && (in.flags & JL_GEN))
            jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: 'generator' object is not reversible");
        struct jlist *l = jr_iter(R, in);
        return l->n ? l->v[l->n - 1] : jv_undef("No last item, sequence was empty.");
    }
    if (IS("replace")) {
        jval s = soft_str(R, in);
        const jval *o = jarg(a, 0, "old"), *nw = jarg(a, 1, "new");
        if (!o || !nw) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: replace filter needs old and new");
        jval c = jarg_or(a, 2, "count", none);
        return do_replace(R, s, soft_str(R, *o), soft_str(R, *nw), c.t == JV_INT ? c.u.i : -1);
    }
    if (IS("indent")) return filter_indent(R, soft_str(R, in), a);
    if (IS("select")) return filter_select(R, in, a, false, true);
    if (IS("reject")) return filter_select(R, in, a, false, false);
    if (IS("selectattr")) return filter_select(R, in, a, true, true);
    if (IS("rejectattr")) return filter_select(R, in, a, true, false);
    if (IS("map")) return filter_map(R, in, a);
    if (IS("int")) return to_int(R, in, jarg_or(a, 0, "default", jv_int(0)));
    if (IS("float")) {
        jval d = jarg_or(a, 0, "default", jv_float(0.0));
        if (in.t == JV_FLOAT) return in;
        if (in.t == JV_INT || in.t == JV_BOOL) return jv_float((double)(in.t == JV_INT ? in.u.i : in.u.b));
        if (in.t == JV_STR) {
            const char *s = cz(R, do_strip(R, in, none, 3));
            char *end;
            double x = strtod(s, &end);
            if (*s && !*end) return jv_float(x);
        }
        return d;
    }
    if (IS("abs")) {
        if (in.t == JV_INT) return jv_int(in.u.i < 0 ? -in.u.i : in.u.i);
        if (in.t == JV_FLOAT) return jv_float(in.u.f < 0 ? -in.u.f : in.u.f);
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: bad operand type for abs(): '%s'", jv_type_name(in));
    }
    if (IS("dictsort") || IS("sort") || IS("unique") || IS("min") || IS("max")) {
        struct sortctx c = {.R = R};
        bool reverse = false;
        if (IS("dictsort")) {
            if (in.t != JV_DICT) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "FilterArgumentError: You can only sort by either \"key\" or \"value\"");
            c.case_sensitive = jv_truthy(jarg_or(a, 0, "case_sensitive", jv_bool(false)));
            jval by = jarg_or(a, 1, "by", cstr("key"));
            c.by_value = str_eq(by, "value");
            reverse = jv_truthy(jarg_or(a, 2, "reverse", jv_bool(false)));
            struct jfunc f = {.kind = JF_METHOD, .id = M_ITEMS, .self = in};
            struct jargs none_a = {0};
            return jv_list(sorted(R, call_method(R, &f, &none_a).u.l, &c, reverse), 0);
        }
        c.by_value = -1;
        int ci = IS("sort") ? 1 : 0;
        if (IS("sort")) reverse = jv_truthy(jarg_or(a, 0, "reverse", jv_bool(false)));
        c.case_sensitive = jv_truthy(jarg_or(a, ci, "case_sensitive", jv_bool(false)));
        const jval *attr = jarg(a, ci + 1, "attribute");
        if (attr) c.attr = cz(R, soft_str(R, *attr));
        struct jlist *items = jr_iter(R, in);
        if (IS("unique")) {
            struct jlist *out = jlist_new(R->e, 0), *seen = jlist_new(R->e, 0);
            for (size_t k = 0; k < items->n; k++) {
                jval key = sort_key(&c, items->v[k]);
                bool dup = false;
                for (size_t q = 0; q < seen->n && !dup; q++) dup = jv_equal(seen->v[q], key);
                if (!dup) { jlist_push(R->e, seen, key); jlist_push(R->e, out, items->v[k]); }
            }
            return jv_list(out, JL_GEN);
        }
        struct jlist *s = sorted(R, items, &c, reverse);
        if (IS("sort")) return jv_list(s, 0);
        if (s->n == 0) return jv_undef(IS("min") ? "No aggregated item, sequence was empty." : "No aggregated item, sequence was empty.");
        return IS("min") ? s->v[0] : s->v[s->n - 1];
    }
    if (IS("reverse")) {
        if (in.t == JV_STR) {
            struct jlist *ch = jr_iter(R, in);
            struct jbuf b = {0};
            for (size_t k = ch->n; k-- > 0;) jbuf_put(R->e, &b, ch->v[k].u.s.p, ch->v[k].u.s.n);
            return jbuf_val(&b);
        }
        struct jlist *l = jr_iter(R, in), *o = jlist_new(R->e, l->n);
        for (size_t k = l->n; k-- > 0;) jlist_push(R->e, o, l->v[k]);
        return jv_list(o, JL_GEN);
    }
    if (IS("sum")) {
        struct jlist *l = jr_iter(R, in);
        const jval *attr = jarg(a, -1, "attribute");
        jval acc = jarg_or(a, 1, "start", jv_int(0));
        for (size_t k = 0; k < l->n; k++) {
            jval v = attr ? dotted_attr(R, l->v[k], *attr) : l->v[k];
            bool fl = acc.t == JV_FLOAT || v.t == JV_FLOAT;
            if (!((acc.t == JV_INT || acc.t == JV_FLOAT || acc.t == JV_BOOL) && (v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL)))
                jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: unsupported operand type(s) for +: '%s' and '%s'", jv_type_name(acc), jv_type_name(v));
            if (fl) acc = jv_float((acc.t == JV_FLOAT ? acc.u.f : (double)(acc.t == JV_INT ? acc.u.i : acc.u.b)) + (v.t == JV_FLOAT ? v.u.f : (double)(v.t == JV_INT ? v.u.i : v.u.b)));
            else acc = jv_int((acc.t == JV_INT ? acc.u.i : acc.u.b) + (v.t == JV_INT ? v.u.i : v.u.b));
        }
        return acc;
    }
    if (IS("attr")) {
        const jval *n = jarg(a, 0, NULL);
        if (!n || n->t != JV_STR) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: attr needs a name");
        return jr_getattr(R, in, n->u.s.p, n->u.s.n);
    }
    if (IS("e") || IS("escape")) return jv_html_escape(R->e, soft_str(R, in));
    static const char *const jinja2_filters[] = {"batch", "center", "filesizeformat", "forceescape", "format",
        "groupby", "pprint", "random", "round", "slice", "striptags", "truncate", "urlencode", "urlize",
        "wordcount", "wordwrap", "xmlattr"};
    for (size_t k = 0; k < NX_ARRAY_LEN(jinja2_filters); k++)
        if (IS(jinja2_filters[k]))
            jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: the filter '%s'", R->line, name);
    /* not a jinja2 filter either: jinja2's own TemplateRuntimeError */
    jr_fail(R, NX_STATUS_INVALID_ARG, "template", "No filter named '%s' found.", name);
#undef IS
}

/* ---- tests ---- */
bool jr_test(struct jrender *R, const char *name, jval v, const struct jargs *a) {
#define IS(x) (!strcmp(name, x))
    const jval *x = jarg(a, 0, NULL);
    if (IS("defined")) return v.t != JV_UNDEF;
    if (IS("undefined")) return v.t == JV_UNDEF;
    if (IS("none")) return v.t == JV_NONE;
    if (IS("boolean")) return v.t == JV_BOOL;
    if (IS("true")) return v.t == JV_BOOL && v.u.b;
    if (IS("false")) return v.t == JV_BOOL && !v.u.b;
    if (IS("integer")) return v.t == JV_INT;
    if (IS("float")) return v.t == JV_FLOAT;
    if (IS("number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (IS("string")) return v.t == JV_STR;
    if (IS("mapping")) return v.t == JV_DICT;
    if (IS("sequence")) return v.t == JV_STR || v.t == JV_DICT || v.t == JV_UNDEF || (v.t == JV_LIST && !(v.flags & JL_GEN));
    if (IS("iterable")) return v.t == JV_STR || v.t == JV_DICT || v.t == JV_UNDEF || v.t == JV_LIST;
    if (IS("callable")) return v.t == JV_FUNC || v.t == JV_UNDEF;
    if (IS("lower") || IS("upper")) {
        jval s = soft_str(R, v);
        return str_pred(s, IS("lower") ? M_ISLOWER : M_ISUPPER);
    }
    if (IS("odd") || IS("even")) {
        int64_t i = need_int(R, v);
        return (i % 2 != 0) == IS("odd");
    }
    if (IS("divisibleby")) {
        if (!x) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: divisibleby needs an argument");
        int64_t d = need_int(R, *x);
        if (d == 0) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ZeroDivisionError: integer division or modulo by zero");
        return need_int(R, v) % d == 0;
    }
    if (!x && (IS("eq") || IS("equalto") || IS("==") || IS("ne") || IS("!=") || IS("lt") || IS("<") ||
               IS("le") || IS("<=") || IS("gt") || IS(">") || IS("ge") || IS(">=") || IS("in") || IS("sameas")))
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: test '%s' needs an argument", name);
    if (IS("eq") || IS("equalto") || IS("==")) return jv_equal(v, *x);
    if (IS("ne") || IS("!=")) return !jv_equal(v, *x);
    if (IS("lt") || IS("lessthan") || IS("<")) return jv_compare(R->e, v, *x, "<") < 0;
    if (IS("le") || IS("<=")) return jv_compare(R->e, v, *x, "<=") <= 0;
    if (IS("gt") || IS("greaterthan") || IS(">")) return jv_compare(R->e, v, *x, ">") > 0;
    if (IS("ge") || IS(">=")) return jv_compare(R->e, v, *x, ">=") >= 0;
    if (IS("in")) return jr_contains(R, *x, v);
    if (IS("sameas")) {
        if (v.t != x->t) return false;
        if (v.t == JV_NONE || v.t == JV_UNDEF) return true;
        if (v.t == JV_BOOL) return v.u.b == x->u.b;
        if (v.t == JV_LIST) return v.u.l == x->u.l;
        if (v.t == JV_DICT || v.t == JV_NS) return v.u.d == x->u.d;
        return jv_equal(v, *x);
    }
    if (IS("escaped") || IS("filter") || IS("test"))
        jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: the test '%s'", R->line, name);
    jr_fail(R, NX_STATUS_INVALID_ARG, "template", "No test named '%s' found.", name);
#undef IS
}
