/*
 * hftok.h - a Hugging Face tokenizer.json reader for Unigram models (SentencePiece-style, as
 * model2vec's distilled tokenizers use) and WordPiece models (BERT-style, as older model2vec
 * models keep), with the normalizers and pre-tokenizers they need.
 *
 * Supported (anything else is refused at load with a message naming it):
 *   model:          Unigram (vocab [[piece, score], ...], unk_id, byte_fallback);
 *                   WordPiece (vocab {token: id}, unk_token, continuing_subword_prefix,
 *                   max_input_chars_per_word)
 *   normalizer:     null, Sequence, BertNormalizer (clean_text, handle_chinese_chars,
 *                   strip_accents, lowercase), Replace (String or Regex pattern), Strip,
 *                   Lowercase, NFC, NFD, NFKC, NFKD, StripAccents, Prepend
 *   pre_tokenizer:  null, Sequence, Metaspace (replacement, prepend_scheme always/first/never
 *                   or the older add_prefix_space, split), WhitespaceSplit, BertPreTokenizer
 *   added_tokens:   matched verbatim in the raw text (before normalization) and emitted as their
 *                   id; the text between them is normalized and tokenized separately
 *                   (lstrip / rstrip / single_word flags are not applied).
 * post_processor and decoder are ignored (model2vec encodes without special tokens).
 *
 * Segmentation is Viterbi over the pieces (scores are log-probabilities, summed in double);
 * characters no piece covers become the unknown token with score min_score - 10, consecutive
 * unknowns fused into one, or byte pieces "<0xXX>" when byte_fallback is set and they exist.
 * Ties go to the path found first in left-to-right order (the Hugging Face rule). WordPiece is
 * greedy longest-match-first per word; a word it cannot cover, or longer than
 * max_input_chars_per_word characters, is one unknown token.
 *
 * Thread-safety: an hf_tok is immutable after load; hf_tok_encode may run concurrently.
 */
#ifndef NX_ROUTE_HFTOK_H
#define NX_ROUTE_HFTOK_H

#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

typedef struct hf_tok hf_tok;

/* Load tokenizer.json into *out. NX_STATUS_OK, or IO (cannot read), FORMAT (bad JSON or shape),
 * UNSUPPORTED (a model / normalizer / pre-tokenizer type not listed above) or NOMEM, with a
 * message in err and *out NULL. */
nx_status hf_tok_load(const char *path, hf_tok **out, char *err, size_t errlen);
void hf_tok_free(hf_tok *t);

/* Number of ids (max id + 1 over the model vocab and the added tokens). */
int32_t hf_tok_n_vocab(const hf_tok *t);
/* Unknown-token id, -1 when the model has none. */
int32_t hf_tok_unk_id(const hf_tok *t);
/* Text of a token id (added tokens included); NULL when out of range. Borrowed. */
const char *hf_tok_piece(const hf_tok *t, int32_t id);
/* Median length in Unicode code points of the vocabulary's token strings, truncated to an
 * integer (numpy median: mean of the two middle values for an even count). */
int hf_tok_median_token_chars(const hf_tok *t);

/*
 * Tokenize UTF-8 text (no special tokens added). *ids is allocated (free with nx_free), holds
 * the count returned. Returns the count (>= 0) or a negative nx_status with a message
 * (NX_STATUS_NOMEM, or NX_STATUS_FORMAT: a regex error, text the vocabulary cannot cover without
 * an unknown token, normalizers that grow a segment past 64 times its bytes + 64 KiB). Invalid
 * UTF-8 bytes are read as U+FFFD.
 */
int hf_tok_encode(const hf_tok *t, const char *text, size_t len, int32_t **ids, char *err,
                  size_t errlen);

/* The normalized, pre-tokenized pieces of text (no added-token handling) joined with '|'
 * between pieces, for tests. Allocated (nx_free), NULL on failure. */
char *hf_tok_debug_pretokenize(const hf_tok *t, const char *text, char *err, size_t errlen);

#endif
