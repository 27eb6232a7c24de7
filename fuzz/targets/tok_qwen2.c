/* tok_qwen2.c - fuzz target: encode and decode arbitrary bytes with the byte-level BPE (qwen2) vocabulary
 * (fuzz_tok.h says what is checked). */
#include "fuzz.h"
#include "fuzz_tok.h"

NX_FUZZ_TARGET(tok_qwen2) { return fuzz_tok_one("models/vocab/ggml-vocab-qwen2.gguf", true, data, size); }
