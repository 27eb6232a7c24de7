/*
 * mcp_cmd.c - `nexus mcp list|call`: the MCP client from the command line.
 *
 *   nexus mcp list (--config FILE | --server "CMD ARGS...") [--json] [--timeout MS]
 *                  [--era auto|legacy|modern]
 *   nexus mcp call (--config FILE [--name SERVER] | --server "CMD ARGS...") TOOL ['JSON-ARGS']
 *                  [--json] [--timeout MS] [--era auto|legacy|modern]
 *
 * `--server` splits its string into words at spaces (single and double quotes group words; no
 * other shell syntax). `list` prints one line per tool: name, server, first line of the
 * description; `--json` prints the tools array (MCP tools/list shape, each tool with "server").
 * `call` prints each content item (text as is, other types as a one-line summary) and the
 * structuredContent; `--json` prints the whole CallToolResult. Exit status: 0 on success, 1 on
 * any error (an isError result included, after printing it).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "mcp/mcp.h"
#include "mcp_cmd.h"
#include "args.h"

static int fail(const char *fmt, const char *a) {
    fprintf(stderr, "nexus mcp: ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n");
    return 1;
}

static void mcp_usage(void) {
    fprintf(stderr,
            "usage:\n"
            "  nexus mcp list (--config FILE | --server \"CMD ARGS\") [--json] [--timeout MS]\n"
            "                 [--era auto|legacy|modern]\n"
            "  nexus mcp call (--config FILE [--name SERVER] | --server \"CMD ARGS\") TOOL\n"
            "                 ['JSON-ARGS'] [--json] [--timeout MS] [--era auto|legacy|modern]\n");
}

/* Splits s into words (quotes group); returns a NULL-terminated malloc'd vector. */
static char **split_words(const char *s, char **store) {
    size_t n = strlen(s);
    char *buf = malloc(n + 1);
    char **v = calloc(n / 2 + 2, sizeof *v);
    if (!buf || !v) {
        free(buf);
        free(v);
        return NULL;
    }
    size_t k = 0, o = 0;
    const char *p = s;
    while (*p) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        v[k++] = buf + o;
        char q = 0;
        while (*p && (q || (*p != ' ' && *p != '\t'))) {
            if (!q && (*p == '"' || *p == '\'')) {
                q = *p++;
                continue;
            }
            if (q && *p == q) {
                q = 0;
                p++;
                continue;
            }
            buf[o++] = *p++;
        }
        buf[o++] = '\0';
    }
    v[k] = NULL;
    *store = buf;
    return v;
}

static void print_result(const json_t *r) {
    size_t n = mcp_result_count(r);
    for (size_t i = 0; i < n; i++) {
        struct mcp_content c;
        if (mcp_result_content(r, i, &c) != NX_STATUS_OK) {
            printf("[item %zu: not a content object]\n", i);
            continue;
        }
        size_t len = 0;
        unsigned char *bytes = NULL;
        switch (c.type) {
        case MCP_CONTENT_TEXT: printf("%s\n", c.text ? c.text : ""); break;
        case MCP_CONTENT_IMAGE:
        case MCP_CONTENT_AUDIO:
            bytes = c.data ? mcp_base64_decode(c.data, &len) : NULL;
            printf("[%s %s, %zu bytes%s]\n", c.type_name, c.mime_type ? c.mime_type : "?",
                   bytes ? len : 0, bytes || !c.data ? "" : ", bad base64");
            nx_free(bytes);
            break;
        case MCP_CONTENT_RESOURCE_LINK:
            printf("[resource_link %s%s%s]\n", c.uri ? c.uri : "?", c.name ? " " : "",
                   c.name ? c.name : "");
            break;
        case MCP_CONTENT_RESOURCE:
            printf("[resource %s %s]\n", c.uri ? c.uri : "?", c.mime_type ? c.mime_type : "");
            if (c.text)
                printf("%s\n", c.text);
            else if (c.data) {
                bytes = mcp_base64_decode(c.data, &len);
                printf("[blob, %zu bytes]\n", bytes ? len : 0);
                nx_free(bytes);
            }
            break;
        default: printf("[%s item]\n", c.type_name); break;
        }
    }
    const json_t *sc = mcp_result_structured(r);
    if (sc) {
        char *s = json_dumps(sc, JSON_COMPACT);
        if (s) printf("structuredContent: %s\n", s);
        nx_free(s);
    }
}

