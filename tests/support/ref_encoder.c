/*
 * ref_encoder.c - naive double-precision reference encoder (the test oracle for bert and
 * nomic-bert GGUFs).
 *
 * DESIGN
 * - Independence: written from the architecture description (BERT; nomic-bert = BERT with
 *   rotary positions and a SwiGLU MLP; llama.cpp's GGUF names), never from src/model/. It
 *   shares only the GGUF reader and the scalar reference dequantizers with the engine.
 * - Every weight is dequantized once into a dense row-major double matrix (row r holds the ne[0]
 *   elements of GGUF row r, so y[r] = dot(W row r, x)). The whole sequence is recomputed per
 *   call in double; fine for models of a few hundred thousand parameters.
 * - Per sequence of n tokens:
 *     h_t = E_tok[tok_t] + E_type[type_t] + E_pos[t] (bert; nomic-bert has no E_pos)
 *     h = LN(h; token_embd_norm)
 *     per layer: Q = Wq h + bq, K, V likewise (rows 0..E, E..2E, 2E..3E of a fused attn_qkv)
 *                nomic-bert: rotate (Q_h[i], Q_h[i + d/2]) and K alike by angle t * base^(-2i/d)
 *                A_h = softmax(Q_h K_h^T / sqrt(d)) V_h over all n positions (no mask)
 *                h = LN(h + Wo A + bo; attn_output_norm)
 *                bert: m = Wdown gelu(Wup h + bup) + bdown, gelu(x) = x/2 (1 + erf(x / sqrt 2))
 *                nomic-bert: m = Wdown (silu(Wgate h) * (Wup h))
 *                h = LN(h + m; layer_output_norm)
 *     pooled = mean_t h_t | h_0 | h_{n-1};  rank: Wco tanh(Wc h_0 + bc) + bco
 *   LN(x) = (x - mean) / sqrt(var + eps) * w + b with the population variance.
 */
#include "ref_encoder.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kern/quant.h"
#include "kern/types.h"

struct rmat {
    double *w; /* rows x cols */
    int64_t rows, cols;
};

struct rlayer {
    struct rmat q, k, v, o, up, gate, down;
    double *bq, *bk, *bv, *bo, *bup, *bdown; /* NULL = zero */
    double *ln1_w, *ln1_b, *ln2_w, *ln2_b;
};

struct ref_encoder {
    bool nomic;
    int n_layer, n_embd, n_head, n_ff, n_ctx, n_vocab, n_rot, n_cls_out;
    double eps, rope_base;
    struct rmat tok, types, pos, cls, cls_out;
    double *emb_ln_w, *emb_ln_b, *cls_b, *cls_out_b;
    struct rlayer *layers;
    unsigned variant;
    /* fused q|k|v matrices per layer are split into q, k, v at load */
};

/* ---- loading ---- */

static nx_status load_rows(const struct gguf_file *f, const char *name, int64_t ne0,
                           int64_t ne1, bool required, struct rmat *out, struct nx_err *err) {
    memset(out, 0, sizeof *out);
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (!required) return NX_STATUS_OK;
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: missing tensor '%s'", name);
    }
    if (t->ne[0] != ne0 || (ne1 > 0 && t->ne[1] != ne1) || t->ne[2] != 1 || t->ne[3] != 1)
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: tensor '%s' has shape [%lld, %lld]", name,
                          (long long)t->ne[0], (long long)t->ne[1]);
    size_t rb;
    if (!nx_row_bytes(t->type, ne0, &rb))
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "ref: tensor '%s': bad type", name);
    out->rows = t->ne[1];
    out->cols = ne0;
    out->w = malloc((size_t)(out->rows * out->cols) * sizeof(double));
    float *row = malloc((size_t)ne0 * sizeof(float));
    if (!out->w || !row) {
        free(row);
        return nx_err_set(err, NX_STATUS_NOMEM, "ref: out of memory");
    }
    for (int64_t r = 0; r < out->rows; r++) {
        quant_dequantize_row_ref(t->type, (const unsigned char *)t->data + (size_t)r * rb, row,
                                 ne0);
        for (int64_t i = 0; i < ne0; i++) out->w[r * ne0 + i] = row[i];
    }
    free(row);
    return NX_STATUS_OK;
}

