/*
 * ref_forward.c - naive double-precision reference forward pass (the test oracle).
 *
 * DESIGN
 * - Independence: this file is written from the architecture description alone (llama.cpp's
 *   GGUF conventions), never from src/model/. It shares only the GGUF reader and the scalar
 *   reference dequantizers with the engine, both tested on their own.
 * - Simplicity over speed: every weight is dequantized once at load into a dense row-major
 *   double matrix (row r = the ne[0] elements of GGUF row r, so y[r] = dot(W row r, x)); the
 *   forward pass recomputes the whole sequence from position 0 with no KV cache, in double.
 *   Good for models of a few million parameters (tests), hopeless for big ones.
 * - The computation per token t (positions 0..n-1):
 *     x = token_embd[tok]
 *     per layer: h = rmsnorm(x) * attn_norm
 *                q = Wq h (+bq), k = Wk h (+bk), v = Wv h (+bv)          (qwen2 biases)
 *                q_h = rmsnorm(q_h) * q_norm, k_h likewise, per head     (qwen3, before RoPE)
 *                RoPE(q, k): theta_i = pos * base^(-2i/n_rot) / rope_freqs[i]; pairs
 *                  (x[2i], x[2i+1]) for llama/mistral, (x[i], x[i + n_rot/2]) for qwen2/qwen3
 *                attention per head h over positions 0..t with kv head h / (n_head/n_head_kv),
 *                  scores q.k / sqrt(head_dim), softmax, weighted sum of v
 *                x += Wo attn;  h = rmsnorm(x) * ffn_norm;  x += Wdown(silu(Wgate h) * Wup h)
 *     logits = Woutput (rmsnorm(x) * output_norm), Woutput = token_embd when output is absent.
 * - Variants (ref_model_set_variant) flip one convention at a time so the tests can prove their
 *   tolerances would catch that mistake in an engine.
 * - Not thread-safe per model (scratch buffers are allocated per call, but the variant flag is
 *   plain state); one model per test thread.
 */
#include "ref_forward.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kern/quant.h"
#include "kern/types.h"

enum ref_arch { REF_LLAMA, REF_MISTRAL, REF_QWEN2, REF_QWEN3 };

/* A dense matrix: rows x cols doubles, plus the storage type it came from. */
struct ref_mat {
    double *w;
    int64_t rows;
    int64_t cols;
    enum nx_type type;
};

struct ref_layer {
    double *attn_norm; /* [n_embd] */
    struct ref_mat wq; /* n_head*head_dim x n_embd */
    struct ref_mat wk; /* n_head_kv*head_dim x n_embd */
    struct ref_mat wv;
    double *bq;        /* qwen2 only */
    double *bk;
    double *bv;
    double *q_norm;    /* [head_dim], qwen3 only */
    double *k_norm;
    struct ref_mat wo; /* n_embd x n_head*head_dim */
    double *ffn_norm;
    struct ref_mat wgate; /* n_ff x n_embd */
    struct ref_mat wup;
    struct ref_mat wdown; /* n_embd x n_ff */
};

struct ref_model {
    enum ref_arch arch;
    int n_layer;
    int n_embd;
    int n_head;
    int n_head_kv;
    int head_dim;
    int n_rot;
    int n_ff;
    int n_vocab;
    double eps;
    double rope_base;
    bool neox;
    double *rope_freqs; /* [n_rot/2] divisors, or NULL */
    struct ref_mat tok_embd;
    double *out_norm;
    struct ref_mat output; /* w NULL when tied */
    struct ref_layer *layers;
    unsigned variant;
};

/* ---------------------------------------------------------------------------------------------
 * Loading
 * ------------------------------------------------------------------------------------------- */

static bool ref_get_int(const struct gguf_file *f, const char *arch, const char *suffix,
                        int *out) {
    char key[128];
    uint32_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_get_u32(f, key, &v) || v > (1u << 30)) return false;
    *out = (int)v;
    return true;
}

static bool ref_get_float(const struct gguf_file *f, const char *arch, const char *suffix,
                          double *out) {
    char key[128];
    float v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_get_f32(f, key, &v)) return false;
    *out = v;
    return true;
}

/*
 * Dequantize tensor `name` (shape [ne0] or [ne0, ne1]) into a new double array. Absent and
 * !required: *out = NULL, OK.
 */
