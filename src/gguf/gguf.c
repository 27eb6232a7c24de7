/*
 * gguf.c - GGUF reader (versions 2 and 3).
 *
 * DESIGN
 * Owns: the read-only mapping of the file (or borrows a caller's buffer), the kv and tensor
 * tables, one block holding every key and tensor name NUL-terminated, the per-array offset
 * tables of string arrays, and two open-addressing hash indexes (keys, tensor names).
 *
 * Parsing is one forward pass with a bounds-checked cursor (struct rd): every read first checks
 * the bytes left, every length is compared with the bytes left before anything is allocated for
 * it, and every sum or product of file-supplied numbers is overflow-checked. Counts are also
 * bounded by the smallest encoding of one item (a kv takes at least GGUF_MIN_KV_BYTES), so a
 * hostile n_kv or array length never drives a large allocation: every allocation is at most a
 * small constant times the file size. Nested arrays are walked recursively, at most
 * GGUF_MAX_ARRAY_DEPTH deep, and only validated.
 *
 * Validation order: header, kvs (keys, types, values), duplicate keys, general.alignment, tensor
 * infos (name, dims, type, sizes, offset alignment), duplicate names, data section start,
 * tensor data ranges, overlaps. Only after all of it succeeds is the file handed out, so every
 * accessor can trust the tables: offsets stored in them are known to lie inside the file.
 *
 * Invariants after a successful open:
 *   - kv[i].val_off .. + encoded size lies in [0, size); kv[i].str_offs[j] (top-level string
 *     arrays) is the offset of element j's u64 length, and its bytes lie inside the file;
 *   - tensor data [data_offset + offset, + nbytes) lies inside the file, is aligned, and does not
 *     overlap another tensor's data;
 *   - keys and names are unique, non-empty, at most GGUF_MAX_NAME bytes, free of NUL bytes.
 * A gguf_file is immutable after open and may be read from any number of threads.
 *
 * Limitation: if another process truncates a mapped file, touching the lost pages raises
 * SIGBUS (inherent to mmap); files are expected not to change while open.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "kern/types.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the GGUF reader assumes a LE host");

#define GGUF_MIN_KV_BYTES 13     /* u64 key length + u32 type + 1 value byte */
#define GGUF_MIN_TENSOR_BYTES 32 /* u64 name length + u32 n_dims + u64 ne + u32 type + u64 off */
#define GGUF_MIN_ARRAY_BYTES 12  /* u32 element type + u64 count */
#define SHOW_MAX 96              /* bytes of a key/name quoted in a message */

struct gguf_kv {
    const char *key;           /* NUL-terminated copy in f->names (set last) */
    size_t key_off;            /* key bytes in the file */
    size_t key_len;
    enum gguf_vtype type;
    enum gguf_vtype elem_type; /* arrays only */
    size_t val_off;            /* scalar: the value; string: its bytes; array: first element */
    uint64_t n;                /* string: byte length; array: element count */
    size_t *str_offs;          /* top-level string arrays: offset of element j's u64 length */
};

struct gguf_tinfo {
    struct gguf_tensor t; /* the public view; t.name set last */
    size_t name_off;      /* name bytes in the file */
    size_t name_len;
};

struct hindex {
    int64_t *slots; /* item index or -1; capacity a power of two, at most half full */
    size_t cap;
};

struct gguf_file {
    const uint8_t *base; /* mapping or caller buffer */
    size_t size;
    bool mapped;         /* base is our mmap (munmap on close) */
    uint32_t version;
    size_t alignment;
    size_t data_offset;
    int64_t n_kv;
    struct gguf_kv *kv;         /* n_kv entries (calloc: partial tables free cleanly) */
    int64_t n_tensors;
    struct gguf_tinfo *ti;      /* n_tensors entries */
    char *names;                /* every key and name, NUL-terminated */
    struct hindex kv_index;
    struct hindex t_index;
};

/* ---- value types ---- */

static const struct {
    const char *name;
    size_t size;
} g_vtypes[GGUF_VTYPE_COUNT] = {
    [GGUF_VTYPE_U8] = {"u8", 1},       [GGUF_VTYPE_I8] = {"i8", 1},
    [GGUF_VTYPE_U16] = {"u16", 2},     [GGUF_VTYPE_I16] = {"i16", 2},
    [GGUF_VTYPE_U32] = {"u32", 4},     [GGUF_VTYPE_I32] = {"i32", 4},
    [GGUF_VTYPE_F32] = {"f32", 4},     [GGUF_VTYPE_BOOL] = {"bool", 1},
    [GGUF_VTYPE_STRING] = {"string", 0}, [GGUF_VTYPE_ARRAY] = {"array", 0},
    [GGUF_VTYPE_U64] = {"u64", 8},     [GGUF_VTYPE_I64] = {"i64", 8},
    [GGUF_VTYPE_F64] = {"f64", 8},
};

size_t gguf_vtype_size(enum gguf_vtype t) {
    return (unsigned)t < GGUF_VTYPE_COUNT ? g_vtypes[t].size : 0;
}

