/*
 * model2vec.h - model2vec static embeddings (internal helpers beyond rt_embedder).
 *
 * A model2vec model is a directory with
 *   model.safetensors  "embeddings" [rows, dim] (F32/F16/BF16/F64/I8...), optional "weights"
 *                      [n_vocab] (per-token weight, any numeric dtype) and "mapping" [n_vocab]
 *                      (token id -> embedding row, integer dtype; without it rows == n_vocab)
 *   tokenizer.json     Hugging Face Unigram or WordPiece tokenizer (route/hftok.h)
 *   config.json        optional; "normalize" (default false, as in model2vec)
 *
 * Encoding follows model2vec's StaticModel.encode with its default max_length = 512:
 *   1. the text is cut to its first 512 * median_token_length code points (median over the
 *      vocabulary's token strings, a pre-truncation model2vec does before tokenizing);
 *   2. tokenized without special tokens; the unknown token's ids are dropped;
 *   3. the first 512 ids are kept;
 *   4. mean over the ids of embeddings[mapping[id]] * weights[id] (in double);
 *   5. divided by (L2 norm + 1e-32).
 * rt_embedder->embed always applies step 5 (the rt_embedder contract is L2-normalised output;
 * with normalize=false model2vec differs only by a positive factor, which no cosine ranking
 * sees). A text with no known token embeds to the zero vector. Query and document kinds are
 * embedded the same way.
 *
 * Thread-safety: embed may run concurrently on one embedder (read-only state).
 */
#ifndef NX_ROUTE_MODEL2VEC_H
#define NX_ROUTE_MODEL2VEC_H

#include <stddef.h>
#include <stdint.h>

#include "route/embed.h"

#define RT_MODEL2VEC_MAX_LENGTH 512

/* The token ids e (a model2vec embedder from rt_embedder_open on a directory) pools for text,
 * after steps 1-3 above. *ids allocated (nx_free); returns the count or a negative nx_status
 * with a message. */
int rt_model2vec_ids(rt_embedder *e, const char *text, int32_t **ids, char *err, size_t errlen);

/* The un-normalized mean (steps 1-4) into out[dim] and whether config.json asks for
 * normalization (*normalize may be NULL). NX_STATUS_OK or a negative nx_status with a message. */
nx_status rt_model2vec_mean(rt_embedder *e, const char *text, double *out, int *normalize,
                            char *err, size_t errlen);

#endif