static nx_status ref_load_tensor(const struct gguf_file *f, const char *name, int64_t ne0,
                                 int64_t ne1, bool required, double **out, enum nx_type *type,
                                 struct nx_err *err) {
    *out = NULL;
    const struct gguf_tensor *t = gguf_find_tensor(f, name);
    if (!t) {
        if (!required) return NX_STATUS_OK;
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: tensor '%s' missing", name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        return nx_err_set(err, NX_STATUS_FORMAT,
                          "ref: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected "
                          "[%lld, %lld]", name, (long long)t->ne[0], (long long)t->ne[1],
                          (long long)t->ne[2], (long long)t->ne[3], (long long)ne0,
                          (long long)ne1);
    }
    size_t row_bytes;
    if (!nx_type_supported(t->type) || !nx_row_bytes(t->type, ne0, &row_bytes)) {
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "ref: tensor '%s': type %d unsupported",
                          name, (int)t->type);
    }
    double *w = malloc((size_t)(ne0 * ne1) * sizeof *w);
    float *row = malloc((size_t)ne0 * sizeof *row);
    if (!w || !row) {
        free(w);
        free(row);
        return nx_err_set(err, NX_STATUS_NOMEM, "ref: out of memory for '%s'", name);
    }
    const uint8_t *src = t->data;
    for (int64_t r = 0; r < ne1; r++) {
        quant_dequantize_row_ref(t->type, src + (size_t)r * row_bytes, row, ne0);
        for (int64_t c = 0; c < ne0; c++) w[r * ne0 + c] = row[c];
    }
    free(row);
    *out = w;
    if (type) *type = t->type;
    return NX_STATUS_OK;
}

/* A matrix stored as GGUF [cols, rows]. */
static nx_status ref_load_mat(const struct gguf_file *f, const char *name, int64_t cols,
                              int64_t rows, bool required, struct ref_mat *m,
                              struct nx_err *err) {
    m->rows = rows;
    m->cols = cols;
    m->type = NX_TYPE_F32;
    return ref_load_tensor(f, name, cols, rows, required, &m->w, &m->type, err);
}

static nx_status ref_load_vec(const struct gguf_file *f, const char *name, int64_t n,
                              bool required, double **v, struct nx_err *err) {
    return ref_load_tensor(f, name, n, 1, required, v, NULL, err);
}

void ref_model_free(struct ref_model *m) {
    if (!m) return;
    if (m->layers) {
        for (int l = 0; l < m->n_layer; l++) {
            struct ref_layer *L = &m->layers[l];
            free(L->attn_norm);
            free(L->wq.w);
            free(L->wk.w);
            free(L->wv.w);
            free(L->bq);
            free(L->bk);
            free(L->bv);
            free(L->q_norm);
            free(L->k_norm);
            free(L->wo.w);
            free(L->ffn_norm);
            free(L->wgate.w);
            free(L->wup.w);
            free(L->wdown.w);
        }
    }
    free(m->layers);
    free(m->rope_freqs);
    free(m->tok_embd.w);
    free(m->out_norm);
    free(m->output.w);
    free(m);
}

static nx_status ref_load_hparams(struct ref_model *m, const struct gguf_file *f,
                                  struct nx_err *err) {
    static const char *const names[] = {"llama", "mistral", "qwen2", "qwen3"};
    const char *s;
    size_t len;
    if (!gguf_get_str(f, "general.architecture", &s, &len)) {
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: general.architecture missing");
    }
    int a = -1;
    for (int i = 0; i < 4; i++) {
        if (strlen(names[i]) == len && memcmp(names[i], s, len) == 0) a = i;
    }
    if (a < 0) {
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "ref: architecture '%.*s'", (int)len, s);
    }
    m->arch = (enum ref_arch)a;
    m->neox = m->arch == REF_QWEN2 || m->arch == REF_QWEN3;
    const char *arch = names[a];
    if (!ref_get_int(f, arch, "block_count", &m->n_layer) ||
        !ref_get_int(f, arch, "embedding_length", &m->n_embd) ||
        !ref_get_int(f, arch, "attention.head_count", &m->n_head) ||
        !ref_get_int(f, arch, "feed_forward_length", &m->n_ff)) {
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: a required %s.* hyperparameter is "
                          "missing", arch);
    }
    if (!ref_get_int(f, arch, "attention.head_count_kv", &m->n_head_kv)) m->n_head_kv = m->n_head;
    if (m->n_layer < 1 || m->n_embd < 1 || m->n_head < 1 || m->n_head_kv < 1 || m->n_ff < 1 ||
        m->n_head % m->n_head_kv != 0) {
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: inconsistent hyperparameters");
    }
    if (!ref_get_int(f, arch, "attention.key_length", &m->head_dim)) {
        m->head_dim = m->n_embd / m->n_head;
    }
    if (!ref_get_int(f, arch, "rope.dimension_count", &m->n_rot)) m->n_rot = m->head_dim;
    if (m->head_dim < 2 || m->n_rot < 2 || m->n_rot > m->head_dim || m->n_rot % 2 != 0) {
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: bad head_dim %d / rope dims %d",
                          m->head_dim, m->n_rot);
    }
    int vlen;
    if (ref_get_int(f, arch, "attention.value_length", &vlen) && vlen != m->head_dim) {
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "ref: value_length != key_length");
    }
    if (!ref_get_float(f, arch, "attention.layer_norm_rms_epsilon", &m->eps)) m->eps = 1e-5;
    if (!ref_get_float(f, arch, "rope.freq_base", &m->rope_base)) m->rope_base = 10000.0;
    const struct gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te || te->ne[1] < 1 || te->ne[1] > (1 << 24)) {
        return nx_err_set(err, NX_STATUS_FORMAT, "ref: token_embd.weight missing or bad");
    }
    m->n_vocab = (int)te->ne[1];
    return NX_STATUS_OK;
}

