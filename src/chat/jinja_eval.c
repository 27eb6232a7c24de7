/*
 * jinja_eval.c - runs a parsed template: statements, expressions, scopes, macros, loops.
 *
 * DESIGN. A tree walker with jinja2's semantics as Hugging Face runs it: default Undefined
 * (prints as "", iterates as empty, is false; attribute access, arithmetic and calls on it
 * raise UndefinedError with jinja2's message), Python arithmetic and comparisons, `for` loops
 * that open one scope for the whole loop (so `set` inside a loop does not leak, and namespace()
 * is the way out), `if` that opens none, macros that close over the scope they were defined in
 * and render into their own buffer. Limits: total loop iterations + macro calls
 * (opts.max_steps), macro nesting (opts.max_depth), output bytes (opts.max_output) and arena
 * bytes; each is a clear error, so hostile templates cannot hang or exhaust memory. Errors
 * unwind through jerr with the line of the statement being run.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat/jinja_eval.h"

_Noreturn void jr_fail(struct jrender *R, nx_status st, const char *kind, const char *fmt, ...) {
    char m[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    jerr(R->e, st, kind, "%s", m);
}

_Noreturn void jr_undefined(struct jrender *R, jval u) {
    jr_fail(R, NX_STATUS_INVALID_ARG, (u.flags & JU_SECURITY) ? "security" : "undefined", "%s",
            u.u.hint ? u.u.hint : "undefined value");
}

void jr_step(struct jrender *R) {
    if (++R->steps > R->o->max_steps)
        jr_fail(R, NX_STATUS_INVALID_ARG, "limit",
                "line %d: more than %lld loop iterations and macro calls", R->line,
                (long long)R->o->max_steps);
}

static struct jscope *scope_new(struct jrender *R, struct jscope *parent) {
    struct jscope *s = jalloc(R->e, sizeof *s);
    s->parent = parent;
    s->vars = jdict_new(R->e, 0);
    return s;
}

static jval *scope_find(struct jscope *s, const char *name) {
    size_t n = strlen(name);
    for (; s; s = s->parent) {
        jval *v = jdict_get_str(s->vars, name, n);
        if (v) return v;
    }
    return NULL;
}

static void scope_set(struct jrender *R, struct jscope *s, const char *name, jval v) {
    jdict_set(R->e, s->vars, jv_str(name, strlen(name)), v);
}

static char *fmt_hint(struct jrender *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *fmt_hint(struct jrender *R, const char *fmt, ...) {
    char m[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return jstrndup(R->e, m, strlen(m));
}

static jval eval(struct jrender *R, struct jscope *S, struct jnode *n);
static void exec_body(struct jrender *R, struct jscope *S, const struct jnlist *body);

struct jlist *jr_iter(struct jrender *R, jval v) {
    switch (v.t) {
    case JV_LIST: return v.u.l;
    case JV_UNDEF: return jlist_new(R->e, 0);
    case JV_DICT: {
        struct jlist *l = jlist_new(R->e, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) jlist_push(R->e, l, v.u.d->k[i]);
        return l;
    }
    case JV_STR: {
        struct jlist *l = jlist_new(R->e, v.u.s.n);
        const char *s = v.u.s.p;
        size_t i = 0, n = v.u.s.n;
        while (i < n) {
            size_t st = i++;
            while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
            jlist_push(R->e, l, jv_str(s + st, i - st));
        }
        return l;
    }
    default:
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: '%s' object is not iterable",
                jv_type_name(v));
    }
}

bool jr_contains(struct jrender *R, jval c, jval item) {
    switch (c.t) {
    case JV_STR:
        if (item.t != JV_STR)
            jr_fail(R, NX_STATUS_INVALID_ARG, "python",
                    "TypeError: 'in <string>' requires string as left operand, not %s", jv_type_name(item));
        if (item.u.s.n == 0) return true;
        if (item.u.s.n > c.u.s.n) return false;
        for (size_t i = 0; i + item.u.s.n <= c.u.s.n; i++)
            if (memcmp(c.u.s.p + i, item.u.s.p, item.u.s.n) == 0) return true;
        return false;
    case JV_LIST:
        for (size_t i = 0; i < c.u.l->n; i++)
            if (jv_equal(c.u.l->v[i], item)) return true;
        return false;
    case JV_DICT: return jdict_get(c.u.d, item) != NULL;
    case JV_UNDEF: return false; /* Undefined iterates as empty */
    default:
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: argument of type '%s' is not iterable",
                jv_type_name(c));
    }
}