const char *gguf_vtype_name(enum gguf_vtype t) {
    return (unsigned)t < GGUF_VTYPE_COUNT ? g_vtypes[t].name : NULL;
}

/* ---- bounds-checked cursor ---- */

struct rd {
    const uint8_t *base;
    size_t size;
    size_t pos; /* always <= size */
};

static size_t rd_left(const struct rd *r) { return r->size - r->pos; }

static bool rd_u32(struct rd *r, uint32_t *v) {
    if (rd_left(r) < 4) return false;
    memcpy(v, r->base + r->pos, 4);
    r->pos += 4;
    return true;
}

static bool rd_u64(struct rd *r, uint64_t *v) {
    if (rd_left(r) < 8) return false;
    memcpy(v, r->base + r->pos, 8);
    r->pos += 8;
    return true;
}

/* Printable, length-limited copy of file bytes for messages. */
static const char *show(char *buf, const uint8_t *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n && k < SHOW_MAX; i++)
        buf[k++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (n > SHOW_MAX) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

static unsigned long long ull(uint64_t v) { return (unsigned long long)v; }

/* ---- hash index over keys / tensor names (FNV-1a, linear probing) ---- */

static uint64_t hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* Bytes of item i's key (which == 0) or tensor name (which == 1), in the file. */
static void item_name(const struct gguf_file *f, int which, int64_t i, const uint8_t **p,
                      size_t *n) {
    if (which == 0) {
        *p = f->base + f->kv[i].key_off;
        *n = f->kv[i].key_len;
    } else {
        *p = f->base + f->ti[i].name_off;
        *n = f->ti[i].name_len;
    }
}

/* Index of the item named s[0..n), or -1. */
static int64_t hindex_find(const struct gguf_file *f, int which, const struct hindex *h,
                           const void *s, size_t n) {
    if (!h->cap) return -1;
    size_t mask = h->cap - 1;
    for (size_t j = hash_bytes(s, n) & mask;; j = (j + 1) & mask) {
        int64_t i = h->slots[j];
        if (i < 0) return -1;
        const uint8_t *p;
        size_t len;
        item_name(f, which, i, &p, &len);
        if (len == n && memcmp(p, s, n) == 0) return i;
    }
}

/*
 * Build the index over n items; on a duplicate name sets *dup_a < *dup_b to the two indexes and
 * returns FORMAT without a message (the caller words it). NOMEM when the table cannot be made.
 */
static nx_status hindex_build(const struct gguf_file *f, int which, struct hindex *h, int64_t n,
                              int64_t *dup_a, int64_t *dup_b) {
    size_t cap = 8;
    while (cap < (size_t)n * 2) cap *= 2; /* n is bounded by the file size: no overflow */
    h->slots = nx_malloc(cap * sizeof *h->slots);
    if (!h->slots) return NX_STATUS_NOMEM;
    h->cap = cap;
    for (size_t j = 0; j < cap; j++) h->slots[j] = -1;
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p;
        size_t len;
        item_name(f, which, i, &p, &len);
        size_t j = hash_bytes(p, len) & (cap - 1);
        for (; h->slots[j] >= 0; j = (j + 1) & (cap - 1)) {
            const uint8_t *q;
            size_t qlen;
            item_name(f, which, h->slots[j], &q, &qlen);
            if (qlen == len && memcmp(p, q, len) == 0) {
                *dup_a = h->slots[j];
                *dup_b = i;
                return NX_STATUS_FORMAT;
            }
        }
        h->slots[j] = i;
    }
    return NX_STATUS_OK;
}

/* ---- parsing ---- */

/*
 * A key or tensor name at the cursor: u64 length + bytes. `what` names it for messages
 * ("kv #3 key"). Checks length against the bytes left, GGUF_MAX_NAME, emptiness and NUL bytes.
 */
static nx_status parse_name(struct rd *r, const char *what, size_t *off, size_t *len,
                            struct nx_err *err) {
    uint64_t n;
    if (!rd_u64(r, &n))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (length at offset %zu past end "
                          "of file)", what, r->pos);
    if (n > rd_left(r))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: length %llu exceeds the %zu bytes left in "
                          "the file (truncated or corrupt)", what, ull(n), rd_left(r));
    if (n == 0) return nx_err_set(err, NX_STATUS_FORMAT, "%s: empty", what);
    if (n > GGUF_MAX_NAME)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: length %llu exceeds the limit of %d bytes",
                          what, ull(n), GGUF_MAX_NAME);
    const uint8_t *p = r->base + r->pos;
    if (memchr(p, 0, (size_t)n)) {
        char sb[SHOW_MAX + 4];
        return nx_err_set(err, NX_STATUS_FORMAT, "%s '%s': contains a NUL byte", what,
                          show(sb, p, (size_t)n));
    }
    *off = r->pos;
    *len = (size_t)n;
    r->pos += (size_t)n;
    return NX_STATUS_OK;
}

/*
 * The array body at the cursor (after the ARRAY type id): u32 element type, u64 count,
 * elements. depth is this array's nesting level (1 = a kv's own array). kv is the kv to fill
 * for a top-level array (its string offset table is built), NULL for nested arrays (validated
 * and skipped). `what` names the kv in messages.
 */
