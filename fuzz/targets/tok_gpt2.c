/* tok_gpt2.c - fuzz target: encode and decode arbitrary bytes with the byte-level BPE (gpt-2) vocabulary
 * (fuzz_tok.h says what is checked). */
#include "fuzz.h"
#include "fuzz_tok.h"

NX_FUZZ_TARGET(tok_gpt2) { return fuzz_tok_one("models/vocab/ggml-vocab-gpt-2.gguf", true, data, size); }
