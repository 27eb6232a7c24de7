/*
 * jinja.h - internal interface of the Jinja interpreter (src/chat/jinja_*.c): values, the
 * arena they live in, the syntax tree, and the parse / render entry points.
 *
 * Everything a parse or a render allocates comes from one arena (struct jarena) that is freed
 * at once at the end; values are never freed one by one and never reference-counted. Errors
 * unwind with longjmp to the entry point (jinja_parse / jinja_render), which frees the arena
 * and returns the status with a message naming the construct and its line. No code between an
 * entry point and a jerr_* call may hold memory outside the arena.
 */
#ifndef NX_CHAT_JINJA_H
#define NX_CHAT_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

/* ---- arena ---- */
struct jchunk;
struct jarena {
    struct jchunk *head;
    size_t used, limit; /* bytes handed out from nx_malloc, and the cap (0: none) */
};
void jarena_free(struct jarena *a);

/* The state an error unwinds through: shared by the parser and the evaluator. */
struct jerr_ctx {
    jmp_buf jmp;
    struct jarena *arena;
    nx_status st;
    char kind[16];   /* "syntax", "unsupported", "raise", "undefined", "security", "python",
                        "limit", "nomem" */
    char msg[512];
};
void *jalloc(struct jerr_ctx *e, size_t n); /* zeroed; unwinds with NOMEM / limit */
char *jstrndup(struct jerr_ctx *e, const char *s, size_t n);
_Noreturn void jerr(struct jerr_ctx *e, nx_status st, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- values ---- */
enum jtype {
    JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT,
    JV_FUNC, JV_NS, JV_LOOP
};
#define JL_TUPLE 1u /* list flag: a tuple (repr with parentheses) */
#define JL_GEN 2u   /* list flag: a lazy generator in Python (map/select...): no len, no json */
#define JS_SAFE 1u     /* string flag: a jinja2 Markup (|safe): `+` HTML-escapes the other operand */
#define JU_SECURITY 1u /* undefined flag: jinja2's sandbox refused the attribute (SecurityError) */

struct jlist;
struct jdict;
struct jfunc;
struct jloop;
typedef struct jval {
    uint8_t t;
    uint8_t flags;
    union {
        bool b;
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s; /* UTF-8, not necessarily NUL-terminated */
        struct jlist *l;
        struct jdict *d; /* JV_DICT and JV_NS */
        struct jfunc *fn;
        struct jloop *loop;
        const char *hint; /* JV_UNDEF: the UndefinedError message, or NULL */
    } u;
} jval;

struct jlist { jval *v; size_t n, cap; };
struct jdict { jval *k, *v; size_t n, cap; };

struct jnode;
struct jscope;
enum jfunc_kind { JF_BUILTIN, JF_METHOD, JF_MACRO };
struct jfunc {
    int kind;
    int id;               /* builtin or method id */
    const char *name;     /* for messages */
    jval self;            /* JF_METHOD: the receiver */
    struct jnode *macro;  /* JF_MACRO */
    struct jscope *closure;
};
struct jloop {
    struct jlist *items;
    size_t idx;
    int depth;
};

static inline jval jv_undef(const char *hint) { jval v = {.t = JV_UNDEF}; v.u.hint = hint; return v; }
static inline jval jv_none(void) { jval v = {.t = JV_NONE}; return v; }
static inline jval jv_bool(bool b) { jval v = {.t = JV_BOOL}; v.u.b = b; return v; }
static inline jval jv_int(int64_t i) { jval v = {.t = JV_INT}; v.u.i = i; return v; }
static inline jval jv_float(double f) { jval v = {.t = JV_FLOAT}; v.u.f = f; return v; }
static inline jval jv_str(const char *p, size_t n) { jval v = {.t = JV_STR}; v.u.s.p = p; v.u.s.n = n; return v; }

/* growable byte buffer in the arena */
struct jbuf { char *p; size_t n, cap, limit; };
void jbuf_put(struct jerr_ctx *e, struct jbuf *b, const char *s, size_t n);
void jbuf_puts(struct jerr_ctx *e, struct jbuf *b, const char *s);
void jbuf_putc(struct jerr_ctx *e, struct jbuf *b, char c);
jval jbuf_val(struct jbuf *b);

struct jlist *jlist_new(struct jerr_ctx *e, size_t cap);
void jlist_push(struct jerr_ctx *e, struct jlist *l, jval v);
jval jv_list(struct jlist *l, unsigned flags);
struct jdict *jdict_new(struct jerr_ctx *e, size_t cap);
jval *jdict_get(struct jdict *d, jval k);
jval *jdict_get_str(struct jdict *d, const char *k, size_t n);
void jdict_set(struct jerr_ctx *e, struct jdict *d, jval k, jval v);
jval jv_dict(struct jdict *d);

bool jv_truthy(jval v);
bool jv_equal(jval a, jval b);
/* <0, 0, >0; unwinds with a Python TypeError for unorderable types */
int jv_compare(struct jerr_ctx *e, jval a, jval b, const char *op);
const char *jv_type_name(jval v); /* Python's type name: "str", "dict", "NoneType" ... */
/* str(v) and repr(v), as Python writes them */
void jv_str_into(struct jerr_ctx *e, struct jbuf *b, jval v);
void jv_repr_into(struct jerr_ctx *e, struct jbuf *b, jval v);
jval jv_to_str(struct jerr_ctx *e, jval v);
void py_float_repr(double d, char out[32]);
/* json.dumps(v, ensure_ascii, indent (NULL: none), separators, sort_keys) */
struct jjson_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: no newlines */
    const char *item_sep, *key_sep;
};
void jv_json_into(struct jerr_ctx *e, struct jbuf *b, jval v, const struct jjson_opts *o, int depth);
/* code points in a UTF-8 string; byte offset of code point i (clamped) */
/* jinja2's escape(): & < > " ' as HTML entities; the result is JS_SAFE */
jval jv_html_escape(struct jerr_ctx *e, jval s);
size_t utf8_len(const char *s, size_t n);
size_t utf8_offset(const char *s, size_t n, size_t cp);

