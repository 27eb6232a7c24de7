/*
 * fidelity.c - the runner of `nexus eval`: fidelity of KV eviction against the dense model,
 * teacher-forced, paired, with bounds.
 *
 * DESIGN: streams are either text the model samples itself at temperature 1 from BOS with seed
 * seed + stream index, or consecutive pieces of a text file (--file; BOS, then stream_len - 1
 * tokens of the file), so every configuration sees the same tokens. The first half of a
 * stream is the prompt (one multi-token decode, compressed at its end in both regimes); the
 * rest is teacher-forced one token at a time (evicting only in the stream regime). Scored
 * positions: in the prefill regime the first score_len after the prompt (the part that still
 * depends on what the compression kept), in the stream regime all of the second half.
 * A configuration is policy spec x density x regime x budget rule: "seen" (budget = density x
 * tokens seen, growing) or "prompt" (fixed at density x prompt length, the paper's protocol),
 * run for `seeds` eviction seeds when its selection depends on the seed (random, nexus's
 * reservoir; each stream's figure is the mean over the seeds), once otherwise. Per stream:
 *   kl    = mean KL(dense || policy) of the next-token distributions (nats),
 *   top1  = share of positions where both argmaxes agree,
 *   nll   = mean -log p_policy(next token) (ppl = exp(mean nll)),
 *   lr    = long range: over positions where the dense model puts >= 0.5 on its argmax and a
 *           local-only cache (streaming holding only its sink and recent blocks, stream
 *           regime) predicts something else, the share where the policy's argmax is the
 *           dense one's (what only context beyond the local window can give),
 *   kv    = KV bytes the policy holds / bytes the dense cache holds (all layers and heads,
 *           whole blocks), mean over the scored positions;
 *   attn  = attention-level fidelity, from the context's attention probe (model/context.h): at
 *           each scored position and layer, the relative L2 error ||o - o_dense|| / ||o_dense||
 *           of each query head's attention output (before the output projection) against the
 *           dense run's at the same position, averaged over heads (attn_err_layers: per layer;
 *           attn_err: the mean over layers); it compounds through the layers, as the logits do;
 *   mass  = the share of the dense attention of the same query (dense query, dense keys, all
 *           of positions 0..p) that falls on the positions the policy's attention read at that
 *           step (what its cache still held), averaged over heads, layers and positions: 1 for
 *           the dense cache, the attention mass a sink + recent cache keeps for local-only.
 * Every figure is reported with its paired difference from the reference configuration (the
 * reference spec at the same density, regime and budget rule) and that difference's standard
 * error over streams. The bounds are policies like any other: random, bottomk and oracle
 * (prefill regime only, NaN in the stream regime: the whole scored range is decoded as part of
 * one prompt with the window set to its queries, then removed and decoded again from the
 * compressed cache).
 * Streams run in parallel worker processes (threads of them, eval_parmap: the engine's
 * process-wide thread pool would serialise threads), each on single-threaded contexts, so the
 * numbers are the same at any thread count and more threads never make it slower; progress with an ETA goes
 * to stderr, a table to stdout, one JSON record per configuration to --json, and per regime
 * and budget rule one SVG (KL, top-1, long range against density, one line per policy, paired
 * SE bars) to --svg DIR; files are written atomically.
 */
#include "eval/eval.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "gen/generate.h"
#include "kern/quant.h"
#include "kv/kv_cache.h"
#include "model/context.h"
#include "model/model.h"
#include "eval/metrics.h"
#include "eval/outfile.h"
#include "eval/parmap.h"
#include "eval/progress.h"
#include "eval/svg.h"

enum { MAX_CFG = 512, MAX_SEEDS = 64, BUDGET_SEEN = 0, BUDGET_PROMPT = 1 };
enum { ATT_LAYERS = 32 }; /* layers with their own attention-error figure (the mean has all) */

struct cfg {
    const char *spec;
    float density; /* 1 for full */
    int regime, budget;
};

struct cell { /* one configuration on one stream (mean over seeds) */
    double kl, top1, nll, lr, kv;
    double aerr, mass;            /* attention-output error (mean over layers), attention mass */
    double aerr_l[ATT_LAYERS];    /* attention-output error per layer */
    int lr_n; /* long-range positions of the stream (0: lr is NaN) */
};

struct run {
    const nx_model *m;
    const struct eval_params *ep;
    const struct cfg *cfgs;
    int n_cfg, streams, seeds;
    const nx_token *toks;
    struct cell *cells; /* [cfg * streams + stream] */
};

