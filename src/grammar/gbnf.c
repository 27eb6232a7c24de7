/*
 * gbnf.c - DESIGN: a recursive-descent parser of llama.cpp's GBNF into the grammar builder.
 * Rules `name ::= alternatives`; a rule ends at a newline unless inside parentheses or after
 * `|`; items: "literal" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), [class] and
 * [^class] with ranges, `.` (any code point), (group), rule names; postfix * + ? {m} {m,}
 * {m,n}; `#` comments. Errors name line:column. Token references (<[id]>, <text>, !) are
 * refused. With internal set (the JSON-schema compiler's output) `%jstr{m,n}` is also accepted:
 * a JSON string body and its closing quote, m..n characters (n = -1: unbounded).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "grammar/gbnf.h"

#define GBNF_MAX_REPEAT 4096

struct gp {
    const char *base, *p, *end;
    struct gbuilder *b;
    struct nx_err *err;
    bool failed;
    bool internal;
    int depth;
};

static void pos_of(const struct gp *g, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = g->base; q < at && q < g->end; q++) {
        if (*q == '\n') {
            ++*line;
            *col = 1;
        } else {
            ++*col;
        }
    }
}

__attribute__((format(printf, 3, 4))) static void fail_at(struct gp *g, const char *at,
                                                          const char *fmt, ...) {
    if (g->failed) return;
    g->failed = true;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int line, col;
    pos_of(g, at, &line, &col);
    nx_err_set(g->err, NX_STATUS_FORMAT, "gbnf: %d:%d: %s", line, col, msg);
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
}

/* Skip spaces, tabs, comments, and newlines when newline_ok. */
static void skip_space(struct gp *g, bool newline_ok) {
    while (g->p < g->end) {
        char c = *g->p;
        if (c == ' ' || c == '\t' || c == '\r')
            g->p++;
        else if (c == '#') {
            while (g->p < g->end && *g->p != '\n') g->p++;
        } else if (c == '\n' && newline_ok)
            g->p++;
        else
            break;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decode one UTF-8 code point at g->p (advancing); invalid bytes are an error. */
static uint32_t read_utf8(struct gp *g) {
    const unsigned char *s = (const unsigned char *)g->p;
    size_t room = (size_t)(g->end - g->p);
    unsigned c = s[0];
    int n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3
            : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || (size_t)n > room) {
        fail_at(g, g->p, "invalid UTF-8 byte 0x%02X", c);
        return 0;
    }
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            fail_at(g, g->p, "invalid UTF-8 sequence");
            return 0;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    g->p += n;
    return cp;
}

/* One character of a literal or class, escapes decoded. */
static uint32_t read_char(struct gp *g) {
    if (g->p >= g->end) {
        fail_at(g, g->p, "unexpected end of input");
        return 0;
    }
    if (*g->p != '\\') return read_utf8(g);
    const char *at = g->p;
    g->p++;
    if (g->p >= g->end) {
        fail_at(g, at, "unfinished escape");
        return 0;
    }
    char e = *g->p++;
    int nhex = 0;
    switch (e) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '\\': return '\\';
    case '"': return '"';
    case '[': return '[';
    case ']': return ']';
    case '-': return '-';
    case '^': return '^';
    case 'x': nhex = 2; break;
    case 'u': nhex = 4; break;
    case 'U': nhex = 8; break;
    default: fail_at(g, at, "unknown escape '\\%c'", e); return 0;
    }
    uint32_t v = 0;
    for (int i = 0; i < nhex; i++) {
        int h = g->p < g->end ? hexval(*g->p) : -1;
        if (h < 0) {
            fail_at(g, at, "escape '\\%c' needs %d hex digits", e, nhex);
            return 0;
        }
        v = v * 16 + (uint32_t)h;
        g->p++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        fail_at(g, at, "escape gives an invalid code point U+%X", v);
        return 0;
    }
    return v;
}

static int utf8_put(uint32_t cp, char *o) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 63));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 63));
        o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63));
    o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

static long read_int(struct gp *g) {
    const char *at = g->p;
    long v = 0;
    if (g->p >= g->end || *g->p < '0' || *g->p > '9') {
        fail_at(g, at, "expected a number");
        return 0;
    }
    while (g->p < g->end && *g->p >= '0' && *g->p <= '9') {
        v = v * 10 + (*g->p++ - '0');
        if (v > 1000000) {
            fail_at(g, at, "number too large");
            return 0;
        }
    }
    return v;
}

static void parse_alternatives(struct gp *g, int32_t rule, bool nested);

