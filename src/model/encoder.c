/*
 * encoder.c - DESIGN: the forward pass of BERT-family encoders (bert, nomic-bert) and the public
 * nx_embed* / nx_rerank_score entry points.
 *
 * One call encodes one sequence of T tokens (T <= n_ctx_train), straight-line, no KV cache:
 *   x_t = token_embd[tok_t] + token_types[type_t] + position_embd[t] (bert only)
 *   x = LayerNorm(x) (token_embd_norm)
 *   per layer:  q, k, v = W x (+ b)        (fused attn_qkv or separate attn_q/k/v)
 *               nomic-bert: RoPE on q, k (pairs (i, i + n_rot/2), theta = t * base^(-2i/n_rot))
 *               a = softmax(q k^T / sqrt(head_dim)) v per head, over ALL tokens (no mask)
 *               x = LayerNorm(x + Wo a (+ bo))                      (attn_output_norm)
 *               bert:  f = Wdown gelu(Wup x + bup) + bdown          (GELU with erf, as BERT's
 *                      "gelu"; llama.cpp uses the tanh approximation, < 1e-3 apart)
 *               nomic: f = Wdown (silu(Wgate x) * Wup x)
 *               x = LayerNorm(x + f)                                (layer_output_norm)
 *   pooling: mean over all T rows, row 0 (CLS), row T-1 (LAST), or RANK: tanh(cls x_0 + cls_b),
 *   then cls.output (+ bias) -> n_cls_out logits. Then optional L2 normalisation.
 * Matrix products go through kern_matmul (activations quantized to each weight's dot type, so
 * F32/F16/BF16/Q8_0/Q4_0/K-quant weights all work); rows of each product and heads of the
 * attention are split over the process's shared thread pool when n_threads > 1 and the
 * operation is worth more than one thread (kern_threads_for; split and RoPE from model/ops.c,
 * as the decoder). kern_matmul's
 * results do not depend on the split and everything else is computed identically whatever the
 * thread count, so outputs are bit-identical for any n_threads.
 * Thread-safety: reads the model only; every buffer is allocated per call.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/threadpool.h"
#include "kern/kern.h"
#include "kern/quant.h"
#include "kern/types.h"
#include "model/encoder.h"
#include "model/ops.h"
#include "tok/tok.h"

/* ---- per-call state ---- */

struct enc_run {
    const struct nx_model *m;
    const struct nx_encoder *enc;
    bool pool_ref; /* holds a reference to the shared pool */
    int nth;
    int64_t T;
    float *x;      /* (T, E) hidden states */
    float *a;      /* (T, E) attention output / FFN output */
    float *qkv;    /* (T, 3E): q | k | v per token */
    float *up;     /* (T, F) */
    float *gate;   /* (T, F) nomic */
    float *sc;     /* (nth, T) attention scores per thread */
    void *xq;      /* activations prepared for the current weight */
    float *rope;   /* (T, n_rot/2, 2) cos, sin */
};

/* Run fn over the participants an operation of single-thread cost cost_ns deserves
   (kern_threads_for, at most nth): on the process's shared pool, or inline when that is one. */
static void run_par(struct enc_run *r, nx_pool_fn fn, void *arg, double cost_ns) {
    int nth = kern_threads_for(cost_ns, r->nth);
    if (r->pool_ref && nth > 1) {
        struct nx_pool *pool = nx_pool_shared_lock();
        nx_pool_run(pool, fn, arg, NX_MIN(nth, nx_pool_size(pool)));
        nx_pool_shared_unlock();
    } else {
        fn(arg, 0, 1);
    }
}

static void split(int64_t n, int ith, int nth, int64_t *lo, int64_t *hi) {
    op_split(n, 1, ith, nth, lo, hi);
}

struct mm_job {
    const struct nx_weight *w;
    const void *xq;
    size_t xq_stride;
    int64_t nc;
    float *y;
    int64_t y_stride;
};

