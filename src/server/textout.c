/* textout.c - releasing generated text in whole UTF-8 characters, holding back stop prefixes. */
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "server/textout.h"

nx_status srv_text_init(struct srv_text *t, const char *const *stops, int n_stop) {
    memset(t, 0, sizeof *t);
    if (n_stop < 0 || n_stop > SRV_MAX_STOP) return NX_STATUS_INVALID_ARG;
    size_t longest = 0;
    for (int i = 0; i < n_stop; i++) {
        size_t n = strlen(stops[i]);
        if (n == 0 || n > SRV_STOP_MAX_LEN) return NX_STATUS_INVALID_ARG;
        memcpy(t->stop[i], stops[i], n + 1);
        t->stop_len[i] = n;
        if (n > longest) longest = n;
    }
    t->n_stop = n_stop;
    t->cap = 4 * longest + 64;
    t->pend = nx_malloc(t->cap);
    return t->pend ? NX_STATUS_OK : NX_STATUS_NOMEM;
}

void srv_text_free(struct srv_text *t) {
    nx_free(t->pend);
    t->pend = NULL;
}

bool srv_text_push(struct srv_text *t, const char *piece, size_t n) {
    if (t->stopped) return true;
    if (t->n_pend + n > t->cap) return false;
    memcpy(t->pend + t->n_pend, piece, n);
    t->n_pend += n;
    return true;
}

/* Length of a prefix of s[0..n) that ends on a UTF-8 character boundary with every character
   complete (stray continuation bytes count as characters of their own). */
static size_t utf8_complete(const unsigned char *s, size_t n) {
    size_t i = n;
    for (int back = 0; back < 4 && i > 0; back++) {
        unsigned char c = s[i - 1];
        if ((c & 0xC0) != 0x80) { /* a lead byte or ASCII at i-1 */
            size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                        : (c & 0xF8) == 0xF0 ? 4 : 1;
            return (n - (i - 1) >= need) ? n : i - 1;
        }
        i--;
    }
    return n;
}

static size_t release(struct srv_text *t, size_t len, char *out, size_t cap) {
    if (len + 1 > cap) len = cap ? utf8_complete((unsigned char *)t->pend, cap - 1) : 0;
    if (cap) {
        memcpy(out, t->pend, len);
        out[len] = 0;
    }
    memmove(t->pend, t->pend + len, t->n_pend - len);
    t->n_pend -= len;
    return len;
}

size_t srv_text_take(struct srv_text *t, char *out, size_t cap) {
    if (t->stopped) return release(t, 0, out, cap);
    /* earliest complete stop string */
    size_t first = (size_t)-1;
    for (int s = 0; s < t->n_stop; s++) {
        size_t L = t->stop_len[s];
        for (size_t i = 0; i + L <= t->n_pend && i < first; i++)
            if (!memcmp(t->pend + i, t->stop[s], L)) {
                first = i;
                break;
            }
    }
    if (first != (size_t)-1) {
        t->n_pend = first; /* the stop string and anything after it are never shown */
        t->stopped = true;
        return release(t, first, out, cap);
    }
    /* hold back the longest suffix that is a proper prefix of a stop string */
    size_t hold = 0;
    for (int s = 0; s < t->n_stop; s++) {
        size_t L = t->stop_len[s];
        for (size_t k = NX_MIN(L - 1, t->n_pend); k > hold; k--)
            if (!memcmp(t->pend + t->n_pend - k, t->stop[s], k)) {
                hold = k;
                break;
            }
    }
    size_t len = utf8_complete((unsigned char *)t->pend, t->n_pend - hold);
    return release(t, len, out, cap);
}

size_t srv_text_flush(struct srv_text *t, char *out, size_t cap) {
    size_t n = srv_text_take(t, out, cap);
    if (t->stopped) return n;
    size_t len = utf8_complete((unsigned char *)t->pend, t->n_pend);
    size_t m = release(t, len, out + n, cap > n ? cap - n : 0);
    t->n_pend = 0;
    return n + m;
}