nx_status ref_model_load(const char *gguf_path, struct ref_model **out, struct nx_err *err) {
    *out = NULL;
    struct gguf_file *f = NULL;
    nx_status st = gguf_open(gguf_path, &f, err);
    if (st != NX_STATUS_OK) return st;
    struct ref_model *m = calloc(1, sizeof *m);
    if (!m) {
        gguf_close(f);
        return nx_err_set(err, NX_STATUS_NOMEM, "ref: out of memory");
    }
    st = ref_load_hparams(m, f, err);
    if (st != NX_STATUS_OK) goto fail;

    const int64_t E = m->n_embd, F = m->n_ff, V = m->n_vocab, D = m->head_dim;
    const int64_t QD = (int64_t)m->n_head * D, KD = (int64_t)m->n_head_kv * D;
    st = ref_load_mat(f, "token_embd.weight", E, V, true, &m->tok_embd, err);
    if (st == NX_STATUS_OK) st = ref_load_vec(f, "output_norm.weight", E, true, &m->out_norm, err);
    if (st == NX_STATUS_OK) st = ref_load_mat(f, "output.weight", E, V, false, &m->output, err);
    if (st == NX_STATUS_OK) {
        st = ref_load_vec(f, "rope_freqs.weight", m->n_rot / 2, false, &m->rope_freqs, err);
    }
    if (st != NX_STATUS_OK) goto fail;
    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "ref: out of memory");
        goto fail;
    }
    bool qwen2 = m->arch == REF_QWEN2, qwen3 = m->arch == REF_QWEN3;
    for (int l = 0; l < m->n_layer && st == NX_STATUS_OK; l++) {
        struct ref_layer *L = &m->layers[l];
        /* matrices: GGUF shape [cols, rows] */
        const struct {
            const char *suffix;
            int64_t cols, rows;
            struct ref_mat *dst;
        } mats[] = {
            {"attn_q.weight", E, QD, &L->wq},      {"attn_k.weight", E, KD, &L->wk},
            {"attn_v.weight", E, KD, &L->wv},      {"attn_output.weight", QD, E, &L->wo},
            {"ffn_gate.weight", E, F, &L->wgate},  {"ffn_up.weight", E, F, &L->wup},
            {"ffn_down.weight", F, E, &L->wdown},
        };
        const struct {
            const char *suffix;
            int64_t n;
            bool required;
            double **dst;
        } vecs[] = {
            {"attn_norm.weight", E, true, &L->attn_norm},
            {"ffn_norm.weight", E, true, &L->ffn_norm},
            {"attn_q.bias", QD, qwen2, &L->bq},
            {"attn_k.bias", KD, qwen2, &L->bk},
            {"attn_v.bias", KD, qwen2, &L->bv},
            {"attn_q_norm.weight", D, qwen3, &L->q_norm},
            {"attn_k_norm.weight", D, qwen3, &L->k_norm},
        };
        char name[96];
        for (size_t i = 0; i < NX_ARRAY_LEN(mats) && st == NX_STATUS_OK; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, mats[i].suffix);
            st = ref_load_mat(f, name, mats[i].cols, mats[i].rows, true, mats[i].dst, err);
        }
        for (size_t i = 0; i < NX_ARRAY_LEN(vecs) && st == NX_STATUS_OK; i++) {
            snprintf(name, sizeof name, "blk.%d.%s", l, vecs[i].suffix);
            st = ref_load_vec(f, name, vecs[i].n, vecs[i].required, vecs[i].dst, err);
        }
    }
    if (st != NX_STATUS_OK) goto fail;
    gguf_close(f);
    *out = m;
    return NX_STATUS_OK;

