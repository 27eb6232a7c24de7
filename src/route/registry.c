/*
 * registry.c - tools from JSON documents into one sorted, de-duplicated list (see registry.h).
 *
 * DESIGN: every tool keeps a normalised copy of its input schema (types mapped to JSON Schema
 * names, recursively through properties / items / anyOf / oneOf / allOf / additionalProperties)
 * and its raw compact JSON. Shape detection looks at keys only; anything unexpected is an error
 * naming the place ("file:line: tools[3]: ...").
 */
#include "route/registry.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/alloc.h"
#include "core/json.h"
#include "core/readfile.h"

void rt_registry_init(rt_registry *r) { memset(r, 0, sizeof *r); }

static void tool_free(struct rt_tool *t) {
    nx_free(t->name);
    nx_free(t->call_name);
    nx_free(t->description);
    nx_free(t->source);
    nx_free(t->raw_json);
    if (t->schema) json_decref(t->schema);
    memset(t, 0, sizeof *t);
}

void rt_registry_free(rt_registry *r) {
    if (!r) return;
    for (int i = 0; i < r->n; i++) tool_free(&r->tools[i]);
    nx_free(r->tools);
    memset(r, 0, sizeof *r);
}

const char *rt_map_type(const char *t) {
    static const char *const map[][2] = {
        {"object", "object"},   {"dict", "object"},     {"hashmap", "object"},
        {"map", "object"},      {"string", "string"},   {"str", "string"},
        {"char", "string"},     {"integer", "integer"}, {"int", "integer"},
        {"long", "integer"},    {"short", "integer"},   {"byte", "integer"},
        {"number", "number"},   {"float", "number"},    {"double", "number"},
        {"boolean", "boolean"}, {"bool", "boolean"},    {"array", "array"},
        {"list", "array"},      {"tuple", "array"},     {"arraylist", "array"},
        {"null", "null"},       {"any", ""},
    };
    if (!t) return NULL;
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (strcasecmp(t, map[i][0]) == 0) return map[i][1];
    return NULL;
}

/* Normalised deep copy of a schema node; NULL with a message on an unknown type. */
static json_t *norm_schema(json_t *s, const char *tool, const char *path, char *err,
                           size_t errlen, int depth) {
    if (depth > 64) {
        snprintf(err, errlen, "tool '%s': schema nested deeper than 64 levels at %s", tool, path);
        return NULL;
    }
    if (!json_is_object(s)) return json_deep_copy(s); /* true/false schemas, odd values */
    json_t *out = json_object();
    if (!out) goto nomem;
    const char *key;
    json_t *v;
    char sub[512];
    json_object_foreach(s, key, v) {
        json_t *nv = NULL;
        if (strcmp(key, "type") == 0 && json_is_string(v)) {
            const char *m = rt_map_type(json_string_value(v));
            if (!m) {
                snprintf(err, errlen, "tool '%s': unknown type '%s' at %s", tool,
                         json_string_value(v), path);
                json_decref(out);
                return NULL;
            }
            if (!*m) continue; /* "any": no constraint */
            nv = json_string(m);
        } else if (strcmp(key, "type") == 0 && json_is_array(v)) {
            nv = json_array();
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                const char *m = json_is_string(e) ? rt_map_type(json_string_value(e)) : NULL;
                if (!m) {
                    snprintf(err, errlen, "tool '%s': unknown type in the type list at %s", tool,
                             path);
                    json_decref(nv);
                    json_decref(out);
                    return NULL;
                }
                if (*m) json_array_append_new(nv, json_string(m));
            }
        } else if (strcmp(key, "type") == 0) {
            snprintf(err, errlen, "tool '%s': 'type' is neither a string nor a list at %s", tool,
                     path);
            json_decref(out);
            return NULL;
        } else if (strcmp(key, "properties") == 0 && json_is_object(v)) {
            nv = json_object();
            const char *pk;
            json_t *pv;
            json_object_foreach(v, pk, pv) {
                snprintf(sub, sizeof sub, "%s.%s", path, pk);
                json_t *c = norm_schema(pv, tool, sub, err, errlen, depth + 1);
                if (!c) {
                    json_decref(nv);
                    json_decref(out);
                    return NULL;
                }
                json_object_set_new(nv, pk, c);
            }
        } else if ((strcmp(key, "items") == 0 || strcmp(key, "additionalProperties") == 0) &&
                   json_is_object(v)) {
            snprintf(sub, sizeof sub, "%s.%s", path, key);
            nv = norm_schema(v, tool, sub, err, errlen, depth + 1);
            if (!nv) {
                json_decref(out);
                return NULL;
            }
        } else if ((strcmp(key, "anyOf") == 0 || strcmp(key, "oneOf") == 0 ||
                    strcmp(key, "allOf") == 0 || strcmp(key, "items") == 0) &&
                   json_is_array(v)) {
            nv = json_array();
            size_t i;
            json_t *e;
            json_array_foreach(v, i, e) {
                snprintf(sub, sizeof sub, "%s.%s[%zu]", path, key, i);
                json_t *c = norm_schema(e, tool, sub, err, errlen, depth + 1);
                if (!c) {
                    json_decref(nv);
                    json_decref(out);
                    return NULL;
                }
                json_array_append_new(nv, c);
            }
        } else {
            nv = json_deep_copy(v);
        }
        if (!nv || json_object_set_new(out, key, nv) != 0) goto nomem_out;
    }
    return out;