/* tools/call, then the result (JSON or readable) on stdout whatever the outcome; the call's
 * status, with its message in err. */
static int call_and_print(mcp_client *c, const char *tool, const json_t *args, bool as_json,
                          char *err, size_t errlen) {
    json_t *r = NULL;
    nx_status st = mcp_call_tool(c, tool, args, &r, err, errlen);
    if (r && as_json) {
        char *s = json_dumps(r, JSON_INDENT(1));
        if (s) printf("%s\n", s);
        nx_free(s);
    } else if (r) {
        print_result(r);
    }
    json_decref(r);
    return st;
}

static int print_tools(json_t *tools, bool as_json) {
    if (as_json) {
        char *s = json_dumps(tools, JSON_INDENT(1));
        if (!s) return fail("%s", "out of memory");
        printf("%s\n", s);
        nx_free(s);
        return 0;
    }
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *server = json_string_value(json_object_get(t, "server"));
        const char *desc = json_string_value(json_object_get(t, "description"));
        int dl = 0;
        if (desc) {
            while (desc[dl] && desc[dl] != '\n' && dl < 100) dl++;
        }
        printf("%-32s %-16s %.*s%s\n", name, server ? server : "-", dl, desc ? desc : "",
               desc && desc[dl] && desc[dl] != '\n' ? "..." : "");
    }
    fprintf(stderr, "%zu tools\n", json_array_size(tools));
    return 0;
}

