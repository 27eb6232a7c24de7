/*
 * ref_forward.h - the test oracle: a naive, straight-line, double-precision forward pass for
 * the llama / mistral / qwen2 / qwen3 architectures, read from a GGUF file with the reference
 * dequantizers. Written independently of the engine (src/model/); slow and simple on purpose.
 */
#ifndef NX_REF_FORWARD_H
#define NX_REF_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "core/nx_base.h"

struct ref_model;

/*
 * Load every weight of a GGUF model, dequantized to double. *out owned by the caller
 * (ref_model_free). Errors: NX_STATUS_IO / FORMAT (from the GGUF reader, or a missing tensor or
 * a wrong shape, named in err), NX_STATUS_UNSUPPORTED (architecture or tensor type),
 * NX_STATUS_NOMEM.
 */
nx_status ref_model_load(const char *gguf_path, struct ref_model **out, struct nx_err *err);
void ref_model_free(struct ref_model *m);

int ref_model_n_vocab(const struct ref_model *m);
int ref_model_n_embd(const struct ref_model *m);

/*
 * Logits for tokens[0..n) at positions 0..n-1 (a fresh sequence): logits is n x n_vocab,
 * row i = the logits after token i. Returns 0, or -1 on a token out of range, n <= 0 or no
 * memory (logits untouched).
 */
int ref_forward(struct ref_model *m, const int32_t *tokens, int n, double *logits);

/*
 * Deliberate deviations, for tests that check a comparison is sensitive enough to catch a
 * wrong engine. 0 = the correct model.
 */
enum ref_variant {
    REF_VAR_ROPE_LAYOUT = 1 << 0,  /* NEOX halves where the arch wants adjacent pairs and back */
    REF_VAR_NO_ROPE_FREQS = 1 << 1, /* ignore rope_freqs.weight */
    REF_VAR_ROPE_BASE = 1 << 2,    /* rope base x 2 */
    REF_VAR_NO_BIAS = 1 << 3,      /* ignore qwen2's q/k/v biases */
    REF_VAR_NO_QK_NORM = 1 << 4,   /* skip qwen3's per-head q/k RMSNorm */
    REF_VAR_GQA_MODULO = 1 << 5,   /* kv head = h % n_head_kv instead of h / group */
    /* Emulate the engine's activation rounding before each matrix product: Q8_0 for Q4_0/Q8_0
     * weights, Q8_K for K-quant weights (via the reference quantizers), nothing for F32/F16/
     * BF16. Not a fault: used to estimate how far a correct engine can be from the exact
     * reference. */
    REF_VAR_EMULATE_ACT_QUANT = 1 << 6,
};
void ref_model_set_variant(struct ref_model *m, unsigned variant);

#endif
