/*
 * mkmodel.c - random-weight GGUF models with llama.cpp's tensor names, shapes and metadata.
 *
 * DESIGN
 * - Plan, validate, then generate. mkmodel_write first builds the list of tensors (name, shape,
 *   storage type, how to initialise) and checks every shape against the chosen types, so a bad
 *   request fails at once with a message naming the tensor, before any work or any file.
 * - Reproducible bytes. Every weight element is a pure function of (seed, tensor name, element
 *   index): a splitmix64-style finalizer hashes a per-tensor key plus the element counter, and
 *   the four 16-bit lanes of the hash are summed (Irwin-Hall, n = 4) to give an approximately
 *   normal value with one exactly-rounded multiply. No libm transcendental is involved (glibc
 *   picks FMA/non-FMA variants of log/sin/cos per CPU, which could flip last bits), so the file
 *   is bit-identical for a given seed on every machine, in any tensor order, with any thread
 *   count. Quantization uses the reference quantizers (deterministic scalar code).
 * - Scales keep activations O(1): matrices ~ N(0, scale^2 / fan_in) with fan_in = ne[0] (the
 *   row length, since y[r] = dot(W row r, x)); token_embd and output ~ N(0, (2 scale)^2 / n_embd)
 *   so logits have a standard deviation near 2; norm gains 1 + 0.1 z; qwen2 biases 0.2 z.
 * - Memory is streamed: each tensor is generated row-chunk by row-chunk straight into its
 *   storage type (a thread never holds more than one chunk of f32 rows), handed to the GGUF
 *   writer (which copies it) and freed. The writer therefore holds the stored model (~0.8 GB for
 *   a 1B Q4_K_M) but never an f32 copy of it.
 * - Threads: rows of a tensor are split into chunks taken from an atomic counter by
 *   p->n_threads pthreads. Output does not depend on the split (see reproducibility above).
 * - The Q4_K_M mix follows llama.cpp's rules for LLAMA_FTYPE_MOSTLY_Q4_K_M (read from
 *   src/llama-quant.cpp): default Q4_K; output.weight Q6_K, or token_embd.weight Q6_K when there
 *   is no output.weight (tied); an untied token_embd keeps the default Q4_K; attn_v.weight and
 *   ffn_down.weight of layer i get Q6_K when use_more_bits(i, n_layer) holds. Where llama.cpp
 *   would fall back to another type for a row length that is not a multiple of 256, we refuse
 *   instead (the fallbacks are types the engine does not load).
 * - Never writes to stdout; errors are reported via nx_err, progress (p->progress) to stderr.
 */
#include "model/mkmodel.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"

#include "gguf/gguf.h"
#include "kern/quant.h"
#include "kern/types.h"

/* ---------------------------------------------------------------------------------------------
 * Counter-based random numbers
 * ------------------------------------------------------------------------------------------- */

#define MK_GOLDEN 0x9E3779B97F4A7C15ull

/* splitmix64's output function: a bijective avalanche mix of 64 bits. */
static inline uint64_t mk_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Key of one tensor's stream: depends on the seed and the tensor name only. */
static uint64_t mk_tensor_key(uint64_t seed, const char *name) {
    uint64_t h = 0xCBF29CE484222325ull; /* FNV-1a over the name */
    for (const unsigned char *s = (const unsigned char *)name; *s; s++) {
        h ^= *s;
        h *= 0x100000001B3ull;
    }
    return mk_mix64(mk_mix64(seed + MK_GOLDEN) ^ h);
}

/* Standard deviation of a sum of four independent uniform 16-bit integers. */
static double mk_ih_std(void) { return sqrt(4.0 * (65536.0 * 65536.0 - 1.0) / 12.0); }

/*
 * out[i] = mean + std * z(key, first + i) for i in [0, n): z approximately N(0, 1), in
 * [-3.47, 3.47]. mult = std / mk_ih_std().
 */
static void mk_fill(uint64_t key, uint64_t first, int64_t n, double mean, double mult,
                    float *out) {
    for (int64_t i = 0; i < n; i++) {
        uint64_t h = mk_mix64(key + (first + (uint64_t)i) * MK_GOLDEN);
        int64_t s = (int64_t)(h & 0xFFFF) + (int64_t)((h >> 16) & 0xFFFF) +
                    (int64_t)((h >> 32) & 0xFFFF) + (int64_t)(h >> 48);
        out[i] = (float)(mean + (double)(s - 131070) * mult);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Architectures, weight types, the tensor plan
 * ------------------------------------------------------------------------------------------- */

enum mk_arch { MK_LLAMA, MK_MISTRAL, MK_QWEN2, MK_QWEN3, MK_BERT, MK_NOMIC_BERT };

static const char *const g_arch_names[] = {"llama", "mistral", "qwen2", "qwen3", "bert",
                                            "nomic-bert"};

static bool mk_is_encoder(enum mk_arch a) { return a == MK_BERT || a == MK_NOMIC_BERT; }

struct mk_wtype {
    const char *name;
    enum nx_type type;  /* default type of 2-D weights */
    uint32_t ftype;     /* general.file_type (llama_ftype) */
    bool q4_k_m;        /* per-tensor mix */
};

/* Pure types get the llama_ftype closest to them (Q4_K -> Q4_K_S, Q5_K -> Q5_K_S). */
static const struct mk_wtype g_wtypes[] = {
    {"f32", NX_TYPE_F32, 0, false},     {"f16", NX_TYPE_F16, 1, false},
    {"bf16", NX_TYPE_BF16, 32, false},  {"q8_0", NX_TYPE_Q8_0, 7, false},
    {"q4_0", NX_TYPE_Q4_0, 2, false},   {"q4_k", NX_TYPE_Q4_K, 14, false},
    {"q5_k", NX_TYPE_Q5_K, 16, false},  {"q6_k", NX_TYPE_Q6_K, 18, false},
    {"q4_k_m", NX_TYPE_Q4_K, 15, true},
};

enum mk_init {
    MK_INIT_MATRIX,  /* N(0, (scale / sqrt(ne0))^2) */
    MK_INIT_EMBD,    /* N(0, (2 scale / sqrt(n_embd))^2): token_embd and output */
    MK_INIT_NORM,    /* 1 + 0.1 z */
    MK_INIT_BIAS,    /* 0.2 z */
    MK_INIT_ROPE_FREQS,
};

struct mk_tensor {
    char name[64];
    int n_dims;
    int64_t ne[2];
    enum nx_type type;
    enum mk_init init;
    size_t nbytes;
};

struct mk_plan {
    enum mk_arch arch;
    const struct mk_wtype *wt;
    int head_dim;
    int n_vocab;
    float rms_eps;
    struct mk_tensor *t;
    int n;
    int cap;
};

/* llama.cpp's use_more_bits: which layers of a Q4_K_M model get Q6_K attn_v / ffn_down. */
static bool mk_use_more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

static nx_status mk_plan_add(struct mk_plan *pl, const char *name, int n_dims, int64_t ne0,
                             int64_t ne1, enum nx_type type, enum mk_init init,
                             struct nx_err *err) {
    if (pl->n == pl->cap) {
        int cap = pl->cap ? pl->cap * 2 : 64;
        struct mk_tensor *t = nx_realloc(pl->t, (size_t)cap * sizeof *t);
        if (!t) return nx_err_set(err, NX_STATUS_NOMEM, "mkmodel: out of memory");
        pl->t = t;
        pl->cap = cap;
    }
    struct mk_tensor *t = &pl->t[pl->n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->n_dims = n_dims;
    t->ne[0] = ne0;
    t->ne[1] = n_dims == 2 ? ne1 : 1;
    t->type = n_dims == 1 ? NX_TYPE_F32 : type;
    t->init = init;
    const struct nx_type_info *ti = nx_type_info_get(t->type);
    size_t row;
    if (ne0 % ti->blck_size != 0 || !nx_row_bytes(t->type, ne0, &row)) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: tensor '%s': row length %lld is not a multiple of %lld, the "
                          "block size of %s (choose other sizes or another --type)",
                          name, (long long)ne0, (long long)ti->blck_size, ti->name);
    }
    if (!nx_mul_size(row, (size_t)t->ne[1], &t->nbytes)) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "mkmodel: tensor '%s' too large", name);
    }
    pl->n++;
    return NX_STATUS_OK;
}