static nx_status parse_array(struct rd *r, int depth, struct gguf_kv *kv, const char *what,
                             struct nx_err *err) {
    uint32_t et;
    uint64_t n;
    if (!rd_u32(r, &et))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (array element type)", what);
    if (et >= GGUF_VTYPE_COUNT)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: unknown array element type %u", what, et);
    if (!rd_u64(r, &n))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (array length)", what);
    if (kv) {
        kv->elem_type = (enum gguf_vtype)et;
        kv->n = n;
        kv->val_off = r->pos;
    }
    size_t left = rd_left(r);
    size_t esz = g_vtypes[et].size;
    size_t min_elem = esz ? esz : et == GGUF_VTYPE_STRING ? 8 : GGUF_MIN_ARRAY_BYTES;
    if (n > left / min_elem)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: array length %llu of %s exceeds the %zu "
                          "bytes left in the file", what, ull(n), g_vtypes[et].name, left);
    if (esz) {
        const uint8_t *p = r->base + r->pos;
        if (et == GGUF_VTYPE_BOOL) {
            for (uint64_t i = 0; i < n; i++)
                if (p[i] > 1)
                    return nx_err_set(err, NX_STATUS_FORMAT, "%s: bool element %llu has value "
                                      "%u (must be 0 or 1)", what, ull(i), p[i]);
        }
        r->pos += (size_t)n * esz;
        return NX_STATUS_OK;
    }
    if (et == GGUF_VTYPE_STRING) {
        if (kv && n > 0) {
            kv->str_offs = nx_malloc((size_t)n * sizeof *kv->str_offs);
            if (!kv->str_offs) return nx_err_set(err, NX_STATUS_NOMEM, "%s: out of memory", what);
        }
        for (uint64_t i = 0; i < n; i++) {
            size_t at = r->pos;
            uint64_t len;
            if (!rd_u64(r, &len))
                return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (length of string "
                                  "element %llu)", what, ull(i));
            if (len > rd_left(r))
                return nx_err_set(err, NX_STATUS_FORMAT, "%s: string element %llu length %llu "
                                  "exceeds the %zu bytes left in the file", what, ull(i),
                                  ull(len), rd_left(r));
            r->pos += (size_t)len;
            if (kv) kv->str_offs[i] = at;
        }
        return NX_STATUS_OK;
    }
    /* nested arrays */
    if (depth >= GGUF_MAX_ARRAY_DEPTH)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: arrays nested deeper than %d", what,
                          GGUF_MAX_ARRAY_DEPTH);
    for (uint64_t i = 0; i < n; i++) {
        nx_status st = parse_array(r, depth + 1, NULL, what, err);
        if (st) return st;
    }
    return NX_STATUS_OK;
}

/* One kv's value (after its type id). */
static nx_status parse_value(struct rd *r, struct gguf_kv *kv, const char *what,
                             struct nx_err *err) {
    enum gguf_vtype t = kv->type;
    if (t == GGUF_VTYPE_ARRAY) return parse_array(r, 1, kv, what, err);
    if (t == GGUF_VTYPE_STRING) {
        uint64_t len;
        if (!rd_u64(r, &len))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (string length)", what);
        if (len > rd_left(r))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: string length %llu exceeds the %zu "
                              "bytes left in the file", what, ull(len), rd_left(r));
        kv->val_off = r->pos;
        kv->n = len;
        r->pos += (size_t)len;
        return NX_STATUS_OK;
    }
    size_t sz = g_vtypes[t].size;
    if (rd_left(r) < sz)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (%s value)", what,
                          g_vtypes[t].name);
    if (t == GGUF_VTYPE_BOOL && r->base[r->pos] > 1)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: bool value %u (must be 0 or 1)", what,
                          r->base[r->pos]);
    kv->val_off = r->pos;
    r->pos += sz;
    return NX_STATUS_OK;
}

