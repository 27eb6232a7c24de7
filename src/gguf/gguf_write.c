/*
 * gguf_write.c - GGUF v3 writer.
 *
 * DESIGN
 * Owns: copies of every key, encoded value, tensor name and tensor data added to the writer.
 * Each kv is kept already encoded (one allocation: "key\0" followed by the value bytes exactly
 * as they go to the file after the u32 type), so writing is a straight copy. Tensors keep their
 * own data copy; their offsets are assigned at write time.
 *
 * Invariants: keys and tensor names are unique, non-empty, at most GGUF_MAX_NAME bytes (C
 * strings, so free of NUL); every stored tensor's nbytes equals what its type and ne imply;
 * every add_* either fully succeeds or leaves the writer unchanged. "general.alignment" is
 * never stored as a kv: it mirrors w->alignment and is emitted first when it is not 32, so the
 * file always agrees with the layout used for the data.
 *
 * Layout written: header, kvs in insertion order, tensor infos in insertion order, zero padding
 * to the alignment, then each tensor's data at its aligned offset, each followed by zero
 * padding to the alignment (so the file size is a multiple of it, as ggml's writers do).
 *
 * Atomicity: the bytes go to PATH.tmp.XXXXXX (mkostemp, same directory), which is fsynced,
 * renamed over PATH, and then the directory is fsynced. Any failure unlinks the temporary file,
 * so readers see either the old file or the complete new one.
 *
 * Key and name uniqueness checks are linear scans: fine for the hundreds of kvs and tensors
 * of a model (the writer is used by tools and tests, not in a hot path).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/fileio.h"
#include "gguf/gguf.h"
#include "kern/types.h"

#define WBUF_SIZE 65536

struct wkv {
    char *key;          /* "key\0" followed by the encoded value (one allocation) */
    size_t key_len;
    enum gguf_vtype type;
    const uint8_t *val; /* inside the key allocation */
    size_t val_len;
};

struct wtensor {
    char *name;
    enum nx_type type;
    int n_dims;
    int64_t ne[4];
    uint8_t *data; /* copy; NULL when nbytes == 0 */
    size_t nbytes;
};

struct gguf_writer {
    size_t alignment; /* as set; validated at write time */
    struct wkv *kv;
    size_t n_kv, cap_kv;
    struct wtensor *t;
    size_t n_t, cap_t;
};

static const char g_align_key[] = "general.alignment";

struct gguf_writer *gguf_writer_init(void) {
    struct gguf_writer *w = nx_calloc(1, sizeof *w);
    if (w) w->alignment = GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) nx_free(w->kv[i].key);
    for (size_t i = 0; i < w->n_t; i++) {
        nx_free(w->t[i].name);
        nx_free(w->t[i].data);
    }
    nx_free(w->kv);
    nx_free(w->t);
    nx_free(w);
}

void gguf_writer_set_alignment(struct gguf_writer *w, size_t alignment) {
    if (w) w->alignment = alignment;
}

static bool alignment_ok(size_t a) {
    return a != 0 && (a & (a - 1)) == 0 && a <= ((size_t)1 << 31);
}

/* A valid, not yet used key; INVALID_ARG otherwise. */
static nx_status check_key(const struct gguf_writer *w, const char *key, size_t *len) {
    if (!w || !key) return NX_STATUS_INVALID_ARG;
    size_t n = strlen(key);
    if (n == 0 || n > GGUF_MAX_NAME) return NX_STATUS_INVALID_ARG;
    if (n == sizeof g_align_key - 1 && memcmp(key, g_align_key, n) == 0)
        return NX_STATUS_INVALID_ARG;
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == n && memcmp(w->kv[i].key, key, n) == 0)
            return NX_STATUS_INVALID_ARG;
    *len = n;
    return NX_STATUS_OK;
}

