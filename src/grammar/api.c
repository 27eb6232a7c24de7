/*
 * api.c - DESIGN: the public grammar API of nexus.h over gram/gbnf/schema/mask: nx_grammar
 * owns a compiled grammar (and the GBNF text a schema compiled to), nx_grammar_vocab the
 * token index plus each token's rendered text (for lazy triggers), nx_grammar_matcher is the
 * internal matcher.
 */
#include <string.h>

#include "core/alloc.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_api.h"
#include "grammar/mask.h"
#include "grammar/schema.h"

struct nx_grammar {
    struct gram *g;
    char *source;
};

struct nx_grammar_vocab {
    struct gvocab *gv;
    char *text;
    uint32_t *text_off;
    int32_t *text_len;
    int32_t n;
    nx_token first_eog;
};

static void copy_err(const struct nx_err *e, char *err, size_t errlen) {
    if (err && errlen) {
        strncpy(err, e->msg, errlen - 1);
        err[errlen - 1] = 0;
    }
}

static nx_status compile(const char *text, size_t len, const char *root, bool internal,
                         nx_grammar **out, struct nx_err *e) {
    struct gbuilder b;
    gram_builder_init(&b);
    nx_status st = gbnf_parse(&b, text, len, internal, e);
    struct gram *g = NULL;
    if (st == NX_STATUS_OK) st = gram_finish(&b, root ? root : "root", &g, e);
    gram_builder_free(&b);
    if (st != NX_STATUS_OK) return st;
    nx_grammar *x = nx_calloc(1, sizeof *x);
    if (!x) {
        gram_free(g);
        return nx_err_set(e, NX_STATUS_NOMEM, "grammar: out of memory");
    }
    x->g = g;
    *out = x;
    return NX_STATUS_OK;
}

static nx_status from_gbnf(const char *text, size_t len, const char *root, bool internal, nx_grammar **out,
                           char *err, size_t errlen) {
    struct nx_err e = {{0}};
    *out = NULL;
    if (!text) return NX_STATUS_INVALID_ARG;
    nx_status st = compile(text, len, root, internal, out, &e);
    if (st != NX_STATUS_OK) copy_err(&e, err, errlen);
    return st;
}

nx_status nx_grammar_from_gbnf(const char *text, size_t len, const char *root, nx_grammar **out,
                               char *err, size_t errlen) {
    return from_gbnf(text, len, root, false, out, err, errlen);
}

nx_status nx_grammar_from_schema_gbnf(const char *text, size_t len, const char *root, nx_grammar **out,
                                      char *err, size_t errlen) {
    return from_gbnf(text, len, root, true, out, err, errlen);
}

nx_status nx_grammar_from_json_schema(const char *json, size_t len,
                                      const struct nx_json_schema_params *params,
                                      nx_grammar **out, char *err, size_t errlen) {
    struct nx_err e = {{0}};
    *out = NULL;
    if (!json) return NX_STATUS_INVALID_ARG;
    char *gbnf = NULL;
    nx_status st = schema_to_gbnf(json, len, params, &gbnf, &e);
    if (st == NX_STATUS_OK) st = compile(gbnf, strlen(gbnf), "root", true, out, &e);
    if (st == NX_STATUS_OK)
        (*out)->source = gbnf;
    else
        nx_free(gbnf);
    if (st != NX_STATUS_OK) copy_err(&e, err, errlen);
    return st;
}

void nx_grammar_free(nx_grammar *g) {
    if (!g) return;
    gram_free(g->g);
    nx_free(g->source);
    nx_free(g);
}

int32_t nx_grammar_print(const nx_grammar *g, char *buf, int32_t len) {
    return gram_print(g->g, buf, len);
}
const char *nx_grammar_source(const nx_grammar *g) { return g->source; }

