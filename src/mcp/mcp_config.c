/*
 * mcp_config.c - the mcpServers config file (Claude Desktop's shape) and the router's entry
 * point, mcp_config_list_tools: every server's tools in one deterministic array.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/readfile.h"
#include "mcp/mcp_impl.h"

struct mcp_server_cfg {
    char *name;
    char **argv; /* NULL-terminated */
    char **env;  /* NULL-terminated "K=V" */
    char *cwd;   /* NULL: inherit */
    int timeout_ms;
};

struct mcp_config {
    struct mcp_server_cfg *s;
    size_t n;
};

static void server_free(struct mcp_server_cfg *s) {
    nx_free(s->name);
    for (char **a = s->argv; a && *a; a++) nx_free(*a);
    nx_free(s->argv);
    for (char **e = s->env; e && *e; e++) nx_free(*e);
    nx_free(s->env);
    nx_free(s->cwd);
}

void mcp_config_free(mcp_config *cfg) {
    if (!cfg) return;
    for (size_t i = 0; i < cfg->n; i++) server_free(&cfg->s[i]);
    nx_free(cfg->s);
    nx_free(cfg);
}

size_t mcp_config_count(const mcp_config *cfg) { return cfg ? cfg->n : 0; }
const char *mcp_config_name(const mcp_config *cfg, size_t i) {
    return cfg && i < cfg->n ? cfg->s[i].name : NULL;
}

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return false;
    }
    return true;
}

static int cmp_server(const void *a, const void *b) {
    return strcmp(((const struct mcp_server_cfg *)a)->name, ((const struct mcp_server_cfg *)b)->name);
}

/* Fills s from the JSON object of server `name`; returns 0, 1 (disabled: skip) or an error. */
static int parse_server(const char *name, json_t *o, const char *base_dir,
                        struct mcp_server_cfg *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (!name_ok(name))
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: server name '%.80s' must be 1-64 "
                          "characters of [A-Za-z0-9_.-]", name);
    if (!json_is_object(o))
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s is not an object", name);
    json_t *dis = json_object_get(o, "disabled");
    if (dis && !json_is_boolean(dis))
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.disabled is not a "
                          "boolean", name);
    if (json_is_true(dis)) return 1;
    json_t *cmd = json_object_get(o, "command");
    if (!cmd) {
        if (json_object_get(o, "url") || json_object_get(o, "type"))
            return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s is not a stdio server "
                              "(only \"command\" servers are supported, not \"url\")", name);
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s has no \"command\"", name);
    }
    if (!json_is_string(cmd) || !json_string_value(cmd)[0])
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.command is not a "
                          "non-empty string", name);
    json_t *args = json_object_get(o, "args");
    if (args && !json_is_array(args))
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.args is not an array",
                          name);
    size_t na = args ? json_array_size(args) : 0;
    s->argv = nx_calloc(na + 2, sizeof *s->argv);
    s->name = nx_strdup(name);
    if (!s->argv || !s->name) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    s->argv[0] = nx_strdup(json_string_value(cmd));
    if (!s->argv[0]) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    for (size_t i = 0; i < na; i++) {
        json_t *a = json_array_get(args, i);
        if (!json_is_string(a))
            return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.args[%zu] is not a "
                              "string", name, i);
        if (!(s->argv[i + 1] = nx_strdup(json_string_value(a))))
            return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    json_t *env = json_object_get(o, "env");
    if (env && !json_is_object(env))
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.env is not an object",
                          name);
    s->env = nx_calloc((env ? json_object_size(env) : 0) + 1, sizeof *s->env);
    if (!s->env) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    const char *k;
    json_t *v;
    size_t ne = 0;
    json_object_foreach(env, k, v) {
        if (!json_is_string(v))
            return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.env.%s is not a "
                              "string", name, k);
        if (!k[0] || strchr(k, '='))
            return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.env has a bad "
                              "variable name '%s'", name, k);
        size_t l = strlen(k) + strlen(json_string_value(v)) + 2;
        if (!(s->env[ne] = nx_malloc(l))) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
        snprintf(s->env[ne++], l, "%s=%s", k, json_string_value(v));
    }
    json_t *cwd = json_object_get(o, "cwd");
    if (cwd) {
        if (!json_is_string(cwd) || !json_string_value(cwd)[0])
            return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.cwd is not a "
                              "non-empty string", name);
        const char *cv = json_string_value(cwd);
        if (cv[0] == '/' || !base_dir) {
            s->cwd = nx_strdup(cv);
        } else {
            size_t l = strlen(base_dir) + strlen(cv) + 2;
            if ((s->cwd = nx_malloc(l))) snprintf(s->cwd, l, "%s/%s", base_dir, cv);
        }
        if (!s->cwd) return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    json_t *to = json_object_get(o, "timeoutMs");
    if (to) {
        if (!json_is_integer(to) || json_integer_value(to) < 1 ||
            json_integer_value(to) > 3600 * 1000)
            return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: mcpServers.%s.timeoutMs is not an "
                              "integer in [1, 3600000]", name);
        s->timeout_ms = (int)json_integer_value(to);
    }
    return NX_STATUS_OK;
}

