/*
 * nxw_import.c - trained f32 weights (NXW1) + a template GGUF -> a GGUF model.
 *
 * DESIGN
 * - The template decides everything but the numbers: its metadata is copied key by key with
 *   mkmodel_copy_kv (the writer shared with `nexus mkmodel`), except keys given as overrides,
 *   and its tensor list fixes names, shapes and order. Each tensor is taken from the NXW1 file
 *   as F32; names and shapes must match exactly, and every NXW1 tensor must be used, so a
 *   training script that drifts from the engine's layout fails here instead of loading garbage.
 * - The NXW1 file is read whole (nx_read_file) and indexed in place: every length is checked
 *   against the bytes left before it is used, so a truncated or corrupt file is a FORMAT error.
 * - Output goes through gguf_writer_write (temporary file, fsync, rename).
 */
#include "model/nxw_import.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/readfile.h"
#include "gguf/gguf.h"
#include "kern/types.h"
#include "model/mkmodel.h"

#define NXW_MAX_NAME 256 /* longest tensor name an NXW1 file may hold */

struct nxw_tensor {
    char name[NXW_MAX_NAME + 1];
    int n_dims;
    int64_t ne[4];
    const uint8_t *data; /* into the file buffer; prod(ne) f32 values */
    size_t nbytes;
    bool used;
};

static uint32_t rd_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t rd_i64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return (int64_t)v;
}

/* Index the NXW1 buffer into *out (nx_malloc'd array of *n). */
static nx_status nxw_parse(const uint8_t *b, size_t len, const char *path,
                           struct nxw_tensor **out, int *n, struct nx_err *err) {
    *out = NULL;
    *n = 0;
    if (len < 8 || memcmp(b, "NXW1", 4) != 0)
        return nx_err_set(err, NX_STATUS_FORMAT, "import: %s is not an NXW1 file", path);
    uint32_t count = rd_u32(b + 4);
    if (count == 0 || count > 1u << 20)
        return nx_err_set(err, NX_STATUS_FORMAT, "import: %s: bad tensor count %u", path, count);
    struct nxw_tensor *t = nx_calloc(count, sizeof *t);
    if (!t) return nx_err_set(err, NX_STATUS_NOMEM, "import: out of memory");
    size_t off = 8;
    nx_status st = NX_STATUS_OK;
    for (uint32_t i = 0; i < count && !st; i++) {
        if (len - off < 4) goto truncated;
        uint32_t nl = rd_u32(b + off);
        off += 4;
        if (nl == 0 || nl > NXW_MAX_NAME) {
            st = nx_err_set(err, NX_STATUS_FORMAT, "import: %s: tensor %u: bad name length %u",
                            path, i, nl);
            break;
        }
        if (len - off < nl) goto truncated;
        memcpy(t[i].name, b + off, nl);
        t[i].name[nl] = '\0';
        off += nl;
        if (strlen(t[i].name) != nl) {
            st = nx_err_set(err, NX_STATUS_FORMAT, "import: %s: tensor %u: NUL in name", path, i);
            break;
        }
        if (len - off < 4) goto truncated;
        uint32_t nd = rd_u32(b + off);
        off += 4;
        if (nd < 1 || nd > 4) {
            st = nx_err_set(err, NX_STATUS_FORMAT, "import: %s: tensor '%s': %u dims", path,
                            t[i].name, nd);
            break;
        }
        t[i].n_dims = (int)nd;
        if (len - off < 8 * (size_t)nd) goto truncated;
        uint64_t n_el = 1;
        for (uint32_t d = 0; d < 4; d++) t[i].ne[d] = 1;
        for (uint32_t d = 0; d < nd; d++) {
            int64_t e = rd_i64(b + off + 8 * d);
            if (e < 1 || e > (int64_t)1 << 32 || n_el > (UINT64_MAX >> 33)) {
                st = nx_err_set(err, NX_STATUS_FORMAT, "import: %s: tensor '%s': bad dim %lld",
                                path, t[i].name, (long long)e);
                break;
            }
            t[i].ne[d] = e;
            n_el *= (uint64_t)e;
        }
        if (st) break;
        off += 8 * (size_t)nd;
        if (n_el > (len - off) / 4) goto truncated;
        t[i].data = b + off;
        t[i].nbytes = (size_t)n_el * 4;
        off += t[i].nbytes;
        for (uint32_t j = 0; j < i; j++) {
            if (!strcmp(t[j].name, t[i].name)) {
                st = nx_err_set(err, NX_STATUS_FORMAT, "import: %s: tensor '%s' twice", path,
                                t[i].name);
                break;
            }
        }
        continue;
    truncated:
        st = nx_err_set(err, NX_STATUS_FORMAT, "import: %s: truncated at tensor %u", path, i);
    }
    if (!st && off != len)
        st = nx_err_set(err, NX_STATUS_FORMAT, "import: %s: %zu trailing bytes", path, len - off);
    if (st) {
        nx_free(t);
        return st;
    }
    *out = t;
    *n = (int)count;
    return NX_STATUS_OK;
}

/* Length of the key of "KEY=TYPE:VALUE", or 0 when there is no '='. */
static size_t set_key_len(const char *spec) {
    const char *eq = strchr(spec, '=');
    return eq ? (size_t)(eq - spec) : 0;
}

