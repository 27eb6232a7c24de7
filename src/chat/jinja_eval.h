/* jinja_eval.h - evaluator state shared by jinja_eval.c (statements, expressions) and
 * jinja_builtins.c (filters, tests, methods, global functions). Internal to src/chat. */
#ifndef NX_CHAT_JINJA_EVAL_H
#define NX_CHAT_JINJA_EVAL_H

#include "chat/jinja.h"

struct jscope {
    struct jscope *parent;
    struct jdict *vars;
};

struct jrender {
    struct jerr_ctx *e;
    const struct jrender_opts *o;
    struct jscope *root;
    struct jbuf *out;
    int64_t steps;
    int depth;
    int brk;       /* 1 break, 2 continue pending */
    jval blockval; /* body of the innermost filter block / block set */
    int line;      /* line of the statement being run, for messages */
};

/* evaluated call arguments */
struct jargs {
    jval *pos;
    int npos;
    const char **kwn;
    jval *kwv;
    int nkw;
};

_Noreturn void jr_fail(struct jrender *R, nx_status st, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
_Noreturn void jr_undefined(struct jrender *R, jval u);
void jr_step(struct jrender *R);

/* argument i (positional) or keyword name; NULL when absent */
const jval *jarg(const struct jargs *a, int i, const char *name);
jval jarg_or(const struct jargs *a, int i, const char *name, jval dflt);

jval jr_filter(struct jrender *R, const char *name, jval in, const struct jargs *a);
bool jr_test(struct jrender *R, const char *name, jval in, const struct jargs *a);
/* attribute lookup that yields methods: dict.items, str.strip ... or JV_UNDEF (hint set) */
jval jr_getattr(struct jrender *R, jval obj, const char *name, size_t n);
jval jr_getitem(struct jrender *R, jval obj, jval key);
jval jr_call(struct jrender *R, jval fn, const struct jargs *a);
jval jr_global(struct jrender *R, const char *name); /* builtin global function or JV_UNDEF */
jval jr_call_macro(struct jrender *R, struct jfunc *fn, const struct jargs *a);
/* list(v) for iteration: list items, dict keys, string characters; errors as Python */
struct jlist *jr_iter(struct jrender *R, jval v);
bool jr_contains(struct jrender *R, jval container, jval item);

#endif
