/*
 * signature.c - the compressed signature of a tool (rules in signature.h).
 *
 * DESIGN: a growable string buffer; the type of each property rendered recursively (a union
 * inside an array's item type gets parentheses); field order by a group rank then schema order
 * (a stable sort of the property list).
 */
#include "route/signature.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/json.h"

struct sbuf {
    char *s;
    size_t n, cap;
    int oom;
};

static void sb_put(struct sbuf *b, const char *t, size_t len) {
    if (b->oom) return;
    if (b->n + len + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 64;
        while (nc < b->n + len + 1) nc *= 2;
        char *ns = nx_realloc(b->s, nc);
        if (!ns) {
            b->oom = 1;
            return;
        }
        b->s = ns;
        b->cap = nc;
    }
    memcpy(b->s + b->n, t, len);
    b->n += len;
    b->s[b->n] = 0;
}
static void sb_str(struct sbuf *b, const char *t) { sb_put(b, t, strlen(t)); }

static const char *short_type(const char *t) {
    if (!strcmp(t, "integer")) return "int";
    if (!strcmp(t, "boolean")) return "bool";
    return t;
}

static void render_literal(struct sbuf *b, json_t *v) {
    char *d = nx_json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (d) sb_str(b, d);
    else b->oom = 1;
    nx_free(d);
}

/* Renders the type of schema node s; *is_union tells whether the text is a top-level union. */
static void render_type(struct sbuf *b, json_t *s, int depth, int *is_union);

static void render_array(struct sbuf *b, json_t *s, int depth) {
    json_t *items = json_object_get(s, "items");
    if (json_is_array(items)) items = json_array_size(items) ? json_array_get(items, 0) : NULL;
    if (!json_is_object(items)) {
        sb_str(b, "any[]");
        return;
    }
    struct sbuf inner = {0};
    int u = 0;
    render_type(&inner, items, depth + 1, &u);
    if (inner.oom) b->oom = 1;
    if (u) sb_str(b, "(");
    if (inner.s) sb_str(b, inner.s);
    if (u) sb_str(b, ")");
    sb_str(b, "[]");
    nx_free(inner.s);
}

static void render_named(struct sbuf *b, const char *t, json_t *s, int depth) {
    if (!strcmp(t, "array"))
        render_array(b, s, depth);
    else
        sb_str(b, short_type(t));
}

static void render_type(struct sbuf *b, json_t *s, int depth, int *is_union) {
    *is_union = 0;
    if (!json_is_object(s) || depth > 32) {
        sb_str(b, "any");
        return;
    }
    json_t *en = json_object_get(s, "enum");
    if (json_is_array(en) && json_array_size(en) > 0) {
        size_t i;
        json_t *v;
        json_array_foreach(en, i, v) {
            if (i) sb_str(b, "|");
            render_literal(b, v);
        }
        *is_union = json_array_size(en) > 1;
        return;
    }
    json_t *cv = json_object_get(s, "const");
    if (cv) {
        render_literal(b, cv);
        return;
    }
    json_t *ty = json_object_get(s, "type");
    if (json_is_string(ty)) {
        render_named(b, json_string_value(ty), s, depth);
        return;
    }
    if (json_is_array(ty) && json_array_size(ty) > 0) {
        size_t i;
        json_t *v;
        json_array_foreach(ty, i, v) {
            if (i) sb_str(b, "|");
            render_named(b, json_string_value(v), s, depth);
        }
        *is_union = json_array_size(ty) > 1;
        return;
    }
    json_t *alt = json_object_get(s, "anyOf");
    if (!json_is_array(alt)) alt = json_object_get(s, "oneOf");
    if (json_is_array(alt) && json_array_size(alt) > 0) {
        size_t i;
        json_t *v;
        json_array_foreach(alt, i, v) {
            int u;
            if (i) sb_str(b, "|");
            render_type(b, v, depth + 1, &u);
        }
        *is_union = json_array_size(alt) > 1;
        return;
    }
    if (json_is_object(json_object_get(s, "properties"))) {
        sb_str(b, "object");
        return;
    }
    if (json_object_get(s, "items")) {
        render_array(b, s, depth);
        return;
    }
    sb_str(b, "any");
}

static const char *const k_ident[] = {"owner", "repo",  "path",         "name",        "branch",
                                      "ref",   "title", "issue_number", "pull_number", "sha"};
static const char *const k_payload[] = {"message", "content", "body", "description"};

static int list_pos(const char *const *l, size_t n, const char *k) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(l[i], k)) return (int)i;
    return -1;
}

struct field {
    const char *name;
    json_t *schema;
    int required;
    int group, sub, order;
};

static int cmp_field(const void *a, const void *b) {
    const struct field *x = a, *y = b;
    if (x->group != y->group) return x->group - y->group;
    if (x->sub != y->sub) return x->sub - y->sub;
    return x->order - y->order;
}

static int is_required(json_t *req, const char *k) {
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), k)) return 1;
    return 0;
}

char *rt_signature_of(const char *name, json_t *schema) {
    struct sbuf b = {0};
    sb_str(&b, name);
    sb_str(&b, "(");
    json_t *props = schema ? json_object_get(schema, "properties") : NULL;
    json_t *req = schema ? json_object_get(schema, "required") : NULL;
    size_t np = json_is_object(props) ? json_object_size(props) : 0;
    struct field *f = np ? nx_malloc(sizeof *f * np) : NULL;
    if (np && !f) {
        nx_free(b.s);
        return NULL;
    }
    size_t n = 0;
    const char *k;
    json_t *v;
    if (np) {
        json_object_foreach(props, k, v) {
            struct field *x = &f[n];
            x->name = k;
            x->schema = v;
            x->required = json_is_array(req) && is_required(req, k);
            x->order = (int)n;
            x->sub = 0;
            int ip = list_pos(k_ident, sizeof k_ident / sizeof *k_ident, k);
            int pp = list_pos(k_payload, sizeof k_payload / sizeof *k_payload, k);
            if (ip >= 0) {
                x->group = x->required ? 1 : 2;
                x->sub = ip;
            } else if (pp >= 0) {
                x->group = 3;
                x->sub = pp;
            } else {
                x->group = x->required ? 4 : 5;
            }
            n++;
        }
        qsort(f, n, sizeof *f, cmp_field);
    }
    for (size_t i = 0; i < n; i++) {
        int u;
        if (i) sb_str(&b, ", ");
        sb_str(&b, f[i].name);
        sb_str(&b, f[i].required ? ": " : "?: ");
        render_type(&b, f[i].schema, 0, &u);
    }
    sb_str(&b, ")");
    nx_free(f);
    if (b.oom) {
        nx_free(b.s);
        return NULL;
    }
    return b.s;
}

char *rt_signature(const struct rt_tool *t) { return rt_signature_of(t->name, t->schema); }