static nx_status load_vec(const struct gguf_file *f, const char *name, int64_t n, bool required,
                          double **out, struct nx_err *err) {
    struct rmat m;
    *out = NULL;
    nx_status st = load_rows(f, name, n, 1, required, &m, err);
    if (st == NX_STATUS_OK) *out = m.w;
    return st;
}

/* Rows [r0, r0 + n) of a matrix as a new matrix. */
static nx_status sub_rows(const struct rmat *src, int64_t r0, int64_t n, struct rmat *dst) {
    dst->rows = n;
    dst->cols = src->cols;
    dst->w = malloc((size_t)(n * src->cols) * sizeof(double));
    if (!dst->w) return NX_STATUS_NOMEM;
    memcpy(dst->w, src->w + r0 * src->cols, (size_t)(n * src->cols) * sizeof(double));
    return NX_STATUS_OK;
}

static double *sub_vec(const double *v, int64_t off, int64_t n) {
    if (!v) return NULL;
    double *r = malloc((size_t)n * sizeof(double));
    if (r) memcpy(r, v + off, (size_t)n * sizeof(double));
    return r;
}

static bool get_u(const struct gguf_file *f, const char *arch, const char *suffix, int *out) {
    char key[128];
    uint32_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_get_u32(f, key, &v) || v > (1u << 30)) return false;
    *out = (int)v;
    return true;
}