/* Storage type of a 2-D weight. kind: "token_embd", "output", "attn_v", "ffn_down", ... */
static enum nx_type mk_weight_type(const struct mk_plan *pl, const struct mkmodel_params *p,
                                   const char *kind, int layer) {
    if (!pl->wt->q4_k_m) return pl->wt->type;
    if (strcmp(kind, "output") == 0) return NX_TYPE_Q6_K;
    if (strcmp(kind, "token_embd") == 0) return p->tied_output ? NX_TYPE_Q6_K : NX_TYPE_Q4_K;
    if (strcmp(kind, "attn_v") == 0 || strcmp(kind, "ffn_down") == 0) {
        return mk_use_more_bits(layer, p->n_layer) ? NX_TYPE_Q6_K : NX_TYPE_Q4_K;
    }
    return NX_TYPE_Q4_K;
}

/*
 * The tensors of a BERT-family encoder (llama.cpp's names, see src/model/encoder.h): bert has
 * learned positions, q/k/v/output/ffn biases and GELU (attn_qkv fused with its bias when
 * p->qkv_fused); nomic-bert has fused attn_qkv and no biases except the LayerNorms, and a SwiGLU
 * ffn_gate. p->rerank (bert) adds the classification head cls (dense + tanh) and cls.output
 * (1 logit). LayerNorm gains 1 + 0.1 z, biases 0.2 z; the token-type table is F32.
 */
static nx_status mk_plan_encoder(struct mk_plan *pl, const struct mkmodel_params *p,
                                 struct nx_err *err) {
    const bool nomic = pl->arch == MK_NOMIC_BERT, bert = !nomic;
    const int64_t E = p->n_embd, F = p->n_ff, V = pl->n_vocab;
    const enum nx_type wt = pl->wt->q4_k_m ? NX_TYPE_Q4_K : pl->wt->type;
    if (pl->head_dim * p->n_head != p->n_embd) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: encoders need embd (%d) = heads (%d) x head_dim", p->n_embd,
                          p->n_head);
    }
    if (p->rerank && nomic) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: --rerank is for bert (llama.cpp reads no head for nomic-bert)");
    }
    bool fused = nomic || p->qkv_fused;
    struct {
        const char *name;
        int n_dims;
        int64_t ne0, ne1;
        enum nx_type type;
        enum mk_init init;
        bool on;
    } top[] = {
        {"token_embd.weight", 2, E, V, wt, MK_INIT_EMBD, true},
        {"token_types.weight", 2, E, 2, NX_TYPE_F32, MK_INIT_EMBD, true},
        {"position_embd.weight", 2, E, p->n_ctx_train, wt, MK_INIT_EMBD, bert},
        {"token_embd_norm.weight", 1, E, 1, NX_TYPE_F32, MK_INIT_NORM, true},
        {"token_embd_norm.bias", 1, E, 1, NX_TYPE_F32, MK_INIT_BIAS, true},
        {"cls.weight", 2, E, E, wt, MK_INIT_MATRIX, p->rerank},
        {"cls.bias", 1, E, 1, NX_TYPE_F32, MK_INIT_BIAS, p->rerank},
        {"cls.output.weight", 2, E, 1, wt, MK_INIT_MATRIX, p->rerank},
        {"cls.output.bias", 1, 1, 1, NX_TYPE_F32, MK_INIT_BIAS, p->rerank},
    };
    nx_status st;
    for (size_t i = 0; i < NX_ARRAY_LEN(top); i++) {
        if (!top[i].on) continue;
        st = mk_plan_add(pl, top[i].name, top[i].n_dims, top[i].ne0, top[i].ne1, top[i].type,
                         top[i].init, err);
        if (st != NX_STATUS_OK) return st;
    }
    char nm[64];
    for (int l = 0; l < p->n_layer; l++) {
        struct {
            const char *name;
            int n_dims;
            int64_t ne0, ne1;
            enum mk_init init;
            bool on;
        } spec[] = {
            {"attn_qkv.weight", 2, E, 3 * E, MK_INIT_MATRIX, fused},
            {"attn_qkv.bias", 1, 3 * E, 1, MK_INIT_BIAS, fused && bert},
            {"attn_q.weight", 2, E, E, MK_INIT_MATRIX, !fused},
            {"attn_q.bias", 1, E, 1, MK_INIT_BIAS, !fused},
            {"attn_k.weight", 2, E, E, MK_INIT_MATRIX, !fused},
            {"attn_k.bias", 1, E, 1, MK_INIT_BIAS, !fused},
            {"attn_v.weight", 2, E, E, MK_INIT_MATRIX, !fused},
            {"attn_v.bias", 1, E, 1, MK_INIT_BIAS, !fused},
            {"attn_output.weight", 2, E, E, MK_INIT_MATRIX, true},
            {"attn_output.bias", 1, E, 1, MK_INIT_BIAS, bert},
            {"attn_output_norm.weight", 1, E, 1, MK_INIT_NORM, true},
            {"attn_output_norm.bias", 1, E, 1, MK_INIT_BIAS, true},
            {"ffn_up.weight", 2, E, F, MK_INIT_MATRIX, true},
            {"ffn_up.bias", 1, F, 1, MK_INIT_BIAS, bert},
            {"ffn_gate.weight", 2, E, F, MK_INIT_MATRIX, nomic},
            {"ffn_down.weight", 2, F, E, MK_INIT_MATRIX, true},
            {"ffn_down.bias", 1, E, 1, MK_INIT_BIAS, bert},
            {"layer_output_norm.weight", 1, E, 1, MK_INIT_NORM, true},
            {"layer_output_norm.bias", 1, E, 1, MK_INIT_BIAS, true},
        };
        for (size_t i = 0; i < NX_ARRAY_LEN(spec); i++) {
            if (!spec[i].on) continue;
            snprintf(nm, sizeof nm, "blk.%d.%s", l, spec[i].name);
            st = mk_plan_add(pl, nm, spec[i].n_dims, spec[i].ne0, spec[i].ne1, wt, spec[i].init,
                             err);
            if (st != NX_STATUS_OK) return st;
        }
    }
    return NX_STATUS_OK;
}

