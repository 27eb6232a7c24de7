/*
 * textout.h - turns a stream of token pieces into text a client may see: whole UTF-8 characters
 * only, and nothing that could still turn out to be the start of a stop string.
 *
 * DESIGN: pieces are appended to a pending buffer. Bytes leave it (srv_text_take) once they form
 * complete UTF-8 characters and no stop string can begin inside them; when a stop string
 * appears, everything before it is released and the stream is finished (the stop string itself
 * is never shown, as in OpenAI's API). srv_text_flush releases what is left at the end of a
 * generation (an incomplete trailing character is dropped there, and said so). No allocation
 * after srv_text_init.
 */
#ifndef NX_SERVER_TEXTOUT_H
#define NX_SERVER_TEXTOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "nexus.h"

#define SRV_MAX_STOP 4      /* OpenAI allows up to 4 stop sequences */
#define SRV_STOP_MAX_LEN 256 /* bytes of one stop sequence */

struct srv_text {
    char stop[SRV_MAX_STOP][SRV_STOP_MAX_LEN + 1];
    size_t stop_len[SRV_MAX_STOP];
    int n_stop;
    char *pend;        /* (cap) bytes not yet released */
    size_t n_pend;
    size_t cap;
    bool stopped;      /* a stop string was seen: the stream is finished */
};

/* Errors: INVALID_ARG (more than SRV_MAX_STOP strings, an empty or over-long one), NOMEM. */
nx_status srv_text_init(struct srv_text *t, const char *const *stops, int n_stop);
void srv_text_free(struct srv_text *t);
/* Append a piece. Returns false when the pending buffer would overflow (pieces are small; the
   buffer holds 4 x the longest stop string + 64 bytes), which callers treat as an internal
   error. After a stop, further pieces are ignored. */
bool srv_text_push(struct srv_text *t, const char *piece, size_t n);
/* Move the releasable text into out (room: cap bytes; NUL-terminated); returns bytes moved. */
size_t srv_text_take(struct srv_text *t, char *out, size_t cap);
/* Release everything pending except an incomplete trailing UTF-8 character. */
size_t srv_text_flush(struct srv_text *t, char *out, size_t cap);

#endif
