/* surrogate.c - bounded surrogates of tool results and the payload store (surrogate.h). */
#include "agent/surrogate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"

/* Largest n' <= n such that s[0..n') does not end inside a character (s[n] readable). */
static size_t cut_back(const char *s, size_t n) {
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

/* Smallest start >= s such that text[start..] begins on a character boundary. */
static size_t cut_forward(const char *t, size_t start, size_t len) {
    while (start < len && ((unsigned char)t[start] & 0xC0) == 0x80) start++;
    return start;
}

char *ag_surrogate(const char *payload, size_t len, const char *id, size_t budget,
                   size_t *out_len) {
    if (budget < AG_SURROGATE_MIN) budget = AG_SURROGATE_MIN;
    if (len <= budget) {
        char *s = nx_malloc(len + 1);
        if (!s) return NULL;
        memcpy(s, payload, len);
        s[len] = 0;
        if (out_len) *out_len = len;
        return s;
    }
    /* The marker's digits depend on N, which depends on H and T: take the longest possible
     * marker (N = len) to size H and T, then write the true one (never longer). */
    char marker[160];
    size_t lines = 0;
    int mlen = snprintf(marker, sizeof marker, "\n[... %zu bytes (%zu lines) elided; full result: %s ...]\n",
                        len, len, id);
    size_t room = budget > (size_t)mlen ? budget - (size_t)mlen : 0;
    size_t h = cut_back(payload, room * 2 / 3);
    size_t t0 = cut_forward(payload, len - (room - room * 2 / 3), len);
    for (size_t i = h; i < t0; i++) lines += payload[i] == '\n';
    mlen = snprintf(marker, sizeof marker, "\n[... %zu bytes (%zu lines) elided; full result: %s ...]\n",
                    t0 - h, lines, id);
    size_t n = h + (size_t)mlen + (len - t0);
    char *s = nx_malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, payload, h);
    memcpy(s + h, marker, (size_t)mlen);
    memcpy(s + h + mlen, payload + t0, len - t0);
    s[n] = 0;
    if (out_len) *out_len = n;
    return s;
}

struct ag_payloads {
    char **text;
    size_t *len;
    int n, cap;
};

ag_payloads *ag_payloads_new(void) { return nx_calloc(1, sizeof(ag_payloads)); }

void ag_payloads_free(ag_payloads *ps) {
    if (!ps) return;
    for (int i = 0; i < ps->n; i++) nx_free(ps->text[i]);
    nx_free(ps->text);
    nx_free(ps->len);
    nx_free(ps);
}

int ag_payload_put(ag_payloads *ps, const char *payload, size_t len) {
    if (ps->n == ps->cap) {
        int cap = ps->cap ? ps->cap * 2 : 8;
        char **t = nx_realloc(ps->text, (size_t)cap * sizeof *t);
        if (!t) return -1;
        ps->text = t;
        size_t *l = nx_realloc(ps->len, (size_t)cap * sizeof *l);
        if (!l) return -1;
        ps->len = l;
        ps->cap = cap;
    }
    char *c = nx_malloc(len + 1);
    if (!c) return -1;
    memcpy(c, payload, len);
    c[len] = 0;
    ps->text[ps->n] = c;
    ps->len[ps->n] = len;
    return ps->n++;
}

void ag_payload_id(int i, char *buf, size_t n) { snprintf(buf, n, "result-%d", i + 1); }

const char *ag_payload_get(const ag_payloads *ps, const char *id, size_t *len) {
    if (strncmp(id, "result-", 7)) return NULL;
    char *end;
    long k = strtol(id + 7, &end, 10);
    if (*end || end == id + 7 || k < 1 || k > ps->n) return NULL;
    if (len) *len = ps->len[k - 1];
    return ps->text[k - 1];
}

int ag_payloads_count(const ag_payloads *ps) { return ps->n; }
