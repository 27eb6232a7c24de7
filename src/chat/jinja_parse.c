/*
 * jinja_parse.c - lexer and parser of the Jinja subset chat templates use, into a syntax tree.
 *
 * DESIGN. The lexer follows jinja2's lexer with the settings Hugging Face uses
 * (trim_blocks=True, lstrip_blocks=True): text between tags, `{{ }}` / `{% %}` / `{# #}` with
 * the `-` and `+` whitespace modifiers, bracket balancing inside tags (so `}}` inside a dict
 * literal does not end a tag), and line numbers for messages. The parser is a recursive descent
 * over jinja2's grammar with its operator precedence (condexpr < or < and < not < compare < + -
 * < ~ < * / // % < ** < unary - < postfix . [] () < | filter, is test). Statements: if / elif /
 * else, for (targets, `if` filter, else), set (targets, namespace attributes, block set with
 * filters), macro, filter blocks, generation blocks, break / continue. Anything else (call,
 * include, raw, recursive loops...) is refused with an error naming it and its line. All nodes
 * live in the caller's arena; errors unwind through jerr. Expression nesting is capped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

enum tok_type { T_END, T_NAME, T_INT, T_FLOAT, T_STR, T_OP };
struct tok {
    int type;
    int line;
    const char *p; /* T_NAME/T_OP: source text; T_STR: unescaped (arena) */
    size_t n;
    int64_t i;
    double f;
};
struct tokv { struct tok *v; int n, cap; };

enum chunk_type { C_TEXT, C_VAR, C_BLOCK };
struct chunk {
    int type, line;
    const char *p; /* text */
    size_t n;
    struct tokv toks; /* C_VAR / C_BLOCK, ending with T_END */
};

struct parser {
    struct jerr_ctx *e;
    const char *src;
    size_t n;
    struct chunk *chunks;
    int nchunks, cap;
    int ci;            /* current chunk */
    struct tok *t;     /* current tag's tokens */
    int ti;
    int depth;
    int stmt_depth;
};

#define MAX_EXPR_DEPTH 200
#define MAX_STMT_DEPTH 200

static _Noreturn void syntax(struct parser *P, int line, const char *fmt, const char *a) {
    char m[300];
    snprintf(m, sizeof m, fmt, a);
    jerr(P->e, NX_STATUS_FORMAT, "syntax", "line %d: %s", line, m);
}
static _Noreturn void unsupported(struct parser *P, int line, const char *what) {
    jerr(P->e, NX_STATUS_UNSUPPORTED, "unsupported", "line %d: unsupported construct: %s", line,
         what);
}

static int line_at(struct parser *P, size_t pos, size_t *cache_pos, int *cache_line) {
    for (size_t i = *cache_pos; i < pos && i < P->n; i++)
        if (P->src[i] == '\n') (*cache_line)++;
    *cache_pos = pos;
    return *cache_line;
}