fail:
    ref_model_free(m);
    gguf_close(f);
    return st;
}

int ref_model_n_vocab(const struct ref_model *m) { return m->n_vocab; }
int ref_model_n_embd(const struct ref_model *m) { return m->n_embd; }
void ref_model_set_variant(struct ref_model *m, unsigned variant) { m->variant = variant; }

/* ---------------------------------------------------------------------------------------------
 * The forward pass
 * ------------------------------------------------------------------------------------------- */

/* y = x / sqrt(mean(x^2) + eps) * g, n elements (y may alias x). */
static void ref_rmsnorm(double *y, const double *x, const double *g, int64_t n, double eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double s = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * s * g[i];
}

/*
 * Round x (n elements) the way the engine prepares activations for weights of type wt, when
 * the variant asks for it: Q8_0 for Q4_0/Q8_0 weights, Q8_K for K-quants.
 */
static void ref_emulate_act(const struct ref_model *m, enum nx_type wt, double *x, int64_t n) {
    if (!(m->variant & REF_VAR_EMULATE_ACT_QUANT)) return;
    enum nx_type at;
    if (wt == NX_TYPE_Q4_0 || wt == NX_TYPE_Q8_0) at = NX_TYPE_Q8_0;
    else if (wt == NX_TYPE_Q4_K || wt == NX_TYPE_Q5_K || wt == NX_TYPE_Q6_K) at = NX_TYPE_Q8_K;
    else return;
    size_t bytes;
    if (!nx_row_bytes(at, n, &bytes)) return;
    float *f = malloc((size_t)n * sizeof *f);
    void *q = malloc(bytes);
    if (f && q) {
        for (int64_t i = 0; i < n; i++) f[i] = (float)x[i];
        quant_quantize_row_ref(at, f, q, n);
        quant_dequantize_row_ref(at, q, f, n);
        for (int64_t i = 0; i < n; i++) x[i] = f[i];
    }
    free(f);
    free(q);
}

/* y[r] = dot(W row r, x) (+ b[r]); x has W->cols elements and is not modified. */
static void ref_matvec(const struct ref_model *m, const struct ref_mat *W, const double *bias,
                       const double *x_in, double *y, double *scratch) {
    const double *x = x_in;
    if (m->variant & REF_VAR_EMULATE_ACT_QUANT) {
        memcpy(scratch, x_in, (size_t)W->cols * sizeof *scratch);
        ref_emulate_act(m, W->type, scratch, W->cols);
        x = scratch;
    }
    for (int64_t r = 0; r < W->rows; r++) {
        const double *w = W->w + r * W->cols;
        double s = 0.0;
        for (int64_t c = 0; c < W->cols; c++) s += w[c] * x[c];
        y[r] = s + (bias ? bias[r] : 0.0);
    }
}

