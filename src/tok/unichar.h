/*
 * unichar.h - the character classes of BERT-style text cleaning and splitting (Python BERT
 * and Hugging Face's BertNormalizer / BertPreTokenizer agree on them), from utf8proc's
 * Unicode tables. Used by the GGUF WordPiece tokenizer (wpm.c) and the tokenizer.json one
 * (route/hftok.c).
 */
#ifndef NX_UNICHAR_H
#define NX_UNICHAR_H

#include <stdbool.h>
#include <stdint.h>
#include <utf8proc.h>

/* Unicode White_Space (Rust char::is_whitespace). */
static inline bool uc_is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Unicode "Other" categories (Cc, Cf, Cs, Co, Cn), minus tab, newline and return. */
static inline bool uc_is_control(uint32_t c) {
    if (c == '\t' || c == '\n' || c == '\r') return false;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF || k == UTF8PROC_CATEGORY_CS ||
           k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CN;
}

/* BERT punctuation: ASCII punctuation or a Unicode P* character. */
static inline bool uc_is_punct(uint32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
        (c >= 123 && c <= 126))
        return true;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

#endif