static int argmax(const float *l, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

static const char *budget_name(int b) { return b == BUDGET_PROMPT ? "prompt" : "seen"; }

/* A context for a policy spec; threads as given. NULL with a message on failure. */
static nx_ctx *make_spec(const nx_model *m, const struct eval_params *ep, const char *spec,
                         float density, int regime, int budget, int threads, uint64_t seed) {
    struct nx_ctx_params cp = ep->base ? *ep->base : nx_ctx_default_params();
    cp.kv.budget = 0;
    cp.n_ctx = ep->stream_len + 1;
    cp.n_batch = ep->stream_len + 1; /* a prompt is compressed once, at its end */
    cp.n_threads = cp.n_threads_batch = threads;
    char name[64];
    if (eval_policy_spec(spec, &cp.kv, name, sizeof name, "eval")) return NULL;
    cp.kv.policy = name;
    cp.kv.regime = regime;
    cp.kv.seed = (ep->base ? ep->base->kv.seed : 0) + seed;
    if (budget == BUDGET_PROMPT && strcmp(name, "full")) {
        int b = (int)floorf(density * (float)(ep->stream_len / 2));
        cp.kv.budget = b > 0 ? b : 1;
    } else {
        cp.kv.density = density;
    }
    if (!strcmp(name, "oracle")) {
        int fut = ep->score_len > 0 ? ep->score_len : ep->stream_len - ep->stream_len / 2;
        cp.kv.window = fut < 256 ? fut : 256;
        if (cp.kv.budget == 0) cp.kv.budget = (int)floorf(density * (float)(ep->stream_len / 2));
        cp.kv.budget += cp.kv.window;
        cp.kv.density = 0;
    }
    nx_ctx *c = NULL;
    char err[256];
    if (nx_ctx_init(m, &cp, &c, err, sizeof err)) fprintf(stderr, "eval: %s: %s\n", spec, err);
    return c;
}

static nx_ctx *make(const nx_model *m, const struct eval_params *ep, const char *policy,
                    float density, int regime) {
    return make_spec(m, ep, policy, density, regime, BUDGET_SEEN, 1, 0);
}

/* The model's own text: temperature-1 sampling from BOS. */
static int sample_stream(const nx_model *m, const struct eval_params *ep, uint64_t seed,
                         nx_token *toks) {
    nx_ctx *c = make(m, ep, "full", 0, NX_KV_REGIME_PREFILL);
    if (!c) return -1;
    struct nx_sampler_params sp = nx_sampler_default_params();
    sp.temp = 1.0f;
    sp.top_k = 0;
    sp.top_p = 1.0f;
    sp.min_p = 0;
    sp.seed = seed;
    nx_sampler *s;
    if (nx_sampler_init(&sp, nx_model_n_vocab(m), &s)) {
        nx_ctx_free(c);
        return -1;
    }
    toks[0] = nx_token_bos(m) >= 0 ? nx_token_bos(m) : 0;
    struct nx_gen_params gp = nx_gen_default_params();
    gp.max_tokens = ep->stream_len - 1;
    gp.ignore_eog = true;
    gp.sampler = s;
    gp.tokens = toks + 1;
    gp.tokens_cap = ep->stream_len - 1;
    struct nx_gen_result gr;
    struct nx_err err;
    int rc = 0;
    if (nx_generate(m, c, toks, 1, &gp, &gr, &err) || gr.n_generated != ep->stream_len - 1) {
        fprintf(stderr, "eval: sampling: %s\n", nx_ctx_last_error(c));
        rc = -1;
    }
    nx_sampler_free(s);
    nx_ctx_free(c);
    return rc;
}

struct done_arg {
    struct nx_progress *pg;
    int per_stream, done;
};

static void stream_done(int s, void *arg) {
    struct done_arg *d = arg;
    (void)s;
    d->done += d->per_stream;
    nx_progress_update(d->pg, d->done, "streams");
}

struct sample_arg {
    const nx_model *m;
    const struct eval_params *ep;
};

static int sample_item(int s, void *rec, void *arg) {
    const struct sample_arg *a = arg;
    return sample_stream(a->m, a->ep, a->ep->seed + (uint64_t)s, rec);
}

/* Streams cut from a text file: BOS (when the model has one), then stream_len - 1 file tokens,
   consecutive and non-overlapping. Returns the number of streams (<= want), or a negative
   nx_status (IO, NOMEM, INVALID_ARG: too short) with a message on stderr. */
static int file_streams(const nx_model *m, const struct eval_params *ep, nx_token *toks,
                        int want) {
    size_t len;
    char *text = eval_read_file(ep->text_file, &len, "eval");
    if (!text) return NX_STATUS_IO;
    int32_t n = 0;
    nx_token *ft = eval_tokenize(m, text, len, 0, &n);
    nx_free(text);
    if (!ft) {
        fprintf(stderr, "eval: cannot tokenize '%s'\n", ep->text_file);
        return NX_STATUS_NOMEM;
    }
    int L = ep->stream_len, bos = nx_token_bos(m) >= 0, per = L - bos;
    int have = per > 0 ? n / per : 0;
    if (have < 1) {
        fprintf(stderr, "eval: '%s' gives %d tokens, fewer than one stream of %d\n",
                ep->text_file, n, L);
        nx_free(ft);
        return NX_STATUS_INVALID_ARG;
    }
    int ns = have < want ? have : want;
    for (int s = 0; s < ns; s++) {
        nx_token *t = toks + (size_t)s * L;
        if (bos) t[0] = nx_token_bos(m);
        memcpy(t + bos, ft + (size_t)s * per, sizeof *t * (size_t)per);
    }
    if (ns < want)
        fprintf(stderr, "eval: '%s' holds %d streams of %d tokens (%d asked for)\n",
                ep->text_file, ns, L, want);
    nx_free(ft);
    return ns;
}



/* Scored positions [half, end) of a configuration's regime. */
static int score_end(const struct eval_params *ep, int regime) {
    int L = ep->stream_len, half = L / 2;
    if (regime == NX_KV_REGIME_PREFILL && ep->score_len > 0 && half + ep->score_len < L)
        return half + ep->score_len;
    return L;
}

/* The per-stream references: dense logits at [half, L), the long-range mask, and the dense
   run's attention (probe rows per scored position, keys of every position). */
struct stream_ref {
    float *dense;      /* (L - half) x nv */
    unsigned char *lr; /* (L - half): dense confident and the local-only cache disagrees */
    int nl, nh, nkv, hd;
    float *dq, *dout;  /* (L - half, nl, nh * hd) dense queries and attention outputs */
    float *dkeys;      /* (nl, nkv, L, hd) dense keys after RoPE, by position */
    double *sc;        /* (L) scratch: one head's attention weights */
    double *errl;      /* (nl) scratch: one step's attention-output error per layer */
};

static void stream_ref_free(struct stream_ref *sr) {
    nx_free(sr->dense);
    nx_free(sr->lr);
    nx_free(sr->dq);
    nx_free(sr->dout);
    nx_free(sr->dkeys);
    nx_free(sr->sc);
    nx_free(sr->errl);
}

/* Allocates the reference of an L-token stream; -1 on out of memory. */
static int stream_ref_alloc(const nx_model *m, int L, struct stream_ref *sr) {
    const struct nx_hparams *hp = &m->hp;
    int half = L / 2;
    size_t steps = (size_t)(L - half);
    *sr = (struct stream_ref){.nl = hp->n_layer, .nh = hp->n_head, .nkv = hp->n_head_kv,
                              .hd = hp->head_dim};
    size_t qd = (size_t)sr->nh * (size_t)sr->hd;
    sr->dense = nx_malloc(sizeof(float) * steps * (size_t)nx_model_n_vocab(m));
    sr->lr = nx_malloc(steps);
    sr->dq = nx_malloc(sizeof(float) * steps * (size_t)sr->nl * qd);
    sr->dout = nx_malloc(sizeof(float) * steps * (size_t)sr->nl * qd);
    sr->dkeys = nx_calloc((size_t)sr->nl * (size_t)sr->nkv * (size_t)L * (size_t)sr->hd,
                          sizeof(float));
    sr->sc = nx_malloc(sizeof(double) * (size_t)L);
    sr->errl = nx_malloc(sizeof(double) * (size_t)sr->nl);
    return sr->dense && sr->lr && sr->dq && sr->dout && sr->dkeys && sr->sc && sr->errl ? 0 : -1;
}

/* The probe's rows of the dense run's step at scored index si. */
static void keep_probe_rows(struct stream_ref *sr, const struct ctx_attn_probe *pr, int si) {
    size_t n = (size_t)sr->nl * (size_t)sr->nh * (size_t)sr->hd;
    memcpy(sr->dq + (size_t)si * n, pr->q, sizeof(float) * n);
    memcpy(sr->dout + (size_t)si * n, pr->out, sizeof(float) * n);
}

/* The dense cache's keys (positions 0 .. n - 1, each table in position order) into sr->dkeys;
   -1 when a table is not the dense one expected. */
static int keep_dense_keys(nx_ctx *d, struct stream_ref *sr, int L, int n) {
    struct kv_cache *kv = ctx_kv_cache(d);
    for (int l = 0; l < sr->nl; l++)
        for (int h = 0; h < sr->nkv; h++) {
            const struct kv_table *t = kv_table_at(kv, l, h);
            if (t->n_tokens != n || kv->p.head_dim != sr->hd) return -1;
            float *dst = sr->dkeys + ((size_t)l * (size_t)sr->nkv + (size_t)h) * (size_t)L *
                                         (size_t)sr->hd;
            for (int j = 0; j < n; j++) {
                int32_t b = kv_slot_block(kv, t, j), slot = j % kv->p.block;
                if (kv_block_pos(kv, b)[slot] != j) return -1;
                quant_dequantize_row_ref(kv->p.type, kv_block_k(kv, b) + (size_t)slot * kv->row_bytes,
                                         dst + (size_t)j * (size_t)sr->hd, sr->hd);
            }
        }
    return 0;
}

/* Attention-level figures of one step of a policy run (its probe) against the dense run's
   step at scored index si (query at position qp): per-layer relative error of the attention
   output (mean over heads) into sr->errl, and the share of the dense attention that the positions
   the policy read hold (mean over layers and heads) as the return value; NaN when the probe
   did not record the expected position. */
static double attn_step(const struct stream_ref *sr, const struct ctx_attn_probe *pr, int si,
                        int qp, int L) {
    if (!pr || pr->step_pos != qp) return NAN;
    const int hd = sr->hd, qd = sr->nh * hd, gqa = sr->nh / sr->nkv;
    const double scale = 1.0 / sqrt((double)hd);
    double mass = 0;
    for (int l = 0; l < sr->nl; l++) {
        const float *dq = sr->dq + ((size_t)si * (size_t)sr->nl + (size_t)l) * (size_t)qd;
        const float *dout = sr->dout + ((size_t)si * (size_t)sr->nl + (size_t)l) * (size_t)qd;
        const float *po = pr->out + (size_t)l * (size_t)qd;
        double err = 0;
        int err_n = 0;
        for (int h = 0; h < sr->nh; h++) {
            double num = 0, den = 0;
            for (int i = 0; i < hd; i++) {
                double a = po[h * hd + i], b = dout[h * hd + i];
                num += (a - b) * (a - b);
                den += b * b;
            }
            if (den > 0) {
                err += sqrt(num / den);
                err_n++;
            }
            /* dense attention weights of this head over positions 0..qp */
            int g = h / gqa;
            const float *keys = sr->dkeys + ((size_t)l * (size_t)sr->nkv + (size_t)g) *
                                                (size_t)L * (size_t)hd;
            double mx = -INFINITY;
            for (int j = 0; j <= qp; j++) {
                double dot = 0;
                for (int i = 0; i < hd; i++) dot += (double)dq[h * hd + i] * keys[(size_t)j * hd + i];
                sr->sc[j] = dot * scale;
                if (sr->sc[j] > mx) mx = sr->sc[j];
            }
            double all = 0, kept = 0;
            for (int j = 0; j <= qp; j++) all += sr->sc[j] = exp(sr->sc[j] - mx);
            const int32_t *ps = pr->pos + ((size_t)l * (size_t)pr->n_head_kv + (size_t)g) *
                                              (size_t)pr->cap;
            int64_t np = pr->n_pos[l * pr->n_head_kv + g];
            for (int64_t j = 0; j < np; j++)
                if (ps[j] >= 0 && ps[j] <= qp) kept += sr->sc[ps[j]];
            mass += kept / all;
        }
        sr->errl[l] = err_n ? err / err_n : 0;
    }
    return mass / ((double)sr->nl * (double)sr->nh);
}

static int stream_reference(const struct run *r, const nx_token *toks, struct stream_ref *sr) {
    const struct eval_params *ep = r->ep;
    int nv = nx_model_n_vocab(r->m), L = ep->stream_len, half = L / 2;
    nx_ctx *d = make_spec(r->m, ep, "full", 1, NX_KV_REGIME_PREFILL, BUDGET_SEEN, 1, 0);
    /* local only: streaming at its smallest budget (sink + recent blocks), evicting always */
    nx_ctx *loc = make_spec(r->m, ep, "streaming", 0, NX_KV_REGIME_STREAM, BUDGET_SEEN, 1, 0);
    int rc = d && loc && !ctx_attn_probe_enable(d) ? 0 : -1;
    if (!rc) {
        struct nx_kv_params kv = nx_kv_default_params();
        kv.policy = "streaming";
        kv.budget = 1; /* raised to the policy's minimum */
        kv.regime = NX_KV_REGIME_STREAM;
        if (ep->base) kv.sink = ep->base->kv.sink, kv.recent = ep->base->kv.recent;
        if (nx_seq_set_kv(loc, 0, &kv)) rc = -1;
    }
    if (!rc && (nx_decode(d, toks, half, false) || nx_decode(loc, toks, half, false))) rc = -1;
    for (int i = half; i < L && !rc; i++) {
        const float *ld = nx_get_logits(d, -1), *ll = nx_get_logits(loc, -1);
        memcpy(sr->dense + (size_t)(i - half) * (size_t)nv, ld, sizeof *ld * (size_t)nv);
        int a = argmax(ld, nv);
        sr->lr[i - half] = exp(metric_log_prob(ld, nv, a)) >= 0.5 && argmax(ll, nv) != a;
        keep_probe_rows(sr, ctx_attn_probe_get(d), i - half);
        if (i + 1 < L && (nx_decode(d, &toks[i], 1, false) || nx_decode(loc, &toks[i], 1, false)))
            rc = -1;
    }
    if (rc && d && loc)
        fprintf(stderr, "eval: reference decode failed: %s%s\n", nx_ctx_last_error(d),
                nx_ctx_last_error(loc));
    if (!rc && keep_dense_keys(d, sr, L, L - 1)) {
        fprintf(stderr, "eval: the dense cache does not hold positions 0..%d in order\n", L - 2);
        rc = -1;
    }
    nx_ctx_free(d);
    nx_ctx_free(loc);
    return rc;
}

/* One configuration and seed on one stream: per-stream means into *c (added with weight w). */
static int run_one(const struct run *r, const struct cfg *cf, uint64_t seed, const nx_token *toks,
                   const struct stream_ref *sr, struct cell *c, double w) {
    const struct eval_params *ep = r->ep;
    int nv = nx_model_n_vocab(r->m), L = ep->stream_len, half = L / 2;
    int end = score_end(ep, cf->regime);
    nx_ctx *p = make_spec(r->m, ep, cf->spec, cf->density, cf->regime, cf->budget, 1, seed);
    if (!p) return -1;
    bool oracle = eval_spec_is_oracle(cf->spec);
    int rc = ctx_attn_probe_enable(p) ? -1 : 0;
    if (oracle) {
        /* decode through the scored queries, drop them, decode them again compressed */
        int fut = end - half < 256 ? end - half : 256;
        if (nx_decode(p, toks, half - 1 + fut, false) || nx_seq_rm(p, half - 1, -1) ||
            nx_decode(p, &toks[half - 1], 1, false))
            rc = -1;
    } else if (!rc && nx_decode(p, toks, half, false)) {
        rc = -1;
    }
    double kl = 0, top1 = 0, nll = 0, kv = 0, lr = 0, mass = 0, aerr = 0;
    double aerr_l[ATT_LAYERS] = {0};
    int lr_n = 0, n = 0;
    for (int i = half; i < end && rc == 0; i++) {
        const float *ld = sr->dense + (size_t)(i - half) * (size_t)nv, *lp = nx_get_logits(p, -1);
        struct nx_kv_stats sp;
        nx_ctx_kv_stats(p, &sp);
        kv += (double)sp.bytes_current;
        kl += metric_kl(ld, lp, nv);
        top1 += metric_top1_agree(ld, lp, nv);
        nll += -metric_log_prob(lp, nv, toks[i]);
        if (sr->lr[i - half]) {
            lr += argmax(lp, nv) == argmax(ld, nv);
            lr_n++;
        }
        mass += attn_step(sr, ctx_attn_probe_get(p), i - half, i - 1, L);
        for (int l = 0; l < sr->nl; l++) {
            aerr += sr->errl[l] / sr->nl;
            if (l < ATT_LAYERS) aerr_l[l] += sr->errl[l];
        }
        n++;
        if (i + 1 < end && nx_decode(p, &toks[i], 1, false)) rc = -1;
    }
    if (rc) fprintf(stderr, "eval: %s: decode failed: %s\n", cf->spec, nx_ctx_last_error(p));
    nx_ctx_free(p);
    if (rc || n == 0) return rc ? rc : -1;
    c->kl += w * kl / n;
    c->top1 += w * top1 / n;
    c->nll += w * nll / n;
    c->kv += w * kv / n; /* bytes; divided by the dense bytes by the caller */
    c->lr = lr_n ? c->lr + w * lr / lr_n : NAN;
    c->mass += w * mass / n; /* NaN when the probe missed a step */
    c->aerr += w * aerr / n;
    for (int l = 0; l < ATT_LAYERS; l++) c->aerr_l[l] += w * aerr_l[l] / n;
    c->lr_n = lr_n;
    return 0;
}

/* The dense cache's mean KV bytes over a regime's scored positions (one context, no policy). */
static double dense_bytes(const struct run *r, const nx_token *toks, int regime) {
    const struct eval_params *ep = r->ep;
    int L = ep->stream_len, half = L / 2, end = score_end(ep, regime);
    nx_ctx *d = make_spec(r->m, ep, "full", 1, regime, BUDGET_SEEN, 1, 0);
    if (!d) return NAN;
    double sum = 0;
    int n = 0, rc = nx_decode(d, toks, half, false) ? -1 : 0;
    for (int i = half; i < end && !rc; i++) {
        struct nx_kv_stats s;
        nx_ctx_kv_stats(d, &s);
        sum += (double)s.bytes_current;
        n++;
        if (i + 1 < end && nx_decode(d, &toks[i], 1, false)) rc = -1;
    }
    nx_ctx_free(d);
    return rc || !n ? NAN : sum / n;
}

/* Every configuration on stream s: rec = n_cfg cells (eval_parmap item). */
static int stream_item(int s, void *rec, void *arg) {
    const struct run *r = arg;
    const struct eval_params *ep = r->ep;
    int nv = nx_model_n_vocab(r->m), L = ep->stream_len, half = L / 2;
    struct cell *cells = rec;
    struct stream_ref sr;
    const nx_token *toks = r->toks + (size_t)s * (size_t)L;
    int rc = stream_ref_alloc(r->m, L, &sr) ? -1 : stream_reference(r, toks, &sr);
    double db[2] = {dense_bytes(r, toks, 0), dense_bytes(r, toks, 1)};
    for (int k = 0; k < r->n_cfg && !rc; k++) {
        const struct cfg *cf = &r->cfgs[k];
        struct cell *c = &cells[k];
        int ns = eval_spec_stochastic(cf->spec) ? r->seeds : 1;
        memset(c, 0, sizeof *c);
        if (eval_spec_is_oracle(cf->spec) && cf->regime == NX_KV_REGIME_STREAM) {
            /* the oracle sees the scored queries before one compression: prefill only */
            c->kl = c->top1 = c->nll = c->lr = c->kv = c->aerr = c->mass = NAN;
            for (int l = 0; l < ATT_LAYERS; l++) c->aerr_l[l] = NAN;
            continue;
        }
        for (int j = 0; j < ns && !rc; j++) rc = run_one(r, cf, (uint64_t)j, toks, &sr, c, 1.0 / ns);
        c->kv /= db[cf->regime == NX_KV_REGIME_STREAM];
    }
    /* the dense cache itself, per regime's scored range (the implicit "full" reference) */
    for (int g = 0; g < 2 && !rc; g++) {
        struct cell *c = &cells[r->n_cfg + g];
        int end = score_end(ep, g), lr_n = 0;
        double nll = 0;
        for (int i = half; i < end; i++) {
            nll += -metric_log_prob(sr.dense + (size_t)(i - half) * (size_t)nv, nv, toks[i]);
            lr_n += sr.lr[i - half];
        }
        *c = (struct cell){.kl = 0, .top1 = 1, .nll = nll / (end - half), .lr = lr_n ? 1 : NAN,
                           .kv = 1, .aerr = 0, .mass = 1, .lr_n = lr_n};
    }
    stream_ref_free(&sr);
    return rc;
}


/* Paired statistics of field f over streams: mean of x, mean of x - ref and its SE. */
struct paired {
    double mean, diff, se;
    int n;
};

/* Fields: 0 kl, 1 top1, 2 nll, 3 long range, 4 kv, 5 attention error, 6 attention mass,
   F_LAYER + l the attention error of layer l. */
enum { N_FIELDS = 7, F_LAYER = 8 };
static double field(const struct cell *c, int f) {
    switch (f) {
    case 0: return c->kl;
    case 1: return c->top1;
    case 2: return c->nll;
    case 3: return c->lr_n ? c->lr : NAN;
    case 4: return c->kv;
    case 5: return c->aerr;
    case 6: return c->mass;
    default: return c->aerr_l[f - F_LAYER];
    }
}

static struct paired pair_stats(const struct cell *x, const struct cell *ref, int streams, int f) {
    double sx = 0, sd = 0, sdd = 0;
    int n = 0;
    for (int s = 0; s < streams; s++) {
        double a = field(&x[s], f), b = field(&ref[s], f);
        if (isnan(a) || isnan(b)) continue;
        sx += a;
        sd += a - b;
        sdd += (a - b) * (a - b);
        n++;
    }
    struct paired p = {NAN, NAN, NAN, n};
    if (n == 0) return p;
    p.mean = sx / n;
    p.diff = sd / n;
    double var = n > 1 ? (sdd - n * p.diff * p.diff) / (n - 1) : 0;
    p.se = n > 1 ? sqrt(var > 0 ? var : 0) / sqrt((double)n) : 0;
    return p;
}

/* The reference configuration of k: the reference spec with the same density, regime and
   budget rule; "full" is always there (the implicit dense cells n + regime). -1 when absent. */
static int ref_of(const struct cfg *cfgs, int n, int k, const char *ref) {
    for (int j = 0; j < n; j++)
        if (!strcmp(cfgs[j].spec, ref) && cfgs[j].regime == cfgs[k].regime &&
            cfgs[j].budget == cfgs[k].budget && cfgs[j].density == cfgs[k].density)
            return j;
    return !strcmp(ref, "full") ? n + (cfgs[k].regime == NX_KV_REGIME_STREAM) : -1;
}

static const char *const k_fields[N_FIELDS] = {"kl",      "top1",     "nll", "longrange",
                                               "kv_frac", "attn_err", "attn_mass"};

/* A JSON number, or null for NaN / infinity. */
static void json_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ",\"%s\":%.6g", key, v);
    else fprintf(f, ",\"%s\":null", key);
}