static void push_chunk(struct parser *P, struct chunk c) {
    if (P->nchunks == P->cap) {
        int cap = P->cap ? P->cap * 2 : 64;
        struct chunk *nc = jalloc(P->e, (size_t)cap * sizeof *nc);
        if (P->nchunks) memcpy(nc, P->chunks, (size_t)P->nchunks * sizeof *nc);
        P->chunks = nc;
        P->cap = cap;
    }
    P->chunks[P->nchunks++] = c;
}
static void push_tok(struct parser *P, struct tokv *tv, struct tok t) {
    if (tv->n == tv->cap) {
        int cap = tv->cap ? tv->cap * 2 : 16;
        struct tok *nt = jalloc(P->e, (size_t)cap * sizeof *nt);
        if (tv->n) memcpy(nt, tv->v, (size_t)tv->n * sizeof *nt);
        tv->v = nt;
        tv->cap = cap;
    }
    tv->v[tv->n++] = t;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
static void put_utf8(struct jerr_ctx *e, struct jbuf *b, uint32_t c) {
    char u[4];
    int n;
    if (c < 0x80) { u[0] = (char)c; n = 1; }
    else if (c < 0x800) { u[0] = (char)(0xC0 | (c >> 6)); u[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
    else if (c < 0x10000) {
        u[0] = (char)(0xE0 | (c >> 12)); u[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        u[2] = (char)(0x80 | (c & 0x3F)); n = 3;
    } else {
        u[0] = (char)(0xF0 | (c >> 18)); u[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        u[2] = (char)(0x80 | ((c >> 6) & 0x3F)); u[3] = (char)(0x80 | (c & 0x3F)); n = 4;
    }
    jbuf_put(e, b, u, (size_t)n);
}

/* Lex a string literal at src[*pos] (a quote); unescapes Python-style. */
static struct tok lex_string(struct parser *P, size_t *pos, int line) {
    char q = P->src[*pos];
    size_t i = *pos + 1;
    struct jbuf b = {0};
    while (i < P->n && P->src[i] != q) {
        char c = P->src[i];
        if (c == '\\' && i + 1 < P->n) {
            char d = P->src[i + 1];
            i += 2;
            switch (d) {
            case 'n': jbuf_putc(P->e, &b, '\n'); break;
            case 't': jbuf_putc(P->e, &b, '\t'); break;
            case 'r': jbuf_putc(P->e, &b, '\r'); break;
            case '0': jbuf_putc(P->e, &b, '\0'); break;
            case 'a': jbuf_putc(P->e, &b, '\a'); break;
            case 'b': jbuf_putc(P->e, &b, '\b'); break;
            case 'f': jbuf_putc(P->e, &b, '\f'); break;
            case 'v': jbuf_putc(P->e, &b, '\v'); break;
            case '\\': case '\'': case '"': jbuf_putc(P->e, &b, d); break;
            case '\n': break;
            case 'x': case 'u': case 'U': {
                int nd = d == 'x' ? 2 : d == 'u' ? 4 : 8;
                uint32_t v = 0;
                for (int k = 0; k < nd; k++) {
                    int h = i + (size_t)k < P->n ? hexval(P->src[i + (size_t)k]) : -1;
                    if (h < 0) syntax(P, line, "bad \\%s escape in a string literal", d == 'x' ? "x" : "u");
                    v = v * 16 + (uint32_t)h;
                }
                i += (size_t)nd;
                put_utf8(P->e, &b, v);
                break;
            }
            default:
                jbuf_putc(P->e, &b, '\\');
                jbuf_putc(P->e, &b, d);
            }
            continue;
        }
        jbuf_putc(P->e, &b, c);
        i++;
    }
    if (i >= P->n) syntax(P, line, "unterminated string literal%s", "");
    *pos = i + 1;
    struct tok t = {.type = T_STR, .line = line, .p = b.p ? b.p : "", .n = b.n};
    return t;
}

/* Lex the inside of a tag from *pos to its end marker ("}}" or "%}") at bracket depth 0.
 * Sets *strip ('-', '+' or 0) for the end modifier; *pos after the marker. */
static void lex_tag(struct parser *P, size_t *pos, bool var, struct tokv *tv, int *line,
                    size_t *lpos, char *strip) {
    int bal = 0;
    size_t i = *pos;
    const char endc = var ? '}' : '%';
    for (;;) {
        while (i < P->n && is_space(P->src[i])) i++;
        if (i >= P->n) syntax(P, *line, "unexpected end of template inside a %s", var ? "{{ }} tag" : "{% %} tag");
        int ln = line_at(P, i, lpos, line);
        char c = P->src[i];
        /* end marker */
        if (bal == 0) {
            if ((c == '-' || c == '+') && i + 2 < P->n + 1 && i + 2 <= P->n &&
                P->src[i + 1] == endc && i + 2 < P->n + 1 && P->src[i + 2] == '}') {
                *strip = c;
                *pos = i + 3;
                break;
            }
            if (c == endc && i + 1 < P->n && P->src[i + 1] == '}') {
                *strip = 0;
                *pos = i + 2;
                break;
            }
        }
        struct tok t = {.line = ln};
        if (is_name0(c)) {
            size_t s = i;
            while (i < P->n && (is_name0(P->src[i]) || is_digit(P->src[i]))) i++;
            t.type = T_NAME;
            t.p = P->src + s;
            t.n = i - s;
        } else if (is_digit(c)) {
            size_t s = i;
            bool flt = false;
            while (i < P->n && (is_digit(P->src[i]) || P->src[i] == '_')) i++;
            if (i + 1 < P->n && P->src[i] == '.' && is_digit(P->src[i + 1])) {
                flt = true;
                i++;
                while (i < P->n && (is_digit(P->src[i]) || P->src[i] == '_')) i++;
            }
            if (i < P->n && (P->src[i] == 'e' || P->src[i] == 'E')) {
                size_t k = i + 1;
                if (k < P->n && (P->src[k] == '+' || P->src[k] == '-')) k++;
                if (k < P->n && is_digit(P->src[k])) {
                    flt = true;
                    i = k;
                    while (i < P->n && is_digit(P->src[i])) i++;
                }
            }
            char num[64];
            size_t nn = 0;
            for (size_t k = s; k < i && nn < sizeof num - 1; k++)
                if (P->src[k] != '_') num[nn++] = P->src[k];
            num[nn] = 0;
            if (flt) {
                t.type = T_FLOAT;
                t.f = strtod(num, NULL);
            } else {
                t.type = T_INT;
                char *end;
                t.i = strtoll(num, &end, 10);
                if (nn > 18) unsupported(P, ln, "integer literal wider than 64 bits");
            }
        } else if (c == '\'' || c == '"') {
            t = lex_string(P, &i, ln);
        } else {
            static const char *ops2[] = {"//", "**", "==", "!=", "<=", ">="};
            t.type = T_OP;
            t.p = P->src + i;
            t.n = 1;
            for (size_t k = 0; k < NX_ARRAY_LEN(ops2); k++)
                if (i + 1 < P->n && P->src[i] == ops2[k][0] && P->src[i + 1] == ops2[k][1]) t.n = 2;
            if (t.n == 1 && !strchr("+-*/%~<>=.,:|()[]{}", c)) {
                char m[8] = {c, 0};
                syntax(P, ln, "unexpected character '%s'", m);
            }
            if (c == '(' || c == '[' || c == '{') bal++;
            if (c == ')' || c == ']' || c == '}') {
                if (bal == 0) {
                    char m[8] = {c, 0};
                    syntax(P, ln, "unexpected '%s'", m);
                }
                bal--;
            }
            i += t.n;
        }
        push_tok(P, tv, t);
    }
    struct tok end = {.type = T_END, .line = *line};
    push_tok(P, tv, end);
}

static void lex_all(struct parser *P) {
    size_t pos = 0, lpos = 0;
    int line = 1;
    bool line_starting = true;
    while (pos < P->n) {
        /* find the next tag start */
        size_t k = pos;
        int kind = -1; /* 0 var, 1 block, 2 comment */
        for (; k + 1 < P->n; k++) {
            if (P->src[k] != '{') continue;
            char d = P->src[k + 1];
            if (d == '{') { kind = 0; break; }
            if (d == '%') { kind = 1; break; }
            if (d == '#') { kind = 2; break; }
        }
        if (kind < 0) k = P->n;
        const char *text = P->src + pos;
        size_t tn = k - pos;
        char sign = 0;
        if (kind >= 0 && k + 2 < P->n && (P->src[k + 2] == '-' || P->src[k + 2] == '+'))
            sign = P->src[k + 2];
        if (kind >= 0) {
            if (sign == '-') {
                while (tn && is_space(text[tn - 1])) tn--;
            } else if (sign != '+' && kind != 0) {
                size_t l = tn;
                while (l && text[l - 1] != '\n') l--;
                if ((l > 0 || line_starting) && l < tn) {
                    bool ws = true;
                    for (size_t q = l; q < tn; q++)
                        if (!is_space(text[q])) { ws = false; break; }
                    if (ws) tn = l;
                }
            }
        }
        if (tn) {
            struct chunk c = {.type = C_TEXT, .line = line_at(P, pos, &lpos, &line), .p = text, .n = tn};
            push_chunk(P, c);
        }
        if (kind < 0) break;
        int tag_line = line_at(P, k, &lpos, &line);
        size_t inner = k + 2 + (sign ? 1 : 0);
        char estrip = 0;
        if (kind == 2) {
            size_t q = inner;
            while (q + 1 < P->n && !(P->src[q] == '#' && P->src[q + 1] == '}')) q++;
            if (q + 1 >= P->n) syntax(P, tag_line, "unterminated comment%s", "");
            if (q > inner && (P->src[q - 1] == '-' || P->src[q - 1] == '+')) estrip = P->src[q - 1];
            pos = q + 2;
        } else {
            struct chunk c = {.type = kind == 0 ? C_VAR : C_BLOCK, .line = tag_line};
            size_t q = inner;
            lex_tag(P, &q, kind == 0, &c.toks, &line, &lpos, &estrip);
            pos = q;
            /* {% raw %} changes lexing: refuse it here */
            if (kind == 1 && c.toks.n > 0 && c.toks.v[0].type == T_NAME && c.toks.v[0].n == 3 &&
                memcmp(c.toks.v[0].p, "raw", 3) == 0)
                unsupported(P, tag_line, "the 'raw' tag");
            push_chunk(P, c);
        }
        size_t end_before = pos;
        if (estrip == '-') {
            while (pos < P->n && is_space(P->src[pos])) pos++;
        } else if (estrip != '+' && kind != 0) {
            if (pos < P->n && P->src[pos] == '\n') pos++;
        }
        if (pos > end_before) line_starting = P->src[pos - 1] == '\n';
        else line_starting = false;
    }
}

/* ---- parser helpers ---- */
static struct jnode *node(struct parser *P, int kind, int line) {
    struct jnode *n = jalloc(P->e, sizeof *n);
    n->kind = (uint16_t)kind;
    n->line = line;
    return n;
}
void jnlist_push(struct jerr_ctx *e, struct jnlist *l, struct jnode *n) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 4;
        struct jnode **nv = jalloc(e, (size_t)cap * sizeof *nv);
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = n;
}

static struct tok *cur(struct parser *P) { return &P->t[P->ti]; }
static struct tok *peek(struct parser *P, int k) {
    int i = P->ti;
    for (int j = 0; j < k && P->t[i].type != T_END; j++) i++;
    return &P->t[i];
}
static bool tok_is_op(struct tok *t, const char *op) {
    return t->type == T_OP && t->n == strlen(op) && memcmp(t->p, op, t->n) == 0;
}
static bool tok_is_name(struct tok *t, const char *name) {
    return t->type == T_NAME && t->n == strlen(name) && memcmp(t->p, name, t->n) == 0;
}
static bool skip_op(struct parser *P, const char *op) {
    if (tok_is_op(cur(P), op)) { P->ti++; return true; }
    return false;
}
static bool skip_name(struct parser *P, const char *name) {
    if (tok_is_name(cur(P), name)) { P->ti++; return true; }
    return false;
}
static const char *tok_desc(struct parser *P, struct tok *t) {
    if (t->type == T_END) return "end of tag";
    if (t->type == T_STR) return "string";
    if (t->type == T_INT || t->type == T_FLOAT) return "number";
    return jstrndup(P->e, t->p, t->n);
}
static void expect_op(struct parser *P, const char *op) {
    if (!skip_op(P, op)) {
        char m[200];
        snprintf(m, sizeof m, "expected '%s', got '%s'", op, tok_desc(P, cur(P)));
        syntax(P, cur(P)->line, "%s", m);
    }
}
static const char *expect_name(struct parser *P) {
    struct tok *t = cur(P);
    if (t->type != T_NAME) syntax(P, t->line, "expected a name, got '%s'", tok_desc(P, t));
    P->ti++;
    return jstrndup(P->e, t->p, t->n);
}
static void expect_end(struct parser *P) {
    if (cur(P)->type != T_END)
        syntax(P, cur(P)->line, "expected end of tag, got '%s'", tok_desc(P, cur(P)));
}

static struct jnode *parse_expr(struct parser *P, bool condexpr);
static struct jnode *parse_unary(struct parser *P, bool with_filter);
static struct jnode *parse_or(struct parser *P);

static void enter(struct parser *P) {
    if (++P->depth > MAX_EXPR_DEPTH)
        jerr(P->e, NX_STATUS_INVALID_ARG, "limit", "line %d: expression nested too deeply", cur(P)->line);
}

static void parse_call_args(struct parser *P, struct jnlist *args) {
    expect_op(P, "(");
    while (!tok_is_op(cur(P), ")")) {
        if (args->n) expect_op(P, ",");
        if (tok_is_op(cur(P), ")")) break; /* trailing comma */
        if (tok_is_op(cur(P), "*") || tok_is_op(cur(P), "**")) unsupported(P, cur(P)->line, "*args / **kwargs in a call");
        if (cur(P)->type == T_NAME && tok_is_op(peek(P, 1), "=")) {
            struct jnode *kw = node(P, E_KWARG, cur(P)->line);
            kw->name = expect_name(P);
            P->ti++;
            kw->a = parse_expr(P, true);
            jnlist_push(P->e, args, kw);
        } else {
            jnlist_push(P->e, args, parse_expr(P, true));
        }
    }
    expect_op(P, ")");
}

static struct jnode *parse_primary(struct parser *P) {
    struct tok *t = cur(P);
    struct jnode *n;
    enter(P);
    switch (t->type) {
    case T_NAME: {
        P->ti++;
        n = node(P, E_CONST, t->line);
        if ((t->n == 4 && (!memcmp(t->p, "true", 4) || !memcmp(t->p, "True", 4)))) n->val = jv_bool(true);
        else if (t->n == 5 && (!memcmp(t->p, "false", 5) || !memcmp(t->p, "False", 5))) n->val = jv_bool(false);
        else if (t->n == 4 && (!memcmp(t->p, "none", 4) || !memcmp(t->p, "None", 4))) n->val = jv_none();
        else {
            n->kind = E_NAME;
            n->name = jstrndup(P->e, t->p, t->n);
        }
        break;
    }
    case T_STR: {
        struct jbuf b = {0};
        while (cur(P)->type == T_STR) { /* adjacent literals concatenate */
            jbuf_put(P->e, &b, cur(P)->p, cur(P)->n);
            P->ti++;
        }
        n = node(P, E_CONST, t->line);
        n->val = jbuf_val(&b);
        break;
    }
    case T_INT: P->ti++; n = node(P, E_CONST, t->line); n->val = jv_int(t->i); break;
    case T_FLOAT: P->ti++; n = node(P, E_CONST, t->line); n->val = jv_float(t->f); break;
    case T_OP:
        if (skip_op(P, "(")) {
            if (skip_op(P, ")")) {
                n = node(P, E_TUPLE, t->line);
                break;
            }
            struct jnode *first = parse_expr(P, true);
            if (tok_is_op(cur(P), ",")) {
                n = node(P, E_TUPLE, t->line);
                jnlist_push(P->e, &n->args, first);
                while (skip_op(P, ",")) {
                    if (tok_is_op(cur(P), ")")) break;
                    jnlist_push(P->e, &n->args, parse_expr(P, true));
                }
            } else n = first;
            expect_op(P, ")");
            break;
        }
        if (skip_op(P, "[")) {
            n = node(P, E_LIST, t->line);
            while (!tok_is_op(cur(P), "]")) {
                if (n->args.n) expect_op(P, ",");
                if (tok_is_op(cur(P), "]")) break;
                jnlist_push(P->e, &n->args, parse_expr(P, true));
            }
            expect_op(P, "]");
            break;
        }
        if (skip_op(P, "{")) {
            n = node(P, E_DICT, t->line);
            while (!tok_is_op(cur(P), "}")) {
                if (n->args.n) expect_op(P, ",");
                if (tok_is_op(cur(P), "}")) break;
                struct jnode *pr = node(P, E_PAIR, cur(P)->line);
                pr->a = parse_expr(P, true);
                expect_op(P, ":");
                pr->b = parse_expr(P, true);
                jnlist_push(P->e, &n->args, pr);
            }
            expect_op(P, "}");
            break;
        }
        /* fallthrough */
    default:
        syntax(P, t->line, "unexpected '%s'", tok_desc(P, t));
    }
    P->depth--;
    return n;
}

static struct jnode *parse_subscript(struct parser *P, struct jnode *obj) {
    struct tok *t = cur(P);
    if (skip_op(P, ".")) {
        struct tok *a = cur(P);
        if (a->type == T_NAME) {
            struct jnode *n = node(P, E_GETATTR, t->line);
            n->a = obj;
            n->name = expect_name(P);
            return n;
        }
        if (a->type == T_INT) {
            P->ti++;
            struct jnode *n = node(P, E_GETITEM, t->line), *k = node(P, E_CONST, t->line);
            k->val = jv_int(a->i);
            n->a = obj;
            n->b = k;
            return n;
        }
        syntax(P, t->line, "expected a name after '.', got '%s'", tok_desc(P, a));
    }
    expect_op(P, "[");
    struct jnode *parts[3] = {NULL, NULL, NULL};
    bool slice = false;
    int idx = 0;
    for (;;) {
        if (tok_is_op(cur(P), "]")) break;
        if (skip_op(P, ":")) {
            slice = true;
            if (++idx > 2) syntax(P, t->line, "too many ':' in a slice%s", "");
            continue;
        }
        if (parts[idx]) syntax(P, cur(P)->line, "unexpected '%s' in a subscript", tok_desc(P, cur(P)));
        parts[idx] = parse_expr(P, true);
        if (tok_is_op(cur(P), ",")) unsupported(P, t->line, "tuple subscript");
    }
    expect_op(P, "]");
    struct jnode *n;
    if (slice) {
        n = node(P, E_SLICE, t->line);
        n->a = obj;
        struct jnode *s = node(P, E_LIST, t->line);
        for (int k = 0; k < 3; k++) jnlist_push(P->e, &s->args, parts[k]);
        n->b = s;
    } else {
        if (!parts[0]) syntax(P, t->line, "empty subscript%s", "");
        n = node(P, E_GETITEM, t->line);
        n->a = obj;
        n->b = parts[0];
    }
    return n;
}

static struct jnode *parse_postfix(struct parser *P, struct jnode *n) {
    for (;;) {
        struct tok *t = cur(P);
        if (tok_is_op(t, ".") || tok_is_op(t, "[")) n = parse_subscript(P, n);
        else if (tok_is_op(t, "(")) {
            struct jnode *c = node(P, E_CALL, t->line);
            c->a = n;
            parse_call_args(P, &c->args);
            n = c;
        } else break;
    }
    return n;
}

static const char *dotted_name(struct parser *P) {
    const char *nm = expect_name(P);
    while (tok_is_op(cur(P), ".") && peek(P, 1)->type == T_NAME) {
        P->ti++;
        const char *more = expect_name(P);
        size_t a = strlen(nm), b = strlen(more);
        char *j = jalloc(P->e, a + b + 2);
        memcpy(j, nm, a);
        j[a] = '.';
        memcpy(j + a + 1, more, b + 1);
        nm = j;
    }
    return nm;
}

static struct jnode *parse_filter(struct parser *P, struct jnode *input) {
    struct jnode *f = node(P, E_FILTER, cur(P)->line);
    f->name = dotted_name(P);
    f->a = input;
    if (tok_is_op(cur(P), "(")) parse_call_args(P, &f->args);
    return f;
}

static struct jnode *parse_filter_expr(struct parser *P, struct jnode *n) {
    for (;;) {
        struct tok *t = cur(P);
        if (tok_is_op(t, "|")) {
            P->ti++;
            n = parse_filter(P, n);
        } else if (tok_is_name(t, "is")) {
            P->ti++;
            struct jnode *tn = node(P, E_TEST, t->line);
            tn->flag = skip_name(P, "not");
            tn->name = dotted_name(P);
            tn->a = n;
            struct tok *c = cur(P);
            if (tok_is_op(c, "(")) parse_call_args(P, &tn->args);
            else if ((c->type == T_NAME || c->type == T_STR || c->type == T_INT ||
                      c->type == T_FLOAT || tok_is_op(c, "[") || tok_is_op(c, "{")) &&
                     !tok_is_name(c, "else") && !tok_is_name(c, "or") && !tok_is_name(c, "and") &&
                     !tok_is_name(c, "if") && !tok_is_name(c, "in") && !tok_is_name(c, "not")) {
                if (tok_is_name(c, "is")) syntax(P, c->line, "cannot chain tests with 'is'%s", "");
                struct jnode *arg = parse_postfix(P, parse_primary(P));
                jnlist_push(P->e, &tn->args, arg);
            }
            n = tn;
        } else if (tok_is_op(t, "(")) {
            struct jnode *c = node(P, E_CALL, t->line);
            c->a = n;
            parse_call_args(P, &c->args);
            n = c;
        } else break;
    }
    return n;
}

static struct jnode *parse_unary(struct parser *P, bool with_filter) {
    struct tok *t = cur(P);
    struct jnode *n;
    enter(P);
    if (skip_op(P, "-")) {
        n = node(P, E_NEG, t->line);
        n->a = parse_unary(P, false);
    } else if (skip_op(P, "+")) {
        n = node(P, E_POS, t->line);
        n->a = parse_unary(P, false);
    } else {
        n = parse_postfix(P, parse_primary(P));
    }
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static struct jnode *binop(struct parser *P, int op, struct jnode *a, struct jnode *b, int line) {
    struct jnode *n = node(P, E_BINOP, line);
    n->op = (uint16_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static struct jnode *parse_pow(struct parser *P) {
    struct jnode *l = parse_unary(P, true);
    while (tok_is_op(cur(P), "**")) {
        int line = cur(P)->line;
        P->ti++;
        l = binop(P, OP_POW, l, parse_unary(P, true), line);
    }
    return l;
}
static struct jnode *parse_math2(struct parser *P) {
    struct jnode *l = parse_pow(P);
    for (;;) {
        struct tok *t = cur(P);
        int op = tok_is_op(t, "*") ? OP_MUL : tok_is_op(t, "/") ? OP_DIV
               : tok_is_op(t, "//") ? OP_FLOORDIV : tok_is_op(t, "%") ? OP_MOD : 0;
        if (!op) break;
        P->ti++;
        l = binop(P, op, l, parse_pow(P), t->line);
    }
    return l;
}
static struct jnode *parse_concat(struct parser *P) {
    struct jnode *first = parse_math2(P);
    if (!tok_is_op(cur(P), "~")) return first;
    struct jnode *n = node(P, E_CONCAT, cur(P)->line);
    jnlist_push(P->e, &n->args, first);
    while (skip_op(P, "~")) jnlist_push(P->e, &n->args, parse_math2(P));
    return n;
}
static struct jnode *parse_math1(struct parser *P) {
    struct jnode *l = parse_concat(P);
    for (;;) {
        struct tok *t = cur(P);
        int op = tok_is_op(t, "+") ? OP_ADD : tok_is_op(t, "-") ? OP_SUB : 0;
        if (!op) break;
        P->ti++;
        l = binop(P, op, l, parse_concat(P), t->line);
    }
    return l;
}
static struct jnode *parse_compare(struct parser *P) {
    int line = cur(P)->line;
    struct jnode *first = parse_math1(P);
    struct jnode *cmp = NULL;
    for (;;) {
        struct tok *t = cur(P);
        int op = tok_is_op(t, "==") ? OP_EQ : tok_is_op(t, "!=") ? OP_NE : tok_is_op(t, "<") ? OP_LT
               : tok_is_op(t, "<=") ? OP_LE : tok_is_op(t, ">") ? OP_GT : tok_is_op(t, ">=") ? OP_GE
               : tok_is_name(t, "in") ? OP_IN : 0;
        if (!op && tok_is_name(t, "not") && tok_is_name(peek(P, 1), "in")) {
            P->ti++;
            op = OP_NOTIN;
        }
        if (!op) break;
        P->ti++;
        if (!cmp) {
            cmp = node(P, E_COMPARE, line);
            cmp->a = first;
        }
        struct jnode *o = node(P, E_CMPOP, t->line);
        o->op = (uint16_t)op;
        o->a = parse_math1(P);
        jnlist_push(P->e, &cmp->args, o);
    }
    return cmp ? cmp : first;
}
static struct jnode *parse_not(struct parser *P) {
    struct tok *t = cur(P);
    if (skip_name(P, "not")) {
        enter(P);
        struct jnode *n = node(P, E_NOT, t->line);
        n->a = parse_not(P);
        P->depth--;
        return n;
    }
    return parse_compare(P);
}
/* A left-associative chain `next (word next)*` of the boolean operator word (node kind k). */
static struct jnode *parse_bool_chain(struct parser *P, const char *word, int k,
                                      struct jnode *(*next)(struct parser *)) {
    struct jnode *l = next(P);
    while (tok_is_name(cur(P), word)) {
        struct jnode *n = node(P, k, cur(P)->line);
        P->ti++;
        n->a = l;
        n->b = next(P);
        l = n;
    }
    return l;
}
static struct jnode *parse_and(struct parser *P) {
    return parse_bool_chain(P, "and", E_AND, parse_not);
}
static struct jnode *parse_or(struct parser *P) {
    return parse_bool_chain(P, "or", E_OR, parse_and);
}
static struct jnode *parse_expr(struct parser *P, bool condexpr) {
    enter(P);
    struct jnode *e1 = parse_or(P);
    if (condexpr) {
        while (tok_is_name(cur(P), "if")) {
            struct jnode *c = node(P, E_COND, cur(P)->line);
            P->ti++;
            c->a = parse_or(P); /* condition */
            c->b = e1;          /* then */
            if (skip_name(P, "else")) c->c = parse_expr(P, true);
            e1 = c;
        }
    }
    P->depth--;
    return e1;
}
/* expression or bare tuple "a, b" */
static struct jnode *parse_tuple(struct parser *P, bool condexpr) {
    int line = cur(P)->line;
    struct jnode *first = parse_expr(P, condexpr);
    if (!tok_is_op(cur(P), ",")) return first;
    struct jnode *t = node(P, E_TUPLE, line);
    jnlist_push(P->e, &t->args, first);
    while (skip_op(P, ",")) {
        if (cur(P)->type == T_END) break;
        jnlist_push(P->e, &t->args, parse_expr(P, condexpr));
    }
    return t;
}

/* ---- statements ---- */
static bool block_is(struct parser *P, int ci, const char *name) {
    if (ci >= P->nchunks || P->chunks[ci].type != C_BLOCK) return false;
    return tok_is_name(&P->chunks[ci].toks.v[0], name);
}
static void open_tag(struct parser *P) {
    P->t = P->chunks[P->ci].toks.v;
    P->ti = 0;
}

static void parse_body(struct parser *P, struct jnlist *body, const char *const *ends, int nends,
                       const char *what, int open_line);

static void parse_body_until(struct parser *P, struct jnlist *body, const char *e1, const char *e2,
                             const char *e3, const char *what, int open_line) {
    const char *ends[3];
    int n = 0;
    if (e1) ends[n++] = e1;
    if (e2) ends[n++] = e2;
    if (e3) ends[n++] = e3;
    parse_body(P, body, ends, n, what, open_line);
}

static struct jnode *parse_if_rest(struct parser *P, int line) {
    /* current token: after 'if' / 'elif' */
    struct jnode *n = node(P, N_IF, line);
    n->a = parse_tuple(P, true);
    expect_end(P);
    P->ci++;
    parse_body_until(P, &n->body, "elif", "else", "endif", "if", line);
    open_tag(P);
    int l2 = P->chunks[P->ci].line;
    if (skip_name(P, "elif")) {
        jnlist_push(P->e, &n->else_body, parse_if_rest(P, l2));
        return n; /* the nested if consumed endif */
    }
    if (skip_name(P, "else")) {
        expect_end(P);
        P->ci++;
        parse_body_until(P, &n->else_body, "endif", NULL, NULL, "if", line);
        open_tag(P);
    }
    skip_name(P, "endif");
    expect_end(P);
    P->ci++;
    return n;
}

static struct jnode *parse_assign_target(struct parser *P, bool allow_attr) {
    struct jnode *t = node(P, E_NAME, cur(P)->line);
    t->name = expect_name(P);
    if (allow_attr && tok_is_op(cur(P), ".")) {
        P->ti++;
        struct jnode *g = node(P, E_GETATTR, t->line);
        g->a = t;
        g->name = expect_name(P);
        return g;
    }
    return t;
}

static struct jnode *parse_statement_inner(struct parser *P);
/* statements nest through the C stack: cap the depth */
static struct jnode *parse_statement(struct parser *P) {
    if (++P->stmt_depth > MAX_STMT_DEPTH)
        jerr(P->e, NX_STATUS_INVALID_ARG, "limit", "line %d: blocks nested deeper than %d", P->chunks[P->ci].line,
             MAX_STMT_DEPTH);
    struct jnode *n = parse_statement_inner(P);
    P->stmt_depth--;
    return n;
}

static struct jnode *parse_statement_inner(struct parser *P) {
    struct chunk *c = &P->chunks[P->ci];
    int line = c->line;
    open_tag(P);
    struct tok *t0 = cur(P);
    if (t0->type != T_NAME) syntax(P, line, "expected a tag name, got '%s'", tok_desc(P, t0));
    const char *tag = expect_name(P);
    struct jnode *n;
    if (!strcmp(tag, "if")) return parse_if_rest(P, line);
    if (!strcmp(tag, "for")) {
        n = node(P, N_FOR, line);
        jnlist_push(P->e, &n->args, parse_assign_target(P, false));
        while (skip_op(P, ",")) {
            n->flag = true;
            jnlist_push(P->e, &n->args, parse_assign_target(P, false));
        }
        if (!skip_name(P, "in")) syntax(P, line, "expected 'in' in a for loop, got '%s'", tok_desc(P, cur(P)));
        n->a = parse_tuple(P, false);
        if (skip_name(P, "if")) n->b = parse_expr(P, true);
        if (tok_is_name(cur(P), "recursive")) unsupported(P, line, "recursive for loops");
        expect_end(P);
        P->ci++;
        parse_body_until(P, &n->body, "else", "endfor", NULL, "for", line);
        open_tag(P);
        if (skip_name(P, "else")) {
            expect_end(P);
            P->ci++;
            parse_body_until(P, &n->else_body, "endfor", NULL, NULL, "for", line);
            open_tag(P);
        }
        skip_name(P, "endfor");
        expect_end(P);
        P->ci++;
        return n;
    }
    if (!strcmp(tag, "set")) {
        struct jnode *target = parse_assign_target(P, true);
        if (skip_op(P, "=") || tok_is_op(cur(P), ",")) {
            n = node(P, N_SET, line);
            jnlist_push(P->e, &n->args, target);
            if (P->t[P->ti - 1].p[0] != '=') {
                while (skip_op(P, ",")) jnlist_push(P->e, &n->args, parse_assign_target(P, true));
                expect_op(P, "=");
                n->flag = true;
            }
            n->a = parse_tuple(P, true);
            expect_end(P);
            P->ci++;
            return n;
        }
        n = node(P, N_SETBLOCK, line);
        jnlist_push(P->e, &n->args, target);
        struct jnode *f = NULL;
        while (skip_op(P, "|")) {
            struct jnode *in = f;
            if (!in) in = node(P, E_BLOCKVAL, line);
            f = parse_filter(P, in);
        }
        n->a = f;
        expect_end(P);
        P->ci++;
        parse_body_until(P, &n->body, "endset", NULL, NULL, "set", line);
        P->ci++;
        return n;
    }
    if (!strcmp(tag, "macro")) {
        n = node(P, N_MACRO, line);
        n->name = expect_name(P);
        expect_op(P, "(");
        while (!tok_is_op(cur(P), ")")) {
            if (n->args.n) expect_op(P, ",");
            if (tok_is_op(cur(P), ")")) break;
            struct jnode *p = node(P, E_NAME, cur(P)->line);
            p->name = expect_name(P);
            if (skip_op(P, "=")) p->a = parse_expr(P, true);
            jnlist_push(P->e, &n->args, p);
        }
        expect_op(P, ")");
        expect_end(P);
        P->ci++;
        parse_body_until(P, &n->body, "endmacro", NULL, NULL, "macro", line);
        P->ci++;
        return n;
    }
    if (!strcmp(tag, "filter")) {
        n = node(P, N_FILTERBLOCK, line);
        struct jnode *f = parse_filter(P, node(P, E_BLOCKVAL, line));
        while (skip_op(P, "|")) f = parse_filter(P, f);
        n->a = f;
        expect_end(P);
        P->ci++;
        parse_body_until(P, &n->body, "endfilter", NULL, NULL, "filter", line);
        P->ci++;
        return n;
    }
    if (!strcmp(tag, "generation")) {
        n = node(P, N_BLOCK, line);
        expect_end(P);
        P->ci++;
        parse_body_until(P, &n->body, "endgeneration", NULL, NULL, "generation", line);
        P->ci++;
        return n;
    }
    if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        n = node(P, tag[0] == 'b' ? N_BREAK : N_CONTINUE, line);
        expect_end(P);
        P->ci++;
        return n;
    }
    static const char *known[] = {"call", "include", "import", "from", "extends", "block", "with",
                                  "autoescape", "trans", "do", "raw"};
    for (size_t k = 0; k < NX_ARRAY_LEN(known); k++)
        if (!strcmp(tag, known[k])) {
            char m[64];
            snprintf(m, sizeof m, "the '%s' tag", tag);
            unsupported(P, line, m);
        }
    syntax(P, line, "unknown tag '%s'", tag);
}

static void parse_body(struct parser *P, struct jnlist *body, const char *const *ends, int nends,
                       const char *what, int open_line) {
    while (P->ci < P->nchunks) {
        struct chunk *c = &P->chunks[P->ci];
        if (c->type == C_TEXT) {
            struct jnode *n = node(P, N_TEXT, c->line);
            n->val = jv_str(c->p, c->n);
            jnlist_push(P->e, body, n);
            P->ci++;
            continue;
        }
        if (c->type == C_VAR) {
            open_tag(P);
            struct jnode *n = node(P, N_OUTPUT, c->line);
            n->a = parse_tuple(P, true);
            expect_end(P);
            jnlist_push(P->e, body, n);
            P->ci++;
            continue;
        }
        for (int k = 0; k < nends; k++)
            if (block_is(P, P->ci, ends[k])) return;
        static const char *closers[] = {"endif", "endfor", "endset", "endmacro", "endfilter",
                                        "endgeneration", "elif", "else", "endcall", "endraw", "endblock"};
        for (size_t k = 0; k < NX_ARRAY_LEN(closers); k++)
            if (block_is(P, P->ci, closers[k])) {
                char m[160];
                if (what)
                    snprintf(m, sizeof m, "unexpected '%s' inside '%s' (opened on line %d)", closers[k], what, open_line);
                else
                    snprintf(m, sizeof m, "unexpected '%s'", closers[k]);
                syntax(P, c->line, "%s", m);
            }
        jnlist_push(P->e, body, parse_statement(P));
    }
    if (what) {
        char m[128];
        snprintf(m, sizeof m, "unexpected end of template: '%s' opened on line %d is not closed", what, open_line);
        syntax(P, open_line, "%s", m);
    }
}

void jinja_parse_src(struct jerr_ctx *e, const char *src, size_t n, struct jtemplate_ast *out) {
    struct parser P = {.e = e, .src = src, .n = n};
    lex_all(&P);
    struct jnode *root = node(&P, N_BLOCK, 1);
    parse_body(&P, &root->body, NULL, 0, NULL, 0);
    out->root = root;
}
