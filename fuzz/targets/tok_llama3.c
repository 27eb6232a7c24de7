/* tok_llama3.c - fuzz target: encode and decode arbitrary bytes with the byte-level BPE (llama-3, 128k) vocabulary
 * (fuzz_tok.h says what is checked). */
#include "fuzz.h"
#include "fuzz_tok.h"

NX_FUZZ_TARGET(tok_llama3) { return fuzz_tok_one("models/vocab/ggml-vocab-llama-bpe.gguf", true, data, size); }
