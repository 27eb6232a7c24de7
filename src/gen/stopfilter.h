/*
 * stopfilter.h - which generated text may be shown yet: nothing that could still turn out to be
 * the start of a stop string, and (optionally) only whole UTF-8 characters. Used by the
 * generation loop (gen/generate.c) and the server's streams (server/engine.c).
 *
 * DESIGN: token pieces are appended to a pending buffer; after each append the stop strings are
 * searched in it. At the earliest match (the lowest stop index among matches at the same
 * offset) the text before it is releasable and the filter is stopped: the match and whatever
 * follows are dropped, later pieces ignored. Otherwise everything but the longest pending suffix
 * that is a proper prefix of some stop string is releasable (with whole_utf8, also not a
 * trailing incomplete UTF-8 character). The pending text never exceeds the longest stop string
 * plus one piece, so a long generation costs O(tokens x stop bytes). gen_stop_finish releases
 * the rest at the end (with whole_utf8 an incomplete trailing character is dropped there).
 */
#ifndef NX_GEN_STOPFILTER_H
#define NX_GEN_STOPFILTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

struct gen_stop_filter {
    const char *const *stop; /* borrowed: n_stop non-empty strings, outliving the filter */
    int n_stop;
    bool whole_utf8;
    char *pend;              /* (cap) pending bytes */
    size_t n, cap;
    bool stopped;            /* a stop string appeared */
    int stop_index;          /* which (-1 until then) */
};

/* INVALID_ARG for an empty or NULL stop string; never allocates here. */
nx_status gen_stop_init(struct gen_stop_filter *f, const char *const *stop, int n_stop,
                        bool whole_utf8);
void gen_stop_free(struct gen_stop_filter *f);
/* Append a piece; returns how many bytes at gen_stop_text may be released now, or SIZE_MAX on
   out of memory (nothing appended). After a stop, pieces are ignored (returns 0). */
size_t gen_stop_push(struct gen_stop_filter *f, const char *s, size_t n);
/* The pending text (releasable bytes first). */
static inline const char *gen_stop_text(const struct gen_stop_filter *f) { return f->pend; }
/* The first n releasable bytes were released. */
void gen_stop_consume(struct gen_stop_filter *f, size_t n);
/* End of generation: how many pending bytes may be released now (all, or all but an
   incomplete trailing character with whole_utf8; 0 after a stop beyond what push returned). */
size_t gen_stop_finish(struct gen_stop_filter *f);

#endif
