/*
 * surrogate.h - the paper's "compressed IR" of tool results: a payload that enters the context
 * only as a bounded surrogate, the full payload kept outside the context, retrievable by id.
 * This header is its specification.
 *
 * The surrogate of a payload of len bytes under a budget of B bytes (B >= AG_SURROGATE_MIN):
 * - len <= B: the payload itself, verbatim;
 * - otherwise: the first H bytes, a marker line, the last T bytes, where the marker is
 *     "\n[... N bytes (L lines) elided; full result: ID ...]\n"
 *   (N the bytes left out, L the newlines among them, ID the payload's id) and H = 2/3, T = 1/3
 *   of what remains of B after the marker, each cut back to a UTF-8 character boundary (never
 *   in the middle of a character). The whole surrogate is at most B bytes.
 * Payload store: every payload put is kept whole (a copy) under the id "result-<n>" (n from 1)
 * until the store is freed; ag_payload_get returns it by id.
 * Errors: NOMEM (NULL / -1 returns).
 */
#ifndef NX_AGENT_SURROGATE_H
#define NX_AGENT_SURROGATE_H

#include <stddef.h>

#define AG_SURROGATE_MIN 96 /* smallest budget: room for the marker and a little text */

/* The surrogate of payload[0..len) with id under budget bytes (raised to AG_SURROGATE_MIN),
 * a new NUL-ended string (nx_free), *out_len its length (may be NULL). NULL on OOM. */
char *ag_surrogate(const char *payload, size_t len, const char *id, size_t budget,
                   size_t *out_len);

typedef struct ag_payloads ag_payloads;

ag_payloads *ag_payloads_new(void);
void ag_payloads_free(ag_payloads *ps);
/* Keeps a copy of payload[0..len); returns its index (its id is "result-<index+1>") or -1
 * on OOM. */
int ag_payload_put(ag_payloads *ps, const char *payload, size_t len);
/* The id of payload i into buf ("result-<i+1>"). */
void ag_payload_id(int i, char *buf, size_t n);
/* The payload with this id (borrowed, NUL-ended; *len its length, may be NULL), or NULL. */
const char *ag_payload_get(const ag_payloads *ps, const char *id, size_t *len);
/* Payloads kept. */
int ag_payloads_count(const ag_payloads *ps);

#endif