/* Check the parameters and list the tensors in file order. */
static nx_status mk_plan_build(struct mk_plan *pl, const struct mkmodel_params *p, int n_vocab,
                               struct nx_err *err) {
    nx_status st;
    memset(pl, 0, sizeof *pl);
    int a = -1;
    for (int i = 0; i < (int)NX_ARRAY_LEN(g_arch_names); i++) {
        if (p->arch && strcmp(p->arch, g_arch_names[i]) == 0) a = i;
    }
    if (a < 0) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: unknown architecture '%s' (llama, mistral, qwen2, qwen3, bert, "
                          "nomic-bert)",
                          p->arch ? p->arch : "(null)");
    }
    pl->arch = (enum mk_arch)a;
    for (size_t i = 0; i < NX_ARRAY_LEN(g_wtypes); i++) {
        if (p->wtype && strcmp(p->wtype, g_wtypes[i].name) == 0) pl->wt = &g_wtypes[i];
    }
    if (!pl->wt) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: unknown weight type '%s' (f32 f16 bf16 q8_0 q4_0 q4_k q5_k "
                          "q6_k q4_k_m)", p->wtype ? p->wtype : "(null)");
    }
    if (p->n_layer < 1 || p->n_embd < 1 || p->n_head < 1 || p->n_head_kv < 1 || p->n_ff < 1 ||
        p->n_ctx_train < 1 || p->head_dim < 0) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: layers, embd, heads, heads-kv, ff and ctx must be >= 1");
    }
    if (p->n_layer > 1000 || p->n_embd > (1 << 20) || p->n_ff > (1 << 22) ||
        p->n_head > 4096 || n_vocab > (1 << 24)) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "mkmodel: sizes out of range");
    }
    if (p->n_head % p->n_head_kv != 0) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: heads (%d) must be a multiple of heads-kv (%d)", p->n_head,
                          p->n_head_kv);
    }
    if (p->head_dim == 0 && p->n_embd % p->n_head != 0) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "mkmodel: embd (%d) is not a multiple of heads (%d); give --head-dim",
                          p->n_embd, p->n_head);
    }
    pl->head_dim = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    if (pl->head_dim % 2 != 0) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "mkmodel: head_dim %d must be even",
                          pl->head_dim);
    }
    if (!(p->rope_base >= 0.0f) || !isfinite(p->rope_base)) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "mkmodel: bad rope base");
    }
    if (!(p->weight_scale > 0.0f) || !isfinite(p->weight_scale)) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "mkmodel: weight scale must be > 0");
    }
    pl->n_vocab = n_vocab;
    pl->rms_eps = p->rms_eps > 0.0f ? p->rms_eps
                  : (pl->arch == MK_QWEN2 || pl->arch == MK_QWEN3) ? 1e-6f : 1e-5f;
    if (mk_is_encoder(pl->arch)) {
        if (!(p->rms_eps > 0.0f)) pl->rms_eps = 1e-12f; /* BERT's layer_norm_eps */
        return mk_plan_encoder(pl, p, err);
    }

    const int64_t E = p->n_embd, F = p->n_ff, V = n_vocab, D = pl->head_dim;
    const int64_t QD = (int64_t)p->n_head * D, KD = (int64_t)p->n_head_kv * D;
    char nm[64];

    st = mk_plan_add(pl, "token_embd.weight", 2, E, V, mk_weight_type(pl, p, "token_embd", 0),
                     MK_INIT_EMBD, err);
    if (st != NX_STATUS_OK) return st;
    if (p->llama3_rope_scaling) {
        st = mk_plan_add(pl, "rope_freqs.weight", 1, D / 2, 1, NX_TYPE_F32, MK_INIT_ROPE_FREQS,
                         err);
        if (st != NX_STATUS_OK) return st;
    }
    for (int l = 0; l < p->n_layer; l++) {
        struct {
            const char *kind;
            const char *suffix;
            int n_dims;
            int64_t ne0, ne1;
            enum mk_init init;
            bool on;
        } spec[] = {
            {"attn_norm", "weight", 1, E, 1, MK_INIT_NORM, true},
            {"attn_q", "weight", 2, E, QD, MK_INIT_MATRIX, true},
            {"attn_q", "bias", 1, QD, 1, MK_INIT_BIAS, pl->arch == MK_QWEN2},
            {"attn_k", "weight", 2, E, KD, MK_INIT_MATRIX, true},
            {"attn_k", "bias", 1, KD, 1, MK_INIT_BIAS, pl->arch == MK_QWEN2},
            {"attn_v", "weight", 2, E, KD, MK_INIT_MATRIX, true},
            {"attn_v", "bias", 1, KD, 1, MK_INIT_BIAS, pl->arch == MK_QWEN2},
            {"attn_q_norm", "weight", 1, D, 1, MK_INIT_NORM, pl->arch == MK_QWEN3},
            {"attn_k_norm", "weight", 1, D, 1, MK_INIT_NORM, pl->arch == MK_QWEN3},
            {"attn_output", "weight", 2, QD, E, MK_INIT_MATRIX, true},
            {"ffn_norm", "weight", 1, E, 1, MK_INIT_NORM, true},
            {"ffn_gate", "weight", 2, E, F, MK_INIT_MATRIX, true},
            {"ffn_up", "weight", 2, E, F, MK_INIT_MATRIX, true},
            {"ffn_down", "weight", 2, F, E, MK_INIT_MATRIX, true},
        };
        for (size_t i = 0; i < NX_ARRAY_LEN(spec); i++) {
            if (!spec[i].on) continue;
            snprintf(nm, sizeof nm, "blk.%d.%s.%s", l, spec[i].kind, spec[i].suffix);
            st = mk_plan_add(pl, nm, spec[i].n_dims, spec[i].ne0, spec[i].ne1,
                             mk_weight_type(pl, p, spec[i].kind, l), spec[i].init, err);
            if (st != NX_STATUS_OK) return st;
        }
    }
    st = mk_plan_add(pl, "output_norm.weight", 1, E, 1, NX_TYPE_F32, MK_INIT_NORM, err);
    if (st != NX_STATUS_OK) return st;
    if (!p->tied_output) {
        st = mk_plan_add(pl, "output.weight", 2, E, V, mk_weight_type(pl, p, "output", 0),
                         MK_INIT_EMBD, err);
        if (st != NX_STATUS_OK) return st;
    }
    return NX_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Generating one tensor
 * ------------------------------------------------------------------------------------------- */

