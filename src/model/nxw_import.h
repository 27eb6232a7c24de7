/*
 * nxw_import.h - a GGUF model from trained weights (for `nexus import`) (an "NXW1" file, as written
 * by scripts/train/nxmodel.py) and a template GGUF (usually `nexus mkmodel` output with the same
 * shapes) that supplies every metadata key, the tokenizer included, and the tensor order.
 *
 * NXW1 layout (little-endian): "NXW1", u32 tensor count, then per tensor u32 name length (1..
 * 256), the name bytes, u32 n_dims (1..4), n_dims x i64 ne (GGUF order: ne[0] is the
 * row length), then prod(ne) f32 values.
 */
#ifndef NX_MODEL_NXW_IMPORT_H
#define NX_MODEL_NXW_IMPORT_H

#include "core/nx_base.h"

/* One metadata override "KEY=TYPE:VALUE", TYPE one of u32 i32 f32 bool str. */
struct import_set {
    const char *spec;
};

/*
 * Write out (atomically) with like's metadata (keys named in sets replaced or added) and, for
 * every tensor of like in like's order, the F32 tensor of the same name and shape from the NXW1
 * file weights. Errors: NX_STATUS_IO (unreadable files, write failure), NX_STATUS_FORMAT
 * (malformed NXW1: bad magic, truncated, a size that does not add up, a duplicate name),
 * NX_STATUS_INVALID_ARG (a tensor missing from weights or with another shape, a weights tensor
 * the template lacks, a bad override), NX_STATUS_NOMEM. err->msg names the tensor or key.
 * Nothing is left at out on failure.
 */
nx_status import_nxw(const char *weights, const char *like, const char *out,
                     const struct import_set *sets, int n_sets, struct nx_err *err);

#endif