static void mm_task(void *arg, int ith, int nth) {
    const struct mm_job *j = arg;
    int64_t r0, r1;
    split(j->w->ne1, ith, nth, &r0, &r1);
    if (r1 > r0)
        kern_matmul(j->w->type, j->w->ne0, j->w->data, j->w->row_bytes, r0, r1, j->xq,
                    j->xq_stride, j->nc, j->y, j->y_stride);
}

/* y[t*y_stride + r] = W row r . x[t*x_stride ...] (+ b[r]) for t < nc, r < W rows. */
static void matmul(struct enc_run *r, const struct nx_weight *w, const float *b, const float *x,
                   int64_t x_stride, int64_t nc, float *y, int64_t y_stride) {
    size_t rb = kern_act_row_bytes(w->type, w->ne0);
    for (int64_t t = 0; t < nc; t++)
        kern_quantize_act(w->type, x + t * x_stride, (char *)r->xq + (size_t)t * rb, w->ne0);
    struct mm_job j = {w, r->xq, rb, nc, y, y_stride};
    run_par(r, mm_task, &j, kern_matmul_cost_ns(w->type, w->ne0, w->ne1, nc));
    if (b)
        for (int64_t t = 0; t < nc; t++)
            for (int64_t i = 0; i < w->ne1; i++) y[t * y_stride + i] += b[i];
}

/* y = (x - mean) / sqrt(var + eps) * w + b over n elements (population variance), in place. */
static void layer_norm(float *x, int64_t n, const float *w, const float *b, float eps) {
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    double mean = s / (double)n;
    for (int64_t i = 0; i < n; i++) {
        double d = x[i] - mean;
        s2 += d * d;
    }
    float inv = (float)(1.0 / sqrt(s2 / (double)n + (double)eps));
    float mf = (float)mean;
    for (int64_t i = 0; i < n; i++) x[i] = (x[i] - mf) * inv * w[i] + b[i];
}

/* Post-norm residual: x = LayerNorm(x + o) for each of the T rows of E floats. */
static void add_norm(float *x, const float *o, int64_t T, int64_t E, const float *w,
                     const float *b, float eps) {
    for (int64_t t = 0; t < T; t++) {
        for (int64_t i = 0; i < E; i++) x[t * E + i] += o[t * E + i];
        layer_norm(x + t * E, E, w, b, eps);
    }
}

static float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

struct attn_job {
    struct enc_run *r;
};

/* Heads split over threads; per head, every query against every key (bidirectional). */
static void attn_task(void *arg, int ith, int nth) {
    struct enc_run *r = ((struct attn_job *)arg)->r;
    const struct nx_hparams *hp = &r->m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim, T = r->T;
    const float scale = 1.0f / sqrtf((float)hd);
    float *sc = r->sc + (size_t)ith * (size_t)T;
    int64_t h0, h1;
    split(hp->n_head, ith, nth, &h0, &h1);
    for (int64_t h = h0; h < h1; h++) {
        const float *k = r->qkv + E + h * hd, *v = r->qkv + 2 * E + h * hd;
        for (int64_t t = 0; t < T; t++) {
            const float *q = r->qkv + t * 3 * E + h * hd;
            kern_attn_scores(NX_TYPE_F32, hd, k, (size_t)(3 * E) * sizeof(float), T, q, 1, scale,
                             sc, T);
            kern_softmax(sc, T);
            kern_attn_values(NX_TYPE_F32, hd, v, (size_t)(3 * E) * sizeof(float), T, sc, T, 1,
                             r->a + t * E + h * hd);
        }
    }
}

/* Rotate q and k of every token (nomic-bert), NEOX halves. */
static void apply_rope(struct enc_run *r) {
    const struct nx_hparams *hp = &r->m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim, half = hp->n_rot / 2;
    for (int64_t t = 0; t < r->T; t++) {
        const float *cs = r->rope + t * half * 2;
        for (int qk = 0; qk < 2; qk++) {
            for (int64_t h = 0; h < hp->n_head; h++)
                op_rope_apply(r->qkv + t * 3 * E + qk * E + h * hd, cs, (int)(2 * half), true);
        }
    }
}

