/*
 * schema.c - DESIGN: a JSON Schema subset compiled to GBNF text (with the internal %jstr
 * string-body element), then parsed by gbnf.c. One rule per schema node, named rN; local
 * $ref targets get their rule before their body is generated, so recursive schemas work.
 * Output is compact JSON (no whitespace anywhere). Fail closed: a keyword outside the
 * supported and annotation lists is refused with its name and the path of the schema node.
 *
 * Supported: type (string or list), properties, required, additionalProperties (false,
 * absent = false as llama.cpp, true, or a schema; extra keys are [A-Za-z0-9_-]{1,32} names
 * other than the declared ones), items (one schema), minItems, maxItems, enum, const (any JSON
 * value), anyOf, oneOf (as anyOf: exclusivity is not enforced), $ref (#, #/... pointers), $defs,
 * definitions, minLength, maxLength, format "date", minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum (numbers). Annotations ignored: description, title, default, examples,
 * $schema, $id, $comment, deprecated, readOnly, writeOnly (and BFCL's "optional").
 * Integers: exact digit grammars for [minimum, maximum]; without bounds at most 16 digits.
 * Numbers: up to 16 integer digits and 6 fraction digits, no exponent; with bounds, integers in
 * the range, and fractions n.f for 0 <= n with n+1 <= maximum (a sound subset).
 * BFCL mode (bfcl_types): BFCL's type names, its "optional" key ignored, and its enum/type
 * contradictions repaired (array + scalar enum: the enum applies to the items; scalar type +
 * enum of other types: the enum alone).
 */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "grammar/gbnf.h"
#include "grammar/schema.h"

#define SC_MAX_DEPTH 64
#define INT_DIGITS 16

struct sbuf {
    char *s;
    size_t n, cap;
    bool oom;
};

