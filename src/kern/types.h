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
};

/* Info for a type id; NULL for ids outside the table or unknown to Nexus. */
const struct nx_type_info *nx_type_info_get(int type);
/*
 * Bytes of a row of n elements; false when n is not a multiple of the block size or on overflow.
 */
bool nx_row_bytes(enum nx_type t, int64_t n, size_t *out);

#endif
