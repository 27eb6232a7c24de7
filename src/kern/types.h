/*
 * types.h - tensor element types: block size, bytes per block, names. The trait table has one
 * entry per ggml type id (include/nexus.h enum nx_type); ids Nexus does not know have
 * blck_size 0.
 */
#ifndef NX_TYPES_H
#define NX_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

struct nx_type_info {
    const char *name;
    int64_t blck_size; /* elements per block (1 for F32/F16/BF16); 0 = unknown type */
    size_t type_size;  /* bytes per block */
    bool quantized;
    bool supported;    /* weights of this type can be used by the engine */
    bool internal;     /* an in-memory layout of Nexus's own: never read from or written to files */
};

/*
 * Q4_K with its quants interleaved for the AVX2 kernels (see quant.h): the same 144-byte
 * blocks, d, dmin and scales in place, the 128 quant bytes permuted. The engine rewrites Q4_K
 * weights into it at load when the kernel set asks for it (kern_weight_layout); files never
 * hold it. The id is one ggml does not use.
 */
#define NX_TYPE_Q4_K_IL ((enum nx_type)39)

/*
 * F16 and BF16 with rows interleaved by fours ("X4", for the AVX-512 kernels; quant.h): each
 * group of 4 rows holds, for every 4 consecutive columns, 4 elements of row 0, then of rows
 * 1, 2 and 3, so one 32-byte load is a 4 x 4 tile. Same bytes per matrix, but a row is no
 * longer contiguous: only matrices whose row count is a multiple of 4 and whose row length is
 * a multiple of 16 take it, and kern_matmul row ranges start at multiples of 4. The ids are
 * ones ggml no longer uses (IQ4_NL_4_8, IQ4_NL_8_8, removed).
 */
#define NX_TYPE_F16_X4 ((enum nx_type)37)
#define NX_TYPE_BF16_X4 ((enum nx_type)38)

static inline bool nx_type_is_x4(enum nx_type t) {
    return t == NX_TYPE_F16_X4 || t == NX_TYPE_BF16_X4;
}

/* The file type an in-memory layout was made from (t itself for file types). */
static inline enum nx_type nx_type_in_file(enum nx_type t) {
    if (t == NX_TYPE_Q4_K_IL) return NX_TYPE_Q4_K;
    if (t == NX_TYPE_F16_X4) return NX_TYPE_F16;
    return t == NX_TYPE_BF16_X4 ? NX_TYPE_BF16 : t;
}

/* Info for a type id; NULL for ids outside the table or unknown to Nexus. */
const struct nx_type_info *nx_type_info_get(int type);
/*
 * Bytes of a row of n elements; false when n is not a multiple of the block size or on overflow.
 */
bool nx_row_bytes(enum nx_type t, int64_t n, size_t *out);

#endif