static void sb_putn(struct sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *q = nx_realloc(b->s, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->s = q;
        b->cap = nc;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_put(struct sbuf *b, const char *s) { sb_putn(b, s, strlen(s)); }
__attribute__((format(printf, 2, 3))) static void sb_printf(struct sbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) sb_putn(b, tmp, (size_t)(k < (int)sizeof tmp ? k : (int)sizeof tmp - 1));
}
/* A GBNF literal for raw bytes s[0..n). */
static void sb_lit(struct sbuf *b, const char *s, size_t n) {
    sb_put(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[3] = {'\\', (char)c, 0};
            sb_put(b, e);
        } else if (c < 0x20 || c == 0x7F) {
            sb_printf(b, "\\x%02X", c);
        } else {
            sb_putn(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"");
}

struct refmemo {
    char *ref;
    int rule;
};

struct sc {
    struct sbuf out;
    json_t *root;
    const struct nx_json_schema_params *p;
    struct nx_err *err;
    bool failed;
    int n_rules;
    int depth;
    char path[512];
    struct refmemo *refs;
    int n_refs, cap_refs;
    int any_rule; /* -1 until generated */
    enum schema_dialect dialect;
};

__attribute__((format(printf, 2, 3))) static void sc_fail(struct sc *c, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    nx_err_set(c->err, NX_STATUS_UNSUPPORTED, "json schema: %s (at %s)", msg,
               c->path[0] ? c->path : "/");
}

static int new_rule(struct sc *c) { return c->n_rules++; }

/* ---- dialects (schema.h): how strings, keys and the literals are written ---- */

/* a string of mn..mx code points (mx < 0: unbounded) */
static void dia_string(struct sc *c, struct sbuf *b, long mn, long mx) {
    if (c->dialect == SCHEMA_JSON) {
        sb_printf(b, "\"\\\"\" %%jstr{%ld,%ld}", mn, mx);
        return;
    }
    if (c->dialect == SCHEMA_JSON_NO_LT) { /* one character: plain (no '<') or a short escape */
        const char *ch = "( [^\"\\\\<\\x00-\\x1f] | \"\\\\\" [\"\\\\/bfnrt] )";
        sb_put(b, "\"\\\"\" ");
        if (mx == 0) sb_put(b, "\"\"");
        else if (mx < 0) sb_printf(b, "%s{%ld,}", ch, mn);
        else sb_printf(b, "%s{%ld,%ld}", ch, mn, mx);
        sb_put(b, " \"\\\"\"");
        return;
    }
    /* raw bodies without escapes: gemma4 up to its <|"|> quote (no '<'), python without the
       quote or a backslash; no control characters in either */
    const char *q = c->dialect == SCHEMA_GEMMA4 ? "\"<|\\\"|>\"" : "\"'\"";
    const char *cls = c->dialect == SCHEMA_GEMMA4 ? "[^<\\x00-\\x1f]" : "[^'\\\\<\\x00-\\x1f]";
    sb_printf(b, "%s ", q);
    if (mx == 0) sb_put(b, "\"\"");
    else if (mx < 0) sb_printf(b, "%s{%ld,}", cls, mn);
    else sb_printf(b, "%s{%ld,%ld}", cls, mn, mx);
    sb_printf(b, " %s", q);
}
static const char *dia_true(const struct sc *c) { return c->dialect == SCHEMA_PYTHON ? "\"True\"" : "\"true\""; }
static const char *dia_false(const struct sc *c) { return c->dialect == SCHEMA_PYTHON ? "\"False\"" : "\"false\""; }
static const char *dia_null(const struct sc *c) { return c->dialect == SCHEMA_PYTHON ? "\"None\"" : "\"null\""; }

static bool plain_key(const char *k) {
    if (!*k) return false;
    for (; *k; k++)
        if (!((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') || *k == '_' || *k == '-'))
            return false;
    return true;
}

/* v written in the dialect into t (JSON: compact JSON); false when it cannot be */
static bool dia_dump(struct sc *c, json_t *v, struct sbuf *t, int depth) {
    if (depth > SC_MAX_DEPTH) return false;
    if (c->dialect == SCHEMA_JSON || json_is_number(v) || (c->dialect == SCHEMA_JSON_NO_LT && !json_is_string(v) &&
                                                           !json_is_array(v) && !json_is_object(v))) {
        char *j = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!j) return false;
        sb_put(t, j);
        nx_free(j);
        return true;
    }
    if (json_is_true(v)) sb_put(t, c->dialect == SCHEMA_PYTHON ? "True" : "true");
    else if (json_is_false(v)) sb_put(t, c->dialect == SCHEMA_PYTHON ? "False" : "false");
    else if (json_is_null(v)) sb_put(t, c->dialect == SCHEMA_PYTHON ? "None" : "null");
    else if (json_is_string(v) && c->dialect == SCHEMA_JSON_NO_LT) {
        if (strchr(json_string_value(v), '<')) return false;
        char *j = json_dumps(v, JSON_ENCODE_ANY);
        if (!j) return false;
        sb_put(t, j);
        nx_free(j);
    } else if (json_is_string(v)) {
        const char *x = json_string_value(v);
        for (const char *q = x; *q; q++)
            if ((unsigned char)*q < 0x20 || *q == '<' || (c->dialect == SCHEMA_PYTHON && (*q == '\'' || *q == '\\')))
                return false;
        sb_put(t, c->dialect == SCHEMA_GEMMA4 ? "<|\"|>" : "'");
        sb_put(t, x);
        sb_put(t, c->dialect == SCHEMA_GEMMA4 ? "<|\"|>" : "'");
    } else if (json_is_array(v)) {
        size_t i;
        json_t *e;
        sb_put(t, "[");
        json_array_foreach(v, i, e) {
            if (i) sb_put(t, ",");
            if (!dia_dump(c, e, t, depth + 1)) return false;
        }
        sb_put(t, "]");
    } else if (json_is_object(v)) {
        const char *k;
        json_t *e;
        bool first = true;
        sb_put(t, "{");
        json_object_foreach(v, k, e) {
            if (!first) sb_put(t, ",");
            first = false;
            json_t *ks = json_string(k);
            bool ok = c->dialect == SCHEMA_GEMMA4 ? plain_key(k) : (ks && dia_dump(c, ks, t, depth + 1));
            json_decref(ks);
            if (!ok) return false;
            if (c->dialect == SCHEMA_GEMMA4) sb_put(t, k);
            sb_put(t, ":");
            if (!dia_dump(c, e, t, depth + 1)) return false;
        }
        sb_put(t, "}");
    } else return false;
    return true;
}
static void def_rule(struct sc *c, int r, const struct sbuf *body) {
    sb_printf(&c->out, "r%d ::= ", r);
    sb_put(&c->out, body->s ? body->s : "\"\"");
    sb_put(&c->out, "\n");
    if (body->oom) c->out.oom = true;
}

static size_t path_push(struct sc *c, const char *seg) {
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "/%s", seg);
    return old;
}
static void path_pop(struct sc *c, size_t old) { c->path[old] = 0; }

static int gen(struct sc *c, json_t *s);

/* ---- any JSON value ---- */
static int gen_any(struct sc *c) {
    if (c->any_rule >= 0) return c->any_rule;
    int v = new_rule(c), o = new_rule(c), a = new_rule(c), str = new_rule(c), num = new_rule(c);
    c->any_rule = v;
    int cap = c->p->max_string_chars > 0 ? c->p->max_string_chars : -1;
    sb_printf(&c->out, "r%d ::= r%d | r%d | r%d | r%d | %s | %s | %s\n", v, o, a, str, num, dia_true(c), dia_false(c),
              dia_null(c));
    struct sbuf sb = {0};
    dia_string(c, &sb, 0, cap);
    sb_printf(&c->out, "r%d ::= %s\n", str, sb.s ? sb.s : "\"\"");
    if (sb.oom) c->out.oom = true;
    nx_free(sb.s);
    if (c->dialect == SCHEMA_GEMMA4) /* bare keys */
        sb_printf(&c->out, "r%d ::= \"{\" ( [A-Za-z0-9_]{1,32} \":\" r%d ( \",\" [A-Za-z0-9_]{1,32} \":\" r%d )* )? \"}\"\n", o,
                  v, v);
    else
        sb_printf(&c->out, "r%d ::= \"{\" ( r%d \":\" r%d ( \",\" r%d \":\" r%d )* )? \"}\"\n", o, str, v,
                  str, v);
    sb_printf(&c->out, "r%d ::= \"[\" ( r%d ( \",\" r%d )* )? \"]\"\n", a, v, v);
    sb_printf(&c->out,
              "r%d ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,%d} ) ( \".\" [0-9]{1,6} )?\n", num,
              INT_DIGITS - 1);
    return v;
}

/* ---- integers: exact ranges ---- */

/* Expression for decimal strings of equal length n between a and b (a <= b). */
static void range_same_len(struct sbuf *b, const char *a, const char *z, int n) {
    if (n == 0) {
        sb_put(b, "\"\"");
        return;
    }
    if (a[0] == z[0]) {
        sb_printf(b, "\"%c\" ", a[0]);
        if (n > 1) {
            sb_put(b, "( ");
            range_same_len(b, a + 1, z + 1, n - 1);
            sb_put(b, " )");
        }
        return;
    }
    bool a_rest0 = true, z_rest9 = true;
    for (int i = 1; i < n; i++) {
        a_rest0 &= a[i] == '0';
        z_rest9 &= z[i] == '9';
    }
    char lo = a_rest0 ? a[0] : (char)(a[0] + 1), hi = z_rest9 ? z[0] : (char)(z[0] - 1);
    bool first = true;
    sb_put(b, "( ");
    if (!a_rest0) {
        char nines[32];
        memset(nines, '9', (size_t)n);
        sb_printf(b, "\"%c\" ( ", a[0]);
        range_same_len(b, a + 1, nines + 1, n - 1);
        sb_put(b, " )");
        first = false;
    }
    if (lo <= hi) {
        if (!first) sb_put(b, " | ");
        sb_printf(b, "[%c-%c]", lo, hi);
        if (n > 1) sb_printf(b, " [0-9]{%d}", n - 1);
        first = false;
    }
    if (!z_rest9) {
        char zeros[32];
        memset(zeros, '0', (size_t)n);
        if (!first) sb_put(b, " | ");
        sb_printf(b, "\"%c\" ( ", z[0]);
        range_same_len(b, zeros + 1, z + 1, n - 1);
        sb_put(b, " )");
    }
    sb_put(b, " )");
}

/* Non-negative integers in [a, b] without leading zeros, as alternatives. */
static void range_pos(struct sbuf *b, long long a, long long z) {
    bool first = true;
    long long p10 = 1;
    for (int len = 1; len <= 18 && a <= z; len++) {
        long long lo = len == 1 ? 0 : p10, hi = p10 * 10 - 1;
        p10 *= 10;
        if (hi < a) continue;
        if (lo > z) break;
        long long x = a > lo ? a : lo, y = z < hi ? z : hi;
        char sa[32], sz[32];
        snprintf(sa, sizeof sa, "%lld", x);
        snprintf(sz, sizeof sz, "%lld", y);
        if (!first) sb_put(b, " | ");
        range_same_len(b, sa, sz, len);
        first = false;
    }
    if (first) sb_put(b, "[^\\x00-\\U0010FFFF]"); /* empty: nothing */
}

static void int_range(struct sbuf *b, long long lo, long long hi) {
    sb_put(b, "( ");
    if (lo >= 0) {
        range_pos(b, lo, hi);
    } else if (hi < 0) {
        sb_put(b, "\"-\" ( ");
        range_pos(b, -hi, -lo);
        sb_put(b, " )");
    } else {
        sb_put(b, "\"-\" ( ");
        range_pos(b, 1, -lo);
        sb_put(b, " ) | ");
        range_pos(b, 0, hi);
    }
    sb_put(b, " )");
}

static bool num_bound(struct sc *c, json_t *s, const char *k, double *out) {
    json_t *v = json_object_get(s, k);
    if (!v) return false;
    if (!json_is_number(v)) {
        sc_fail(c, "'%s' must be a number", k);
        return false;
    }
    *out = json_number_value(v);
    return true;
}

static void gen_number(struct sc *c, json_t *s, bool integer, struct sbuf *b) {
    const double LIM = 9999999999999999.0; /* 16 digits */
    double lo = -LIM, hi = LIM, x;
    bool bounded = false;
    if (num_bound(c, s, "minimum", &x)) { lo = fmax(lo, x); bounded = true; }
    if (num_bound(c, s, "maximum", &x)) { hi = fmin(hi, x); bounded = true; }
    if (num_bound(c, s, "exclusiveMinimum", &x)) { lo = fmax(lo, floor(x) + 1); bounded = true; }
    if (num_bound(c, s, "exclusiveMaximum", &x)) { hi = fmin(hi, ceil(x) - 1); bounded = true; }
    if (c->failed) return;
    if (!bounded) {
        sb_printf(b, "\"-\"? ( \"0\" | [1-9] [0-9]{0,%d} )", INT_DIGITS - 1);
        if (!integer) sb_put(b, " ( \".\" [0-9]{1,6} )?");
        return;
    }
    /* lo >= -LIM and hi <= LIM here, but a bound beyond 16 digits (exclusiveMinimum 1e45)
     * leaves lo > hi: compare as doubles before converting, which would overflow */
    if (ceil(lo) > floor(hi)) {
        sc_fail(c, "no %s in [%g, %g] that this compiler can generate", integer ? "integer" : "number",
                lo, hi);
        return;
    }
    long long ilo = (long long)ceil(lo), ihi = (long long)floor(hi);
    if (integer) {
        int_range(b, ilo, ihi);
        return;
    }
    sb_put(b, "( ");
    int_range(b, ilo, ihi);
    long long flo = ilo > 0 ? ilo : 0, fhi = ihi - 1;
    if (flo <= fhi) {
        sb_put(b, " | ");
        int_range(b, flo, fhi);
        sb_put(b, " \".\" [0-9]{1,6}");
    }
    sb_put(b, " )");
}

/* ---- strings ---- */

static long get_count(struct sc *c, json_t *s, const char *k, long dflt) {
    json_t *v = json_object_get(s, k);
    if (!v) return dflt;
    double d = json_is_number(v) ? json_number_value(v) : -1;
    if (d < 0 || d != floor(d) || d > 100000) {
        sc_fail(c, "'%s' must be a non-negative integer up to 100000", k);
        return dflt;
    }
    return (long)d;
}

static void gen_string(struct sc *c, json_t *s, struct sbuf *b) {
    json_t *fmt = json_object_get(s, "format");
    if (fmt) {
        if (!json_is_string(fmt) || strcmp(json_string_value(fmt), "date")) {
            sc_fail(c, "unsupported format '%s' (only \"date\")",
                    json_is_string(fmt) ? json_string_value(fmt) : "?");
            return;
        }
        /* RFC 3339 full-date; days 01-28 only, so every generated date exists */
        const char *q = c->dialect == SCHEMA_JSON || c->dialect == SCHEMA_JSON_NO_LT ? "\"\\\"\""
                        : c->dialect == SCHEMA_GEMMA4                            ? "\"<|\\\"|>\""
                                                                                 : "\"'\"";
        sb_printf(b, "%s [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | \"1\" "
                     "[0-9] | \"2\" [0-8] ) %s", q, q);
        return;
    }
    long mn = get_count(c, s, "minLength", 0);
    long mx = get_count(c, s, "maxLength", -1);
    if (mx < 0 && c->p->max_string_chars > 0) mx = c->p->max_string_chars > mn ? c->p->max_string_chars : mn;
    if (mx >= 0 && mx < mn) {
        sc_fail(c, "maxLength below minLength");
        return;
    }
    dia_string(c, b, mn, mx);
}

/* ---- enum / const ---- */

static bool type_matches(const char *t, json_t *v) {
    if (!strcmp(t, "string")) return json_is_string(v);
    if (!strcmp(t, "integer"))
        return json_is_integer(v) || (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(t, "number")) return json_is_number(v);
    if (!strcmp(t, "boolean")) return json_is_boolean(v);
    if (!strcmp(t, "null")) return json_is_null(v);
    if (!strcmp(t, "array")) return json_is_array(v);
    if (!strcmp(t, "object")) return json_is_object(v);
    return false;
}

static void lit_value(struct sc *c, json_t *v, struct sbuf *b) {
    struct sbuf t = {0};
    if (!dia_dump(c, v, &t, 0) || t.oom) {
        nx_free(t.s);
        sc_fail(c, "cannot write an enum value in this dialect (%s)",
                c->dialect == SCHEMA_GEMMA4   ? "gemma4: a string with '<' or a control character, or a key that is "
                                                "not a plain name"
                : c->dialect == SCHEMA_PYTHON ? "python: a string with a quote, a backslash, '<' or a control character"
                                              : "JSON inside an XML element: a string with '<'");
        return;
    }
    sb_lit(b, t.s ? t.s : "", t.n);
    nx_free(t.s);
}

/* ---- types ---- */

static const char *bfcl_type(const char *t) {
    static const char *map[][2] = {
        {"integer", "integer"}, {"number", "number"},   {"float", "number"},   {"string", "string"},
        {"boolean", "boolean"}, {"bool", "boolean"},    {"array", "array"},    {"list", "array"},
        {"dict", "object"},     {"object", "object"},   {"tuple", "array"},    {"any", "string"},
        {"byte", "integer"},    {"short", "integer"},   {"long", "integer"},   {"double", "number"},
        {"char", "string"},     {"ArrayList", "array"}, {"Array", "array"},    {"HashMap", "object"},
        {"Hashtable", "object"}, {"Queue", "array"},    {"Stack", "array"},    {"Any", "string"},
        {"String", "string"},   {"Bigint", "integer"}, {"null", "null"}};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (!strcmp(t, map[i][0])) return map[i][1];
    return NULL;
}

static const char *norm_type(struct sc *c, json_t *t) {
    if (!json_is_string(t)) {
        sc_fail(c, "'type' entries must be strings");
        return NULL;
    }
    const char *s = json_string_value(t);
    static const char *std[] = {"string", "integer", "number", "boolean", "null", "array", "object"};
    for (size_t i = 0; i < 7; i++)
        if (!strcmp(s, std[i])) return std[i];
    if (c->p->bfcl_types) {
        const char *m = bfcl_type(s);
        if (m) return m;
    }
    sc_fail(c, "unsupported type '%s'", s);
    return NULL;
}

/* Extra-property keys: [A-Za-z0-9_-]{1,32} other than the declared names (a trie of them). */
static int gen_key_excl(struct sc *c, const char **names, int n, int depth) {
    /* names: the declared names that share the current prefix (already stripped of it) */
    int r = new_rule(c);
    struct sbuf b = {0};
    bool ends = false;
    static const char alpha[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
    for (const char *a = alpha; *a; a++) {
        const char *sub[256];
        int ns = 0;
        for (int i = 0; i < n && ns < 256; i++)
            if (names[i][0] == *a) sub[ns++] = names[i] + 1;
        if (ns > 0 && depth >= 31) continue; /* at full length: never risk a declared name */
        if (b.n) sb_put(&b, " | ");
        if (ns == 0)
            sb_printf(&b, "\"%c\" [A-Za-z0-9_-]{0,%d}", *a, 31 - depth);
        else
            sb_printf(&b, "\"%c\" r%d", *a, gen_key_excl(c, sub, ns, depth + 1));
    }
    for (int i = 0; i < n; i++) ends |= names[i][0] == 0;
    if (depth > 0 && !ends) sb_put(&b, b.n ? " | \"\"" : "\"\"");
    def_rule(c, r, &b);
    nx_free(b.s);
    return r;
}

static void gen_object(struct sc *c, json_t *s, struct sbuf *b) {
    json_t *props = json_object_get(s, "properties");
    json_t *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) {
        sc_fail(c, "'properties' must be an object");
        return;
    }
    if (req && !json_is_array(req)) {
        sc_fail(c, "'required' must be an array");
        return;
    }
    size_t np = props ? json_object_size(props) : 0;
    const char **names = nx_calloc(np + 1, sizeof *names);
    int *kv = nx_calloc(np + 1, sizeof *kv);
    bool *isreq = nx_calloc(np + 1, sizeof *isreq);
    if (!names || !kv || !isreq) {
        c->out.oom = true;
        goto done;
    }
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(props, key, val) {
        names[i] = key;
        size_t old = path_push(c, "properties");
        size_t old2 = path_push(c, key);
        int vr = gen(c, val);
        path_pop(c, old2);
        path_pop(c, old);
        if (c->failed) goto done;
        kv[i] = new_rule(c);
        struct sbuf kb = {0};
        json_t *ks = json_string(key);
        struct sbuf kt = {0};
        bool kok = ks && (c->dialect == SCHEMA_GEMMA4 ? plain_key(key) : dia_dump(c, ks, &kt, 0));
        json_decref(ks);
        if (kok && c->dialect == SCHEMA_GEMMA4) sb_put(&kt, key);
        if (!kok || kt.oom) {
            nx_free(kt.s);
            nx_free(kb.s);
            if (!ks || kt.oom) c->out.oom = true;
            else sc_fail(c, "property name '%s' cannot be written in this dialect", key);
            goto done;
        }
        sb_lit(&kb, kt.s, kt.n);
        nx_free(kt.s);
        sb_printf(&kb, " \":\" r%d", vr);
        def_rule(c, kv[i], &kb);
        nx_free(kb.s);
        i++;
    }
    size_t nreq = req ? json_array_size(req) : 0;
    for (size_t k = 0; k < nreq; k++) {
        json_t *r = json_array_get(req, k);
        if (!json_is_string(r)) {
            sc_fail(c, "'required' entries must be strings");
            goto done;
        }
        bool found = false;
        for (size_t j = 0; j < np; j++)
            if (!strcmp(names[j], json_string_value(r))) {
                isreq[j] = true;
                found = true;
            }
        if (!found) {
            sc_fail(c, "required property '%s' is not in 'properties'", json_string_value(r));
            goto done;
        }
    }
    int extra = -1; /* rule of one extra key:value */
    if (addl && !(json_is_false(addl))) {
        int vr;
        if (json_is_true(addl)) {
            vr = gen_any(c);
        } else {
            size_t old = path_push(c, "additionalProperties");
            vr = gen(c, addl);
            path_pop(c, old);
        }
        if (c->failed) goto done;
        int kr = gen_key_excl(c, names, (int)np, 0);
        extra = new_rule(c);
        struct sbuf eb = {0};
        const char *kq = c->dialect == SCHEMA_JSON || c->dialect == SCHEMA_JSON_NO_LT ? "\"\\\"\" "
                         : c->dialect == SCHEMA_PYTHON                            ? "\"'\" "
                                                                                  : "";
        sb_printf(&eb, "%sr%d %s\":\" r%d", kq, kr, kq, vr);
        def_rule(c, extra, &eb);
        nx_free(eb.s);
    }
    /* required first (schema order), then optional (schema order) */
    int *opt = nx_calloc(np + 1, sizeof *opt);
    if (!opt) {
        c->out.oom = true;
        goto done;
    }
    int nopt = 0, nr = 0;
    sb_put(b, "\"{\" ");
    for (size_t j = 0; j < np; j++) {
        if (isreq[j]) {
            sb_printf(b, "%sr%d ", nr ? "\",\" " : "", kv[j]);
            nr++;
        } else {
            opt[nopt++] = kv[j];
        }
    }
    /* tails: T_k ::= ("," O_k)? T_{k+1}; T_n ::= ("," E)* */
    int *tail = nx_calloc((size_t)nopt + 2, sizeof *tail);
    if (!tail) {
        nx_free(opt);
        c->out.oom = true;
        goto done;
    }
    for (int k = nopt; k >= 0; k--) {
        tail[k] = new_rule(c);
        struct sbuf tb = {0};
        if (k == nopt)
            sb_put(&tb, extra >= 0 ? "" : "\"\"");
        if (k == nopt && extra >= 0) sb_printf(&tb, "( \",\" r%d )*", extra);
        if (k < nopt) sb_printf(&tb, "( \",\" r%d )? r%d", opt[k], tail[k + 1]);
        def_rule(c, tail[k], &tb);
        nx_free(tb.s);
    }
    if (nr > 0) {
        sb_printf(b, "r%d ", tail[0]);
    } else {
        int first = new_rule(c);
        struct sbuf fb = {0};
        for (int k = 0; k < nopt; k++) sb_printf(&fb, "r%d r%d | ", opt[k], tail[k + 1]);
        if (extra >= 0) sb_printf(&fb, "r%d r%d | ", extra, tail[nopt]);
        sb_put(&fb, "\"\"");
        def_rule(c, first, &fb);
        nx_free(fb.s);
        sb_printf(b, "r%d ", first);
    }
    sb_put(b, "\"}\"");
    nx_free(tail);
    nx_free(opt);
done:
    nx_free(names);
    nx_free(kv);
    nx_free(isreq);
}

static void gen_array(struct sc *c, json_t *s, struct sbuf *b) {
    json_t *items = json_object_get(s, "items");
    if (items && json_is_array(items)) {
        sc_fail(c, "'items' as an array (tuple form) is not supported");
        return;
    }
    long mn = get_count(c, s, "minItems", 0), mx = get_count(c, s, "maxItems", -1);
    if (c->failed) return;
    if (mx < 0 && c->p->max_items > 0) mx = c->p->max_items > mn ? c->p->max_items : mn;
    if (mx >= 0 && mx < mn) {
        sc_fail(c, "maxItems below minItems");
        return;
    }
    int ir;
    if (items) {
        size_t old = path_push(c, "items");
        ir = gen(c, items);
        path_pop(c, old);
    } else {
        ir = gen_any(c);
    }
    if (c->failed) return;
    if (mx == 0) {
        sb_put(b, "\"[\" \"]\"");
        return;
    }
    sb_printf(b, "\"[\" ( r%d ( \",\" r%d )", ir, ir);
    if (mx < 0)
        sb_printf(b, "{%ld,}", mn > 0 ? mn - 1 : 0);
    else
        sb_printf(b, "{%ld,%ld}", mn > 0 ? mn - 1 : 0, mx - 1);
    sb_printf(b, " )%s \"]\"", mn > 0 ? "" : "?");
}

static bool is_annotation(struct sc *c, const char *k) {
    static const char *ann[] = {"description", "title",    "default",   "examples", "$schema",
                                "$id",         "$comment", "deprecated", "readOnly", "writeOnly"};
    for (size_t i = 0; i < sizeof ann / sizeof ann[0]; i++)
        if (!strcmp(k, ann[i])) return true;
    return c->p->bfcl_types && !strcmp(k, "optional");
}

static json_t *resolve_ref(struct sc *c, const char *ref) {
    if (ref[0] != '#') {
        sc_fail(c, "only local $ref ('#...') is supported, got '%s'", ref);
        return NULL;
    }
    json_t *cur = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        sc_fail(c, "$ref '%s': anchors are not supported", ref);
        return NULL;
    }
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        if (json_is_object(cur))
            cur = json_object_get(cur, tok);
        else if (json_is_array(cur))
            cur = json_array_get(cur, (size_t)strtoul(tok, NULL, 10));
        else
            cur = NULL;
        if (!cur) {
            sc_fail(c, "$ref '%s' does not resolve", ref);
            return NULL;
        }
    }
    return cur;
}

static void gen_typed(struct sc *c, json_t *s, const char *t, struct sbuf *b) {
    if (!strcmp(t, "string"))
        gen_string(c, s, b);
    else if (!strcmp(t, "integer"))
        gen_number(c, s, true, b);
    else if (!strcmp(t, "number"))
        gen_number(c, s, false, b);
    else if (!strcmp(t, "boolean"))
        sb_printf(b, "( %s | %s )", dia_true(c), dia_false(c));
    else if (!strcmp(t, "null"))
        sb_put(b, dia_null(c));
    else if (!strcmp(t, "array"))
        gen_array(c, s, b);
    else
        gen_object(c, s, b);
}

static int gen(struct sc *c, json_t *s) {
    if (c->failed) return 0;
    if (++c->depth > SC_MAX_DEPTH) {
        sc_fail(c, "schema nested deeper than %d", SC_MAX_DEPTH);
        c->depth--;
        return 0;
    }
    int r = -1;
    if (json_is_true(s) || (json_is_object(s) && json_object_size(s) == 0)) {
        r = gen_any(c);
        goto out;
    }
    if (!json_is_object(s)) {
        sc_fail(c, json_is_false(s) ? "schema 'false' matches nothing" : "a schema must be an object");
        goto out;
    }
    static const char *known[] = {
        "type",      "properties", "required",  "additionalProperties", "items", "minItems",
        "maxItems",  "enum",       "const",     "anyOf",    "oneOf",    "$ref",  "$defs",
        "definitions", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "format"};
    const char *key;
    json_t *val;
    bool has_constraint = false;
    json_object_foreach(s, key, val) {
        bool ok = is_annotation(c, key);
        for (size_t i = 0; i < sizeof known / sizeof known[0] && !ok; i++) ok = !strcmp(key, known[i]);
        if (!ok) {
            sc_fail(c, "unsupported keyword '%s'", key);
            goto out;
        }
        if (!is_annotation(c, key) && strcmp(key, "$defs") && strcmp(key, "definitions") &&
            strcmp(key, "$ref"))
            has_constraint = true;
    }
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        if (!json_is_string(ref)) {
            sc_fail(c, "$ref must be a string");
            goto out;
        }
        if (has_constraint) {
            sc_fail(c, "$ref with sibling constraint keywords is not supported");
            goto out;
        }
        const char *rs = json_string_value(ref);
        for (int i = 0; i < c->n_refs; i++)
            if (!strcmp(c->refs[i].ref, rs)) {
                r = c->refs[i].rule;
                goto out;
            }
        json_t *target = resolve_ref(c, rs);
        if (!target) goto out;
        if (c->n_refs == c->cap_refs) {
            int nc = c->cap_refs ? c->cap_refs * 2 : 8;
            void *q = nx_realloc(c->refs, sizeof *c->refs * (size_t)nc);
            if (!q) {
                c->out.oom = true;
                goto out;
            }
            c->refs = q;
            c->cap_refs = nc;
        }
        r = new_rule(c);
        c->refs[c->n_refs].ref = nx_strdup(rs);
        c->refs[c->n_refs].rule = r;
        if (!c->refs[c->n_refs].ref) {
            c->out.oom = true;
            goto out;
        }
        c->n_refs++;
        size_t old = path_push(c, "$ref");
        int tr = gen(c, target);
        path_pop(c, old);
        struct sbuf rb = {0};
        sb_printf(&rb, "r%d", tr);
        def_rule(c, r, &rb);
        nx_free(rb.s);
        goto out;
    }
    /* the types this node allows (NULL entries: none given) */
    const char *types[8];
    int nt = 0;
    json_t *type = json_object_get(s, "type");
    if (json_is_array(type)) {
        size_t k;
        json_t *t;
        json_array_foreach(type, k, t) {
            const char *nm = norm_type(c, t);
            if (!nm) goto out;
            bool dup = false;
            for (int j = 0; j < nt; j++) dup |= types[j] == nm || !strcmp(types[j], nm);
            if (!dup && nt < 8) types[nt++] = nm;
        }
        if (nt == 0) {
            sc_fail(c, "empty 'type' list");
            goto out;
        }
    } else if (type) {
        const char *nm = norm_type(c, type);
        if (!nm) goto out;
        types[nt++] = nm;
    }
    struct sbuf b = {0};
    json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    json_t *any = json_object_get(s, "anyOf");
    if (!any) any = json_object_get(s, "oneOf");
    if (en || cn) {
        if (en && !json_is_array(en)) {
            sc_fail(c, "'enum' must be an array");
            goto out_b;
        }
        int n = 0;
        size_t k;
        json_t *v;
        json_t *one = json_array();
        if (!one) {
            c->out.oom = true;
            goto out_b;
        }
        if (cn) json_array_append(one, cn);
        json_t *list = cn ? one : en;
        json_array_foreach(list, k, v) {
            bool ok = nt == 0;
            for (int j = 0; j < nt && !ok; j++) ok = type_matches(types[j], v);
            if (!ok) continue;
            if (n++) sb_put(&b, " | ");
            lit_value(c, v, &b);
        }
        json_decref(one);
        if (n == 0 && c->p->bfcl_types && en) {
            /* BFCL data bug: enum values that contradict the type (strictly, nothing is
               valid). Repair as the author meant: an array type takes the enum as its items';
               otherwise the enum values stand without the type. */
            bool arr = false;
            for (int j = 0; j < nt; j++) arr |= !strcmp(types[j], "array");
            json_t *fix = json_deep_copy(s);
            if (!fix) {
                c->out.oom = true;
                goto out_b;
            }
            if (arr) {
                json_object_set_new(fix, "type", json_string("array"));
                json_object_set_new(fix, "items", json_pack("{s:O}", "enum", en));
                json_object_del(fix, "enum");
            } else {
                json_object_del(fix, "type");
            }
            int fr = gen(c, fix);
            json_decref(fix);
            sb_printf(&b, "r%d", fr);
            n = 1;
        }
        if (n == 0) {
            sc_fail(c, "no enum/const value matches the type");
            goto out_b;
        }
    } else if (any) {
        if (!json_is_array(any) || json_array_size(any) == 0) {
            sc_fail(c, "anyOf/oneOf must be a non-empty array");
            goto out_b;
        }
        if (nt || json_object_get(s, "properties") || json_object_get(s, "items")) {
            sc_fail(c, "anyOf/oneOf mixed with type/properties/items is not supported");
            goto out_b;
        }
        size_t k;
        json_t *v;
        json_array_foreach(any, k, v) {
            char seg[32];
            snprintf(seg, sizeof seg, "anyOf/%zu", k);
            size_t old = path_push(c, seg);
            int sr = gen(c, v);
            path_pop(c, old);
            if (c->failed) goto out_b;
            sb_printf(&b, "%sr%d", k ? " | " : "", sr);
        }
    } else if (nt == 0) {
        if (json_object_get(s, "properties") || json_object_get(s, "required") ||
            json_object_get(s, "additionalProperties"))
            types[nt++] = "object";
        else if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
                 json_object_get(s, "maxItems"))
            types[nt++] = "array";
        else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") ||
                 json_object_get(s, "format"))
            types[nt++] = "string";
        else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
                 json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
            types[nt++] = "number";
        else {
            nx_free(b.s);
            r = gen_any(c);
            goto out;
        }
    }
    if (!en && !cn && !any) {
        for (int j = 0; j < nt && !c->failed; j++) {
            if (j) sb_put(&b, " | ");
            gen_typed(c, s, types[j], &b);
        }
    }
    if (!c->failed) {
        r = new_rule(c);
        def_rule(c, r, &b);
    }
