/*
 * safetensors.c - safetensors reader (format and checks: safetensors.h).
 *
 * DESIGN
 * - The file is mapped read-only (st_open) or borrowed (st_open_mem); the header is parsed with
 *   jansson (JSON_REJECT_DUPLICATES), tensors are kept in header order.
 * - Validation happens once at open, so every st_tensor handed out is known to lie inside the
 *   buffer with a size that matches its dtype and shape.
 */
#include "route/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/nx_base.h"
#include "kern/quant.h"

#define ST_MAX_HEADER (100u * 1024u * 1024u)

struct st_file {
    void *map;          /* mapping (NULL for st_open_mem) */
    size_t map_len;
    const uint8_t *buf; /* whole file */
    size_t len;
    int n;
    struct st_tensor *t;
    json_t *meta; /* "__metadata__" object or NULL (owned reference) */
};

static const struct {
    const char *name;
    size_t size;
} st_types[ST_DTYPE_COUNT] = {
    [ST_BOOL] = {"BOOL", 1}, [ST_U8] = {"U8", 1},         [ST_I8] = {"I8", 1},
    [ST_F8_E5M2] = {"F8_E5M2", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_I16] = {"I16", 2},
    [ST_U16] = {"U16", 2},   [ST_F16] = {"F16", 2},       [ST_BF16] = {"BF16", 2},
    [ST_I32] = {"I32", 4},   [ST_U32] = {"U32", 4},       [ST_F32] = {"F32", 4},
    [ST_F64] = {"F64", 8},   [ST_I64] = {"I64", 8},       [ST_U64] = {"U64", 8},
};

const char *st_dtype_name(enum st_dtype t) {
    return (unsigned)t < ST_DTYPE_COUNT ? st_types[t].name : "?";
}
size_t st_dtype_size(enum st_dtype t) { return (unsigned)t < ST_DTYPE_COUNT ? st_types[t].size : 0; }
int st_dtype_numeric(enum st_dtype t) { return t != ST_F8_E5M2 && t != ST_F8_E4M3 && t < ST_DTYPE_COUNT; }

void st_close(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) nx_free(f->t[i].name);
    nx_free(f->t);
    if (f->meta) json_decref(f->meta);
    if (f->map) munmap(f->map, f->map_len);
    nx_free(f);
}

static int cmp_offset(const void *a, const void *b) {
    const struct st_tensor *x = *(const struct st_tensor *const *)a;
    const struct st_tensor *y = *(const struct st_tensor *const *)b;
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Integer JSON value as uint64 (non-negative); 0 on failure. */
static int json_u64(const json_t *v, uint64_t *out) {
    if (!json_is_integer(v)) return 0;
    json_int_t x = json_integer_value(v);
    if (x < 0) return 0;
    *out = (uint64_t)x;
    return 1;
}

static nx_status st_parse_tensor(st_file *f, struct st_tensor *t, const char *name, json_t *obj,
                                 uint64_t data_len, char *err, size_t errlen) {
    if (!json_is_object(obj)) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT, "tensor '%s': header entry is not an object",
                       name);
    }
    t->name = nx_strdup(name);
    if (!t->name) {
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    json_t *dt = json_object_get(obj, "dtype");
    if (!json_is_string(dt)) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT,
                       "tensor '%s': missing or non-string \"dtype\"", name);
    }
    int found = -1;
    for (int k = 0; k < ST_DTYPE_COUNT; k++)
        if (strcmp(json_string_value(dt), st_types[k].name) == 0) found = k;
    if (found < 0) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT, "tensor '%s': unknown dtype '%s'", name,
                       json_string_value(dt));
    }
    t->dtype = (enum st_dtype)found;
    json_t *sh = json_object_get(obj, "shape");
    if (!json_is_array(sh)) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT, "tensor '%s': missing or non-array \"shape\"",
                       name);
    }
    if (json_array_size(sh) > ST_MAX_DIMS) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT,
                       "tensor '%s': %zu dimensions (at most %d supported)", name,
                       json_array_size(sh), ST_MAX_DIMS);
    }
    t->n_dims = (int)json_array_size(sh);
    uint64_t n_elem = 1;
    for (int d = 0; d < t->n_dims; d++) {
        uint64_t v;
        if (!json_u64(json_array_get(sh, (size_t)d), &v)) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT,
                           "tensor '%s': shape[%d] is not a non-negative integer", name, d);
        }
        t->shape[d] = (int64_t)v;
        if (__builtin_mul_overflow(n_elem, v, &n_elem)) {
            return nx_errf(err, errlen, NX_STATUS_FORMAT, "tensor '%s': element count overflows",
                           name);
        }
    }
    t->n_elem = n_elem;
    uint64_t need;
    if (__builtin_mul_overflow(n_elem, (uint64_t)st_types[t->dtype].size, &need)) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT, "tensor '%s': byte size overflows", name);
    }
    json_t *off = json_object_get(obj, "data_offsets");
    uint64_t b, e;
    if (!json_is_array(off) || json_array_size(off) != 2 || !json_u64(json_array_get(off, 0), &b) ||
        !json_u64(json_array_get(off, 1), &e)) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT,
                       "tensor '%s': \"data_offsets\" must be [begin, end] non-negative integers",
                       name);
    }
    if (b > e) {
        return nx_errf(err, errlen, NX_STATUS_FORMAT,
                       "tensor '%s': data_offsets begin %llu > end %llu", name,
                       (unsigned long long)b, (unsigned long long)e);
    }
    if (e > data_len) {
        return nx_errf(
            err, errlen, NX_STATUS_FORMAT,
            "tensor '%s': data_offsets end %llu past the data buffer (%llu bytes; file truncated?)",
            name, (unsigned long long)e, (unsigned long long)data_len);
    }
    if (e - b != need) {
        return nx_errf(
            err, errlen, NX_STATUS_FORMAT,
            "tensor '%s': %llu bytes in data_offsets but dtype %s x %llu elements needs %llu", name,
            (unsigned long long)(e - b), st_types[t->dtype].name, (unsigned long long)n_elem,
            (unsigned long long)need);
    }
    t->offset = b;
    t->nbytes = need;
    NX_UNUSED(f);
    return NX_STATUS_OK;
}