static void embed_row(const struct nx_weight *w, int64_t row, float *tmp, float *acc) {
    quant_dequantize_row_ref(w->type, (const unsigned char *)w->data + (size_t)row * w->row_bytes,
                             tmp, w->ne0);
    for (int64_t i = 0; i < w->ne0; i++) acc[i] += tmp[i];
}

/* The hidden states after the last layer into r->x. */
static void forward(struct enc_run *r, const nx_token *tok, const int32_t *types) {
    const struct nx_model *m = r->m;
    const struct nx_encoder *enc = r->enc;
    const struct nx_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, F = hp->n_ff, T = r->T;

    for (int64_t t = 0; t < T; t++) {
        float *x = r->x + t * E, *tmp = r->a; /* a is free scratch here */
        memset(x, 0, (size_t)E * sizeof(float));
        embed_row(&m->tok_embd, tok[t], tmp, x);
        if (enc->n_types > 0) embed_row(&enc->type_embd, types ? types[t] : 0, tmp, x);
        if (!enc->nomic) embed_row(&enc->pos_embd, t, tmp, x);
        layer_norm(x, E, enc->tok_norm_w, enc->tok_norm_b, enc->eps);
    }
    if (enc->nomic) {
        const int64_t half = hp->n_rot / 2;
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < half; i++) {
                double th = (double)t * pow((double)hp->rope_base, -2.0 * (double)i / hp->n_rot);
                r->rope[(t * half + i) * 2] = (float)cos(th);
                r->rope[(t * half + i) * 2 + 1] = (float)sin(th);
            }
    }

    for (int il = 0; il < hp->n_layer; il++) {
        const struct nx_enc_layer *L = &enc->layers[il];
        if (L->wqkv.data) {
            matmul(r, &L->wqkv, L->bqkv, r->x, E, T, r->qkv, 3 * E);
        } else {
            matmul(r, &L->wq, L->bq, r->x, E, T, r->qkv, 3 * E);
            matmul(r, &L->wk, L->bk, r->x, E, T, r->qkv + E, 3 * E);
            matmul(r, &L->wv, L->bv, r->x, E, T, r->qkv + 2 * E, 3 * E);
        }
        if (enc->nomic && hp->n_rot > 0) apply_rope(r);
        struct attn_job aj = {r};
        run_par(r, attn_task, &aj,
                kern_attn_cost_ns(NX_TYPE_F32, hp->head_dim, T, 1) * (double)T * hp->n_head);
        /* x = LN(x + Wo a + bo): the product goes to qkv (free now), then the residual */
        matmul(r, &L->wo, L->bo, r->a, E, T, r->qkv, E);
        add_norm(r->x, r->qkv, T, E, L->attn_norm_w, L->attn_norm_b, enc->eps);
        matmul(r, &L->up, L->bup, r->x, E, T, r->up, F);
        if (enc->nomic) {
            matmul(r, &L->gate, NULL, r->x, E, T, r->gate, F);
            for (int64_t t = 0; t < T; t++) kern_swiglu(r->gate + t * F, r->up + t * F, F);
            matmul(r, &L->down, L->bdown, r->gate, F, T, r->a, E);
        } else {
            for (int64_t i = 0; i < T * F; i++) r->up[i] = gelu_erf(r->up[i]);
            matmul(r, &L->down, L->bdown, r->up, F, T, r->a, E);
        }
        add_norm(r->x, r->a, T, E, L->out_norm_w, L->out_norm_b, enc->eps);
    }
}

/* ---- scratch sizing ---- */

static size_t act_bytes(const struct nx_weight *w) {
    return w->data ? kern_act_row_bytes(w->type, w->ne0) : 0;
}

