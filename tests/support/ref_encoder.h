/*
 * ref_encoder.h - the test oracle for BERT-family encoders (bert, nomic-bert): a naive,
 * double-precision forward pass and pooling, read from a GGUF file with the reference
 * dequantizers. Written independently of the engine (src/model/encoder*.c); slow on purpose.
 */
#ifndef NX_REF_ENCODER_H
#define NX_REF_ENCODER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/nx_base.h"

struct ref_encoder;

/* Load every weight dequantized to double. Errors: IO / FORMAT (missing tensor or key, wrong
 * shape, named in err), UNSUPPORTED (architecture), NOMEM. */
nx_status ref_encoder_load(const char *gguf_path, struct ref_encoder **out, struct nx_err *err);
void ref_encoder_free(struct ref_encoder *m);

int ref_encoder_n_embd(const struct ref_encoder *m);
int ref_encoder_n_cls_out(const struct ref_encoder *m);

/*
 * Encode tokens[0..n) with token types types[0..n) (NULL = all 0) and pool: 1 mean, 2 cls,
 * 3 last (out: n_embd doubles, L2-normalised when normalize), 4 rank (out: n_cls_out logits).
 * Returns 0, or -1 on bad input or no memory.
 */
int ref_encoder_embed(struct ref_encoder *m, const int32_t *tokens, const int32_t *types, int n,
                      int pooling, bool normalize, double *out);

/* Deliberate deviations, for tests that prove a comparison would catch an engine mistake. */
enum ref_enc_variant {
    REF_ENC_VAR_CAUSAL = 1 << 0,      /* causal mask instead of bidirectional attention */
    REF_ENC_VAR_GELU_TANH = 1 << 1,   /* tanh-approximated GELU instead of erf */
    REF_ENC_VAR_ROPE_PAIRS = 1 << 2,  /* RoPE on adjacent pairs instead of NEOX halves */
    REF_ENC_VAR_TYPES_ZERO = 1 << 3,  /* token type 0 for every token */
    REF_ENC_VAR_PRE_NORM = 1 << 4,    /* LayerNorm before each block instead of after */
    REF_ENC_VAR_NO_TANH = 1 << 5,     /* classification head without the tanh */
};
void ref_encoder_set_variant(struct ref_encoder *m, unsigned variant);

#endif
