/*
 * gguf.h - GGUF file reader and writer. No model semantics here.
 *
 * File format (versions 2 and 3; little-endian; v1 is refused):
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { gguf_string key | u32 value_type | value }
 *   n_tensors x { gguf_string name | u32 n_dims (1..4) | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to `general.alignment` (u32, default 32, a power of two)
 *   tensor data; each tensor's offset is relative to the start of the data and aligned
 * gguf_string = u64 length + bytes (no NUL). value: u8 i8 u16 i16 u32 i32 f32 bool(u8) string
 *   u64 i64 f64, or array = u32 elem_type + u64 count + count elements (arrays of arrays allowed
 *   by the format; this reader accepts nested arrays and skips them safely).
 *
 * The reader maps the file read-only and validates everything before returning: every count,
 * length, size and offset is checked against the file size and for overflow; duplicate keys,
 * duplicate tensor names, unknown value or tensor types, bad dims, misaligned or out-of-range or
 * overlapping tensor data are errors naming the field. After a successful open, every accessor is
 * safe. Strings returned point into the mapping and are NOT NUL-terminated (use the length);
 * keys and tensor names are copied NUL-terminated for convenience.
 */
#ifndef NX_GGUF_H
#define NX_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/nx_base.h"

enum gguf_vtype {
    GGUF_VTYPE_U8 = 0,
    GGUF_VTYPE_I8 = 1,
    GGUF_VTYPE_U16 = 2,
    GGUF_VTYPE_I16 = 3,
    GGUF_VTYPE_U32 = 4,
    GGUF_VTYPE_I32 = 5,
    GGUF_VTYPE_F32 = 6,
    GGUF_VTYPE_BOOL = 7,
    GGUF_VTYPE_STRING = 8,
    GGUF_VTYPE_ARRAY = 9,
    GGUF_VTYPE_U64 = 10,
    GGUF_VTYPE_I64 = 11,
    GGUF_VTYPE_F64 = 12,
    GGUF_VTYPE_COUNT
};

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NAME 65536    /* longest key or tensor name accepted, in bytes */
#define GGUF_MAX_ARRAY_DEPTH 8 /* deepest array nesting accepted (1 = plain array) */

/* Bytes of one element of a scalar type; 0 for STRING, ARRAY and ids outside the enum. */
size_t gguf_vtype_size(enum gguf_vtype t);
/* "u8", "string", "array", ...; NULL for ids outside the enum. */
const char *gguf_vtype_name(enum gguf_vtype t);

struct gguf_file;

struct gguf_tensor {
    const char *name;    /* NUL-terminated copy */
    enum nx_type type;
    int n_dims;          /* 1..4 */
    int64_t ne[4];       /* elements per dim, ne[0] innermost (row length); unused dims = 1 */
    uint64_t offset;     /* relative to the data section */
    size_t nbytes;       /* bytes of data */
    const void *data;    /* into the read-only mapping */
};

/*
 * Open, map and validate a GGUF file. *out owned by caller (gguf_close). Errors:
 * NX_STATUS_IO, NX_STATUS_FORMAT, NX_STATUS_UNSUPPORTED (version 1 or > 3), NX_STATUS_NOMEM;
 * err->msg names the problem, e.g. "tensor 'blk.0.attn_q.weight': data out of file range".
 */
nx_status gguf_open(const char *path, struct gguf_file **out, struct nx_err *err);
/* Same, over a caller-owned memory buffer (must outlive the gguf_file). */
nx_status gguf_open_buffer(const void *buf, size_t size, struct gguf_file **out,
                           struct nx_err *err);
void gguf_close(struct gguf_file *f);

uint32_t gguf_version(const struct gguf_file *f);
size_t gguf_alignment(const struct gguf_file *f);
size_t gguf_file_size(const struct gguf_file *f);
size_t gguf_data_offset(const struct gguf_file *f); /* byte offset of the data section */

