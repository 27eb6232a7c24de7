/*
 * chat_rerank.c - the chat model's own yes/no relevance score as an rt_reranker (contract in
 * chat_rerank.h).
 *
 * DESIGN
 * - One score = tokenize the prompt and the two completed prompts, decode the shared prefix
 *   once, then teacher-force each answer's tokens from there (truncating the context back to
 *   the prefix between the two answers). Log-softmax in double.
 * - Fitting the context: binary search over the document's byte length (UTF-8 boundaries) for
 *   the longest prefix whose completed prompts fit; the search starts from a cap of
 *   n_ctx * (longest token in bytes), since no longer prefix can fit.
 */
#include "route/chat_rerank.h"
#include "route/namedec.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/nx_base.h"

struct chat_rr {
    rt_reranker base;
    nx_model *model;
    nx_ctx *ctx;
    int32_t n_ctx, n_vocab;
    size_t max_piece; /* longest token text in bytes */
    char *yes, *no;
};

struct rt_chat_rerank_params rt_chat_rerank_default_params(void) {
    struct rt_chat_rerank_params p = {.n_ctx = 0, .n_threads = 0, .yes = NULL, .no = NULL};
    return p;
}

static void crr_free(rt_reranker *r) {
    struct chat_rr *c = (struct chat_rr *)r;
    if (!c) return;
    nx_ctx_free(c->ctx);
    nx_free(c->yes);
    nx_free(c->no);
    nx_free(c);
}

static int32_t lcp(const nx_token *a, int32_t na, const nx_token *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

/* The prompt with query[0..ql) and doc[0..dl). */
static char *build_prompt(const char *q, size_t ql, const char *d, size_t dl) {
    size_t n = sizeof(RT_CHAT_RERANK_TEMPLATE) + ql + dl;
    char *s = nx_malloc(n);
    if (!s) return NULL;
    snprintf(s, n, RT_CHAT_RERANK_TEMPLATE, (int)ql, q, (int)dl, d);
    return s;
}

struct tokd {
    nx_token *p, *y, *n; /* prompt, prompt+yes, prompt+no */
    int32_t np, ny, nn;
};
static void tokd_free(struct tokd *t) {
    nx_free(t->p);
    nx_free(t->y);
    nx_free(t->n);
    memset(t, 0, sizeof(*t));
}

/* Tokenize the three texts for (q[0..ql), d[0..dl)). 0 ok, -1 failure. */
static int tokenize_all(const struct chat_rr *c, const char *q, size_t ql, const char *d,
                        size_t dl, struct tokd *t) {
    memset(t, 0, sizeof(*t));
    char *p = build_prompt(q, ql, d, dl);
    if (!p) return -1;
    size_t pl = strlen(p);
    char *py = nx_malloc(pl + strlen(c->yes) + 1), *pn = nx_malloc(pl + strlen(c->no) + 1);
    int rc = -1;
    if (!py || !pn) goto out;
    memcpy(py, p, pl);
    strcpy(py + pl, c->yes);
    memcpy(pn, p, pl);
    strcpy(pn + pl, c->no);
    t->np = rt_tokenize_alloc(c->model, p, &t->p);
    t->ny = rt_tokenize_alloc(c->model, py, &t->y);
    t->nn = rt_tokenize_alloc(c->model, pn, &t->n);
    if (t->np < 0 || t->ny < 0 || t->nn < 0) {
        tokd_free(t);
        goto out;
    }
    rc = 0;
out:
    nx_free(p);
    nx_free(py);
    nx_free(pn);
    return rc;
}

static bool fits(const struct chat_rr *c, const struct tokd *t) {
    return t->ny <= c->n_ctx && t->nn <= c->n_ctx;
}

/* Largest UTF-8 boundary <= n in s (s has length >= n). */
static size_t u8_floor(const char *s, size_t n) {
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

/* The longest prefix (at a UTF-8 boundary) of the document (vary_doc) or else of the query for
 * which the completed prompts fit, into *best / *out_len. 0 ok, -1 nothing fits (not even the
 * empty prefix), -2 out of memory. */
static int fit_prefix(const struct chat_rr *c, const char *q, size_t ql, const char *d, size_t dl,
                      int vary_doc, struct tokd *best, size_t *out_len) {
    const char *var = vary_doc ? d : q;
    size_t vl = vary_doc ? dl : ql;
    size_t *cut = nx_malloc((vl + 2) * sizeof(*cut)); /* byte offsets of character starts, and vl */
    if (!cut) return -2;
    size_t nc = 0;
    for (size_t i = 0; i < vl; i++)
        if (((unsigned char)var[i] & 0xC0) != 0x80) cut[nc++] = i;
    cut[nc] = vl; /* candidates: cut[0..nc] */
    struct tokd t;
    int rc = -1;
    size_t lo = 0, hi = nc; /* the answer index is in [lo, hi] once index lo is known to fit */
    if (tokenize_all(c, q, vary_doc ? ql : 0, d, vary_doc ? 0 : dl, &t) != 0) {
        rc = -2;
        goto out;
    }
    if (!fits(c, &t)) {
        tokd_free(&t);
        goto out;
    }
    *best = t;
    *out_len = 0;
    rc = 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo + 1) / 2, len = cut[mid];
        if (tokenize_all(c, q, vary_doc ? ql : len, d, vary_doc ? len : dl, &t) != 0) {
            tokd_free(best);
            rc = -2;
            goto out;
        }
        if (fits(c, &t)) {
            tokd_free(best);
            *best = t;
            *out_len = len;
            lo = mid;
        } else {
            tokd_free(&t);
            hi = mid - 1;
        }
    }
out:
    nx_free(cut);
    return rc;
}