static int write_json(const struct run *r, const char *ref, const int *refk) {
    const struct eval_params *ep = r->ep;
    struct nx_outfile o;
    char err[1200];
    if (nx_outfile_open(&o, ep->json_path, err, sizeof err)) {
        fprintf(stderr, "eval: %s\n", err);
        return -1;
    }
    const struct nx_ctx_params *b = ep->base;
    fprintf(o.f, "[\n");
    for (int k = 0; k < r->n_cfg; k++) {
        const struct cfg *cf = &r->cfgs[k];
        const struct cell *x = r->cells + (size_t)k * (size_t)r->streams;
        const struct cell *rf = r->cells + (size_t)refk[k] * (size_t)r->streams;
        int lr_pos = 0;
        for (int s = 0; s < r->streams; s++) lr_pos += x[s].lr_n;
        fprintf(o.f, "  {\"policy\":\"%s\",\"density\":%.4f,\"regime\":\"%s\",\"budget\":\"%s\","
                     "\"reference\":\"%s\"", cf->spec, cf->density, eval_regime_name(cf->regime),
                budget_name(cf->budget), ref);
        for (int f = 0; f < N_FIELDS; f++) {
            struct paired p = pair_stats(x, rf, r->streams, f);
            char key[64];
            json_num(o.f, k_fields[f], p.mean);
            snprintf(key, sizeof key, "%s_diff", k_fields[f]);
            json_num(o.f, key, p.diff);
            snprintf(key, sizeof key, "%s_se", k_fields[f]);
            json_num(o.f, key, p.se);
            fprintf(o.f, ",\"%s_streams\":%d", k_fields[f], p.n);
        }
        json_num(o.f, "ppl", exp(pair_stats(x, rf, r->streams, 2).mean));
        /* the attention-output error of each layer: mean, paired difference, its SE */
        int nl = nx_model_n_layer(r->m) < ATT_LAYERS ? nx_model_n_layer(r->m) : ATT_LAYERS;
        static const char *const lk[3] = {"attn_err_layers", "attn_err_layers_diff",
                                          "attn_err_layers_se"};
        for (int q = 0; q < 3; q++) {
            fprintf(o.f, ",\"%s\":[", lk[q]);
            for (int l = 0; l < nl; l++) {
                struct paired p = pair_stats(x, rf, r->streams, F_LAYER + l);
                double v = q == 0 ? p.mean : q == 1 ? p.diff : p.se;
                if (isfinite(v)) fprintf(o.f, "%s%.6g", l ? "," : "", v);
                else fprintf(o.f, "%snull", l ? "," : "");
            }
            fprintf(o.f, "]");
        }
        fprintf(o.f, ",\"longrange_positions\":%d,\"streams\":%d,\"seeds\":%d,"
                     "\"stream_len\":%d,\"scored\":%d,\"seed\":%llu,\"source\":\"%s\","
                     "\"kv_block\":%d,\"kv_sink\":%d,\"kv_recent\":%d}%s\n",
                lr_pos, r->streams, eval_spec_stochastic(cf->spec) ? r->seeds : 1,
                ep->stream_len, score_end(ep, cf->regime) - ep->stream_len / 2,
                (unsigned long long)ep->seed, ep->text_file ? "file" : "sampled",
                b ? b->kv_block : 32, b ? b->kv.sink : 32, b ? b->kv.recent : 32,
                k + 1 < r->n_cfg ? "," : "");
    }
    fprintf(o.f, "]\n");
    if (nx_outfile_commit(&o, err, sizeof err)) {
        fprintf(stderr, "eval: %s\n", err);
        return -1;
    }
    return 0;
}