/* Validates f->buf[0, f->len) and indexes its tensors; on failure f is closed. */
static nx_status st_parse(st_file *f, st_file **out, char *err, size_t errlen) {
    nx_status st = NX_STATUS_OK;
    if (f->len < 8) {
        st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                     "safetensors: file is %zu bytes, too short for the 8-byte header length",
                     f->len);
        goto fail;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->buf[i];
    if (hlen > f->len - 8) {
        st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                     "safetensors: header length %llu past the end of the file (%zu bytes)",
                     (unsigned long long)hlen, f->len);
        goto fail;
    }
    if (hlen > ST_MAX_HEADER) {
        st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                     "safetensors: header length %llu exceeds the 100 MB limit",
                     (unsigned long long)hlen);
        goto fail;
    }
    if (hlen < 2 || f->buf[8] != '{') {
        st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                     "safetensors: header does not start with a JSON object");
        goto fail;
    }
    json_error_t je;
    json_t *root = json_loadb((const char *)f->buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                     "safetensors: header JSON invalid at line %d column %d: %s", je.line,
                     je.column, je.text);
        goto fail;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        st = nx_errf(err, errlen, NX_STATUS_FORMAT, "safetensors: header is not a JSON object");
        goto fail;
    }
    uint64_t data_len = (uint64_t)f->len - 8 - hlen;
    const uint8_t *data = f->buf + 8 + hlen;
    size_t n_entries = json_object_size(root);
    f->t = nx_calloc(n_entries ? n_entries : 1, sizeof(*f->t));
    if (!f->t) {
        json_decref(root);
        st = nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
        goto fail;
    }
    /* header order: jansson keeps insertion order for iteration */
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val) && !json_is_null(val)) {
                json_decref(root);
                st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                             "safetensors: \"__metadata__\" is not an object");
                goto fail;
            }
            if (json_is_object(val)) {
                const char *mk;
                json_t *mv;
                json_object_foreach(val, mk, mv) {
                    if (!json_is_string(mv)) {
                        st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                                     "safetensors: __metadata__ '%s' is not a string", mk);
                        json_decref(root);
                        goto fail;
                    }
                }
                f->meta = json_incref(val);
            }
            continue;
        }
        struct st_tensor *t = &f->t[f->n++];
        st = st_parse_tensor(f, t, key, val, data_len, err, errlen);
        if (st != NX_STATUS_OK) {
            json_decref(root);
            goto fail;
        }
        t->data = data + t->offset;
    }
    json_decref(root);
    /* no overlap, no hole: sorted by offset, each begins where the previous ended */
    if (f->n > 0) {
        struct st_tensor **s = nx_malloc((size_t)f->n * sizeof(*s));
        if (!s) {
            st = nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < f->n; i++) s[i] = &f->t[i];
        qsort(s, (size_t)f->n, sizeof(*s), cmp_offset);
        uint64_t pos = 0;
        for (int i = 0; i < f->n; i++) {
            if (s[i]->offset < pos) {
                st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                             "safetensors: tensor '%s' [%llu, %llu) overlaps tensor '%s'",
                             s[i]->name, (unsigned long long)s[i]->offset,
                             (unsigned long long)(s[i]->offset + s[i]->nbytes), s[i - 1]->name);
                nx_free(s);
                goto fail;
            }
            if (s[i]->offset > pos) {
                st = nx_errf(
                    err, errlen, NX_STATUS_FORMAT,
                    "safetensors: %llu unindexed bytes before tensor '%s' (holes are not allowed)",
                    (unsigned long long)(s[i]->offset - pos), s[i]->name);
                nx_free(s);
                goto fail;
            }
            pos = s[i]->offset + s[i]->nbytes;
        }
        nx_free(s);
        if (pos != data_len) {
            st = nx_errf(err, errlen, NX_STATUS_FORMAT,
                         "safetensors: tensors cover %llu of the %llu data bytes (trailing bytes)",
                         (unsigned long long)pos, (unsigned long long)data_len);
            goto fail;
        }
    } else if (data_len != 0) {
        st = nx_errf(err, errlen, NX_STATUS_FORMAT, "safetensors: no tensors but %llu data bytes",
                     (unsigned long long)data_len);
        goto fail;
    }
    *out = f;
    return NX_STATUS_OK;