#define MK_CHUNK_ELEMS (1 << 18) /* f32 elements a worker generates before storing them */

struct mk_job {
    const struct mk_tensor *t;
    uint64_t key;
    double mean;
    double mult;
    size_t row_bytes;
    int64_t chunk_rows;
    uint8_t *out;
    atomic_llong next_row;
    atomic_int failed;
};

/* Generate rows [r0, r1) of the job's tensor into its storage, via buf (chunk_rows x ne0). */
static void mk_job_rows(struct mk_job *j, int64_t r0, int64_t r1, float *buf) {
    const int64_t ne0 = j->t->ne[0];
    mk_fill(j->key, (uint64_t)r0 * (uint64_t)ne0, (r1 - r0) * ne0, j->mean, j->mult, buf);
    for (int64_t r = r0; r < r1; r++) {
        const float *src = buf + (r - r0) * ne0;
        uint8_t *dst = j->out + (size_t)r * j->row_bytes;
        switch (j->t->type) {
        case NX_TYPE_F32:
            memcpy(dst, src, (size_t)ne0 * sizeof(float));
            break;
        case NX_TYPE_F16:
            for (int64_t i = 0; i < ne0; i++) {
                nx_half h = nx_f32_to_half(src[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
            break;
        case NX_TYPE_BF16:
            for (int64_t i = 0; i < ne0; i++) {
                nx_bf16 h = nx_f32_to_bf16(src[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
            break;
        default:
            quant_quantize_row_ref(j->t->type, src, dst, ne0);
            break;
        }
    }
}

static void *mk_worker(void *arg) {
    struct mk_job *j = arg;
    float *buf = nx_malloc((size_t)(j->chunk_rows * j->t->ne[0]) * sizeof(float));
    if (!buf) {
        atomic_store(&j->failed, 1);
        return NULL;
    }
    for (;;) {
        int64_t r0 = atomic_fetch_add(&j->next_row, j->chunk_rows);
        if (r0 >= j->t->ne[1]) break;
        int64_t r1 = NX_MIN(r0 + j->chunk_rows, j->t->ne[1]);
        mk_job_rows(j, r0, r1, buf);
    }
    nx_free(buf);
    return NULL;
}

/* Llama-3.1 rope scaling: divisors of the rotation frequencies, as llama.cpp's converter writes
 * them to rope_freqs.weight (factor 8, low_freq_factor 1, high_freq_factor 4, original context
 * 8192). Computed in float like the converter. */
static void mk_llama3_rope_freqs(float base, int head_dim, float *out) {
    const float factor = 8.0f, lo = 1.0f, hi = 4.0f, old_ctx = 8192.0f;
    const float lo_wavelen = old_ctx / lo, hi_wavelen = old_ctx / hi;
    for (int i = 0; i < head_dim / 2; i++) {
        float freq = 1.0f / powf(base, (float)(2 * i) / (float)head_dim);
        float wavelen = 2.0f * (float)M_PI / freq;
        if (wavelen < hi_wavelen) {
            out[i] = 1.0f;
        } else if (wavelen > lo_wavelen) {
            out[i] = factor;
        } else {
            float smooth = (old_ctx / wavelen - lo) / (hi - lo);
            out[i] = 1.0f / ((1.0f - smooth) / factor + smooth);
        }
    }
}

/* Fill *out (t->nbytes, caller-allocated) with the tensor's data. */
static nx_status mk_generate(const struct mkmodel_params *p, const struct mk_plan *pl,
                             const struct mk_tensor *t, int n_threads, uint8_t *out,
                             struct nx_err *err) {
    if (t->init == MK_INIT_ROPE_FREQS) {
        float f[4096];
        if (t->ne[0] > (int64_t)NX_ARRAY_LEN(f)) {
            return nx_err_set(err, NX_STATUS_INVALID_ARG, "mkmodel: head_dim too large");
        }
        mk_llama3_rope_freqs(p->rope_base > 0.0f ? p->rope_base : 10000.0f, pl->head_dim, f);
        memcpy(out, f, t->nbytes);
        return NX_STATUS_OK;
    }
    struct mk_job j;
    memset(&j, 0, sizeof j);
    j.t = t;
    j.key = mk_tensor_key(p->seed, t->name);
    double std = 0.0;
    switch (t->init) {
    case MK_INIT_MATRIX: std = p->weight_scale / sqrt((double)t->ne[0]); break;
    case MK_INIT_EMBD: std = 2.0 * p->weight_scale / sqrt((double)p->n_embd); break;
    case MK_INIT_NORM: j.mean = 1.0; std = 0.1; break;
    case MK_INIT_BIAS: std = 0.2; break;
    case MK_INIT_ROPE_FREQS: break;
    }
    j.mult = std / mk_ih_std();
    if (!nx_row_bytes(t->type, t->ne[0], &j.row_bytes)) {
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "mkmodel: tensor '%s': bad row", t->name);
    }
    j.chunk_rows = NX_MAX(1, MK_CHUNK_ELEMS / t->ne[0]);
    j.out = out;
    atomic_init(&j.next_row, 0);
    atomic_init(&j.failed, 0);

    int64_t n_elem = t->ne[0] * t->ne[1];
    int nt = n_elem < (1 << 20) ? 1 : n_threads;
    pthread_t tid[64];
    int started = 0;
    for (int i = 1; i < nt && i < (int)NX_ARRAY_LEN(tid); i++) {
        if (pthread_create(&tid[started], NULL, mk_worker, &j) != 0) break;
        started++;
    }
    mk_worker(&j);
    for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
    if (atomic_load(&j.failed)) return nx_err_set(err, NX_STATUS_NOMEM, "mkmodel: out of memory");
    return NX_STATUS_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Metadata: hyperparameters and the tokenizer
 * ------------------------------------------------------------------------------------------- */

/* Add "ARCH.suffix" = v (u32). */
static nx_status mk_add_arch_u32(struct gguf_writer *w, const char *arch, const char *suffix,
                                 uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_writer_add_u32(w, key, v);
}

static nx_status mk_add_arch_f32(struct gguf_writer *w, const char *arch, const char *suffix,
                                 float v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_writer_add_f32(w, key, v);
}

/* The k-th synthetic piece (k >= 0) into buf: "▁", then "▁a", "a", "▁b", "b", ... "▁z", "z",
 * "▁aa", "aa", ... (lowercase strings in shortlex order, each with and without the SPM space). */
static void mk_synth_piece(int k, char *buf, size_t cap) {
    if (k == 0) {
        snprintf(buf, cap, "\xE2\x96\x81");
        return;
    }
    k -= 1;
    int idx = k / 2;
    bool space = k % 2 == 0;
    char s[16];
    int len = 1;
    long span = 26;
    while (idx >= span) { /* find the length of the idx-th string in shortlex order */
        idx -= (int)span;
        span *= 26;
        len++;
    }
    for (int i = len - 1; i >= 0; i--) {
        s[i] = (char)('a' + idx % 26);
        idx /= 26;
    }
    s[len] = '\0';
    snprintf(buf, cap, "%s%s", space ? "\xE2\x96\x81" : "", s);
}

/* A SentencePiece ("llama") vocabulary: <unk> <s> </s>, 256 byte tokens, then pieces. */
static nx_status mk_synth_vocab(struct gguf_writer *w, int n_vocab, struct nx_err *err) {
    nx_status st = NX_STATUS_NOMEM;
    char **tok = nx_calloc((size_t)n_vocab, sizeof *tok);
    float *score = nx_calloc((size_t)n_vocab, sizeof *score);
    int32_t *type = nx_calloc((size_t)n_vocab, sizeof *type);
    if (!tok || !score || !type) goto done;
    for (int i = 0; i < n_vocab; i++) {
        char buf[64];
        if (i == 0) {
            snprintf(buf, sizeof buf, "<unk>");
            type[i] = 2; /* unknown */
        } else if (i == 1 || i == 2) {
            snprintf(buf, sizeof buf, i == 1 ? "<s>" : "</s>");
            type[i] = 3; /* control */
        } else if (i < 259) {
            snprintf(buf, sizeof buf, "<0x%02X>", i - 3);
            type[i] = 6; /* byte */
        } else {
            mk_synth_piece(i - 259, buf, sizeof buf);
            type[i] = 1; /* normal */
            score[i] = -(float)(i - 259);
        }
        tok[i] = nx_strdup(buf);
        if (!tok[i]) goto done;
    }
    st = gguf_writer_add_str(w, "tokenizer.ggml.model", "llama");
    if (st == NX_STATUS_OK) {
        st = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok,
                                     (uint64_t)n_vocab);
    }
    if (st == NX_STATUS_OK) {
        st = gguf_writer_add_arr(w, "tokenizer.ggml.scores", GGUF_VTYPE_F32, score,
                                 (uint64_t)n_vocab);
    }
    if (st == NX_STATUS_OK) {
        st = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, type,
                                 (uint64_t)n_vocab);
    }
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.bos_token_id", 1);
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    if (st == NX_STATUS_OK) st = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", true);
    if (st == NX_STATUS_OK) st = gguf_writer_add_bool(w, "tokenizer.ggml.add_eos_token", false);
done:
    if (tok) {
        for (int i = 0; i < n_vocab; i++) nx_free(tok[i]);
    }
    nx_free(tok);
    nx_free(score);
    nx_free(type);
    if (st != NX_STATUS_OK) nx_err_set(err, st, "mkmodel: cannot add the synthetic vocabulary");
    return st;
}

/* NUL-terminated copy of a (s, len) string; NULL (with *bad set) if it contains a NUL byte. */
static char *mk_strndup(const char *s, size_t len, bool *bad) {
    if (memchr(s, '\0', len)) {
        *bad = true;
        return NULL;
    }
    char *r = nx_malloc(len + 1);
    if (!r) return NULL;
    memcpy(r, s, len);
    r[len] = '\0';
    return r;
}

nx_status mkmodel_copy_kv(struct gguf_writer *w, const struct gguf_file *src, int64_t i,
                            struct nx_err *err) {
    const char *key = gguf_kv_key(src, i);
    enum gguf_vtype vt = gguf_kv_type(src, i);
    nx_status st = NX_STATUS_OK;
    bool bad = false;
    switch (vt) {
    case GGUF_VTYPE_U8:
    case GGUF_VTYPE_U16:
    case GGUF_VTYPE_U32: {
        uint32_t v;
        if (!gguf_get_u32(src, key, &v)) bad = true;
        else if (vt == GGUF_VTYPE_U8) st = gguf_writer_add_u8(w, key, (uint8_t)v);
        else if (vt == GGUF_VTYPE_U16) st = gguf_writer_add_u16(w, key, (uint16_t)v);
        else st = gguf_writer_add_u32(w, key, v);
        break;
    }
    case GGUF_VTYPE_U64: {
        uint64_t v;
        if (!gguf_get_u64(src, key, &v)) bad = true;
        else st = gguf_writer_add_u64(w, key, v);
        break;
    }
    case GGUF_VTYPE_I8:
    case GGUF_VTYPE_I16:
    case GGUF_VTYPE_I32:
    case GGUF_VTYPE_I64: {
        int32_t v;
        if (!gguf_get_i32(src, key, &v)) bad = true;
        else if (vt == GGUF_VTYPE_I8) st = gguf_writer_add_i8(w, key, (int8_t)v);
        else if (vt == GGUF_VTYPE_I16) st = gguf_writer_add_i16(w, key, (int16_t)v);
        else if (vt == GGUF_VTYPE_I32) st = gguf_writer_add_i32(w, key, v);
        else st = gguf_writer_add_i64(w, key, v);
        break;
    }
    case GGUF_VTYPE_F32:
    case GGUF_VTYPE_F64: {
        float v;
        if (!gguf_get_f32(src, key, &v)) bad = true;
        else if (vt == GGUF_VTYPE_F32) st = gguf_writer_add_f32(w, key, v);
        else st = gguf_writer_add_f64(w, key, v);
        break;
    }
    case GGUF_VTYPE_BOOL: {
        bool v;
        if (!gguf_get_bool(src, key, &v)) bad = true;
        else st = gguf_writer_add_bool(w, key, v);
        break;
    }
    case GGUF_VTYPE_STRING: {
        const char *s;
        size_t len;
        if (!gguf_get_str(src, key, &s, &len)) {
            bad = true;
            break;
        }
        char *c = mk_strndup(s, len, &bad);
        if (!c && !bad) return nx_err_set(err, NX_STATUS_NOMEM, "mkmodel: out of memory");
        if (c) st = gguf_writer_add_str(w, key, c);
        nx_free(c);
        break;
    }
    case GGUF_VTYPE_ARRAY: {
        enum gguf_vtype et;
        uint64_t n;
        const void *data;
        if (!gguf_get_arr(src, key, &et, &n, &data)) {
            bad = true;
            break;
        }
        if (et == GGUF_VTYPE_ARRAY) {
            fprintf(stderr, "mkmodel: warning: skipping nested array '%s'\n", key);
            break;
        }
        if (et != GGUF_VTYPE_STRING) {
            st = gguf_writer_add_arr(w, key, et, data, n);
            break;
        }
        if (n > SIZE_MAX / sizeof(char *)) return nx_err_set(err, NX_STATUS_NOMEM, "too big");
        char **v = nx_calloc(n ? (size_t)n : 1, sizeof *v);
        if (!v) return nx_err_set(err, NX_STATUS_NOMEM, "mkmodel: out of memory");
        uint64_t k = 0;
        for (; k < n; k++) {
            const char *s;
            size_t len;
            if (!gguf_arr_str(src, key, k, &s, &len)) {
                bad = true;
                break;
            }
            v[k] = mk_strndup(s, len, &bad);
            if (!v[k]) break;
        }
        if (k == n) {
            st = gguf_writer_add_arr_str(w, key, (const char *const *)v, n);
        } else if (!bad) {
            st = NX_STATUS_NOMEM;
        }
        for (uint64_t m = 0; m < n; m++) nx_free(v[m]);
        nx_free(v);
        break;
    }
    default:
        bad = true;
        break;
    }
    if (bad) {
        return nx_err_set(err, NX_STATUS_UNSUPPORTED,
                          "mkmodel: cannot copy key '%s' (type %d or value not "
                          "representable)", key, (int)vt);
    }
    if (st != NX_STATUS_OK) {
        return nx_err_set(err, st, "mkmodel: cannot add key '%s': %s", key, nx_status_str(st));
    }
    return NX_STATUS_OK;
}

static nx_status mk_copy_tokenizer(struct gguf_writer *w, const struct gguf_file *src,
                                   struct nx_err *err) {
    for (int64_t i = 0; i < gguf_n_kv(src); i++) {
        if (strncmp(gguf_kv_key(src, i), "tokenizer.", 10) != 0) continue;
        nx_status st = mkmodel_copy_kv(w, src, i, err);
        if (st != NX_STATUS_OK) return st;
    }
    return NX_STATUS_OK;
}

/* Smallest synthetic WordPiece vocabulary: 104 BERT specials + 2 x 68 ASCII pieces. */
#define MK_WPM_MIN_VOCAB 240

/*
 * A BERT WordPiece ("bert") vocabulary in llama.cpp's GGUF form (word-initial pieces carry "▁",
 * continuations lose their "##"): [PAD] 0, [unused1..99], [UNK] 100, [CLS] 101, [SEP] 102,
 * [MASK] 103; then every printable ASCII character but the capitals (BERT lowercases) as
 * "▁c" and "c"; then lowercase strings of two or more letters in shortlex order, each as "▁s"
 * and "s", up to n_vocab.
 */
static nx_status mk_synth_wpm_vocab(struct gguf_writer *w, int n_vocab, struct nx_err *err) {
    nx_status st = NX_STATUS_NOMEM;
    char **tok = nx_calloc((size_t)n_vocab, sizeof *tok);
    int32_t *type = nx_calloc((size_t)n_vocab, sizeof *type);
    if (!tok || !type) goto done;
    int next = 0, ch = 33;
    long idx = 0; /* index among strings of >= 2 letters, shortlex */
    for (int i = 0; i < n_vocab; i++) {
        char buf[64];
        type[i] = 1; /* normal */
        if (i == 0) {
            snprintf(buf, sizeof buf, "[PAD]");
            type[i] = 3;
        } else if (i < 100) {
            snprintf(buf, sizeof buf, "[unused%d]", i);
            type[i] = 3;
        } else if (i <= 103) {
            static const char *const sp[] = {"[UNK]", "[CLS]", "[SEP]", "[MASK]"};
            snprintf(buf, sizeof buf, "%s", sp[i - 100]);
            type[i] = i == 100 ? 2 : 3;
        } else if (ch <= 126) {
            /* pairs "▁c", "c" */
            snprintf(buf, sizeof buf, "%s%c", next == 0 ? "\xE2\x96\x81" : "", ch);
            if (++next == 2) {
                next = 0;
                do ch++; while (ch >= 'A' && ch <= 'Z');
            }
        } else {
            long k = idx;
            int len = 2;
            long span = 26 * 26;
            while (k >= span) {
                k -= span;
                span *= 26;
                len++;
            }
            char sfx[16];
            for (int c = len - 1; c >= 0; c--) {
                sfx[c] = (char)('a' + k % 26);
                k /= 26;
            }
            sfx[len] = '\0';
            snprintf(buf, sizeof buf, "%s%s", next == 0 ? "\xE2\x96\x81" : "", sfx);
            if (++next == 2) {
                next = 0;
                idx++;
            }
        }
        tok[i] = nx_strdup(buf);
        if (!tok[i]) goto done;
    }
    st = gguf_writer_add_str(w, "tokenizer.ggml.model", "bert");
    if (st == NX_STATUS_OK) {
        st = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok,
                                     (uint64_t)n_vocab);
    }
    if (st == NX_STATUS_OK) {
        st = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_VTYPE_I32, type,
                                 (uint64_t)n_vocab);
    }
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.token_type_count", 2);
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.unknown_token_id", 100);
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.cls_token_id", 101);
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.seperator_token_id", 102);
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.padding_token_id", 0);
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "tokenizer.ggml.mask_token_id", 103);
done:
    if (tok) {
        for (int i = 0; i < n_vocab; i++) nx_free(tok[i]);
    }
    nx_free(tok);
    nx_free(type);
    if (st != NX_STATUS_OK) nx_err_set(err, st, "mkmodel: cannot add the WordPiece vocabulary");
    return st;
}

/* Encoder metadata (llama.cpp's keys for bert / nomic-bert). */
static nx_status mk_add_encoder_hparams(struct gguf_writer *w, const struct mkmodel_params *p,
                                        const struct mk_plan *pl, const char *arch) {
    /* pooling_type as llama.cpp numbers it: mean 1, cls 2, rank 4 */
    uint32_t pooling = p->rerank ? 4 : p->pooling > 0 ? (uint32_t)p->pooling : 1;
    const struct {
        const char *suffix;
        uint32_t v;
    } u32s[] = {
        {"context_length", (uint32_t)p->n_ctx_train},
        {"embedding_length", (uint32_t)p->n_embd},
        {"block_count", (uint32_t)p->n_layer},
        {"feed_forward_length", (uint32_t)p->n_ff},
        {"attention.head_count", (uint32_t)p->n_head},
        {"pooling_type", pooling},
    };
    nx_status st = NX_STATUS_OK;
    for (size_t i = 0; i < NX_ARRAY_LEN(u32s) && st == NX_STATUS_OK; i++) {
        st = mk_add_arch_u32(w, arch, u32s[i].suffix, u32s[i].v);
    }
    if (st == NX_STATUS_OK) {
        st = mk_add_arch_f32(w, arch, "attention.layer_norm_epsilon", pl->rms_eps);
    }
    if (st == NX_STATUS_OK) {
        char key[128];
        snprintf(key, sizeof key, "%s.attention.causal", arch);
        st = gguf_writer_add_bool(w, key, false);
    }
    if (st == NX_STATUS_OK && pl->arch == MK_NOMIC_BERT) {
        st = mk_add_arch_f32(w, arch, "rope.freq_base", p->rope_base > 0.0f ? p->rope_base : 1000.0f);
    }
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "general.file_type", pl->wt->ftype);
    if (st == NX_STATUS_OK && pl->wt->type != NX_TYPE_F32 && pl->wt->type != NX_TYPE_F16 &&
        pl->wt->type != NX_TYPE_BF16) {
        st = gguf_writer_add_u32(w, "general.quantization_version", 2);
    }
    return st;
}

