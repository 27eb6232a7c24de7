/*
 * fuzz_tok.h - the body shared by the tokenizer targets (fuzz/targets/tok_*.c): one
 * vocabulary per target, loaded once. Input: byte 0 holds flags (bit 0 add_special, bit 1
 * parse_special, bit 2 render special tokens when decoding, bit 3 check that decoding gives
 * the input back), the rest is the text. Checks beyond "no crash": nx_tokenize's size
 * contract (a too-small buffer returns -(tokens needed), and that many fit), the same for
 * nx_token_to_piece, every id in range; the rest of the input read as token ids (any int32)
 * must decode without crashing. With `roundtrip` (byte-level vocabularies) and bit 3 set, valid
 * UTF-8 without special tokens must decode to exactly the input.
 */
#ifndef NX_FUZZ_TOK_H
#define NX_FUZZ_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

int fuzz_tok_one(const char *vocab_rel, bool roundtrip, const uint8_t *data, size_t size);

#endif