nx_status ref_encoder_load(const char *path, struct ref_encoder **out, struct nx_err *err) {
    *out = NULL;
    struct gguf_file *f = NULL;
    nx_status st = gguf_open(path, &f, err);
    if (st != NX_STATUS_OK) return st;
    struct ref_encoder *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return nx_err_set(err, NX_STATUS_NOMEM, "ref: out of memory");
    }
    const char *s;
    size_t len;
    char arch[16] = "";
    if (gguf_get_str(f, "general.architecture", &s, &len) && len < sizeof arch) {
        memcpy(arch, s, len);
        arch[len] = 0;
    }
    if (strcmp(arch, "bert") != 0 && strcmp(arch, "nomic-bert") != 0) {
        st = nx_err_set(err, NX_STATUS_UNSUPPORTED, "ref: architecture '%s' is not an encoder",
                        arch);
        goto fail;
    }
    m->nomic = arch[0] == 'n';
    float eps = 0, base = 10000.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_epsilon", arch);
    if (!get_u(f, arch, "block_count", &m->n_layer) ||
        !get_u(f, arch, "embedding_length", &m->n_embd) ||
        !get_u(f, arch, "attention.head_count", &m->n_head) ||
        !get_u(f, arch, "feed_forward_length", &m->n_ff) || !gguf_get_f32(f, key, &eps)) {
        st = nx_err_set(err, NX_STATUS_FORMAT, "ref: missing hyperparameters");
        goto fail;
    }
    m->eps = eps;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    if (m->nomic) gguf_get_f32(f, key, &base);
    m->rope_base = base;
    m->n_rot = m->n_embd / m->n_head;
    const int64_t E = m->n_embd, F = m->n_ff;
    if ((st = load_rows(f, "token_embd.weight", E, 0, true, &m->tok, err))) goto fail;
    m->n_vocab = (int)m->tok.rows;
    if ((st = load_rows(f, "token_types.weight", E, 0, false, &m->types, err))) goto fail;
    if (!m->nomic) {
        if ((st = load_rows(f, "position_embd.weight", E, 0, true, &m->pos, err))) goto fail;
        m->n_ctx = (int)m->pos.rows;
        if ((st = load_rows(f, "cls.weight", E, E, false, &m->cls, err))) goto fail;
        if ((st = load_vec(f, "cls.bias", E, false, &m->cls_b, err))) goto fail;
        if ((st = load_rows(f, "cls.output.weight", E, 0, false, &m->cls_out, err))) goto fail;
        m->n_cls_out = (int)m->cls_out.rows;
        if (m->n_cls_out &&
            (st = load_vec(f, "cls.output.bias", m->n_cls_out, true, &m->cls_out_b, err)))
            goto fail;
    } else {
        m->n_ctx = 1 << 20;
    }
    if ((st = load_vec(f, "token_embd_norm.weight", E, true, &m->emb_ln_w, err)) ||
        (st = load_vec(f, "token_embd_norm.bias", E, true, &m->emb_ln_b, err)))
        goto fail;
    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "ref: out of memory");
        goto fail;
    }
    for (int l = 0; l < m->n_layer; l++) {
        struct rlayer *L = &m->layers[l];
        char n[96];
#define N(x) (snprintf(n, sizeof n, "blk.%d." x, l), n)
        if (gguf_find_tensor(f, N("attn_qkv.weight"))) {
            struct rmat qkv;
            double *b = NULL;
            if ((st = load_rows(f, N("attn_qkv.weight"), E, 3 * E, true, &qkv, err))) goto fail;
            st = load_vec(f, N("attn_qkv.bias"), 3 * E, false, &b, err);
            if (st == NX_STATUS_OK &&
                (sub_rows(&qkv, 0, E, &L->q) || sub_rows(&qkv, E, E, &L->k) ||
                 sub_rows(&qkv, 2 * E, E, &L->v)))
                st = nx_err_set(err, NX_STATUS_NOMEM, "ref: out of memory");
            if (b) {
                L->bq = sub_vec(b, 0, E);
                L->bk = sub_vec(b, E, E);
                L->bv = sub_vec(b, 2 * E, E);
            }
            free(qkv.w);
            free(b);
            if (st) goto fail;
        } else if ((st = load_rows(f, N("attn_q.weight"), E, E, true, &L->q, err)) ||
                   (st = load_rows(f, N("attn_k.weight"), E, E, true, &L->k, err)) ||
                   (st = load_rows(f, N("attn_v.weight"), E, E, true, &L->v, err)) ||
                   (st = load_vec(f, N("attn_q.bias"), E, false, &L->bq, err)) ||
                   (st = load_vec(f, N("attn_k.bias"), E, false, &L->bk, err)) ||
                   (st = load_vec(f, N("attn_v.bias"), E, false, &L->bv, err))) {
            goto fail;
        }
        if ((st = load_rows(f, N("attn_output.weight"), E, E, true, &L->o, err)) ||
            (st = load_vec(f, N("attn_output.bias"), E, false, &L->bo, err)) ||
            (st = load_vec(f, N("attn_output_norm.weight"), E, true, &L->ln1_w, err)) ||
            (st = load_vec(f, N("attn_output_norm.bias"), E, true, &L->ln1_b, err)) ||
            (st = load_rows(f, N("ffn_up.weight"), E, F, true, &L->up, err)) ||
            (st = load_vec(f, N("ffn_up.bias"), F, false, &L->bup, err)) ||
            (st = load_rows(f, N("ffn_gate.weight"), E, F, m->nomic, &L->gate, err)) ||
            (st = load_rows(f, N("ffn_down.weight"), F, E, true, &L->down, err)) ||
            (st = load_vec(f, N("ffn_down.bias"), E, false, &L->bdown, err)) ||
            (st = load_vec(f, N("layer_output_norm.weight"), E, true, &L->ln2_w, err)) ||
            (st = load_vec(f, N("layer_output_norm.bias"), E, true, &L->ln2_b, err)))
            goto fail;
#undef N
    }
    gguf_close(f);
    *out = m;
    return NX_STATUS_OK;
fail:
    gguf_close(f);
    ref_encoder_free(m);
    return st;
}