/* Grow an array of elements of size esz to hold one more; false on OOM (array unchanged). */
static bool grow(void **arr, size_t *cap, size_t n, size_t esz) {
    if (n < *cap) return true;
    size_t ncap = *cap ? *cap * 2 : 16;
    size_t bytes;
    if (!nx_mul_size(ncap, esz, &bytes)) return false;
    void *p = nx_realloc(*arr, bytes);
    if (!p) return false;
    *arr = p;
    *cap = ncap;
    return true;
}

/*
 * Append a kv whose encoded value is produced by `fill` into val_len bytes (fill may be NULL
 * and `src` copied instead). All checks happen before the writer changes.
 */
static nx_status kv_add(struct gguf_writer *w, const char *key, enum gguf_vtype type,
                        size_t val_len, void (*fill)(uint8_t *dst, const void *src),
                        const void *src) {
    size_t klen, total;
    nx_status st = check_key(w, key, &klen);
    if (st) return st;
    if (!nx_add_size(klen + 1, val_len, &total)) return NX_STATUS_INVALID_ARG;
    if (!grow((void **)&w->kv, &w->cap_kv, w->n_kv, sizeof *w->kv)) return NX_STATUS_NOMEM;
    char *block = nx_malloc(total);
    if (!block) return NX_STATUS_NOMEM;
    memcpy(block, key, klen + 1);
    if (fill)
        fill((uint8_t *)block + klen + 1, src);
    else if (val_len)
        memcpy(block + klen + 1, src, val_len);
    w->kv[w->n_kv++] = (struct wkv){block, klen, type, (uint8_t *)block + klen + 1, val_len};
    return NX_STATUS_OK;
}

/* ---- scalars (little-endian host: the in-memory bytes are the file bytes) ---- */

nx_status gguf_writer_add_u8(struct gguf_writer *w, const char *key, uint8_t v) {
    return kv_add(w, key, GGUF_VTYPE_U8, 1, NULL, &v);
}
nx_status gguf_writer_add_i8(struct gguf_writer *w, const char *key, int8_t v) {
    return kv_add(w, key, GGUF_VTYPE_I8, 1, NULL, &v);
}
nx_status gguf_writer_add_u16(struct gguf_writer *w, const char *key, uint16_t v) {
    return kv_add(w, key, GGUF_VTYPE_U16, 2, NULL, &v);
}
nx_status gguf_writer_add_i16(struct gguf_writer *w, const char *key, int16_t v) {
    return kv_add(w, key, GGUF_VTYPE_I16, 2, NULL, &v);
}
nx_status gguf_writer_add_u32(struct gguf_writer *w, const char *key, uint32_t v) {
    if (w && key && strcmp(key, g_align_key) == 0) {
        if (!alignment_ok(v)) return NX_STATUS_INVALID_ARG;
        w->alignment = v;
        return NX_STATUS_OK;
    }
    return kv_add(w, key, GGUF_VTYPE_U32, 4, NULL, &v);
}
nx_status gguf_writer_add_i32(struct gguf_writer *w, const char *key, int32_t v) {
    return kv_add(w, key, GGUF_VTYPE_I32, 4, NULL, &v);
}
nx_status gguf_writer_add_f32(struct gguf_writer *w, const char *key, float v) {
    return kv_add(w, key, GGUF_VTYPE_F32, 4, NULL, &v);
}
nx_status gguf_writer_add_u64(struct gguf_writer *w, const char *key, uint64_t v) {
    return kv_add(w, key, GGUF_VTYPE_U64, 8, NULL, &v);
}
nx_status gguf_writer_add_i64(struct gguf_writer *w, const char *key, int64_t v) {
    return kv_add(w, key, GGUF_VTYPE_I64, 8, NULL, &v);
}
nx_status gguf_writer_add_f64(struct gguf_writer *w, const char *key, double v) {
    return kv_add(w, key, GGUF_VTYPE_F64, 8, NULL, &v);
}
nx_status gguf_writer_add_bool(struct gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    return kv_add(w, key, GGUF_VTYPE_BOOL, 1, NULL, &b);
}

/* ---- strings and arrays ---- */

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static void fill_str(uint8_t *dst, const void *src) {
    const char *s = src;
    size_t n = strlen(s);
    put_u64(dst, n);
    memcpy(dst + 8, s, n);
}

