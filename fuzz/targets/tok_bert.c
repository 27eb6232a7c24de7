/* tok_bert.c - fuzz target: encode and decode arbitrary bytes with the WordPiece (bert-bge) vocabulary
 * (fuzz_tok.h says what is checked). */
#include "fuzz.h"
#include "fuzz_tok.h"

NX_FUZZ_TARGET(tok_bert) { return fuzz_tok_one("models/vocab/ggml-vocab-bert-bge.gguf", false, data, size); }