/* Rotate the first n_rot dims of one head vector x (head_dim elements) for position pos. */
static void ref_rope(const struct ref_model *m, double *x, int pos) {
    bool neox = m->neox;
    if (m->variant & REF_VAR_ROPE_LAYOUT) neox = !neox;
    double base = m->rope_base * ((m->variant & REF_VAR_ROPE_BASE) ? 2.0 : 1.0);
    const double *ff = (m->variant & REF_VAR_NO_ROPE_FREQS) ? NULL : m->rope_freqs;
    int half = m->n_rot / 2;
    for (int i = 0; i < half; i++) {
        double theta = (double)pos * pow(base, -2.0 * i / (double)m->n_rot);
        if (ff) theta /= ff[i];
        double c = cos(theta), s = sin(theta);
        int i0 = neox ? i : 2 * i;
        int i1 = neox ? i + half : 2 * i + 1;
        double x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

static double ref_silu(double x) { return x / (1.0 + exp(-x)); }

int ref_forward(struct ref_model *m, const int32_t *tokens, int n, double *logits) {
    if (n <= 0 || !tokens || !logits) return -1;
    for (int t = 0; t < n; t++) {
        if (tokens[t] < 0 || tokens[t] >= m->n_vocab) return -1;
    }
    const int64_t E = m->n_embd, F = m->n_ff, D = m->head_dim;
    const int64_t QD = (int64_t)m->n_head * D, KD = (int64_t)m->n_head_kv * D;
    const int64_t W = NX_MAX(NX_MAX(E, F), NX_MAX(QD, (int64_t)m->n_vocab));
    /* activations: x [n][E], q [n][QD], k/v [n][KD], and per-token scratch */
    double *x = calloc((size_t)(n * E), sizeof *x);
    double *q = calloc((size_t)(n * QD), sizeof *q);
    double *k = calloc((size_t)(n * KD), sizeof *k);
    double *v = calloc((size_t)(n * KD), sizeof *v);
    double *h = calloc((size_t)W, sizeof *h);
    double *a = calloc((size_t)W, sizeof *a);
    double *g = calloc((size_t)W, sizeof *g);
    double *u = calloc((size_t)W, sizeof *u);
    double *sc = calloc((size_t)W, sizeof *sc);
    double *att = calloc((size_t)n, sizeof *att);
    int rc = -1;
    if (!x || !q || !k || !v || !h || !a || !g || !u || !sc || !att) goto done;

    for (int t = 0; t < n; t++) memcpy(x + t * E, m->tok_embd.w + (int64_t)tokens[t] * E,
                                       (size_t)E * sizeof *x);
    const int group = m->n_head / m->n_head_kv;
    for (int l = 0; l < m->n_layer; l++) {
        const struct ref_layer *L = &m->layers[l];
        bool bias = !(m->variant & REF_VAR_NO_BIAS);
        for (int t = 0; t < n; t++) {
            ref_rmsnorm(h, x + t * E, L->attn_norm, E, m->eps);
            ref_matvec(m, &L->wq, bias ? L->bq : NULL, h, q + t * QD, sc);
            ref_matvec(m, &L->wk, bias ? L->bk : NULL, h, k + t * KD, sc);
            ref_matvec(m, &L->wv, bias ? L->bv : NULL, h, v + t * KD, sc);
            for (int hh = 0; hh < m->n_head; hh++) {
                double *qh = q + t * QD + hh * D;
                if (L->q_norm && !(m->variant & REF_VAR_NO_QK_NORM)) {
                    ref_rmsnorm(qh, qh, L->q_norm, D, m->eps);
                }
                ref_rope(m, qh, t);
            }
            for (int hh = 0; hh < m->n_head_kv; hh++) {
                double *kh = k + t * KD + hh * D;
                if (L->k_norm && !(m->variant & REF_VAR_NO_QK_NORM)) {
                    ref_rmsnorm(kh, kh, L->k_norm, D, m->eps);
                }
                ref_rope(m, kh, t);
            }
        }
        for (int t = 0; t < n; t++) {
            /* causal attention for token t, every head, into a [QD] */
            for (int hh = 0; hh < m->n_head; hh++) {
                int kvh = (m->variant & REF_VAR_GQA_MODULO) ? hh % m->n_head_kv : hh / group;
                const double *qh = q + t * QD + hh * D;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double *kj = k + j * KD + kvh * D;
                    double s = 0.0;
                    for (int64_t i = 0; i < D; i++) s += qh[i] * kj[i];
                    att[j] = s / sqrt((double)D);
                    if (att[j] > mx) mx = att[j];
                }
                double sum = 0.0;
                for (int j = 0; j <= t; j++) {
                    att[j] = exp(att[j] - mx);
                    sum += att[j];
                }
                double *ah = a + hh * D;
                for (int64_t i = 0; i < D; i++) ah[i] = 0.0;
                for (int j = 0; j <= t; j++) {
                    const double *vj = v + j * KD + kvh * D;
                    double p = att[j] / sum;
                    for (int64_t i = 0; i < D; i++) ah[i] += p * vj[i];
                }
            }
            ref_matvec(m, &L->wo, NULL, a, h, sc);
            double *xt = x + t * E;
            for (int64_t i = 0; i < E; i++) xt[i] += h[i];

            ref_rmsnorm(h, xt, L->ffn_norm, E, m->eps);
            ref_matvec(m, &L->wgate, NULL, h, g, sc);
            ref_matvec(m, &L->wup, NULL, h, u, sc);
            for (int64_t i = 0; i < F; i++) g[i] = ref_silu(g[i]) * u[i];
            ref_matvec(m, &L->wdown, NULL, g, h, sc);
            for (int64_t i = 0; i < E; i++) xt[i] += h[i];
        }
    }
    const struct ref_mat *out = m->output.w ? &m->output : &m->tok_embd;
    for (int t = 0; t < n; t++) {
        ref_rmsnorm(h, x + t * E, m->out_norm, E, m->eps);
        ref_matvec(m, out, NULL, h, logits + (int64_t)t * m->n_vocab, sc);
    }
    rc = 0;
done:
    free(x);
    free(q);
    free(k);
    free(v);
    free(h);
    free(a);
    free(g);
    free(u);
    free(sc);
    free(att);
    return rc;
}