void ref_encoder_free(struct ref_encoder *m) {
    if (!m) return;
    free(m->tok.w);
    free(m->types.w);
    free(m->pos.w);
    free(m->cls.w);
    free(m->cls_out.w);
    free(m->emb_ln_w);
    free(m->emb_ln_b);
    free(m->cls_b);
    free(m->cls_out_b);
    for (int l = 0; m->layers && l < m->n_layer; l++) {
        struct rlayer *L = &m->layers[l];
        struct rmat *ms[] = {&L->q, &L->k, &L->v, &L->o, &L->up, &L->gate, &L->down};
        for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) free(ms[i]->w);
        double *vs[] = {L->bq, L->bk, L->bv, L->bo, L->bup, L->bdown,
                        L->ln1_w, L->ln1_b, L->ln2_w, L->ln2_b};
        for (size_t i = 0; i < sizeof vs / sizeof vs[0]; i++) free(vs[i]);
    }
    free(m->layers);
    free(m);
}

int ref_encoder_n_embd(const struct ref_encoder *m) { return m->n_embd; }
int ref_encoder_n_cls_out(const struct ref_encoder *m) { return m->n_cls_out; }
void ref_encoder_set_variant(struct ref_encoder *m, unsigned variant) { m->variant = variant; }

/* ---- the forward pass ---- */

/* y = W x + b (b may be NULL). */
static void affine(const struct rmat *W, const double *b, const double *x, double *y) {
    for (int64_t r = 0; r < W->rows; r++) {
        double s = b ? b[r] : 0.0;
        const double *w = W->w + r * W->cols;
        for (int64_t i = 0; i < W->cols; i++) s += w[i] * x[i];
        y[r] = s;
    }
}

static void lnorm(double *x, int n, const double *w, const double *b, double eps) {
    double mean = 0, var = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= n;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= n;
    double inv = 1.0 / sqrt(var + eps);
    for (int i = 0; i < n; i++) x[i] = (x[i] - mean) * inv * w[i] + b[i];
}

static double gelu(double x, bool tanh_approx) {
    if (tanh_approx)
        return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
}

static void rotate(double *v, int d, int t, double base, bool pairs) {
    for (int i = 0; i < d / 2; i++) {
        double th = t * pow(base, -2.0 * i / d);
        int a = pairs ? 2 * i : i, b = pairs ? 2 * i + 1 : i + d / 2;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * cos(th) - x1 * sin(th);
        v[b] = x0 * sin(th) + x1 * cos(th);
    }
}

