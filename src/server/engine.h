/*
 * engine.h - the server's generation engine: a bounded queue of jobs, N slots, and one engine
 * thread that runs every forward pass. HTTP threads never run the model; the engine thread
 * never touches a socket (STYLE §4.3: work on the engine thread, completion on the I/O side).
 *
 * DESIGN: a job is shared by the HTTP thread that submitted it and the engine (reference
 * count). The engine writes released text, token records and the final state into the job
 * under the job's mutex and signals its condition variable; the HTTP side reads what is new.
 * A job whose client went away is cancelled (srv_job_cancel) and its slot freed at the
 * engine's next step. The engine owns one context with a sequence per slot (one shared KV
 * pool); each step is one batched forward pass (nx_decode_batch) over every generating slot's
 * next token plus prompt chunks of the slots still prefilling, so the weights are read once
 * for all of them (continuous batching). Each slot keeps the tokens its sequence holds, so a
 * new request reuses the longest common prefix of the slot it is given (the free slot with the
 * longest such prefix is chosen; a sequence whose policy has evicted is not reused, since its
 * cache is then a compressed history). Every request samples with its own generator, seeded
 * from the request (or from a server counter when it has no seed); a sequence's logits do not
 * depend on what else is in the batch, so a request's output does not depend on the load.
 */
#ifndef NX_SERVER_ENGINE_H
#define NX_SERVER_ENGINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "nexus.h"
#include "server/oai.h"
#include "server/sessions.h"

#define SRV_TOP_MAX 20

struct srv_tokinfo {
    nx_token id;
    float logprob;                /* log-probability of id under the model's distribution */
    int32_t n_top;
    nx_token top_id[SRV_TOP_MAX]; /* most likely tokens, best first */
    float top_lp[SRV_TOP_MAX];
};

enum srv_job_state { SRV_JOB_QUEUED = 0, SRV_JOB_RUNNING = 1, SRV_JOB_DONE = 2 };

struct srv_job {
    struct srv_gen_request req;   /* owned */
    struct srv_constraint con;    /* owned: the output's grammar, prefill, tool-call format */
    nx_token *prompt;             /* (n_prompt) owned */
    int32_t n_prompt;
    double t_submit, t_first, t_done; /* nx_time_s; t_first: first generated token */
    double deadline;              /* nx_time_s after which the job ends (0: none) */

    pthread_mutex_t mu;           /* guards everything below */
    pthread_cond_t cv;
    enum srv_job_state state;
    char *text;                   /* (cap_text) released text, NUL-terminated */
    size_t n_text, cap_text;
    struct srv_tokinfo *toks;     /* (cap_toks) generated tokens (logprobs requests only) */
    int32_t n_toks, cap_toks;
    int32_t n_gen;                /* tokens generated */
    int32_t n_cached;             /* prompt tokens reused from the slot's cache */
    const char *finish;           /* "stop", "length", or NULL while running */
    nx_status error;              /* non-OK: the job failed; errmsg says why */
    char errmsg[256];

    atomic_bool cancel;
    atomic_int refs;
};

struct srv_engine_params {
    int32_t n_slots;      /* concurrent generations (-np) */
    int32_t queue_max;    /* jobs waiting for a slot before submit refuses (429) */
    int32_t n_ctx;        /* positions of each slot's sequence */
    int32_t n_hist;       /* tokens a conversation may reach when its sequence evicts (it is
                             compacted at n_ctx: nx_kv_seq_compact); 0: 65536, at least n_ctx */
    int32_t n_threads;
    int32_t prefill_chunk; /* most prompt tokens one step carries while some slot is
                              generating (0: fill the batch), so decode keeps moving */
    struct nx_ctx_params ctx; /* KV type and eviction policy of every slot */
    struct srv_sessions_params sessions; /* max_resident 0: no sessions (seq0, n_ctx and kv
                                            are filled in by the engine) */
};

struct srv_engine;

/* Start the engine thread with n_slots contexts on model (borrowed; outlives the engine).
   Errors: INVALID_ARG, NOMEM (err says which slot failed). */
nx_status srv_engine_init(const nx_model *model, const struct srv_engine_params *p,
                          struct srv_engine **out, char *err, size_t errlen);
/* Stop the thread: running and queued jobs end with ABORTED, later submits are refused. The
   engine stays allocated (stats and submit remain safe to call). Idempotent. */
void srv_engine_halt(struct srv_engine *e);
/* Halt, then free the slots. NULL is a no-op. */
void srv_engine_free(struct srv_engine *e);

/* A job for req and con (both moved into the job: the caller's structs are cleared; con may
   be NULL), tokenized from text (owned by the caller). Errors: INVALID_ARG (prompt over the
   context: err says by how much), NOMEM (req and con freed). The job starts with one
   reference. */
nx_status srv_job_create(struct srv_engine *e, struct srv_gen_request *req,
                         struct srv_constraint *con, const char *text, double timeout_s,
                         struct srv_job **out, char *err, size_t errlen);
void srv_job_unref(struct srv_job *j);
void srv_job_cancel(struct srv_job *j);

/* Queue a job (the engine takes its own reference). KV_FULL when the queue is full. */
nx_status srv_engine_submit(struct srv_engine *e, struct srv_job *j);

struct srv_engine_stats {
    int32_t n_slots, slots_busy, queued;
    int64_t prompt_tokens, prompt_tokens_cached, gen_tokens;
    int64_t kv_bytes[64];   /* per slot (first 64) */
    int64_t evictions;
    int64_t compactions;    /* sequences renumbered at n_ctx so they could go on */
    int64_t kv_pool_in_use, kv_pool_bytes; /* the KV pool's bytes in use and allocated, as
                                              of the last step */
    struct srv_sessions_stats sessions;
};
void srv_engine_stats(struct srv_engine *e, struct srv_engine_stats *out);

const nx_model *srv_engine_model(const struct srv_engine *e);
int32_t srv_engine_n_ctx(const struct srv_engine *e);

#endif