static nx_status mk_add_hparams(struct gguf_writer *w, const struct mkmodel_params *p,
                                const struct mk_plan *pl) {
    const char *arch = g_arch_names[pl->arch];
    char name[128];
    if (p->name) snprintf(name, sizeof name, "%s", p->name);
    else snprintf(name, sizeof name, "nexus-random-%s", arch);
    nx_status st = gguf_writer_add_str(w, "general.architecture", arch);
    if (st == NX_STATUS_OK) st = gguf_writer_add_str(w, "general.name", name);
    if (st == NX_STATUS_OK && mk_is_encoder(pl->arch)) return mk_add_encoder_hparams(w, p, pl, arch);

    /* key_length/value_length only where head_dim is not n_embd / n_head, and always for
     * qwen3 (as llama.cpp's converter writes it) */
    bool own_head_dim = pl->arch == MK_QWEN3 || pl->head_dim * p->n_head != p->n_embd;
    const struct {
        const char *suffix;
        uint32_t v;
        bool on;
    } u32s[] = {
        {"context_length", (uint32_t)p->n_ctx_train, true},
        {"embedding_length", (uint32_t)p->n_embd, true},
        {"block_count", (uint32_t)p->n_layer, true},
        {"feed_forward_length", (uint32_t)p->n_ff, true},
        {"attention.head_count", (uint32_t)p->n_head, true},
        {"attention.head_count_kv", (uint32_t)p->n_head_kv, true},
        {"attention.key_length", (uint32_t)pl->head_dim, own_head_dim},
        {"attention.value_length", (uint32_t)pl->head_dim, own_head_dim},
        {"rope.dimension_count", (uint32_t)pl->head_dim, true},
        {"vocab_size", (uint32_t)pl->n_vocab, true},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(u32s) && st == NX_STATUS_OK; i++) {
        if (u32s[i].on) st = mk_add_arch_u32(w, arch, u32s[i].suffix, u32s[i].v);
    }
    if (st == NX_STATUS_OK) {
        st = mk_add_arch_f32(w, arch, "attention.layer_norm_rms_epsilon", pl->rms_eps);
    }
    if (st == NX_STATUS_OK && p->rope_base > 0.0f) {
        st = mk_add_arch_f32(w, arch, "rope.freq_base", p->rope_base);
    }
    if (st == NX_STATUS_OK) st = gguf_writer_add_u32(w, "general.file_type", pl->wt->ftype);
    if (st == NX_STATUS_OK && pl->wt->type != NX_TYPE_F32 && pl->wt->type != NX_TYPE_F16 &&
        pl->wt->type != NX_TYPE_BF16) {
        st = gguf_writer_add_u32(w, "general.quantization_version", 2);
    }
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * Public entry points
 * ------------------------------------------------------------------------------------------- */

void mkmodel_default_params(struct mkmodel_params *p) {
    memset(p, 0, sizeof *p);
    p->arch = "llama";
    p->n_layer = 2;
    p->n_embd = 256;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->n_ff = 512;
    p->n_vocab = 320;
    p->n_ctx_train = 2048;
    p->rope_base = 10000.0f;
    p->wtype = "f32";
    p->seed = 1;
    p->weight_scale = 1.0f;
}

nx_status mkmodel_preset(struct mkmodel_params *p, const char *name, struct nx_err *err) {
    if (strcmp(name, "tiny") == 0) {
        mkmodel_default_params(p);
        return NX_STATUS_OK;
    }
    if (strcmp(name, "llama-3.2-1b") == 0) {
        mkmodel_default_params(p);
        p->arch = "llama";
        p->name = "nexus-random-llama-3.2-1b";
        p->n_layer = 16;
        p->n_embd = 2048;
        p->n_head = 32;
        p->n_head_kv = 8;
        p->n_ff = 8192;
        p->n_vocab = 128256;
        p->n_ctx_train = 131072;
        p->rope_base = 500000.0f;
        p->llama3_rope_scaling = true;
        p->tied_output = true;
        p->wtype = "q4_k_m";
        p->tokenizer_from = "../shared/models/vocab/ggml-vocab-llama-bpe.gguf";
        return NX_STATUS_OK;
    }
    return nx_err_set(err, NX_STATUS_NOT_FOUND,
                      "mkmodel: unknown preset '%s' (tiny, llama-3.2-1b)", name);
}

static double mk_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

nx_status mkmodel_write(const struct mkmodel_params *p, const char *path, struct nx_err *err) {
    nx_status st;
    struct gguf_file *tok_src = NULL;
    struct gguf_writer *w = NULL;
    struct mk_plan pl;
    memset(&pl, 0, sizeof pl);
    double t0 = mk_now();

    int n_vocab = p->n_vocab;
    if (p->tokenizer_from) {
        st = gguf_open(p->tokenizer_from, &tok_src, err);
        if (st != NX_STATUS_OK) goto fail;
        enum gguf_vtype et;
        uint64_t n_tok;
        const void *data;
        if (!gguf_get_arr(tok_src, "tokenizer.ggml.tokens", &et, &n_tok, &data) ||
            et != GGUF_VTYPE_STRING || n_tok == 0 || n_tok > (1u << 24)) {
            st = nx_err_set(err, NX_STATUS_FORMAT, "mkmodel: '%s' has no usable "
                            "tokenizer.ggml.tokens array", p->tokenizer_from);
            goto fail;
        }
        if (n_vocab == 0) n_vocab = (int)n_tok;
        if ((uint64_t)n_vocab != n_tok) {
            st = nx_err_set(err, NX_STATUS_INVALID_ARG,
                            "mkmodel: vocab %d does not match the %llu tokens of '%s'", n_vocab,
                            (unsigned long long)n_tok, p->tokenizer_from);
            goto fail;
        }
    } else if (p->arch && (strcmp(p->arch, "bert") == 0 || strcmp(p->arch, "nomic-bert") == 0)) {
        if (n_vocab < MK_WPM_MIN_VOCAB) {
            st = nx_err_set(err, NX_STATUS_INVALID_ARG,
                            "mkmodel: vocab %d too small: the synthetic WordPiece vocabulary "
                            "needs >= %d", n_vocab, MK_WPM_MIN_VOCAB);
            goto fail;
        }
    } else if (n_vocab < 259) {
        st = nx_err_set(err, NX_STATUS_INVALID_ARG,
                        "mkmodel: vocab %d too small: the synthetic vocabulary needs >= 259 "
                        "(3 specials + 256 byte tokens)", n_vocab);
        goto fail;
    }

    st = mk_plan_build(&pl, p, n_vocab, err);
    if (st != NX_STATUS_OK) goto fail;

    w = gguf_writer_init();
    if (!w) {
        st = nx_err_set(err, NX_STATUS_NOMEM, "mkmodel: out of memory");
        goto fail;
    }
    st = mk_add_hparams(w, p, &pl);
    if (st != NX_STATUS_OK) {
        nx_err_set(err, st, "mkmodel: cannot add metadata: %s", nx_status_str(st));
        goto fail;
    }
    if (tok_src) st = mk_copy_tokenizer(w, tok_src, err);
    else if (mk_is_encoder(pl.arch)) st = mk_synth_wpm_vocab(w, n_vocab, err);
    else st = mk_synth_vocab(w, n_vocab, err);
    if (st != NX_STATUS_OK) goto fail;

    int n_threads = p->n_threads;
    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)NX_MIN(nc, 32) : 1;
    }
    n_threads = NX_MIN(n_threads, 64);

    /* per-tensor progress only where it helps: models of more than 16 M parameters */
    int64_t total_elems = 0;
    for (int i = 0; i < pl.n; i++) total_elems += pl.t[i].ne[0] * pl.t[i].ne[1];
    bool show_progress = p->progress && total_elems > (16 << 20);
    size_t done_bytes = 0;
    for (int i = 0; i < pl.n; i++) {
        const struct mk_tensor *t = &pl.t[i];
        uint8_t *data = nx_malloc(t->nbytes ? t->nbytes : 1);
        if (!data) {
            st = nx_err_set(err, NX_STATUS_NOMEM, "mkmodel: out of memory for '%s' (%zu bytes)",
                            t->name, t->nbytes);
            goto fail;
        }
        st = mk_generate(p, &pl, t, n_threads, data, err);
        if (st == NX_STATUS_OK) {
            st = gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, data, t->nbytes);
            if (st != NX_STATUS_OK) {
                nx_err_set(err, st, "mkmodel: cannot add tensor '%s': %s", t->name,
                           nx_status_str(st));
            }
        }
        nx_free(data);
        if (st != NX_STATUS_OK) goto fail;
        done_bytes += t->nbytes;
        if (show_progress) {
            fprintf(stderr, "mkmodel: [%3d/%d] %-28s %-5s [%lld, %lld]  %7.1f MiB  %6.1f s\n",
                    i + 1, pl.n, t->name, nx_type_name(t->type), (long long)t->ne[0],
                    (long long)t->ne[1], (double)done_bytes / (1024.0 * 1024.0), mk_now() - t0);
        }
    }
    if (show_progress) fprintf(stderr, "mkmodel: writing %s ...\n", path);
    st = gguf_writer_write(w, path, err);
    if (st != NX_STATUS_OK) goto fail;

    gguf_writer_free(w);
    gguf_close(tok_src);
    nx_free(pl.t);
    return NX_STATUS_OK;

fail:
    gguf_writer_free(w);
    gguf_close(tok_src);
    nx_free(pl.t);
    return st;
}
