/*
 * mcp_content.c - reading a tools/call result (CallToolResult): its content items by type,
 * structuredContent, isError, the joined text, and base64 for image/audio/blob data.
 */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

#include "mcp/mcp_impl.h"

size_t mcp_result_count(const json_t *result) {
    json_t *content = json_object_get(result, "content");
    return json_is_array(content) ? json_array_size(content) : 0;
}

static const char *str_or_null(const json_t *obj, const char *key) {
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

nx_status mcp_result_content(const json_t *result, size_t i, struct mcp_content *out) {
    memset(out, 0, sizeof *out);
    out->type = MCP_CONTENT_UNKNOWN;
    if (i >= mcp_result_count(result)) return NX_STATUS_INVALID_ARG;
    json_t *item = json_array_get(json_object_get(result, "content"), i);
    const char *type = str_or_null(item, "type");
    if (!json_is_object(item) || !type) return NX_STATUS_PROTOCOL;
    out->raw = item;
    out->type_name = type;
    if (!strcmp(type, "text")) {
        out->type = MCP_CONTENT_TEXT;
        out->text = str_or_null(item, "text");
    } else if (!strcmp(type, "image") || !strcmp(type, "audio")) {
        out->type = type[0] == 'i' ? MCP_CONTENT_IMAGE : MCP_CONTENT_AUDIO;
        out->data = str_or_null(item, "data");
        out->mime_type = str_or_null(item, "mimeType");
    } else if (!strcmp(type, "resource_link")) {
        out->type = MCP_CONTENT_RESOURCE_LINK;
        out->uri = str_or_null(item, "uri");
        out->name = str_or_null(item, "name");
        out->mime_type = str_or_null(item, "mimeType");
    } else if (!strcmp(type, "resource")) {
        out->type = MCP_CONTENT_RESOURCE;
        json_t *res = json_object_get(item, "resource");
        out->uri = str_or_null(res, "uri");
        out->mime_type = str_or_null(res, "mimeType");
        out->text = str_or_null(res, "text");
        out->data = str_or_null(res, "blob");
    }
    return NX_STATUS_OK;
}

const json_t *mcp_result_structured(const json_t *result) {
    return json_object_get(result, "structuredContent");
}

bool mcp_result_is_error(const json_t *result) {
    return json_is_true(json_object_get(result, "isError"));
}

char *mcp_result_text(const json_t *result) {
    size_t n = mcp_result_count(result), total = 1;
    struct mcp_content ct;
    for (size_t i = 0; i < n; i++)
        if (mcp_result_content(result, i, &ct) == NX_STATUS_OK && ct.type == MCP_CONTENT_TEXT && ct.text)
            total += strlen(ct.text) + 1;
    char *s = nx_malloc(total), *o = s;
    if (!s) return NULL;
    for (size_t i = 0; i < n; i++) {
        if (mcp_result_content(result, i, &ct) != NX_STATUS_OK || ct.type != MCP_CONTENT_TEXT || !ct.text)
            continue;
        if (o != s) *o++ = '\n';
        size_t l = strlen(ct.text);
        memcpy(o, ct.text, l);
        o += l;
    }
    *o = '\0';
    return s;
}

static int b64_val(unsigned char ch) {
    if (ch >= 'A' && ch <= 'Z') return ch - 'A';
    if (ch >= 'a' && ch <= 'z') return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') return ch - '0' + 52;
    if (ch == '+') return 62;
    if (ch == '/') return 63;
    return -1;
}

unsigned char *mcp_base64_decode(const char *s, size_t *len_out) {
    size_t n = strlen(s);
    while (n > 0 && s[n - 1] == '=' && (strlen(s) - n) < 2) n--;
    if (n % 4 == 1) return NULL;
    unsigned char *out = nx_malloc(n / 4 * 3 + 3);
    if (!out) return NULL;
    size_t o = 0;
    unsigned acc = 0;
    int bits = 0;
    for (size_t i = 0; i < n; i++) {
        int v = b64_val((unsigned char)s[i]);
        if (v < 0) {
            nx_free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (len_out) *len_out = o;
    return out;
}