static size_t max_act_row(const struct nx_model *m) {
    const struct nx_encoder *enc = m->enc;
    size_t n = NX_MAX(act_bytes(&enc->cls), act_bytes(&enc->cls_out));
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct nx_enc_layer *L = &enc->layers[il];
        const struct nx_weight *ws[] = {&L->wqkv, &L->wq, &L->wk, &L->wv, &L->wo,
                                        &L->up, &L->gate, &L->down};
        for (size_t i = 0; i < NX_ARRAY_LEN(ws); i++) n = NX_MAX(n, act_bytes(ws[i]));
    }
    return n;
}

static void run_free(struct enc_run *r) {
    nx_free_aligned(r->x);
    nx_free_aligned(r->a);
    nx_free_aligned(r->qkv);
    nx_free_aligned(r->up);
    nx_free_aligned(r->gate);
    nx_free_aligned(r->sc);
    nx_free_aligned(r->xq);
    nx_free_aligned(r->rope);
    if (r->pool_ref) nx_pool_shared_release();
}

static nx_status run_init(struct enc_run *r, const struct nx_model *m, int64_t T, int nth) {
    memset(r, 0, sizeof *r);
    r->m = m;
    r->enc = m->enc;
    r->T = T;
    r->nth = nth;
    const size_t E = (size_t)m->hp.n_embd, F = (size_t)m->hp.n_ff, t = (size_t)T;
    r->x = nx_malloc_aligned(t * E * sizeof(float));
    r->a = nx_malloc_aligned(t * E * sizeof(float));
    r->qkv = nx_malloc_aligned(t * 3 * E * sizeof(float));
    r->up = nx_malloc_aligned(t * F * sizeof(float));
    r->gate = nx_malloc_aligned(t * F * sizeof(float));
    r->sc = nx_malloc_aligned((size_t)nth * t * sizeof(float));
    r->xq = nx_malloc_aligned(t * max_act_row(m) + 64);
    r->rope = nx_malloc_aligned(t * (size_t)(m->hp.n_rot / 2 + 1) * 2 * sizeof(float));
    if (!r->x || !r->a || !r->qkv || !r->up || !r->gate || !r->sc || !r->xq || !r->rope)
        return NX_STATUS_NOMEM;
    if (nth > 1) {
        if (nx_pool_shared_acquire(nth, NULL, 0, 0) != NX_STATUS_OK) return NX_STATUS_NOMEM;
        r->pool_ref = true;
    }
    return NX_STATUS_OK;
}

/* ---- public API ---- */

bool nx_model_is_encoder(const nx_model *m) { return m && m->enc; }

enum nx_pooling nx_model_pooling(const nx_model *m) {
    return m && m->enc ? (enum nx_pooling)m->enc->pooling : NX_POOLING_UNSPECIFIED;
}

int32_t nx_model_n_cls_out(const nx_model *m) { return m && m->enc ? m->enc->n_cls_out : 0; }

int32_t nx_model_n_max_tokens(const nx_model *m) {
    return m && m->enc ? m->enc->n_max_tokens : 0;
}

struct nx_embed_params nx_embed_default_params(void) {
    struct nx_embed_params p = {.pooling = NX_POOLING_UNSPECIFIED, .n_threads = 1,
                                .normalize = true};
    return p;
}

