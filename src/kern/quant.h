/*
 * quant.h - block layouts bit-compatible with ggml/llama.cpp files, half-precision conversions,
 * and the scalar reference quantize/dequantize for every supported type. These are the oracle
 * the SIMD kernels are tested against.
 *
 * Layouts (QK = 32 elements per block, QK_K = 256 per super-block):
 *   Q4_0 : f16 d;  u8 qs[16]          x = d * (q - 8), low nibbles = elements 0..15, high 16..31
 *   Q8_0 : f16 d;  i8 qs[32]          x = d * q
 *   Q4_K : f16 d, dmin; u8 scales[12] (8 x 6-bit scale + 8 x 6-bit min, packed); u8 qs[128]
 *          x = d*sc[j]*q - dmin*m[j] for 8 sub-blocks of 32
 *   Q5_K : as Q4_K plus u8 qh[32] (the fifth bit)
 *   Q6_K : u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d   x = d*scales[j]*(q - 32), 16 subs of 16
 *   Q8_K : f32 d; i8 qs[256]; i16 bsums[16] (sums of groups of 16): the activation format of the
 *          K-quant dot products
 *   Q4_K_IL (internal, types.h): a Q4_K block with qs permuted for the AVX2 kernels. Chunk
 *          c = 2t + l (t = 0..3, l = 0..1) is 32 quants: byte p holds element 16l + 4t + p % 4 of
 *          sub-block 2 ((p % 16) / 4) + p / 16 (so every 4-byte group is one sub-block). qs byte
 *          32a + p holds chunk a's quant at p in its low nibble and chunk a + 4's in its high
 *          nibble (a = 0..3): four loads, masks and shifts give the eight chunks.
 */
#ifndef NX_QUANT_H
#define NX_QUANT_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "nexus.h"

#define QK4_0 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12

typedef uint16_t nx_half; /* IEEE binary16 bits */
typedef uint16_t nx_bf16; /* bfloat16 bits */

struct block_q4_0 {
    nx_half d;
    uint8_t qs[QK4_0 / 2];
};
struct block_q8_0 {
    nx_half d;
    int8_t qs[QK8_0];
};
struct block_q4_K {
    nx_half d;
    nx_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
struct block_q5_K {
    nx_half d;
    nx_half dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    nx_half d;
};
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(struct block_q4_0) == 18, "q4_0 size");
static_assert(sizeof(struct block_q8_0) == 34, "q8_0 size");
static_assert(sizeof(struct block_q4_K) == 144, "q4_K size");
static_assert(sizeof(struct block_q5_K) == 176, "q5_K size");
static_assert(sizeof(struct block_q6_K) == 210, "q6_K size");
static_assert(sizeof(struct block_q8_K) == 292, "q8_K size");

/* IEEE half <-> float (round to nearest even; inf/nan preserved). */
float nx_half_to_f32(nx_half h);
nx_half nx_f32_to_half(float f);
/* bfloat16 <-> float (round to nearest even; nan stays nan). */
float nx_bf16_to_f32(nx_bf16 h);
nx_bf16 nx_f32_to_bf16(float f);

/*
 * Reference dequantize n elements (n a multiple of the block size) of type t into float.
 * Supports F32 F16 BF16 Q4_0 Q8_0 Q4_K Q4_K_IL Q5_K Q6_K Q8_K.
 */
void quant_dequantize_row_ref(enum nx_type t, const void *src, float *dst, int64_t n);
/*
 * Reference quantize n floats (n a multiple of the block size) to type t; the same choices of
 * scales as llama.cpp's reference (non-imatrix) quantizers, so the results are valid blocks.
 */
void quant_quantize_row_ref(enum nx_type t, const float *src, void *dst, int64_t n);

/* Q4_K <-> Q4_K_IL, nb blocks (dst must not overlap src); each is the other's exact inverse. */
void quant_q4k_interleave_ref(const void *src, void *dst, int64_t nb);
void quant_q4k_deinterleave_ref(const void *src, void *dst, int64_t nb);
/*
 * X4 layouts (types.h): element (row r, column i) of a matrix of 16-bit elements with k
 * columns (k a multiple of 4) sits x4_index(k, r, i) elements from its start.
 */
static inline size_t quant_x4_index(int64_t k, int64_t r, int64_t i) {
    return (size_t)(r / 4) * 4 * (size_t)k + (size_t)(i / 4) * 16 + (size_t)(r % 4) * 4 +
           (size_t)(i % 4);
}
/* Rows [0, rows) (a multiple of 4) of k 16-bit elements: plain rows <-> X4 (dst must not
 * overlap src); each is the other's exact inverse. */
void quant_x4_interleave_ref(const void *src, void *dst, int64_t k, int64_t rows);
void quant_x4_deinterleave_ref(const void *src, void *dst, int64_t k, int64_t rows);
/* Elements [i0, i0 + n) of row r of an X4 matrix with k columns, as 16-bit elements. */
void quant_x4_get_ref(const void *m, int64_t k, int64_t r, int64_t i0, int64_t n, uint16_t *out);

/* Quant (0..15) of element `elem` (0..31) of sub-block s (0..7) of a Q4_K_IL block's qs. */
static inline int quant_q4k_il_get(const uint8_t *qs, int s, int elem) {
    int c = 2 * ((elem % 16) / 4) + elem / 16, p = 16 * (s % 2) + 4 * (s / 2) + elem % 4;
    return (qs[32 * (c % 4) + p] >> (4 * (c / 4))) & 0xf;
}

#endif
