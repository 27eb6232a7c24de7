/*
 * embed_model2vec.c - model2vec static embeddings behind rt_embedder (contract: model2vec.h).
 *
 * DESIGN
 * - Everything is read and checked at open: the embedding matrix converted to float, weights to
 *   double, mapping to int32 with every row index range-checked, so embed() has no failure path
 *   beyond tokenization and allocation.
 * - The safetensors file is closed after conversion (the fixture is 380 KB; real potion models
 *   are a few tens of MB in float).
 */
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/nx_base.h"

#include "route/embed_impl.h"
#include "route/hftok.h"
#include "route/model2vec.h"
#include "route/safetensors.h"

struct m2v {
    rt_embedder base;
    hf_tok *tok;
    int32_t n_vocab;
    int rows, dim;
    float *emb;   /* [rows * dim] */
    double *w;    /* [n_vocab] or NULL */
    int32_t *map; /* [n_vocab] or NULL */
    int normalize;
    int median;
    char name[16];
};

static void m2v_free(rt_embedder *e) {
    struct m2v *m = (struct m2v *)e;
    if (!m) return;
    hf_tok_free(m->tok);
    nx_free(m->emb);
    nx_free(m->w);
    nx_free(m->map);
    nx_free(m);
}

int rt_model2vec_ids(rt_embedder *e, const char *text, int32_t **ids, char *err, size_t errlen) {
    struct m2v *m = (struct m2v *)e;
    *ids = NULL;
    if (!text) text = "";
    /* 1. pre-truncation to max_length * median_token_length code points */
    size_t max_chars = (size_t)RT_MODEL2VEC_MAX_LENGTH * (size_t)m->median, n = 0, chars = 0;
    size_t len = strlen(text);
    while (n < len) {
        if (((uint8_t)text[n] & 0xC0) != 0x80) {
            if (chars == max_chars) break;
            chars++;
        }
        n++;
    }
    int32_t *v = NULL;
    int k = hf_tok_encode(m->tok, text, n, &v, err, errlen);
    if (k < 0) return k;
    /* 2-3. drop unknowns, keep the first max_length */
    int32_t unk = hf_tok_unk_id(m->tok);
    int o = 0;
    for (int i = 0; i < k && o < RT_MODEL2VEC_MAX_LENGTH; i++)
        if (v[i] != unk) v[o++] = v[i];
    *ids = v;
    return o;
}

nx_status rt_model2vec_mean(rt_embedder *e, const char *text, double *out, int *normalize,
                            char *err, size_t errlen) {
    struct m2v *m = (struct m2v *)e;
    int32_t *ids;
    int n = rt_model2vec_ids(e, text, &ids, err, errlen);
    if (n < 0) return (nx_status)n;
    for (int d = 0; d < m->dim; d++) out[d] = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= m->n_vocab) continue; /* cannot happen: checked at open */
        int32_t row = m->map ? m->map[id] : id;
        double w = m->w ? m->w[id] : 1.0;
        const float *r = m->emb + (size_t)row * (size_t)m->dim;
        for (int d = 0; d < m->dim; d++) out[d] += (double)r[d] * w;
    }
    if (n > 0)
        for (int d = 0; d < m->dim; d++) out[d] /= n;
    nx_free(ids);
    if (normalize) *normalize = m->normalize;
    return NX_STATUS_OK;
}

static nx_status m2v_embed(rt_embedder *e, const char *text, enum rt_text_kind kind, float *out,
                           char *err, size_t errlen) {
    struct m2v *m = (struct m2v *)e;
    (void)kind;
    double *acc = nx_malloc((size_t)m->dim * sizeof(*acc));
    if (!acc) return nx_errf(err, errlen, NX_STATUS_NOMEM, "model2vec: out of memory");
    nx_status st = rt_model2vec_mean(e, text, acc, NULL, err, errlen);
    if (st != NX_STATUS_OK) {
        nx_free(acc);
        return st;
    }
    double ss = 0;
    for (int d = 0; d < m->dim; d++) ss += acc[d] * acc[d];
    double inv = 1.0 / (sqrt(ss) + 1e-32);
    for (int d = 0; d < m->dim; d++) out[d] = (float)(acc[d] * inv);
    nx_free(acc);
    return NX_STATUS_OK;
}