/* ---- arithmetic ---- */
static bool numeric(jval v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double fval(jval v) { return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b; }
static int64_t ival(jval v) { return v.t == JV_INT ? v.u.i : (int64_t)v.u.b; }

static const char *op_sym(int op) {
    switch (op) {
    case OP_ADD: return "+"; case OP_SUB: return "-"; case OP_MUL: return "*"; case OP_DIV: return "/";
    case OP_FLOORDIV: return "//"; case OP_MOD: return "%"; case OP_POW: return "**";
    default: return "?";
    }
}

static jval repeat(struct jrender *R, jval seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq.t == JV_STR) {
        if (seq.u.s.n && (uint64_t)k > (R->o->max_output / seq.u.s.n) + 1)
            jr_fail(R, NX_STATUS_INVALID_ARG, "limit", "line %d: string repetition too long", R->line);
        struct jbuf b = {0};
        for (int64_t i = 0; i < k; i++) jbuf_put(R->e, &b, seq.u.s.p, seq.u.s.n);
        return jbuf_val(&b);
    }
    if (seq.u.l->n && (uint64_t)k > (uint64_t)R->o->max_steps / seq.u.l->n)
        jr_fail(R, NX_STATUS_INVALID_ARG, "limit", "line %d: list repetition too long", R->line);
    struct jlist *l = jlist_new(R->e, 0);
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < seq.u.l->n; j++) jlist_push(R->e, l, seq.u.l->v[j]);
    return jv_list(l, 0);
}

static jval arith(struct jrender *R, int op, jval a, jval b) {
    if (a.t == JV_UNDEF) jr_undefined(R, a);
    if (b.t == JV_UNDEF) jr_undefined(R, b);
    if (numeric(a) && numeric(b)) {
        bool flt = a.t == JV_FLOAT || b.t == JV_FLOAT;
        if (!flt) {
            int64_t x = ival(a), y = ival(b), r;
            switch (op) {
            case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; return jv_int(r);
            case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; return jv_int(r);
            case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; return jv_int(r);
            case OP_DIV:
                if (y == 0) goto zero;
                return jv_float((double)x / (double)y);
            case OP_FLOORDIV: case OP_MOD: {
                if (y == 0) goto zero;
                if (x == INT64_MIN && y == -1) goto overflow;
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) { q--; m += y; }
                return jv_int(op == OP_MOD ? m : q);
            }
            case OP_POW: {
                if (y < 0) return jv_float(pow((double)x, (double)y));
                int64_t acc = 1;
                for (int64_t i = 0; i < y; i++) {
                    if (__builtin_mul_overflow(acc, x, &acc)) goto overflow;
                    if (acc == 0 || acc == 1) break;
                }
                return jv_int(acc);
            }
            }
        } else {
            double x = fval(a), y = fval(b);
            switch (op) {
            case OP_ADD: return jv_float(x + y);
            case OP_SUB: return jv_float(x - y);
            case OP_MUL: return jv_float(x * y);
            case OP_DIV: if (y == 0) goto zero; return jv_float(x / y);
            case OP_FLOORDIV: if (y == 0) goto zero; return jv_float(floor(x / y));
            case OP_MOD: {
                if (y == 0) goto zero;
                double m = fmod(x, y);
                if (m != 0 && ((m < 0) != (y < 0))) m += y;
                return jv_float(m);
            }
            case OP_POW: return jv_float(pow(x, y));
            }
        }
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        if ((a.flags | b.flags) & JS_SAFE) { /* Markup + str escapes the str */
            a = jv_html_escape(R->e, a);
            b = jv_html_escape(R->e, b);
        }
        struct jbuf o = {0};
        jbuf_put(R->e, &o, a.u.s.p, a.u.s.n);
        jbuf_put(R->e, &o, b.u.s.p, b.u.s.n);
        jval r = jbuf_val(&o);
        r.flags = a.flags & JS_SAFE;
        return r;
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && !((a.flags | b.flags) & JL_GEN) &&
        (a.flags & JL_TUPLE) == (b.flags & JL_TUPLE)) {
        struct jlist *l = jlist_new(R->e, a.u.l->n + b.u.l->n);
        for (size_t i = 0; i < a.u.l->n; i++) jlist_push(R->e, l, a.u.l->v[i]);
        for (size_t i = 0; i < b.u.l->n; i++) jlist_push(R->e, l, b.u.l->v[i]);
        return jv_list(l, a.flags & JL_TUPLE);
    }
    if (op == OP_MUL && (a.t == JV_STR || (a.t == JV_LIST && !(a.flags & JL_GEN))) &&
        (b.t == JV_INT || b.t == JV_BOOL))
        return repeat(R, a, ival(b));
    if (op == OP_MUL && (b.t == JV_STR || (b.t == JV_LIST && !(b.flags & JL_GEN))) &&
        (a.t == JV_INT || a.t == JV_BOOL))
        return repeat(R, b, ival(a));
    if (op == OP_MOD && a.t == JV_STR)
        jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: printf-style string formatting with %%", R->line);
    if (op == OP_ADD && a.t == JV_STR)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python",
                "TypeError: can only concatenate str (not \"%s\") to str", jv_type_name(b));
    if (op == OP_ADD && a.t == JV_LIST)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python",
                "TypeError: can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                jv_type_name(b), jv_type_name(a));
    jr_fail(R, NX_STATUS_INVALID_ARG, "python",
            "TypeError: unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
            jv_type_name(a), jv_type_name(b));