nx_status nx_grammar_vocab_init(const nx_model *model, nx_grammar_vocab **out) {
    *out = NULL;
    int32_t n = model ? nx_model_n_vocab(model) : 0;
    if (n <= 0) return NX_STATUS_INVALID_ARG;
    nx_status st = NX_STATUS_NOMEM;
    nx_grammar_vocab *v = nx_calloc(1, sizeof *v);
    char **bytes = nx_calloc((size_t)n, sizeof *bytes);
    int32_t *lens = nx_calloc((size_t)n, sizeof *lens);
    bool *eog = nx_calloc((size_t)n, sizeof *eog);
    if (!v || !bytes || !lens || !eog) goto done;
    v->n = n;
    v->first_eog = -1;
    v->text_off = nx_malloc(sizeof *v->text_off * (size_t)n);
    v->text_len = nx_malloc(sizeof *v->text_len * (size_t)n);
    if (!v->text_off || !v->text_len) goto done;
    size_t total = 0;
    char tmp[1024];
    for (int32_t t = 0; t < n; t++) {
        int32_t k = nx_token_to_piece(model, t, tmp, (int32_t)sizeof tmp, false);
        if (k < 0) k = 0; /* a piece over 1 KiB: never allowed */
        lens[t] = k;
        bytes[t] = nx_malloc((size_t)k + 1);
        if (!bytes[t]) goto done;
        memcpy(bytes[t], tmp, (size_t)k);
        eog[t] = nx_token_is_eog(model, t);
        if (eog[t] && v->first_eog < 0) v->first_eog = t;
        int32_t ks = nx_token_to_piece(model, t, tmp, (int32_t)sizeof tmp, true);
        v->text_len[t] = ks > 0 ? ks : 0;
        total += (size_t)v->text_len[t];
    }
    v->text = nx_malloc(total + 1);
    if (!v->text) goto done;
    size_t o = 0;
    for (int32_t t = 0; t < n; t++) {
        v->text_off[t] = (uint32_t)o;
        if (v->text_len[t]) nx_token_to_piece(model, t, v->text + o, v->text_len[t], true);
        o += (size_t)v->text_len[t];
    }
    struct nx_err e;
    st = gvocab_build(n, (const char *const *)bytes, lens, eog, &v->gv, &e);
done:
    if (bytes)
        for (int32_t t = 0; t < n; t++) nx_free(bytes[t]);
    nx_free(bytes);
    nx_free(lens);
    nx_free(eog);
    if (st != NX_STATUS_OK) {
        nx_grammar_vocab_free(v);
        return st;
    }
    *out = v;
    return NX_STATUS_OK;
}

void nx_grammar_vocab_free(nx_grammar_vocab *v) {
    if (!v) return;
    gvocab_free(v->gv);
    nx_free(v->text);
    nx_free(v->text_off);
    nx_free(v->text_len);
    nx_free(v);
}

const char *grammar_vocab_text(const nx_grammar_vocab *v, nx_token t, int32_t *len) {
    *len = v->text_len[t];
    return v->text + v->text_off[t];
}
int32_t grammar_vocab_n(const nx_grammar_vocab *v) { return v->n; }
nx_token grammar_vocab_first_eog(const nx_grammar_vocab *v) { return v->first_eog; }

nx_status nx_grammar_matcher_init(const nx_grammar *g, const nx_grammar_vocab *v,
                                  nx_grammar_matcher **out) {
    *out = NULL;
    if (!g || !v) return NX_STATUS_INVALID_ARG;
    struct gmatcher *m;
    nx_status st = gmatcher_init(g->g, v->gv, &m);
    if (st == NX_STATUS_OK) *out = (nx_grammar_matcher *)m;
    return st;
}
void nx_grammar_matcher_free(nx_grammar_matcher *m) { gmatcher_free((struct gmatcher *)m); }
void nx_grammar_matcher_reset(nx_grammar_matcher *m) { gmatcher_reset((struct gmatcher *)m); }
int32_t nx_grammar_matcher_mask(nx_grammar_matcher *m, uint64_t *bits, bool force) {
    return gmatcher_mask((struct gmatcher *)m, bits, force);
}
bool nx_grammar_matcher_mask_partial(const nx_grammar_matcher *m) {
    return gmatcher_mask_partial((const struct gmatcher *)m);
}
nx_status nx_grammar_matcher_accept(nx_grammar_matcher *m, nx_token t) {
    return gmatcher_accept((struct gmatcher *)m, t);
}
nx_status nx_grammar_matcher_accept_text(nx_grammar_matcher *m, const char *s, size_t n) {
    return gmatcher_accept_bytes((struct gmatcher *)m, s, n);
}
int32_t nx_grammar_matcher_rollback(nx_grammar_matcher *m, int32_t n) {
    return gmatcher_rollback((struct gmatcher *)m, n);
}
bool nx_grammar_matcher_can_end(const nx_grammar_matcher *m) {
    return gmatcher_can_end((const struct gmatcher *)m);
}
bool nx_grammar_matcher_is_finished(const nx_grammar_matcher *m) {
    return gmatcher_finished((const struct gmatcher *)m);
}
int64_t nx_grammar_matcher_completion_bytes(const nx_grammar_matcher *m) {
    return gmatcher_completion_cost((const struct gmatcher *)m);
}
