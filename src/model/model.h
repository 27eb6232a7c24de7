/*
 * model.h - the loaded model: hyperparameters from GGUF metadata, weight views, the vocab.
 * Immutable after nx_model_load; shared by every context that uses it.
 *
 * Supported architectures (general.architecture):
 *   llama, mistral  RoPE on adjacent pairs ("NORM"), optional rope_freqs.weight divisors
 *                   (Llama-3 frequency scaling), optional linear rope scaling
 *   qwen2           as llama, plus q/k/v biases, RoPE on NEOX halves
 *   qwen3           as llama, plus per-head RMSNorm of q and k (attn_q_norm / attn_k_norm)
 *                   before RoPE, NEOX halves, head size from ARCH.attention.key_length
 * All use RMSNorm, SwiGLU feed-forward and grouped-query attention.
 */
#ifndef NX_MODEL_H
#define NX_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

enum nx_arch {
    NX_ARCH_LLAMA,
    NX_ARCH_MISTRAL,
    NX_ARCH_QWEN2,
    NX_ARCH_QWEN3,
    NX_ARCH_BERT,       /* encoders: see model/encoder.h (weights in nx_model.enc) */
    NX_ARCH_NOMIC_BERT,
};

struct nx_hparams {
    enum nx_arch arch;
    int32_t n_vocab;
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim; /* per-head size of q and k (and v) */
    int32_t n_rot;    /* rotated dims per head (<= head_dim) */
    int32_t n_ff;
    float rms_eps;
    float rope_base;
    float rope_freq_scale; /* 1 / linear scaling factor */
    bool rope_neox;        /* pairs (i, i + n_rot/2) instead of (2i, 2i+1) */
};

/* A 2-D weight: ne1 rows of ne0 elements of `type`, rows row_bytes apart. */
struct nx_weight {
    enum nx_type type;
    int64_t ne0;
    int64_t ne1;
    size_t row_bytes;
    const void *data;
};

struct nx_layer {
    const float *attn_norm; /* (n_embd) */
    struct nx_weight wq;    /* (n_head*head_dim rows, n_embd) */
    struct nx_weight wk;    /* (n_head_kv*head_dim rows, n_embd) */
    struct nx_weight wv;    /* (n_head_kv*head_dim rows, n_embd) */
    struct nx_weight wo;    /* (n_embd rows, n_head*head_dim) */
    const float *bq;        /* qwen2 biases or NULL */
    const float *bk;
    const float *bv;
    const float *q_norm;    /* qwen3 (head_dim) or NULL */
    const float *k_norm;
    const float *ffn_norm;  /* (n_embd) */
    struct nx_weight gate;  /* (n_ff rows, n_embd) */
    struct nx_weight up;    /* (n_ff rows, n_embd) */
    struct nx_weight down;  /* (n_embd rows, n_ff) */
};

struct gguf_file;
struct nx_vocab;
struct nx_encoder;

struct nx_model {
    struct nx_hparams hp;
    struct nx_weight tok_embd; /* (n_vocab rows, n_embd) */
    struct nx_weight output;   /* (n_vocab rows, n_embd); = tok_embd when tied */
    const float *output_norm;  /* (n_embd) */
    struct nx_layer *layers;   /* (n_layer) */
    float *rope_inv_freq;      /* (n_rot/2): base^(-2i/n_rot) * freq_scale / rope_freqs[i] */
    struct nx_vocab *vocab;
    struct gguf_file *gguf;    /* kept open while weights point into its mapping */
    void *weight_buf;          /* weights read into memory (NULL with use_mmap) */
    size_t weight_bytes;       /* bytes of tensor data in use */
    size_t weight_map_bytes;   /* size of the weight_buf mapping */
    bool vocab_only;           /* a tokenizer-only file: no weights, no contexts (also set for
                                  encoders, which have no decoder weights) */
    struct nx_encoder *enc;    /* bert / nomic-bert encoder weights (model/encoder.h), or NULL */
    uint64_t weight_hash;      /* kv/kvblock.c: 64-bit hash of the weights (types, shapes, bytes),
                                  computed on first use; 0 = not yet (__atomic access) */
    char *chat_template;       /* tokenizer.chat_template (NUL-terminated copy) or NULL */
    char desc[160];
};

struct gguf_tensor;
/*
 * Loader checks shared by the decoder and encoder binders (model_load.c). A vector must be F32
 * of n elements; a matrix ne0 x ne1 (ne1 = 0: any row count >= 1) of a supported weight type
 * whose rows are whole blocks, and then *w gets its type, shape and row size (not its data).
 * NX_STATUS_OK, or an error naming the tensor in err.
 */
/* Metadata key "<arch>.<suffix>" as an integer >= min into *out (left as is when absent and not
 * required). */
struct gguf_file;
nx_status model_key_i32(const struct gguf_file *f, const char *arch, const char *suffix,
                        int32_t *out, bool required, int32_t min, struct nx_err *err);
nx_status model_check_vec(const struct gguf_tensor *t, const char *name, int64_t n,
                          struct nx_err *err);
nx_status model_check_mat(const struct gguf_tensor *t, const char *name, int64_t ne0,
                          int64_t ne1, struct nx_weight *w, struct nx_err *err);

#endif