/* ---- metadata ---- */
int64_t gguf_n_kv(const struct gguf_file *f);
const char *gguf_kv_key(const struct gguf_file *f, int64_t i);
enum gguf_vtype gguf_kv_type(const struct gguf_file *f, int64_t i);
/* Index of a key, or -1. */
int64_t gguf_find_key(const struct gguf_file *f, const char *key);

/*
 * Typed getters by key. Return false when the key is absent or has a type that cannot
 * represent the request (integers of any width convert when the value fits; f32/f64 convert to
 * each other; bool only from bool). *out untouched on false.
 */
bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out);
bool gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out);
bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const struct gguf_file *f, const char *key, const char **s, size_t *len);

/*
 * Arrays. gguf_get_arr gives element type, count and (for non-string scalar element types) a
 * pointer to the packed little-endian elements in the mapping (may be unaligned: use memcpy or
 * the element getters). For string arrays, use gguf_arr_str (O(1) per element after open).
 * For STRING and ARRAY (nested) element types *data is NULL; nested arrays are validated but
 * their elements are not accessible. Every out pointer of the getters may be NULL.
 */
bool gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                  uint64_t *n, const void **data);
bool gguf_arr_str(const struct gguf_file *f, const char *key, uint64_t i, const char **s,
                  size_t *len);
/* Numeric element i converted (any int/float elem type); false when out of range or not numeric. */
bool gguf_arr_f64(const struct gguf_file *f, const char *key, uint64_t i, double *out);
bool gguf_arr_i64(const struct gguf_file *f, const char *key, uint64_t i, int64_t *out);

/* ---- tensors ---- */
int64_t gguf_n_tensors(const struct gguf_file *f);
const struct gguf_tensor *gguf_tensor(const struct gguf_file *f, int64_t i);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* ---- writer ----
 * Builds a GGUF v3 file in memory order: metadata in insertion order, tensors in insertion
 * order, data aligned to `alignment` (default 32; a general.alignment u32 key is written when it
 * is not 32). Tensor data is copied when added. gguf_writer_write writes atomically: temporary
 * file in the same directory, fsync, rename. Keys and names must be unique (INVALID_ARG).
 * The key "general.alignment" is owned by the writer: gguf_writer_add_u32 of it is the same as
 * gguf_writer_set_alignment, any other type is INVALID_ARG; it is written first when not 32.
 * add_* return NX_STATUS_OK, INVALID_ARG (NULL/empty/too long/duplicate key or name, bad type,
 * size mismatch; the writer is unchanged) or NOMEM. An invalid alignment (0, not a power of two,
 * > 2^31) makes gguf_writer_write fail with INVALID_ARG. Bool array elements must be 0 or 1.
 * gguf_writer_init returns NULL on out of memory. A writer is used by one thread at a time.
 */
struct gguf_writer;
struct gguf_writer *gguf_writer_init(void);
void gguf_writer_free(struct gguf_writer *w);
void gguf_writer_set_alignment(struct gguf_writer *w, size_t alignment);
nx_status gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v);
nx_status gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v);
nx_status gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v);
nx_status gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v);
nx_status gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v);
nx_status gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v);
nx_status gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v);
nx_status gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v);
nx_status gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v);
nx_status gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v);
nx_status gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v);
nx_status gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v);
/* Array of scalars of elem_type (not STRING/ARRAY), n packed elements. */
nx_status gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                              const void *data, uint64_t n);
nx_status gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n);
/* ne[0] is the row length; nbytes must equal the size the type implies. */
nx_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum nx_type type,
                                 int n_dims, const int64_t *ne, const void *data, size_t nbytes);
/*
 * Write the file to path atomically (PATH.tmp.XXXXXX in the same directory, fsync, rename,
 * fsync of the directory); the file gets mode 0644. On failure path is untouched, the temporary
 * file is removed, and err names the problem: INVALID_ARG (bad alignment), IO, NOMEM. The writer
 * stays usable (write may be called again).
 */
nx_status gguf_writer_write(struct gguf_writer *w, const char *path, struct nx_err *err);

#endif