/* Move symbols alt[from..] into a new helper rule; returns a reference to it. */
static struct gsym wrap_item(struct gp *g, int32_t rule, int32_t alt, int32_t from) {
    struct galt *a = &g->b->rules[rule].alts[alt];
    if (a->n - from == 1) {
        a->n--;
        return a->s[from];
    }
    int32_t h = gram_rule_helper(g->b, g->b->rules[rule].name);
    int32_t ha = gram_alt_new(g->b, h);
    if (h < 0 || ha < 0) return gram_ref(0);
    a = &g->b->rules[rule].alts[alt]; /* rules may have moved */
    for (int32_t i = from; i < a->n; i++) gram_alt_push(g->b, h, ha, a->s[i]);
    a = &g->b->rules[rule].alts[alt];
    a->n = from;
    return gram_ref(h);
}

static void parse_sequence(struct gp *g, int32_t rule, int32_t alt, bool nested) {
    for (;;) {
        skip_space(g, nested);
        if (g->failed || g->p >= g->end) return;
        char c = *g->p;
        const char *at = g->p;
        int32_t item_start = g->b->rules[rule].alts[alt].n;
        if (c == '"') {
            g->p++;
            while (!g->failed && g->p < g->end && *g->p != '"') {
                if (*g->p == '\n') {
                    fail_at(g, g->p, "newline inside a literal");
                    return;
                }
                char u[4];
                uint32_t cp = read_char(g);
                int n = utf8_put(cp, u);
                gram_alt_push_literal(g->b, rule, alt, u, (size_t)n);
            }
            if (g->failed) return;
            if (g->p >= g->end) {
                fail_at(g, at, "unterminated literal");
                return;
            }
            g->p++;
        } else if (c == '[') {
            g->p++;
            bool neg = false;
            if (g->p < g->end && *g->p == '^') {
                neg = true;
                g->p++;
            }
            uint32_t(*rg)[2] = NULL;
            int32_t n = 0, cap = 0;
            while (!g->failed && g->p < g->end && *g->p != ']') {
                uint32_t lo = read_char(g), hi = lo;
                if (g->p + 1 < g->end && *g->p == '-' && g->p[1] != ']') {
                    g->p++;
                    hi = read_char(g);
                    if (!g->failed && hi < lo) fail_at(g, at, "character range out of order");
                }
                if (n == cap) {
                    cap = cap ? cap * 2 : 8;
                    void *q = nx_realloc(rg, sizeof *rg * (size_t)cap);
                    if (!q) {
                        g->b->oom = true;
                        fail_at(g, at, "out of memory");
                        break;
                    }
                    rg = q;
                }
                rg[n][0] = lo;
                rg[n][1] = hi;
                n++;
            }
            if (!g->failed && g->p >= g->end) fail_at(g, at, "unterminated character class");
            if (g->failed) {
                nx_free(rg);
                return;
            }
            g->p++;
            struct gsym s = gram_class(g->b, (const uint32_t(*)[2])rg, n, neg);
            nx_free(rg);
            gram_alt_push(g->b, rule, alt, s);
        } else if (c == '.') {
            g->p++;
            uint32_t all[1][2] = {{0, 0x10FFFF}};
            gram_alt_push(g->b, rule, alt, gram_class(g->b, (const uint32_t(*)[2])all, 1, false));
        } else if (c == '(') {
            g->p++;
            if (++g->depth > 200) {
                fail_at(g, at, "groups nested too deeply");
                return;
            }
            int32_t h = gram_rule_helper(g->b, g->b->rules[rule].name);
            if (h < 0) {
                fail_at(g, at, "out of memory");
                return;
            }
            skip_space(g, true);
            parse_alternatives(g, h, true);
            g->depth--;
            if (g->failed) return;
            if (g->p >= g->end || *g->p != ')') {
                fail_at(g, g->p, "expected ')' to close the group opened at this line");
                return;
            }
            g->p++;
            gram_alt_push(g->b, rule, alt, gram_ref(h));
        } else if (is_word(c)) {
            const char *s = g->p;
            while (g->p < g->end && is_word(*g->p)) g->p++;
            int32_t r = gram_rule(g->b, s, (size_t)(g->p - s));
            if (r < 0) {
                fail_at(g, at, "out of memory");
                return;
            }
            if (g->b->rules[r].line == 0) pos_of(g, at, &g->b->rules[r].line, &g->b->rules[r].col);
            gram_alt_push(g->b, rule, alt, gram_ref(r));
        } else if (c == '%' && g->internal && g->end - g->p >= 6 && !strncmp(g->p, "%jstr{", 6)) {
            g->p += 6;
            long mn = read_int(g), mx = -1;
            if (!g->failed && g->p < g->end && *g->p == ',') {
                g->p++;
                if (g->p < g->end && *g->p == '-') {
                    g->p++;
                    read_int(g);
                } else {
                    mx = read_int(g);
                }
            }
            if (g->failed) return;
            if (g->p >= g->end || *g->p != '}') {
                fail_at(g, g->p, "expected '}'");
                return;
            }
            g->p++;
            gram_alt_push(g->b, rule, alt,
                          (struct gsym){.kind = GSYM_JSTR, .min = (int32_t)mn, .max = (int32_t)mx});
        } else if (c == '<' || c == '!') {
            fail_at(g, at, "token references (<...>, !) are not supported");
            return;
        } else if (c == '|' || c == ')' || c == '\n') {
            return;
        } else if (c == ':' ) {
            fail_at(g, at, "unexpected '::=' (a rule definition must start a line)");
            return;
        } else {
            fail_at(g, at, "unexpected character '%c'", c);
            return;
        }
        /* postfix operators apply to the item just parsed */
        skip_space(g, false);
        while (!g->failed && g->p < g->end &&
               (*g->p == '*' || *g->p == '+' || *g->p == '?' || *g->p == '{')) {
            const char *op = g->p;
            long mn = 0, mx = -1;
            if (*g->p == '*') {
                g->p++;
            } else if (*g->p == '+') {
                mn = 1;
                g->p++;
            } else if (*g->p == '?') {
                mx = 1;
                g->p++;
            } else {
                g->p++;
                skip_space(g, false);
                mn = read_int(g);
                skip_space(g, false);
                mx = mn;
                if (!g->failed && g->p < g->end && *g->p == ',') {
                    g->p++;
                    skip_space(g, false);
                    mx = (g->p < g->end && *g->p == '}') ? -1 : read_int(g);
                    skip_space(g, false);
                }
                if (g->failed) return;
                if (g->p >= g->end || *g->p != '}') {
                    fail_at(g, op, "expected '}' to close the repetition");
                    return;
                }
                g->p++;
                if (mx >= 0 && mx < mn) {
                    fail_at(g, op, "repetition {%ld,%ld}: max below min", mn, mx);
                    return;
                }
                if (mn > GBNF_MAX_REPEAT || mx > GBNF_MAX_REPEAT) {
                    fail_at(g, op, "repetition bound over %d", GBNF_MAX_REPEAT);
                    return;
                }
            }
            if (g->b->rules[rule].alts[alt].n == item_start) {
                fail_at(g, op, "repetition of an empty item");
                return;
            }
            struct gsym s = wrap_item(g, rule, alt, item_start);
            gram_alt_push(g->b, rule, alt, gram_repeat(g->b, s, (int32_t)mn, (int32_t)mx));
            skip_space(g, false);
        }
        if (g->b->oom) {
            fail_at(g, at, "out of memory");
            return;
        }
    }
}

