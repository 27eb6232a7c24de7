/* engine.c - slots, the job queue and the engine thread (see engine.h for the design). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "server/engine.h"
#include "gen/stopfilter.h"
#include "server/metrics.h"

enum slot_phase { SLOT_IDLE = 0, SLOT_PREFILL, SLOT_GENERATE };

/* the shortest shared prefix that makes a request prefer a slot over a less recently used one */
#define SRV_MIN_REUSE 16

struct slot {
    struct srv_seqinfo own; /* the slot's own sequence (requests without a session) */
    struct srv_seqinfo *cur; /* the sequence the running job uses: own, or its session's */
    struct srv_session *sess; /* the running job's session, or NULL */
    struct srv_job *job; /* NULL when idle */
    enum slot_phase phase;
    int32_t n_done;      /* prompt tokens already in the cache */
    nx_token pending;    /* GENERATE: the sampled token the next step decodes */
    int32_t logits_at;   /* index of this slot's logits in the last batch, -1 when none */
    bool in_batch;       /* the slot has entries in the batch being built */
    uint64_t last_used;  /* when it was last given a job (engine's counter) */
    nx_sampler *smp;
    struct gen_stop_filter text; /* stop strings, whole UTF-8 characters */
    bool text_ready;
    atomic_llong kv_bytes;  /* written by the engine thread after each step, read by stats */
    atomic_llong evictions;
};

struct srv_engine {
    const nx_model *model;
    struct srv_engine_params p;
    nx_ctx *ctx;         /* one context, a sequence per slot (engine thread only) */
    struct nx_batch batch;
    int32_t *batch_slot; /* (n_batch) the slot of each batch entry */
    struct srv_sessions *sessions; /* NULL when sessions are off */
    nx_grammar_vocab *gvocab; /* the model's vocabulary for grammars (built at start) */
    int32_t n_ctx;
    int32_t n_hist;      /* history capacity of every sequence (>= n_ctx) */
    int32_t rr;          /* the slot whose prompt is served first in the next step */
    struct slot *slots;
    float *lp_tmp;       /* (n_vocab) scratch for log-probabilities (engine thread only) */

    pthread_mutex_t mu;  /* guards queue, stop, slot->job pointers seen by stats */
    pthread_cond_t cv;
    struct srv_job **queue; /* (queue_max) waiting jobs, oldest first */
    int32_t q_len;
    bool stop;
    pthread_t thread;
    bool thread_started;
    uint64_t seed_ctr;   /* seeds for requests without one */
    uint64_t use_ctr;    /* admissions so far (slots' last_used) */

    atomic_llong prompt_tokens, prompt_cached, gen_tokens, compactions;
    atomic_llong pool_in_use, pool_bytes; /* the context's KV pool (engine thread writes) */
};

/* ---- jobs ---- */

static void job_free(struct srv_job *j) {
    srv_gen_request_free(&j->req);
    srv_constraint_free(&j->con);
    nx_free(j->prompt);
    nx_free(j->text);
    nx_free(j->toks);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    nx_free(j);
}

void srv_job_unref(struct srv_job *j) {
    if (j && atomic_fetch_sub(&j->refs, 1) == 1) job_free(j);
}

void srv_job_cancel(struct srv_job *j) { atomic_store(&j->cancel, true); }

