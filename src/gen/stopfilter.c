/* stopfilter.c - stop strings and whole UTF-8 characters over streamed text (stopfilter.h). */
#include <string.h>

#include "core/alloc.h"
#include "gen/stopfilter.h"

nx_status gen_stop_init(struct gen_stop_filter *f, const char *const *stop, int n_stop,
                        bool whole_utf8) {
    memset(f, 0, sizeof *f);
    f->stop_index = -1;
    if (n_stop < 0 || (n_stop > 0 && !stop)) return NX_STATUS_INVALID_ARG;
    for (int i = 0; i < n_stop; i++)
        if (!stop[i] || !stop[i][0]) return NX_STATUS_INVALID_ARG;
    f->stop = stop;
    f->n_stop = n_stop;
    f->whole_utf8 = whole_utf8;
    return NX_STATUS_OK;
}

void gen_stop_free(struct gen_stop_filter *f) {
    nx_free(f->pend);
    f->pend = NULL;
    f->n = f->cap = 0;
}

/* Length of the longest prefix of s[0..n) whose UTF-8 characters are all complete (a stray
   continuation byte counts as a character of its own). */
static size_t utf8_complete(const unsigned char *s, size_t n) {
    size_t i = n;
    for (int back = 0; back < 4 && i > 0; back++, i--) {
        unsigned char c = s[i - 1];
        if ((c & 0xC0) == 0x80) continue;
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                    : (c & 0xF8) == 0xF0 ? 4 : 1;
        return n - (i - 1) >= need ? n : i - 1;
    }
    return n;
}

size_t gen_stop_push(struct gen_stop_filter *f, const char *s, size_t n) {
    if (f->stopped) return 0;
    if (f->n + n + 1 > f->cap) {
        size_t cap = f->cap ? f->cap : 64;
        while (cap < f->n + n + 1) cap *= 2;
        char *p = nx_realloc(f->pend, cap);
        if (!p) return SIZE_MAX;
        f->pend = p;
        f->cap = cap;
    }
    memcpy(f->pend + f->n, s, n);
    f->n += n;
    f->pend[f->n] = 0;
    long best = -1;
    for (int i = 0; i < f->n_stop; i++) {
        const char *hit = memmem(f->pend, f->n, f->stop[i], strlen(f->stop[i]));
        if (hit && (best < 0 || hit - f->pend < best)) {
            best = hit - f->pend;
            f->stop_index = i;
        }
    }
    if (best >= 0) {
        f->stopped = true;
        f->n = (size_t)best; /* the stop string and what follows are never shown */
        f->pend[f->n] = 0;
        return f->n;
    }
    size_t keep = 0;
    for (int i = 0; i < f->n_stop; i++) {
        size_t sl = strlen(f->stop[i]);
        for (size_t l = sl - 1 < f->n ? sl - 1 : f->n; l > keep; l--)
            if (!memcmp(f->pend + f->n - l, f->stop[i], l)) {
                keep = l;
                break;
            }
    }
    size_t ready = f->n - keep;
    return f->whole_utf8 ? utf8_complete((const unsigned char *)f->pend, ready) : ready;
}

void gen_stop_consume(struct gen_stop_filter *f, size_t n) {
    if (n > f->n) n = f->n;
    memmove(f->pend, f->pend + n, f->n - n);
    f->n -= n;
    if (f->pend) f->pend[f->n] = 0;
}

size_t gen_stop_finish(struct gen_stop_filter *f) {
    if (f->whole_utf8) f->n = utf8_complete((const unsigned char *)f->pend, f->n);
    return f->n;
}