nx_status nx_embed_tokens(const nx_model *m, const nx_token *tokens, const int32_t *types,
                          int32_t n, const struct nx_embed_params *params, float *out,
                          int32_t dim, char *err, size_t errlen) {
    struct nx_embed_params p = params ? *params : nx_embed_default_params();
    if (err && errlen) err[0] = 0;
    if (!m || !m->enc)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "not an encoder model (embeddings need a bert or nomic-bert GGUF)");
    const struct nx_encoder *enc = m->enc;
    int pooling = p.pooling == NX_POOLING_UNSPECIFIED ? enc->pooling : p.pooling;
    if (pooling < NX_POOLING_MEAN || pooling > NX_POOLING_RANK)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "pooling %d is not supported (mean 1, cls 2, last 3, rank 4)", pooling);
    if (pooling == NX_POOLING_RANK && enc->n_cls_out == 0)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "rank pooling needs a classification head (cls.weight, cls.output.weight), "
                       "which this model does not have");
    if (p.n_threads < 1 || p.n_threads > 512)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "n_threads must be in [1, 512]");
    if (!tokens || n < 1 || n > enc->n_max_tokens)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "token count %d out of range [1, %d]", n,
                       enc->n_max_tokens);
    int32_t need = pooling == NX_POOLING_RANK ? enc->n_cls_out : m->hp.n_embd;
    if (!out || dim < need)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "output has room for %d floats, %d needed", dim, need);
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= m->hp.n_vocab)
            return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                           "token %d at position %d out of range [0, %d)", tokens[i], i,
                           m->hp.n_vocab);
        int32_t ty = types ? types[i] : 0;
        if (ty < 0 || ty >= NX_MAX(enc->n_types, 1))
            return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                           "token type %d at position %d out of range [0, %d)", ty, i,
                           NX_MAX(enc->n_types, 1));
    }
    kern_init();
    struct enc_run r;
    int nth = (int)NX_MIN(p.n_threads, NX_MAX(m->hp.n_head, 1));
    if (run_init(&r, m, n, nth) != NX_STATUS_OK) {
        run_free(&r);
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory (sequence of %d tokens)", n);
    }
    forward(&r, tokens, types);
    const int64_t E = m->hp.n_embd;
    if (pooling == NX_POOLING_RANK) {
        float *h = r.a; /* (E): the dense layer on [CLS] */
        matmul(&r, &enc->cls, enc->cls_b, r.x, E, 1, h, E);
        for (int64_t i = 0; i < E; i++) h[i] = tanhf(h[i]);
        matmul(&r, &enc->cls_out, enc->cls_out_b, h, E, 1, out, enc->n_cls_out);
    } else {
        if (pooling == NX_POOLING_MEAN) {
            for (int64_t i = 0; i < E; i++) {
                double s = 0;
                for (int64_t t = 0; t < n; t++) s += r.x[t * E + i];
                out[i] = (float)(s / n);
            }
        } else {
            int64_t row = pooling == NX_POOLING_CLS ? 0 : n - 1;
            memcpy(out, r.x + row * E, (size_t)E * sizeof(float));
        }
        if (p.normalize) {
            double s = 0;
            for (int64_t i = 0; i < E; i++) s += (double)out[i] * out[i];
            if (s > 0) {
                float inv = (float)(1.0 / sqrt(s));
                for (int64_t i = 0; i < E; i++) out[i] *= inv;
            }
        }
    }
    run_free(&r);
    return NX_STATUS_OK;
}

/* WordPiece tokens of text (no specials) into a new array; *n their count. */
static nx_status word_pieces(const nx_model *m, const char *text, nx_token **out, int32_t *n,
                             char *err, size_t errlen) {
    size_t len = text ? strlen(text) : 0;
    if (len > (size_t)1 << 28)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "text longer than 256 MiB");
    /* every word piece (or [UNK]) consumes at least one byte */
    int32_t cap = (int32_t)len + 1;
    nx_token *t = nx_malloc((size_t)cap * sizeof *t);
    if (!t) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    int32_t k = len ? vocab_tokenize(m->vocab, text, len, t, cap, false, false) : 0;
    if (k < 0) {
        nx_free(t);
        return nx_errf(err, errlen, k == INT32_MIN ? NX_STATUS_NOMEM : NX_STATUS_INVALID_ARG,
                       "tokenizer failed on the text");
    }
    *out = t;
    *n = k;
    return NX_STATUS_OK;
}

