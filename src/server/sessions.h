/*
 * sessions.h - the server's session store: conversations whose KV cache stays with them across
 * turns, each under its own eviction policy and budget, resident in a sequence of the engine's
 * context while in use and parked on disk when idle.
 *
 * DESIGN: a session is named by its id ([A-Za-z0-9_-]{1,64}, checked here, so a file name
 * built from it can never leave the session directory). Up to max_resident sessions hold a
 * sequence (ids seq0 .. seq0 + max_resident - 1) with the tokens it has decoded (its
 * history). When a session must become resident and no sequence is free, the least recently
 * used idle resident session is parked: its sequence state and history are written to
 * DIR/ID.nxs (nx_seq_state_save: checksummed, atomic) and the sequence is freed; without a
 * directory it is forgotten instead (its next turn prefills from scratch). A parked session is
 * restored on its next turn (nx_seq_state_load); a file that fails to load is reported and the
 * session starts afresh. Resident sessions are also parked when idle longer than idle_s and,
 * least recently used first, while the resident ones hold more than max_resident_bytes of KV.
 * Used only by the engine thread (it owns the context); the counters are atomic for /metrics.
 */
#ifndef NX_SERVER_SESSIONS_H
#define NX_SERVER_SESSIONS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "nexus.h"

#define SRV_SESSION_ID_MAX 64

/* What a sequence holds: shared by slots (their own sequence) and sessions. */
struct srv_seqinfo {
    nx_seq_id seq;
    nx_token *toks;            /* (n_hist) tokens decoded into the sequence, in order */
    int32_t n_toks;
    int64_t evictions_at_reset; /* the sequence's eviction count when it was last emptied */
    /* History index i >= linear_from sits at position i - (n_toks - the sequence's n_past);
       the tokens before linear_from were renumbered by nx_kv_seq_compact (an evicting
       sequence that reached n_ctx), so a prompt that diverges there cannot reuse them. */
    int32_t linear_from;
};

struct srv_sessions_params {
    int32_t max_resident;      /* sessions holding a sequence at once (0: sessions off) */
    int64_t max_resident_bytes; /* KV bytes of the resident sessions (0: no cap) */
    int32_t max_known;         /* sessions known at once, resident or parked (4096) */
    double idle_s;             /* a resident session idle this long is parked (0: never) */
    const char *dir;           /* where parked sessions go; NULL: parked ones are forgotten */
    nx_seq_id seq0;            /* first sequence id for sessions */
    int32_t n_hist;            /* tokens of history a sequence can hold */
    struct nx_kv_params kv;    /* a new session's policy unless its first request sets one */
};

struct srv_session;
struct srv_sessions;

bool srv_session_id_valid(const char *id);

/* Errors: INVALID_ARG (dir not a writable directory), NOMEM. */
nx_status srv_sessions_init(const struct srv_sessions_params *p, struct srv_sessions **out,
                            char *err, size_t errlen);
void srv_sessions_free(struct srv_sessions *S);

/*
 * Make session id resident in ctx and mark it busy (one turn at a time per session). kv: the
 * policy for a new session (NULL: the default; ignored for a known one). Returns the session,
 * or NULL with *st = OK when it cannot be had right now (the session is busy, or every
 * resident session is busy: try again later), or NULL with *st < 0 (KV_FULL: too many
 * sessions; INVALID_ARG: bad id or policy; err says why).
 */
struct srv_session *srv_sessions_acquire(struct srv_sessions *S, nx_ctx *ctx, const char *id,
                                         const struct nx_kv_params *kv, nx_status *st,
                                         char *err, size_t errlen);
struct srv_seqinfo *srv_session_seqinfo(struct srv_session *s);
/* The turn is over: the session is idle; the memory cap is enforced. */
void srv_sessions_release(struct srv_sessions *S, nx_ctx *ctx, struct srv_session *s);
/* Park sessions idle longer than idle_s. */
void srv_sessions_tick(struct srv_sessions *S, nx_ctx *ctx);

struct srv_sessions_stats {
    int64_t resident, parked, parks, restores, forgotten, restore_failures;
    int64_t resident_bytes;
    int64_t largest_bytes; /* KV bytes of the largest resident session now */
    int64_t largest_peak;  /* the most KV bytes any session has held since the start */
};
void srv_sessions_stats(const struct srv_sessions *S, struct srv_sessions_stats *out);

#endif