nx_status mcp_config_parse(const char *text, const char *base_dir, mcp_config **out, char *err,
                     size_t errlen) {
    *out = NULL;
    json_error_t je;
    json_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: line %d column %d: %s", je.line,
                          je.column, je.text);
    json_t *servers = json_object_get(root, "mcpServers");
    if (!json_is_object(servers)) {
        json_decref(root);
        return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: no \"mcpServers\" object at the top "
                          "level");
    }
    mcp_config *cfg = nx_calloc(1, sizeof *cfg);
    if (cfg) cfg->s = nx_calloc(json_object_size(servers) + 1, sizeof *cfg->s);
    if (!cfg || !cfg->s) {
        nx_free(cfg);
        json_decref(root);
        return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    const char *name;
    json_t *o;
    int st = NX_STATUS_OK;
    json_object_foreach(servers, name, o) {
        int r = parse_server(name, o, base_dir, &cfg->s[cfg->n], err, errlen);
        if (r == 1) {
            server_free(&cfg->s[cfg->n]);
            continue;
        }
        cfg->n++; /* counted even on error, so mcp_config_free frees the partial entry */
        if (r) {
            st = r;
            break;
        }
    }
    json_decref(root);
    if (st) {
        mcp_config_free(cfg);
        return st;
    }
    qsort(cfg->s, cfg->n, sizeof *cfg->s, cmp_server);
    *out = cfg;
    return NX_STATUS_OK;
}

nx_status mcp_config_load(const char *path, mcp_config **out, char *err, size_t errlen) {
    *out = NULL;
    size_t n;
    char rerr[512];
    char *buf = nx_read_file(path, (size_t)16 << 20, &n, rerr, sizeof rerr);
    if (!buf) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "config: %s", rerr);
    /* base directory of the file, for relative cwd entries */
    char *dir = nx_strdup(path);
    if (!dir) {
        nx_free(buf);
        return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = '\0';
    else if (slash)
        *slash = '\0';
    else
        strcpy(dir, ".");
    char msg[400];
    nx_status st = mcp_config_parse(buf, dir, out, msg, sizeof msg);
    nx_free(dir);
    nx_free(buf);
    if (st) return mcp_seterr(err, errlen, st, "%s: %s", path, msg);
    return NX_STATUS_OK;
}

static void server_params(const mcp_config *cfg, size_t i, int timeout_ms,
                          struct mcp_server_params *p) {
    const struct mcp_server_cfg *s = &cfg->s[i];
    memset(p, 0, sizeof *p);
    p->argv = (const char *const *)s->argv;
    p->env = (const char *const *)s->env;
    p->cwd = s->cwd;
    p->timeout_ms = timeout_ms > 0 ? timeout_ms : s->timeout_ms;
}

nx_status mcp_config_open(const mcp_config *cfg, size_t i, int timeout_ms, mcp_client **out, char *err,
                    size_t errlen) {
    *out = NULL;
    if (!cfg || i >= cfg->n) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "no server %zu", i);
    struct mcp_server_params p;
    server_params(cfg, i, timeout_ms, &p);
    char msg[512];
    nx_status st = mcp_open(&p, out, msg, sizeof msg);
    if (st) return mcp_seterr(err, errlen, st, "server '%s': %s", cfg->s[i].name, msg);
    return NX_STATUS_OK;
}

static int cmp_tool(const void *a, const void *b) {
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    return strcmp(json_string_value(json_object_get(x, "name")),
                  json_string_value(json_object_get(y, "name")));
}

nx_status mcp_config_list_tools(const char *config_path, int timeout_ms, json_t **tools_out, char *err,
                          size_t errlen) {
    if (tools_out) *tools_out = NULL;
    if (!config_path || !tools_out) return mcp_seterr(err, errlen, NX_STATUS_INVALID_ARG, "bad argument");
    mcp_config *cfg;
    nx_status st = mcp_config_load(config_path, &cfg, err, errlen);
    if (st) return st;
    json_t *all = json_array();
    if (!all) {
        mcp_config_free(cfg);
        return mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    /* every server boots at the same time; then handshake and list one by one; then all
     * get EOF at once and are reaped */
    mcp_client **cl = nx_calloc(cfg->n ? cfg->n : 1, sizeof *cl);
    if (!cl) st = mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
    char msg[512];
    for (size_t i = 0; i < cfg->n && !st; i++) {
        struct mcp_server_params p;
        server_params(cfg, i, timeout_ms, &p);
        st = mcp_start(&p, &cl[i], msg, sizeof msg);
        if (st) mcp_seterr(err, errlen, st, "server '%s': %s", cfg->s[i].name, msg);
    }
    for (size_t i = 0; i < cfg->n && !st; i++) {
        json_t *tools = NULL;
        st = mcp_handshake(cl[i], msg, sizeof msg);
        if (!st) st = mcp_list_tools(cl[i], &tools, msg, sizeof msg);
        if (st) {
            mcp_seterr(err, errlen, st, "server '%s': %s", cfg->s[i].name, msg);
            break;
        }
        size_t n = json_array_size(tools);
        json_t **v = nx_malloc((n ? n : 1) * sizeof *v);
        if (!v) {
            json_decref(tools);
            st = mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
            break;
        }
        for (size_t k = 0; k < n; k++) v[k] = json_array_get(tools, k);
        qsort(v, n, sizeof *v, cmp_tool);
        for (size_t k = 0; k < n && !st; k++) {
            json_t *t = json_deep_copy(v[k]);
            if (!t || json_object_set_new(t, "server", json_string(cfg->s[i].name)) ||
                json_array_append_new(all, t))
                st = mcp_seterr(err, errlen, NX_STATUS_NOMEM, "out of memory");
        }
        nx_free(v);
        json_decref(tools);
    }
    for (size_t i = 0; cl && i < cfg->n; i++)
        if (cl[i]) mcp_proc_eof(cl[i]);
    for (size_t i = 0; cl && i < cfg->n; i++) mcp_close(cl[i]);
    nx_free(cl);
    mcp_config_free(cfg);
    if (st) {
        json_decref(all);
        return st;
    }
    *tools_out = all;
    return NX_STATUS_OK;
}
