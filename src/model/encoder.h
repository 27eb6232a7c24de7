/*
 * encoder.h - BERT-family encoder models (general.architecture "bert", "nomic-bert"): the
 * weights the loader binds and the forward pass behind nx_embed / nx_rerank_score (internal).
 *
 * GGUF layout (llama.cpp's names; E = n_embd, F = n_ff, V = n_vocab, T = token types):
 *   token_embd.weight [E, V]   token_types.weight [E, T] (optional)
 *   position_embd.weight [E, n_ctx_train]          (bert only: learned absolute positions)
 *   token_embd_norm.weight/.bias [E]               (LayerNorm of the summed embeddings)
 *   blk.N.attn_qkv.weight [E, 3E] (+ .bias)  or  blk.N.attn_q/k/v.weight [E, E] (+ .bias)
 *   blk.N.attn_output.weight [E, E] (+ .bias)
 *   blk.N.attn_output_norm.weight/.bias [E]        (post-norm after the attention residual)
 *   blk.N.ffn_up.weight [E, F] (+ .bias), blk.N.ffn_down.weight [F, E] (+ .bias)
 *   blk.N.ffn_gate.weight [E, F]                   (nomic-bert: SwiGLU silu(gate) * up)
 *   blk.N.layer_output_norm.weight/.bias [E]       (post-norm after the FFN residual)
 *   cls.weight [E, E], cls.bias [E], cls.output.weight [E, C], cls.output.bias [C]
 *                                                  (bert rerankers: dense + tanh, then C logits)
 * Keys: ARCH.{embedding_length, block_count, feed_forward_length, attention.head_count,
 * attention.layer_norm_epsilon, context_length, pooling_type, attention.causal,
 * rope.freq_base (nomic-bert, NEOX halves)}.
 */
#ifndef NX_MODEL_ENCODER_H
#define NX_MODEL_ENCODER_H

#include <stdbool.h>

#include "model/model.h"

struct gguf_file;

struct nx_enc_layer {
    struct nx_weight wqkv;      /* fused (3E rows, E) or data NULL */
    const float *bqkv;          /* (3E) or NULL */
    struct nx_weight wq, wk, wv; /* separate (E rows, E) when wqkv is absent */
    const float *bq, *bk, *bv;  /* (E) or NULL */
    struct nx_weight wo;        /* (E rows, E) */
    const float *bo;
    const float *attn_norm_w, *attn_norm_b; /* attn_output_norm (E) */
    struct nx_weight up;        /* (F rows, E) */
    const float *bup;
    struct nx_weight gate;      /* nomic-bert (F rows, E); data NULL for bert */
    struct nx_weight down;      /* (E rows, F) */
    const float *bdown;
    const float *out_norm_w, *out_norm_b; /* layer_output_norm (E) */
};

struct nx_encoder {
    bool nomic;                 /* nomic-bert: RoPE (NEOX halves), SwiGLU, no position table */
    int32_t n_types;            /* rows of token_types (0 = no token-type embeddings) */
    int32_t n_max_tokens;       /* longest sequence: n_ctx_train */
    int32_t n_cls_out;          /* rows of cls.output (0 = no classification head) */
    int32_t pooling;            /* the file's pooling_type (enum nx_pooling) */
    float eps;                  /* LayerNorm epsilon */
    struct nx_weight type_embd; /* (T rows, E) */
    struct nx_weight pos_embd;  /* (n_ctx_train rows, E), bert only */
    const float *tok_norm_w, *tok_norm_b;
    struct nx_weight cls;       /* (E rows, E) */
    const float *cls_b;
    struct nx_weight cls_out;   /* (C rows, E) */
    const float *cls_out_b;
    struct nx_enc_layer *layers;
};

/* True when general.architecture names an encoder this file loads. */
bool encoder_is_encoder_arch(const char *arch, size_t len);

/*
 * Fill m (hp, tok_embd, vocab, enc, weight buffer) from an encoder GGUF. use_mmap: views into
 * f's mapping (the caller keeps f open in m->gguf); otherwise the tensors are copied into
 * m->weight_buf. Errors name the key or tensor: NX_STATUS_FORMAT, UNSUPPORTED, NOMEM. On failure
 * the caller frees m (nx_model_free handles a partly filled model).
 */
nx_status encoder_load(const struct gguf_file *f, struct nx_model *m, bool use_mmap,
                       struct nx_err *err);
void encoder_free(struct nx_encoder *enc);

#endif