overflow:
    jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: integer result wider than 64 bits", R->line);
zero:
    jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ZeroDivisionError: %s",
            (a.t == JV_FLOAT || b.t == JV_FLOAT) ? "float division by zero"
            : op == OP_DIV ? "division by zero" : "integer division or modulo by zero");
}

static bool compare_op(struct jrender *R, int op, jval a, jval b) {
    switch (op) {
    case OP_EQ: return jv_equal(a, b);
    case OP_NE: return !jv_equal(a, b);
    case OP_IN: return jr_contains(R, b, a);
    case OP_NOTIN: return !jr_contains(R, b, a);
    case OP_LT: return jv_compare(R->e, a, b, "<") < 0;
    case OP_LE: return jv_compare(R->e, a, b, "<=") <= 0;
    case OP_GT: return jv_compare(R->e, a, b, ">") > 0;
    case OP_GE: return jv_compare(R->e, a, b, ">=") >= 0;
    default: return false;
    }
}

/* ---- slicing (Python semantics, strings by code point) ---- */
static int64_t slice_get(struct jrender *R, struct jscope *S, struct jnode *n, bool *set) {
    *set = false;
    if (!n) return 0;
    jval v = eval(R, S, n);
    if (v.t == JV_NONE || v.t == JV_UNDEF) return 0;
    if (v.t != JV_INT && v.t != JV_BOOL)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python",
                "TypeError: slice indices must be integers or None or have an __index__ method");
    *set = true;
    return ival(v);
}

static jval do_slice(struct jrender *R, struct jscope *S, jval obj, struct jnode *sl) {
    bool hs, he, hp;
    int64_t start = slice_get(R, S, sl->args.v[0], &hs);
    int64_t stop = slice_get(R, S, sl->args.v[1], &he);
    int64_t step = slice_get(R, S, sl->args.v[2], &hp);
    if (!hp) step = 1;
    if (step == 0) jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: slice step cannot be zero");
    if (obj.t == JV_UNDEF) jr_undefined(R, obj);
    bool is_str = obj.t == JV_STR;
    if (!is_str && (obj.t != JV_LIST || (obj.flags & JL_GEN)))
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: '%s' object is not subscriptable",
                jv_type_name(obj));
    int64_t len = is_str ? (int64_t)utf8_len(obj.u.s.p, obj.u.s.n) : (int64_t)obj.u.l->n;
    /* PySlice_AdjustIndices */
    if (!hs) start = step < 0 ? len - 1 : 0;
    else if (start < 0) { start += len; if (start < 0) start = step < 0 ? -1 : 0; }
    else if (start >= len) start = step < 0 ? len - 1 : len;
    if (!he) stop = step < 0 ? -1 : len;
    else if (stop < 0) { stop += len; if (stop < 0) stop = step < 0 ? -1 : 0; }
    else if (stop >= len) stop = step < 0 ? len - 1 : len;
    if (is_str) {
        struct jbuf b = {0};
        if (step == 1) {
            if (stop > start) {
                size_t o0 = utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)start);
                size_t o1 = utf8_offset(obj.u.s.p, obj.u.s.n, (size_t)stop);
                return jv_str(obj.u.s.p + o0, o1 - o0);
            }
            return jv_str("", 0);
        }
        struct jlist *chars = jr_iter(R, obj);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            jval c = chars->v[i];
            jbuf_put(R->e, &b, c.u.s.p, c.u.s.n);
        }
        return jbuf_val(&b);
    }
    struct jlist *l = jlist_new(R->e, 0);
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jlist_push(R->e, l, obj.u.l->v[i]);
    return jv_list(l, obj.flags & JL_TUPLE);
}