nx_status srv_job_create(struct srv_engine *e, struct srv_gen_request *req,
                         struct srv_constraint *con, const char *text, double timeout_s,
                         struct srv_job **out, char *err, size_t errlen) {
    *out = NULL;
    struct srv_job *j = nx_calloc(1, sizeof *j);
    if (!j) {
        srv_gen_request_free(req);
        if (con) srv_constraint_free(con);
        return NX_STATUS_NOMEM;
    }
    if (con) {
        j->con = *con;
        memset(con, 0, sizeof *con);
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    atomic_init(&j->refs, 1);
    atomic_init(&j->cancel, false);
    j->req = *req;
    memset(req, 0, sizeof *req);
    if (j->req.kv_policy[0]) j->req.kv.policy = j->req.kv_policy; /* it pointed into *req */
    size_t len = strlen(text);
    int32_t n = nx_tokenize(e->model, text, len, NULL, 0, true, true);
    if (n == INT32_MIN) { /* checked before negating: -INT32_MIN overflows */
        snprintf(err, errlen, "out of memory while tokenizing the prompt");
        job_free(j);
        return NX_STATUS_NOMEM;
    }
    int32_t need = n < 0 ? -n : n;
    if (need < 1) {
        snprintf(err, errlen, "the prompt is empty");
        job_free(j);
        return NX_STATUS_INVALID_ARG;
    }
    j->prompt = nx_malloc(sizeof *j->prompt * (size_t)need);
    if (!j->prompt) {
        job_free(j);
        return NX_STATUS_NOMEM;
    }
    j->n_prompt = nx_tokenize(e->model, text, len, j->prompt, need, true, true);
    if (j->n_prompt != need) { /* INT32_MIN: the tokenizer ran out of memory this time */
        snprintf(err, errlen, "out of memory while tokenizing the prompt");
        job_free(j);
        return NX_STATUS_NOMEM;
    }
    /* a conversation whose sequence may evict (a session's, or under an evicting server
       policy) goes on past n_ctx; a dense one is checked again when it runs */
    const char *pol = e->p.ctx.kv.policy;
    bool may_evict = j->req.session[0] || (pol && strcmp(pol, "full"));
    int32_t limit = may_evict ? e->n_hist : e->n_ctx;
    if (j->n_prompt + 1 > limit) {
        snprintf(err, errlen, "the prompt has %d tokens; this server's %s holds %d "
                 "(prompt and generated tokens together)", (int)j->n_prompt,
                 may_evict ? "conversation history" : "context", (int)limit);
        job_free(j);
        return NX_STATUS_INVALID_ARG;
    }
    int32_t room = limit - j->n_prompt;
    if (j->req.max_tokens <= 0 || j->req.max_tokens > room) j->req.max_tokens = room;
    j->cap_text = 256;
    j->text = nx_malloc(j->cap_text);
    if (j->req.logprobs) {
        j->cap_toks = j->req.max_tokens;
        j->toks = nx_malloc(sizeof *j->toks * (size_t)j->cap_toks);
    }
    if (!j->text || (j->req.logprobs && !j->toks)) {
        job_free(j);
        return NX_STATUS_NOMEM;
    }
    j->text[0] = 0;
    j->t_submit = nx_time_s();
    j->deadline = timeout_s > 0 ? j->t_submit + timeout_s : 0;
    *out = j;
    return NX_STATUS_OK;
}

/* ---- engine ---- */

nx_status srv_engine_submit(struct srv_engine *e, struct srv_job *j) {
    pthread_mutex_lock(&e->mu);
    if (e->q_len >= e->p.queue_max || e->stop) {
        pthread_mutex_unlock(&e->mu);
        return NX_STATUS_KV_FULL;
    }
    atomic_fetch_add(&j->refs, 1);
    e->queue[e->q_len++] = j;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NX_STATUS_OK;
}

/* End a job: record the outcome, wake its reader, drop the engine's reference. */
static void job_finish(struct srv_job *j, const char *finish, nx_status error, const char *msg) {
    pthread_mutex_lock(&j->mu);
    j->finish = finish;
    j->error = error;
    if (msg) snprintf(j->errmsg, sizeof j->errmsg, "%s", msg);
    j->state = SRV_JOB_DONE;
    j->t_done = nx_time_s();
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    srv_job_unref(j);
}

static bool job_add_text(struct srv_job *j, const char *s, size_t n);

static void slot_release(struct srv_engine *e, struct slot *s, const char *finish,
                         nx_status error, const char *msg) {
    struct srv_job *j = s->job;
    if (s->text_ready && !error) {
        /* whatever is held back (a stop-string prefix that never completed) is released */
        size_t n = gen_stop_finish(&s->text);
        job_add_text(j, gen_stop_text(&s->text), n); /* on out of memory the tail is lost */
    }
    if (s->text_ready) gen_stop_free(&s->text);
    s->text_ready = false;
    nx_sampler_free(s->smp);
    s->smp = NULL;
    atomic_fetch_add(&e->prompt_tokens, j->n_prompt);
    atomic_fetch_add(&e->prompt_cached, j->n_cached);
    atomic_fetch_add(&e->gen_tokens, j->n_gen);
    srv_metrics_tokens(j->n_prompt, j->n_cached, j->n_gen);
    if (s->sess) srv_sessions_release(e->sessions, e->ctx, s->sess);
    pthread_mutex_lock(&e->mu);
    s->job = NULL;
    s->sess = NULL;
    s->cur = &s->own;
    s->phase = SLOT_IDLE;
    pthread_mutex_unlock(&e->mu);
    job_finish(j, finish, error, msg);
}

static int32_t common_prefix(const nx_token *a, int32_t na, const nx_token *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* Remove queue entry i (e->mu held). */
static void queue_take(struct srv_engine *e, int32_t i) {
    memmove(e->queue + i, e->queue + i + 1, sizeof *e->queue * (size_t)(e->q_len - i - 1));
    e->q_len--;
}

/* Give queued jobs to idle slots, oldest first: a job without a session to the idle slot whose
   sequence shares the longest prefix with its prompt (the least recently used among equals); a job with one to any idle slot, on its
   session's sequence (a session busy with another turn keeps its job waiting). Called on the
   engine thread with e->mu held (session parking and restoring use the context, which only
   this thread touches). */
static void admit(struct srv_engine *e) {
    for (int32_t q = 0; q < e->q_len;) {
        struct srv_job *j = e->queue[q];
        int best = -1;
        int32_t best_len = -1;
        for (int i = 0; i < e->p.n_slots; i++) {
            struct slot *s = &e->slots[i];
            if (s->job) continue;
            int32_t l = j->req.session[0] ? 0 : common_prefix(s->own.toks, s->own.n_toks,
                                                               j->prompt, j->n_prompt);
            /* a few shared tokens (BOS, a chat header) are not worth another conversation's
               cache: they count only when they are all the slot holds or all the prompt */
            if (l < SRV_MIN_REUSE && l < s->own.n_toks && l < j->n_prompt - 1) l = 0;
            /* ties go to the least recently used slot, so the other conversations' cached
               prefixes stay longest */
            if (l > best_len || (l == best_len && s->last_used < e->slots[best].last_used)) {
                best = i;
                best_len = l;
            }
        }
        if (best < 0) return;
        struct slot *s = &e->slots[best];
        struct srv_session *sess = NULL;
        if (j->req.session[0]) {
            nx_status st;
            char msg[256];
            if (!e->sessions) {
                queue_take(e, q);
                job_finish(j, NULL, NX_STATUS_INVALID_ARG,
                           "sessions are off on this server (start it with --sessions N)");
                continue;
            }
            sess = srv_sessions_acquire(e->sessions, e->ctx, j->req.session,
                                        j->req.has_kv ? &j->req.kv : NULL, &st, msg,
                                        sizeof msg);
            if (!sess && st) {
                queue_take(e, q);
                job_finish(j, NULL, st, msg);
                continue;
            }
            if (!sess) { /* busy: leave it queued, look at the next one */
                q++;
                continue;
            }
            struct srv_seqinfo *si = srv_session_seqinfo(sess);
            best_len = common_prefix(si->toks, si->n_toks, j->prompt, j->n_prompt);
            s->cur = si;
        } else {
            s->cur = &s->own;
        }
        queue_take(e, q);
        s->job = j;
        s->last_used = ++e->use_ctr;
        s->sess = sess;
        s->phase = SLOT_PREFILL;
        /* the last prompt token is always decoded, so its logits are fresh */
        int32_t keep = NX_MIN(best_len, j->n_prompt - 1);
        s->n_done = keep;
        j->n_cached = keep;
    }
}

static nx_status slot_start(struct srv_engine *e, struct slot *s, char *msg, size_t len) {
    struct srv_job *j = s->job;
    /* Reuse the cached prefix only while the sequence holds it exactly: once its policy has
       evicted, the cache is a compressed history and reusing it would make the output depend
       on which slot the request landed in. */
    struct srv_seqinfo *si = s->cur;
    struct nx_kv_stats ks;
    nx_seq_kv_stats(e->ctx, si->seq, &ks);
    /* a session reuses its compressed history: that is what it is for */
    if (!s->sess && ks.evictions != si->evictions_at_reset) s->n_done = j->n_cached = 0;
    /* a prompt that diverges inside a compacted stretch starts afresh */
    if (s->n_done < si->linear_from) s->n_done = j->n_cached = 0;
    if (s->n_done == 0 ||
        nx_kv_seq_rm(e->ctx, si->seq, s->n_done - (si->n_toks - nx_seq_n_past(e->ctx, si->seq)), -1) !=
            NX_STATUS_OK) {
        nx_kv_seq_rm(e->ctx, si->seq, -1, -1);
        s->n_done = j->n_cached = 0;
    }
    if (s->n_done == 0) {
        nx_seq_kv_stats(e->ctx, si->seq, &ks);
        si->evictions_at_reset = ks.evictions;
        si->linear_from = 0;
    }
    si->n_toks = s->n_done;
    s->logits_at = -1;
    struct nx_sampler_params sp = nx_sampler_default_params();
    sp.temp = j->req.temperature;
    sp.top_k = 0;
    sp.top_p = j->req.top_p;
    sp.min_p = 0;
    sp.repeat_penalty = 1.0f;
    sp.seed = j->req.has_seed ? j->req.seed : ++e->seed_ctr * 0x9E3779B97F4A7C15ull;
    if (nx_sampler_init(&sp, nx_model_n_vocab(e->model), &s->smp)) {
        snprintf(msg, len, "out of memory (sampler)");
        return NX_STATUS_NOMEM;
    }
    if (j->con.grammar &&
        nx_sampler_set_grammar(s->smp, j->con.grammar, e->gvocab, j->con.trigger,
                               j->req.max_tokens) != NX_STATUS_OK) {
        snprintf(msg, len, "cannot attach the output grammar");
        return NX_STATUS_NOMEM;
    }
    nx_status st = gen_stop_init(&s->text, (const char *const *)j->req.stop, j->req.n_stop, true);
    if (st) {
        snprintf(msg, len, "cannot set up the stop strings");
        return st;
    }
    s->text_ready = true;
    pthread_mutex_lock(&j->mu);
    j->state = SRV_JOB_RUNNING;
    pthread_mutex_unlock(&j->mu);
    return NX_STATUS_OK;
}

/* log-softmax of the logits for the chosen token and the top-n alternatives */
static void fill_logprobs(struct srv_engine *e, const float *logits, nx_token chosen, int n_top,
                          struct srv_tokinfo *ti) {
    int32_t nv = nx_model_n_vocab(e->model);
    double mx = -INFINITY;
    for (int32_t i = 0; i < nv; i++) mx = fmax(mx, logits[i]);
    double sum = 0;
    for (int32_t i = 0; i < nv; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    ti->id = chosen;
    ti->logprob = (float)((double)logits[chosen] - lse);
    ti->n_top = 0;
    for (int32_t i = 0; i < nv && n_top > 0; i++) {
        float v = logits[i];
        int k = ti->n_top;
        if (k == n_top && !(v > e->lp_tmp[k - 1])) continue;
        if (k < n_top) ti->n_top++;
        else k = n_top - 1;
        while (k > 0 && v > e->lp_tmp[k - 1]) { /* insertion, ties keep the lower id first */
            e->lp_tmp[k] = e->lp_tmp[k - 1];
            ti->top_id[k] = ti->top_id[k - 1];
            k--;
        }
        e->lp_tmp[k] = v;
        ti->top_id[k] = i;
    }
    for (int k = 0; k < ti->n_top; k++) ti->top_lp[k] = (float)((double)e->lp_tmp[k] - lse);
}

/* Append released text to the job; false on out of memory. */
static bool job_add_text(struct srv_job *j, const char *s, size_t n) {
    if (!n) return true;
    pthread_mutex_lock(&j->mu);
    bool ok = true;
    size_t need = j->n_text + n + 1;
    if (need > j->cap_text) {
        size_t cap = NX_MAX(need, j->cap_text * 2);
        char *p = nx_realloc(j->text, cap);
        if (!p) ok = false;
        else {
            j->text = p;
            j->cap_text = cap;
        }
    }
    if (ok) {
        memcpy(j->text + j->n_text, s, n);
        j->n_text += n;
        j->text[j->n_text] = 0;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->mu);
    return ok;
}

/* Sample the slot's next token from its logits of the last batch and decide whether the
   generation goes on (the token then becomes the slot's pending token). */
static void slot_sample(struct srv_engine *e, struct slot *s) {
    struct srv_job *j = s->job;
    const float *logits = nx_get_logits_ith(e->ctx, s->logits_at);
    s->logits_at = -1;
    if (!logits) {
        slot_release(e, s, NULL, NX_STATUS_INVALID_ARG, "internal error: no logits");
        return;
    }
    nx_token t = nx_sampler_sample(s->smp, logits);
    if (j->n_gen == 0) {
        j->t_first = nx_time_s();
        srv_metrics_ttft(j->t_first - j->t_submit);
    }
    if (j->req.logprobs && j->n_toks < j->cap_toks) {
        pthread_mutex_lock(&j->mu);
        fill_logprobs(e, logits, t, j->req.top_logprobs, &j->toks[j->n_toks]);
        j->n_toks++;
        pthread_mutex_unlock(&j->mu);
    }
    j->n_gen++;
    if (nx_token_is_eog(e->model, t)) {
        slot_release(e, s, "stop", NX_STATUS_OK, NULL);
        return;
    }
    char piece[256];
    int32_t np = nx_token_to_piece(e->model, t, piece, sizeof piece, false);
    if (np < 0) np = 0;
    size_t n = gen_stop_push(&s->text, piece, (size_t)np);
    if (n == SIZE_MAX || !job_add_text(j, gen_stop_text(&s->text), n)) {
        slot_release(e, s, NULL, NX_STATUS_NOMEM, "out of memory");
        return;
    }
    gen_stop_consume(&s->text, n);
    if (s->text.stopped) {
        slot_release(e, s, "stop", NX_STATUS_OK, NULL);
        return;
    }
    if (j->n_gen >= j->req.max_tokens || s->cur->n_toks + 1 >= e->n_hist) {
        slot_release(e, s, "length", NX_STATUS_OK, NULL);
        return;
    }
    s->pending = t;
    s->phase = SLOT_GENERATE;
}

/* Room for n more positions in slot s's sequence: when they would pass n_ctx, its gaps are
   closed first (nx_kv_seq_compact: an evicting sequence goes on; a dense one has none).
   Returns how many of the n fit now. */
static int32_t make_room(struct srv_engine *e, struct slot *s, int32_t n) {
    struct srv_seqinfo *si = s->cur;
    if (nx_seq_n_past(e->ctx, si->seq) + n <= e->n_ctx) return n;
    nx_pos shift = 0;
    if (nx_kv_seq_compact(e->ctx, si->seq, &shift) == NX_STATUS_OK && shift > 0) {
        si->linear_from = si->n_toks;
        atomic_fetch_add(&e->compactions, 1);
    }
    return NX_MAX(0, NX_MIN(n, e->n_ctx - nx_seq_n_past(e->ctx, si->seq)));
}

/*
 * One engine step: every generating slot contributes its pending token, prefilling slots
 * fill the rest of the batch with prompt chunks (in slot order, starting after the slot that
 * was served first last time, so no prompt starves), one forward pass runs them all, and the
 * slots whose logits came back sample their next token.
 */
static void engine_step(struct srv_engine *e) {
    char msg[256];
    for (int i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        struct srv_job *j = s->job;
        if (!j) continue;
        if (atomic_load(&j->cancel)) {
            slot_release(e, s, NULL, NX_STATUS_ABORTED, "cancelled");
            continue;
        }
        if (j->deadline > 0 && nx_time_s() > j->deadline) {
            /* a request past its deadline ends like one that hit its token cap */
            slot_release(e, s, "length", NX_STATUS_OK, NULL);
            continue;
        }
        if (s->phase == SLOT_PREFILL && !s->smp) {
            nx_status st = slot_start(e, s, msg, sizeof msg);
            if (st) slot_release(e, s, NULL, st, msg);
        }
    }
    struct nx_batch *b = &e->batch;
    nx_batch_clear(b);
    for (int i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (!s->job || s->phase != SLOT_GENERATE) continue;
        if (make_room(e, s, 1) < 1) { /* a dense sequence at n_ctx */
            slot_release(e, s, "length", NX_STATUS_OK, NULL);
            continue;
        }
        s->logits_at = b->n_tokens;
        s->in_batch = true;
        e->batch_slot[b->n_tokens] = i;
        nx_batch_add(b, s->pending, nx_seq_n_past(e->ctx, s->cur->seq), s->cur->seq, true);
    }
    /* prompt tokens this step may carry: the rest of the batch, or while slots are
       generating at most prefill_chunk, so their next tokens are not held up a whole batch */
    int32_t room = b->n_max;
    if (b->n_tokens > 0 && e->p.prefill_chunk > 0)
        room = NX_MIN(room, b->n_tokens + e->p.prefill_chunk);
    for (int k = 0; k < e->p.n_slots && b->n_tokens < room; k++) {
        int si = (e->rr + k) % e->p.n_slots;
        struct slot *s = &e->slots[si];
        struct srv_job *j = s->job;
        if (!j || s->phase != SLOT_PREFILL) continue;
        int32_t want = NX_MIN(room - b->n_tokens, j->n_prompt - s->n_done);
        int32_t n = want > 0 ? make_room(e, s, want) : 0;
        if (want > 0 && n == 0) {
            snprintf(msg, sizeof msg, "the prompt does not fit: %d tokens, the context holds "
                     "%d positions and this sequence's policy keeps them all (only an evicting "
                     "sequence goes past n_ctx)", (int)j->n_prompt, (int)e->n_ctx);
            slot_release(e, s, NULL, NX_STATUS_INVALID_ARG, msg);
            continue;
        }
        s->in_batch = n > 0;
        nx_pos pos0 = nx_seq_n_past(e->ctx, s->cur->seq); /* = history index n_done */
        for (int32_t t = 0; t < n; t++) {
            bool last = s->n_done + t == j->n_prompt - 1;
            if (last) s->logits_at = b->n_tokens;
            e->batch_slot[b->n_tokens] = si;
            nx_batch_add(b, j->prompt[s->n_done + t], pos0 + t, s->cur->seq, last);
        }
    }
    e->rr = (e->rr + 1) % e->p.n_slots;
    if (b->n_tokens == 0) return;
    double t0 = nx_time_s();
    nx_status st = nx_decode_batch(e->ctx, b);
    double dt = nx_time_s() - t0;
    if (st) {
        /* the batch changed nothing: end every job that had a token in it */
        snprintf(msg, sizeof msg, "%s: %s", st == NX_STATUS_KV_FULL ? "the KV pool is full"
                                                                    : "decode failed",
                 nx_ctx_last_error(e->ctx));
        for (int i = 0; i < e->p.n_slots; i++)
            if (e->slots[i].job && e->slots[i].in_batch) {
                e->slots[i].in_batch = false;
                slot_release(e, &e->slots[i], NULL, st, msg);
            }
        return;
    }
    srv_metrics_step(dt);
    /* account what the batch appended, then sample */
    for (int i = 0; i < e->p.n_slots; i++) e->slots[i].in_batch = false;
    for (int32_t k = 0; k < b->n_tokens; k++) {
        struct slot *s = &e->slots[e->batch_slot[k]];
        s->cur->toks[s->cur->n_toks++] = b->token[k];
        if (s->phase == SLOT_PREFILL) s->n_done++;
    }
    for (int i = 0; i < e->p.n_slots; i++) {
        struct slot *s = &e->slots[i];
        if (!s->job || s->logits_at < 0) continue;
        slot_sample(e, s);
    }
    for (int i = 0; i < e->p.n_slots; i++) {
        struct nx_kv_stats ks;
        nx_seq_kv_stats(e->ctx, e->slots[i].cur->seq, &ks);
        atomic_store(&e->slots[i].kv_bytes, (long long)ks.bytes_current);
        atomic_store(&e->slots[i].evictions, (long long)ks.evictions);
    }
    struct nx_kv_stats ps;
    nx_ctx_kv_stats(e->ctx, &ps);
    atomic_store(&e->pool_in_use, (long long)ps.bytes_current);
    atomic_store(&e->pool_bytes, (long long)ps.bytes_pool);
}

static void *engine_main(void *arg) {
    struct srv_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        for (;;) {
            if (e->stop) break;
            admit(e);
            bool busy = false;
            for (int i = 0; i < e->p.n_slots; i++) busy |= e->slots[i].job != NULL;
            if (busy) break;
            if (e->sessions) { /* wake up now and then to park idle sessions */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&e->cv, &e->mu, &ts);
                srv_sessions_tick(e->sessions, e->ctx);
            } else {
                pthread_cond_wait(&e->cv, &e->mu);
            }
        }
        bool stop = e->stop;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        engine_step(e);
    }
    for (int i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].job) slot_release(e, &e->slots[i], NULL, NX_STATUS_ABORTED,
                                          "the server is shutting down");
    pthread_mutex_lock(&e->mu);
    while (e->q_len > 0) {
        struct srv_job *j = e->queue[0];
        queue_take(e, 0);
        pthread_mutex_unlock(&e->mu);
        job_finish(j, NULL, NX_STATUS_ABORTED, "the server is shutting down");
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

nx_status srv_engine_init(const nx_model *model, const struct srv_engine_params *p,
                          struct srv_engine **out, char *err, size_t errlen) {
    *out = NULL;
    if (p->n_slots < 1 || p->n_slots > 256 || p->queue_max < 1 || p->n_threads < 1) {
        snprintf(err, errlen, "slots must be 1..256, queue and threads at least 1");
        return NX_STATUS_INVALID_ARG;
    }
    struct srv_engine *e = nx_calloc(1, sizeof *e);
    if (!e) return NX_STATUS_NOMEM;
    e->model = model;
    e->p = *p;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->slots = nx_calloc((size_t)p->n_slots, sizeof *e->slots);
    e->queue = nx_calloc((size_t)p->queue_max, sizeof *e->queue);
    e->lp_tmp = nx_malloc(sizeof(float) * (SRV_TOP_MAX + 1));
    nx_status st = NX_STATUS_NOMEM;
    if (!e->slots || !e->queue || !e->lp_tmp) goto fail;
    struct nx_ctx_params cp = p->ctx;
    cp.n_ctx = p->n_ctx;
    int32_t n_sess = NX_MAX(p->sessions.max_resident, 0);
    cp.n_seq_max = p->n_slots + n_sess;
    cp.n_threads = cp.n_threads_batch = p->n_threads;
    if (cp.n_batch <= 0) cp.n_batch = 512;
    if (cp.n_batch < p->n_slots) cp.n_batch = p->n_slots; /* every slot decodes each step */
    st = nx_ctx_init(model, &cp, &e->ctx, err, errlen);
    if (st) goto fail;
    e->n_ctx = nx_ctx_n_ctx(e->ctx);
    e->n_hist = NX_MAX(e->n_ctx, p->n_hist > 0 ? p->n_hist : 65536);
    st = nx_grammar_vocab_init(model, &e->gvocab);
    if (st) goto fail;
    st = nx_batch_init(cp.n_batch, &e->batch);
    if (st) goto fail;
    st = NX_STATUS_NOMEM;
    e->batch_slot = nx_malloc(sizeof(int32_t) * (size_t)cp.n_batch);
    if (!e->batch_slot) goto fail;
    for (int i = 0; i < p->n_slots; i++) {
        struct slot *s = &e->slots[i];
        s->own.seq = i;
        s->cur = &s->own;
        s->logits_at = -1;
        s->own.toks = nx_malloc(sizeof(nx_token) * (size_t)e->n_hist);
        if (!s->own.toks) goto fail;
    }
    if (n_sess > 0) {
        struct srv_sessions_params sp = p->sessions;
        sp.seq0 = p->n_slots;
        sp.n_hist = e->n_hist;
        sp.kv = cp.kv;
        st = srv_sessions_init(&sp, &e->sessions, err, errlen);
        if (st) goto fail;
    }
    if (pthread_create(&e->thread, NULL, engine_main, e)) {
        snprintf(err, errlen, "cannot start the engine thread");
        st = NX_STATUS_NOMEM;
        goto fail;
    }
    e->thread_started = true;
    *out = e;
    return NX_STATUS_OK;
fail:
    if (st == NX_STATUS_NOMEM && !err[0]) snprintf(err, errlen, "out of memory");
    srv_engine_free(e);
    return st;
}

void srv_engine_halt(struct srv_engine *e) {
    if (!e->thread_started) return;
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->thread_started = false;
}

void srv_engine_free(struct srv_engine *e) {
    if (!e) return;
    srv_engine_halt(e);
    if (e->slots)
        for (int i = 0; i < e->p.n_slots; i++) nx_free(e->slots[i].own.toks);
    srv_sessions_free(e->sessions);
    nx_grammar_vocab_free(e->gvocab);
    nx_free(e->batch_slot);
    nx_batch_free(&e->batch);
    nx_ctx_free(e->ctx);
    nx_free(e->slots);
    nx_free(e->queue);
    nx_free(e->lp_tmp);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    nx_free(e);
}

void srv_engine_stats(struct srv_engine *e, struct srv_engine_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    out->n_slots = e->p.n_slots;
    out->queued = e->q_len;
    for (int i = 0; i < e->p.n_slots; i++) {
        if (e->slots[i].job) out->slots_busy++;
        if (i < 64) out->kv_bytes[i] = atomic_load(&e->slots[i].kv_bytes);
        out->evictions += atomic_load(&e->slots[i].evictions);
    }
    pthread_mutex_unlock(&e->mu);
    if (e->sessions) srv_sessions_stats(e->sessions, &out->sessions);
    out->prompt_tokens = atomic_load(&e->prompt_tokens);
    out->prompt_tokens_cached = atomic_load(&e->prompt_cached);
    out->gen_tokens = atomic_load(&e->gen_tokens);
    out->compactions = atomic_load(&e->compactions);
    out->kv_pool_in_use = atomic_load(&e->pool_in_use);
    out->kv_pool_bytes = atomic_load(&e->pool_bytes);
}

const nx_model *srv_engine_model(const struct srv_engine *e) { return e->model; }
int32_t srv_engine_n_ctx(const struct srv_engine *e) { return e->n_ctx; }