/* log-softmax of logits[tok] in double. */
static double log_prob(const float *logits, int32_t n_vocab, nx_token tok) {
    double mx = -INFINITY;
    for (int32_t i = 0; i < n_vocab; i++) mx = fmax(mx, logits[i]);
    double s = 0;
    for (int32_t i = 0; i < n_vocab; i++) s += exp((double)logits[i] - mx);
    return (double)logits[tok] - mx - log(s);
}

/* Sum of log-probs of ans[0..na) given the context (n_past = prefix) and first_lp = log-prob of
 * ans[0] already computed from the prefix's logits. */
static nx_status answer_lp(struct chat_rr *c, const nx_token *ans, int32_t na, double first_lp,
                           double *out, char *err, size_t errlen) {
    double lp = first_lp;
    if (na > 1) {
        nx_status st = nx_decode(c->ctx, ans, na - 1, true);
        if (st != NX_STATUS_OK)
            return nx_errf(err, errlen, st, "chat reranker: decode failed: %s",
                           nx_ctx_last_error(c->ctx));
        for (int32_t i = 1; i < na; i++) lp += log_prob(nx_get_logits(c->ctx, i - 1), c->n_vocab, ans[i]);
    }
    *out = lp;
    return NX_STATUS_OK;
}

static nx_status crr_score(rt_reranker *r, const char *query, const char *document, float *score,
                           char *err, size_t errlen) {
    struct chat_rr *c = (struct chat_rr *)r;
    if (!query) query = "";
    if (!document) document = "";
    size_t ql = strlen(query), dl = strlen(document);
    /* no prefix longer than this can fit */
    size_t cap = (size_t)c->n_ctx * c->max_piece + 16;
    if (dl > cap) dl = u8_floor(document, cap);
    if (ql > cap) ql = u8_floor(query, cap);
    struct tokd t;
    if (tokenize_all(c, query, ql, document, dl, &t) != 0)
        return nx_errf(err, errlen, NX_STATUS_NOMEM,
                       "chat reranker: tokenization failed (out of memory?)");
    if (!fits(c, &t)) {
        tokd_free(&t);
        size_t len;
        int rc = fit_prefix(c, query, ql, document, dl, 1, &t, &len);
        if (rc == 0) dl = len;
        else if (rc == -1) {
            dl = 0;
            rc = fit_prefix(c, query, ql, document, 0, 0, &t, &len);
            if (rc == 0) ql = len;
        }
        if (rc == -1)
            return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                           "chat reranker: a context of %d tokens cannot hold the prompt template",
                           c->n_ctx);
        if (rc != 0)
            return nx_errf(err, errlen, NX_STATUS_NOMEM,
                           "chat reranker: tokenization failed (out of memory?)");
    }
    int32_t common = lcp(t.p, t.np, t.y, t.ny);
    int32_t cn = lcp(t.p, t.np, t.n, t.nn);
    if (cn < common) common = cn;
    if (common < 1 || common >= t.ny || common >= t.nn) {
        tokd_free(&t);
        return nx_errf(
            err, errlen, NX_STATUS_INVALID_ARG,
            "chat reranker: the answers do not tokenize as a continuation of the prompt");
    }
    nx_ctx_reset(c->ctx);
    nx_status st = nx_decode(c->ctx, t.p, common, false);
    if (st != NX_STATUS_OK) {
        nx_errf(err, errlen, st, "chat reranker: decode failed: %s", nx_ctx_last_error(c->ctx));
        tokd_free(&t);
        return st;
    }
    const float *lg = nx_get_logits(c->ctx, -1);
    double fy = log_prob(lg, c->n_vocab, t.y[common]), fn = log_prob(lg, c->n_vocab, t.n[common]);
    double lpy, lpn;
    st = answer_lp(c, t.y + common, t.ny - common, fy, &lpy, err, errlen);
    if (st == NX_STATUS_OK && (st = nx_ctx_truncate(c->ctx, common)) != NX_STATUS_OK)
        nx_errf(err, errlen, st, "chat reranker: truncate failed: %s", nx_ctx_last_error(c->ctx));
    if (st == NX_STATUS_OK) st = answer_lp(c, t.n + common, t.nn - common, fn, &lpn, err, errlen);
    tokd_free(&t);
    if (st != NX_STATUS_OK) return st;
    double m = fmax(lpy, lpn);
    double s = lpy - (m + log(exp(lpy - m) + exp(lpn - m)));
    *score = (float)s;
    return NX_STATUS_OK;
}

