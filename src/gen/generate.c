/*
 * generate.c - the generation loop with streaming and stop strings (see generate.h).
 *
 * DESIGN
 * - Stop strings through gen/stopfilter.c (shared with the server): each token's piece is
 *   appended, and everything that cannot start a stop string is released.
 * - The loop mirrors what the CLI always did: pick, check EOG, store, stream, then decode only
 *   when another pick will follow (the last pick is never decoded, and a full context ends
 *   the generation instead of failing it).
 */
#include "gen/generate.h"

#include <string.h>

#include "core/alloc.h"
#include "gen/stopfilter.h"

struct nx_gen_params nx_gen_default_params(void) {
    return (struct nx_gen_params){.max_tokens = 128};
}

/* A growable byte buffer (NUL-ended when non-empty). */
struct buf {
    char *p;
    size_t n, cap;
};

static bool buf_add(struct buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = nx_realloc(b->p, cap);
        if (!q) return false;
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

struct gen {
    const struct nx_gen_params *p;
    struct gen_stop_filter stops;
    struct buf text;
    bool aborted;
};

/* Releases n bytes of text to the callback and the kept text; false on out of memory. */
static bool release(struct gen *g, const char *s, size_t n) {
    if (n == 0 || g->aborted) return true;
    if (g->p->keep_text && !buf_add(&g->text, s, n)) return false;
    if (g->p->on_text && g->p->on_text(g->p->user, s, n) != 0) g->aborted = true;
    return true;
}

/* Appends a token's text; returns 1 when a stop string ended the generation, 0 to go on, -1
 * on out of memory. */
static int feed_text(struct gen *g, const char *s, size_t n, int *which) {
    size_t ready = gen_stop_push(&g->stops, s, n);
    if (ready == SIZE_MAX || !release(g, gen_stop_text(&g->stops), ready)) return -1;
    gen_stop_consume(&g->stops, ready);
    if (!g->stops.stopped) return 0;
    *which = g->stops.stop_index;
    return 1;
}

static nx_token argmax(const float *l, int32_t n) {
    nx_token b = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return b;
}

nx_status nx_generate(const nx_model *m, nx_ctx *ctx, const nx_token *prompt, int32_t n_prompt,
                      const struct nx_gen_params *p, struct nx_gen_result *res,
                      struct nx_err *err) {
    *res = (struct nx_gen_result){.stop = NX_GEN_MAX_TOKENS, .stop_index = -1};
    if (n_prompt < 1 || !prompt) return nx_err_set(err, NX_STATUS_INVALID_ARG, "generate: empty prompt");
    if (p->max_tokens < 0)
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "generate: max_tokens %d < 0", (int)p->max_tokens);
    for (int i = 0; i < p->n_stop; i++)
        if (!p->stop || !p->stop[i] || !p->stop[i][0])
            return nx_err_set(err, NX_STATUS_INVALID_ARG, "generate: stop string %d is empty", i);
    int32_t n_vocab = nx_model_n_vocab(m);
    struct gen g = {.p = p};
    gen_stop_init(&g.stops, p->stop, p->n_stop, false); /* checked above */
    nx_status st = NX_STATUS_OK;
    char small[256], *piece = small;
    int32_t piece_cap = (int32_t)sizeof small;

    if (p->sampler)
        for (int32_t i = 0; i < n_prompt; i++) nx_sampler_accept(p->sampler, prompt[i]);
    double t0 = nx_time_s();
    st = nx_decode(ctx, prompt, n_prompt, false);
    if (st) {
        nx_err_set(err, st, "generate: prompt of %d tokens: %s", (int)n_prompt, nx_ctx_last_error(ctx));
        goto out;
    }
    res->n_prompt = n_prompt;
    double t1 = nx_time_s();
    res->t_prompt = t1 - t0;
    while (res->n_generated < p->max_tokens) {
        const float *logits = nx_get_logits(ctx, -1);
        nx_token t = p->sampler ? nx_sampler_sample(p->sampler, logits) : argmax(logits, n_vocab);
        if (!p->ignore_eog && nx_token_is_eog(m, t)) {
            res->stop = NX_GEN_EOG;
            break;
        }
        if (p->tokens && res->n_generated < p->tokens_cap) p->tokens[res->n_generated] = t;
        res->n_generated++;
        int32_t k = nx_token_to_piece(m, t, piece, piece_cap, false);
        if (k < 0) {
            char *big = nx_malloc((size_t)-k);
            if (!big) {
                st = nx_err_set(err, NX_STATUS_NOMEM, "generate: out of memory");
                goto out;
            }
            if (piece != small) nx_free(piece);
            piece = big;
            piece_cap = -k;
            k = nx_token_to_piece(m, t, piece, piece_cap, false);
        }
        if (k > 0) {
            int r = feed_text(&g, piece, (size_t)k, &res->stop_index);
            if (r < 0) {
                st = nx_err_set(err, NX_STATUS_NOMEM, "generate: out of memory");
                goto out;
            }
            if (r > 0) {
                res->stop = NX_GEN_STOP_STRING;
                break;
            }
        }
        if (g.aborted) {
            res->stop = NX_GEN_ABORTED;
            break;
        }
        if (res->n_generated == p->max_tokens) break;
        if (nx_ctx_n_past(ctx) >= nx_ctx_n_ctx(ctx)) {
            res->stop = NX_GEN_CTX_FULL;
            break;
        }
        st = nx_decode(ctx, &t, 1, false);
        if (st) {
            nx_err_set(err, st, "generate: token %d: %s", (int)res->n_generated, nx_ctx_last_error(ctx));
            goto out;
        }
    }
    if (res->stop != NX_GEN_STOP_STRING && res->stop != NX_GEN_ABORTED &&
        !release(&g, gen_stop_text(&g.stops), gen_stop_finish(&g.stops))) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "generate: out of memory");
        goto out;
    }
    res->t_gen = nx_time_s() - t1;
    if (p->keep_text) {
        if (!g.text.p && !buf_add(&g.text, "", 0)) {
            st = nx_err_set(err, NX_STATUS_NOMEM, "generate: out of memory");
            goto out;
        }
        res->text = g.text.p;
        res->text_len = g.text.n;
        g.text.p = NULL;
    }