/* One SVG per regime x budget rule: KL, top-1 and long range against density, one line per
   policy spec, error bars = paired SE against the reference. */
static int write_svgs(const struct run *r, const struct eval_sweep *sw, const int *nb_modes,
                      int nb, const int *refk) {
    const struct eval_params *ep = r->ep;
    if (eval_mkdir(ep->svg_dir, "eval")) return -1;
    enum { P = EVAL_MAX_ITEMS, D = EVAL_MAX_ITEMS };
    for (int ri = 0; ri < sw->nr; ri++)
        for (int bi = 0; bi < nb; bi++) {
            enum { NP = 5 };
            static const int pf[NP] = {0, 1, 3, 5, 6}; /* kl, top-1, long range, attention */
            static double x[P][D], y[NP][P][D], e[NP][P][D];
            struct svg_series ser[NP][P];
            for (int pi = 0; pi < sw->np; pi++) {
                for (int di = 0; di < sw->nd; di++) {
                    int k = ((pi * sw->nd + di) * sw->nr + ri) * nb + bi;
                    const struct cell *cx = r->cells + (size_t)k * (size_t)r->streams;
                    const struct cell *cr = r->cells + (size_t)refk[k] * (size_t)r->streams;
                    x[pi][di] = r->cfgs[k].density;
                    for (int f = 0; f < NP; f++) {
                        struct paired p = pair_stats(cx, cr, r->streams, pf[f]);
                        y[f][pi][di] = p.mean;
                        e[f][pi][di] = p.se;
                    }
                }
                for (int f = 0; f < NP; f++)
                    ser[f][pi] = (struct svg_series){sw->pols[pi], x[pi], y[f][pi], e[f][pi],
                                                     sw->nd};
            }
            struct svg_panel panels[NP] = {
                {"KL(dense || policy)", "density", "nats / token", false, true, ser[0], sw->np},
                {"top-1 agreement", "density", "fraction", false, false, ser[1], sw->np},
                {"long range (dense sure, local-only wrong)", "density", "agreement", false,
                 false, ser[2], sw->np},
                {"attention-output error (rel. L2, mean over layers)", "density", "error",
                 false, true, ser[3], sw->np},
                {"attention mass on the kept positions", "density", "share", false, false,
                 ser[4], sw->np}};
            char path[1100], title[300], err[1300];
            int regime = sw->rv[ri];
            if (nb_modes[bi] == BUDGET_SEEN)
                snprintf(path, sizeof path, "%s/fidelity_%s.svg", ep->svg_dir,
                         eval_regime_name(regime));
            else
                snprintf(path, sizeof path, "%s/fidelity_%s_prompt.svg", ep->svg_dir,
                         eval_regime_name(regime));
            snprintf(title, sizeof title,
                     "Fidelity, %s regime, budget %s (%d %s streams of %d tokens; bars: paired "
                     "SE vs %s)",
                     eval_regime_name(regime), nb_modes[bi] == BUDGET_SEEN
                         ? "density x tokens seen" : "density x prompt",
                     r->streams, ep->text_file ? "file" : "sampled", ep->stream_len,
                     ep->reference ? ep->reference : "full");
            if (svg_save(path, title, panels, NP, err, sizeof err)) {
                fprintf(stderr, "eval: %s\n", err);
                return -1;
            }
            fprintf(stderr, "eval: wrote %s\n", path);
        }
    return 0;
}