nx_status gguf_writer_add_str(struct gguf_writer *w, const char *key, const char *v) {
    if (!v) return NX_STATUS_INVALID_ARG;
    size_t n;
    if (!nx_add_size(strlen(v), 8, &n)) return NX_STATUS_INVALID_ARG;
    return kv_add(w, key, GGUF_VTYPE_STRING, n, fill_str, v);
}

struct arr_src {
    enum gguf_vtype et;
    const void *data;
    uint64_t n;
    size_t bytes;
};

static void fill_arr(uint8_t *dst, const void *src) {
    const struct arr_src *a = src;
    put_u32(dst, (uint32_t)a->et);
    put_u64(dst + 4, a->n);
    if (a->bytes) memcpy(dst + 12, a->data, a->bytes);
}

nx_status gguf_writer_add_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                              const void *data, uint64_t n) {
    size_t esz = gguf_vtype_size(elem_type);
    if (!esz) return NX_STATUS_INVALID_ARG; /* STRING, ARRAY, out of range */
    size_t bytes, total;
    if (n > SIZE_MAX || !nx_mul_size((size_t)n, esz, &bytes) || !nx_add_size(bytes, 12, &total))
        return NX_STATUS_INVALID_ARG;
    if (bytes && !data) return NX_STATUS_INVALID_ARG;
    if (elem_type == GGUF_VTYPE_BOOL) {
        const uint8_t *b = data;
        for (size_t i = 0; i < bytes; i++)
            if (b[i] > 1) return NX_STATUS_INVALID_ARG;
    }
    struct arr_src a = {elem_type, data, n, bytes};
    return kv_add(w, key, GGUF_VTYPE_ARRAY, total, fill_arr, &a);
}

struct arr_str_src {
    const char *const *v;
    uint64_t n;
};

static void fill_arr_str(uint8_t *dst, const void *src) {
    const struct arr_str_src *a = src;
    put_u32(dst, GGUF_VTYPE_STRING);
    put_u64(dst + 4, a->n);
    uint8_t *p = dst + 12;
    for (uint64_t i = 0; i < a->n; i++) {
        size_t len = strlen(a->v[i]);
        put_u64(p, len);
        memcpy(p + 8, a->v[i], len);
        p += 8 + len;
    }
}

nx_status gguf_writer_add_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                                  uint64_t n) {
    if (n && !v) return NX_STATUS_INVALID_ARG;
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i]) return NX_STATUS_INVALID_ARG;
        if (!nx_add_size(total, strlen(v[i]), &total) || !nx_add_size(total, 8, &total))
            return NX_STATUS_INVALID_ARG;
    }
    struct arr_str_src a = {v, n};
    return kv_add(w, key, GGUF_VTYPE_ARRAY, total, fill_arr_str, &a);
}

/* ---- tensors ---- */

nx_status gguf_writer_add_tensor(struct gguf_writer *w, const char *name, enum nx_type type,
                                 int n_dims, const int64_t *ne, const void *data, size_t nbytes) {
    if (!w || !name || !ne || n_dims < 1 || n_dims > 4) return NX_STATUS_INVALID_ARG;
    size_t len = strlen(name);
    if (len == 0 || len > GGUF_MAX_NAME) return NX_STATUS_INVALID_ARG;
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return NX_STATUS_INVALID_ARG;
    const struct nx_type_info *ti = nx_type_info_get(type);
    if (!ti || ti->internal) return NX_STATUS_INVALID_ARG;
    struct wtensor t = {NULL, type, n_dims, {1, 1, 1, 1}, NULL, nbytes};
    int64_t prod = 1;
    for (int d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return NX_STATUS_INVALID_ARG;
        t.ne[d] = ne[d];
        if (ne[d] && __builtin_mul_overflow(prod, ne[d], &prod)) return NX_STATUS_INVALID_ARG;
    }
    size_t want;
    if (!nx_row_bytes(type, t.ne[0], &want)) return NX_STATUS_INVALID_ARG;
    for (int d = 1; d < 4; d++)
        if (!nx_mul_size(want, (size_t)t.ne[d], &want)) return NX_STATUS_INVALID_ARG;
    if (want != nbytes || (nbytes && !data)) return NX_STATUS_INVALID_ARG;
    if (!grow((void **)&w->t, &w->cap_t, w->n_t, sizeof *w->t)) return NX_STATUS_NOMEM;
    t.name = nx_malloc(len + 1);
    if (!t.name) return NX_STATUS_NOMEM;
    memcpy(t.name, name, len + 1);
    if (nbytes) {
        t.data = nx_malloc(nbytes);
        if (!t.data) {
            nx_free(t.name);
            return NX_STATUS_NOMEM;
        }
        memcpy(t.data, data, nbytes);
    }
    w->t[w->n_t++] = t;
    return NX_STATUS_OK;
}