fail:
    st_close(f);
    return st;
}

nx_status st_open_mem(const void *buf, size_t len, st_file **out, char *err, size_t errlen) {
    *out = NULL;
    st_file *f = nx_calloc(1, sizeof(*f));
    if (!f) return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    f->buf = buf;
    f->len = len;
    return st_parse(f, out, err, errlen);
}

nx_status st_open(const char *path, st_file **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return nx_errf(err, errlen, errno == ENOENT ? NX_STATUS_NOT_FOUND : NX_STATUS_IO,
                       "safetensors '%s': cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return nx_errf(err, errlen, NX_STATUS_IO, "safetensors '%s': not a regular file", path);
    }
    st_file *f = nx_calloc(1, sizeof(*f));
    if (!f) {
        close(fd);
        return nx_errf(err, errlen, NX_STATUS_NOMEM, "out of memory");
    }
    f->len = (size_t)sb.st_size;
    if (f->len > 0) {
        void *m = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            nx_status st = nx_errf(err, errlen, NX_STATUS_IO, "safetensors '%s': mmap failed: %s",
                                   path, strerror(errno));
            close(fd);
            nx_free(f);
            return st;
        }
        f->map = m;
        f->map_len = f->len;
        f->buf = m;
    } else {
        f->buf = (const uint8_t *)"";
    }
    close(fd);
    char e2[400];
    e2[0] = 0;
    nx_status st = st_parse(f, out, e2, sizeof e2);
    if (st != NX_STATUS_OK) nx_errf(err, errlen, st, "'%s': %s", path, e2);
    return st;
}

int st_n_tensors(const st_file *f) { return f->n; }
const struct st_tensor *st_tensor_at(const st_file *f, int i) {
    return i >= 0 && i < f->n ? &f->t[i] : NULL;
}
const struct st_tensor *st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->t[i].name, name) == 0) return &f->t[i];
    return NULL;
}
const char *st_metadata(const st_file *f, const char *key) {
    if (!f->meta) return NULL;
    json_t *v = json_object_get(f->meta, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static uint64_t rd_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

double st_get_f64(const struct st_tensor *t, uint64_t i) {
    NX_ASSERT(i < t->n_elem);
    const uint8_t *p = t->data + i * st_types[t->dtype].size;
    switch (t->dtype) {
    case ST_BOOL: return p[0] != 0;
    case ST_U8: return p[0];
    case ST_I8: return (int8_t)p[0];
    case ST_I16: return (int16_t)rd_le(p, 2);
    case ST_U16: return (uint16_t)rd_le(p, 2);
    case ST_F16: return nx_half_to_f32((nx_half)rd_le(p, 2));
    case ST_BF16: return nx_bf16_to_f32((nx_bf16)rd_le(p, 2));
    case ST_I32: return (int32_t)(uint32_t)rd_le(p, 4);
    case ST_U32: return (uint32_t)rd_le(p, 4);
    case ST_F32: {
        uint32_t u = (uint32_t)rd_le(p, 4);
        float x;
        memcpy(&x, &u, 4);
        return x;
    }
    case ST_F64: {
        uint64_t u = rd_le(p, 8);
        double x;
        memcpy(&x, &u, 8);
        return x;
    }
    case ST_I64: return (double)(int64_t)rd_le(p, 8);
    case ST_U64: return (double)rd_le(p, 8);
    default: return NAN;
    }
}

int64_t st_get_i64(const struct st_tensor *t, uint64_t i) {
    NX_ASSERT(i < t->n_elem);
    const uint8_t *p = t->data + i * st_types[t->dtype].size;
    switch (t->dtype) {
    case ST_I32: return (int32_t)(uint32_t)rd_le(p, 4);
    case ST_I64: return (int64_t)rd_le(p, 8);
    case ST_U64: {
        uint64_t u = rd_le(p, 8);
        return u > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)u;
    }
    default: {
        double d = st_get_f64(t, i);
        if (!(d > -9.2e18 && d < 9.2e18)) return d > 0 ? INT64_MAX : INT64_MIN;
        return (int64_t)d;
    }
    }
}

nx_status st_to_f32(const struct st_tensor *t, float *out, char *err, size_t errlen) {
    if (!st_dtype_numeric(t->dtype))
        return nx_errf(err, errlen, NX_STATUS_UNSUPPORTED,
                       "tensor '%s': dtype %s cannot be converted to float", t->name,
                       st_types[t->dtype].name);
    for (uint64_t i = 0; i < t->n_elem; i++) out[i] = (float)st_get_f64(t, i);
    return NX_STATUS_OK;
}
