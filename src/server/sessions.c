/* sessions.c - resident and parked sessions (see sessions.h for the design). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/nx_base.h"
#include "server/sessions.h"

#define HIST_HEAD 2 /* tokens kept in front of every history buffer (see park) */

struct srv_session {
    char id[SRV_SESSION_ID_MAX + 1];
    bool used;                 /* the entry names a session */
    bool resident;             /* holds a sequence (si valid) */
    bool parked;               /* its state is in DIR/ID.nxs */
    bool busy;
    struct srv_seqinfo si;
    double last_used;
    struct nx_kv_params kv;
    char policy[32];
};

struct srv_sessions {
    struct srv_sessions_params p;
    char dir[1024];
    struct srv_session *s;     /* (max_known) */
    struct srv_session **owner; /* (max_resident) session holding sequence seq0 + i, or NULL */
    nx_token **hist;           /* (max_resident) history buffers, one per sequence */
    atomic_llong n_resident, n_parked, parks, restores, forgotten, restore_failures,
        resident_bytes, largest_bytes, largest_peak;
};

bool srv_session_id_valid(const char *id) {
    size_t n = 0;
    for (; id[n]; n++) {
        char c = id[n];
        if (n >= SRV_SESSION_ID_MAX ||
            !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return n > 0;
}

nx_status srv_sessions_init(const struct srv_sessions_params *p, struct srv_sessions **out,
                            char *err, size_t errlen) {
    *out = NULL;
    struct srv_sessions *S = nx_calloc(1, sizeof *S);
    if (!S) return NX_STATUS_NOMEM;
    S->p = *p;
    if (S->p.max_known <= 0) S->p.max_known = 4096;
    if (S->p.max_known < S->p.max_resident) S->p.max_known = S->p.max_resident;
    if (p->dir) {
        struct stat st;
        if (strlen(p->dir) >= sizeof S->dir - 80 || stat(p->dir, &st) != 0 ||
            !S_ISDIR(st.st_mode) || access(p->dir, W_OK) != 0) {
            snprintf(err, errlen, "session directory '%s' is not a writable directory", p->dir);
            nx_free(S);
            return NX_STATUS_INVALID_ARG;
        }
        snprintf(S->dir, sizeof S->dir, "%s", p->dir);
        S->p.dir = S->dir;
    }
    S->s = nx_calloc((size_t)S->p.max_known, sizeof *S->s);
    S->owner = nx_calloc((size_t)NX_MAX(p->max_resident, 1), sizeof *S->owner);
    S->hist = nx_calloc((size_t)NX_MAX(p->max_resident, 1), sizeof *S->hist);
    if (!S->s || !S->owner || !S->hist) goto oom;
    for (int i = 0; i < p->max_resident; i++) {
        S->hist[i] = nx_malloc(sizeof(nx_token) * ((size_t)p->n_hist + HIST_HEAD));
        if (!S->hist[i]) goto oom;
    }
    *out = S;
    return NX_STATUS_OK;
oom:
    srv_sessions_free(S);
    return NX_STATUS_NOMEM;
}

void srv_sessions_free(struct srv_sessions *S) {
    if (!S) return;
    if (S->hist)
        for (int i = 0; i < S->p.max_resident; i++) nx_free(S->hist[i]);
    nx_free(S->hist);
    nx_free(S->owner);
    nx_free(S->s);
    nx_free(S);
}

static void file_of(const struct srv_sessions *S, const struct srv_session *s, char *buf,
                    size_t cap) {
    snprintf(buf, cap, "%s/%s.nxs", S->dir, s->id); /* id checked: [A-Za-z0-9_-]{1,64} */
}

static void update_bytes(struct srv_sessions *S, nx_ctx *ctx) {
    int64_t total = 0, largest = 0, peak = atomic_load(&S->largest_peak);
    for (int i = 0; i < S->p.max_resident; i++)
        if (S->owner[i]) {
            struct nx_kv_stats ks;
            nx_seq_kv_stats(ctx, S->owner[i]->si.seq, &ks);
            total += (int64_t)ks.bytes_current;
            largest = NX_MAX(largest, (int64_t)ks.bytes_current);
            peak = NX_MAX(peak, (int64_t)ks.bytes_peak);
        }
    atomic_store(&S->resident_bytes, total);
    atomic_store(&S->largest_bytes, largest);
    atomic_store(&S->largest_peak, peak);
}

/* A parked session's caller data in its state file: HIST_MAGIC, linear_from, then the history
   (the history buffers keep HIST_HEAD tokens in front of each history for it). */
#define HIST_MAGIC 0x3248584e /* "NXH2" */

/* Give up s's sequence: write it to disk (or forget it without a directory). */
static void park(struct srv_sessions *S, nx_ctx *ctx, struct srv_session *s) {
    int idx = s->si.seq - S->p.seq0;
    bool saved = false;
    if (S->p.dir) {
        char path[1200], err[512];
        file_of(S, s, path, sizeof path);
        nx_token *blob = s->si.toks - HIST_HEAD;
        blob[0] = HIST_MAGIC;
        blob[1] = s->si.linear_from;
        nx_status st = nx_seq_state_save(ctx, s->si.seq, path, blob,
                               sizeof(nx_token) * ((size_t)s->si.n_toks + HIST_HEAD), err,
                               sizeof err);
        if (st) NX_LOGW("session %s: cannot park it (%s); it is forgotten", s->id, err);
        saved = st == NX_STATUS_OK;
    }
    nx_kv_seq_rm(ctx, s->si.seq, -1, -1);
    S->owner[idx] = NULL;
    s->resident = false;
    s->si.toks = NULL;
    s->si.n_toks = 0;
    atomic_fetch_sub(&S->n_resident, 1);
    if (saved) {
        s->parked = true;
        atomic_fetch_add(&S->n_parked, 1);
        atomic_fetch_add(&S->parks, 1);
    } else {
        s->used = false; /* forgotten: the next turn starts it afresh */
        atomic_fetch_add(&S->forgotten, 1);
    }
    update_bytes(S, ctx);
}

/* The least recently used idle resident session, or NULL. */
static struct srv_session *lru_idle(struct srv_sessions *S) {
    struct srv_session *best = NULL;
    for (int i = 0; i < S->p.max_resident; i++) {
        struct srv_session *s = S->owner[i];
        if (s && !s->busy && (!best || s->last_used < best->last_used)) best = s;
    }
    return best;
}

struct srv_session *srv_sessions_acquire(struct srv_sessions *S, nx_ctx *ctx, const char *id,
                                         const struct nx_kv_params *kv, nx_status *st,
                                         char *err, size_t errlen) {
    *st = NX_STATUS_OK;
    if (S->p.max_resident <= 0) {
        *st = NX_STATUS_INVALID_ARG;
        snprintf(err, errlen, "sessions are off on this server (start it with --sessions N)");
        return NULL;
    }
    if (!srv_session_id_valid(id)) {
        *st = NX_STATUS_INVALID_ARG;
        snprintf(err, errlen, "session ids are 1-64 characters of A-Z a-z 0-9 - _");
        return NULL;
    }
    struct srv_session *s = NULL, *free_entry = NULL;
    for (int i = 0; i < S->p.max_known; i++) {
        if (S->s[i].used && !strcmp(S->s[i].id, id)) {
            s = &S->s[i];
            break;
        }
        if (!S->s[i].used && !free_entry) free_entry = &S->s[i];
    }
    if (s && s->busy) return NULL; /* one turn at a time */
    if (!s) {
        if (!free_entry) {
            *st = NX_STATUS_KV_FULL;
            snprintf(err, errlen, "this server already holds %d sessions", S->p.max_known);
            return NULL;
        }
        s = free_entry;
        memset(s, 0, sizeof *s);
        snprintf(s->id, sizeof s->id, "%s", id);
        s->kv = kv ? *kv : S->p.kv;
        snprintf(s->policy, sizeof s->policy, "%s", s->kv.policy ? s->kv.policy : "full");
        s->kv.policy = s->policy;
        s->used = true;
    }
    if (!s->resident) {
        int idx = -1;
        for (int i = 0; i < S->p.max_resident && idx < 0; i++)
            if (!S->owner[i]) idx = i;
        if (idx < 0) {
            struct srv_session *victim = lru_idle(S);
            if (!victim) {
                if (!s->parked && free_entry == s) s->used = false; /* not created after all */
                return NULL;
            }
            idx = victim->si.seq - S->p.seq0;
            park(S, ctx, victim);
        }
        nx_seq_id seq = S->p.seq0 + idx;
        nx_kv_seq_rm(ctx, seq, -1, -1);
        if (nx_seq_set_kv(ctx, seq, &s->kv) != NX_STATUS_OK) {
            *st = NX_STATUS_INVALID_ARG;
            snprintf(err, errlen, "session %s: %s", id, nx_ctx_last_error(ctx));
            if (!s->parked) s->used = false;
            return NULL;
        }
        s->si = (struct srv_seqinfo){seq, S->hist[idx] + HIST_HEAD, 0, 0, 0};
        if (s->parked) {
            char path[1200], lerr[512];
            size_t len = 0;
            file_of(S, s, path, sizeof path);
            nx_token *blob = S->hist[idx];
            nx_status ls = nx_seq_state_load(ctx, seq, path, blob,
                                             sizeof(nx_token) * ((size_t)S->p.n_hist + HIST_HEAD),
                                             &len, lerr, sizeof lerr);
            int32_t n_toks = (int32_t)(len / sizeof(nx_token)) - HIST_HEAD;
            nx_pos n_past = nx_seq_n_past(ctx, seq);
            if (!ls && (len % sizeof(nx_token) || n_toks < 0 || blob[0] != HIST_MAGIC ||
                        blob[1] < 0 || blob[1] > n_toks || n_toks < n_past)) {
                ls = NX_STATUS_FORMAT;
                snprintf(lerr, sizeof lerr, "its history does not match its sequence");
            }
            if (ls) {
                NX_LOGW("session %s: cannot restore it (%s); it starts afresh", id, lerr);
                nx_kv_seq_rm(ctx, seq, -1, -1);
                atomic_fetch_add(&S->restore_failures, 1);
            } else {
                s->si.n_toks = n_toks;
                s->si.linear_from = blob[1];
                atomic_fetch_add(&S->restores, 1);
            }
            unlink(path);
            s->parked = false;
            atomic_fetch_sub(&S->n_parked, 1);
        }
        S->owner[idx] = s;
        s->resident = true;
        atomic_fetch_add(&S->n_resident, 1);
    }
    s->busy = true;
    return s;
}

struct srv_seqinfo *srv_session_seqinfo(struct srv_session *s) { return &s->si; }

void srv_sessions_release(struct srv_sessions *S, nx_ctx *ctx, struct srv_session *s) {
    s->busy = false;
    s->last_used = nx_time_s();
    update_bytes(S, ctx);
    while (S->p.max_resident_bytes > 0 &&
           atomic_load(&S->resident_bytes) > S->p.max_resident_bytes) {
        struct srv_session *v = lru_idle(S);
        if (!v) break;
        park(S, ctx, v);
    }
}

void srv_sessions_tick(struct srv_sessions *S, nx_ctx *ctx) {
    if (S->p.idle_s <= 0) return;
    double now = nx_time_s();
    for (int i = 0; i < S->p.max_resident; i++) {
        struct srv_session *s = S->owner[i];
        if (s && !s->busy && now - s->last_used > S->p.idle_s) park(S, ctx, s);
    }
}

void srv_sessions_stats(const struct srv_sessions *S, struct srv_sessions_stats *out) {
    struct srv_sessions *m = (struct srv_sessions *)S;
    out->resident = atomic_load(&m->n_resident);
    out->parked = atomic_load(&m->n_parked);
    out->parks = atomic_load(&m->parks);
    out->restores = atomic_load(&m->restores);
    out->forgotten = atomic_load(&m->forgotten);
    out->restore_failures = atomic_load(&m->restore_failures);
    out->resident_bytes = atomic_load(&m->resident_bytes);
    out->largest_bytes = atomic_load(&m->largest_bytes);
    out->largest_peak = atomic_load(&m->largest_peak);
}