static nx_status parse_header(struct gguf_file *f, struct rd *r, uint64_t *n_tensors,
                              uint64_t *n_kv, struct nx_err *err) {
    if (rd_left(r) < 4)
        return nx_err_set(err, NX_STATUS_FORMAT, "magic: truncated (file is %zu bytes)",
                          r->size);
    const uint8_t *m = r->base;
    if (memcmp(m, "GGUF", 4) != 0) {
        if (memcmp(m, "FUGG", 4) == 0)
            return nx_err_set(err, NX_STATUS_UNSUPPORTED, "magic: byte-swapped \"FUGG\": "
                              "big-endian GGUF files are not supported");
        return nx_err_set(err, NX_STATUS_FORMAT, "bad magic 0x%02x%02x%02x%02x (expected "
                          "\"GGUF\"): not a GGUF file", m[0], m[1], m[2], m[3]);
    }
    r->pos = 4;
    uint32_t v;
    if (!rd_u32(r, &v)) return nx_err_set(err, NX_STATUS_FORMAT, "version: truncated");
    if (v == 1)
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "GGUF v1 is not supported (version 1); "
                          "convert the model to GGUF v3");
    if (v != 2 && v != 3) {
        uint32_t sw = __builtin_bswap32(v);
        if (sw >= 1 && sw <= 3)
            return nx_err_set(err, NX_STATUS_UNSUPPORTED, "version field 0x%08x is "
                              "byte-swapped (version %u): big-endian GGUF files are not "
                              "supported", v, sw);
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "GGUF version %u is not supported "
                          "(only 2 and 3)", v);
    }
    f->version = v;
    if (!rd_u64(r, n_tensors)) return nx_err_set(err, NX_STATUS_FORMAT, "n_tensors: truncated");
    if (!rd_u64(r, n_kv)) return nx_err_set(err, NX_STATUS_FORMAT, "n_kv: truncated");
    if (*n_kv > rd_left(r) / GGUF_MIN_KV_BYTES)
        return nx_err_set(err, NX_STATUS_FORMAT, "n_kv %llu is impossible: the %zu bytes left in "
                          "the file hold at most %zu kvs", ull(*n_kv), rd_left(r),
                          rd_left(r) / GGUF_MIN_KV_BYTES);
    if (*n_tensors > rd_left(r) / GGUF_MIN_TENSOR_BYTES)
        return nx_err_set(err, NX_STATUS_FORMAT, "n_tensors %llu is impossible: the %zu bytes "
                          "left in the file hold at most %zu tensor infos", ull(*n_tensors),
                          rd_left(r), rd_left(r) / GGUF_MIN_TENSOR_BYTES);
    return NX_STATUS_OK;
}

static nx_status parse_kvs(struct gguf_file *f, struct rd *r, uint64_t n_kv,
                           struct nx_err *err) {
    if (n_kv == 0) return NX_STATUS_OK;
    f->kv = nx_calloc((size_t)n_kv, sizeof *f->kv);
    if (!f->kv) return nx_err_set(err, NX_STATUS_NOMEM, "out of memory for %llu kvs", ull(n_kv));
    f->n_kv = (int64_t)n_kv; /* close() walks all entries: unparsed ones are zero */
    for (uint64_t i = 0; i < n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        char what[SHOW_MAX + 32], sb[SHOW_MAX + 4];
        snprintf(what, sizeof what, "kv #%llu key", ull(i));
        nx_status st = parse_name(r, what, &kv->key_off, &kv->key_len, err);
        if (st) return st;
        snprintf(what, sizeof what, "kv '%s'", show(sb, f->base + kv->key_off, kv->key_len));
        uint32_t t;
        if (!rd_u32(r, &t))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (value type)", what);
        if (t >= GGUF_VTYPE_COUNT)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: unknown value type %u", what, t);
        kv->type = (enum gguf_vtype)t;
        st = parse_value(r, kv, what, err);
        if (st) return st;
    }
    int64_t a = -1, b = -1;
    nx_status st = hindex_build(f, 0, &f->kv_index, f->n_kv, &a, &b);
    if (st == NX_STATUS_NOMEM) return nx_err_set(err, st, "out of memory for the key index");
    if (st) {
        char sb[SHOW_MAX + 4];
        return nx_err_set(err, st, "kv '%s': duplicate key (kv #%lld and #%lld)",
                          show(sb, f->base + f->kv[b].key_off, f->kv[b].key_len),
                          (long long)a, (long long)b);
    }
    return NX_STATUS_OK;
}

static nx_status parse_alignment(struct gguf_file *f, struct nx_err *err) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    static const char key[] = "general.alignment";
    int64_t i = hindex_find(f, 0, &f->kv_index, key, sizeof key - 1);
    if (i < 0) return NX_STATUS_OK;
    const struct gguf_kv *kv = &f->kv[i];
    if (kv->type != GGUF_VTYPE_U32)
        return nx_err_set(err, NX_STATUS_FORMAT, "kv 'general.alignment': type %s, expected u32",
                          g_vtypes[kv->type].name);
    uint32_t a;
    memcpy(&a, f->base + kv->val_off, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "kv 'general.alignment': %u is not a nonzero "
                          "power of two", a);
    f->alignment = a;
    return NX_STATUS_OK;
}