nx_status rt_reranker_chat_open_ex(nx_model *model, const struct rt_chat_rerank_params *pp,
                                   rt_reranker **out, char *err, size_t errlen) {
    struct rt_chat_rerank_params p = pp ? *pp : rt_chat_rerank_default_params();
    *out = NULL;
    if (!model) {
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG, "chat reranker: no model");
    }
    if (p.n_ctx < 0 || p.n_threads < 0) {
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "chat reranker: n_ctx and n_threads must be >= 0");
    }
    const char *yes = p.yes ? p.yes : " yes", *no = p.no ? p.no : " no";
    if (!*yes || !*no || strcmp(yes, no) == 0) {
        return nx_errf(err, errlen, NX_STATUS_INVALID_ARG,
                       "chat reranker: the yes and no answers must be non-empty and differ");
    }
    struct chat_rr *c = nx_calloc(1, sizeof(*c));
    if (!c) return nx_errf(err, errlen, NX_STATUS_NOMEM, "chat reranker: out of memory");
    c->base.name = "chat-relevance";
    c->base.score = crr_score;
    c->base.destroy = crr_free;
    c->model = model;
    c->yes = nx_strdup(yes);
    c->no = nx_strdup(no);
    c->n_vocab = nx_model_n_vocab(model);
    struct nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = p.n_ctx ? p.n_ctx : (nx_model_n_ctx_train(model) < 2048 ? nx_model_n_ctx_train(model) : 2048);
    if (cp.n_ctx < 1) cp.n_ctx = 2048;
    if (p.n_threads) cp.n_threads = cp.n_threads_batch = p.n_threads;
    char e2[300] = "";
    if (!c->yes || !c->no) {
        crr_free(&c->base);
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "chat reranker: out of memory");
    }
    nx_status st = nx_ctx_init(model, &cp, &c->ctx, e2, sizeof e2);
    if (st != NX_STATUS_OK) {
        crr_free(&c->base);
        return nx_errf(err, errlen, st, "chat reranker: cannot create a context: %s", e2);
    }
    c->n_ctx = nx_ctx_n_ctx(c->ctx);
    char piece[256];
    c->max_piece = 1;
    for (int32_t i = 0; i < c->n_vocab; i++) {
        int32_t k = nx_token_to_piece(model, i, piece, sizeof piece, true);
        size_t len = k < 0 ? (size_t)-k : (size_t)k;
        if (len > c->max_piece) c->max_piece = len;
    }
    *out = &c->base;
    return NX_STATUS_OK;
}

nx_status rt_reranker_chat_open(nx_model *model, rt_reranker **out, char *err, size_t errlen) {
    return rt_reranker_chat_open_ex(model, NULL, out, err, errlen);
}
