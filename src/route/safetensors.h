/*
 * safetensors.h - a read-only reader of the safetensors format (Hugging Face), memory-mapped.
 *
 * FILE FORMAT (all little-endian)
 *   bytes [0, 8)        u64 N: length of the JSON header
 *   bytes [8, 8+N)      UTF-8 JSON object (may be padded with trailing spaces):
 *                         { "NAME": {"dtype": "F32", "shape": [d0, d1, ...],
 *                                    "data_offsets": [begin, end]}, ...,
 *                           "__metadata__": {"key": "string", ...} (optional) }
 *   bytes [8+N, EOF)    the data buffer; [begin, end) of each tensor is relative to its start.
 *
 * Checks (each failure is a message naming the tensor and the problem, never a crash): N fits in
 * the file and is at most 100 MB; the header is one JSON object without duplicate keys; dtype is
 * known; shape entries are non-negative integers; prod(shape) * element size (overflow-checked)
 * equals end - begin; begin <= end <= buffer size; tensors do not overlap and, as the format
 * requires, cover the buffer without holes.
 *
 * Values are stored little-endian and unaligned: read them with st_get_f64 / st_to_f32 /
 * st_get_i64, never by casting t->data. Thread-safety: an st_file is immutable after st_open;
 * concurrent readers are fine.
 */
#ifndef NX_ROUTE_SAFETENSORS_H
#define NX_ROUTE_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "nexus.h"

enum st_dtype {
    ST_BOOL = 0,
    ST_U8,
    ST_I8,
    ST_F8_E5M2,
    ST_F8_E4M3,
    ST_I16,
    ST_U16,
    ST_F16,
    ST_BF16,
    ST_I32,
    ST_U32,
    ST_F32,
    ST_F64,
    ST_I64,
    ST_U64,
    ST_DTYPE_COUNT
};

#define ST_MAX_DIMS 8

struct st_tensor {
    char *name;
    enum st_dtype dtype;
    int n_dims;
    int64_t shape[ST_MAX_DIMS];
    uint64_t n_elem;
    uint64_t offset;     /* begin, relative to the data buffer */
    uint64_t nbytes;
    const uint8_t *data; /* into the mapping; unaligned */
};

typedef struct st_file st_file;

/* Map and validate a file into *out. NX_STATUS_OK, or NX_STATUS_NOT_FOUND / IO (cannot open or
 * map), FORMAT (any check above fails) or NOMEM with a message in err and *out NULL. */
nx_status st_open(const char *path, st_file **out, char *err, size_t errlen);
/* Validate a buffer in memory (borrowed: it must outlive the st_file); statuses as st_open. */
nx_status st_open_mem(const void *buf, size_t len, st_file **out, char *err, size_t errlen);
void st_close(st_file *f);

int st_n_tensors(const st_file *f);
const struct st_tensor *st_tensor_at(const st_file *f, int i); /* in header order */
const struct st_tensor *st_find(const st_file *f, const char *name); /* NULL if absent */
/* A "__metadata__" string value, NULL if absent. Borrowed, lives with f. */
const char *st_metadata(const st_file *f, const char *key);

const char *st_dtype_name(enum st_dtype t);
size_t st_dtype_size(enum st_dtype t);
/* True for the dtypes st_get_f64 converts (bool, ints, F16, BF16, F32, F64; not the F8s). */
int st_dtype_numeric(enum st_dtype t);

/* Element i (i < t->n_elem, not checked beyond an assert) as a double / int64 (floats are
 * truncated toward zero for st_get_i64). Numeric dtypes only. */
double st_get_f64(const struct st_tensor *t, uint64_t i);
int64_t st_get_i64(const struct st_tensor *t, uint64_t i);
/* All elements converted to float into out[n_elem]; NX_STATUS_UNSUPPORTED with a message for
 * the F8 dtypes. */
nx_status st_to_f32(const struct st_tensor *t, float *out, char *err, size_t errlen);

#endif