/* ---- calls ---- */
static void eval_args(struct jrender *R, struct jscope *S, const struct jnlist *args, struct jargs *out) {
    int np = 0, nk = 0;
    for (int i = 0; i < args->n; i++) {
        if (args->v[i]->kind == E_KWARG) nk++;
        else np++;
    }
    out->pos = np ? jalloc(R->e, (size_t)np * sizeof(jval)) : NULL;
    out->kwv = nk ? jalloc(R->e, (size_t)nk * sizeof(jval)) : NULL;
    out->kwn = nk ? jalloc(R->e, (size_t)nk * sizeof(char *)) : NULL;
    out->npos = out->nkw = 0;
    for (int i = 0; i < args->n; i++) {
        struct jnode *a = args->v[i];
        if (a->kind == E_KWARG) {
            out->kwn[out->nkw] = a->name;
            out->kwv[out->nkw++] = eval(R, S, a->a);
        } else {
            out->pos[out->npos++] = eval(R, S, a);
        }
    }
}

jval jr_call_macro(struct jrender *R, struct jfunc *fn, const struct jargs *a) {
    struct jnode *m = fn->macro;
    if (a->npos > m->args.n)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: macro '%s' takes not more than %d argument(s)",
                m->name, m->args.n);
    for (int k = 0; k < a->nkw; k++) {
        bool ok = false;
        for (int p = 0; p < m->args.n; p++)
            if (!strcmp(m->args.v[p]->name, a->kwn[k])) ok = true;
        if (!ok)
            jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: macro '%s' takes no keyword argument '%s'",
                    m->name, a->kwn[k]);
    }
    if (++R->depth > R->o->max_depth)
        jr_fail(R, NX_STATUS_INVALID_ARG, "limit", "line %d: macro calls nested deeper than %d", m->line,
                R->o->max_depth);
    jr_step(R);
    struct jscope *S = scope_new(R, fn->closure);
    for (int p = 0; p < m->args.n; p++) {
        struct jnode *par = m->args.v[p];
        const jval *v = jarg(a, p, par->name);
        jval val;
        if (v) val = *v;
        else if (par->a) val = eval(R, S, par->a);
        else val = jv_undef(fmt_hint(R, "parameter '%s' was not provided", par->name));
        scope_set(R, S, par->name, val);
    }
    struct jbuf buf = {.limit = R->o->max_output};
    struct jbuf *saved = R->out;
    int saved_line = R->line;
    R->out = &buf;
    exec_body(R, S, &m->body);
    R->out = saved;
    R->line = saved_line;
    R->brk = 0;
    R->depth--;
    return jbuf_val(&buf);
}