nomem_out:
    json_decref(out);
nomem:
    snprintf(err, errlen, "out of memory");
    return NULL;
}

static int name_ok(const char *n) {
    size_t len = strlen(n);
    if (len == 0 || len > 256) return 0;
    for (const unsigned char *p = (const unsigned char *)n; *p; p++)
        if (*p <= 0x20 || *p == 0x7f) return 0;
    return 1;
}

static int same_definition(const struct rt_tool *t, const char *desc, json_t *schema) {
    return strcmp(t->description, desc) == 0 && json_equal(t->schema, schema);
}

static int set_prefixed(struct rt_tool *t) {
    size_t n = strlen(t->source) + strlen(t->call_name) + 2;
    char *s = nx_malloc(n);
    if (!s) return NX_STATUS_NOMEM;
    snprintf(s, n, "%s.%s", t->source, t->call_name);
    nx_free(t->name);
    t->name = s;
    return 0;
}

int rt_registry_add(rt_registry *r, const char *name, const char *description, json_t *params,
                    json_t *raw, const char *source, char *err, size_t errlen) {
    if (!name || !name_ok(name)) {
        snprintf(err, errlen, "tool name '%s' is empty, longer than 256 bytes or contains "
                 "whitespace/control characters", name ? name : "(null)");
        return NX_STATUS_FORMAT;
    }
    if (!description) description = "";
    if (!source) source = "";
    if (params && !json_is_object(params)) {
        snprintf(err, errlen, "tool '%s': the parameter schema is not a JSON object", name);
        return NX_STATUS_FORMAT;
    }
    json_t *props = params ? json_object_get(params, "properties") : NULL;
    if (props && !json_is_object(props)) {
        snprintf(err, errlen, "tool '%s': 'properties' is not an object", name);
        return NX_STATUS_FORMAT;
    }
    json_t *req = params ? json_object_get(params, "required") : NULL;
    if (req) {
        size_t i;
        json_t *e;
        if (!json_is_array(req)) {
            snprintf(err, errlen, "tool '%s': 'required' is not a list", name);
            return NX_STATUS_FORMAT;
        }
        json_array_foreach(req, i, e) if (!json_is_string(e)) {
            snprintf(err, errlen, "tool '%s': 'required'[%zu] is not a string", name, i);
            return NX_STATUS_FORMAT;
        }
    }
    json_t *schema;
    if (params) {
        schema = norm_schema(params, name, "parameters", err, errlen, 0);
        if (!schema) return strstr(err, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_FORMAT;
    } else {
        schema = json_pack("{s:s,s:{}}", "type", "object", "properties");
        if (!schema) {
            snprintf(err, errlen, "out of memory");
            return NX_STATUS_NOMEM;
        }
    }
    /* duplicates: linear scan (registries are small; rt_registry_sort is not required yet) */
    for (int i = 0; r->dup != RT_DUP_KEEP_ALL && i < r->n; i++) {
        struct rt_tool *t = &r->tools[i];
        if (strcmp(t->call_name, name) != 0) continue;
        if (r->dup == RT_DUP_KEEP_FIRST || same_definition(t, description, schema)) {
            json_decref(schema);
            return 1;
        }
        if (strcmp(t->source, source) == 0) {
            snprintf(err, errlen,
                     "duplicate tool name '%s' in %s with a different definition (rename one, "
                     "or load the other from a separate file)", name, source[0] ? source : "input");
            json_decref(schema);
            return NX_STATUS_FORMAT;
        }
    }
    if (r->n == r->cap) {
        int nc = r->cap ? r->cap * 2 : 16;
        struct rt_tool *nt = nx_realloc(r->tools, sizeof *nt * (size_t)nc);
        if (!nt) {
            json_decref(schema);
            snprintf(err, errlen, "out of memory");
            return NX_STATUS_NOMEM;
        }
        r->tools = nt;
        r->cap = nc;
    }
    struct rt_tool *t = &r->tools[r->n];
    memset(t, 0, sizeof *t);
    t->name = nx_strdup(name);
    t->call_name = nx_strdup(name);
    t->description = nx_strdup(description);
    t->source = nx_strdup(source);
    t->schema = schema;
    if (raw) {
        t->raw_json = nx_json_dumps(raw, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    } else {
        json_t *o = json_pack("{s:s,s:s,s:O}", "name", name, "description", description,
                              "inputSchema", schema);
        t->raw_json = nx_json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
        json_decref(o);
    }
    if (!t->name || !t->call_name || !t->description || !t->source || !t->raw_json) {
        tool_free(t);
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    r->n++;
    /* a different definition under the same name from another source: prefix both */
    int clash = 0;
    for (int i = 0; r->dup != RT_DUP_KEEP_ALL && i < r->n - 1; i++) {
        if (strcmp(r->tools[i].call_name, name) != 0) continue;
        clash = 1;
        if (set_prefixed(&r->tools[i]) != 0) clash = -1;
    }
    if (clash && set_prefixed(t) != 0) clash = -1;
    if (clash < 0) {
        snprintf(err, errlen, "out of memory");
        return NX_STATUS_NOMEM;
    }
    return 0;
}

/* One tool element of any shape. */
static int add_element(rt_registry *r, json_t *e, const char *where, const char *what,
                       const char *source, char *err, size_t errlen) {
    if (!json_is_object(e)) {
        snprintf(err, errlen, "%s: %s is not a JSON object", where, what);
        return NX_STATUS_FORMAT;
    }
    json_t *fn = e;
    json_t *type = json_object_get(e, "type");
    json_t *inner = json_object_get(e, "function");
    if (json_is_object(inner)) {
        if (type && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0)) {
            snprintf(err, errlen, "%s: %s has a 'function' object but type is not \"function\"",
                     where, what);
            return NX_STATUS_FORMAT;
        }
        fn = inner;
    }
    json_t *namev = json_object_get(fn, "name");
    if (!json_is_string(namev)) {
        snprintf(err, errlen, "%s: %s has no string 'name'", where, what);
        return NX_STATUS_FORMAT;
    }
    json_t *desc = json_object_get(fn, "description");
    if (desc && !json_is_string(desc) && !json_is_null(desc)) {
        snprintf(err, errlen, "%s: %s ('%s'): 'description' is not a string", where, what,
                 json_string_value(namev));
        return NX_STATUS_FORMAT;
    }
    json_t *params = json_object_get(fn, "inputSchema");
    if (!params) params = json_object_get(fn, "parameters");
    if (params && json_is_null(params)) params = NULL;
    char sub[384];
    int rc = rt_registry_add(r, json_string_value(namev), desc ? json_string_value(desc) : "",
                             params, e, source, sub, sizeof sub);
    if (rc < 0) {
        snprintf(err, errlen, "%s: %s: %s", where, what, sub);
        return rc;
    }
    return rc == 0 ? 1 : 0;
}

static int add_array(rt_registry *r, json_t *a, const char *where, const char *label,
                     const char *source, char *err, size_t errlen) {
    size_t i;
    json_t *e;
    int added = 0;
    json_array_foreach(a, i, e) {
        char what[64];
        snprintf(what, sizeof what, "%s[%zu]", label, i);
        int rc = add_element(r, e, where, what, source, err, errlen);
        if (rc < 0) return rc;
        added += rc;
    }
    return added;
}

int rt_registry_add_json(rt_registry *r, json_t *root, const char *where, const char *source,
                         char *err, size_t errlen) {
    if (json_is_array(root)) return add_array(r, root, where, "element", source, err, errlen);
    if (!json_is_object(root)) {
        snprintf(err, errlen, "%s: expected a JSON object or list of tools", where);
        return NX_STATUS_FORMAT;
    }
    json_t *tools = json_object_get(root, "tools");
    if (tools) {
        if (!json_is_array(tools)) {
            snprintf(err, errlen, "%s: 'tools' is not a list", where);
            return NX_STATUS_FORMAT;
        }
        return add_array(r, tools, where, "tools", source, err, errlen);
    }
    json_t *fns = json_object_get(root, "function");
    if (json_is_array(fns)) return add_array(r, fns, where, "function", source, err, errlen);
    if (json_object_get(root, "name") || json_is_object(fns))
        return add_element(r, root, where, "tool", source, err, errlen);
    snprintf(err, errlen, "%s: no tools found (expected 'tools', 'function' or 'name')", where);
    return NX_STATUS_FORMAT;
}

static int load_file(rt_registry *r, const char *path, char *err, size_t errlen);

int rt_registry_load_file(rt_registry *r, const char *path, char *err, size_t errlen) {
    int n0 = r->n;
    int rc = load_file(r, path, err, errlen);
    if (rc < 0)
        while (r->n > n0) tool_free(&r->tools[--r->n]); /* all or nothing per file */
    return rc;
}

static int load_file(rt_registry *r, const char *path, char *err, size_t errlen) {
    size_t len;
    char *text = nx_read_file(path, NX_READ_FILE_MAX, &len, err, errlen);
    if (!text) return strstr(err, "out of memory") ? NX_STATUS_NOMEM : NX_STATUS_IO;
    /* source tag: base name without extension */
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char source[128];
    snprintf(source, sizeof source, "%s", base);
    char *dot = strrchr(source, '.');
    if (dot && dot != source) *dot = 0;

    json_error_t je;
    bool oom;
    json_t *root = nx_json_loadb(text, len, JSON_REJECT_DUPLICATES, &je, &oom);
    int added;
    if (root) {
        added = rt_registry_add_json(r, root, path, source, err, errlen);
        json_decref(root);
    } else {
        /* JSON Lines? Only when the first value parses and is followed by more. */
        json_t *first = oom ? NULL : nx_json_loadb(text, len, JSON_DISABLE_EOF_CHECK, NULL, &oom);
        if (!first) {
            if (oom)
                snprintf(err, errlen, "%s: out of memory", path);
            else
                snprintf(err, errlen, "%s:%d:%d: invalid JSON: %s", path, je.line, je.column, je.text);
            nx_free(text);
            return oom ? NX_STATUS_NOMEM : NX_STATUS_FORMAT;
        }
        json_decref(first);
        added = 0;
        int line = 0;
        char *p = text;
        while (*p) {
            char *nl = strchr(p, '\n');
            size_t ll = nl ? (size_t)(nl - p) : strlen(p);
            line++;
            size_t k = 0;
            while (k < ll && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r')) k++;
            if (k < ll) {
                json_t *v = nx_json_loadb(p, ll, JSON_REJECT_DUPLICATES, &je, &oom);
                char where[600];
                snprintf(where, sizeof where, "%s:%d", path, line);
                if (!v) {
                    if (oom)
                        snprintf(err, errlen, "%s: out of memory", where);
                    else
                        snprintf(err, errlen, "%s: invalid JSON: %s", where, je.text);
                    nx_free(text);
                    return oom ? NX_STATUS_NOMEM : NX_STATUS_FORMAT;
                }
                /* BFCL question lines repeat tool names with reworded descriptions: within
                 * such a file the first definition wins (registry.h) */
                enum rt_dup saved = r->dup;
                if (saved == RT_DUP_ERROR && json_is_array(json_object_get(v, "function")) &&
                    json_object_get(v, "question"))
                    r->dup = RT_DUP_KEEP_FIRST;
                int rc = rt_registry_add_json(r, v, where, source, err, errlen);
                r->dup = saved;
                json_decref(v);
                if (rc < 0) {
                    nx_free(text);
                    return rc;
                }
                added += rc;
            }
            if (!nl) break;
            p = nl + 1;
        }
    }
    nx_free(text);
    return added;
}

static int cmp_tool(const void *a, const void *b) {
    return strcmp(((const struct rt_tool *)a)->name, ((const struct rt_tool *)b)->name);
}

void rt_registry_sort(rt_registry *r) {
    if (r->n > 1) qsort(r->tools, (size_t)r->n, sizeof *r->tools, cmp_tool);
}

int rt_registry_find(const rt_registry *r, const char *name) {
    int lo = 0, hi = r->n - 1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(r->tools[mid].name, name);
        if (c == 0) return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}