static void parse_alternatives(struct gp *g, int32_t rule, bool nested) {
    int32_t alt = gram_alt_new(g->b, rule);
    if (alt < 0) {
        fail_at(g, g->p, "out of memory");
        return;
    }
    parse_sequence(g, rule, alt, nested);
    while (!g->failed && g->p < g->end && *g->p == '|') {
        g->p++;
        skip_space(g, true);
        alt = gram_alt_new(g->b, rule);
        if (alt < 0) {
            fail_at(g, g->p, "out of memory");
            return;
        }
        parse_sequence(g, rule, alt, nested);
    }
}

nx_status gbnf_parse(struct gbuilder *b, const char *text, size_t len, bool internal,
                     struct nx_err *err) {
    struct gp g = {.base = text, .p = text, .end = text + len, .b = b, .err = err,
                   .internal = internal};
    for (;;) {
        skip_space(&g, true);
        if (g.p >= g.end) break;
        const char *at = g.p;
        if (!is_word(*g.p)) {
            fail_at(&g, at, "expected a rule name");
            break;
        }
        const char *s = g.p;
        while (g.p < g.end && is_word(*g.p)) g.p++;
        size_t nlen = (size_t)(g.p - s);
        skip_space(&g, false);
        if (g.end - g.p < 3 || strncmp(g.p, "::=", 3)) {
            fail_at(&g, g.p, "expected '::=' after rule name '%.*s'", (int)nlen, s);
            break;
        }
        g.p += 3;
        int32_t r = gram_rule(b, s, nlen);
        if (r < 0) {
            fail_at(&g, at, "out of memory");
            break;
        }
        if (b->rules[r].defined) {
            fail_at(&g, at, "rule '%.*s' defined twice", (int)nlen, s);
            break;
        }
        pos_of(&g, at, &b->rules[r].line, &b->rules[r].col);
        skip_space(&g, true);
        parse_alternatives(&g, r, false);
        if (g.failed) break;
        if (g.p < g.end && *g.p == ')') {
            fail_at(&g, g.p, "unmatched ')'");
            break;
        }
        if (g.p < g.end && *g.p != '\n') {
            fail_at(&g, g.p, "unexpected character '%c'", *g.p);
            break;
        }
    }
    if (g.failed) return b->oom ? NX_STATUS_NOMEM : NX_STATUS_FORMAT;
    if (b->n_rules == 0) return nx_err_set(err, NX_STATUS_FORMAT, "gbnf: empty grammar");
    return NX_STATUS_OK;
}