static nx_status cls_sep(const nx_model *m, nx_token *cls, nx_token *sep, char *err,
                         size_t errlen) {
    *cls = vocab_cls(m->vocab) >= 0 ? vocab_cls(m->vocab) : vocab_bos(m->vocab);
    *sep = vocab_sep(m->vocab) >= 0 ? vocab_sep(m->vocab) : vocab_eos(m->vocab);
    if (*cls < 0 || *sep < 0 || *cls >= m->hp.n_vocab || *sep >= m->hp.n_vocab)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "the tokenizer has no [CLS] / [SEP] tokens (tokenizer.ggml.cls_token_id, "
                       "tokenizer.ggml.seperator_token_id)");
    return NX_STATUS_OK;
}

nx_status nx_embed(const nx_model *m, const char *text, const struct nx_embed_params *params,
                   float *out, int32_t dim, char *err, size_t errlen) {
    if (!m || !m->enc)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "not an encoder model (embeddings need a bert or nomic-bert GGUF)");
    nx_token cls, sep, *wp = NULL;
    int32_t n;
    nx_status st = cls_sep(m, &cls, &sep, err, errlen);
    if (st || (st = word_pieces(m, text, &wp, &n, err, errlen))) return st;
    int32_t keep = NX_MIN(n, m->enc->n_max_tokens - 2);
    if (keep < 0) keep = 0;
    nx_token *seq = nx_malloc((size_t)(keep + 2) * sizeof *seq);
    if (!seq) {
        nx_free(wp);
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    seq[0] = cls;
    memcpy(seq + 1, wp, (size_t)keep * sizeof *seq);
    seq[keep + 1] = sep;
    st = nx_embed_tokens(m, seq, NULL, keep + 2, params, out, dim, err, errlen);
    nx_free(seq);
    nx_free(wp);
    return st;
}

nx_status nx_rerank_score(const nx_model *m, const char *query, const char *document,
                          const struct nx_embed_params *params, float *out, char *err,
                          size_t errlen) {
    if (!m || !m->enc || m->enc->n_cls_out < 1)
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "not a reranker: the model has no classification head (cls.output.weight)");
    if (!out) return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "out is NULL");
    nx_token cls, sep, *q = NULL, *d = NULL;
    int32_t nq, nd;
    nx_status st = cls_sep(m, &cls, &sep, err, errlen);
    if (st || (st = word_pieces(m, query, &q, &nq, err, errlen))) return st;
    if ((st = word_pieces(m, document, &d, &nd, err, errlen))) {
        nx_free(q);
        return st;
    }
    /* longest-first truncation: drop from the longer side (the document on ties) */
    int32_t room = NX_MAX(m->enc->n_max_tokens - 3, 0);
    while (nq + nd > room) {
        if (nq > nd) nq--;
        else nd--;
    }
    int32_t n = nq + nd + 3;
    nx_token *seq = nx_malloc((size_t)n * sizeof *seq);
    int32_t *ty = nx_malloc((size_t)n * sizeof *ty);
    float *logits = nx_malloc((size_t)m->enc->n_cls_out * sizeof *logits);
    if (!seq || !ty || !logits) {
        st = nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        goto done;
    }
    seq[0] = cls;
    memcpy(seq + 1, q, (size_t)nq * sizeof *seq);
    seq[nq + 1] = sep;
    memcpy(seq + nq + 2, d, (size_t)nd * sizeof *seq);
    seq[n - 1] = sep;
    int32_t second = m->enc->n_types >= 2 ? 1 : 0;
    for (int32_t i = 0; i < n; i++) ty[i] = i < nq + 2 ? 0 : second;
    struct nx_embed_params p = params ? *params : nx_embed_default_params();
    p.pooling = NX_POOLING_RANK;
    st = nx_embed_tokens(m, seq, ty, n, &p, logits, m->enc->n_cls_out, err, errlen);
    if (st == NX_STATUS_OK) *out = logits[0];
done:
    nx_free(seq);
    nx_free(ty);
    nx_free(logits);
    nx_free(q);
    nx_free(d);
    return st;
}