nx_status eval_run(const nx_model *m, const struct eval_params *ep) {
    char bud_buf[64];
    struct eval_sweep sw;
    if (eval_sweep_split(ep->policies, ep->densities, ep->regimes, "eval", &sw))
        return NX_STATUS_INVALID_ARG;
    char *bud[3];
    int nb = eval_split_list(ep->budgets ? ep->budgets : "seen", bud_buf, sizeof bud_buf, bud, 3,
                             "eval", "budgets"), modes[2];
    bool bad_budget = nb < 1 || nb > 2;
    for (int i = 0; !bad_budget && i < nb; i++) {
        bad_budget = strcmp(bud[i], "seen") && strcmp(bud[i], "prompt");
        modes[i] = strcmp(bud[i], "prompt") ? BUDGET_SEEN : BUDGET_PROMPT;
    }
    if (bad_budget) {
        fprintf(stderr, "eval: --budgets takes seen, prompt or both\n");
        return NX_STATUS_INVALID_ARG;
    }
    const char *ref = ep->reference ? ep->reference : "full";
    int seeds = ep->seeds > 0 ? ep->seeds : 1;
    if (seeds > MAX_SEEDS || ep->score_len < 0) {
        fprintf(stderr, "eval: need 1-%d seeds, score length >= 0\n", MAX_SEEDS);
        return NX_STATUS_INVALID_ARG;
    }
    if (ep->streams < 1 || ep->stream_len < 8) {
        fprintf(stderr, "eval: need at least 1 stream of at least 8 tokens\n");
        return NX_STATUS_INVALID_ARG;
    }
    int n_cfg = sw.np * sw.nd * sw.nr * nb;
    if (n_cfg > MAX_CFG) {
        fprintf(stderr, "eval: %d configurations, at most %d\n", n_cfg, MAX_CFG);
        return NX_STATUS_INVALID_ARG;
    }
    struct cfg *cfgs = nx_calloc((size_t)n_cfg, sizeof *cfgs);
    int *refk = nx_calloc((size_t)n_cfg, sizeof *refk);
    int L = ep->stream_len;
    nx_token *toks = nx_malloc(sizeof *toks * (size_t)L * (size_t)ep->streams);
    /* per configuration and stream, plus the implicit dense cells of both regimes */
    struct cell *cells = nx_calloc((size_t)(n_cfg + 2) * (size_t)ep->streams, sizeof *cells);
    nx_status rc = NX_STATUS_INVALID_ARG;
    if (!cfgs || !refk || !toks || !cells) {
        fprintf(stderr, "eval: out of memory\n");
        rc = NX_STATUS_NOMEM;
        goto out;
    }
    for (int pi = 0, k = 0; pi < sw.np; pi++)
        for (int di = 0; di < sw.nd; di++)
            for (int ri = 0; ri < sw.nr; ri++)
                for (int bi = 0; bi < nb; bi++, k++)
                    cfgs[k] = (struct cfg){sw.pols[pi], sw.dv[di], sw.rv[ri], modes[bi]};
    for (int k = 0; k < n_cfg; k++) {
        if ((refk[k] = ref_of(cfgs, n_cfg, k, ref)) < 0) {
            fprintf(stderr, "eval: the reference '%s' is not among --policies\n", ref);
            goto out;
        }
    }
    int streams = ep->streams;
    if (ep->text_file) {
        streams = file_streams(m, ep, toks, ep->streams);
        if (streams < 1) { /* the file is missing, unreadable or too short */
            rc = streams < 0 ? (nx_status)streams : NX_STATUS_INVALID_ARG;
            goto out;
        }
    } else {
        struct nx_progress pg;
        nx_progress_start(&pg, stderr, "streams sampled", streams);
        struct sample_arg sa = {m, ep};
        struct done_arg da = {&pg, 1, 0};
        int prc = eval_parmap(streams, ep->threads, sizeof *toks * (size_t)L, sample_item, &sa,
                              toks, stream_done, &da);
        nx_progress_finish(&pg);
        if (prc) {
            rc = NX_STATUS_ABORTED;
            goto out;
        }
    }
    int units = 0;
    for (int k = 0; k < n_cfg; k++) units += eval_spec_stochastic(cfgs[k].spec) ? seeds : 1;
    struct nx_progress pg;
    nx_progress_start(&pg, stderr, "config x seed x stream runs", units * streams);
    struct run r = {.m = m, .ep = ep, .cfgs = cfgs, .n_cfg = n_cfg, .streams = streams,
                    .seeds = seeds, .toks = toks, .cells = cells};
    const int nc = n_cfg + 2;
    struct cell *by_stream = nx_calloc((size_t)nc * (size_t)streams, sizeof *by_stream);
    bool by_stream_oom = by_stream == NULL;
    struct done_arg da = {&pg, units, 0};
    int prc = by_stream ? eval_parmap(streams, ep->threads, sizeof *by_stream * (size_t)nc,
                                      stream_item, &r, by_stream, stream_done, &da)
                        : -1;
    nx_progress_finish(&pg);
    for (int s = 0; s < streams && by_stream; s++)
        for (int k = 0; k < nc; k++)
            cells[(size_t)k * (size_t)streams + (size_t)s] =
                by_stream[(size_t)s * (size_t)nc + (size_t)k];
    nx_free(by_stream);
    if (prc) {
        fprintf(stderr, "eval: a run failed\n");
        rc = by_stream_oom ? NX_STATUS_NOMEM : NX_STATUS_ABORTED;
        goto out;
    }
    printf("| policy | density | regime | budget | KV held | KL (nats) | ΔKL vs %s (SE) | top-1 | "
           "Δtop-1 (SE) | ppl | Δnll (SE) | long range (positions) | Δlong range (SE) | "
           "attn err | Δattn err (SE) | attn mass | Δattn mass (SE) |\n", ref);
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < n_cfg; k++) {
        const struct cell *x = cells + (size_t)k * (size_t)streams;
        const struct cell *rf = cells + (size_t)refk[k] * (size_t)streams;
        struct paired p[N_FIELDS];
        for (int f = 0; f < N_FIELDS; f++) p[f] = pair_stats(x, rf, streams, f);
        int lr_pos = 0;
        for (int s = 0; s < streams; s++) lr_pos += x[s].lr_n;
        printf("| %s | %.2f | %s | %s | %.3f | %.4f | %+.4f (%.4f) | %.3f | %+.3f (%.3f) | %.3f | "
               "%+.4f (%.4f) | %.3f (%d) | %+.3f (%.3f) | %.4f | %+.4f (%.4f) | %.4f | "
               "%+.4f (%.4f) |\n",
               cfgs[k].spec, cfgs[k].density, eval_regime_name(cfgs[k].regime),
               budget_name(cfgs[k].budget), p[4].mean, p[0].mean, p[0].diff, p[0].se, p[1].mean,
               p[1].diff, p[1].se, exp(p[2].mean), p[2].diff, p[2].se, p[3].mean, lr_pos,
               p[3].diff, p[3].se, p[5].mean, p[5].diff, p[5].se, p[6].mean, p[6].diff, p[6].se);
    }
    fflush(stdout);
    rc = NX_STATUS_IO;
    if (ep->json_path && write_json(&r, ref, refk)) goto out;
    if (ep->svg_dir && write_svgs(&r, &sw, modes, nb, refk)) goto out;
    rc = NX_STATUS_OK;
out:
    nx_free(cfgs);
    nx_free(refk);
    nx_free(toks);
    nx_free(cells);
    return rc;
}