/* ---- expressions ---- */
static jval eval(struct jrender *R, struct jscope *S, struct jnode *n) {
    switch (n->kind) {
    case E_CONST: return n->val;
    case E_NAME: {
        jval *v = scope_find(S, n->name);
        if (v) return *v;
        jval g = jr_global(R, n->name);
        if (g.t != JV_UNDEF) return g;
        return jv_undef(fmt_hint(R, "'%s' is undefined", n->name));
    }
    case E_GETATTR: {
        jval o = eval(R, S, n->a);
        if (o.t == JV_UNDEF) jr_undefined(R, o);
        return jr_getattr(R, o, n->name, strlen(n->name));
    }
    case E_GETITEM: {
        jval o = eval(R, S, n->a);
        jval k = eval(R, S, n->b);
        if (o.t == JV_UNDEF) jr_undefined(R, o);
        return jr_getitem(R, o, k);
    }
    case E_SLICE: return do_slice(R, S, eval(R, S, n->a), n->b);
    case E_CALL: {
        jval fn = eval(R, S, n->a);
        struct jargs a;
        eval_args(R, S, &n->args, &a);
        int saved = R->line;
        R->line = n->line;
        jval r = jr_call(R, fn, &a);
        R->line = saved;
        return r;
    }
    case E_FILTER: {
        jval in = n->a->kind == E_BLOCKVAL ? R->blockval : eval(R, S, n->a);
        struct jargs a;
        eval_args(R, S, &n->args, &a);
        return jr_filter(R, n->name, in, &a);
    }
    case E_TEST: {
        jval in = eval(R, S, n->a);
        struct jargs a;
        eval_args(R, S, &n->args, &a);
        bool r = jr_test(R, n->name, in, &a);
        return jv_bool(n->flag ? !r : r);
    }
    case E_BINOP: return arith(R, n->op, eval(R, S, n->a), eval(R, S, n->b));
    case E_NEG: case E_POS: {
        jval v = eval(R, S, n->a);
        if (v.t == JV_UNDEF) jr_undefined(R, v);
        if (v.t == JV_FLOAT) return jv_float(n->kind == E_NEG ? -v.u.f : v.u.f);
        if (v.t == JV_INT || v.t == JV_BOOL) {
            int64_t i = ival(v);
            if (n->kind == E_NEG && i == INT64_MIN)
                jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "integer result wider than 64 bits");
            return jv_int(n->kind == E_NEG ? -i : i);
        }
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: bad operand type for unary %s: '%s'",
                n->kind == E_NEG ? "-" : "+", jv_type_name(v));
    }
    case E_NOT: return jv_bool(!jv_truthy(eval(R, S, n->a)));
    case E_AND: {
        jval a = eval(R, S, n->a);
        return jv_truthy(a) ? eval(R, S, n->b) : a;
    }
    case E_OR: {
        jval a = eval(R, S, n->a);
        return jv_truthy(a) ? a : eval(R, S, n->b);
    }
    case E_COND:
        if (jv_truthy(eval(R, S, n->a))) return eval(R, S, n->b);
        if (n->c) return eval(R, S, n->c);
        return jv_undef(fmt_hint(R, "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line));
    case E_COMPARE: {
        jval left = eval(R, S, n->a);
        for (int i = 0; i < n->args.n; i++) {
            jval right = eval(R, S, n->args.v[i]->a);
            if (!compare_op(R, n->args.v[i]->op, left, right)) return jv_bool(false);
            left = right;
        }
        return jv_bool(true);
    }
    case E_CONCAT: {
        struct jbuf b = {0};
        for (int i = 0; i < n->args.n; i++) jv_str_into(R->e, &b, eval(R, S, n->args.v[i]));
        return jbuf_val(&b);
    }
    case E_LIST: case E_TUPLE: {
        struct jlist *l = jlist_new(R->e, (size_t)n->args.n);
        for (int i = 0; i < n->args.n; i++) jlist_push(R->e, l, eval(R, S, n->args.v[i]));
        return jv_list(l, n->kind == E_TUPLE ? JL_TUPLE : 0);
    }
    case E_DICT: {
        struct jdict *d = jdict_new(R->e, (size_t)n->args.n);
        for (int i = 0; i < n->args.n; i++) {
            jval k = eval(R, S, n->args.v[i]->a);
            if (k.t == JV_LIST && !(k.flags & JL_TUPLE))
                jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: unhashable type: 'list'");
            if (k.t == JV_DICT)
                jr_fail(R, NX_STATUS_INVALID_ARG, "python", "TypeError: unhashable type: 'dict'");
            jdict_set(R->e, d, k, eval(R, S, n->args.v[i]->b));
        }
        return jv_dict(d);
    }
    case E_BLOCKVAL: return R->blockval;
    default:
        jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported expression", n->line);
    }
}

/* ---- statements ---- */
static void unpack(struct jrender *R, struct jscope *S, const struct jnlist *targets, jval v, bool tuple,
                   void (*assign)(struct jrender *, struct jscope *, struct jnode *, jval)) {
    if (!tuple) {
        assign(R, S, targets->v[0], v);
        return;
    }
    struct jlist *l = jr_iter(R, v);
    if ((int)l->n != targets->n)
        jr_fail(R, NX_STATUS_INVALID_ARG, "python", "ValueError: %s values to unpack (expected %d, got %zu)",
                (int)l->n > targets->n ? "too many" : "not enough", targets->n, l->n);
    for (int i = 0; i < targets->n; i++) assign(R, S, targets->v[i], l->v[i]);
}