/* Each token's weighted row (weight x embedding) must fit in a float, as the output does: then
 * no sum of them overflows the double accumulators (a weight of 7e295 on a row holding 3e29 made
 * every embedding NaN). */
static nx_status check_weighted_rows(const struct m2v *m, char *err, size_t errlen) {
    float *row_max = nx_malloc((size_t)m->rows * sizeof(*row_max));
    if (!row_max) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    for (int32_t r = 0; r < m->rows; r++) {
        float x = 0;
        for (int d = 0; d < m->dim; d++) x = fmaxf(x, fabsf(m->emb[(size_t)r * (size_t)m->dim + d]));
        row_max[r] = x;
    }
    nx_status rc = NX_STATUS_OK;
    for (int32_t i = 0; i < m->n_vocab && rc == NX_STATUS_OK; i++) {
        float rm = row_max[m->map ? m->map[i] : i];
        if (fabs(m->w[i]) * rm > FLT_MAX)
            rc = nx_errf(err, errlen, NX_STATUS_FORMAT,
                         "tensor 'weights': element %d (%g) times its embedding row (max |x| %g) "
                         "overflows a float", i, m->w[i], (double)rm);
    }
    nx_free(row_max);
    return rc;
}

/* config.json -> normalize (absent file: false). */
static nx_status read_config(const char *dir, int *normalize, char *err, size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    struct stat st;
    *normalize = 0;
    if (stat(path, &st) != 0) return NX_STATUS_OK;
    json_error_t je;
    json_t *c = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!c || !json_is_object(c)) {
        nx_errf(err, errlen, NX_STATUS_FORMAT,
                "model2vec '%s': config.json is not a JSON object%s%s", dir, c ? "" : ": ",
                c ? "" : je.text);
        json_decref(c);
        return NX_STATUS_FORMAT;
    }
    json_t *nv = json_object_get(c, "normalize");
    if (nv && !json_is_boolean(nv) && !json_is_null(nv)) {
        json_decref(c);
        return nx_errf(err, errlen, NX_STATUS_FORMAT,
                       "model2vec '%s': config.json \"normalize\" is not a boolean", dir);
    }
    *normalize = json_is_true(nv);
    json_decref(c);
    return NX_STATUS_OK;
}