/* One tensor info: name, dims, type, sizes; the offset is checked for alignment only. */
static nx_status parse_tensor_info(struct gguf_file *f, struct rd *r, uint64_t i,
                                   struct gguf_tinfo *ti, struct nx_err *err) {
    char what[SHOW_MAX + 32], sb[SHOW_MAX + 4];
    snprintf(what, sizeof what, "tensor #%llu name", ull(i));
    nx_status st = parse_name(r, what, &ti->name_off, &ti->name_len, err);
    if (st) return st;
    snprintf(what, sizeof what, "tensor '%s'", show(sb, f->base + ti->name_off, ti->name_len));
    struct gguf_tensor *t = &ti->t;
    uint32_t nd;
    if (!rd_u32(r, &nd))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (n_dims)", what);
    if (nd < 1 || nd > 4)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: n_dims %u out of range 1..4", what, nd);
    t->n_dims = (int)nd;
    for (int d = 0; d < 4; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < nd; d++) {
        uint64_t v;
        if (!rd_u64(r, &v))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (ne[%u])", what, d);
        if (v > (uint64_t)INT64_MAX)
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: ne[%u] = %lld is negative", what, d,
                              (long long)(int64_t)v);
        t->ne[d] = (int64_t)v;
    }
    uint32_t type;
    if (!rd_u32(r, &type))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (type)", what);
    uint64_t off;
    if (!rd_u64(r, &off))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: truncated (offset)", what);
    /* element count: the product of the nonzero dims must fit in int64 (order-independent) */
    int64_t prod = 1;
    for (int d = 0; d < 4; d++) {
        if (t->ne[d] == 0) continue;
        if (__builtin_mul_overflow(prod, t->ne[d], &prod))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: element count overflows (ne = [%lld, "
                              "%lld, %lld, %lld])", what, (long long)t->ne[0],
                              (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    }
    const struct nx_type_info *info = type < (uint32_t)NX_TYPE_COUNT ? nx_type_info_get((int)type)
                                                                      : NULL;
    if (!info || info->internal)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: unknown tensor type %u", what, type);
    t->type = (enum nx_type)type;
    size_t row;
    if (!nx_row_bytes(t->type, t->ne[0], &row))
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: ne[0] = %lld is not a multiple of the "
                          "block size %lld of type %s", what, (long long)t->ne[0],
                          (long long)info->blck_size, info->name);
    size_t nbytes = row;
    for (int d = 1; d < 4; d++) {
        if (!nx_mul_size(nbytes, (size_t)t->ne[d], &nbytes))
            return nx_err_set(err, NX_STATUS_FORMAT, "%s: data size overflows", what);
    }
    t->nbytes = nbytes;
    if (off % f->alignment != 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "%s: offset %llu not aligned to %zu", what,
                          ull(off), f->alignment);
    t->offset = off;
    return NX_STATUS_OK;
}

struct span {
    uint64_t off, end;
    int64_t idx;
};

static int span_cmp(const void *a, const void *b) {
    const struct span *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Data section start, every tensor's data range, and overlaps. */
static nx_status check_data(struct gguf_file *f, size_t header_end, struct nx_err *err) {
    char sb[SHOW_MAX + 4], sb2[SHOW_MAX + 4];
    size_t data_off;
    if (!nx_add_size(header_end, f->alignment - 1, &data_off))
        return nx_err_set(err, NX_STATUS_FORMAT, "data section offset overflows");
    data_off = data_off / f->alignment * f->alignment;
    if (data_off > f->size) {
        if (f->n_tensors > 0)
            return nx_err_set(err, NX_STATUS_FORMAT, "data section: starts at %zu, past the end "
                              "of the file (size %zu; truncated)", data_off, f->size);
        data_off = f->size; /* no tensors: a file without trailing padding is fine */
    }
    f->data_offset = data_off;
    size_t data_size = f->size - data_off;
    int64_t n_spans = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tinfo *ti = &f->ti[i];
        uint64_t end;
        if (__builtin_add_overflow(ti->t.offset, (uint64_t)ti->t.nbytes, &end) ||
            end > data_size)
            return nx_err_set(err, NX_STATUS_FORMAT, "tensor '%s': data out of file range "
                              "(offset %llu + %zu bytes, data section holds %zu bytes)",
                              show(sb, f->base + ti->name_off, ti->name_len),
                              ull(ti->t.offset), ti->t.nbytes, data_size);
        ti->t.data = f->base + data_off + ti->t.offset;
        if (ti->t.nbytes) n_spans++;
    }
    if (n_spans < 2) return NX_STATUS_OK;
    struct span *sp = nx_malloc((size_t)n_spans * sizeof *sp);
    if (!sp) return nx_err_set(err, NX_STATUS_NOMEM, "out of memory for the overlap check");
    int64_t k = 0;
    for (int64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->ti[i].t;
        if (t->nbytes) sp[k++] = (struct span){t->offset, t->offset + t->nbytes, i};
    }
    qsort(sp, (size_t)n_spans, sizeof *sp, span_cmp);
    nx_status st = NX_STATUS_OK;
    int64_t far = 0; /* span with the largest end so far */
    for (k = 1; k < n_spans; k++) {
        if (sp[k].off < sp[far].end) {
            const struct gguf_tinfo *a = &f->ti[sp[far].idx], *b = &f->ti[sp[k].idx];
            st = nx_err_set(err, NX_STATUS_FORMAT, "tensor '%s': data [%llu, %llu) overlaps "
                            "tensor '%s' [%llu, %llu)",
                            show(sb, f->base + b->name_off, b->name_len), ull(sp[k].off),
                            ull(sp[k].end), show(sb2, f->base + a->name_off, a->name_len),
                            ull(sp[far].off), ull(sp[far].end));
            break;
        }
        if (sp[k].end > sp[far].end) far = k;
    }
    nx_free(sp);
    return st;
}

static nx_status parse_tensors(struct gguf_file *f, struct rd *r, uint64_t n_tensors,
                               struct nx_err *err) {
    if (n_tensors > rd_left(r) / GGUF_MIN_TENSOR_BYTES)
        return nx_err_set(err, NX_STATUS_FORMAT, "n_tensors %llu is impossible: the %zu bytes "
                          "left after the metadata hold at most %zu tensor infos",
                          ull(n_tensors), rd_left(r), rd_left(r) / GGUF_MIN_TENSOR_BYTES);
    if (n_tensors == 0) return NX_STATUS_OK;
    f->ti = nx_calloc((size_t)n_tensors, sizeof *f->ti);
    if (!f->ti)
        return nx_err_set(err, NX_STATUS_NOMEM, "out of memory for %llu tensor infos",
                          ull(n_tensors));
    f->n_tensors = (int64_t)n_tensors;
    for (uint64_t i = 0; i < n_tensors; i++) {
        nx_status st = parse_tensor_info(f, r, i, &f->ti[i], err);
        if (st) return st;
    }
    int64_t a = -1, b = -1;
    nx_status st = hindex_build(f, 1, &f->t_index, f->n_tensors, &a, &b);
    if (st == NX_STATUS_NOMEM) return nx_err_set(err, st, "out of memory for the tensor index");
    if (st) {
        char sb[SHOW_MAX + 4];
        return nx_err_set(err, st, "tensor '%s': duplicate tensor name (tensors #%lld and "
                          "#%lld)", show(sb, f->base + f->ti[b].name_off, f->ti[b].name_len),
                          (long long)a, (long long)b);
    }
    return NX_STATUS_OK;
}

/* Copy every key and name, NUL-terminated, into one block. */
static nx_status copy_names(struct gguf_file *f, struct nx_err *err) {
    size_t total = 0; /* bounded by the file size plus the item counts: cannot overflow */
    for (int64_t i = 0; i < f->n_kv; i++) total += f->kv[i].key_len + 1;
    for (int64_t i = 0; i < f->n_tensors; i++) total += f->ti[i].name_len + 1;
    if (total == 0) return NX_STATUS_OK;
    f->names = nx_malloc(total);
    if (!f->names) return nx_err_set(err, NX_STATUS_NOMEM, "out of memory for names");
    char *p = f->names;
    for (int64_t i = 0; i < f->n_kv; i++) {
        memcpy(p, f->base + f->kv[i].key_off, f->kv[i].key_len);
        p[f->kv[i].key_len] = '\0';
        f->kv[i].key = p;
        p += f->kv[i].key_len + 1;
    }
    for (int64_t i = 0; i < f->n_tensors; i++) {
        memcpy(p, f->base + f->ti[i].name_off, f->ti[i].name_len);
        p[f->ti[i].name_len] = '\0';
        f->ti[i].t.name = p;
        p += f->ti[i].name_len + 1;
    }
    return NX_STATUS_OK;
}

static nx_status parse_all(struct gguf_file *f, struct nx_err *err) {
    struct rd r = {f->base, f->size, 0};
    uint64_t n_tensors = 0, n_kv = 0;
    nx_status st = parse_header(f, &r, &n_tensors, &n_kv, err);
    if (!st) st = parse_kvs(f, &r, n_kv, err);
    if (!st) st = parse_alignment(f, err);
    if (!st) st = parse_tensors(f, &r, n_tensors, err);
    if (!st) st = check_data(f, r.pos, err);
    if (!st) st = copy_names(f, err);
    return st;
}

/* Takes ownership of a mapping (mapped) or borrows a buffer; on failure releases the mapping. */
static nx_status open_common(const void *buf, size_t size, bool mapped, struct gguf_file **out,
                             struct nx_err *err) {
    struct gguf_file *f = nx_calloc(1, sizeof *f);
    if (!f) {
        if (mapped) munmap((void *)buf, size);
        return nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
    }
    f->base = buf;
    f->size = size;
    f->mapped = mapped;
    nx_status st = parse_all(f, err);
    if (st) {
        gguf_close(f);
        return st;
    }
    *out = f;
    return NX_STATUS_OK;
}

nx_status gguf_open_buffer(const void *buf, size_t size, struct gguf_file **out,
                           struct nx_err *err) {
    if (!out) return nx_err_set(err, NX_STATUS_INVALID_ARG, "gguf_open_buffer: out is NULL");
    *out = NULL;
    if (!buf && size) return nx_err_set(err, NX_STATUS_INVALID_ARG, "gguf_open_buffer: NULL buf");
    if (size < 4) /* also keeps NULL + 0 out of the parser */
        return nx_err_set(err, NX_STATUS_FORMAT, "magic: truncated (file is %zu bytes)", size);
    return open_common(buf, size, false, out, err);
}

nx_status gguf_open(const char *path, struct gguf_file **out, struct nx_err *err) {
    if (!out) return nx_err_set(err, NX_STATUS_INVALID_ARG, "gguf_open: out is NULL");
    *out = NULL;
    if (!path) return nx_err_set(err, NX_STATUS_INVALID_ARG, "gguf_open: path is NULL");
    char eb[128];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nx_err_set(err, NX_STATUS_IO, "cannot open '%s': %s", path,
                          strerror_r(errno, eb, sizeof eb));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        nx_status st = nx_err_set(err, NX_STATUS_IO, "cannot stat '%s': %s", path,
                                  strerror_r(errno, eb, sizeof eb));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return nx_err_set(err, NX_STATUS_IO, "'%s' is not a regular file", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return nx_err_set(err, NX_STATUS_UNSUPPORTED, "'%s' is too large to map", path);
    }
    size_t size = (size_t)sb.st_size;
    if (size < 4) {
        close(fd);
        return nx_err_set(err, NX_STATUS_FORMAT, "magic: truncated (file is %zu bytes)", size);
    }
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (m == MAP_FAILED)
        return nx_err_set(err, NX_STATUS_IO, "cannot map '%s': %s", path,
                          strerror_r(map_errno, eb, sizeof eb));
    return open_common(m, size, true, out, err);
}

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    for (int64_t i = 0; i < f->n_kv; i++) nx_free(f->kv[i].str_offs);
    nx_free(f->kv);
    nx_free(f->ti);
    nx_free(f->names);
    nx_free(f->kv_index.slots);
    nx_free(f->t_index.slots);
    if (f->mapped) munmap((void *)f->base, f->size);
    nx_free(f);
}