static nx_status add_override(struct gguf_writer *w, const char *spec, struct nx_err *err) {
    size_t kl = set_key_len(spec);
    const char *ty = spec + kl + 1;
    const char *colon = kl ? strchr(ty, ':') : NULL;
    if (!kl || kl > GGUF_MAX_NAME || !colon)
        return nx_err_set(err, NX_STATUS_INVALID_ARG,
                          "import: bad --set '%s' (KEY=TYPE:VALUE, TYPE u32 i32 f32 bool str)",
                          spec);
    char key[GGUF_MAX_NAME + 1];
    memcpy(key, spec, kl);
    key[kl] = '\0';
    const char *v = colon + 1;
    size_t tl = (size_t)(colon - ty);
    char *end = NULL;
    errno = 0;
    nx_status st;
    if (tl == 3 && !strncmp(ty, "str", 3)) {
        st = gguf_writer_add_str(w, key, v);
    } else if (tl == 4 && !strncmp(ty, "bool", 4)) {
        if (strcmp(v, "true") && strcmp(v, "false")) goto bad;
        st = gguf_writer_add_bool(w, key, !strcmp(v, "true"));
    } else if (tl == 3 && !strncmp(ty, "f32", 3)) {
        float f = strtof(v, &end);
        if (end == v || *end || errno) goto bad;
        st = gguf_writer_add_f32(w, key, f);
    } else if (tl == 3 && (!strncmp(ty, "u32", 3) || !strncmp(ty, "i32", 3))) {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno) goto bad;
        if (ty[0] == 'u') {
            if (x < 0 || x > UINT32_MAX) goto bad;
            st = gguf_writer_add_u32(w, key, (uint32_t)x);
        } else {
            if (x < INT32_MIN || x > INT32_MAX) goto bad;
            st = gguf_writer_add_i32(w, key, (int32_t)x);
        }
    } else {
        goto bad;
    }
    if (st) return nx_err_set(err, st, "import: cannot add key '%s'", key);
    return NX_STATUS_OK;
bad:
    return nx_err_set(err, NX_STATUS_INVALID_ARG, "import: bad value in --set '%s'", spec);
}

static bool is_overridden(const char *key, const struct import_set *sets, int n_sets) {
    for (int i = 0; i < n_sets; i++) {
        size_t kl = set_key_len(sets[i].spec);
        if (kl && strlen(key) == kl && !strncmp(key, sets[i].spec, kl)) return true;
    }
    return false;
}

nx_status import_nxw(const char *weights, const char *like, const char *out,
                     const struct import_set *sets, int n_sets, struct nx_err *err) {
    char ebuf[256];
    size_t len = 0;
    uint8_t *buf = (uint8_t *)nx_read_file(weights, NX_READ_FILE_MAX, &len, ebuf, sizeof ebuf);
    if (!buf) return nx_err_set(err, NX_STATUS_IO, "import: %s", ebuf);
    struct nxw_tensor *t = NULL;
    int nt = 0;
    struct gguf_file *f = NULL;
    struct gguf_writer *w = NULL;
    nx_status st = nxw_parse(buf, len, weights, &t, &nt, err);
    if (!st) st = gguf_open(like, &f, err);
    if (!st && !(w = gguf_writer_init())) st = nx_err_set(err, NX_STATUS_NOMEM, "import: out of memory");
    if (!st) gguf_writer_set_alignment(w, gguf_alignment(f));
    for (int64_t i = 0; !st && i < gguf_n_kv(f); i++) {
        const char *key = gguf_kv_key(f, i);
        if (!strcmp(key, "general.alignment") || is_overridden(key, sets, n_sets)) continue;
        st = mkmodel_copy_kv(w, f, i, err);
    }
    for (int i = 0; !st && i < n_sets; i++) st = add_override(w, sets[i].spec, err);
    for (int64_t i = 0; !st && i < gguf_n_tensors(f); i++) {
        const struct gguf_tensor *gt = gguf_tensor(f, i);
        struct nxw_tensor *s = NULL;
        for (int j = 0; j < nt && !s; j++)
            if (!strcmp(t[j].name, gt->name)) s = &t[j];
        if (!s) {
            st = nx_err_set(err, NX_STATUS_INVALID_ARG, "import: %s lacks tensor '%s'", weights,
                            gt->name);
            break;
        }
        bool same = s->n_dims == gt->n_dims;
        for (int d = 0; d < 4 && same; d++) same = s->ne[d] == gt->ne[d];
        if (!same) {
            st = nx_err_set(err, NX_STATUS_INVALID_ARG,
                            "import: tensor '%s': shape [%lld %lld %lld %lld] in %s, "
                            "[%lld %lld %lld %lld] in %s", gt->name, (long long)s->ne[0],
                            (long long)s->ne[1], (long long)s->ne[2], (long long)s->ne[3],
                            weights, (long long)gt->ne[0], (long long)gt->ne[1],
                            (long long)gt->ne[2], (long long)gt->ne[3], like);
            break;
        }
        s->used = true;
        st = gguf_writer_add_tensor(w, gt->name, NX_TYPE_F32, s->n_dims, s->ne, s->data,
                                    s->nbytes);
        if (st) nx_err_set(err, st, "import: cannot add tensor '%s'", gt->name);
    }
    for (int j = 0; !st && j < nt; j++) {
        if (!t[j].used)
            st = nx_err_set(err, NX_STATUS_INVALID_ARG, "import: template %s has no tensor '%s'",
                            like, t[j].name);
    }
    if (!st) st = gguf_writer_write(w, out, err);
    gguf_writer_free(w);
    gguf_close(f);
    nx_free(t);
    nx_free(buf);
    return st;
}