/* ---- syntax tree ---- */
enum jnode_kind {
    /* statements */
    N_TEXT, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_FILTERBLOCK, N_BREAK,
    N_CONTINUE, N_BLOCK, /* N_BLOCK: a body rendered as is ({% generation %}) */
    /* expressions */
    E_CONST, E_NAME, E_GETATTR, E_GETITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BINOP, E_NEG,
    E_POS, E_NOT, E_AND, E_OR, E_COND, E_COMPARE, E_CMPOP, E_CONCAT, E_LIST, E_TUPLE, E_DICT,
    E_PAIR, E_KWARG, E_BLOCKVAL /* the captured body of a filter block / block set */
};
enum jop {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN
};
struct jnlist { struct jnode **v; int n, cap; };
struct jnode {
    uint16_t kind, op;
    int line;
    jval val;                 /* E_CONST */
    const char *name;         /* NUL-terminated: names, attributes, filters, tests, macros */
    struct jnode *a, *b, *c;  /* operands; N_FOR: a iter, b filter; N_IF: a cond */
    struct jnlist args;       /* call args / items / targets / compare ops / macro params */
    struct jnlist body, else_body;
    bool flag;                /* E_TEST: negated; N_FOR: has targets tuple */
};
void jnlist_push(struct jerr_ctx *e, struct jnlist *l, struct jnode *n);

/* Parse normalized template source (newlines \n, trailing newline removed) into *root. */
struct jtemplate_ast {
    struct jnode *root; /* N_BLOCK */
};
/* Both unwind through e on error. */
void jinja_parse_src(struct jerr_ctx *e, const char *src, size_t n, struct jtemplate_ast *out);

/* ---- rendering ---- */
struct jrender_opts {
    struct jdict *globals; /* messages, tools, add_generation_prompt, tokens ... */
    int64_t now;           /* strftime_now's time, seconds since the epoch (UTC) */
    size_t max_output;     /* bytes */
    int64_t max_steps;     /* loop iterations + macro calls */
    int max_depth;         /* macro call nesting */
};
/* Renders ast into out (arena buffer); unwinds through e. */
void jinja_render_ast(struct jerr_ctx *e, const struct jtemplate_ast *ast,
                      const struct jrender_opts *o, struct jbuf *out);

#endif