/* ---- file-level accessors ---- */

uint32_t gguf_version(const struct gguf_file *f) { return f->version; }
size_t gguf_alignment(const struct gguf_file *f) { return f->alignment; }
size_t gguf_file_size(const struct gguf_file *f) { return f->size; }
size_t gguf_data_offset(const struct gguf_file *f) { return f->data_offset; }

/* ---- metadata ---- */

int64_t gguf_n_kv(const struct gguf_file *f) { return f->n_kv; }

const char *gguf_kv_key(const struct gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_kv ? f->kv[i].key : NULL;
}

enum gguf_vtype gguf_kv_type(const struct gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_kv ? f->kv[i].type : GGUF_VTYPE_COUNT;
}

int64_t gguf_find_key(const struct gguf_file *f, const char *key) {
    if (!key) return -1;
    return hindex_find(f, 0, &f->kv_index, key, strlen(key));
}

static const struct gguf_kv *kv_get(const struct gguf_file *f, const char *key) {
    int64_t i = gguf_find_key(f, key);
    return i < 0 ? NULL : &f->kv[i];
}

/* A numeric value decoded from its file bytes. */
struct num {
    int kind; /* 0 unsigned (u), 1 signed (i), 2 float (d), -1 not numeric */
    uint64_t u;
    int64_t i;
    double d;
};