out_b:
    nx_free(b.s);
out:
    c->depth--;
    return r < 0 ? 0 : r;
}

struct nx_json_schema_params nx_json_schema_default_params(void) {
    struct nx_json_schema_params p = {.max_string_chars = 0, .max_items = 0, .bfcl_types = false};
    return p;
}

nx_status schema_to_gbnf(const char *json, size_t len, const struct nx_json_schema_params *p,
                         char **gbnf_out, struct nx_err *err) {
    return schema_to_gbnf_dialect(json, len, p, SCHEMA_JSON, gbnf_out, err);
}

nx_status schema_to_gbnf_dialect(const char *json, size_t len, const struct nx_json_schema_params *p,
                                 enum schema_dialect dialect, char **gbnf_out, struct nx_err *err) {
    *gbnf_out = NULL;
    struct nx_json_schema_params dp = nx_json_schema_default_params();
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_DECODE_ANY, &je);
    if (!root)
        return nx_err_set(err, NX_STATUS_FORMAT, "json schema: %d:%d: %s", je.line, je.column,
                          je.text);
    struct sc c = {.root = root, .p = p ? p : &dp, .err = err, .any_rule = -1, .dialect = dialect};
    c.n_rules = 1; /* r0 is the root */
    sb_put(&c.out, "root ::= r0\n");
    int r = gen(&c, root);
    if (!c.failed) {
        struct sbuf rb = {0};
        sb_printf(&rb, "r%d", r);
        def_rule(&c, 0, &rb);
        nx_free(rb.s);
    }
    for (int i = 0; i < c.n_refs; i++) nx_free(c.refs[i].ref);
    nx_free(c.refs);
    json_decref(root);
    if (c.out.oom && !c.failed) {
        nx_free(c.out.s);
        return nx_err_set(err, NX_STATUS_NOMEM, "json schema: out of memory");
    }
    if (c.failed) {
        nx_free(c.out.s);
        return NX_STATUS_UNSUPPORTED;
    }
    *gbnf_out = c.out.s;
    return NX_STATUS_OK;
}