out:
    if (piece != small) nx_free(piece);
    gen_stop_free(&g.stops);
    nx_free(g.text.p);
    return st;
}

nx_status nx_gen_tokenize(const nx_model *m, const char *text, size_t len, unsigned flags,
                          nx_token **out, int32_t *n, struct nx_err *err) {
    *out = NULL;
    *n = 0;
    bool add_special = flags & NX_GEN_TOK_ADD_SPECIAL, parse = flags & NX_GEN_TOK_PARSE_SPECIAL;
    int32_t bos = (flags & NX_GEN_TOK_FORCE_BOS) && nx_token_bos(m) >= 0 ? 1 : 0;
    int32_t k = nx_tokenize(m, text, len, NULL, 0, add_special, parse);
    if (k == INT32_MIN) return nx_err_set(err, NX_STATUS_INVALID_ARG, "tokenizer failed on %zu bytes", len);
    int32_t need = k < 0 ? -k : k;
    if (need > INT32_MAX - 1) return nx_err_set(err, NX_STATUS_INVALID_ARG, "text too long to tokenize");
    nx_token *t = nx_malloc(sizeof *t * (size_t)(need + bos > 0 ? need + bos : 1));
    if (!t) return nx_err_set(err, NX_STATUS_NOMEM, "out of memory tokenizing %zu bytes", len);
    if (bos) t[0] = nx_token_bos(m);
    k = need > 0 ? nx_tokenize(m, text, len, t + bos, need, add_special, parse) : 0;
    if (k < 0) {
        nx_free(t);
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "tokenizer failed on %zu bytes", len);
    }
    *out = t;
    *n = k + bos;
    return NX_STATUS_OK;
}