int ref_encoder_embed(struct ref_encoder *m, const int32_t *tokens, const int32_t *types, int n,
                      int pooling, bool normalize, double *out) {
    const int E = m->n_embd, F = m->n_ff, H = m->n_head, d = E / H;
    const unsigned var = m->variant;
    if (n < 1 || n > m->n_ctx || pooling < 1 || pooling > 4) return -1;
    if (pooling == 4 && m->n_cls_out == 0) return -1;
    for (int t = 0; t < n; t++) {
        int ty = types ? types[t] : 0;
        if (tokens[t] < 0 || tokens[t] >= m->n_vocab) return -1;
        if (ty < 0 || (m->types.w ? ty >= m->types.rows : ty != 0)) return -1;
    }
    double *h = calloc((size_t)n * E, sizeof *h);
    double *q = malloc((size_t)n * E * sizeof *q), *k = malloc((size_t)n * E * sizeof *k);
    double *v = malloc((size_t)n * E * sizeof *v), *a = malloc((size_t)n * E * sizeof *a);
    double *p = malloc((size_t)n * sizeof *p), *tmp = malloc((size_t)(2 * E + 2 * F) * sizeof *tmp);
    if (!h || !q || !k || !v || !a || !p || !tmp) {
        free(h), free(q), free(k), free(v), free(a), free(p), free(tmp);
        return -1;
    }
    for (int t = 0; t < n; t++) {
        double *x = h + (size_t)t * E;
        int ty = (types && !(var & REF_ENC_VAR_TYPES_ZERO)) ? types[t] : 0;
        for (int i = 0; i < E; i++) {
            x[i] = m->tok.w[(size_t)tokens[t] * E + i];
            if (m->types.w) x[i] += m->types.w[(size_t)ty * E + i];
            if (m->pos.w) x[i] += m->pos.w[(size_t)t * E + i];
        }
        lnorm(x, E, m->emb_ln_w, m->emb_ln_b, m->eps);
    }
    for (int l = 0; l < m->n_layer; l++) {
        const struct rlayer *L = &m->layers[l];
        const bool pre = var & REF_ENC_VAR_PRE_NORM;
        for (int t = 0; t < n; t++) {
            double *x = h + (size_t)t * E, *xin = x;
            if (pre) {
                memcpy(tmp, x, (size_t)E * sizeof *tmp);
                lnorm(tmp, E, L->ln1_w, L->ln1_b, m->eps);
                xin = tmp;
            }
            affine(&L->q, L->bq, xin, q + (size_t)t * E);
            affine(&L->k, L->bk, xin, k + (size_t)t * E);
            affine(&L->v, L->bv, xin, v + (size_t)t * E);
            if (m->nomic) {
                for (int hh = 0; hh < H; hh++) {
                    bool pairs = var & REF_ENC_VAR_ROPE_PAIRS;
                    rotate(q + (size_t)t * E + hh * d, d, t, m->rope_base, pairs);
                    rotate(k + (size_t)t * E + hh * d, d, t, m->rope_base, pairs);
                }
            }
        }
        for (int hh = 0; hh < H; hh++) {
            for (int t = 0; t < n; t++) {
                int last = (var & REF_ENC_VAR_CAUSAL) ? t : n - 1;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= last; j++) {
                    double s = 0;
                    for (int i = 0; i < d; i++)
                        s += q[(size_t)t * E + hh * d + i] * k[(size_t)j * E + hh * d + i];
                    p[j] = s / sqrt((double)d);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= last; j++) sum += (p[j] = exp(p[j] - mx));
                for (int i = 0; i < d; i++) {
                    double s = 0;
                    for (int j = 0; j <= last; j++) s += p[j] * v[(size_t)j * E + hh * d + i];
                    a[(size_t)t * E + hh * d + i] = s / sum;
                }
            }
        }
        for (int t = 0; t < n; t++) {
            double *x = h + (size_t)t * E;
            affine(&L->o, L->bo, a + (size_t)t * E, tmp);
            for (int i = 0; i < E; i++) x[i] += tmp[i];
            if (!pre) lnorm(x, E, L->ln1_w, L->ln1_b, m->eps);
            double *u = tmp + E, *g = tmp + E + F, *xin = x;
            if (pre) {
                memcpy(tmp, x, (size_t)E * sizeof *tmp);
                lnorm(tmp, E, L->ln2_w, L->ln2_b, m->eps);
                xin = tmp;
            }
            affine(&L->up, L->bup, xin, u);
            if (m->nomic) {
                affine(&L->gate, NULL, xin, g);
                for (int i = 0; i < F; i++) u[i] *= g[i] / (1.0 + exp(-g[i]));
            } else {
                for (int i = 0; i < F; i++) u[i] = gelu(u[i], var & REF_ENC_VAR_GELU_TANH);
            }
            double *o = tmp + E + 2 * F;
            affine(&L->down, L->bdown, u, o);
            for (int i = 0; i < E; i++) x[i] += o[i];
            if (!pre) lnorm(x, E, L->ln2_w, L->ln2_b, m->eps);
        }
    }
    if (pooling == 4) {
        affine(&m->cls, m->cls_b, h, tmp);
        if (!(var & REF_ENC_VAR_NO_TANH))
            for (int i = 0; i < E; i++) tmp[i] = tanh(tmp[i]);
        affine(&m->cls_out, m->cls_out_b, tmp, out);
    } else {
        for (int i = 0; i < E; i++) {
            if (pooling == 1) {
                double s = 0;
                for (int t = 0; t < n; t++) s += h[(size_t)t * E + i];
                out[i] = s / n;
            } else {
                out[i] = h[(size_t)(pooling == 2 ? 0 : n - 1) * E + i];
            }
        }
        if (normalize) {
            double s = 0;
            for (int i = 0; i < E; i++) s += out[i] * out[i];
            s = sqrt(s);
            if (s > 0)
                for (int i = 0; i < E; i++) out[i] /= s;
        }
    }
    free(h), free(q), free(k), free(v), free(a), free(p), free(tmp);
    return 0;
}