nx_status rt_embedder_model2vec_open(const char *dir, rt_embedder **out, char *err, size_t errlen) {
    char path[4096], e2[400] = "";
    *out = NULL;
    struct m2v *m = nx_calloc(1, sizeof(*m));
    st_file *st = NULL;
    nx_status rc = NX_STATUS_FORMAT;
    if (!m) return nx_errf(err, errlen, NX_STATUS_NOMEM, "model2vec: out of memory");
    snprintf(m->name, sizeof m->name, "model2vec");
    m->base.name = m->name;
    m->base.embed = m2v_embed;
    m->base.destroy = m2v_free;
    if ((rc = read_config(dir, &m->normalize, err, errlen)) != NX_STATUS_OK) goto fail_quiet;
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if ((rc = hf_tok_load(path, &m->tok, e2, sizeof e2)) != NX_STATUS_OK) goto fail;
    m->n_vocab = hf_tok_n_vocab(m->tok);
    m->median = hf_tok_median_token_chars(m->tok);
    if (m->median < 1) m->median = 1;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if ((rc = st_open(path, &st, e2, sizeof e2)) != NX_STATUS_OK) goto fail;

    const struct st_tensor *te = st_find(st, "embeddings");
    if (!te) te = st_find(st, "embedding.weight");
    if (!te) te = st_find(st, "0");
    if (!te) {
        rc = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                     "model.safetensors has no \"embeddings\" tensor");
        goto fail;
    }
    if (te->n_dims != 2 || te->shape[0] < 1 || te->shape[1] < 1 || te->shape[0] > INT32_MAX ||
        te->shape[1] > 65536) {
        rc = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                     "tensor '%s' must be 2-D [rows, dim] with rows, dim >= 1", te->name);
        goto fail;
    }
    if (!st_dtype_numeric(te->dtype) || te->dtype == ST_BOOL) {
        rc = nx_errf(e2, sizeof e2, NX_STATUS_UNSUPPORTED,
                     "tensor '%s': dtype %s is not supported for embeddings", te->name,
                     st_dtype_name(te->dtype));
        goto fail;
    }
    m->rows = (int)te->shape[0];
    m->dim = (int)te->shape[1];
    m->base.dim = m->dim;
    m->emb = nx_malloc((size_t)te->n_elem * sizeof(float));
    if (!m->emb) {
        rc = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
        goto fail;
    }
    if ((rc = st_to_f32(te, m->emb, e2, sizeof e2)) != NX_STATUS_OK) goto fail;
    for (uint64_t i = 0; i < te->n_elem; i++)
        if (!isfinite(m->emb[i])) {
            rc = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT, "tensor '%s': element %llu is not finite",
                         te->name, (unsigned long long)i);
            goto fail;
        }

    const struct st_tensor *tw = st_find(st, "weights");
    if (tw) {
        if (tw->n_dims != 1 || tw->shape[0] != m->n_vocab || !st_dtype_numeric(tw->dtype)) {
            rc = nx_errf(
                e2, sizeof e2, NX_STATUS_FORMAT,
                "tensor 'weights' must be a 1-D numeric [%d] (the tokenizer's vocabulary), got %s with %d dims",
                m->n_vocab, st_dtype_name(tw->dtype), tw->n_dims);
            goto fail;
        }
        m->w = nx_malloc((size_t)m->n_vocab * sizeof(double));
        if (!m->w) {
            rc = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        for (int32_t i = 0; i < m->n_vocab; i++) {
            m->w[i] = st_get_f64(tw, (uint64_t)i);
            if (!isfinite(m->w[i])) {
                rc = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                             "tensor 'weights': element %d is not finite", i);
                goto fail;
            }
        }
    }
    const struct st_tensor *tm = st_find(st, "mapping");
    if (tm) {
        enum st_dtype d = tm->dtype;
        bool is_int = d == ST_I8 || d == ST_U8 || d == ST_I16 || d == ST_U16 || d == ST_I32 ||
                      d == ST_U32 || d == ST_I64 || d == ST_U64;
        if (tm->n_dims != 1 || tm->shape[0] != m->n_vocab || !is_int) {
            rc = nx_errf(
                e2, sizeof e2, NX_STATUS_FORMAT,
                "tensor 'mapping' must be a 1-D integer [%d] (the tokenizer's vocabulary), got %s with %d dims",
                m->n_vocab, st_dtype_name(d), tm->n_dims);
            goto fail;
        }
        m->map = nx_malloc((size_t)m->n_vocab * sizeof(int32_t));
        if (!m->map) {
            rc = nx_errf(e2, sizeof e2, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        for (int32_t i = 0; i < m->n_vocab; i++) {
            int64_t r = st_get_i64(tm, (uint64_t)i);
            if (r < 0 || r >= m->rows) {
                rc = nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                             "tensor 'mapping': token %d maps to row %lld outside [0, %d)", i,
                             (long long)r, m->rows);
                goto fail;
            }
            m->map[i] = (int32_t)r;
        }
    } else if (m->rows != m->n_vocab) {
        rc =
            nx_errf(e2, sizeof e2, NX_STATUS_FORMAT,
                    "%d embedding rows for %d tokens and no 'mapping' tensor", m->rows, m->n_vocab);
        goto fail;
    }
    if (m->w && (rc = check_weighted_rows(m, e2, sizeof e2)) != NX_STATUS_OK) goto fail;
    st_close(st);
    *out = &m->base;
    return NX_STATUS_OK;
fail:
    nx_errf(err, errlen, rc, "model2vec '%s': %s", dir, e2);
fail_quiet:
    st_close(st);
    m2v_free(&m->base);
    return rc;
}
