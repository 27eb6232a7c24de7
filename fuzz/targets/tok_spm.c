/* tok_spm.c - fuzz target: encode and decode arbitrary bytes with the SentencePiece (llama-2 SPM) vocabulary
 * (fuzz_tok.h says what is checked). */
#include "fuzz.h"
#include "fuzz_tok.h"

NX_FUZZ_TARGET(tok_spm) { return fuzz_tok_one("models/vocab/ggml-vocab-llama-spm.gguf", false, data, size); }