static void assign_target(struct jrender *R, struct jscope *S, struct jnode *t, jval v) {
    if (t->kind == E_NAME) {
        scope_set(R, S, t->name, v);
        return;
    }
    /* ns.attr */
    jval *ns = scope_find(S, t->a->name);
    if (!ns || ns->t != JV_NS)
        jr_fail(R, NX_STATUS_INVALID_ARG, "template", "cannot assign attribute on non-namespace object");
    jdict_set(R->e, ns->u.d, jv_str(t->name, strlen(t->name)), v);
}

static void exec_for(struct jrender *R, struct jscope *S, struct jnode *n) {
    jval it = eval(R, S, n->a);
    struct jlist *items = jr_iter(R, it);
    struct jscope *L = scope_new(R, S);
    if (n->b) { /* for x in y if cond: filter first, loop.* counts the kept items */
        struct jlist *kept = jlist_new(R->e, 0);
        for (size_t i = 0; i < items->n; i++) {
            jr_step(R);
            unpack(R, L, &n->args, items->v[i], n->flag, assign_target);
            if (jv_truthy(eval(R, L, n->b))) jlist_push(R->e, kept, items->v[i]);
        }
        items = kept;
    }
    if (items->n == 0) {
        exec_body(R, S, &n->else_body);
        return;
    }
    struct jloop *lp = jalloc(R->e, sizeof *lp);
    lp->items = items;
    jval *outer = scope_find(S, "loop");
    lp->depth = (outer && outer->t == JV_LOOP) ? outer->u.loop->depth + 1 : 1;
    jval lv = {.t = JV_LOOP};
    lv.u.loop = lp;
    for (size_t i = 0; i < items->n; i++) {
        jr_step(R);
        lp->idx = i;
        scope_set(R, L, "loop", lv);
        unpack(R, L, &n->args, items->v[i], n->flag, assign_target);
        exec_body(R, L, &n->body);
        if (R->brk == 1) { R->brk = 0; break; }
        R->brk = 0;
    }
}

static void exec_node(struct jrender *R, struct jscope *S, struct jnode *n) {
    R->line = n->line;
    switch (n->kind) {
    case N_TEXT: jbuf_put(R->e, R->out, n->val.u.s.p, n->val.u.s.n); return;
    case N_OUTPUT: jv_str_into(R->e, R->out, eval(R, S, n->a)); return;
    case N_IF:
        if (jv_truthy(eval(R, S, n->a))) exec_body(R, S, &n->body);
        else exec_body(R, S, &n->else_body);
        return;
    case N_FOR: exec_for(R, S, n); return;
    case N_SET: unpack(R, S, &n->args, eval(R, S, n->a), n->flag, assign_target); return;
    case N_SETBLOCK: case N_FILTERBLOCK: {
        struct jbuf buf = {.limit = R->o->max_output};
        struct jbuf *saved = R->out;
        R->out = &buf;
        exec_body(R, S, &n->body);
        R->out = saved;
        jval v = jbuf_val(&buf);
        if (n->a) {
            jval sb = R->blockval;
            R->blockval = v;
            v = eval(R, S, n->a);
            R->blockval = sb;
        }
        if (n->kind == N_SETBLOCK) assign_target(R, S, n->args.v[0], v);
        else jv_str_into(R->e, R->out, v);
        return;
    }
    case N_MACRO: {
        struct jfunc *fn = jalloc(R->e, sizeof *fn);
        fn->kind = JF_MACRO;
        fn->name = n->name;
        fn->macro = n;
        fn->closure = S;
        jval v = {.t = JV_FUNC};
        v.u.fn = fn;
        scope_set(R, S, n->name, v);
        return;
    }
    case N_BLOCK: exec_body(R, S, &n->body); return;
    case N_BREAK: R->brk = 1; return;
    case N_CONTINUE: R->brk = 2; return;
    default: jr_fail(R, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported statement", n->line);
    }
}

static void exec_body(struct jrender *R, struct jscope *S, const struct jnlist *body) {
    for (int i = 0; i < body->n && !R->brk; i++) exec_node(R, S, body->v[i]);
}

void jinja_render_ast(struct jerr_ctx *e, const struct jtemplate_ast *ast, const struct jrender_opts *o,
                      struct jbuf *out) {
    struct jrender R = {.e = e, .o = o, .out = out};
    R.root = jalloc(e, sizeof *R.root);
    R.root->vars = o->globals;
    out->limit = o->max_output;
    struct jscope *top = scope_new(&R, R.root);
    exec_body(&R, top, &ast->root->body);
}