/* ---- output ---- */

struct wbuf {
    int fd;
    uint8_t *buf; /* WBUF_SIZE bytes */
    size_t n;
    int err_no;   /* first write error, 0 if none */
};

static void wb_flush(struct wbuf *b) {
    size_t done = 0;
    while (done < b->n && !b->err_no) {
        ssize_t k = nx_io_write(b->fd, b->buf + done, b->n - done);
        if (k < 0) {
            if (errno == EINTR) continue;
            b->err_no = errno;
        } else if (k == 0) {
            b->err_no = EIO;
        } else {
            done += (size_t)k;
        }
    }
    b->n = 0;
}

static void wb_put(struct wbuf *b, const void *p, size_t n) {
    const uint8_t *s = p;
    while (n && !b->err_no) {
        if (b->n == WBUF_SIZE) wb_flush(b);
        size_t k = NX_MIN(n, (size_t)WBUF_SIZE - b->n);
        memcpy(b->buf + b->n, s, k);
        b->n += k;
        s += k;
        n -= k;
    }
}

static void wb_zeros(struct wbuf *b, size_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = NX_MIN(n, sizeof zeros);
        wb_put(b, zeros, k);
        n -= k;
    }
}

static void wb_u32(struct wbuf *b, uint32_t v) { wb_put(b, &v, 4); }
static void wb_u64(struct wbuf *b, uint64_t v) { wb_put(b, &v, 8); }

static void wb_str(struct wbuf *b, const char *s, size_t n) {
    wb_u64(b, n);
    wb_put(b, s, n);
}

/* The whole file; the tensors' offsets are computed in offs (w->n_t entries). */
static void write_body(const struct gguf_writer *w, struct wbuf *b, const uint64_t *offs) {
    size_t a = w->alignment;
    bool align_kv = a != GGUF_DEFAULT_ALIGNMENT;
    uint64_t pos = 0;
    wb_put(b, "GGUF", 4);
    wb_u32(b, 3);
    wb_u64(b, w->n_t);
    wb_u64(b, w->n_kv + (align_kv ? 1 : 0));
    pos += 24;
    if (align_kv) {
        wb_str(b, g_align_key, sizeof g_align_key - 1);
        wb_u32(b, GGUF_VTYPE_U32);
        wb_u32(b, (uint32_t)a);
        pos += 8 + sizeof g_align_key - 1 + 8;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        const struct wkv *kv = &w->kv[i];
        wb_str(b, kv->key, kv->key_len);
        wb_u32(b, (uint32_t)kv->type);
        wb_put(b, kv->val, kv->val_len);
        pos += 8 + kv->key_len + 4 + kv->val_len;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        size_t len = strlen(t->name);
        wb_str(b, t->name, len);
        wb_u32(b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) wb_u64(b, (uint64_t)t->ne[d]);
        wb_u32(b, (uint32_t)t->type);
        wb_u64(b, offs[i]);
        pos += 8 + len + 4 + 8 * (uint64_t)t->n_dims + 4 + 8;
    }
    wb_zeros(b, (size_t)((a - pos % a) % a));
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        if (t->nbytes) {
            wb_flush(b); /* large data goes straight to the file */
            size_t done = 0;
            while (done < t->nbytes && !b->err_no) {
                ssize_t k = nx_io_write(b->fd, t->data + done, t->nbytes - done);
                if (k < 0 && errno == EINTR) continue;
                if (k <= 0) b->err_no = k < 0 ? errno : EIO;
                else done += (size_t)k;
            }
        }
        wb_zeros(b, (a - t->nbytes % a) % a);
    }
    wb_flush(b);
}

