/* tok_stories.c - fuzz target: encode and decode arbitrary bytes with the SentencePiece (stories260K, 512 pieces, byte fallback) vocabulary
 * (fuzz_tok.h says what is checked). */
#include "fuzz.h"
#include "fuzz_tok.h"

NX_FUZZ_TARGET(tok_stories) { return fuzz_tok_one("models/stories260K/stories260K.gguf", false, data, size); }
