/*
 * ctx_impl.h - the inside of an nx_ctx, shared by the files that make up a context: context.c
 * (lifecycle, state, the decode entry points), forward.c (the forward pass), splice.c and
 * seqcache.c (range operations, splicing, the sequence cache). Nothing else includes it.
 */
#ifndef NX_CTX_IMPL_H
#define NX_CTX_IMPL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "kv/kv_cache.h"
#include "kv/kv_evict.h"
#include "kv/kv_policy.h"
#include "nexus.h"

/* One sequence of a context: its position, policy and evictor (its tables are in the pool). */
struct ctx_seq {
    int32_t n_past;             /* the next position */
    int64_t seen_base;          /* positions closed by nx_kv_seq_compact: the tokens seen are
                                   n_past + seen_base (what a density budget counts) */
    struct nx_kv_params kv;     /* as set (kv.policy points at policy_name) */
    char policy_name[32];
    const struct kv_policy *pol;
    struct kv_policy_params pp;
    struct kv_evictor *ev;      /* NULL when nothing is ever evicted */
    bool acc_attn;              /* accumulate attention per cached token (h2o) */
};

/* decode steps of up to this many tokens may split one (token, KV head)'s attention across
   threads by KV block (forward.c) */
#define CTX_ATT_SPLIT_TOKENS 2
/* prompt tokens of one sequence whose attention reads each full KV block once (forward.c) */
#define CTX_ATT_TILE 8

struct nx_ctx {
    const struct nx_model *model;
    struct nx_ctx_params p;
    struct nx_pool *pool;       /* the shared pool, valid while a job runs (see forward.c) */
    bool pool_ref;              /* holds a reference to the shared pool */
    int n_threads_max;          /* threads the per-thread buffers are sized for */

    struct kv_cache *kv;        /* one pool, one table per (sequence, layer, KV head) */
    int32_t n_seq;
    struct ctx_seq *seqs;       /* (n_seq) */
    struct kv_evict_bufs *ev_bufs; /* shared by the evictors; NULL until one is needed */
    int64_t max_tokens;         /* most tokens one table can hold */

    /* work buffers for up to n_batch tokens */
    float *x;      /* (n_batch, n_embd) residual stream */
    float *xn;     /* (n_batch, max(n_embd, qd)) normed input / attention output */
    float *q;      /* (n_batch, qd) */
    float *k;      /* (n_batch, kvd) */
    float *v;      /* (n_batch, kvd) */
    float *ffa;    /* (n_batch, max(n_ff, n_embd)) gate / projection output */
    float *ffb;    /* (n_batch, n_ff) up */
    unsigned char *xq_a; /* (n_batch, xq_row) activations prepared for a weight type */
    unsigned char *xq_b;
    size_t xq_row;
    float *rope_cs;  /* (n_batch, n_rot/2, 2) cos, sin */
    float *scores;   /* (n_threads_max, gqa, max_tokens) attention probabilities */
    float *att_tmp;  /* (n_threads_max, 2 * CTX_ATT_TILE * gqa, head_dim) an attention
                        tile's queries and outputs */
    float *att_parts; /* (max(n_threads_max * CTX_ATT_TILE, CTX_ATT_SPLIT_TOKENS * n_head_kv),
                         blocks of max_tokens, gqa, head_dim + 2) fused attention partial states */

    /* the current forward step (forward.c reads these) */
    int32_t job_n;
    int32_t *job_tok;   /* (n_batch) */
    int32_t *job_pos;   /* (n_batch) */
    int32_t *job_seq;   /* (n_batch) */
    int32_t *job_tail;  /* (n_batch) later entries of the same sequence in the step */
    int32_t *job_out;   /* (n_batch) entries whose logits are computed, in order */
    int32_t job_nout;
    int32_t *job_bseq;  /* (n_batch) the step's distinct sequences, in order of appearance */
    int32_t job_nbseq;
    bool job_acc;       /* some sequence of the step accumulates attention */
    float *job_logits;  /* where the job_nout logits rows go */
    int64_t *seq_count; /* (n_seq) scratch: entries per sequence */
    int32_t *seq_last;  /* (n_seq) scratch: last position per sequence */
    atomic_llong chunk_ctr; /* matmul chunk claims of the current pass (see forward.c) */

    /* logits of the last call */
    float *logits;      /* (logits_cap, n_vocab) */
    int32_t logits_cap;
    bool logits_all;
    int32_t last_n;     /* tokens (entries) in the last decode call */
    bool last_batch;    /* the last call was nx_decode_batch: row_of maps entries */
    int32_t *row_of;    /* (n_batch) logits row of each entry of the last batch, -1 none */

    struct ctx_attn_probe *probe; /* NULL unless ctx_attn_probe_enable (probe.c) */

    char err[256];
};

/* forward.c: run the step described by the job fields on nth threads of the shared pool. */
void forward_run(struct nx_ctx *c, int nth);
/* probe.c: record layer il of the step's last entry into c->probe (one thread, after the
   layer's attention and before anything overwrites q or the attention output). */
void probe_capture(struct nx_ctx *c, int il);
/* probe.c: free c->probe. */
void probe_free(struct nx_ctx *c);
/* forward.c: run fn on nth threads of the shared pool (c->pool is set meanwhile). */
void ctx_pool_run(struct nx_ctx *c, void (*fn)(void *, int, int), void *arg, int nth);

#endif
