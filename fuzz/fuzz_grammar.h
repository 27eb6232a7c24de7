/*
 * fuzz_grammar.h - the body shared by the grammar targets (fuzz/targets/schema_grammar.c,
 * gbnf.c): drive a compiled grammar's matcher over the stories260K vocabulary (512 pieces,
 * loaded once) with a script of bytes. Each script byte is one step:
 *   low 2 bits 0 or 1: the mask (1: forced, the shortest completion's first tokens); with no
 *     token allowed the walk ends; else token number (byte >> 2) % count among the allowed ones
 *     is accepted, which must succeed, and the first disallowed token must be refused
 *     (INVALID_ARG) without changing the matcher (its completion length and can_end stay);
 *   2: the next (byte >> 2) % 8 script bytes as raw text (accept_text; refusal allowed);
 *   3: roll back (byte >> 2) % 4 steps.
 * At most 96 steps. Also nx_grammar_print's size contract (-needed, then exactly needed).
 */
#ifndef NX_FUZZ_GRAMMAR_H
#define NX_FUZZ_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

void fuzz_grammar_drive(const nx_grammar *g, const uint8_t *script, size_t n);

/* The input split at its first NUL byte: *a_len bytes of text, then the rest (the script); no
   NUL: all text, empty script. */
void fuzz_split_nul(const uint8_t *data, size_t size, size_t *a_len, const uint8_t **rest,
                    size_t *rest_len);

#endif
