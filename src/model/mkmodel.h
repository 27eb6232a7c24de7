/*
 * mkmodel.h - write a GGUF model with random weights and the exact tensor names, shapes and
 * metadata keys llama.cpp uses for the llama / mistral / qwen2 / qwen3 architectures. Used by
 * `nexus mkmodel` (tools/cli/mkmodel_cmd.c) and by the tests (engine vs reference logits, benchmarks on a 1B-shaped model
 * without downloading one).
 *
 * Output is a pure function of the parameters: the same parameters (seed included) give the
 * same file bytes, whatever the thread count or machine.
 */
#ifndef NX_MKMODEL_H
#define NX_MKMODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/nx_base.h"

struct gguf_file;
struct gguf_writer;

struct mkmodel_params {
    const char *arch;      /* "llama" | "mistral" | "qwen2" | "qwen3" | "bert" | "nomic-bert" */
    const char *name;      /* general.name; NULL = "nexus-random-<arch>" */
    int n_layer;
    int n_embd;
    int n_head;
    int n_head_kv;
    int head_dim;          /* 0 = n_embd / n_head */
    int n_ff;
    int n_vocab;           /* 0 with tokenizer_from = take its token count */
    int n_ctx_train;
    float rope_base;       /* 0 = omit the key (the engine then uses 10000) */
    float rms_eps;         /* 0 = 1e-5 for llama/mistral, 1e-6 for qwen2/qwen3 */
    const char *wtype;     /* f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m: type of the 2-D
                              weights; 1-D tensors (norms, biases, rope_freqs) are always F32 */
    uint64_t seed;
    const char *tokenizer_from; /* GGUF whose tokenizer.* keys are copied; NULL = a synthetic
                                   SentencePiece ("llama") byte-fallback vocab of n_vocab tokens */
    float weight_scale;    /* multiplies every random weight's standard deviation (1 = default) */
    int n_threads;         /* threads for generation/quantization; 0 = online CPUs (capped) */
    bool llama3_rope_scaling; /* write rope_freqs.weight by the Llama-3.1 rule */
    bool tied_output;      /* no output.weight: the engine reuses token_embd */
    bool progress;         /* print progress to stderr */
    /* encoders (bert, nomic-bert): n_head_kv is ignored, rms_eps is the LayerNorm epsilon
       (0 = 1e-12), rope_base the nomic-bert RoPE base (0 = 1000); without tokenizer_from the
       vocabulary is a synthetic WordPiece one (n_vocab >= 240) */
    int pooling;           /* pooling_type written: 0 = mean, 1 mean, 2 cls (rerank: 4) */
    bool rerank;           /* bert: classification head cls + cls.output (1 logit) */
    bool qkv_fused;        /* bert: attn_qkv (+ bias) instead of attn_q/k/v */
};

/* The "tiny" preset: llama, 2 layers, n_embd 256, 4 heads / 2 kv heads, ff 512, vocab 320, F32,
 * seed 1, synthetic vocab. */
void mkmodel_default_params(struct mkmodel_params *p);
/* Apply a named preset ("tiny", "llama-3.2-1b") over *p; NX_STATUS_NOT_FOUND for unknown names.
 * Paths in presets are relative to the project root (../shared/...). */
nx_status mkmodel_preset(struct mkmodel_params *p, const char *name, struct nx_err *err);

/*
 * Generate and write the model to path (atomically, via the GGUF writer). Errors:
 * NX_STATUS_INVALID_ARG (bad shape, unknown arch/type, a row length the quantized type's block
 * size does not divide, vocab too small or not matching tokenizer_from), NX_STATUS_IO,
 * NX_STATUS_FORMAT / NX_STATUS_UNSUPPORTED (tokenizer_from unreadable), NX_STATUS_NOMEM.
 * err->msg names the problem. Nothing is left at path on failure.
 */
nx_status mkmodel_write(const struct mkmodel_params *p, const char *path, struct nx_err *err);

/* Copy metadata key i of src to w with its value type. (The reader has no i64/f64 getters: an
 * i64 value outside the int32 range is refused, and an f64 value goes through f32.) Nested
 * arrays are skipped with a warning. */
nx_status mkmodel_copy_kv(struct gguf_writer *w, const struct gguf_file *src, int64_t i,
                          struct nx_err *err);

#endif