/* Directory part of path ("." when none) into a new string; NULL on OOM. */
static char *dir_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return nx_strdup(".");
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    char *d = nx_malloc(n + 1);
    if (d) {
        memcpy(d, path, n);
        d[n] = '\0';
    }
    return d;
}

nx_status gguf_writer_write(struct gguf_writer *w, const char *path, struct nx_err *err) {
    if (!w || !path || !*path)
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "gguf_writer_write: NULL writer or path");
    if (!alignment_ok(w->alignment))
        return nx_err_set(err, NX_STATUS_INVALID_ARG, "general.alignment: %zu is not a power of "
                          "two in 1..2^31", w->alignment);
    size_t a = w->alignment;
    /* tensor offsets; the running total is overflow-checked */
    uint64_t *offs = NULL;
    if (w->n_t) {
        offs = nx_malloc(w->n_t * sizeof *offs);
        if (!offs) return nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
    }
    size_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        offs[i] = off;
        size_t pad = (a - w->t[i].nbytes % a) % a;
        if (!nx_add_size(off, w->t[i].nbytes, &off) || !nx_add_size(off, pad, &off)) {
            nx_free(offs);
            return nx_err_set(err, NX_STATUS_INVALID_ARG, "tensor '%s': data offset overflows",
                              w->t[i].name);
        }
    }
    size_t plen = strlen(path);
    char *tmp = nx_malloc(plen + sizeof ".tmp.XXXXXX");
    char *dir = dir_of(path);
    struct wbuf b = {-1, nx_malloc(WBUF_SIZE), 0, 0};
    if (!tmp || !dir || !b.buf) {
        nx_free(offs);
        nx_free(tmp);
        nx_free(dir);
        nx_free(b.buf);
        return nx_err_set(err, NX_STATUS_NOMEM, "out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");

    nx_status st = NX_STATUS_OK;
    char eb[128];
    const char *step = "create";
    int e = 0;
    b.fd = mkostemp(tmp, O_CLOEXEC);
    if (b.fd < 0) {
        e = errno;
        st = nx_err_set(err, NX_STATUS_IO, "cannot create temporary file '%s': %s", tmp,
                        strerror_r(e, eb, sizeof eb));
        goto out;
    }
    write_body(w, &b, offs);
    if (b.err_no) {
        e = b.err_no;
        step = "write";
    } else if (fchmod(b.fd, 0644) != 0) {
        e = errno;
        step = "chmod";
    } else if (nx_io_fsync(b.fd) != 0) {
        e = errno;
        step = "fsync";
    }
    if (nx_io_close(b.fd) != 0 && !e) {
        e = errno;
        step = "close";
    }
    b.fd = -1;
    if (!e && nx_io_rename(tmp, path) != 0) {
        e = errno;
        step = "rename";
    }
    if (e) {
        unlink(tmp);
        st = nx_err_set(err, NX_STATUS_IO, "cannot write '%s' (%s of '%s'): %s", path, step, tmp,
                        strerror_r(e, eb, sizeof eb));
        goto out;
    }
    /* make the rename durable; failure here leaves a complete file, so only report it */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || nx_io_fsync(dfd) != 0) {
        e = errno;
        st = nx_err_set(err, NX_STATUS_IO, "wrote '%s' but cannot fsync directory '%s': %s",
                        path, dir, strerror_r(e, eb, sizeof eb));
    }
    if (dfd >= 0) close(dfd);
out:
    nx_free(offs);
    nx_free(tmp);
    nx_free(dir);
    nx_free(b.buf);
    return st;
}