static struct num num_read(enum gguf_vtype t, const uint8_t *p) {
    struct num n = {-1, 0, 0, 0.0};
    switch (t) {
    case GGUF_VTYPE_U8: n.kind = 0; n.u = p[0]; break;
    case GGUF_VTYPE_I8: n.kind = 1; n.i = (int8_t)p[0]; break;
    case GGUF_VTYPE_U16: { uint16_t v; memcpy(&v, p, 2); n.kind = 0; n.u = v; break; }
    case GGUF_VTYPE_I16: { int16_t v; memcpy(&v, p, 2); n.kind = 1; n.i = v; break; }
    case GGUF_VTYPE_U32: { uint32_t v; memcpy(&v, p, 4); n.kind = 0; n.u = v; break; }
    case GGUF_VTYPE_I32: { int32_t v; memcpy(&v, p, 4); n.kind = 1; n.i = v; break; }
    case GGUF_VTYPE_U64: { uint64_t v; memcpy(&v, p, 8); n.kind = 0; n.u = v; break; }
    case GGUF_VTYPE_I64: { int64_t v; memcpy(&v, p, 8); n.kind = 1; n.i = v; break; }
    case GGUF_VTYPE_F32: { float v; memcpy(&v, p, 4); n.kind = 2; n.d = v; break; }
    case GGUF_VTYPE_F64: { double v; memcpy(&v, p, 8); n.kind = 2; n.d = v; break; }
    default: break;
    }
    return n;
}

/* Integer value of n within [lo, hi] (lo <= 0 <= hi); false for floats and out-of-range. */
static bool num_int(struct num n, int64_t lo, uint64_t hi, bool *neg, uint64_t *mag) {
    if (n.kind == 0) {
        if (n.u > hi) return false;
        *neg = false;
        *mag = n.u;
        return true;
    }
    if (n.kind == 1) {
        if (n.i < lo) return false;
        if (n.i >= 0 && (uint64_t)n.i > hi) return false;
        *neg = n.i < 0;
        *mag = n.i < 0 ? (uint64_t)0 - (uint64_t)n.i : (uint64_t)n.i;
        return true;
    }
    return false;
}

static bool kv_num(const struct gguf_file *f, const char *key, struct num *n) {
    const struct gguf_kv *kv = kv_get(f, key);
    if (!kv) return false;
    *n = num_read(kv->type, f->base + kv->val_off);
    return n->kind >= 0;
}

bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out) {
    struct num n;
    bool neg;
    uint64_t m;
    if (!kv_num(f, key, &n) || !num_int(n, 0, UINT32_MAX, &neg, &m)) return false;
    if (out) *out = (uint32_t)m;
    return true;
}

bool gguf_get_i32(const struct gguf_file *f, const char *key, int32_t *out) {
    struct num n;
    bool neg;
    uint64_t m;
    if (!kv_num(f, key, &n) || !num_int(n, INT32_MIN, INT32_MAX, &neg, &m)) return false;
    if (out) *out = neg ? (int32_t)(-(int64_t)m) : (int32_t)m;
    return true;
}

bool gguf_get_u64(const struct gguf_file *f, const char *key, uint64_t *out) {
    struct num n;
    bool neg;
    uint64_t m;
    if (!kv_num(f, key, &n) || !num_int(n, 0, UINT64_MAX, &neg, &m)) return false;
    if (out) *out = m;
    return true;
}

bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out) {
    struct num n;
    if (!kv_num(f, key, &n) || n.kind != 2) return false;
    if (isfinite(n.d) && fabs(n.d) > FLT_MAX) return false; /* f64 beyond the f32 range */
    if (out) *out = (float)n.d;
    return true;
}

bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out) {
    const struct gguf_kv *kv = kv_get(f, key);
    if (!kv || kv->type != GGUF_VTYPE_BOOL) return false;
    if (out) *out = f->base[kv->val_off] != 0;
    return true;
}

bool gguf_get_str(const struct gguf_file *f, const char *key, const char **s, size_t *len) {
    const struct gguf_kv *kv = kv_get(f, key);
    if (!kv || kv->type != GGUF_VTYPE_STRING) return false;
    if (s) *s = (const char *)f->base + kv->val_off;
    if (len) *len = (size_t)kv->n;
    return true;
}

/* ---- arrays ---- */

bool gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype *elem_type,
                  uint64_t *n, const void **data) {
    const struct gguf_kv *kv = kv_get(f, key);
    if (!kv || kv->type != GGUF_VTYPE_ARRAY) return false;
    if (elem_type) *elem_type = kv->elem_type;
    if (n) *n = kv->n;
    if (data) *data = g_vtypes[kv->elem_type].size ? f->base + kv->val_off : NULL;
    return true;
}

bool gguf_arr_str(const struct gguf_file *f, const char *key, uint64_t i, const char **s,
                  size_t *len) {
    const struct gguf_kv *kv = kv_get(f, key);
    if (!kv || kv->type != GGUF_VTYPE_ARRAY || kv->elem_type != GGUF_VTYPE_STRING || i >= kv->n)
        return false;
    uint64_t l;
    memcpy(&l, f->base + kv->str_offs[i], 8);
    if (s) *s = (const char *)f->base + kv->str_offs[i] + 8;
    if (len) *len = (size_t)l;
    return true;
}

/* Element i of a numeric array, or kind -1. */
static struct num arr_num(const struct gguf_file *f, const char *key, uint64_t i) {
    struct num bad = {-1, 0, 0, 0.0};
    const struct gguf_kv *kv = kv_get(f, key);
    if (!kv || kv->type != GGUF_VTYPE_ARRAY || i >= kv->n) return bad;
    size_t esz = g_vtypes[kv->elem_type].size;
    if (!esz) return bad;
    return num_read(kv->elem_type, f->base + kv->val_off + (size_t)i * esz);
}

bool gguf_arr_f64(const struct gguf_file *f, const char *key, uint64_t i, double *out) {
    struct num n = arr_num(f, key, i);
    double d;
    switch (n.kind) {
    case 0: d = (double)n.u; break;
    case 1: d = (double)n.i; break;
    case 2: d = n.d; break;
    default: return false;
    }
    if (out) *out = d;
    return true;
}

bool gguf_arr_i64(const struct gguf_file *f, const char *key, uint64_t i, int64_t *out) {
    struct num n = arr_num(f, key, i);
    int64_t v;
    switch (n.kind) {
    case 0:
        if (n.u > (uint64_t)INT64_MAX) return false;
        v = (int64_t)n.u;
        break;
    case 1: v = n.i; break;
    case 2: /* integral floats only; 2^63 itself is out of range */
        if (!isfinite(n.d) || n.d != floor(n.d) || n.d < -9223372036854775808.0 ||
            n.d >= 9223372036854775808.0)
            return false;
        v = (int64_t)n.d;
        break;
    default: return false;
    }
    if (out) *out = v;
    return true;
}

/* ---- tensors ---- */

int64_t gguf_n_tensors(const struct gguf_file *f) { return f->n_tensors; }

const struct gguf_tensor *gguf_tensor(const struct gguf_file *f, int64_t i) {
    return i >= 0 && i < f->n_tensors ? &f->ti[i].t : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    if (!name) return NULL;
    int64_t i = hindex_find(f, 1, &f->t_index, name, strlen(name));
    return i < 0 ? NULL : &f->ti[i].t;
}