int mcp_cmd_main(int argc, char **argv) {
    /* argv[0] = "mcp" */
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        mcp_usage();
        return argc < 2 ? 1 : 0;
    }
    const char *sub = argv[1];
    if (strcmp(sub, "list") && strcmp(sub, "call")) {
        mcp_usage();
        return fail("unknown subcommand '%s' (list or call)", sub);
    }
    bool is_call = !strcmp(sub, "call");
    const char *config = NULL, *server = NULL, *name = NULL, *tool = NULL, *args_text = NULL;
    bool as_json = false;
    int timeout_ms = 0;
    enum mcp_era era = MCP_ERA_AUTO;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        bool has_val = i + 1 < argc;
        if (!strcmp(a, "--config") || !strcmp(a, "--server") || !strcmp(a, "--name") ||
            !strcmp(a, "--timeout") || !strcmp(a, "--era")) {
            if (!has_val) return fail("%s needs a value", a);
            const char *v = argv[++i];
            if (!strcmp(a, "--config")) config = v;
            else if (!strcmp(a, "--server")) server = v;
            else if (!strcmp(a, "--name")) name = v;
            else if (!strcmp(a, "--timeout")) {
                long long t;
                if (!args_long(v, 1, 3600000, &t))
                    return fail("--timeout: expected milliseconds in [1, 3600000], got '%s'", v);
                timeout_ms = (int)t;
            } else {
                if (!strcmp(v, "auto")) era = MCP_ERA_AUTO;
                else if (!strcmp(v, "legacy")) era = MCP_ERA_LEGACY;
                else if (!strcmp(v, "modern")) era = MCP_ERA_MODERN;
                else return fail("--era: expected auto, legacy or modern, got '%s'", v);
            }
        } else if (!strcmp(a, "--json")) {
            as_json = true;
        } else if (a[0] == '-' && a[1] == '-') {
            return fail("unknown flag '%s'", a);
        } else if (is_call && !tool) {
            tool = a;
        } else if (is_call && !args_text) {
            args_text = a;
        } else {
            return fail("unexpected argument '%s'", a);
        }
    }
    if (!config == !server) return fail("%s", "give exactly one of --config FILE or --server CMD");
    if (is_call && !tool) return fail("%s", "call: which TOOL?");
    if (name && !config) return fail("%s", "--name needs --config");

    json_t *args = NULL;
    if (is_call && args_text) {
        json_error_t je;
        args = json_loads(args_text, JSON_REJECT_DUPLICATES, &je);
        if (!args) {
            fprintf(stderr, "nexus mcp: JSON-ARGS: column %d: %s\n", je.column, je.text);
            return 1;
        }
        if (!json_is_object(args)) {
            json_decref(args);
            return fail("%s", "JSON-ARGS must be a JSON object");
        }
    }

    char err[768];
    int rc = 1;
    if (server) {
        char *store = NULL;
        char **words = split_words(server, &store);
        if (!words || !words[0]) {
            free(words);
            free(store);
            json_decref(args);
            return fail("%s", "--server: empty command");
        }
        struct mcp_server_params p = {0};
        p.argv = (const char *const *)words;
        p.timeout_ms = timeout_ms;
        p.era = era;
        mcp_client *c;
        nx_status st = mcp_open(&p, &c, err, sizeof err);
        if (st) {
            fprintf(stderr, "nexus mcp: %s\n", err);
        } else {
            fprintf(stderr, "server: protocol %s%s\n", mcp_protocol_version(c),
                    mcp_is_modern(c) ? " (modern)" : "");
            if (is_call) {
                st = call_and_print(c, tool, args, as_json, err, sizeof err);
                if (st) fprintf(stderr, "nexus mcp: %s\n", err);
                rc = st ? 1 : 0;
            } else {
                json_t *tools = NULL;
                st = mcp_list_tools(c, &tools, err, sizeof err);
                if (st) {
                    fprintf(stderr, "nexus mcp: %s\n", err);
                } else {
                    rc = print_tools(tools, as_json);
                }
                json_decref(tools);
            }
            mcp_close(c);
        }
        free(words);
        free(store);
        json_decref(args);
        return rc;
    }

    if (!is_call) {
        json_t *tools = NULL;
        if (mcp_config_list_tools(config, timeout_ms, &tools, err, sizeof err)) {
            fprintf(stderr, "nexus mcp: %s\n", err);
            return 1;
        }
        rc = print_tools(tools, as_json);
        json_decref(tools);
        return rc;
    }

    /* call with a config: the first server (by name, or the one --name gives) with the tool */
    mcp_config *cfg;
    if (mcp_config_load(config, &cfg, err, sizeof err)) {
        fprintf(stderr, "nexus mcp: %s\n", err);
        json_decref(args);
        return 1;
    }
    bool found = false, named = false, failed = false;
    for (size_t i = 0; i < mcp_config_count(cfg) && !found; i++) {
        if (name && strcmp(name, mcp_config_name(cfg, i))) continue;
        named = true;
        mcp_client *c;
        if (mcp_config_open(cfg, i, timeout_ms, &c, err, sizeof err)) {
            fprintf(stderr, "nexus mcp: %s\n", err);
            failed = true;
            break;
        }
        json_t *tools = NULL;
        if (mcp_list_tools(c, &tools, err, sizeof err)) {
            fprintf(stderr, "nexus mcp: server '%s': %s\n", mcp_config_name(cfg, i), err);
            mcp_close(c);
            failed = true;
            break;
        }
        size_t k;
        json_t *t;
        json_array_foreach(tools, k, t) {
            if (!strcmp(json_string_value(json_object_get(t, "name")), tool)) found = true;
        }
        json_decref(tools);
        if (found) {
            int st = call_and_print(c, tool, args, as_json, err, sizeof err);
            if (st) fprintf(stderr, "nexus mcp: server '%s': %s\n", mcp_config_name(cfg, i), err);
            rc = st ? 1 : 0;
        }
        mcp_close(c);
    }
    if (name && !named) fprintf(stderr, "nexus mcp: no server '%s' in %s\n", name, config);
    else if (!found && !failed) fprintf(stderr, "nexus mcp: no server in %s has a tool '%s'\n", config, tool);
    mcp_config_free(cfg);
    json_decref(args);
    return rc;
}
