/*
 * tok.h - tokenizers built from a GGUF file's tokenizer.* metadata.
 *
 *   tokenizer.ggml.model = "llama"  SentencePiece-style BPE over scores, "▁" for spaces, byte
 *                                    fallback <0xNN> tokens (stories260K, Llama-2, llama-spm)
 *   tokenizer.ggml.model = "gpt2"   byte-level BPE over tokenizer.ggml.merges, with the
 *                                    pre-tokenizer split named by tokenizer.ggml.pre
 *                                    ("llama3"/"llama-bpe", "qwen2", "gpt-2"/"default", ...),
 *                                    regexes run with PCRE2 (UTF + UCP)
 *   tokenizer.ggml.model = "bert"   WordPiece (for embedding models)
 * Special/control tokens (token_type 3/4), BOS/EOS/EOT/UNK/PAD ids and add_bos/add_eos flags come
 * from metadata, with the same defaults llama.cpp uses when a key is absent.
 * A vocab is immutable after load; all functions are thread-safe.
 */
#ifndef NX_TOK_H
#define NX_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

struct gguf_file;
struct nx_vocab;

/* Errors: NX_STATUS_FORMAT (missing/inconsistent tokenizer keys, naming the key),
 * NX_STATUS_UNSUPPORTED (unknown tokenizer model or pre-tokenizer), NX_STATUS_NOMEM. Everything
 * needed is copied: the gguf_file may be closed afterwards. */
nx_status vocab_load(const struct gguf_file *f, struct nx_vocab **out, struct nx_err *err);
void vocab_free(struct nx_vocab *v);

int32_t vocab_n_tokens(const struct nx_vocab *v);
nx_token vocab_bos(const struct nx_vocab *v); /* -1 if none */
nx_token vocab_eos(const struct nx_vocab *v); /* -1 if none */
nx_token vocab_cls(const struct nx_vocab *v); /* BERT [CLS]; -1 if none */
nx_token vocab_sep(const struct nx_vocab *v); /* BERT [SEP]; -1 if none */
bool vocab_is_eog(const struct nx_vocab *v, nx_token t);
bool vocab_is_control(const struct nx_vocab *v, nx_token t);
/* The raw token text as stored in the vocabulary (NUL-terminated), NULL if out of range. */
const char *vocab_token_text(const struct nx_vocab *v, nx_token t);

/* As nx_tokenize / nx_token_to_piece in nexus.h. */
int32_t vocab_tokenize(const struct nx_vocab *v, const char *text, size_t len, nx_token *out,
                       int32_t n_max, bool add_special, bool parse_special);
int32_t vocab_token_to_piece(const struct nx_vocab *v, nx_token t, char *buf, int32_t len,
                             bool special);

#endif
